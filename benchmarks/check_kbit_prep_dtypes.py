"""Offline check of the dtype facts behind engine/stacks.py `kbit_prep` (issue 13), on a tiny random
Llama on the CPU (bitsandbytes' 4-bit needs CUDA, so the linears are not quantized here; the facts
checked do not depend on them). Run with the measuring venv (torch/transformers/peft, never imported
by the app or the tests):

    /work/main/.venv-measure/bin/python benchmarks/check_kbit_prep_dtypes.py

Output on 2026-12-01 (transformers 5.24.0, peft 0.21.2, torch CPU):
    embed torch.float32 lm_head torch.float32 norm torch.float32
    layer input dtypes [torch.float32, torch.float32] logits torch.bfloat16
    saved tensors with a V-wide dim: [((64, 256), torch.bfloat16), ((16, 256), torch.float32), ((16, 256), torch.float32)]
i.e. prepare_model_for_kbit_training leaves embed_tokens, lm_head and the norms in fp32; the residual
stream entering every decoder layer is fp32 (checkpointed inputs 4 h bytes); under bf16 autocast
lm_head's fp32 weight is cast to a bf16 copy (h x V) that its matmul saves for backward, its output
(the logits) is bf16, and the loss keeps fp32 V-wide tensors.
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from peft import prepare_model_for_kbit_training, get_peft_model, LoraConfig
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=256, tie_word_embeddings=False)
m = LlamaForCausalLM(cfg).to(torch.bfloat16)
m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=False)
print("embed", m.model.embed_tokens.weight.dtype, "lm_head", m.lm_head.weight.dtype, "norm", m.model.norm.weight.dtype)
m = get_peft_model(m, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
seen = {}
def hook(mod, args, kwargs):
    x = args[0] if args else kwargs["hidden_states"]
    seen.setdefault("layer_inputs", []).append(x.dtype)
for layer in m.base_model.model.model.layers:
    layer.register_forward_pre_hook(hook, with_kwargs=True)
saved = []
def pack(t):
    saved.append((tuple(t.shape), t.dtype))
    return t
ids = torch.randint(0, 256, (1, 16))
with torch.autocast("cpu", dtype=torch.bfloat16):
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = m(input_ids=ids, labels=ids)
print("layer input dtypes", seen["layer_inputs"], "logits", out.logits.dtype)
print("saved tensors with a V-wide dim:", [s for s in saved if 256 in s[0]])
