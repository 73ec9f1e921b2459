"""How far the real peak may be from the estimate: a band around `peak_bytes`, per row.

The point estimate is `peak_bytes`; the verdicts (fits, gpus_needed, max_batch, max_seq) are decided
on the band's high side in percent (issue 28: engine/margins.py, `safe_peak_bytes`). Where the
estimate has been checked against measured runs (tests/data/measured_peaks.csv and
tests/data/measured_loops.csv, docs/accuracy.md) the held-out error sets the band; where a path could not be measured (bitsandbytes kernels need CUDA; ZeRO-1/2,
offload, tensor and pipeline parallelism, architectures no measured row has) the band is widened
by a stated allowance, and the reasons are named. The band applies to the tensors' part of the
peak (peak minus the runtime overhead, which is an assumption of its own: engine/constants.py):

    peak_low_bytes  = peak_bytes - tensors x uncertainty_low_pct / 100
    peak_high_bytes = peak_bytes + tensors x uncertainty_high_pct / 100 (+ the other paths' bytes below)

Beside the percentages the high side holds what the same run needs along a path the scenario did
not ask: a padded batch for a row asked unpadded, a hand-written loop that keeps its outputs for a
row under the trainer's loop (--loop manual), a transformers prefill's whole sliding-window K/V for
a row asked windowed. Those are shown, with their reasons, but the verdicts follow the path asked.

Vectorized: one numpy expression per reason over the whole result frame.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.estimate import estimate
# The reasons and their percentages live in engine/margins.py (the executor decides its verdicts on
# the same high side); re-exported here under their old names.
from engine.margins import (
    BNB_HIGH_PCT, BNB_OPTIMIZERS, BNB_PRECISIONS, GGUF_HIGH_PCT, GGUF_PRECISIONS, MEASURED_HIGH_PCT,
    MEASURED_LOW_PCT, MOE_TRAIN_HIGH_PCT, PARALLEL_HIGH_PCT, ZERO3_PCT, frame_accessors, high_pct, low_pct, reasons,
)
from engine.frames import column_array, column_index, revalidate
from engine.scenarios import DEFAULTS

COLUMNS = ("peak_low_bytes", "peak_high_bytes", "uncertainty_low_pct", "uncertainty_high_pct", "uncertainty_reasons",
           "peak_padded_batch_bytes")


def _model_column(result: pd.DataFrame, models: pd.DataFrame, name: str, default) -> np.ndarray:
    """Each row's model's `name` (default where the model or the value is missing): one lookup
    of the models (tens of rows), then a take per row (a reindex per call cost more than the
    estimate of a one-row frame: every band reads some 30 model columns)."""
    if name not in models:
        return np.full(len(result), default)
    values = column_array(models, name, default)
    where = column_index(models, "id").get_indexer(np.asarray(result["model"], dtype=object))
    picked = values[np.maximum(where, 0)] if len(values) else np.full(len(result), default)
    return np.where(where < 0, default, picked) if (where < 0).any() else picked


def _path_rows(result: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose band holds another path's bytes: (asked unpadded or packed, under the trainer's
    loop), training rows only."""
    n = len(result)
    col = lambda k, dflt: result[k].to_numpy() if k in result else np.full(n, dflt)  # noqa: E731
    train = col("task", "train") == "train"
    asked_unpadded = (col("padding", "padded") != "padded") | (col("packing", "off") == "on")
    return np.flatnonzero(train & asked_unpadded), np.flatnonzero(train & (col("loop", "trainer") == "trainer"))


def path_extra_bytes(result: pd.DataFrame, models: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row, how much more the tensors' peak holds along a path the row did not ask, each from the
    engine's own estimate of the same scenario on that path, less the row's (0 elsewhere), in one
    estimate() call for both:
      padded: a training row asked unpadded or packed, estimated with --padding padded and packing off
        (engine/components.py counts that path: the mask and K/V repeated to every head per saving
        layer, `attention_seq_bytes`, and the masks checkpoint frames keep); a padded row holds them
        already; flash and eager attention are the same either way; inference builds no saved mask;
      kept (issue 28): a training row under the trainer's loop, estimated with --loop manual and
        use_cache auto: the logits and the KV cache a hand-written loop keeps through backward."""
    n = len(result)
    pad_rows, kept_rows = _path_rows(result)
    padded, kept = np.zeros(n), np.zeros(n)
    if not len(pad_rows) and not len(kept_rows):
        return padded, kept
    cols = ["model"] + [c for c in DEFAULTS if c in result]
    frames = [result.iloc[pad_rows][cols].assign(padding="padded", packing="off"),
              result.iloc[kept_rows][cols].assign(loop="manual", use_cache="auto")]
    other = estimate(pd.concat(frames, ignore_index=True), models)
    tensors = lambda r: r["peak_bytes"].to_numpy(dtype=float) - r["runtime_overhead_bytes"].to_numpy(dtype=float)  # noqa: E731
    t_other = tensors(other)
    k = len(pad_rows)
    if k:
        padded[pad_rows] = np.nan_to_num(np.maximum(t_other[:k] - tensors(result.iloc[pad_rows]), 0.0))
    if len(kept_rows):
        kept[kept_rows] = np.nan_to_num(np.maximum(t_other[k:] - tensors(result.iloc[kept_rows]), 0.0))
    return padded, kept


def padded_batch_extra_bytes(result: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Per row, how much more the tensors' peak holds if the batch is padded after all (path_extra_bytes)."""
    return path_extra_bytes(result.assign(loop="manual"), models)[0]  # (manual: no loop variant to estimate)


def window_prefill_bytes(result: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Per inference row under kv_policy windowed, the keys and values beyond the window that a
    transformers prefill still holds in its sliding-window layers: DynamicSlidingWindowLayer.update
    (transformers 5.24 cache_utils.py lines 242-249) keeps `full_key_states[:, :, -sliding_window + 1:, :]`,
    a view whose storage is the whole torch.cat output, until the next update (measured: the
    gemma-2-9b prefill 2 x 8,192 held all 42 layers' keys and values at 8,192 tokens). From the
    row's own cache bytes: per layer and token = kv_cache_bytes / (batch x (full layers x seq +
    window layers x min(seq, window)))."""
    revalidate(models)
    n = len(result)
    col = lambda k, dflt: result[k].to_numpy() if k in result else np.full(n, dflt)  # noqa: E731
    take = lambda k: _model_column(result, models, k, 0).astype(float)  # noqa: E731
    L, win_layers, window = take("num_layers"), take("sliding_window_layers"), take("sliding_window")
    b, s = col("batch", 1).astype(float), col("seq", 1).astype(float)
    # (a GGUF precision runs on llama.cpp, whose SWA cache does keep only the window)
    gguf = np.isin(np.asarray(col("precision", "bf16")).astype(str), GGUF_PRECISIONS)
    windowed = ((col("task", "train") != "train") & (col("kv_policy", "windowed") == "windowed") & (win_layers > 0)
                & (window > 0) & ~gguf)
    kept = b * ((L - win_layers) * s + win_layers * np.minimum(s, window))
    per = np.where(windowed & (kept > 0), col("kv_cache_bytes", 0.0).astype(float) / np.maximum(kept, 1.0), 0.0)
    return np.nan_to_num(per * win_layers * b * np.maximum(s - window, 0.0))


def band(result: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """The uncertainty band of every row of an estimate() result (COLUMNS, same index)."""
    revalidate(models)  # (its columns kept per table: one written into in place since is read again)
    n = len(result)
    mask, num = frame_accessors(result)
    found = reasons(mask, num, lambda k, d: _model_column(result, models, k, d))
    text = np.full(n, "measured paths: held-out error", dtype=object)
    for cond, _, label in found:
        text = np.where(cond, text + "; " + label, text)
    high = high_pct(found, n)
    low = low_pct(mask, num)
    peak = result["peak_bytes"].to_numpy(dtype=float)
    tensors = peak - (result["runtime_overhead_bytes"].to_numpy(dtype=float)
                      if "runtime_overhead_bytes" in result else 0.0)
    # rows asked unpadded: a padded batch's attention mask (and repeated K, V) on top; rows under the
    # trainer's loop: what a hand-written loop keeps (one estimate for both)
    padded, kept = path_extra_bytes(result, models)
    window_kv = window_prefill_bytes(result, models)
    text = np.where(padded > 0, text + "; a padded batch (--padding padded): attention mask and repeated K/V", text)
    padded = padded + window_kv
    text = np.where(window_kv > 0, text + "; sliding-window layers: transformers keeps the whole prefill's K/V", text)
    text = np.where(kept > 0, text + "; a hand-written loop keeping its outputs (--loop manual): logits and KV cache "
                    "through backward", text)
    return pd.DataFrame({
        "peak_low_bytes": peak - tensors * low / 100,
        "peak_high_bytes": peak + padded + kept + tensors * high / 100,
        "uncertainty_low_pct": low, "uncertainty_high_pct": high, "uncertainty_reasons": text,
        # the same scenario along transformers' padded-batch path (attention mask and K/V repeated
        # to every head; the whole prefill's sliding-window K/V), which is also the path of every
        # fake-tensor measurement (docs/accuracy.md): the point estimate itself where the scenario
        # is padded already (the hf-based recipes' default, engine/stacks.py padding)
        "peak_padded_batch_bytes": peak + padded,
    }, index=result.index)


__all__ = ["band", "padded_batch_extra_bytes", "window_prefill_bytes", "COLUMNS", "MEASURED_HIGH_PCT", "MEASURED_LOW_PCT",
           "BNB_HIGH_PCT", "PARALLEL_HIGH_PCT", "GGUF_HIGH_PCT", "MOE_TRAIN_HIGH_PCT", "ZERO3_PCT",
           "BNB_PRECISIONS", "BNB_OPTIMIZERS"]
