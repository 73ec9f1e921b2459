"""What inference libraries allocate beside the weights, each traced from its source (engine/stacks.py
int4_kernel, bnb_double_quant, rope_cache; engine/components.py int4_kernel_parts): AutoAWQ 0.1.6's fused
modules (casper-hansen/AutoAWQ at 5c7e368), AutoGPTQ's exllama temp_dq (v0.4.2 / v0.5.0
autogptq_post_init), bitsandbytes 0.41.1's 4-bit prefill and storage, transformers 4.32-4.40's per-layer
rotary caches and the logits.float() of its forward. Every expected figure is worked out here from the
models' configs (Llama 2 13B: 40 layers, h 5,120, f 13,824, 40 heads of 128, vocabulary 32,000, context
4,096; Mistral 7B: 32 layers, h 4,096, f 14,336, 32 heads and 8 KV heads of 128), not by the engine."""

import pandas as pd
import pytest

from engine import estimate

L13, H13, F13, V = 40, 5120, 13824, 32000
L7, H7, F7, KVD7 = 32, 4096, 14336, 8 * 128
INFER = dict(task="infer", batch=1, seq=64)


def rows(models, *scenarios, gpus=None):
    frame = pd.DataFrame([{**INFER, **s} for s in scenarios])
    return [r for _i, r in estimate(frame, models, gpus).iterrows()]


def tensors(row):
    return row.peak_bytes - row.runtime_overhead_bytes


# ---- AutoAWQ's fused modules ----------------------------------------------------------------------

def test_autoawq_fused_load_holds_the_fused_qkv_beside_the_originals(models):
    """Llama 2 13B int4, batch 1, max_new_tokens 64: while LlamaFuser.fuse_transformer runs, every
    layer's fused QKV (40 x 5,120 x 15,360 values at int4's 4.25 bits) exists beside the original q, k,
    v; each block's WindowedCache (K and V, 64 tokens of 5,120 fp16 values) and RoPE table (128
    positions x 64 complex64) are allocated in the same loop; the largest transient is the last fused
    WQLinear's zero-filled qweight beside its torch.cat (5,120 x 15,360 / 2 bytes)."""
    fused, plain = rows(models, dict(model="llama-2-13b", precision="int4", int4_kernel="autoawq_fused"),
                        dict(model="llama-2-13b", precision="int4"))
    qkv = L13 * H13 * (3 * H13) * 4.25 / 8            # 1,671,168,000
    zero_filled = H13 * 3 * H13 / 2                    # 39,321,600
    cache = 2 * L13 * H13 * 2 * 64                     # 52,428,800
    rope = L13 * (2 * 64) * (128 // 2) * 8             # 2,621,440
    assert fused.load_phase_bytes == pytest.approx(fused.weights_bytes + qkv + zero_filled + cache + rope, rel=1e-12)
    assert fused.peak_phase == "load"
    assert tensors(fused) == pytest.approx(fused.load_phase_bytes, rel=1e-12)
    # the weights and the cache themselves are the plain row's
    assert fused.weights_bytes == plain.weights_bytes and fused.kv_cache_bytes == plain.kv_cache_bytes
    assert pd.isna(plain.load_phase_bytes)


def test_autoawq_fused_attention_keeps_an_fp32_copy_of_the_scores(models):
    """Mistral 7B int4, batch 8 x 2,048 (the AutoAWQ README's row): QuantAttentionFused.forward's
    F.softmax(scores.float()) holds the 16-bit scores, their fp32 copy and the fp32 softmax, 10 bytes per
    head and position, + the (1, 1, seq, seq) mask counted per sequence (2 bytes); per token the block's
    input and norm output (2 h), xqkv (q + 2 kv), the rotated xq and xk, keys_store (kv) and the keys and
    values repeat_interleave copies to every head (2 q): 2 x (2 x 4,096 + 4 x 4,096 + 4 x 1,024) bytes;
    and the RoPE tables, 8 x 32 x 128 bytes per token (exact at batch 1, an upper bound above)."""
    (row,) = rows(models, dict(model="mistral-7b", precision="int4", batch=8, seq=2048, attention="eager",
                               int4_kernel="autoawq_fused"))
    tokens = 8 * 2048
    per_token = 2 * (2 * H7 + 4 * H7 + 4 * KVD7) + 8 * L7 * 128      # 57,344 + 32,768
    per_seq = (2 + 8) * 32 + 2                                         # 322
    kv = 2 * L7 * KVD7 * 2 * tokens
    expected = row.weights_bytes + kv + per_token * tokens + per_seq * tokens * 2048
    assert row.attention_phase_bytes == pytest.approx(expected, rel=1e-12)
    assert row.peak_phase == "attention"


def test_autoawq_fused_mlp_keeps_four_f_wide_tensors(models):
    """QuantLlamaMLP.forward keeps gate_output and up_output beside SiLU's output and the product: one
    f-wide tensor more per token than transformers' LlamaMLP, and the RoPE tables."""
    fused, plain = rows(models, dict(model="mistral-7b", precision="int4", batch=2, seq=256,
                                     int4_kernel="autoawq_fused"),
                        dict(model="mistral-7b", precision="int4", batch=2, seq=256))
    tokens = 2 * 256
    assert fused.prefill_phase_bytes - plain.prefill_phase_bytes == pytest.approx(
        (2 * F7 + 8 * L7 * 128) * tokens, rel=1e-12)


# ---- AutoGPTQ's exllama kernels, bitsandbytes ------------------------------------------------------

def test_exllama_keeps_one_fp16_temp_dq_of_the_largest_linear(models):
    """autogptq_post_init: temp_dq = torch.zeros((1, max qweight.numel() * 8), fp16); Llama 2 13B's largest
    quantized linear is 5,120 x 13,824 (gate, up, down): 141,557,760 bytes in every inference phase."""
    exl, plain = rows(models, dict(model="llama-2-13b", precision="int4", seq=513, attention="eager",
                                   int4_kernel="exllama"),
                      dict(model="llama-2-13b", precision="int4", seq=513, attention="eager"))
    temp_dq = H13 * F13 * 2
    assert temp_dq == 141_557_760
    for phase in ("prefill", "logits", "attention"):
        assert getattr(exl, f"{phase}_phase_bytes") - getattr(plain, f"{phase}_phase_bytes") == temp_dq


def test_a_bitsandbytes_prefill_dequantizes_the_largest_weight(models):
    """bitsandbytes 0.41.1 matmul_4bit: more than one token goes through MatMul4Bit, which dequantizes the
    whole weight to fp16 for F.linear: Llama 2 13B nf4, 1 x 513 tokens: the prefill is the weights + the
    KV cache + transformers' layer working set (4 h + 3 f at 2 bytes per token) + 5,120 x 13,824 x 2."""
    (row,) = rows(models, dict(model="llama-2-13b", precision="nf4", seq=513))
    tokens = 513
    kv = 2 * L13 * H13 * 2 * tokens
    work = 2 * (4 * H13 + 3 * F13) * tokens
    assert row.prefill_phase_bytes == pytest.approx(row.weights_bytes + kv + work + H13 * F13 * 2, rel=1e-12)


def test_bitsandbytes_without_double_quant_keeps_an_fp32_absmax_per_64(models):
    """bnb_double_quant off: 4 + 32/64 = 4.5 bits per linear weight against double quantization's
    4 + 8/64 + 32/16,384 = 4.127: 0.373 bits x Llama 2 13B's 12,687,769,600 linear weights
    (40 x (4 x 5,120^2 + 3 x 5,120 x 13,824)), for an nf4 inference row and a QLoRA base alike."""
    linear = L13 * (4 * H13 * H13 + 3 * H13 * F13)
    assert linear == 12_687_769_600
    off, on = rows(models, dict(model="llama-2-13b", precision="nf4", bnb_double_quant="off"),
                   dict(model="llama-2-13b", precision="nf4"))
    assert off.weights_bytes - on.weights_bytes == pytest.approx(linear * (4.5 - 4.127) / 8, rel=1e-9)
    qlora = dict(model="llama-2-13b", task="train", method="qlora", precision="bf16", batch=1, seq=512)
    q_off, q_on = rows(models, dict(qlora, bnb_double_quant="off"), qlora)
    assert q_off.weights_bytes - q_on.weights_bytes == pytest.approx(linear * (4.5 - 4.127) / 8, rel=1e-9)
    assert q_on.bnb_double_quant == "on"  # every recipe's default: the engine's nf4 as before


# ---- transformers before 4.41 / 4.46 ------------------------------------------------------------

def test_per_layer_rotary_caches_in_every_phase(models):
    """rope_cache layers: each layer's LlamaRotaryEmbedding keeps cos_cached and sin_cached of
    max_position_embeddings (4,096) x head_dim (128) in the load dtype: 40 x 2 x 4,096 x 128 x 2 =
    83,886,080 bytes for Llama 2 13B in fp16, in inference and training phases alike."""
    table = L13 * 2 * 4096 * 128 * 2
    assert table == 83_886_080
    layers, none = rows(models, dict(model="llama-2-13b", precision="fp16", seq=513, rope_cache="layers"),
                        dict(model="llama-2-13b", precision="fp16", seq=513))
    for phase in ("prefill", "logits"):
        assert getattr(layers, f"{phase}_phase_bytes") - getattr(none, f"{phase}_phase_bytes") == table
    train = dict(model="llama-2-13b", task="train", method="lora", precision="bf16", batch=1, seq=512)
    t_layers, t_none = rows(models, dict(train, rope_cache="layers"), train)
    for phase in ("forward", "backward", "optimizer"):
        assert getattr(t_layers, f"{phase}_phase_bytes") - getattr(t_none, f"{phase}_phase_bytes") == table


def test_an_old_transformers_forward_upcasts_every_positions_logits(models):
    """logits_upcast model on an inference row (transformers < 4.46, LlamaForCausalLM.forward's
    `logits = logits.float()`): every position's fp32 copy beside the fp16 logits, 4 x 32,000 bytes per
    token more in the logits phase (prefill_logits all)."""
    old, new = rows(models, dict(model="llama-2-13b", precision="fp16", batch=2, seq=513, prefill_logits="all",
                                 logits_upcast="model"),
                    dict(model="llama-2-13b", precision="fp16", batch=2, seq=513, prefill_logits="all"))
    assert old.logits_phase_bytes - new.logits_phase_bytes == 4 * V * 2 * 513


# ---- where the mechanisms do not apply, nothing moves -----------------------------------------------

@pytest.mark.parametrize("base, switch", [
    (dict(model="llama-2-13b", precision="fp16"), dict(int4_kernel="exllama")),          # not int4
    (dict(model="llama-2-13b", precision="nf4"), dict(int4_kernel="autoawq_fused")),     # not int4
    (dict(model="llama-3-8b", task="train", method="lora", precision="bf16", seq=512), dict(int4_kernel="autoawq_fused")),
    (dict(model="llama-2-13b", precision="int4"), dict(bnb_double_quant="off")),         # not bitsandbytes
    (dict(model="llama-3-8b", task="train", method="lora", precision="bf16", base_precision="int8", seq=512),
     dict(bnb_double_quant="off")),                                                      # an LLM.int8 base
    (dict(model="llama-2-13b", precision="fp16", seq=513), dict(logits_upcast="loss")),  # the default, explicit
    (dict(model="llama-2-13b", precision="int4"), dict(int4_kernel="none", rope_cache="none")),
])
def test_rows_the_mechanism_does_not_apply_to_are_unchanged(models, base, switch):
    with_switch, without = rows(models, {**base, **switch}, base)
    for column in ("weights_bytes", "kv_cache_bytes", "workspace_bytes", "peak_bytes", "peak_phase"):
        assert with_switch[column] == without[column], column


def test_the_fused_load_is_in_the_fit_and_in_the_gpus_needed(models, gpus):
    """The load phase is a phase like the others: on a 10 GB card Llama 2 13B int4 fits at 64 tokens,
    but not with the fused QKV built beside the originals; the fit, the largest batch and the GPUs needed
    all say so."""
    base = dict(model="llama-2-13b", precision="int4", gpu="rtx-3080-10gb")
    fused, plain = rows(models, dict(base, int4_kernel="autoawq_fused"), base, gpus=gpus)
    assert fused.peak_phase == "load" and fused.peak_bytes > plain.peak_bytes
    assert bool(plain.fits) and plain.gpus_needed == 1 and plain.max_batch >= 1
    assert not bool(fused.fits) and fused.gpus_needed > 1 and fused.max_batch == 0
