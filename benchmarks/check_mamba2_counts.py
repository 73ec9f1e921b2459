"""Offline check of the Mamba2 hybrids (IBM Granite 4.0-H, NVIDIA Nemotron-H / Nemotron Nano 2, IBM Bamba) against
transformers' own classes: their parameter counts, built on the meta device from the configs in
tests/data/configs_2026 (the counts tests/test_mamba2_models.py holds), and what a forward's cache keeps per sequence
for a Mamba2 layer (the state engine/params.py `recurrent_state` counts). Run with the measuring venv (torch and
transformers, never imported by the app or the tests):

    /work/venv-measure/bin/python benchmarks/check_mamba2_counts.py

Output on 2026-12-06 (torch 2.13.0+cpu, transformers 5.24.0; the counts tests/test_mamba2_models.py MEASURED holds):
    granite-4.0-h-micro.json GraniteMoeHybridForCausalLM 3191396096 parameters, 36 Mamba2 layers
    granite-4.0-h-tiny.json GraniteMoeHybridForCausalLM 6939037248 parameters, 36 Mamba2 layers
    granite-4.0-h-small.json GraniteMoeHybridForCausalLM 32207337984 parameters, 36 Mamba2 layers
    nvidia-nemotron-nano-9b-v2.json NemotronHForCausalLM 8888227328 parameters, 27 Mamba2 layers
    bamba-9b.json BambaForCausalLM 9780235392 parameters, 29 Mamba2 layers
    falcon-h1-7b-instruct.json FalconH1ForCausalLM 7585513568 parameters, 44 Mamba2 layers
    cache after a bf16 forward of batch 3 (granitemoehybrid, DynamicCache):
      layer 0 LinearAttentionLayer conv_states (3, 320, 4) torch.bfloat16
      layer 0 LinearAttentionLayer recurrent_states (3, 8, 32, 16) torch.float32
      layer 1 DynamicLayer keys (3, 2, 10, 32) torch.bfloat16
    (nemotron_h the same; falcon_h1: LinearAttentionAndFullAttentionLayer, keys / values and both states on every layer)
i.e. per sequence and Mamba2 layer the convolution's last `kernel` positions of its conv_dim = heads x head_dim + 2 x
groups x state wide input (8 x 32 + 2 x 2 x 16 = 320) in the model's dtype and a heads x head_dim x state SSM state in
float32 (the torch path, without mamba_ssm / causal_conv1d installed).
"""
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "configs_2026"
FILES = ("granite-4.0-h-micro.json", "granite-4.0-h-tiny.json", "granite-4.0-h-small.json",
         "nvidia-nemotron-nano-9b-v2.json", "bamba-9b.json", "falcon-h1-7b-instruct.json")


def count(name: str) -> None:
    raw = json.loads((DATA / name).read_text())
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "_name_or_path", "architectures")}
    cfg = AutoConfig.for_model(raw["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    kinds = ("Mamba2Mixer", "MambaLayer", "BambaMixer", "FalconH1Mixer")
    mixers = [m for n, m in model.named_modules() if type(m).__name__.endswith(kinds)]
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
    cache("falcon_h1", num_hidden_layers=2, mamba_n_heads=8, mamba_d_head=32, mamba_d_ssm=256, mamba_n_groups=2,
          mamba_d_state=16, mamba_d_conv=4, head_dim=32)
