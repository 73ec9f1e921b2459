"""The engine's one front door: `estimate(scenarios, models, gpus)`.

Whole-column numpy over the scenario frame; a single scenario is a one-row frame.

`estimate` checks the overhead settings and the scenarios (engine/scenarios.py, rules.py),
runs the physics once per memory configuration (engine/components.py: one function per
memory component, each giving its bytes phase by phase) and lets the executor
(engine/executor.py) evaluate it over the rows: the peak phase and its components, the fit
against the GPU, the GPUs needed, speed and cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.constants as C
from engine.buffers import Columns
from engine.components import MODEL_FIELDS, inputs, physics
from engine.executor import FitRows, MemoryRows, Sweep
from engine.rules import deepspeed_precision
from engine.frames import column, prime, revalidate
from engine.scenarios import DEFAULTS, Configs, _normalize_columns, check_combinations

# Default runtime-overhead settings (engine/constants.py gives the sources).
OVERHEAD_DEFAULTS = {
    "context_bytes": C.CUDA_CONTEXT_BYTES,
    "cublas_bytes": C.CUBLAS_WORKSPACE_BYTES,
    "fragmentation": C.FRAGMENTATION_FRACTION,
    "nccl_bytes": C.NCCL_BYTES,
}


def estimate(scenarios: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame | None = None,
             allow_unmodelled: bool = False, **overhead) -> pd.DataFrame:
    """Estimate memory per GPU for every scenario row.

    scenarios: one row per question (see engine.scenarios.DEFAULTS for the columns).
    models: the catalog's models table (id + config fields).
    gpus: the catalog's GPU table; rows whose `gpu` column names one get fit columns.
    overhead: context_bytes, cublas_bytes, fragmentation, nccl_bytes (runtime overhead).
    allow_unmodelled: estimate, rather than refuse, the rows whose physics is not modelled (training a hybrid
    linear-attention model: engine/scenarios.py check_combinations); their figures mean nothing and a caller that
    asks for them masks them (planner/planning.py configurations: a matrix labels them, one engine call).
    Raises ValueError with a clear message for a bad value.
    """
    settings = overhead_settings(overhead)
    out = Columns(len(scenarios)) if isinstance(scenarios, pd.DataFrame) else None  # the result's new columns
    sweep, memory, fit = _memory_and_fit(scenarios, models, gpus, settings, out, allow_unmodelled=allow_unmodelled)
    return sweep.frame(memory, fit, gpus, models)  # + speed and cost


# The catalog columns the engine cannot do without (the others have defaults: ARCH_DEFAULTS and the like). Found by
# dropping each column of the shipped tables in turn: these, and only these, ended in a KeyError before this check.
REQUIRED_MODEL_COLUMNS = ("id", *MODEL_FIELDS)
REQUIRED_GPU_COLUMNS = ("id", "usable_memory_bytes")


def check_tables(models, gpus, model_columns=REQUIRED_MODEL_COLUMNS, gpu_columns=REQUIRED_GPU_COLUMNS,
                 gpus_optional: bool = True) -> None:
    """A library caller's catalog tables: refused in one line naming what is missing (a KeyError or TypeError from
    inside the engine before). engine/serving.py serve() asks for its own columns."""
    for kind, table, required, optional in (("models", models, model_columns, False),
                                            ("gpus", gpus, gpu_columns, gpus_optional)):
        if table is None and optional:
            continue
        where = f"the catalog's {kind} table (catalog.default_catalog().{kind}())"
        if not isinstance(table, pd.DataFrame):
            raise ValueError(f"{kind} must be a table (a pandas DataFrame), got {type(table).__name__}; accepted: {where}"
                             + (" or None" if optional else ""))
        missing = [col for col in required if col not in table.columns]
        if missing:
            raise ValueError(f"the {kind} table has no column {', '.join(missing)}; accepted: {where}, or a table with "
                             f"at least the columns {', '.join(required)}")


def _memory_and_fit(scenarios, models, gpus, settings: dict, out, lean: bool = False,
                    normalized: dict | None = None, allow_unmodelled: bool = False) -> tuple[Sweep, MemoryRows, FitRows]:
    """The memory and fit columns of every row (lean: only gpus_needed, see Sweep).
    normalized: for a frame the engine built itself from normalized rows (the one-GPU probe),
    the {column: (min, max)} bounds of its integer and constant columns: it is not normalized
    again (its values are the normalized rows' own; normalizing would change none of them)."""
    if normalized is None:
        check_tables(models, gpus)
        revalidate(gpus)  # (a table written into in place since is read again: the models by _normalize_columns)
        sc, ranges = _normalize_columns(scenarios, models, out)
    else:
        sc, ranges = scenarios, normalized
    cfg = Configs(sc, ranges=ranges, columns=out)  # the rows' configurations
    if normalized is None:
        # (the probe's rows passed these checks in their frame; at two GPUs on their stage asked
        # they cannot fail: a one-GPU row has tp = pp = ep = 1 and no offload, engine/rules.py)
        check_combinations(sc, models, cfg, ranges, allow_unmodelled=allow_unmodelled)
    # the memory configurations (configurations that differ only in the GPU or the headroom,
    # merged): the groups the physics runs on
    mv, of_config = cfg.coarser(("gpu", "headroom"))
    sweep = Sweep(sc, cfg, mv, of_config, physics(inputs(mv, models), settings), out, lean)
    memory = sweep.memory()
    fit = sweep.fit(memory, gpus, models)
    if "_zero_asked" in ranges and "gpus_needed" in fit.columns:
        _gpus_needed_at_the_stage_asked(fit.columns, sc, ranges, models, gpus, settings, out)
    return sweep, memory, fit


def overhead_settings(overhead: dict) -> dict:
    """The runtime-overhead settings, defaults filled in, each checked."""
    unknown = set(overhead) - set(OVERHEAD_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown overhead setting {min(unknown)!r}; accepted: {', '.join(OVERHEAD_DEFAULTS)}")
    settings = {**OVERHEAD_DEFAULTS, **overhead}
    for key, value in settings.items():
        try:
            value = settings[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key} {value!r} is not accepted; accepted: a finite number >= 0") from None
        if not np.isfinite(value) or value < 0 or (key == "fragmentation" and value >= 1):
            raise ValueError(f"{key} {value!r} is not accepted; accepted: a finite number >= 0" + (" and < 1" if key == "fragmentation" else ""))
    return settings


def _gpus_needed_at_the_stage_asked(result: dict, sc, ranges, models, gpus, settings, out) -> None:
    """One GPU runs without ZeRO (engine/rules.py), but the stage asked applies from two GPUs
    on: a one-GPU row that does not fit gets the GPUs it needs at that stage, from the same
    scenario asked at two GPUs (the engine solves the count from there). Only such rows are
    estimated again, and only as far as their GPUs needed (a lean Sweep: the phases' per-token
    bytes x tokens, then gpus_needed; no other column), in scratch carved from the result's
    block where it has one (out.rows: gone before the result is returned; a Columns of its own
    would become the pool's idle block in place of the result's)."""
    rows, asked = ranges["_zero_dropped_rows"], ranges["_zero_asked"]
    fits = result["fits"][rows].to_numpy(dtype=bool, na_value=True)
    rows, asked = rows[~fits], asked[~fits]
    if not len(rows):
        return
    # sc.iloc[rows] of the columns a sweep reads (the scenario columns), column by column (no block
    # consolidation), with gpus=2 and zero=asked: rows of a normalized frame, so not normalized again
    # (ranges: the frame's bounds, which hold for its rows; gpus and zero are the probe's own)
    # (its columns are plain arrays: the result's block keeps its room for the probe's own sweep)
    columns = {}
    for col in sc.columns:
        if col == "gpus":
            columns[col] = np.full(len(rows), 2, dtype=np.int64)
        elif col == "zero":
            columns[col] = asked
        elif col == "model" or col in DEFAULTS:
            columns[col] = _rows_of(column(sc, col), rows)
    # at the stage asked, DeepSpeed's fp32 master copy applies as it would to the row asked at two GPUs
    deepspeed_precision(columns)
    probe = prime(pd.DataFrame(columns, index=pd.RangeIndex(len(rows)), copy=False), columns)
    bounds = {k: v for k, v in ranges.items() if not k.startswith("_")}
    bounds.update(gpus=(2, 2), zero=(int(asked.min()), int(asked.max())))
    _, _, fit = _memory_and_fit(probe, models, gpus, settings, out.rows(len(probe)), lean=True, normalized=bounds)
    result["gpus_needed"][rows] = fit.columns["gpus_needed"]


def _rows_of(column: pd.Series, rows: np.ndarray):
    """column.iloc[rows] as an array (a categorical keeps its categories, as iloc does)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.array.codes
        if len(column.dtype.categories) == 1 and len(codes) and codes.min() == 0:
            # one category and no missing value (a switch left at its one value): every row's code is 0, no gather
            return pd.Categorical.from_codes(np.zeros(len(rows), dtype=codes.dtype), dtype=column.dtype, validate=False)
        return pd.Categorical.from_codes(np.take(codes, rows), dtype=column.dtype, validate=False)
    if isinstance(column.dtype, np.dtype):
        return np.take(column.to_numpy(), rows)
    return column.array.take(rows)
