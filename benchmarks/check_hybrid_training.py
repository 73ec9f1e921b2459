"""Offline measurement of what one Gated DeltaNet layer (Qwen3-Next / Qwen3.5) and one Mamba2 mixer (Granite 4.0-H,
the GraniteMoeHybridMambaLayer that Nemotron-H, Bamba and Falcon-H1 share in substance) keep for backward in a bf16
training step, on fake tensors with the harness's MemTracker (benchmarks/measure_peaks.py, as check_hybrid_counts.py
`prefill_peak`). transformers' torch paths only: flash-linear-attention and mamba_ssm / causal-conv1d are not
installed (what `pip install transformers peft` gives; their kernels save other tensors, not measured here). Run with
the measuring venv:

    /work/venv-measure/bin/python benchmarks/check_hybrid_training.py [gdn|gdn35|mamba|falcon]

Per shape and per length (batch 2 x 1,024 and 2 x 2,048) and per weights mode (`full`: the layer's weights need
grad; `frozen`: they do not, the base under LoRA, adapters not included), it prints, per token (the slope between
the two lengths):
  saved     live bytes after the layer's forward less before it (what it saves for backward plus its output);
  fwd_peak  the forward's peak above the live bytes before it;
  bwd_peak  the backward's peak above the live bytes when backward starts, less the weights' gradients;
  ckpt_*    the same under torch.utils.checkpoint (use_reentrant=False), as gradient checkpointing wraps a layer.
The split between the shapes the coefficients are fitted on (FIT) and those held out (HELD_OUT) is fixed below before
any fit.

Output on 2026-12-06 (torch 2.13.0+cpu, transformers 5.24.0), per token, bf16, least squares on FIT:
  Gated DeltaNet (terms h, Hk dk, Hv dk, Hv dv, Hv, Hv dk dv / 64), held out on the three HELD_OUT shapes:
    full   saved    2, 8, 32, 34, 1318, 4   held out -0.00%, +0.00%, -0.00%
    frozen saved    2, 8, 32, 30, 1314, 4   held out -0.00%, +0.00%, -0.00%
    full   fwd_peak 0, 16, 32, 48, 1334, 4; bwd_peak 2, 0, 0, 6.09, 504, 1.97 (held out -0.00%, +0.00%, -2.46%)
    ckpt   saved 2 h (the output; the input is the caller's); fwd_peak 0, 8, 20.1, 28.0, 786, 0 (engine/components.py
           LINEAR_PREFILL_COEF again); bwd_peak (recompute + backward) 2, 16, 32, 48, 1334, 4 (held out +1.86%, 0, 0)
    e.g. Qwen3-Next's shape (h 2048, Hk 16, Hv 32, dk = dv = 128): 365,762 B a token saved (full), 349,250 (frozen);
    Qwen3.5 27B's (h 5120, Hv 48): 544,547 and 519,779. The first fit, without the Hv dk dv / 64 term (the torch
    rule's per-chunk state) and the dk = dv = 64 fit shape, was -4.14% on the h 1,024 dk = dv = 64 held-out shape.
    `gdn35` (Qwen3.5's Qwen3_5GatedDeltaNet, never fitted) saves what Qwen3-Next's fit gives on all ten shapes, full
    and frozen (within 4 B a token: -0.00%).
  Mamba2 mixer (terms h, H P, H N, chunk H, H P N / chunk, G N), held out on Granite 4.0-H Small's and a Nemotron
  Nano 2-like shape (h 5120, 128 heads of 80, 8 groups, chunk 128):
    full   saved    2, 47.63, 19.82, 12.18, 8.73, 8.03   held out +0.00%, +0.07%
    frozen saved    2, 37.70, 19.85, 12.15, 8.61, 8.03   held out +0.00%, +0.06%
    full   fwd_peak 0, 51.48, 27.74, 12.26, 13.04, 12.0; bwd_peak 2, 14.0, 0, 0, 0, 0 (held out +0.00%, -0.00%)
    ckpt   saved 2 h; fwd_peak 0, 33.67, 11.83, 12.16, 4.67, 8 (MAMBA_PREFILL_COEF again); bwd_peak 2, 49.35, 26.04,
           13.18, 16.73, 12 (held out +0.00%, +0.32%)
    plus a per-sequence intercept (4.36 MB for batch 2 at Granite 4.0-H Micro's shape: the chunk states).
    e.g. Granite 4.0-H Micro's shape (h 2048, 64 heads of 64, state 128, chunk 256): 579,986 B a token saved.
  Falcon-H1's mixer (`falcon`, 2026-12-07: mamba_rms_norm false, no gated norm; the same terms, fitted on MAMBA_FIT's
  shapes, held out on FALCON_HELD_OUT: Falcon-H1 7B's shape and a 1.5B-Deep-like one):
    full   saved    4, 33.634, 19.817, 12.178, 8.732, 8   held out +0.68%, +0.23%  (engine/components.py FALCON_SAVED)
    frozen saved    2, 27.697, 19.848, 12.147, 8.607, 8   held out +0.61%, +0.20%
    (4 h where Granite's keeps 2 h: the ssm_in_multiplier copy of its input, which in_proj keeps; 14 H P less: no
    gated RMSNorm's fp32 copies.) e.g. Falcon-H1 7B's shape: 328,228 B a token saved (full), measured.
"""
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_hybrid_counts import _tracker  # noqa: E402


def step(build, h, batch, seq, frozen: bool, ckpt: bool) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    mp, PhaseMemTracker, Ref = _tracker()
    with torch.device("meta"):
        layer = build()
    layer.to(torch.bfloat16)
    if frozen:
        layer.requires_grad_(False)
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer.to_empty(device="cpu")
        layer.train()
        x = torch.randn(batch, seq, h, dtype=torch.bfloat16, requires_grad=True)
        mt = PhaseMemTracker()
        if frozen:
            mt.skip_frozen_params(layer)
        mt.track_external(layer, x)
        with mt:
            mt.set_phase("forward")
            out = checkpoint(layer, x, use_reentrant=False) if ckpt else layer(x)
            out = out[0] if isinstance(out, tuple) else out
            mt.set_phase("backward")
            fwd_peak = mt.phase_peaks.get("forward", mt.peak_total)
            grad = torch.ones_like(out)
            out.backward(grad)
            bwd_peak = mt.phase_peaks.get("backward", mt.peak_total)
        weights = sum(p.numel() * p.element_size() for p in layer.parameters())
    start, at_bwd = mt.phase_start_bytes["forward"], mt.phase_start_bytes["backward"]
    grads = 0 if frozen else weights
    return {"saved": at_bwd - start, "fwd_peak": fwd_peak - start, "bwd_peak": bwd_peak - at_bwd - grads}


def gdn(h, hk, hv, dk, dv):
    from transformers.models.qwen3_next import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    cfg = Qwen3NextConfig(hidden_size=h, num_attention_heads=16, num_key_value_heads=2, head_dim=128,
                          linear_conv_kernel_dim=4, linear_key_head_dim=dk, linear_value_head_dim=dv,
                          linear_num_key_heads=hk, linear_num_value_heads=hv, num_hidden_layers=1)
    return lambda: Qwen3NextGatedDeltaNet(cfg, layer_idx=0)


def gdn35(h, hk, hv, dk, dv):
    """Qwen3.5's Gated DeltaNet: the same rule with in_proj_qkv, in_proj_z, in_proj_b, in_proj_a where Qwen3-Next
    fuses in_proj_qkvz and in_proj_ba; measured on the same shapes, checked against Qwen3-Next's fit."""
    from transformers.models.qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet
    cfg = Qwen3_5TextConfig(hidden_size=h, num_attention_heads=16, num_key_value_heads=2, head_dim=128,
                            linear_conv_kernel_dim=4, linear_key_head_dim=dk, linear_value_head_dim=dv,
                            linear_num_key_heads=hk, linear_num_value_heads=hv, num_hidden_layers=1)
    return lambda: Qwen3_5GatedDeltaNet(cfg, layer_idx=0)


def mamba(h, heads, head_dim, state, groups, chunk):
    from transformers.models.granitemoehybrid import GraniteMoeHybridConfig
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import GraniteMoeHybridMambaLayer
    cfg = GraniteMoeHybridConfig(hidden_size=h, num_attention_heads=16, num_hidden_layers=1, layer_types=["mamba"],
                                 mamba_n_heads=heads, mamba_d_head=head_dim, mamba_expand=heads * head_dim // h,
                                 mamba_d_state=state, mamba_n_groups=groups, mamba_chunk_size=chunk,
                                 num_local_experts=0)
    return lambda: GraniteMoeHybridMambaLayer(cfg, layer_idx=0)


def falcon(h, heads, head_dim, state, groups, chunk):
    """Falcon-H1's mixer (transformers 5.24 modeling_falcon_h1.py FalconH1Mixer), as Falcon-H1 7B's config builds it:
    mamba_rms_norm false (the scan's output times silu(gate), no gated RMSNorm), its input scaled by
    ssm_in_multiplier and in_proj's output by the mup_vector (new tensors, kept in place of the input and the
    projection: the multipliers' values do not matter)."""
    from transformers.models.falcon_h1 import FalconH1Config
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer
    cfg = FalconH1Config(hidden_size=h, num_attention_heads=16, num_key_value_heads=2, num_hidden_layers=1,
                         mamba_n_heads=heads, mamba_d_head=head_dim, mamba_d_ssm=heads * head_dim,
                         mamba_d_state=state, mamba_n_groups=groups, mamba_chunk_size=chunk, mamba_rms_norm=False,
                         mamba_expand=max(heads * head_dim // h, 1))
    from transformers.models.falcon_h1.modeling_falcon_h1 import compute_mup_vector

    def build():  # (FalconH1Model.__init__ registers each mixer's mup_vector buffer, lines 1039-1041)
        mixer = FalconH1Mixer(cfg, layer_idx=0)
        mixer.register_buffer("mup_vector", compute_mup_vector(cfg), persistent=False)
        return mixer
    return build


GDN_FIT = [dict(h=2048, hk=16, hv=32, dk=128, dv=128), dict(h=4096, hk=16, hv=32, dk=128, dv=128),
           dict(h=2048, hk=8, hv=32, dk=128, dv=128), dict(h=2048, hk=16, hv=64, dk=128, dv=128),
           dict(h=2048, hk=16, hv=32, dk=64, dv=128), dict(h=2048, hk=16, hv=32, dk=128, dv=256),
           dict(h=2048, hk=16, hv=32, dk=64, dv=64)]  # (added after the first fit: dk and dv varied together)
GDN_HELD_OUT = [dict(h=5120, hk=16, hv=48, dk=128, dv=128), dict(h=1024, hk=8, hv=16, dk=64, dv=64),
                dict(h=3072, hk=8, hv=24, dk=96, dv=192)]  # (the last added with the Hv dk dv term, never fitted)
MAMBA_FIT = [dict(h=2048, heads=64, head_dim=64, state=128, groups=1, chunk=256),
             dict(h=4096, heads=64, head_dim=64, state=128, groups=1, chunk=256),
             dict(h=2048, heads=128, head_dim=64, state=128, groups=1, chunk=256),
             dict(h=2048, heads=64, head_dim=128, state=128, groups=1, chunk=256),
             dict(h=2048, heads=64, head_dim=64, state=64, groups=1, chunk=256),
             dict(h=2048, heads=64, head_dim=64, state=128, groups=8, chunk=256),
             dict(h=2048, heads=64, head_dim=64, state=128, groups=1, chunk=128)]
MAMBA_HELD_OUT = [dict(h=4096, heads=128, head_dim=64, state=128, groups=1, chunk=256),   # Granite 4.0-H Small-like
                  dict(h=5120, heads=128, head_dim=80, state=128, groups=8, chunk=128)]   # Nemotron Nano 2-like
# Falcon-H1's mixer: fitted on MAMBA_FIT's shapes (fixed before its first run, 2026-12-07), held out on Falcon-H1 7B's
# shape (h 3072, 24 heads of 128, state 256, one group, chunk 128) and Falcon-H1 1.5B-Deep-like (h 1280, 24 heads of 64)
FALCON_HELD_OUT = [dict(h=3072, heads=24, head_dim=128, state=256, groups=1, chunk=128),
                   dict(h=1280, heads=24, head_dim=64, state=256, groups=1, chunk=128)]


def gdn_terms(s):
    # Hv dk dv / 64: a state per chunk of transformers' torch_chunk_gated_delta_rule (chunk_size=64)
    return [s["h"], s["hk"] * s["dk"], s["hv"] * s["dk"], s["hv"] * s["dv"], s["hv"], s["hv"] * s["dk"] * s["dv"] / 64]


def mamba_terms(s):
    return [s["h"], s["heads"] * s["head_dim"], s["heads"] * s["state"], s["chunk"] * s["heads"],
            s["heads"] * s["head_dim"] * s["state"] / s["chunk"], s["groups"] * s["state"]]


def slopes(maker, s, frozen, ckpt):
    a = step(maker(**s), s["h"], 2, 1024, frozen, ckpt)
    b = step(maker(**s), s["h"], 2, 2048, frozen, ckpt)
    return {k: (b[k] - a[k]) / 2048 for k in a}, {k: a[k] - 1024 * 2 * (b[k] - a[k]) / 2048 for k in a}


def run(kind):
    maker, fit, held, terms = {"gdn": (gdn, GDN_FIT, GDN_HELD_OUT, gdn_terms),
                               "gdn35": (gdn35, [], GDN_FIT + GDN_HELD_OUT, gdn_terms),
                               "mamba": (mamba, MAMBA_FIT, MAMBA_HELD_OUT, mamba_terms),
                               "falcon": (falcon, MAMBA_FIT, FALCON_HELD_OUT, mamba_terms)}[kind]
    for frozen in (False, True):
        for ckpt in (False, True):
            label = f"{kind} {'frozen' if frozen else 'full'} {'ckpt' if ckpt else 'no-ckpt'}"
            res = {}
            for s in fit + held:
                res[tuple(s.items())] = slopes(maker, s, frozen, ckpt)
                per, icpt = res[tuple(s.items())]
                print(label, s, " ".join(f"{k} {v:,.1f}/tok (+{icpt[k]:,.0f})" for k, v in per.items()), flush=True)
            for key in ("saved", "fwd_peak", "bwd_peak") if fit else ():
                A = np.array([terms(s) for s in fit], float)
                y = np.array([res[tuple(s.items())][0][key] for s in fit])
                coef, *_ = np.linalg.lstsq(A, y, rcond=None)
                errs = [float(np.dot(coef, terms(s)) / res[tuple(s.items())][0][key] - 1) * 100
                        for s in held if res[tuple(s.items())][0][key]]
                print(f"FIT {label} {key}: coef " + ", ".join(f"{c:.3f}" for c in coef)
                      + "; held out " + ", ".join(f"{e:+.2f}%" for e in errs), flush=True)


if __name__ == "__main__":
    for k in (sys.argv[1:] or ["gdn", "mamba"]):
        run(k)
