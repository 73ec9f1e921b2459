"""The scenario frame: its columns, their defaults and accepted values, and grid builders.

A scenario is one question ("Llama 2 7B, LoRA r=8, bf16, batch 4, seq 2048, on 1 GPU").
`normalize()` fills defaults and checks every column at once; a bad value raises
ValueError naming the value, the column and what is accepted. No per-row Python loops:
checks run on the unique values of each column.
"""

from __future__ import annotations

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


def _bad(column: str, value, accepted: str) -> ValueError:
    return ValueError(f"{column} {value!r} is not accepted; accepted: {accepted}")


def _as_category(series: pd.Series) -> pd.Series:
    if isinstance(series.dtype, pd.CategoricalDtype):
        return series
    return series.astype("string").fillna("").astype("category")


def normalize(scenarios: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of `scenarios` with every column present, typed and checked.

    Raises ValueError (one clear sentence) for the first bad value found.
    """
    if "model" not in scenarios.columns:
        raise ValueError("scenarios need a 'model' column (a catalog model id)")
    out = scenarios.reset_index(drop=True).copy()
    for col, default in DEFAULTS.items():
        if col not in out.columns:
            out[col] = default
        elif not isinstance(out[col].dtype, pd.CategoricalDtype) and out[col].isna().any():
            out[col] = out[col].fillna(default)

    for col in CATEGORY_COLUMNS:
        out[col] = _as_category(out[col])
        out[col] = out[col].cat.remove_unused_categories()

    known = set(models["id"])
    for value in out["model"].cat.categories:
        if value not in known:
            raise _bad("model", value, "a catalog model id (python -m engine catalog models), e.g. " + ", ".join(sorted(known)[:4]) + ", …")
    for col, accepted in CHOICES.items():
        for value in out[col].cat.categories:
            if value not in accepted:
                raise _bad(col, value, ", ".join(accepted))
    for value in out["lora_targets"].cat.categories:
        parse_lora_targets(value)

    for col in INT_COLUMNS:
        values = pd.to_numeric(out[col], errors="coerce")
        bad = values.isna() | (values != np.floor(values))
        if bad.any():
            raise _bad(col, out[col][bad].iloc[0], "a whole number")
        out[col] = values.astype(np.int64)
    for col, low in (("batch", 1), ("seq", 1), ("gpus", 1), ("tp", 1), ("pp", 1), ("freeze_layers", 1)):
        below = out[col] < low
        if below.any():
            raise _bad(col, int(out[col][below].iloc[0]), f"a whole number >= {low}")
    for col, high in LIMITS.items():
        above = out[col] > high
        if above.any():
            raise _bad(col, int(out[col][above].iloc[0]), f"a whole number <= {high:,}")
    zero_bad = ~out["zero"].isin(ZERO_STAGES)
    if zero_bad.any():
        raise _bad("zero", int(out["zero"][zero_bad].iloc[0]), "0, 1, 2 or 3")
    for col in BOOL_COLUMNS:
        col_values = out[col]
        if col_values.dtype != bool:
            mapped = col_values.map(_to_bool)
            if mapped.isna().any():
                raise _bad(col, col_values[mapped.isna()].iloc[0], "true or false")
            out[col] = mapped.astype(bool)
    headroom = pd.to_numeric(out["headroom"], errors="coerce").astype(float)
    bad = headroom.isna() | (headroom < 0) | (headroom >= 1)
    if bad.any():
        raise _bad("headroom", out["headroom"][bad].iloc[0], "a fraction in [0, 1), e.g. 0.1 for 10%")
    out["headroom"] = headroom

    _check_combinations(out, models)
    return out


def _to_bool(value):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
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
