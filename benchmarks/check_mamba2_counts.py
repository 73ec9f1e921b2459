"""Offline check of the Mamba2 hybrids (IBM Granite 4.0-H, NVIDIA Nemotron-H / Nemotron Nano 2, IBM Bamba) against
transformers' own classes: their parameter counts, built on the meta device from the configs in
tests/data/configs_2026 (the counts tests/test_mamba2_models.py holds), and what a forward's cache keeps per sequence
for a Mamba2 layer (the state engine/params.py `recurrent_state` counts). Run with the measuring venv (torch and
transformers, never imported by the app or the tests):

    /work/venv-measure/bin/python benchmarks/check_mamba2_counts.py

Output on 2026-12-06 (torch 2.13.0+cpu, transformers 5.24.0): see tests/test_mamba2_models.py MEASURED.
"""
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "configs_2026"
FILES = ("granite-4.0-h-micro.json", "granite-4.0-h-tiny.json", "granite-4.0-h-small.json",
         "nvidia-nemotron-nano-9b-v2.json", "bamba-9b.json")


def count(name: str) -> None:
    raw = json.loads((DATA / name).read_text())
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "_name_or_path", "architectures")}
    cfg = AutoConfig.for_model(raw["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    mixers = [m for n, m in model.named_modules() if type(m).__name__.endswith(("Mamba2Mixer", "MambaLayer", "BambaMixer"))]
    print(f"{name} {type(model).__name__} {params} parameters, {len(mixers)} Mamba2 layers")


def cache(model_type: str, **extra) -> None:
    cfg = AutoConfig.for_model(model_type, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=1000, **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 1000, (3, 10)), use_cache=True)
    print(f"cache after a bf16 forward of batch 3 ({model_type}, {type(out.past_key_values).__name__}):")
    for i, layer in enumerate(getattr(out.past_key_values, "layers", [])):
        for key, value in vars(layer).items():
            tensors = value.items() if isinstance(value, dict) else [(None, value)]
            for _, t in tensors:
                if torch.is_tensor(t) and t.numel() > 0:
                    print(f"  layer {i} {type(layer).__name__} {key} {tuple(t.shape)} {t.dtype}")


if __name__ == "__main__":
    for name in FILES:
        count(name)
    # mamba: 4 heads of 32 (intermediate 256 = 2 x 128), 2 groups of state 16, kernel 4
    cache("granitemoehybrid", num_hidden_layers=2, layer_types=["mamba", "attention"], mamba_n_heads=8, mamba_d_head=32,
          mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, num_local_experts=0,
          shared_intermediate_size=256)
    cache("nemotron_h", hybrid_override_pattern="M*-", mamba_num_heads=8, mamba_head_dim=32, n_groups=2,
          ssm_state_size=16, conv_kernel=4, head_dim=32)
