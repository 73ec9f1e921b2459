"""How far the real peak may be from the estimate: a band around `peak_bytes`, per row.

The point estimate (`peak_bytes`) is what fits / gpus_needed / max_batch use. Where it has been
checked against measured runs (tests/data/measured_peaks.csv, docs/accuracy.md) its held-out
error sets the band; where a path could not be measured (bitsandbytes kernels need CUDA; ZeRO-1/2,
offload, tensor and pipeline parallelism, architectures no measured row has) the band is widened
by a stated allowance, and the reasons are named. The band applies to the tensors' part of the
peak (peak minus the runtime overhead, which is an assumption of its own: engine/constants.py):

    peak_low_bytes  = peak_bytes - tensors x uncertainty_low_pct / 100
    peak_high_bytes = peak_bytes + tensors x uncertainty_high_pct / 100

Vectorized: one numpy expression per reason over the whole result frame.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.estimate import estimate
from engine.scenarios import DEFAULTS

# ---- measured: the held-out error of the engine (docs/accuracy.md, benchmarks/accuracy_table.py) ----
# Fitted constants, named as such: set from the largest over- and underestimate on the held-out rows of
# tests/data/measured_peaks.csv (3% covered the first version's held-out rows outside its known misses;
# after issue 12's second round all 42 held-out rows are within 1.2%, docs/accuracy.md), kept at 3% for
# the configurations nobody measured (tests/test_uncertainty.py checks that every measured row's peak
# lies inside its band).
MEASURED_HIGH_PCT = 3.0   # the real peak may be up to this much above ours
MEASURED_LOW_PCT = 3.0    # ... or this much below

# ---- not measurable here: allowances (percent of the tensors' peak, added on the high side) ----
# bitsandbytes (QLoRA NF4 base, LLM.int8 / NF4 / int4 weights, 8-bit and paged optimizers): its
# kernels need CUDA, so no fake-tensor CPU run can execute them (docs/accuracy.md derives the
# terms from bitsandbytes' source). The allowance covers the dequantized 16-bit copy of one
# weight matrix per matmul (bnb.functional.dequantize_4bit in MatMul4Bit) and the blockwise
# quantization statistics, which the engine does not count separately.
BNB_HIGH_PCT = 5.0
# ZeRO-1/2 (DeepSpeed's buckets), CPU offload, tensor and pipeline parallelism: no measured row.
PARALLEL_HIGH_PCT = 10.0
# architectures without a measured row (MLA, attention sinks / expert biases, interleaved MoE,
# shared experts): the layer's own tensors are counted as for the measured families.
ARCH_HIGH_PCT = 10.0
# GGUF (llama.cpp) inference: compute buffers are llama.cpp's, not PyTorch's.
GGUF_HIGH_PCT = 10.0
# mixture-of-experts training: transformers' default grouped_mm experts hold T x k rows whatever the
# routing (measured); other experts implementations (eager per-expert loop, expert parallel
# capacity factors) depend on the routing's imbalance.
MOE_TRAIN_HIGH_PCT = 3.0
# ZeRO-3 / FSDP: measured with FSDP2 fully_shard on a fake process group (5 rows, within 0.5% after
# issue 12 modelled the root unit, one gathered layer and two reduce-scatter inputs,
# engine/components.py `_fsdp_gathered_params`); on a real process group the collectives overlap, so
# the prefetched next layer may be gathered too, and DeepSpeed ZeRO-3 keeps its own prefetch buckets
# (stage3_max_live_parameters): both sides.
ZERO3_PCT = 10.0

BNB_PRECISIONS = ("int8", "int4", "nf4")
BNB_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")
COLUMNS = ("peak_low_bytes", "peak_high_bytes", "uncertainty_low_pct", "uncertainty_high_pct", "uncertainty_reasons",
           "peak_padded_batch_bytes")


def _model_column(result: pd.DataFrame, models: pd.DataFrame, name: str, default) -> np.ndarray:
    """Each row's model's `name` (default where the model or the value is missing): one lookup
    of the models (tens of rows), then a take per row (a reindex per call cost more than the
    estimate of a one-row frame: every band reads some 30 model columns)."""
    if name not in models:
        return np.full(len(result), default)
    values = models[name].fillna(default).to_numpy()
    where = pd.Index(models["id"].to_numpy()).get_indexer(np.asarray(result["model"], dtype=object))
    picked = values[np.maximum(where, 0)] if len(values) else np.full(len(result), default)
    return np.where(where < 0, default, picked) if (where < 0).any() else picked


def padded_batch_extra_bytes(result: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Per row, how much more the tensors' peak holds if the batch is padded after all: for a training
    row asked unpadded or packed, the engine's own estimate of the same scenario with --padding padded
    and packing off, less the row's (engine/components.py counts that path: the mask and K/V repeated
    to every head per saving layer, `attention_seq_bytes`, and the masks checkpoint frames keep);
    0 elsewhere (a padded row holds them already; flash and eager attention are the same either way;
    inference builds no saved mask). Only those rows are estimated again."""
    n = len(result)
    col = lambda k, dflt: result[k].to_numpy() if k in result else np.full(n, dflt)  # noqa: E731
    asked_unpadded = (col("padding", "padded") != "padded") | (col("packing", "off") == "on")
    rows = np.flatnonzero((col("task", "train") == "train") & asked_unpadded)
    extra = np.zeros(n)
    if len(rows):
        tensors = lambda r: r["peak_bytes"].to_numpy(dtype=float) - r["runtime_overhead_bytes"].to_numpy(dtype=float)  # noqa: E731
        asked = result.iloc[rows][["model"] + [c for c in DEFAULTS if c in result]].reset_index(drop=True)
        padded = estimate(asked.assign(padding="padded", packing="off"), models)
        extra[rows] = np.nan_to_num(np.maximum(tensors(padded) - tensors(result.iloc[rows]), 0.0))
    return extra


def window_prefill_bytes(result: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Per inference row under kv_policy windowed, the keys and values beyond the window that a
    transformers prefill still holds in its sliding-window layers: DynamicSlidingWindowLayer.update
    (transformers 5.24 cache_utils.py lines 242-249) keeps `full_key_states[:, :, -sliding_window + 1:, :]`,
    a view whose storage is the whole torch.cat output, until the next update (measured: the
    gemma-2-9b prefill 2 x 8,192 held all 42 layers' keys and values at 8,192 tokens). From the
    row's own cache bytes: per layer and token = kv_cache_bytes / (batch x (full layers x seq +
    window layers x min(seq, window)))."""
    n = len(result)
    col = lambda k, dflt: result[k].to_numpy() if k in result else np.full(n, dflt)  # noqa: E731
    take = lambda k: _model_column(result, models, k, 0).astype(float)  # noqa: E731
    L, win_layers, window = take("num_layers"), take("sliding_window_layers"), take("sliding_window")
    b, s = col("batch", 1).astype(float), col("seq", 1).astype(float)
    windowed = (col("task", "train") != "train") & (col("kv_policy", "windowed") == "windowed") & (win_layers > 0) & (window > 0)
    kept = b * ((L - win_layers) * s + win_layers * np.minimum(s, window))
    per = np.where(windowed & (kept > 0), col("kv_cache_bytes", 0.0).astype(float) / np.maximum(kept, 1.0), 0.0)
    return np.nan_to_num(per * win_layers * b * np.maximum(s - window, 0.0))


def band(result: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """The uncertainty band of every row of an estimate() result (COLUMNS, same index)."""
    n = len(result)
    col = lambda k, d: result[k].to_numpy() if k in result else np.full(n, d)  # noqa: E731
    train = col("task", "train") == "train"
    method, precision = col("method", "full"), col("precision", "bf16")
    optimizer, base = col("optimizer", "adamw"), col("base_precision", "auto")
    zero, offload = col("zero", 0).astype(float), col("offload", "none")
    tp, pp = col("tp", 1).astype(float), col("pp", 1).astype(float)
    gpus = col("gpus", 1).astype(float)

    experts = _model_column(result, models, "num_experts", 0).astype(float)
    unmeasured_arch = ((_model_column(result, models, "kv_lora_rank", 0).astype(float) > 0)
                       | _model_column(result, models, "attention_sinks", False).astype(bool)
                       | _model_column(result, models, "expert_bias", False).astype(bool)
                       | (_model_column(result, models, "moe_layer_step", 1).astype(float) > 1)
                       | (_model_column(result, models, "shared_intermediate_size", 0).astype(float) > 0))
    bnb = ((train & ((method == "qlora") | np.isin(base, BNB_PRECISIONS) | np.isin(optimizer, BNB_OPTIMIZERS)))
           | (~train & np.isin(precision, BNB_PRECISIONS)))
    gguf = ~train & pd.Series(precision).astype(str).str.startswith(("q", "iq")).to_numpy() & ~np.isin(precision, BNB_PRECISIONS)
    parallel = (tp > 1) | (pp > 1) | (train & (offload != "none")) | (train & (gpus > 1) & ((zero == 1) | (zero == 2)))
    moe_train = train & (experts > 0)
    zero3 = train & (zero >= 3) & (gpus > 1)

    reasons = [
        (bnb, BNB_HIGH_PCT, "bitsandbytes kernels (CUDA only) not measured"),
        (parallel, PARALLEL_HIGH_PCT, "ZeRO-1/2, offload or tensor/pipeline parallelism not measured"),
        (unmeasured_arch, ARCH_HIGH_PCT, "architecture without a measured run"),
        (gguf, GGUF_HIGH_PCT, "llama.cpp compute buffers not measured"),
        (moe_train, MOE_TRAIN_HIGH_PCT, "mixture-of-experts routing imbalance (implementation-dependent)"),
        (zero3, ZERO3_PCT, "ZeRO-3/FSDP working set (FSDP2 measured within 10%)"),
    ]
    extra = np.zeros(n)
    text = np.full(n, "measured paths: held-out error", dtype=object)
    for cond, pct, label in reasons:
        extra = np.where(cond, np.maximum(extra, pct), extra)
        text = np.where(cond, text + "; " + label, text)
    high = MEASURED_HIGH_PCT + extra
    low = MEASURED_LOW_PCT + np.where(zero3, ZERO3_PCT, 0.0)
    peak = result["peak_bytes"].to_numpy(dtype=float)
    tensors = peak - (result["runtime_overhead_bytes"].to_numpy(dtype=float)
                      if "runtime_overhead_bytes" in result else 0.0)
    # rows asked unpadded: a padded batch's attention mask (and repeated K, V) on top
    padded = padded_batch_extra_bytes(result, models)
    window_kv = window_prefill_bytes(result, models)
    text = np.where(padded > 0, text + "; a padded batch (--padding padded): attention mask and repeated K/V", text)
    padded = padded + window_kv
    text = np.where(window_kv > 0, text + "; sliding-window layers: transformers keeps the whole prefill's K/V", text)
    return pd.DataFrame({
        "peak_low_bytes": peak - tensors * low / 100, "peak_high_bytes": peak + padded + tensors * high / 100,
        "uncertainty_low_pct": low, "uncertainty_high_pct": high, "uncertainty_reasons": text,
        # the same scenario along transformers' padded-batch path (attention mask and K/V repeated
        # to every head; the whole prefill's sliding-window K/V), which is also the path of every
        # fake-tensor measurement (docs/accuracy.md): the point estimate itself where the scenario
        # is padded already (the hf-based recipes' default, engine/stacks.py padding)
        "peak_padded_batch_bytes": peak + padded,
    }, index=result.index)


__all__ = ["band", "padded_batch_extra_bytes", "window_prefill_bytes", "COLUMNS", "MEASURED_HIGH_PCT", "MEASURED_LOW_PCT"]
