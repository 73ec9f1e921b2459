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

    .venv-measure/bin/python benchmarks/check_hybrid_counts.py --prefill [--write]

measures the prefill (fake tensors, torch's MemTracker, as benchmarks/measure_peaks.py): (1) one
Qwen3NextGatedDeltaNet layer's forward at 16-bit over batch 2 x 1,024 and 2 x 2,048 tokens for six shapes, whose
per-token slope gives engine/components.py LINEAR_PREFILL_COEF by least squares, and three other shapes it is
checked on; (2) the whole Qwen3-Next 80B-A3B's prefill (logits_to_keep=1, use_cache=True, SDPA) at four batch x
seq, none fitted (--write: tests/data/measured_hybrid_prefill.csv). Output on 2026-12-05:
    fitted per token: h 2.00, Hk*dk 8.00, Hv*dk 20.06, Hv*dv 27.97, Hv 794.1 (the engine rounds to 2, 8, 20, 28, 794)
    held out h=5120 Hk=16 Hv=48: 359,840 B a token measured, 359,648 by the rounded coefficients (-0.05%)
    held out h=4096 Hk=16 Hv=64: 468,864 measured, 468,608 (-0.05%); h=1024 Hk=8 Hv=16 dk=dv=64: 68,001, 68,000
    qwen3-next-80b-a3b prefill 1 x 2,048: 159,988,848,256 B (activations 640,049,152); 1 x 8,192: 161,669,170,816;
    4 x 4,096: 164,146,218,624; 8 x 2,048: 164,465,493,632
"""
import csv
import json
import sys
from pathlib import Path

import numpy as np

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


def _tracker():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import measure_peaks as mp  # the harness's MemTracker subclass and its categories
    PhaseMemTracker, Ref, _ = mp._make_tracker_class()
    return mp, PhaseMemTracker, Ref


def prefill_peak(build, h, batch, seq) -> int:
    """One layer's forward peak over a batch x seq x h bf16 state, less its weights (bytes): `build()` makes the layer
    (on the meta device), which runs under FakeTensorMode with the harness's MemTracker (benchmarks/measure_peaks.py).
    benchmarks/check_mamba2_counts.py measures a Mamba2 mixer with it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mp, PhaseMemTracker, Ref = _tracker()
    with torch.device("meta"):
        layer = build()
    layer.to(torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer.to_empty(device="cpu")
        x = torch.randn(batch, seq, h, dtype=torch.bfloat16)
        mt = PhaseMemTracker()
        mt.track_external(layer, x)
        with mt, torch.inference_mode():
            mt.set_phase("prefill")
            layer(x)
        cats = mp._split(mt.peak_snap, Ref)
    return mt.peak_total - cats["param_bytes"] - cats["buffer_bytes"]


def layer_peak(h, hk, hv, dk, dv, batch, seq) -> int:
    """One Gated DeltaNet layer's forward peak, less its weights (bytes)."""
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    cfg = Qwen3NextConfig(hidden_size=h, num_attention_heads=16, num_key_value_heads=2, head_dim=128,
                          linear_conv_kernel_dim=4, linear_key_head_dim=dk, linear_value_head_dim=dv,
                          linear_num_key_heads=hk, linear_num_value_heads=hv, num_hidden_layers=1)
    return prefill_peak(lambda: Qwen3NextGatedDeltaNet(cfg, layer_idx=0), h, batch, seq)


def per_token(shape) -> float:
    return (layer_peak(**shape, batch=2, seq=2048) - layer_peak(**shape, batch=2, seq=1024)) / 2048


FIT_SHAPES = [dict(h=2048, hk=16, hv=32, dk=128, dv=128), dict(h=4096, hk=16, hv=32, dk=128, dv=128),
              dict(h=2048, hk=8, hv=32, dk=128, dv=128), dict(h=2048, hk=16, hv=64, dk=128, dv=128),
              dict(h=2048, hk=16, hv=32, dk=64, dv=128), dict(h=2048, hk=16, hv=32, dk=128, dv=256)]
HELD_OUT_SHAPES = [dict(h=5120, hk=16, hv=48, dk=128, dv=128), dict(h=4096, hk=16, hv=64, dk=128, dv=128),
                   dict(h=1024, hk=8, hv=16, dk=64, dv=64)]
ROUNDED = (2.0, 8.0, 20.0, 28.0, 794.0)


def _terms(s):
    return [s["h"], s["hk"] * s["dk"], s["hv"] * s["dk"], s["hv"] * s["dv"], s["hv"]]


def prefill(write: bool) -> None:
    slopes = [per_token(s) for s in FIT_SHAPES]
    coef, *_ = np.linalg.lstsq(np.array([_terms(s) for s in FIT_SHAPES], float), np.array(slopes), rcond=None)
    print("fitted per token: h {:.2f}, Hk*dk {:.2f}, Hv*dk {:.2f}, Hv*dv {:.2f}, Hv {:.1f}".format(*coef))
    for s in HELD_OUT_SHAPES:
        got, pred = per_token(s), float(np.dot(ROUNDED, _terms(s)))
        print(f"held out {s}: {got:,.0f} B a token measured, {pred:,.0f} by the rounded coefficients "
              f"({(pred / got - 1) * 100:+.2f}%)")
    raw = json.loads((DATA / "qwen3-next-80b-a3b.json").read_text())
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "_name_or_path", "architectures")}
    rows = []
    for batch, seq in ((1, 2048), (1, 8192), (4, 4096), (8, 2048)):
        cfg = Qwen3NextConfig(**fields, attn_implementation="sdpa")
        rows.append({"model": "qwen3-next-80b-a3b", "batch": batch, "seq": seq, **model_prefill(cfg, batch, seq)})
        print(f"qwen3-next-80b-a3b prefill {batch} x {seq:,}: {rows[-1]['peak_bytes']:,} B (activations "
              f"{rows[-1]['activation_bytes']:,})")
    if write:
        write_rows(rows, "measured_hybrid_prefill.csv")


def model_prefill(cfg, batch: int, seq: int) -> dict:
    """A whole model's prefill (logits_to_keep=1, use_cache=True) at bf16 on fake tensors, as the harness tracks it:
    the peak and its parameter and activation bytes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM
    mp, PhaseMemTracker, Ref = _tracker()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    model.to(torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), dtype=torch.long)
        model.eval()
        mt = PhaseMemTracker()
        mt.track_external(model, ids)
        with mt, torch.inference_mode():
            mt.set_phase("prefill")
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cats = mp._split(mt.peak_snap, Ref)
    return {"peak_bytes": mt.peak_total, "param_bytes": cats["param_bytes"], "activation_bytes": cats["activation_bytes"]}


def write_rows(rows: list[dict], name: str) -> None:
    """The rows as tests/data/<name>, a CSV with their keys as its header."""
    out = Path(__file__).resolve().parent.parent / "tests" / "data" / name
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    if "--prefill" in sys.argv[1:]:
        prefill("--write" in sys.argv[1:])
    else:
        for name in sorted(p.name for p in DATA.glob("*.json")):
            count(name)
        cache()
