"""The scenario frame: its columns, their defaults and accepted values, and grid builders.

A scenario is one question ("Llama 2 7B, LoRA r=8, bf16, batch 4, seq 2048, on 1 GPU").
`normalize()` fills defaults and checks every column at once; a bad value raises
ValueError (one line) naming the value, the column and what is accepted. No per-row Python
loops: checks run on the unique values of each column.

Whatever a frame holds (negative, zero, huge, NaN, inf, booleans where numbers belong,
complex numbers, dates, lists, unknown strings, mixed types, duplicate columns) the result is
a clean frame or that ValueError, never another exception: a missing value (NaN / None / NA)
means "use the default"; numbers are checked as floats against their range *before* they are
cast to int64, so nothing overflows or wraps around.
"""

from __future__ import annotations

import math
import numbers
import reprlib

import numpy as np
import pandas as pd

from engine.constants import (
    GGUF_BITS,
    INFER_PRECISIONS,
    KV_BYTES,
    LINEAR_BITS,
    OPTIMIZERS,
    TRAIN_PRECISIONS,
)
from engine.params import parse_lora_targets

TASKS = ("train", "infer")
METHODS = ("full", "lora", "qlora", "freeze")
OFFLOADS = ("none", "optimizer", "all")
ZERO_STAGES = (0, 1, 2, 3)
# Frozen bases: the weight types (GGUF types approximate other low-bit bases by their bits)
BASE_PRECISIONS = ("auto",) + tuple(LINEAR_BITS) + tuple(GGUF_BITS)
KV_PRECISIONS = ("auto",) + tuple(KV_BYTES)
PREFILL_LOGITS = ("last", "all")

# Column -> default. `gpu` empty means "no GPU chosen" (no fit columns for that row).
DEFAULTS: dict[str, object] = {
    "task": "train",
    "method": "full",
    "precision": "bf16",
    "optimizer": "adamw",
    "batch": 1,
    "seq": 2048,
    "grad_checkpointing": False,
    "lora_rank": 8,
    "lora_targets": "q_proj,v_proj",
    "freeze_layers": 2,
    "zero": 0,
    "offload": "none",
    "gpus": 1,
    "tp": 1,
    "pp": 1,
    "base_precision": "auto",
    "kv_precision": "auto",
    "prefill_logits": "last",
    "headroom": 0.0,
    "allow_long_context": False,
    "gpu": "",
}

CHOICES: dict[str, tuple] = {
    "task": TASKS,
    "method": METHODS,
    "optimizer": OPTIMIZERS,
    "offload": OFFLOADS,
    "base_precision": BASE_PRECISIONS,
    "kv_precision": KV_PRECISIONS,
    "prefill_logits": PREFILL_LOGITS,
}

INT_COLUMNS = ("batch", "seq", "lora_rank", "freeze_layers", "zero", "gpus", "tp", "pp")
BOOL_COLUMNS = ("grad_checkpointing", "allow_long_context")
CATEGORY_COLUMNS = ("model", "task", "method", "precision", "optimizer", "lora_targets", "offload",
                    "base_precision", "kv_precision", "prefill_logits", "gpu")
# Largest values we accept: beyond these the question is not about a real system.
LIMITS = {"batch": 1_000_000, "seq": 100_000_000, "lora_rank": 65_536, "freeze_layers": 10_000,
          "gpus": 1_000_000, "tp": 4096, "pp": 4096}


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 4
_REPR.maxlevel = 2


def show(value) -> str:
    """Short one-line repr for messages: numpy scalars as Python values, long text clipped."""
    if isinstance(value, np.generic):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    return _REPR.repr(value)


def _bad(column: str, value, accepted: str) -> ValueError:
    return ValueError(f"{column} {show(value)} is not accepted; accepted: {accepted}")


def _as_category(series: pd.Series, column: str = "value") -> pd.Series:
    if isinstance(series.dtype, pd.CategoricalDtype):
        if len(series.cat.categories) == 0 or pd.api.types.infer_dtype(series.cat.categories, skipna=False) == "string":
            if series.isna().any():  # a missing value is the empty text, never a code of -1
                if "" not in series.cat.categories:
                    series = series.cat.add_categories([""])
                series = series.fillna("")
            return series
        series = series.astype(object)  # categories that are not text (numbers, bytes): as text
    try:
        text = series.astype("string")
    except (TypeError, ValueError):  # bytes that are not UTF-8, objects without a text form
        table = {v: v if isinstance(v, str) else str(v) for v in _unique_values(column, series, "text")}
        text = series.map(table).astype("string")
    return text.fillna("").astype("category")


def _fill_missing(series: pd.Series, default) -> pd.Series:
    """NaN / None / NA -> the column default (as object when the dtype cannot hold it)."""
    try:
        missing = series.isna()
    except (TypeError, ValueError):
        return series
    if not missing.any():
        return series
    if isinstance(series.dtype, pd.CategoricalDtype):
        if default not in series.cat.categories:
            series = series.cat.add_categories([default])
        return series.fillna(default)
    return series.astype(object).where(~missing, default)


def _unique_values(column: str, series: pd.Series, accepted: str) -> np.ndarray:
    """The distinct values of an object column; an unhashable one (a list, a dict) is refused."""
    try:
        return pd.unique(series.to_numpy(dtype=object))
    except TypeError:
        for value in series.to_numpy(dtype=object):  # error path only: find the culprit
            try:
                hash(value)
            except TypeError:
                raise _bad(column, value, accepted) from None
        raise


def _refuse_booleans(column: str, series: pd.Series, accepted: str) -> None:
    """True/False mixed into a column of numbers: distinct-value checks cannot see them (True
    == 1 to Python), so an object column that holds booleans is checked value by value (one C
    pass decides; only such mixed columns get the per-value look)."""
    kind = pd.api.types.infer_dtype(series, skipna=True)
    if kind == "boolean":
        raise _bad(column, series.iloc[0], accepted)
    if kind.startswith("mixed"):
        values = series.to_numpy(dtype=object)
        is_bool = np.fromiter((isinstance(v, (bool, np.bool_)) for v in values), dtype=bool, count=len(values))
        if is_bool.any():
            raise _bad(column, values[is_bool][0], accepted)


def _to_float(value) -> float:
    """One distinct value -> float (NaN when it is not a real number; inf when it is a huge one)."""
    if isinstance(value, (bool, np.bool_)):
        return math.nan
    if isinstance(value, str):
        try:
            return float(value.strip() or "nan")
        except (ValueError, OverflowError):
            return math.nan
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return math.nan


def _as_float(column: str, series: pd.Series, accepted: str) -> np.ndarray:
    """A numeric column as float64, refusing what is not a real number (bool, complex, dates,
    text that is not a number, objects) with a message naming the first such value."""
    if len(series) == 0:
        return np.zeros(0)
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) or dtype.kind in "mMc":
        raise _bad(column, series.iloc[0], accepted)
    if dtype.kind in "iuf":
        values = series.to_numpy(dtype=float, na_value=np.nan)
    else:
        _refuse_booleans(column, series, accepted)
        table = {v: _to_float(v) for v in _unique_values(column, series, accepted)}
        values = series.map(table).to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        raise _bad(column, series[bad].iloc[0], accepted)
    return values


def _whole_numbers(column: str, series: pd.Series, low: int, high: int, accepted: str | None = None) -> np.ndarray:
    """A column of whole numbers in [low, high] as int64 (range checked before the cast)."""
    accepted = accepted or f"a whole number from {low:,} to {high:,}"
    values = _as_float(column, series, accepted)
    bad = (values != np.floor(values)) | (values < low) | (values > high)
    if bad.any():
        raise _bad(column, series[bad].iloc[0], accepted)
    return values.astype(np.int64)


def normalize(scenarios: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of `scenarios` with every column present, typed and checked.

    Raises ValueError (one clear sentence) for the first bad value found.
    """
    if not isinstance(scenarios, pd.DataFrame):
        raise ValueError(f"scenarios must be a table (a pandas DataFrame) with one row per scenario, got {type(scenarios).__name__}")
    repeated = scenarios.columns[scenarios.columns.duplicated()]
    if len(repeated):
        raise ValueError(f"scenario column {show(repeated[0])} appears more than once; accepted: each column once")
    if "model" not in scenarios.columns:
        raise ValueError("scenarios need a 'model' column (a catalog model id)")
    out = scenarios.reset_index(drop=True).copy()
    for col, default in DEFAULTS.items():
        if col not in out.columns:
            out[col] = default
        else:
            out[col] = _fill_missing(out[col], default)

    for col in CATEGORY_COLUMNS:
        out[col] = _as_category(out[col], col)
        out[col] = out[col].cat.remove_unused_categories()

    known = set(models["id"])
    for value in out["model"].cat.categories:
        if value not in known:
            if value == "":
                row = int(np.flatnonzero(out["model"].astype(str).to_numpy() == "")[0])
                raise ValueError(f"model is missing in row {row + 1}; accepted: a catalog model id (python -m engine catalog models)")
            raise _bad("model", value, "a catalog model id (python -m engine catalog models), e.g. " + ", ".join(sorted(known)[:4]) + ", …")
    for col, accepted in CHOICES.items():
        for value in out[col].cat.categories:
            if value not in accepted:
                raise _bad(col, value, ", ".join(accepted))
    for value in out["lora_targets"].cat.categories:
        if len(str(value)) > 200:
            raise _bad("lora_targets", value, "'all' or a comma list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj")
        parse_lora_targets(value)

    lows = {"batch": 1, "seq": 1, "gpus": 1, "tp": 1, "pp": 1, "freeze_layers": 1, "lora_rank": 0, "zero": 0}
    highs = {**LIMITS, "zero": 3}
    for col in INT_COLUMNS:
        out[col] = _whole_numbers(col, out[col], lows[col], highs[col], "0, 1, 2 or 3" if col == "zero" else None)
    for col in BOOL_COLUMNS:
        col_values = out[col]
        if col_values.dtype != bool:
            if pd.api.types.is_bool_dtype(col_values.dtype):  # nullable boolean, NAs already filled
                out[col] = col_values.astype(bool)
                continue
            table = {v: _to_bool(v) for v in _unique_values(col, col_values, "true or false")}
            mapped = col_values.map(table)
            if mapped.isna().any():
                raise _bad(col, col_values[mapped.isna()].iloc[0], "true or false")
            out[col] = mapped.astype(bool)
    headroom = _as_float("headroom", out["headroom"], "a fraction in [0, 1), e.g. 0.1 for 10%")
    bad = (headroom < 0) | (headroom >= 1)
    if bad.any():
        raise _bad("headroom", out["headroom"][bad].iloc[0], "a fraction in [0, 1), e.g. 0.1 for 10%")
    out["headroom"] = headroom

    _check_combinations(out, models)
    return out


def _to_bool(value):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and value in (0, 1):
        return bool(value)  # 1, 1.0 and True are one value to Python: all read as true
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    return None


def _first(frame: pd.DataFrame, mask, column: str):
    return frame.loc[np.asarray(mask), column].iloc[0]


def _check_combinations(out: pd.DataFrame, models: pd.DataFrame) -> None:
    task = out["task"].astype(str).to_numpy()
    precision = out["precision"].astype(str).to_numpy()
    method = out["method"].astype(str).to_numpy()
    train = task == "train"
    infer = ~train

    bad = train & ~np.isin(precision, TRAIN_PRECISIONS)
    if bad.any():
        value = _first(out, bad, "precision")
        hint = " (quantized weights train only as a frozen base: use --method qlora, or --method lora with --base-precision)" if value in INFER_PRECISIONS else ""
        raise ValueError(f"precision {value!r} cannot be used for training{hint}; accepted for training: {', '.join(TRAIN_PRECISIONS)}")
    bad = infer & ~np.isin(precision, INFER_PRECISIONS)
    if bad.any():
        raise ValueError(f"precision {_first(out, bad, 'precision')!r} is not an inference precision; accepted: {', '.join(INFER_PRECISIONS)}")

    base = out["base_precision"].astype(str).to_numpy()
    bad = train & (method == "full") & (base != "auto")
    if bad.any():
        raise ValueError(f"base precision {_first(out, bad, 'base_precision')!r} needs a frozen base: full fine-tuning trains every weight; use --method lora or qlora, or leave --base-precision auto")
    bad = train & (method == "qlora") & np.isin(base, ("fp32", "bf16", "fp16"))
    if bad.any():
        raise ValueError(f"base precision {_first(out, bad, 'base_precision')!r} is not quantized; QLoRA needs a quantized base: nf4, int4, int8 or a GGUF type (or auto = nf4)")

    rank_bad = train & np.isin(method, ("lora", "qlora")) & (out["lora_rank"].to_numpy() < 1)
    if rank_bad.any():
        raise ValueError(f"lora rank {int(_first(out, rank_bad, 'lora_rank'))} is not accepted; accepted: a whole number >= 1 (e.g. 8, 16, 64)")

    zero = out["zero"].to_numpy()
    offload = out["offload"].astype(str).to_numpy()
    bad = (offload == "all") & (zero != 3) & train
    if bad.any():
        raise ValueError("offload 'all' (parameters too) needs ZeRO stage 3 (--zero 3); accepted with other stages: none, optimizer")
    bad = (offload != "none") & infer
    if bad.any():
        raise ValueError(f"offload {_first(out, bad, 'offload')!r} applies to training; accepted for inference: none")

    gpus = out["gpus"].to_numpy()
    split = out["tp"].to_numpy() * out["pp"].to_numpy()
    bad = gpus % split != 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"gpus {gpus[i]} is not a multiple of tp x pp = {split[i]}; accepted: gpus = tp x pp x data-parallel ranks")

    idx = pd.Index(models["id"]).get_indexer(out["model"].astype(str))
    ctx = models["max_context"].to_numpy()[idx]
    heads = models["num_heads"].to_numpy()[idx]
    layers = models["num_layers"].to_numpy()[idx]
    seq = out["seq"].to_numpy()
    bad = (seq > ctx) & ~out["allow_long_context"].to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"seq {seq[i]:,} is longer than {out['model'].iloc[i]}'s context of {ctx[i]:,} tokens; "
            f"accepted: 1 to {ctx[i]:,} (or allow it explicitly with --allow-long-context)"
        )
    tp = out["tp"].to_numpy()
    bad = heads % tp != 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"tp {tp[i]} does not divide {out['model'].iloc[i]}'s {heads[i]} attention heads; accepted: a divisor of {heads[i]}")
    pp = out["pp"].to_numpy()
    bad = pp > layers
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"pp {pp[i]} exceeds {out['model'].iloc[i]}'s {layers[i]} layers; accepted: 1 to {layers[i]}")


def grid(**axes) -> pd.DataFrame:
    """Cross product of the given axes as a scenario frame (categorical text columns).

    grid(model=["llama-2-7b", "llama-3-8b"], method=["full", "lora"], batch=[1, 4])
    """
    names = list(axes)
    values = [list(v) if isinstance(v, (list, tuple, np.ndarray, pd.Index, pd.Series)) else [v] for v in axes.values()]
    sizes = [len(v) for v in values]
    total = int(np.prod(sizes)) if sizes else 0
    columns = {}
    repeat_after = total
    for name, vals, size in zip(names, values, sizes):
        repeat_after //= size
        codes = np.repeat(np.tile(np.arange(size), total // (size * repeat_after)), repeat_after)
        arr = np.asarray(vals, dtype=object)
        if all(isinstance(v, str) for v in vals):
            columns[name] = pd.Categorical.from_codes(codes, categories=pd.Index(vals).unique()) if len(set(vals)) == len(vals) else pd.Categorical(arr[codes])
        else:
            columns[name] = np.asarray(vals)[codes]
    return pd.DataFrame(columns)


def product(*frames: pd.DataFrame) -> pd.DataFrame:
    """Cross product of several small frames (e.g. workloads x GPUs)."""
    result = frames[0]
    for other in frames[1:]:
        left = result.loc[result.index.repeat(len(other))].reset_index(drop=True)
        right = other.iloc[np.tile(np.arange(len(other)), len(result))].reset_index(drop=True)
        result = pd.concat([left, right], axis=1)
    return result


__all__ = ["DEFAULTS", "CHOICES", "normalize", "grid", "product"]
