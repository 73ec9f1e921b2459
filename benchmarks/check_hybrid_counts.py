"""Offline check of the hybrid linear-attention models (Qwen3-Next, Qwen3.5) against transformers' own classes:
their parameter counts, built on the meta device from the configs in tests/data/hybrid_configs (the counts
tests/test_hybrid_models.py holds), and what a forward's cache keeps per sequence for a Gated DeltaNet layer (the
state engine/components.py `_linear_state_bytes` counts). Run with the measuring venv (torch and transformers,
never imported by the app or the tests):

    .venv-measure/bin/python benchmarks/check_hybrid_counts.py

Output on 2026-12-05 (torch 2.13.0+cpu, transformers 5.24.0):
    qwen3-next-80b-a3b.json Qwen3NextForCausalLM 79674391296 parameters, 36 linear-attention layers
    qwen3.5-27b.json Qwen3_5ForCausalLM 26895998464 parameters, 48 linear-attention layers
      Qwen3_5ForConditionalGeneration: 460730096 vision parameters, 26895998464 others
    qwen3.5-35b-a3b.json Qwen3_5MoeForCausalLM 34660610688 parameters, 30 linear-attention layers
      Qwen3_5MoeForConditionalGeneration: 446571248 vision parameters, 34660610688 others
    cache after a bf16 forward of batch 3 (a small Qwen3NextForCausalLM: hidden 128, 2 key and 4 value heads of 16):
      layer 0 LinearAttentionLayer conv_states (3, 128, 4) torch.bfloat16
      layer 0 LinearAttentionLayer recurrent_states (3, 4, 16, 16) torch.float32
      layer 3 DynamicLayer keys (3, 2, 10, 32) torch.bfloat16
i.e. per sequence and linear layer the convolution's last `kernel` positions of its (2 x key + value)-wide input in
the model's dtype and an Hv x dk x dv state in float32 (transformers' torch fallback of the delta rule, which runs
when flash-linear-attention is not installed; its kernels' state dtype is not checked here), and no K/V.
"""
import json
from pathlib import Path

import torch
from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig
from transformers.models.qwen3_5_moe import (
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
)
from transformers.models.qwen3_next import Qwen3NextConfig, Qwen3NextForCausalLM

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "hybrid_configs"
MULTIMODAL = {"qwen3_5": (Qwen3_5Config, Qwen3_5ForConditionalGeneration),
              "qwen3_5_moe": (Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration)}
CLASSES = {"qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM), "qwen3_5_text": (Qwen3_5TextConfig, Qwen3_5ForCausalLM),
           "qwen3_5_moe_text": (Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM)}


def count(name: str) -> None:
    raw = json.loads((DATA / name).read_text())
    text = raw.get("text_config", raw)
    fields = {k: v for k, v in text.items() if k not in ("model_type", "_name_or_path", "architectures")}
    config_cls, model_cls = CLASSES[text["model_type"]]
    cfg = config_cls(**fields)
    with torch.device("meta"):
        model = model_cls(cfg)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name} {model_cls.__name__} {params} parameters, {cfg.layer_types.count('linear_attention')} "
          "linear-attention layers")
    if "vision_config" in raw:  # the multimodal model: its `visual` parameters beside the text model
        outer_cls, whole_cls = MULTIMODAL[raw["model_type"]]
        outer = outer_cls(text_config=fields, vision_config={k: v for k, v in raw["vision_config"].items()
                                                             if k != "model_type"}, tie_word_embeddings=False)
        with torch.device("meta"):
            whole = whole_cls(outer)
        visual = sum(p.numel() for n, p in whole.named_parameters() if "visual" in n)
        print(f"  {whole_cls.__name__}: {visual} vision parameters, {sum(p.numel() for p in whole.parameters()) - visual} "
              "others")


def cache() -> None:
    cfg = Qwen3NextConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=32, vocab_size=1000, linear_conv_kernel_dim=4,
                          linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                          linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                          shared_expert_intermediate_size=32)
    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 1000, (3, 10)), use_cache=True)
    print("cache after a bf16 forward of batch 3 (a small Qwen3NextForCausalLM: hidden 128, 2 key and 4 value heads "
          "of 16):")
    for i, layer in enumerate(out.past_key_values.layers):
        for key, value in vars(layer).items():
            tensors = value.items() if isinstance(value, dict) else [(None, value)]
            for _, t in tensors:
                if torch.is_tensor(t) and (i == 0 or key in ("keys",)):
                    print(f"  layer {i} {type(layer).__name__} {key} {tuple(t.shape)} {t.dtype}")


if __name__ == "__main__":
    for name in sorted(p.name for p in DATA.glob("*.json")):
        count(name)
    cache()
