"""Parameter counts of a Llama-style decoder, from its config, for scalars or whole columns.

Embedding V*h; per layer q h*(a*d), k and v h*(kv*d) each, o (a*d)*h, MLP 3*h*ffn (gate, up,
down), two RMSNorm weights 2h; a final norm h; lm_head V*h unless tied to the embedding.
No biases (Llama's config has attention_bias=False, mlp_bias=False).

Optional, off by default so Llama counts are unchanged: `qkv_bias`, the biases of the q, k and
v projections (a*d + 2*kv*d per layer), as in Qwen2 (transformers' Qwen2Attention builds q_proj,
k_proj and v_proj with bias=True and o_proj with bias=False).
"""

from __future__ import annotations

import numpy as np

from engine.constants import LORA_MODULES


def attention_params(h, a, kv, d):
    """Weights of q, k, v and o projections of one layer."""
    return h * (a * d) + 2 * h * (kv * d) + (a * d) * h


def mlp_params(h, ffn):
    return 3 * h * ffn


def qkv_bias_params(a, kv, d, qkv_bias=False):
    """Biases of the q, k and v projections of one layer (0 without them)."""
    return np.where(np.asarray(qkv_bias, dtype=bool), a * d + 2 * kv * d, 0)


def layer_params(h, ffn, a, kv, d, qkv_bias=False):
    """All weights of one decoder layer, its two RMSNorms (and any q/k/v biases) included."""
    return attention_params(h, a, kv, d) + mlp_params(h, ffn) + 2 * h + qkv_bias_params(a, kv, d, qkv_bias)


def total_params(h, ffn, layers, a, kv, d, vocab, tied, qkv_bias=False):
    """Exact parameter count (int64 for columns, int for scalars)."""
    embed = vocab * h
    head = np.where(np.asarray(tied, dtype=bool), 0, vocab * h)
    total = embed + layers * layer_params(h, ffn, a, kv, d, qkv_bias) + h + head
    if np.ndim(total) == 0:
        return int(total)
    return np.asarray(total, dtype=np.int64)


def linear_params(h, ffn, layers, a, kv, d):
    """Weights of the decoder layers' linear projections (what int8/int4/nf4 quantize)."""
    return layers * (attention_params(h, a, kv, d) + mlp_params(h, ffn))


def lora_module_dims(h, ffn, a, kv, d):
    """(in_features, out_features) of each LoRA-targetable module of one layer."""
    return {
        "q_proj": (h, a * d),
        "k_proj": (h, kv * d),
        "v_proj": (h, kv * d),
        "o_proj": (a * d, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
    }


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """'q_proj,v_proj' -> ('q_proj', 'v_proj'); 'all' (or 'all-linear') -> every module.

    Raises ValueError naming the bad module and the accepted ones.
    """
    raw = str(text).strip().lower()
    if raw in ("all", "all-linear", "all_linear"):
        return LORA_MODULES
    names = tuple(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))
    if not names:
        raise ValueError(f"lora targets {text!r} is empty; accepted: 'all' or a comma list of {', '.join(LORA_MODULES)}")
    bad = [n for n in names if n not in LORA_MODULES]
    if bad:
        raise ValueError(
            f"lora target {bad[0]!r} is not a Llama linear module; accepted: 'all' or a comma list of "
            + ", ".join(LORA_MODULES)
        )
    return names
