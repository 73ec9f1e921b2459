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
import pandas as pd

import engine.constants as C
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


# ---- beyond the dense Llama layout: mixture-of-experts, latent attention, extra norms/biases ----
# Catalog columns (catalog/schema.py MODEL_FIELDS) and their value for the dense Llama layout; a
# column missing from a models table takes it, so the counts above are unchanged for Llama.
ARCH_DEFAULTS = {
    "num_experts": 0,                 # routed experts per MoE layer (Mixtral num_local_experts)
    "experts_per_token": 0,           # routed experts each token uses (num_experts_per_tok)
    "expert_intermediate_size": 0,    # one expert's MLP width (moe_intermediate_size; Mixtral: intermediate_size)
    "shared_intermediate_size": 0,    # the shared experts' MLP width, all of them (DeepSeek n_shared x width)
    "shared_expert_gate": False,      # a sigmoid gate h -> 1 on the shared expert (Qwen2-MoE)
    "first_dense_layers": 0,          # dense layers before the first MoE layer (DeepSeek first_k_dense_replace)
    "moe_layer_step": 1,              # every step-th layer is MoE (Llama 4 interleave_moe_layer_step)
    "router_bias": False,             # the router's linear has a bias (gpt-oss)
    "expert_bias": False,             # each expert's projections have biases (gpt-oss)
    "attention_bias": False,          # q, k, v and o projections all have biases (gpt-oss)
    "attention_sinks": False,         # one learned sink logit per head and layer (gpt-oss)
    "qk_norm": False,                 # RMSNorm over q and k heads, 2 x head_dim per layer (Qwen3, Gemma 3)
    "qk_norm_full": False,            # those norms span all heads, a*d + kv*d per layer (OLMo 2/3, MiniMax-M2)
    "norms_per_layer": 2,             # RMSNorms of hidden size per layer (Gemma 2/3: 4, pre and post)
    "kv_lora_rank": 0,                # MLA: the compressed KV width (DeepSeek-V2/V3)
    "q_lora_rank": 0,                 # MLA: the compressed query width (0: a plain q projection)
    "qk_rope_head_dim": 0,            # MLA: the rotary part of each q/k head (shared by the heads for k)
    "qk_nope_head_dim": 0,            # MLA: the non-rotary part of each q/k head
    "v_head_dim": 0,                  # MLA: each value head's width
    "sliding_window": 0,              # sliding-window width in tokens (0: none)
    "sliding_window_layers": 0,       # layers that use it (the rest attend over the whole sequence)
    "vision_params": 0,               # beside the language model: a vision tower + projector (issue 25)
    # hybrid linear attention (Qwen3-Next, Qwen3.5): Gated DeltaNet layers in place of attention on some layers
    "linear_attention_layers": 0,     # layers of linear attention (the rest full attention)
    "linear_num_key_heads": 0,        # their key (and query) heads
    "linear_num_value_heads": 0,      # their value heads
    "linear_key_head_dim": 0,         # a key head's width
    "linear_value_head_dim": 0,       # a value head's width
    "linear_conv_kernel_dim": 0,      # the short causal convolution's kernel over q, k and v
    "attention_output_gate": False,   # full-attention layers' q_proj also gives a sigmoid gate per head (2 x a x d out)
    # Mamba2 layers (Granite 4.0-H, Nemotron-H / Nemotron Nano 2, Bamba): a selective state-space mixer in place of
    # attention on some layers, keeping a fixed state per sequence (mamba_params, recurrent_state)
    "mamba_layers": 0,                # layers whose mixer is Mamba2
    "mamba_num_heads": 0,             # its heads (mamba_n_heads / mamba_num_heads)
    "mamba_head_dim": 0,              # a head's width (mamba_d_head / mamba_head_dim): intermediate = heads x width
    "mamba_state_size": 0,            # the SSM state per head and channel (mamba_d_state / ssm_state_size)
    "mamba_groups": 0,                # B and C groups (mamba_n_groups / n_groups)
    "mamba_conv_kernel": 0,           # the causal convolution's kernel (mamba_d_conv / conv_kernel)
    "mamba_conv_bias": False,         # conv1d has a bias (mamba_conv_bias / use_conv_bias)
    "mamba_proj_bias": False,         # in_proj and out_proj have biases (mamba_proj_bias / use_bias)
    "mamba_norm": True,               # the gated RMSNorm over the intermediate (Falcon-H1: where mamba_rms_norm)
    "mamba_parallel": False,          # the Mamba2 mixer runs beside attention on its layers, not in its place (Falcon-H1)
    "mamba_chunk_size": 256,          # the prefill's scan chunk (mamba_chunk_size / chunk_size): no weights, its work
    # blocks of one kind each (Nemotron-H: a block is a mixer, an attention layer or an MLP, one norm)
    "mixer_free_layers": 0,           # layers with an MLP and no attention or Mamba2 mixer (Nemotron-H "-")
    "mlp_free_layers": 0,             # layers with a mixer and no MLP (Nemotron-H "M" and "*")
    "mlp_ungated": False,             # the MLP is up_proj and down_proj alone, 2 h f (NemotronHMLP, relu2), and so are
                                      # the experts and shared expert (NemotronHExperts: Nemotron 3 Nano)
}


def _col(m, key):
    value = m[key] if key in m else ARCH_DEFAULTS[key]
    if isinstance(ARCH_DEFAULTS[key], bool):  # a flag, whatever dtype the column arrived in
        return np.asarray(value).astype(bool)
    return np.asarray(value, dtype=np.float64)


def architecture_counts(m, last_k=None, tail=None) -> dict:
    """Exact parameter counts of any catalog model (dense Llama, MoE, MLA, Gemma 2/3, gpt-oss),
    scalars or whole columns: {'total', 'active', 'linear', 'layer_mean'} as float64 (integers
    below 2**53, so exact).

    m: a mapping with the catalog's model fields (hidden_size, intermediate_size, num_layers,
    num_heads, num_kv_heads, head_dim, vocab_size, tied_embeddings, qkv_bias and ARCH_DEFAULTS's).
    Per layer, following transformers' modeling files:
      attention: q h*a*d, k and v h*kv*d, o a*d*h (LlamaAttention); MLA (DeepseekV3Attention):
        q_a_proj h*rq, q_a_layernorm rq, q_b_proj rq*a*(nope+rope) (or q_proj h*a*(nope+rope)),
        kv_a_proj_with_mqa h*(rkv+rope), kv_a_layernorm rkv, kv_b_proj rkv*a*(nope+v), o_proj a*v*h;
        biases a*d+2*kv*d (Qwen2 q/k/v) or a*d+2*kv*d+h (gpt-oss, o too); sinks a (GptOssAttention);
        q_norm and k_norm d each (Qwen3Attention, Gemma3Attention), or a*d and kv*d with qk_norm_full
        (Olmo2Attention / Olmo3Attention, MiniMaxM2Attention: RMSNorm(num_attention_heads * head_dim) and
        RMSNorm(num_key_value_heads * head_dim)).
      MLP: dense 3*h*f (gate, up, down); MoE (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock,
        DeepseekV3MoE, Llama4TextMoe, GptOssMLP): E experts of 3*h*fe, the router E*h (+E bias),
        expert biases E*(2*fe+h) (gpt-oss gate_up_proj_bias, down_proj_bias), the shared experts
        3*h*fs (+h for Qwen2-MoE's shared_expert_gate).
      norms: norms_per_layer*h. Whole model: embedding V*h, lm_head V*h unless tied, final norm h.
      Hybrid linear attention (transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet, no biases): on
        linear_attention_layers of the layers, in place of attention, in_proj_qkvz h*(2 key + 2 val) (Qwen3.5 splits
        it into in_proj_qkv and in_proj_z, the same weights), in_proj_ba h*2 Hv (in_proj_b, in_proj_a), out_proj
        val*h (key = Hk*dk, val = Hv*dv), a depthwise conv1d (2 key + val)*kernel, dt_bias and A_log Hv each and
        the gated RMSNorm dv; the full-attention layers' q_proj doubled with attention_output_gate
        (Qwen3NextAttention: query and gate). Checked against the models built on the meta device from
        transformers 5.24's classes (benchmarks/check_hybrid_counts.py, tests/test_hybrid_models.py).
      Mamba2 (Granite 4.0-H, Nemotron-H, Bamba): on mamba_layers of the layers, in place of attention (beside it on
        every layer with mamba_parallel: Falcon-H1), the mixer of mamba_params; Nemotron-H's blocks hold one of a Mamba2 mixer, attention or an MLP (mixer_free_layers have an
        MLP alone, mlp_free_layers a mixer alone) and one norm (norms_per_layer 1), its MLP up and down alone
        (mlp_ungated), as are the experts and shared expert of its E blocks (Nemotron 3 Nano: the MoE layers, every block
        but first_dense_layers of them). Checked against the models built on the meta device from transformers 5.24's classes
        (benchmarks/check_mamba2_counts.py, tests/test_mamba2_models.py).
    Active parameters (per token): the same with experts_per_token experts instead of all (the
    router and the shared experts always run); embedding and lm_head counted, as published
    (Mixtral 8x7B: 12.9B active of 46.7B).
    """
    h, f, L = (np.asarray(m[k], dtype=np.float64) for k in ("hidden_size", "intermediate_size", "num_layers"))
    a, kv, d, V = (np.asarray(m[k], dtype=np.float64) for k in ("num_heads", "num_kv_heads", "head_dim", "vocab_size"))
    tied = np.asarray(m["tied_embeddings"], dtype=bool)
    qkv_bias = np.asarray(m["qkv_bias"] if "qkv_bias" in m else False, dtype=bool)
    E, k, fe, fs = (_col(m, c) for c in ("num_experts", "experts_per_token", "expert_intermediate_size",
                                         "shared_intermediate_size"))
    rkv, rq, rope, nope, vd = (_col(m, c) for c in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                                                    "qk_nope_head_dim", "v_head_dim"))
    mla = rkv > 0
    qk = nope + rope
    q_lin = np.where(rq > 0, h * rq + rq * a * qk, h * a * qk)
    mla_lin = q_lin + h * (rkv + rope) + rkv * a * (nope + vd) + a * vd * h
    attn_lin = np.where(mla, mla_lin, attention_params(h, a, kv, d)) + np.where(_col(m, "attention_output_gate"),
                                                                               h * a * d, 0.0)
    attn_only = (np.where(qkv_bias, a * d + 2 * kv * d, 0.0)
                 + np.where(_col(m, "attention_bias"), a * d + 2 * kv * d + h, 0.0)
                 + np.where(_col(m, "attention_sinks"), a, 0.0)
                 + np.where(_col(m, "qk_norm"), np.where(_col(m, "qk_norm_full"), a * d + kv * d, 2 * d), 0.0)
                 + np.where(mla, rkv + rq, 0.0))
    attn_other = attn_only + _col(m, "norms_per_layer") * h
    # hybrid linear attention: Llin Gated DeltaNet layers and Lm Mamba2 layers in place of attention (every term 0
    # for the others); Nemotron-H's blocks of one kind: Lx with an MLP alone, Ly with a mixer alone
    Llin, Lm = _col(m, "linear_attention_layers"), _col(m, "mamba_layers")
    Lx, Ly = _col(m, "mixer_free_layers"), _col(m, "mlp_free_layers")
    gdn_lin, gdn_other = linear_attention_params(h, *(_col(m, c) for c in LINEAR_ATTENTION_FIELDS))
    mamba_lin, mamba_other = mamba_params(h, *(_col(m, c) for c in MAMBA_FIELDS))
    hybrid = (Llin > 0) | (Lm > 0) | (Lx > 0) | (Ly > 0)
    mlp = np.where(_col(m, "mlp_ungated"), 2 * h * f, mlp_params(h, f))
    step = np.maximum(_col(m, "moe_layer_step"), 1.0)
    moe_layers = np.where(E > 0, np.floor(np.maximum(L - _col(m, "first_dense_layers"), 0.0) / step), 0.0)
    dense_layers = L - moe_layers - Ly
    router = E * h + np.where(_col(m, "router_bias"), E, 0.0)
    # the experts' matrices: gate, up and down; up and down alone where the MLP is ungated (Nemotron 3 Nano:
    # NemotronHExperts up_proj / down_proj and its shared NemotronHMLP, transformers 5.24 modeling_nemotron_h.py
    # lines 639-676)
    mats = np.where(_col(m, "mlp_ungated"), 2.0, 3.0)
    shared = mats * h * fs + np.where(_col(m, "shared_expert_gate") & (fs > 0), h, 0.0)
    expert_bias = np.where(_col(m, "expert_bias"), 2 * fe + h, 0.0)
    moe_all = E * (mats * h * fe + expert_bias) + router + shared
    moe_active = k * (mats * h * fe + expert_bias) + router + shared
    outside = V * h + np.where(tied, 0.0, V * h) + h
    layers_common = L * (attn_lin + attn_other) + dense_layers * mlp
    attn_layers_lin = L * attn_lin
    if np.any(hybrid):  # (integers below 2**53: exact in any order)
        La = attention_layers(m)
        layers_common = np.where(hybrid, La * (attn_lin + attn_only) + Llin * (gdn_lin + gdn_other)
                                 + Lm * (mamba_lin + mamba_other) + L * _col(m, "norms_per_layer") * h
                                 + dense_layers * mlp, layers_common)
        attn_layers_lin = np.where(hybrid, La * attn_lin + Llin * gdn_lin + Lm * mamba_lin, attn_layers_lin)
    total = outside + layers_common + moe_layers * moe_all
    active = outside + layers_common + moe_layers * moe_active
    linear = attn_layers_lin + dense_layers * mlp + moe_layers * (E * mats * h * fe + E * h + mats * h * fs)
    counts = {"total": total, "active": active, "linear": linear, "layer_mean": (total - outside) / L,
              "moe_layers": moe_layers, "experts": moe_layers * E * (mats * h * fe + expert_bias)}
    if last_k is not None:
        # the last last_k layers' parameters where a mixture of experts' layers differ (dense layers first or between;
        # not the hybrids, whose layer kinds interleave), NaN elsewhere: there every layer is the mean layer
        first_dense = _col(m, "first_dense_layers")
        layered = (E > 0) & ((first_dense > 0) | (step > 1)) & ~hybrid
        counts["last_layers"] = np.where(layered, _last_layers(last_k, L, first_dense, step, E, attn_lin + attn_other,
                                                               mlp, moe_all), np.nan)
        if tail is not None:  # a hybrid's last layers, by kind (block_tail; NaN where the order is not known)
            norm = _col(m, "norms_per_layer") * h
            mixers = (tail["mamba"] * (mamba_lin + mamba_other) + tail["linear"] * (gdn_lin + gdn_other)
                      + tail["attention"] * (attn_lin + attn_only) + last_k * norm)
            # Nemotron-H's one-kind blocks: their MLP and expert blocks; the others: every layer's MLP or experts
            block_mlps = tail["mlp"] * mlp + tail["moe"] * moe_all
            layer_mlps = last_k * (dense_layers * mlp + moe_layers * moe_all) / L
            blocks = mixers + np.where((Lx > 0) | (Ly > 0), block_mlps, layer_mlps)
            counts["last_layers"] = np.where(np.isfinite(blocks), blocks, counts["last_layers"])
    return counts


BLOCK_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe", "L": "linear"}


def _kinds_in(patterns, keys, known, part) -> dict:
    """Per row, how many of each block kind (BLOCK_KINDS) stand in part(pattern, key) of the row's pattern, NaN where
    `known` is false; worked once per distinct (pattern, key), not per row (block_tail, block_lead)."""
    out = {kind: np.full(len(patterns), np.nan) for kind in BLOCK_KINDS.values()}
    if not known.any():
        return out
    rows = np.flatnonzero(known)
    codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([patterns[rows].astype(str), keys[rows]]))
    for i, (pattern, key) in enumerate(uniques):
        blocks = part(pattern, key)
        at = rows[codes == i]
        for letter, kind in BLOCK_KINDS.items():
            out[kind][at] = blocks.count(letter)
    return out


def block_tail(patterns, k) -> dict:
    """Per row, how many of each block kind (BLOCK_KINDS: Nemotron-H's hybrid_override_pattern letters, and L for a
    Gated DeltaNet layer) stand among the last k blocks of the row's pattern (the catalog's block_pattern), NaN where
    the row has none: what freeze tuning's last k blocks are (LLaMA-Factory's last k layers; the freeze rows of
    tests/data/measured_hybrid_training.csv)."""
    pats = np.asarray(patterns, dtype=object)
    known = np.array([isinstance(p, str) and p != "" for p in pats], dtype=bool)
    return _kinds_in(pats, np.asarray(k, dtype=np.float64), known,
                     lambda pattern, kk: pattern[len(pattern) - int(min(max(kk, 0), len(pattern))):] if kk > 0 else "")


def block_lead(patterns, adapted) -> dict:
    """Per row, how many of each block kind (BLOCK_KINDS) stand before the first block whose letter is in the row's
    `adapted` letters (a string: the kinds LoRA adapts on that row), NaN where the row has no pattern or no adapted
    letter: the blocks a LoRA step runs without autograd (their input needs no gradient and no weight of theirs trains,
    so they save nothing for backward)."""
    pats = np.asarray(patterns, dtype=object)
    letters = np.asarray(adapted, dtype=object)
    known = np.array([isinstance(p, str) and p != "" and isinstance(a, str) and a != ""
                      for p, a in zip(pats, letters)], dtype=bool)
    return _kinds_in(pats, letters.astype(str), known,
                     lambda pattern, kinds: pattern[:min((j for j, c in enumerate(pattern) if c in kinds),
                                                         default=len(pattern))])


def _last_layers(k, L, first_dense, step, E, attn, mlp, moe_all):
    """Parameters of the last k decoder layers (what freeze tuning trains: LLaMA-Factory's last k), where a mixture of
    experts' layers differ: the MoE layers are those from first_dense_layers on whose index past it, + 1, is a multiple
    of moe_layer_step (transformers 5.24: DeepseekV3DecoderLayer `layer_idx >= first_k_dense_replace`;
    Llama4TextDecoderLayer `layer_idx in config.moe_layers`, range(step - 1, L, step); Qwen3MoeDecoderLayer
    `(layer_idx + 1) % decoder_sparse_step == 0`), the others dense. The count of MoE layers among indices [a, L) is
    floor((L - fd) / step) - floor((max(a, fd) - fd) / step). (Not for the hybrids: their layer kinds interleave.)"""
    k = np.minimum(np.asarray(k, dtype=np.float64), L)
    start = np.maximum(L - k, first_dense)
    moe_in = np.where(E > 0, np.floor(np.maximum(L - first_dense, 0.0) / step)
                      - np.floor(np.maximum(start - first_dense, 0.0) / step), 0.0)
    return k * attn + moe_in * moe_all + (k - moe_in) * mlp


LINEAR_ATTENTION_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                           "linear_conv_kernel_dim")


def linear_attention_params(h, hk, hv, dk, dv, kernel):
    """(matrix weights, other weights) of one Gated DeltaNet layer (engine/params.py architecture_counts)."""
    key, val = hk * dk, hv * dv
    return h * (2 * key + 2 * val) + h * 2 * hv + val * h, (2 * key + val) * kernel + 2 * hv + dv


MAMBA_FIELDS = ("mamba_num_heads", "mamba_head_dim", "mamba_state_size", "mamba_groups", "mamba_conv_kernel",
                "mamba_conv_bias", "mamba_proj_bias", "mamba_norm")


def mamba_params(h, heads, head_dim, state, groups, kernel, conv_bias=False, proj_bias=False, norm=True):
    """(matrix weights, other weights) of one Mamba2 mixer (transformers 5.24 modeling_granitemoehybrid.py
    GraniteMoeHybridMambaLayer lines 519-565, modeling_nemotron_h.py NemotronHMamba2Mixer lines 401-448,
    modeling_bamba.py BambaMixer lines 598-644): intermediate I = heads x head_dim, conv_dim = I + 2 groups x state;
    in_proj h x (I + conv_dim + heads) (gate z, the convolution's x/B/C input, dt), out_proj I x h, their biases
    where proj_bias; a depthwise conv1d conv_dim x kernel (+ conv_dim bias); dt_bias, A_log and D, heads each; the
    gated RMSNorm I where norm (modeling_falcon_h1.py FalconH1Mixer lines 598-653: nn.Identity unless mamba_rms_norm;
    its intermediate mamba_d_ssm = heads x head_dim, configuration_falcon_h1.py validate_architecture)."""
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state
    proj = inner + conv_dim + heads
    bias = np.where(np.asarray(proj_bias, dtype=bool), proj + h, 0.0)
    conv = conv_dim * kernel + np.where(np.asarray(conv_bias, dtype=bool), conv_dim, 0.0)
    return h * proj + inner * h, bias + conv + 3 * heads + np.where(np.asarray(norm, dtype=bool), inner, 0.0)


def attention_layers(m):
    """Layers with an attention mixer: all but the Gated DeltaNet and Mamba2 ones (unless the Mamba2 mixer runs beside
    attention, Falcon-H1) and Nemotron-H's MLP blocks."""
    L = np.asarray(m["num_layers"], dtype=np.float64)
    mamba = np.where(_col(m, "mamba_parallel"), 0.0, _col(m, "mamba_layers"))
    return L - _col(m, "linear_attention_layers") - mamba - _col(m, "mixer_free_layers")


def state_layers(m):
    """Layers that keep a fixed state per sequence instead of K/V: Gated DeltaNet and Mamba2 (0 for other models)."""
    return _col(m, "linear_attention_layers") + _col(m, "mamba_layers")


def recurrent_state(m, conv_positions="kernel", tp=1.0):
    """Per sequence, over all layers that keep a state (Gated DeltaNet and Mamba2): (the convolution's state values,
    the recurrent state values), over all tensor-parallel ranks.
    Gated DeltaNet: the convolution keeps the last positions of its q/k/v input, (2 key + val) wide; the delta rule's
    state is Hv x dk x dv. Mamba2: the convolution keeps its x/B/C input, conv_dim = heads x head_dim + 2 groups x
    state wide; the SSM state is heads x head_dim x state. transformers' LinearAttentionLayer `conv_states` (batch,
    conv_dim, kernel) (conv_positions "kernel"; benchmarks/check_hybrid_counts.py, check_mamba2_counts.py), vLLM's and
    SGLang's (kernel - 1) ("kernel-1"). Under tensor parallelism vLLM and SGLang give every rank the groups its heads
    need: groups not divisible by tp become tp (vllm model_executor/layers/mamba/mamba_utils.py
    MambaStateShapeCalculator.mamba2_state_shape / extra_groups_for_head_shards, commit 02d7108; sglang
    srt/configs/mamba_utils.py Mamba2StateShape.create, commit 02e208d)."""
    Llin, Lm = _col(m, "linear_attention_layers"), _col(m, "mamba_layers")
    hk, hv, dk, dv, kernel = (_col(m, c) for c in LINEAR_ATTENTION_FIELDS)
    heads, head_dim, state, groups, m_kernel = (_col(m, c) for c in MAMBA_FIELDS[:5])
    tp = np.asarray(tp, dtype=np.float64)
    groups = np.where(np.mod(groups, tp) == 0, groups, tp)  # (n_groups + tp - n_groups)

    def positions(k):
        return k if conv_positions == "kernel" else np.maximum(k - 1.0, 0.0)
    conv = Llin * (2 * hk * dk + hv * dv) * positions(kernel) \
        + Lm * (heads * head_dim + 2 * groups * state) * positions(m_kernel)
    return conv, Llin * hv * dk * dv + Lm * heads * head_dim * state


def linear_attention_state(m, conv_positions="kernel"):
    """recurrent_state without tensor parallelism (the name the Gated DeltaNet callers use)."""
    return recurrent_state(m, conv_positions)


def kv_elements_per_token(m, policy_full: bool = False):
    """Values one token keeps in the KV cache over all layers at full length (before any window):
    2*kv*d per layer (k and v of the KV heads); MLA keeps one latent rkv + rope per layer (what
    vLLM, SGLang and llama.cpp store), or with policy_full the per-head k (a*(nope+rope)) and v
    (a*v) that transformers' DeepseekV3Attention caches."""
    L, kv, d, a = (np.asarray(m[k], dtype=np.float64) for k in ("num_layers", "num_kv_heads", "head_dim", "num_heads"))
    rkv, rope, nope, vd = (_col(m, c) for c in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
    latent = np.where(policy_full, a * (nope + rope) + a * vd, rkv + rope)
    # hybrid linear attention / Mamba2: only the attention layers keep K/V (the others a state per sequence, or none:
    # Nemotron-H's MLP blocks)
    full_layers = attention_layers(m)
    return np.where(rkv > 0, L * latent, 2.0 * full_layers * kv * d)


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


def hybrid_training_unmodelled(models, adapters: bool = False, listed: bool = False) -> np.ndarray:
    """Per model (row of `models`): True where it has Gated DeltaNet or Mamba2 layers and training it is not modelled
    (with adapters: LoRA or QLoRA, on every projection, or with listed, on a list of named projections; without: full
    or freeze tuning).
    Modelled (engine/components.py hybrid_training_terms, hybrid_lora_in_out, _expert_wrapper_kept, _block_layout; held
    out against tests/data/measured_hybrid_training.csv, tests/test_hybrid_training_accuracy.py): Qwen3.5's models,
    Qwen3-Next, Granite 4.0-H's models and Bamba (the MoE ones and Bamba since the hybrid probe of 2026-12-07: held
    out, within 0.4% of the measured steps with and without checkpointing), Nemotron-H's full and freeze tuning (its
    block layout, _block_layout: held out within 0.4%) and Falcon-H1's (its mixers beside attention, FALCON_SAVED:
    held out within 0.5%), and LoRA on Falcon-H1 and Nemotron-H with its projections listed (held out:
    tests/test_hybrid_training_accuracy.py; Nemotron 3 Nano's expert blocks since 2026-12-07: peft adapts their shared
    expert alone). Not: LoRA on every projection of Nemotron-H and Falcon-H1 (peft 0.21.2 refuses all-linear there,
    tuners_utils.py _check_lora_target_modules_mamba on out_proj), nor a Falcon-H1 with mamba_rms_norm (the 7B's config
    has it false; a mixer with its gated norm beside attention is not measured)."""
    n = len(models)
    layers = sum(np.nan_to_num(_float_col(models, c)) for c in ("linear_attention_layers", "mamba_layers"))
    mtype = model_types(models["family"] if "family" in models else [""] * n).astype(str)
    # (Falcon-H1 as its 7B's config builds it: mamba_rms_norm false, engine/components.py FALCON_SAVED)
    falcon = (mtype == "falcon_h1") & ~_float_col(models, "mamba_norm").astype(bool) if "mamba_norm" in models \
        else np.zeros(n, dtype=bool)
    nemotron = mtype == "nemotron_h"
    covered = ((mtype == "qwen3_next") | np.char.startswith(mtype, "qwen3_5") | (mtype == "granitemoehybrid")
               | (mtype == "bamba") | (nemotron | falcon) & ((not adapters) or listed))
    return (layers > 0) & ~covered


def hybrid_unmodelled_by_method(models) -> dict:
    """Per model, hybrid_training_unmodelled under each kind of training row: "whole" (full or freeze tuning), "all"
    (LoRA or QLoRA on every projection) and "listed" (LoRA or QLoRA on named projections). unmodelled_rows picks a
    row's."""
    return {"whole": hybrid_training_unmodelled(models), "all": hybrid_training_unmodelled(models, adapters=True),
            "listed": hybrid_training_unmodelled(models, adapters=True, listed=True)}


def unmodelled_rows(by_method: dict, adapters, every) -> np.ndarray:
    """Per row, from hybrid_unmodelled_by_method's arrays taken at the rows' models: the one the row's method (adapters:
    LoRA or QLoRA) and targets (every: 'all') ask for. Read by the engine's refusal (engine/scenarios.py
    check_combinations) and the tables' "✗ not modelled" label (planner/planning.py not_modelled) alike."""
    return np.where(adapters, np.where(every, by_method["all"], by_method["listed"]), by_method["whole"])


def _float_col(models, name: str) -> np.ndarray:
    """models' `name` as floats (0 where the column is absent)."""
    if name not in models:
        return np.zeros(len(models))
    return np.asarray(models[name], dtype=float)


def peft_moe_patterns(families, types, experts) -> np.ndarray:
    """Per model: peft 0.21.2's conversion pattern for LoRA on its fused experts (engine/constants.py PEFT_FUSED_MOE:
    "qwen2_moe", "mixtral"), "" where the model has no experts or its type is not converted. types: model_types(families)."""
    fams = [f if isinstance(f, str) else "" for f in families]
    return np.array([C.PEFT_FUSED_MOE.get(C.FAMILY_MOE_MODEL_TYPE.get(f, t), "") if e > 0 else ""
                     for f, t, e in zip(fams, types, np.nan_to_num(np.asarray(experts, dtype=float)))], dtype=object)


def model_types(families) -> np.ndarray:
    """Each family's transformers model_type where the engine keys a term on it ("" elsewhere): a catalog
    family through engine/constants.py FAMILY_MODEL_TYPE, a model read from a file or the Hub (family
    "custom-<model_type>", catalog/user.py) by its own model_type. (A few dozen families per catalog:
    plain Python, which costs microseconds where pandas' string methods cost milliseconds.)"""
    prefix, table = C.CUSTOM_FAMILY_PREFIX, C.FAMILY_MODEL_TYPE
    out = [f[len(prefix):] if f.startswith(prefix) else table.get(f, "")
           for f in (v if isinstance(v, str) else "" for v in families)]
    return np.array(out, dtype=object)
