"""Offline check of the Mamba2 hybrids (IBM Granite 4.0-H, NVIDIA Nemotron-H / Nemotron Nano 2 / Nemotron 3 Nano, IBM
Bamba) against transformers' own classes: their parameter counts, built on the meta device from the configs in
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
    nvidia-nemotron-3-nano-30b-a3b.json NemotronHForCausalLM 31577937344 parameters, 23 Mamba2 layers
      23 NemotronHMoE blocks, routed experts 29374808064 parameters; active (the other parameters and 6 of 128
      experts) 3580073408
    NEMOTRON_MIXED NemotronHForCausalLM 316640 parameters, 2 Mamba2 layers
      2 NemotronHMoE blocks, routed experts 92160 parameters; active (the other parameters and 2 of 6 experts) 255200
    cache after a bf16 forward of batch 3 (granitemoehybrid, DynamicCache):
      layer 0 LinearAttentionLayer conv_states (3, 320, 4) torch.bfloat16
      layer 0 LinearAttentionLayer recurrent_states (3, 8, 32, 16) torch.float32
      layer 1 DynamicLayer keys (3, 2, 10, 32) torch.bfloat16
    (nemotron_h the same; falcon_h1: LinearAttentionAndFullAttentionLayer, keys / values and both states on every layer)
i.e. per sequence and Mamba2 layer the convolution's last `kernel` positions of its conv_dim = heads x head_dim + 2 x
groups x state wide input (8 x 32 + 2 x 2 x 16 = 320) in the model's dtype and a heads x head_dim x state SSM state in
float32 (the torch path, without mamba_ssm / causal_conv1d installed).

    /work/venv-measure/bin/python benchmarks/check_mamba2_counts.py --prefill

fits one Mamba2 mixer's prefill per token (engine/components.py MAMBA_PREFILL_COEF); output on 2026-12-06:
    {'h': 2048, 'heads': 64, 'head_dim': 64, 'state': 128, 'groups': 1, 'chunk': 256}: 448,782.0 B a token
    {'h': 4096, 'heads': 64, 'head_dim': 64, 'state': 128, 'groups': 1, 'chunk': 256}: 452,878.0 B a token
    {'h': 2048, 'heads': 128, 'head_dim': 64, 'state': 128, 'groups': 1, 'chunk': 256}: 892,444.0 B a token
    {'h': 2048, 'heads': 64, 'head_dim': 128, 'state': 128, 'groups': 1, 'chunk': 256}: 596,238.0 B a token
    {'h': 2048, 'heads': 64, 'head_dim': 64, 'state': 64, 'groups': 1, 'chunk': 256}: 395,022.0 B a token
    {'h': 2048, 'heads': 64, 'head_dim': 64, 'state': 128, 'groups': 8, 'chunk': 256}: 455,950.0 B a token
    {'h': 2048, 'heads': 64, 'head_dim': 64, 'state': 128, 'groups': 1, 'chunk': 128}: 358,708.0 B a token
    fitted per token: h 2.00, H*P 33.67, H*N 11.83, chunk*H 12.16, H*P*N/chunk 4.67, G*N 8.00
held out (the fitted coefficients): h 4096 H 128 P 64 N 128 G 1 chunk 256: 896,540 B measured, 896,451 (-0.01%);
h 5120 H 128 P 80 N 128 G 8 chunk 128: 803,432, 804,086 (+0.08%); h 3072 H 24 P 128 N 256 chunk 128: 248,308, 250,358
(+0.83%); h 1536 H 48 P 64 N 128 chunk 256: 336,842, 336,809 (-0.01%).

    /work/venv-measure/bin/python benchmarks/check_mamba2_counts.py --whole [--write]

measures whole models' prefill (tests/data/measured_mamba2_prefill.csv; none of it fitted). Their param_bytes count
Granite's tied lm_head twice (to_empty gives it its own storage): the tests compare the part beside the weights.
"""
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "configs_2026"
FILES = ("granite-4.0-h-micro.json", "granite-4.0-h-tiny.json", "granite-4.0-h-small.json",
         "nvidia-nemotron-nano-9b-v2.json", "bamba-9b.json", "falcon-h1-7b-instruct.json",
         "nvidia-nemotron-3-nano-30b-a3b.json")


# every Nemotron-H block kind with experts (M, E, *, -), biases on the mixer's projections and none on its conv1d
# (tests/test_mamba2_models.py NEMOTRON_MIXED holds it and its count)
NEMOTRON_MIXED = {"model_type": "nemotron_h", "max_position_embeddings": 4096, "hidden_size": 96, "vocab_size": 500,
                  "hybrid_override_pattern": "ME*-EM", "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 16, "intermediate_size": 80, "mamba_num_heads": 8, "mamba_head_dim": 12, "n_groups": 2,
                  "ssm_state_size": 16, "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 40,
                  "moe_shared_expert_intermediate_size": 56, "tie_word_embeddings": False, "use_bias": True,
                  "use_conv_bias": False}


def count(name: str, raw: dict | None = None) -> None:
    raw = raw or json.loads((DATA / name).read_text())
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "_name_or_path", "architectures")}
    cfg = AutoConfig.for_model(raw["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    kinds = ("Mamba2Mixer", "MambaLayer", "BambaMixer", "FalconH1Mixer")
    mixers = [m for n, m in model.named_modules() if type(m).__name__.endswith(kinds)]
    print(f"{name} {type(model).__name__} {params} parameters, {len(mixers)} Mamba2 layers")
    routed = [m for m in model.modules() if type(m).__name__ == "NemotronHExperts"]  # (Nemotron 3 Nano's E blocks)
    if routed:
        experts = sum(p.numel() for m in routed for p in m.parameters())
        k, e = cfg.num_experts_per_tok, cfg.n_routed_experts
        print(f"  {len(routed)} NemotronHMoE blocks, routed experts {experts} parameters; active (the other parameters "
              f"and {k} of {e} experts) {params - experts + experts * k // e}")


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


def layer_peak(h, heads, head_dim, state, groups, chunk, batch, seq) -> int:
    """One Mamba2 mixer's prefill forward (GraniteMoeHybridMambaLayer, transformers' torch path: no mamba_ssm /
    causal_conv1d) at bf16, on fake tensors, less its weights (bytes)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_hybrid_counts import prefill_peak  # the same single-layer measurement as the Gated DeltaNet's
    from transformers.models.granitemoehybrid import GraniteMoeHybridConfig
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import GraniteMoeHybridMambaLayer
    cfg = GraniteMoeHybridConfig(hidden_size=h, num_attention_heads=16, num_hidden_layers=1, layer_types=["mamba"],
                                 mamba_n_heads=heads, mamba_d_head=head_dim, mamba_expand=heads * head_dim // h,
                                 mamba_d_state=state, mamba_n_groups=groups, mamba_chunk_size=chunk, num_local_experts=0)
    return prefill_peak(lambda: GraniteMoeHybridMambaLayer(cfg, layer_idx=0), h, batch, seq)


def prefill() -> None:
    """Per token (the peak's slope between 2 x 1,024 and 2 x 2,048 tokens) for shapes that vary each term."""
    import sys

    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_hybrid_training import MAMBA_FIT  # the shapes the training fit varies, each term in turn
    rows, slopes = [], []
    for s in MAMBA_FIT:
        slope = (layer_peak(**s, batch=2, seq=2048) - layer_peak(**s, batch=2, seq=1024)) / 2048
        terms = [s["h"], s["heads"] * s["head_dim"], s["heads"] * s["state"], s["chunk"] * s["heads"],
                 s["heads"] * s["head_dim"] * s["state"] / s["chunk"], s["groups"] * s["state"]]
        rows.append(terms)
        slopes.append(slope)
        print(f"{s}: {slope:,.1f} B a token")
    coef, *_ = np.linalg.lstsq(np.array(rows, float), np.array(slopes), rcond=None)
    print("fitted per token: h {:.2f}, H*P {:.2f}, H*N {:.2f}, chunk*H {:.2f}, H*P*N/chunk {:.2f}, G*N {:.2f}".format(*coef))


def whole(write: bool) -> None:
    """Whole models' prefill (logits_to_keep=1, use_cache=True, SDPA) at bf16 on fake tensors, none of it fitted."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_hybrid_counts import model_prefill, write_rows
    rows = []
    for name, shapes in (("granite-4.0-h-micro.json", ((1, 4096), (2, 2048), (1, 8192))),
                         ("nvidia-nemotron-nano-9b-v2.json", ((1, 4096), (2, 4096)))):
        raw = json.loads((DATA / name).read_text())
        fields = {k: v for k, v in raw.items() if k not in ("model_type", "_name_or_path", "architectures")}
        for batch, seq in shapes:
            cfg = AutoConfig.for_model(raw["model_type"], **fields, attn_implementation="sdpa")
            rows.append({"config": name, "batch": batch, "seq": seq, **model_prefill(cfg, batch, seq)})
            print(rows[-1])
    if write:
        write_rows(rows, "measured_mamba2_prefill.csv")


if __name__ == "__main__" and "--whole" in __import__("sys").argv[1:]:
    whole("--write" in __import__("sys").argv[1:])
elif __name__ == "__main__" and "--prefill" in __import__("sys").argv[1:]:
    prefill()
elif __name__ == "__main__":
    for name in FILES:
        count(name)
    count("NEMOTRON_MIXED", NEMOTRON_MIXED)
    # mamba: 4 heads of 32 (intermediate 256 = 2 x 128), 2 groups of state 16, kernel 4
    cache("granitemoehybrid", num_hidden_layers=2, layer_types=["mamba", "attention"], mamba_n_heads=8, mamba_d_head=32,
          mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, num_local_experts=0,
          shared_intermediate_size=256)
    cache("nemotron_h", hybrid_override_pattern="M*-", mamba_num_heads=8, mamba_head_dim=32, n_groups=2,
          ssm_state_size=16, conv_kernel=4, head_dim=32)
    cache("falcon_h1", num_hidden_layers=2, mamba_n_heads=8, mamba_d_head=32, mamba_d_ssm=256, mamba_n_groups=2,
          mamba_d_state=16, mamba_d_conv=4, head_dim=32)
