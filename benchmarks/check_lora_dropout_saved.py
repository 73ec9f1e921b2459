"""Offline check of what peft's LoRA dropout adds to the tensors a decoder layer saves for backward
(engine/memory.py layer_activation_bytes, `dropout`), on a tiny random Llama with real tensors on
the CPU. Run with the measuring venv (torch/transformers/peft, never imported by the app or tests):

    /work/venv-measure/bin/python benchmarks/check_lora_dropout_saved.py

peft 0.21.2 tuners/lora/layer.py Linear.forward (lines 1098-1102):
    dropout = self.lora_dropout[active_adapter]
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling
lora_dropout is nn.Identity for p = 0 and nn.Dropout(p) otherwise (update_layer, lines 255-258).
On a GPU torch's dropout is ATen's native_dropout (aten/src/ATen/native/Dropout.cpp `dropout`: the
fused kernel where `is_fused_kernel_acceptable`, i.e. a CUDA/XPU tensor and 0 < p < 1), which returns a
bool mask (cuda/Dropout.cu native_dropout_cuda -> dropout_cuda<bool>) and saves only that mask for
backward (derivatives.yaml native_dropout: result1). On the CPU `dropout` takes `_dropout` instead
(input * noise, the noise in the input's dtype, kept by mul). This check, like benchmarks/
measure_peaks.py, routes F.dropout to native_dropout so the CPU runs the GPU's op.

Per adapted module and layer it prints the bytes per token saved beyond p = 0, divided by the
module's input width, for each dtype case; and layer 0 apart (its q/k/v input needs no grad
without checkpointing: the embedding is frozen, so no mask is saved there).

Output on 2026-12-04 (torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2; h 64, q width 96, MLP 160):
    precision adapters targets      layer1 +B/token  layer0 +B/token  (p=0.1 vs p=0)
    bf16      fp32     q,v               128 (1.00 x in)        0
    bf16      fp32     o                  96 (1.00 x in)        0
    bf16      fp32     down              160 (1.00 x in)        0
    bf16      fp32     q,k,v,o,gate,up,down     576 (1.00 x in)      384
    bf16      bf16     q,v               256 (2.00 x in)      128
    bf16      bf16     o                 288 (3.00 x in)        0
    bf16      bf16     down              160 (1.00 x in)        0
    bf16      bf16     q,k,v,o,gate,up,down    1152 (2.00 x in)      960
    amp_bf16  fp32     q,v               128 (1.00 x in)        0
    amp_bf16  fp32     o                  96 (1.00 x in)        0
    amp_bf16  fp32     down              160 (1.00 x in)        0
    amp_bf16  fp32     q,k,v,o,gate,up,down     576 (1.00 x in)      384
    amp_bf16  bf16     q,v               128 (1.00 x in)        0
    amp_bf16  bf16     o                 288 (3.00 x in)        0
    amp_bf16  bf16     down              160 (1.00 x in)        0
    amp_bf16  bf16     q,k,v,o,gate,up,down     768 (1.33 x in)      576
    fp32      fp32     q,v               384 (3.00 x in)      256
    fp32      fp32     o                 480 (5.00 x in)        0
    fp32      fp32     down              160 (1.00 x in)        0
    fp32      fp32     q,k,v,o,gate,up,down    1728 (3.00 x in)     1536
tests/test_lora_dropout.py checks the engine against these figures.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_peaks import gpu_dropout  # noqa: E402  (one routing of F.dropout to the GPU's op, for every script)

gpu_dropout(torch)

H, FF, HEADS, KVH, HD = 64, 160, 4, 2, 24       # q width 96, kv width 48: every width distinct
TOK = 32
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def saved_per_layer(precision: str, adapters: str, targets: list[str], p: float, input_grads: bool) -> list[int]:
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=H, intermediate_size=FF, num_hidden_layers=3, num_attention_heads=HEADS,
                      num_key_value_heads=KVH, head_dim=HD, vocab_size=128, attn_implementation="sdpa",
                      use_cache=False)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    m = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, lora_dropout=p, target_modules=targets),
                       autocast_adapter_dtype=(adapters == "fp32"))
    if adapters == "bf16" and precision == "amp_bf16":
        # adapters in 16-bit on fp32 weights (peft keeps them in the base's fp32 otherwise): the uncast
        # path of bitsandbytes' LoRA layers under autocast (peft tuners/lora/bnb.py: no _cast_input_dtype
        # when torch.is_autocast_enabled()), which bitsandbytes' CUDA-only 4-bit layers cannot show here
        for name, prm in m.named_parameters():
            if "lora_" in name:
                prm.data = prm.data.to(torch.bfloat16)
    if input_grads:
        m.base_model.model.enable_input_require_grads()
    m.train()
    layer = [-1]
    for i, mod in enumerate(m.base_model.model.model.layers):
        mod.register_forward_pre_hook(lambda _m, _a, i=i: layer.__setitem__(0, i))
    m.base_model.model.model.norm.register_forward_pre_hook(lambda _m, _a: layer.__setitem__(0, -1))
    seen: dict[int, dict] = {}

    def pack(t):
        st = t.untyped_storage()
        seen.setdefault(layer[0], {})[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, 128, (1, TOK))
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "amp_bf16" else torch.autocast("cpu", enabled=False)
    with amp, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(input_ids=ids)
    return [sum(seen.get(i, {}).values()) for i in range(3)]


def main() -> None:
    widths = {"q_proj": H, "k_proj": H, "v_proj": H, "o_proj": HEADS * HD, "gate_proj": H, "up_proj": H,
              "down_proj": FF}
    print("precision adapters targets      layer1 +B/token  layer0 +B/token  (p=0.1 vs p=0)")
    for precision, adapters in (("bf16", "fp32"), ("bf16", "bf16"), ("amp_bf16", "fp32"), ("amp_bf16", "bf16"),
                                ("fp32", "fp32")):
        for targets in (["q_proj", "v_proj"], ["o_proj"], ["down_proj"], ALL):
            base = saved_per_layer(precision, adapters, targets, 0.0, False)
            drop = saved_per_layer(precision, adapters, targets, 0.1, False)
            d1, d0 = (drop[1] - base[1]) / TOK, (drop[0] - base[0]) / TOK
            width = sum(widths[t] for t in targets)
            print(f"{precision:9} {adapters:8} {','.join(t[:-5] for t in targets):13} {d1:7.0f} "
                  f"({d1 / width:.2f} x in)  {d0:7.0f}")


if __name__ == "__main__":
    main()
