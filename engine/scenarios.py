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
    BASE_ONLY_BITS,
    GGUF_FILE_PRECISIONS,
    GGUF_BITS,
    INFER_PRECISIONS,
    KV_BYTES,
    LINEAR_BITS,
    OPTIMIZERS,
    TRAIN_PRECISIONS,
)
import engine.rules as rules
from engine.categories import dtype as category_dtype
from engine.frames import (
    column,
    column_array,
    column_categories,
    column_index,
    column_values,
    frame_memo,
    prime,
    revalidate,
)
from engine.params import hybrid_unmodelled_by_method, parse_lora_targets, unmodelled_rows
from engine.stacks import DEFAULT_RECIPE, DPO_NO_ADAPTER_COPY, DPO_NO_PRECOMPUTED, DPO_RECIPES, RECIPE_NAMES, SWITCHES

TASKS = ("train", "infer")
METHODS = ("full", "lora", "qlora", "freeze")
OFFLOADS = ("none", "optimizer", "all")
ZERO_STAGES = (0, 1, 2, 3)
# Frozen bases: the weight types (GGUF types approximate other low-bit bases by their bits)
# The 2026 checkpoint formats (fp8, nvfp4, mxfp4, GGUF mxfp4_moe: issue 27) are inference weights
# only: transformers trains gpt-oss from its MXFP4 checkpoint dequantized (Mxfp4Config(dequantize=True)),
# and no peft/bitsandbytes path keeps an fp8 or fp4 base frozen in those bits (not modelled).
_NOT_BASES = ("fp8", "nvfp4", "mxfp4", "mxfp4_moe", "nvfp4_gguf")
BASE_PRECISIONS = ("auto",) + tuple(p for p in tuple(LINEAR_BITS) + tuple(GGUF_BITS) if p not in _NOT_BASES) \
    + tuple(BASE_ONLY_BITS)
KV_PRECISIONS = ("auto",) + tuple(KV_BYTES)
PREFILL_LOGITS = ("last", "all")
# How the KV cache keeps layers that are not plain full attention (issue 15); 'auto' is decided
# in engine/rules.py. windowed: sliding-window layers keep at most their window (llama.cpp's SWA
# cache, transformers' sliding-window cache), MLA its latent; full: every layer at the whole
# sequence, MLA as per-head k and v (transformers' DeepseekV3 cache); latent: MLA's latent,
# sliding-window layers at the whole sequence (vLLM's paged allocator reserving full length).
KV_POLICIES = ("auto", "windowed", "full", "latent")
# The training objective: sft (next-token cross-entropy, every figure the engine gave before) or dpo (direct
# preference optimization: a chosen and a rejected sequence per pair in one forward, a reference model; `batch`
# counts pairs). engine/components.py dpo_parts, docs/stacks.md "DPO".
OBJECTIVES = ("sft", "dpo")

# Column -> default. `gpu` empty means "no GPU chosen" (no fit columns for that row).
DEFAULTS: dict[str, object] = {
    "task": "train",
    "method": "full",
    "precision": "bf16",
    "optimizer": "adamw",
    "batch": 1,
    "seq": 0,  # 0 = auto (engine/rules.py): 2,048, or the model's context if shorter
    "grad_checkpointing": False,
    "lora_rank": 8,
    "lora_targets": "q_proj,v_proj",
    # LoRA dropout probability: peft 0.21.2 tuners/lora/config.py LoraConfig `lora_dropout: float =
    # field(default=0.0)` (line 653); read by lora / qlora rows only (engine/memory.py layer_activation_bytes)
    "lora_dropout": 0.0,
    "freeze_layers": 2,
    "zero": 0,
    "offload": "none",
    "gpus": 1,
    "tp": 0,  # 0 = auto (engine/rules.py): decided from the task, GPUs, heads and layers
    "pp": 0,
    # expert parallel (issue 15): 1 = a mixture-of-experts model's experts split like every other
    # weight (by tp); > 1: the routed experts spread whole over ep GPUs of each pipeline stage
    "ep": 1,
    # context parallel (issue 27): the sequence split over cp GPUs, each holding seq / cp of every
    # sequence's tokens (torch's context_parallel, ring attention); gpus = data x tp x pp x cp
    "cp": 1,
    "base_precision": "auto",
    "kv_precision": "auto",
    "kv_policy": "auto",
    "prefill_logits": "last",
    # 10% of each GPU kept free by default (issue 14): an answer at 97-99.8% of memory is not a
    # plan anyone can run (allocator spikes, a longer prompt); stated on every surface, changeable.
    "headroom": 0.1,
    "allow_long_context": False,
    "gpu": "",
    # the software stack (issue 13, engine/stacks.py): a recipe and its switches, each 'auto' =
    # as the recipe sets it (engine/rules.py); recipe 'hf' with every switch 'auto' is the stack
    # the engine always modelled (transformers + peft defaults)
    "recipe": DEFAULT_RECIPE,
    **{switch: "auto" for switch in SWITCHES},
    # GaLore's projection rank (issue 27): 0 = the recipe's (engine/rules.py; engine/constants.py GALORE_RANK)
    "galore_rank": 0,
    # the training objective (sft: every figure as before; dpo: preference pairs, a reference model)
    "objective": "sft",
}

CHOICES: dict[str, tuple] = {
    "task": TASKS,
    "method": METHODS,
    "optimizer": OPTIMIZERS,
    "offload": OFFLOADS,
    "base_precision": BASE_PRECISIONS,
    "kv_precision": KV_PRECISIONS,
    "kv_policy": KV_POLICIES,
    "prefill_logits": PREFILL_LOGITS,
    "recipe": RECIPE_NAMES,
    **SWITCHES,
    "objective": OBJECTIVES,
}

INT_COLUMNS = ("batch", "seq", "lora_rank", "freeze_layers", "zero", "gpus", "tp", "pp", "ep", "cp", "galore_rank")
BOOL_COLUMNS = ("grad_checkpointing", "allow_long_context")
# The fractions: each accepted in [0, 1) (a headroom of 1 leaves nothing; peft refuses no dropout of 1,
# but p = 1 zeroes every adapter's input: no training), with the words of its error message
FRACTION_COLUMNS = {"headroom": "a fraction in [0, 1), e.g. 0.1 for 10%",
                    "lora_dropout": "a probability in [0, 1), e.g. 0.05 or 0.1 (peft's lora_dropout; 0 = none)"}
CATEGORY_COLUMNS = ("model", "task", "method", "precision", "optimizer", "lora_targets", "offload",
                    "base_precision", "kv_precision", "kv_policy", "prefill_logits", "gpu", "recipe") + tuple(SWITCHES) \
    + ("objective",)
# Largest values we accept: beyond these the question is not about a real system.
LIMITS = {"batch": 1_000_000, "seq": 100_000_000, "lora_rank": 65_536, "freeze_layers": 10_000,
          "gpus": 1_000_000, "tp": 4096, "pp": 4096, "ep": 4096, "cp": 4096, "galore_rank": 65_536}


# The one description of the whole-number columns: (lowest, highest) accepted. The CLI's flags,
# the dashboard's widgets and URL, and the catalog's reference scenarios all take their bounds
# from here (0 in seq, tp and pp means "decide": engine/rules.py).
INT_RANGES = {"batch": (1, LIMITS["batch"]), "seq": (0, LIMITS["seq"]), "lora_rank": (0, LIMITS["lora_rank"]),
              "freeze_layers": (1, LIMITS["freeze_layers"]), "zero": (0, 3), "gpus": (1, LIMITS["gpus"]),
              "tp": (0, LIMITS["tp"]), "pp": (0, LIMITS["pp"]), "ep": (1, LIMITS["ep"]), "cp": (1, LIMITS["cp"]),
              "galore_rank": (0, LIMITS["galore_rank"])}
AUTO_COLUMNS = frozenset({"seq", "tp", "pp", "galore_rank"})
PRECISIONS = tuple(dict.fromkeys(TRAIN_PRECISIONS + INFER_PRECISIONS))


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


def closest_ids(value, known, n: int = 3) -> list[str]:
    """The catalog ids a mistyped `value` most likely meant, best first (at most n): the same id in another case,
    else the ids that begin with it or hold it ('h100': the three H100 cards), else difflib's closest spellings
    ('llama3.1-8b': llama-3.1-8b). Empty when nothing is close."""
    import difflib
    ids = sorted({str(k) for k in known})
    text = str(value).strip().lower()
    if not text:
        return []
    same = [k for k in ids if k.lower() == text]
    if same:
        return same[:n]
    holding = [k for k in ids if k.lower().startswith(text)] + [k for k in ids if text in k.lower() and not
                                                                 k.lower().startswith(text)]
    if holding:
        return holding[:n]
    lower = {k.lower(): k for k in ids}
    return [lower[k] for k in difflib.get_close_matches(text, list(lower), n=n, cutoff=0.6)]


def did_you_mean(value, known) -> str:
    """'; did you mean 'x'?' (or 'x', 'y' or 'z') for an unknown catalog id, '' when nothing is close: the end of an
    unknown-id message, so the user sees the id they meant beside what is accepted."""
    found = closest_ids(value, known)
    if not found:
        return ""
    quoted = [repr(k) for k in found]
    return "; did you mean " + (", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]) + "?"


def _bad(column: str, value, accepted: str) -> ValueError:
    return ValueError(f"{column} {show(value)} is not accepted; accepted: {accepted}")


def _as_category(series: pd.Series, column: str = "value") -> pd.Series:
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.array.categories  # (the Categorical's own: no accessor Series per call)
        if len(cats) == 0 or _text_categories(cats):
            if (np.asarray(series.array.codes) < 0).any():  # a missing value is the empty text, never a code of -1
                if "" not in series.cat.categories:
                    series = series.cat.add_categories([""])
                series = series.fillna("")
            return series
        series = series.astype(object)  # categories that are not text (numbers, bytes): as text
    elif len(series) <= _SMALL_TEXT_ROWS and series.dtype.kind in "OT":
        small = _small_text_category(series)
        if small is not None:
            return small
    try:
        text = series.astype("string")
    except (TypeError, ValueError):  # bytes that are not UTF-8, objects without a text form
        table = {v: v if isinstance(v, str) else str(v) for v in _unique_values(column, series, "text")}
        text = series.map(table).astype("string")
    return text.fillna("").astype("category")


# A few rows of text (one scenario from the CLI, a what-if, a tier check): pandas' astype chain
# costs ~1 ms a column whatever the length, ten times this Python pass over the values.
_SMALL_TEXT_ROWS = 4096


def _small_text_category(series: pd.Series, fill: str = "") -> pd.Series | None:
    """_as_category's result for a short column of text (a missing value read as `fill`: "", or the column's default
    as _fill_missing would put it there first), typed as the astype chain types it (categories: sorted, dtype
    "string"); None when a value is not text."""
    values = [fill if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v for v in series.tolist()]
    if not all(type(v) is str for v in values):
        return None
    uniques = sorted(set(values))
    dtype = category_dtype(uniques, "string")
    position = {v: i for i, v in enumerate(uniques)}
    codes = np.fromiter((position[v] for v in values), dtype=np.int8 if len(uniques) < 128 else np.int32, count=len(values))
    return pd.Series(pd.Categorical.from_codes(codes, dtype=dtype), index=series.index, name=series.name)


def _text_categories(cats: pd.Index) -> bool:
    """Are a categorical's categories text (pandas' infer_dtype "string"), read from the Index's dtype where it
    says so (a string dtype: ~1 us, where infer_dtype walks the values)."""
    if isinstance(cats.dtype, pd.StringDtype):
        return True
    return pd.api.types.infer_dtype(cats, skipna=False) == "string"


def _fill_missing(series: pd.Series, default) -> pd.Series:
    """NaN / None / NA -> the column default (as object when the dtype cannot hold it)."""
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "iub":  # numpy ints and bools hold no missing value
        return series
    if isinstance(series.dtype, pd.CategoricalDtype) and not (np.asarray(series.array.codes) < 0).any():
        return series  # (a categorical's missing values are its codes of -1: no pandas isna per column)
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


def scenario_frame(scenario: dict) -> pd.DataFrame:
    """pd.DataFrame([scenario]) typed as normalize types it: a text value as a one-category categorical, a whole
    number as int64, a number as float64, a flag as bool; anything else as pandas reads it. normalize() gives the
    same frame for either (tests/test_frames.py), from this one without the ~1 ms a column of typing text: one
    sidebar scenario of every column normalized in ~8 ms where pd.DataFrame([...]) and its typing took ~11."""
    columns = {}
    for key, value in scenario.items():
        if isinstance(value, str):
            columns[key] = pd.Categorical.from_codes(np.zeros(1, dtype=np.int8), dtype=category_dtype([value], "string"))
        elif isinstance(value, (bool, np.bool_)):
            columns[key] = np.array([bool(value)])
        elif isinstance(value, (int, np.integer)) and -2**63 <= value < 2**63:
            columns[key] = np.array([value], dtype=np.int64)
        elif isinstance(value, (float, np.floating)):
            columns[key] = np.array([value], dtype=np.float64)
        else:
            columns[key] = pd.Series([value])
    return pd.DataFrame(columns, index=pd.RangeIndex(1), copy=False)


def normalize(scenarios: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of `scenarios` with every column present, typed and checked.

    Raises ValueError (one clear sentence) for the first bad value found.
    """
    out = normalize_columns(scenarios, models)
    check_combinations(out, models)
    return out


def _constant_category(n: int, value: str) -> pd.Categorical:
    """A column of one text value, typed exactly as `_as_category` types a filled-in default."""
    if n == 0:
        return _as_category(pd.Series([], dtype=object).astype("string")).array
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), dtype=category_dtype([value], "string"))


def _drop_unused(series: pd.Series) -> pd.Series:
    """series.cat.remove_unused_categories(), without its sort of every code when (as in a
    grid) every category is used: a sample of rows, else one pass over the codes, decides."""
    k = len(series.array.categories)
    codes = np.asarray(series.array.codes)  # (the Categorical's own: no accessor Series per call)
    if k and len(codes) and codes.min() >= 0:
        used = np.zeros(k, dtype=bool)
        used[codes[:: max(1, len(codes) // 4096)]] = True  # every category among a few rows: all used
        if not used.all():
            used[codes] = True
        if used.all():
            return series
    return series.cat.remove_unused_categories()


def _ints(column: str, series, low: int, high: int, accepted: str | None, ranges: dict):
    """`_whole_numbers` for a column that already holds integers in range (the usual case): a
    min / max look instead of a float round trip (kept in `ranges`); anything else takes the
    checking path."""
    if isinstance(series, pd.Series) and len(series) and series.dtype.kind in "iu":
        values = series.to_numpy()
        least, most = values.min(), values.max()
        if least >= low and most <= high:
            ranges[column] = (int(least), int(most))
            return series if series.dtype == np.int64 else values.astype(np.int64)
    return _whole_numbers(column, series, low, high, accepted)


def normalize_columns(scenarios: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """Every column present, typed and checked on its own (combinations: `check_combinations`).

    Checks run on distinct values (categories) or min / max, never row by row; a column that
    is already typed (categorical text, int64, bool, float) is kept as it is, not copied.
    """
    return _normalize_columns(scenarios, models)[0]


def _normalize_columns(scenarios: pd.DataFrame, models: pd.DataFrame, columns=None) -> tuple[pd.DataFrame, dict]:
    """normalize_columns(), and what it learnt on the way: {column: (min, max)} of the integer
    columns it checked and of those it filled with their default (min = max).
    columns: an engine.buffers.Columns for the columns it fills in (None: plain arrays)."""
    if not isinstance(scenarios, pd.DataFrame):
        raise ValueError(f"scenarios must be a table (a pandas DataFrame) with one row per scenario, got {type(scenarios).__name__}")
    repeated = scenarios.columns[scenarios.columns.duplicated()]
    if len(repeated):
        raise ValueError(f"scenario column {show(repeated[0])} appears more than once; accepted: each column once")
    if "model" not in scenarios.columns:
        raise ValueError("scenarios need a 'model' column (a catalog model id)")
    revalidate(models)  # (the models' columns kept per table: one written into in place since is read again)
    src = scenarios.reset_index(drop=True)
    n = len(src)
    out = {col: src[col] for col in src.columns}  # Series: copy-on-write keeps the caller's frame intact
    ranges = {}
    typed = set()  # the text columns made categorical already (the short ones, with their default filled in)
    for col, default in DEFAULTS.items():
        if col not in out:
            ranges[col] = (default, default)
            if col in CATEGORY_COLUMNS:
                out[col] = _constant_category(n, default)
            else:
                dtype = np.float64 if col in FRACTION_COLUMNS else bool if isinstance(default, bool) else np.int64
                out[col] = columns.full(default, dtype) if columns is not None else np.full(n, default, dtype=dtype)
        elif col in CATEGORY_COLUMNS and n <= _SMALL_TEXT_ROWS and out[col].dtype.kind in "OT" \
                and not isinstance(out[col].dtype, pd.CategoricalDtype) \
                and (small := _small_text_category(out[col], fill=default)) is not None:
            out[col] = small.array  # (a short text column: its missing cells the default and its categories in one pass)
            typed.add(col)
        else:
            out[col] = _fill_missing(out[col], default)

    present = set(src.columns)
    for col in CATEGORY_COLUMNS:
        if col in present and col not in typed:  # (a typed one's categories are the values it holds)
            out[col] = _drop_unused(_as_category(out[col], col))

    def categories(col):
        values = out[col]
        return values.categories if isinstance(values, pd.Categorical) else values.cat.categories

    known = set(models["id"])
    for value in categories("model"):
        if value not in known:
            if value == "":
                row = int(np.flatnonzero(pd.Series(out["model"]).astype(str).to_numpy() == "")[0])
                raise ValueError(f"model is missing in row {row + 1}; accepted: a catalog model id (python -m engine catalog models)")
            hint = did_you_mean(value, known)
            raise _bad("model", value, "a catalog model id (python -m engine catalog models)"
                       + (hint or ", e.g. " + ", ".join(sorted(known)[:4]) + ", …"))
    for col, accepted in CHOICES.items():
        for value in categories(col):
            if value not in accepted:
                raise _bad(col, value, ", ".join(accepted) + did_you_mean(value, accepted))  # 'LoRA': did you mean 'lora'?
    for value in categories("lora_targets"):
        if len(str(value)) > 200:
            raise _bad("lora_targets", value, "'all' or a comma list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj")
        parse_lora_targets(value)

    lows = {col: low for col, (low, _) in INT_RANGES.items()}
    highs = {col: high for col, (_, high) in INT_RANGES.items()}
    auto = AUTO_COLUMNS  # 0 = decided by engine/rules.py
    for col in INT_COLUMNS:
        if col in present:
            accepted = ("0, 1, 2 or 3" if col == "zero" else
                        f"a whole number from 1 to {highs[col]:,}, or 0 for auto" if col in auto else None)
            out[col] = _ints(col, out[col], lows[col], highs[col], accepted, ranges)
    for col in BOOL_COLUMNS:
        if col not in present:
            continue
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
    for col, accepted in FRACTION_COLUMNS.items():
        if col not in present:
            continue
        values = out[col]
        fast = values.dtype.kind == "f" and n and 0 <= values.min() and values.max() < 1  # NaN / inf fail this
        if not fast:
            fraction = _as_float(col, values, accepted)
            bad = (fraction < 0) | (fraction >= 1)
            if bad.any():
                raise _bad(col, values[bad].iloc[0], accepted)
            out[col] = fraction
        elif values.dtype != np.float64:
            out[col] = values.to_numpy(dtype=np.float64)
    rules.apply(out, models, ranges, columns, frozenset(DEFAULTS) - present)  # every default that depends on other columns, decided once
    # (a caller's column stays a Series: copy-on-write keeps the caller's frame and the result apart, where a bare
    # array of it, read-only, would leave the result's column read-only too)
    return prime(pd.DataFrame(out, index=pd.RangeIndex(n), copy=False), out), ranges


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


# Columns that only scale with the tokens of a micro-batch; every other column is part of a
# scenario's configuration (see `Configs`).
ROW_COLUMNS = ("batch", "seq")
CONFIG_COLUMNS = ("model",) + tuple(c for c in DEFAULTS if c not in ROW_COLUMNS)
# Below this many rows each row is its own configuration (nothing to share, no grouping cost).
_DEDUPE_MIN_ROWS = 64


def _small_codes(values, span: tuple | None = None, columns=None):
    """(codes in [0, k), k) of a column or array, or None when it holds one value only.
    span: the (min, max) of the values when already known. columns: where a new per-row
    array is written (an engine.buffers.Columns; None: a plain array)."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        values = values.array
    if isinstance(values, pd.Categorical):
        k = len(values.categories)
        # (the Categorical's own codes, no copy: nothing writes into them)
        return None if k <= 1 or (span and span[0] == span[1]) else (values.codes, k)
    arr = np.asarray(values)
    if len(arr) == 0 or (span and span[0] == span[1]):
        return None
    if arr.dtype == bool:
        return None if arr.all() or not arr.any() else (arr.view(np.int8), 2)
    low, high = span if span else (arr.min(), arr.max())
    if low == high:
        return None
    if arr.dtype.kind in "iu" and high - low < 1 << 16:
        new = (lambda: columns.empty(np.intp)) if columns is not None else (lambda: None)
        codes = np.subtract(arr, low, out=new(), dtype=np.intp)
        k = int(high - low) + 1
        if k > 64:  # few distinct values over a wide range (seq 256 ... 2048): renumber them
            present = np.zeros(k, dtype=bool)
            present[codes[:: max(1, len(codes) // 4096)]] = True  # the values of a few rows ...
            if not present[codes].all():  # ... are not all of them (a read per row is cheaper than a write)
                present[codes] = True
            renumber = np.cumsum(present) - 1
            codes, k = np.take(renumber, codes, out=new(), mode="clip"), int(present.sum())
        return codes, k
    codes, uniques = pd.factorize(arr)
    return codes, len(uniques)


def _group(parts: list, n: int, columns=None) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose codes agree in every part form one group: (group of each row, one row of
    each group). The codes are mixed into one integer key per row (in the narrowest integer
    type that holds it) and the keys present are marked in a table (no sort); very wide keys
    are renumbered by hashing."""
    span = 1
    for _, k in parts:
        span *= k
    if parts and span <= min(1 << 40, 4 * n + 4096):
        # the usual case: the mixed key (the same number in any integer type wide enough, as
        # no running span exceeds this one) built in place in intp, the type numpy indexes with
        new = (lambda: columns.empty(np.intp)) if columns is not None else (lambda: np.empty(n, dtype=np.intp))
        key = new()
        np.copyto(key, parts[0][0])
        for codes, k in parts[1:]:
            key *= k
            key += codes
        present = np.zeros(span, dtype=bool)
        present[key] = True
        if columns is not None:  # (scratch from the pool: a wide table is megabytes of fresh pages otherwise)
            ids = columns.empty(np.intp, length=span)
            np.copyto(ids, present)
        else:
            ids = present.astype(np.intp)
        np.cumsum(ids, out=ids)
        ids -= 1
        inv = np.take(ids, key, out=new(), mode="clip")
        rep = np.empty(int(ids[-1]) + 1, dtype=np.intp)
        rep[inv] = _arange(n)  # any row of a group stands for it
        return inv, rep
    key, span = None, 1
    for codes, k in parts:
        span *= k
        kind = np.int16 if span < 1 << 15 else np.int32 if span < 1 << 31 else np.int64
        codes = codes.astype(kind, copy=False)
        key = codes.copy() if key is None else key.astype(kind, copy=False) * kind(k) + codes
        if span > 1 << 40:  # keep the mixed key well inside int64
            key, uniques = pd.factorize(key)
            key, span = key.astype(np.int64), len(uniques)
    if key is None:
        return np.zeros(n, dtype=np.intp), np.zeros(1 if n else 0, dtype=np.intp)
    if span <= 4 * n + 4096:
        new = (lambda: columns.empty(np.intp)) if columns is not None else (lambda: np.empty(n, dtype=np.intp))
        if key.dtype != np.intp:  # numpy indexes fastest with intp
            wide = new()
            np.copyto(wide, key)
            key = wide
        present = np.zeros(span, dtype=bool)
        present[key] = True
        ids = np.cumsum(present) - 1
        inv = np.take(ids, key, out=new(), mode="clip")
        size = int(ids[-1]) + 1
    else:
        inv, uniques = pd.factorize(key)
        size = len(uniques)
    rep = np.empty(size, dtype=np.intp)
    rep[inv] = _arange(n)  # any row of a group stands for it
    return inv, rep


_ARANGE = np.arange(0, dtype=np.intp)


def _arange(n: int) -> np.ndarray:
    """np.arange(n) (intp), read-only and kept for the next call."""
    global _ARANGE
    ramp = _ARANGE
    if len(ramp) < n:
        ramp = np.arange(n, dtype=np.intp)
        ramp.flags.writeable = False
        _ARANGE = ramp
    return ramp[:n]


class View:
    """Per-group views of a normalized scenario frame's columns, one value per group, read
    at one row of each group (`rows`)."""

    def __init__(self, frame: pd.DataFrame, rows: np.ndarray):
        self.frame, self.rows, self.size = frame, rows, len(rows)
        self._cache: dict = {}

    def values(self, col: str) -> np.ndarray:
        key = ("values", col)
        if key not in self._cache:
            values = column_values(self.frame, col)
            if not isinstance(values, np.ndarray):
                values = column(self.frame, col).to_numpy()
            self._cache[key] = values[self.rows]
        return self._cache[key]

    def codes(self, col: str) -> np.ndarray:
        key = ("codes", col)
        if key not in self._cache:
            self._cache[key] = column_values(self.frame, col).codes[self.rows]  # (the Categorical's own codes, no copy)
        return self._cache[key]

    def categories(self, col: str) -> list:
        return list(column_categories(self.frame, col))  # (read once per frame: its columns do not change)

    def mask(self, col: str, *values) -> np.ndarray:
        """Is the (categorical) column one of `values`. Kept per (column, values): an estimate asks the same
        masks (method, task, precision, ...) ~100 times; callers combine them with `&` / `|`, never in place."""
        key = ("mask", col, values)
        found = self._cache.get(key)
        if found is None:
            hits = np.array([c in values for c in column_categories(self.frame, col)] + [False])
            found = self._cache[key] = hits[self.codes(col)]
            found.flags.writeable = False
        return found

    def lookup(self, col: str, table: dict, fill=np.nan) -> np.ndarray:
        """The (categorical) column mapped through a dict, as floats."""
        values = np.array([table.get(c, fill) for c in column_categories(self.frame, col)] + [fill], dtype=float)
        return values[self.codes(col)]

    def index_in(self, col: str, ids) -> np.ndarray:
        """The position of the (categorical) column's value in `ids` (-1: not there)."""
        ids = ids if isinstance(ids, pd.Index) else pd.Index(ids)
        found = ids.get_indexer(pd.Index(column_categories(self.frame, col), dtype=object).astype(str))
        return np.append(found, -1)[self.codes(col)]


class Configs(View):
    """The distinct configurations of a normalized scenario frame (every column but batch and
    seq): `inv[row]` is the row's configuration, `rep[config]` one of its rows.

    A sweep of a million rows holds a few ten thousand configurations (models x GPUs x
    methods x ...); what does not involve batch or seq is computed once per configuration and
    gathered to the rows (`take`): the very numbers a per-row evaluation gives. Coarser
    groupings (`coarser`: e.g. without the GPU) and a finer one (`split`: configuration x seq)
    serve the parts that depend on fewer or more columns.
    """

    def __init__(self, frame: pd.DataFrame, dedupe: bool | None = None, ranges: dict | None = None, columns=None):
        n = self.n = len(frame)
        if dedupe is None:
            dedupe = n >= _DEDUPE_MIN_ROWS
        self.identity = not dedupe
        if self.identity:
            self.inv = rep = np.arange(n)
            self.by_seq = (self.inv, rep)
        else:
            ranges = ranges or {}
            parts = [_small_codes(column_values(frame, c), ranges.get(c), columns) for c in CONFIG_COLUMNS]
            parts = [p for p in parts if p is not None]
            seq = _small_codes(column_values(frame, "seq"), ranges.get("seq"), columns)
            if seq is None:
                self.inv, rep = _group(parts, n, columns)
                self.by_seq = (self.inv, rep)
            else:
                # configuration x seq first (seq the last digit of the key), then configurations
                # as groups of those
                by_seq, seq_rows = _group(parts + [seq], n, columns)
                of_group, reps = _group([(codes[seq_rows], k) for codes, k in parts], len(seq_rows))
                inv = columns.empty(np.intp) if columns is not None else None
                self.inv, rep = np.take(of_group, by_seq, out=inv, mode="clip"), seq_rows[reps]
                self.by_seq = (by_seq, seq_rows)
        super().__init__(frame, rep)
        self.rep = rep
        self._columns, self._batch_span = columns, (ranges or {}).get("batch")

    def coarser(self, drop) -> tuple[View, np.ndarray]:
        """Configurations that differ only in the `drop` columns, merged: (their view, the
        merged group of each configuration; None when nothing is merged: one per row)."""
        if self.identity:
            return View(self.frame, self.rep), None
        keep = [c for c in CONFIG_COLUMNS if c not in drop]
        parts = []
        for c in keep:
            if isinstance(column_values(self.frame, c), pd.Categorical):
                k = len(column_categories(self.frame, c))
                if k > 1:
                    parts.append((self.codes(c), k))
            else:
                part = _small_codes(self.values(c))
                if part is not None:
                    parts.append(part)
        of_config, reps = _group(parts, self.size)
        return View(self.frame, self.rep[reps]), of_config

    def split(self) -> tuple[np.ndarray, np.ndarray]:
        """Configuration x seq: (group of each row, one row of each group)."""
        return self.by_seq

    def split_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Configuration x batch: (group of each row, one row of each group); made on first use."""
        key = ("split_batch",)
        if key not in self._cache:
            batch = None if self.identity else _small_codes(column_values(self.frame, "batch"), self._batch_span, self._columns)
            if batch is None:  # one row per configuration, or one batch: the configurations themselves
                self._cache[key] = (self.inv, self.rep)
            else:
                self._cache[key] = _group([(self.inv, self.size), batch], self.n, self._columns)
        return self._cache[key]

    def take(self, values):
        """Per-configuration values -> per row, a fresh array (scalars stay scalars)."""
        if np.ndim(values) == 0:
            return values
        return np.take(values, self.inv, axis=0, mode="clip")  # every inv is a valid position: no checks needed

    def first_row(self, bad: np.ndarray) -> int:
        """The first row whose configuration is flagged in `bad` (one flag per configuration)."""
        return int(np.argmax(self.take(bad)))


def _at(frame: pd.DataFrame, cfg: Configs, bad: np.ndarray, column: str):
    """The column's value in the first row of a flagged configuration (what messages show)."""
    return frame[column].iloc[cfg.first_row(bad)]


def dpo_reference_runs(reference: str, method: str, recipe: str) -> bool:
    """Whether a DPO row's dpo_reference is one its recipe runs for its method (check_combinations refuses the
    others): adapters_off needs adapters, precomputed not under DPO_NO_PRECOMPUTED, a copy beside adapters not under
    DPO_NO_ADAPTER_COPY; auto (the recipe's) always."""
    adapters = method in ("lora", "qlora")
    return not ((reference == "adapters_off" and not adapters)
                or (reference == "precomputed" and recipe in DPO_NO_PRECOMPUTED)
                or (reference == "copy" and adapters and recipe in DPO_NO_ADAPTER_COPY))


def ep_accepted(gpus, tp, pp, ep) -> np.ndarray:
    """Whether expert parallel ep is taken at these GPU counts, tensor and pipeline parallel: 1, or a multiple of
    tp that divides gpus / pp (the experts spread whole over those GPUs of each stage). check_combinations' rule,
    and the one the GPUs-needed solvers (engine/executor.py) and the what-if's counts (planner/planning.py) keep to."""
    gpus, tp, pp, ep = (np.maximum(np.asarray(v, dtype=np.int64), 1) for v in (gpus, tp, pp, ep))
    return (ep <= 1) | ((ep % tp == 0) & ((gpus // pp) % ep == 0))


def gpus_step(tp, pp, cp, ep) -> np.ndarray:
    """The step of the GPU counts check_combinations takes at a given tp, pp, cp and ep: a multiple of tp x pp x cp
    whose gpus / pp is a multiple of ep (ep > 1), so pp x lcm(tp x cp, ep). (ep must also be a multiple of tp,
    whatever the count: ep_accepted.)"""
    tp, pp, cp, ep = (np.maximum(np.asarray(v, dtype=np.int64), 1) for v in (tp, pp, cp, ep))
    return pp * np.lcm(tp * cp, ep)


def check_combinations(out: pd.DataFrame, models: pd.DataFrame, cfg: Configs | None = None,
                       ranges: dict | None = None, allow_unmodelled: bool = False) -> None:
    """Combinations of valid values that the engine refuses (one clear ValueError), checked per
    configuration; messages name the first offending row's values. ranges: {column: (min, max)}
    where normalize_columns already knows them."""
    cfg = cfg if cfg is not None else Configs(out)
    train = cfg.mask("task", "train")
    infer = ~train

    bad = train & ~cfg.mask("precision", *TRAIN_PRECISIONS)
    if bad.any():
        value = _at(out, cfg, bad, "precision")
        hint = " (quantized weights train only as a frozen base: use --method qlora, or --method lora with --base-precision)" if value in INFER_PRECISIONS else ""
        # a value that is no precision at all ('BF16', 'bf-16') is named so, with the one meant, not as a precision
        # that training refuses
        what = "cannot be used for training" if value in INFER_PRECISIONS else "is not a precision"
        raise ValueError(f"precision {value!r} {what}{hint}; accepted for training: {', '.join(TRAIN_PRECISIONS)}"
                         + ("" if hint else did_you_mean(value, TRAIN_PRECISIONS)))
    bad = infer & ~cfg.mask("precision", *INFER_PRECISIONS)
    if bad.any():
        value = _at(out, cfg, bad, 'precision')
        raise ValueError(f"precision {value!r} is not an inference precision; accepted: {', '.join(INFER_PRECISIONS)}"
                         + did_you_mean(value, INFER_PRECISIONS))

    if "objective" in out:
        dpo = cfg.mask("objective", "dpo")
        bad = dpo & infer
        if bad.any():
            raise ValueError("objective 'dpo' applies to training (preference pairs, a reference model); accepted for "
                             "inference: sft (the default)")
        bad = dpo & ~cfg.mask("recipe", *DPO_RECIPES)
        if bad.any():
            raise ValueError(f"objective 'dpo' has no trainer under recipe {_at(out, cfg, bad, 'recipe')!r} (torchtitan, "
                             "LitGPT and NeMo Automodel ship no DPO recipe); accepted recipes for dpo: "
                             + ", ".join(DPO_RECIPES))
        # no DPO trainer packs pairs (the recipes' default is off): trl 1.16.0 dpo_trainer.py lines 732-739 turns
        # padding_free off, axolotl 0.18.0 utils/schemas/validation.py check_sample_packing_w_rl refuses
        # sample_packing with rl, LLaMA-Factory's DPO reads its data as stage rm (src/llamafactory/data/loader.py: packing
        # only for stage sft), torchtune's preference datasets are padded (padded_collate_dpo)
        if "packing" in out:
            bad = dpo & cfg.mask("packing", "on")
            if bad.any():
                raise ValueError("packing 'on' is not run by any DPO trainer (TRL, axolotl, LLaMA-Factory and torchtune "
                                 "pad each pair's chosen and rejected sequences); accepted with objective dpo: "
                                 "packing auto or off")
        if "dpo_reference" in out:  # (an sft row never reads its reference: any value is accepted there)
            bad = dpo & cfg.mask("dpo_reference", "adapters_off") & ~cfg.mask("method", "lora", "qlora")
            if bad.any():
                raise ValueError(f"dpo_reference 'adapters_off' needs adapters to disable, and method "
                                 f"{_at(out, cfg, bad, 'method')!r} has none; accepted: copy or precomputed "
                                 "(or --method lora / qlora)")
            # (auto never takes these: every recipe's default is copy or adapters_off, engine/stacks.py)
            bad = dpo & cfg.mask("dpo_reference", "precomputed") & cfg.mask("recipe", *DPO_NO_PRECOMPUTED)
            if bad.any():
                raise ValueError(f"dpo_reference 'precomputed' is not run by recipe {_at(out, cfg, bad, 'recipe')!r} "
                                 "(its DPO trainer computes the reference log-probs in every step); accepted there: "
                                 "auto, copy or adapters_off; recipes that precompute them: "
                                 + ", ".join(r for r in DPO_RECIPES if r not in DPO_NO_PRECOMPUTED))
            bad = (dpo & cfg.mask("dpo_reference", "copy") & cfg.mask("method", "lora", "qlora")
                   & cfg.mask("recipe", *DPO_NO_ADAPTER_COPY))
            if bad.any():
                raise ValueError(f"dpo_reference 'copy' with method {_at(out, cfg, bad, 'method')!r} is not run by "
                                 f"recipe {_at(out, cfg, bad, 'recipe')!r} (its DPO trainer takes an adapter run's "
                                 "reference as the model with its adapters disabled); accepted there: auto or "
                                 "adapters_off (a copy with --method full)")

    base_auto = cfg.mask("base_precision", "auto")
    bad = train & cfg.mask("method", "full") & ~base_auto
    if bad.any():
        raise ValueError(f"base precision {_at(out, cfg, bad, 'base_precision')!r} needs a frozen base: full fine-tuning trains every weight; use --method lora or qlora, or leave --base-precision auto")
    bad = train & cfg.mask("method", "qlora") & cfg.mask("base_precision", "fp32", "bf16", "fp16")
    if bad.any():
        raise ValueError(f"base precision {_at(out, cfg, bad, 'base_precision')!r} is not quantized; QLoRA needs a quantized base: nf4, nf4_nodq, int4, int8 or a GGUF type (or auto = nf4; nf4_nodq under litgpt)")

    rank_bad = train & cfg.mask("method", "lora", "qlora") & (cfg.values("lora_rank") < 1)
    if rank_bad.any():
        raise ValueError(f"lora rank {int(_at(out, cfg, rank_bad, 'lora_rank'))} is not accepted; accepted: a whole number >= 1 (e.g. 8, 16, 64)")

    zero = cfg.values("zero")
    bad = cfg.mask("offload", "all") & (zero != 3) & train
    if bad.any():
        raise ValueError("offload 'all' (parameters too) needs ZeRO stage 3 (--zero 3); accepted with other stages: none, optimizer")
    bad = ~cfg.mask("offload", "none") & infer
    if bad.any():
        raise ValueError(f"offload {_at(out, cfg, bad, 'offload')!r} applies to training; accepted for inference: none")

    gpus = cfg.values("gpus")
    tp = cfg.values("tp")
    pp = cfg.values("pp")
    cp = cfg.values("cp") if "cp" in out else np.ones_like(tp)
    bad = (cp > 1) & infer
    if bad.any():
        raise ValueError(f"cp {int(_at(out, cfg, bad, 'cp'))} applies to training (the sequence split over GPUs); "
                         "accepted for inference: 1 (serving engines split a model with --tp / --pp)")
    split = tp * pp
    bad = gpus % (split * cp) != 0
    if bad.any():
        i = cfg.inv[cfg.first_row(bad)]
        if cp[i] > 1:
            raise ValueError(f"gpus {gpus[i]} is not a multiple of tp x pp x cp = {split[i] * cp[i]}; accepted: "
                             "gpus = tp x pp x cp x data-parallel ranks")
        raise ValueError(f"gpus {gpus[i]} is not a multiple of tp x pp = {split[i]}; accepted: gpus = tp x pp x data-parallel ranks")
    if "ep" in out:
        ep = cfg.values("ep")
        bad = ~ep_accepted(gpus, tp, pp, ep)
        if bad.any():
            i = cfg.inv[cfg.first_row(bad)]
            raise ValueError(f"ep {ep[i]} is not accepted with gpus {gpus[i]}, tp {tp[i]}, pp {pp[i]}; accepted: 1, or a "
                             "multiple of tp that divides gpus / pp (the experts spread over those GPUs of each stage)")

    idx = cfg.index_in("model", column_index(models, "id"))
    ctx = column_array(models, "max_context")[idx]
    heads = column_array(models, "num_heads")[idx]
    layers = column_array(models, "num_layers")[idx]
    seq = out["seq"].to_numpy()
    allow = cfg.values("allow_long_context")
    longest = (ranges or {}).get("seq", (None, None))[1]
    limited = ctx[~allow]
    if len(seq) and len(limited) and (longest is None or longest > limited.min()):  # else no seq can be too long
        by_seq, seq_rows = cfg.split()  # one check per configuration x seq
        config = cfg.inv[seq_rows]
        bad = (seq[seq_rows] > ctx[config]) & ~allow[config]
    else:
        bad = np.zeros(0, dtype=bool)
    if bad.any():
        i = int(np.argmax(bad[by_seq]))
        c = ctx[cfg.inv[i]]
        raise ValueError(
            f"seq {seq[i]:,} is longer than {out['model'].iloc[i]}'s context of {c:,} tokens; "
            f"accepted: 1 to {c:,} (or allow it explicitly with --allow-long-context)"
        )
    bad = heads % tp != 0
    if bad.any():
        i = cfg.first_row(bad)
        j = cfg.inv[i]
        raise ValueError(f"tp {tp[j]} does not divide {out['model'].iloc[i]}'s {heads[j]} attention heads; accepted: a divisor of {heads[j]}")
    freeze_bad = train & cfg.mask("method", "freeze") & (cfg.values("freeze_layers") > layers)
    if freeze_bad.any():
        i = cfg.first_row(freeze_bad)
        j = cfg.inv[i]
        raise ValueError(f"freeze layers {cfg.values('freeze_layers')[j]:,} exceeds {out['model'].iloc[i]}'s "
                         f"{layers[j]} layers; accepted: 1 to {layers[j]} (the last layers that train)")
    bad = pp > layers
    if bad.any():
        i = cfg.first_row(bad)
        j = cfg.inv[i]
        raise ValueError(f"pp {pp[j]} exceeds {out['model'].iloc[i]}'s {layers[j]} layers; accepted: 1 to {layers[j]}")
    # hybrid linear attention and Mamba2 hybrids whose training is not modelled (engine/params.py
    # hybrid_training_unmodelled: LoRA on every projection of Nemotron-H and Falcon-H1, ...); inference is
    stateful = [c for c in ("linear_attention_layers", "mamba_layers") if c in models]
    if stateful and not allow_unmodelled:
        counts = {c: column_array(models, c, 0).astype(float)[idx] for c in stateful}
        bad = train & (sum(counts.values()) > 0)
        if bad.any():
            every = cfg.mask("lora_targets", "all")
            by_method = {k: v[idx] for k, v in frame_memo(models, "hybrid_unmodelled_by_method",
                                                            lambda: hybrid_unmodelled_by_method(models)).items()}
            bad = bad & unmodelled_rows(by_method, cfg.mask("method", "lora", "qlora"), every)
        if bad.any():
            i = cfg.first_row(bad)
            j = cfg.inv[i]
            kind = ("Mamba2" if "mamba_layers" in counts and counts["mamba_layers"][j] > 0
                    else "linear-attention (Gated DeltaNet)")
            whole, listed = by_method["whole"], by_method["listed"]
            if not whole[j] and every[j] and not listed[j]:  # (Nemotron-H, Falcon-H1: peft refuses all-linear)
                raise ValueError(f"lora targets 'all' on {out['model'].iloc[i]}: peft 0.21.2 refuses all-linear on its "
                                 f"{kind} layers' out_proj; accepted for this model: --lora-targets as a list of its "
                                 "attention and MLP projections (q_proj,k_proj,v_proj,o_proj,up_proj,down_proj), "
                                 "--method full or freeze, --task infer, and `serve`")
            raise ValueError(f"{out['model'].iloc[i]} has {kind} layers, whose training memory is not modelled yet "
                             "(modelled: Qwen3.5, Qwen3-Next, Granite 4.0-H, Bamba, and full and freeze tuning of "
                             "Nemotron-H and of Falcon-H1 without mamba_rms_norm); accepted for this model: --task "
                             "infer, and `serve`")


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


__all__ = ["closest_ids", "did_you_mean", "DEFAULTS", "CHOICES", "INT_RANGES", "AUTO_COLUMNS", "PRECISIONS", "LIMITS", "CONFIG_COLUMNS", "Configs", "View", "check_combinations", "normalize",
           "normalize_columns", "grid", "GGUF_FILE_PRECISIONS"]
