"""Planning over the engine: how many GPUs of each card, the cheapest configuration, what a
budget buys, what would make a workload fit, and the inference table.

Pure pandas/numpy. Every function builds one scenario frame (a grid, or a handful of
what-if variants) and calls `estimate` once or twice on it; nothing here loops over
scenario rows, and nothing re-derives a memory formula: the bytes all come from `estimate`.
The pages of the dashboard only call these functions and draw what they return.

Conventions shared by every function:

* A *workload* is a dict of scenario columns (engine.scenarios.DEFAULTS) without `model`,
  `gpu` and `gpus`; the grids add those.
* `gpus_needed` is the smallest count of one card that holds the workload: 1 when one card
  does, otherwise what the engine solves for data-parallel ZeRO sharding (training) or tensor
  parallelism over powers of two (inference). Each answer is then re-estimated *at* that count
  (second `estimate` call) so that the breakdown, the fit and any speed or cost columns the
  engine adds describe the configuration we recommend, not a different one.
* Every default that depends on other columns (ZeRO on one GPU, tensor/pipeline split, the
  sequence, the context limit, ...) is decided by engine/rules.py for every scenario; nothing
  here re-decides it. Rows whose sequence is beyond their model's context (without the explicit
  override) are refused there; the tables here keep them as "✗ context" rows without figures.
* Unified-memory systems (Apple) are single devices: never more than one per configuration.
* Prices: `buy_usd` = count x the catalog's purchase price per card (GPUs only: no host,
  chassis or network); `system_usd` = the whole system a buyer orders at that count: the cards
  (new, used or the cheaper known price: `condition`) + one host per node + the network from two
  nodes (planner/systems.py `system_costs`, the function the budget planner uses), split into
  `system_gpu_usd` / `host_usd` / `network_usd`; `rent_usd_per_hour` = count x the catalog's
  on-demand $/GPU-hour. Missing prices stay NaN and never count as free.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

try:  # pandas >= 3.0
    from pandas.api.internals import create_dataframe_from_blocks as _from_blocks
except ImportError:  # pragma: no cover - pandas 2.x
    _from_blocks = None

from engine.categories import from_codes as category_codes
from engine.categories import per_value, positions
from engine.compat import check as compat_check
from engine.compat import columns_read as compat_columns
from engine.estimate import estimate
from engine.frames import column_numbers, column_text_index, revalidate
from engine.memory import PHASES
from engine.constants import PEFT_UNCONVERTED_MOE
from engine.params import hybrid_unmodelled_by_method, model_types, peft_moe_patterns, unmodelled_rows
from engine.scenarios import DEFAULTS, ep_accepted, gpus_step, grid
from engine.rules import liger_unpatched
from engine.stacks import DEFAULT_RECIPE, DPO_NO_PRECOMPUTED, LIGER_SWITCH_RECIPES, recipe_value
from planner.systems import BREAKEVEN_INPUTS, CONDITIONS, breakeven, system_costs_per_pair

# Columns engine/speed.py adds to estimate() when a GPU is given: passed through, never computed here.
try:
    from engine.speed import OUTPUT_COLUMNS as _SPEED_OUTPUT
except ImportError:  # the speed model is optional for planning
    _SPEED_OUTPUT = ()
SPEED_COLUMNS = tuple(dict.fromkeys(("decode_tokens_per_s", "aggregate_tokens_per_s", "prefill_s", "bound",
                                     "usd_per_million_tokens", "train_flops", "train_hours", "gpu_hours",
                                     "cloud_cost_usd", "purchase_usd", "breakeven_months", "usd_per_gb_vram")
                                    + tuple(_SPEED_OUTPUT)))
# Per-GPU components at the peak phase, in the order a stacked bar shows them.
COMPONENT_COLUMNS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "optimizer_temp_bytes",
                     "autocast_copies_bytes", "activations_bytes", "logits_bytes", "kv_cache_bytes",
                     "workspace_bytes", "runtime_overhead_bytes")
PHASE_COLUMNS = tuple(f"{p}_phase_bytes" for p in PHASES)
GPU_INFO = ("name", "vendor", "segment", "memory_gb", "price_usd", "cloud_usd_per_hour", "price_date", "price_source",
            "cloud_date", "cloud_source")

# The budget tiers of source article 001 (individuals / small teams), with the configuration
# the article recommends for each (catalog/references.yaml, ids a001-budget-*).
BUDGET_TIERS = (
    {"label": "$5k–$10k", "low": 5_000, "high": 10_000, "reference": "a001-budget-2x-rtx4090-7b-qlora",
     "article": "2× RTX 4090 (24 GB) → 7B QLoRA"},
    {"label": "$10k–$20k", "low": 10_000, "high": 20_000, "reference": "a001-budget-2x-a100-40gb-7b-fp16",
     "article": "2× A100 40GB → 7B FP16"},
    {"label": "$20k–$50k", "low": 20_000, "high": 50_000, "reference": "a001-budget-4x-a100-80gb-13b-fp16",
     "article": "4× A100 80GB → 13B FP16"},
)

BUDGET_MODES = ("buy", "cloud_hour", "cloud_job")


# ---- scenario frames ------------------------------------------------------------------------

def expand(workload: dict, **axes) -> pd.DataFrame:
    """The cross product of `axes` (e.g. model=[...], gpu=[...]) with the workload's columns set."""
    return stacked([(grid(**axes), {k: v for k, v in workload.items() if k not in axes})])


def plans_frame(plans: dict[str, dict], **axes) -> pd.DataFrame:
    """One grid per named plan (e.g. "LoRA": {task: train, method: lora, ...}), stacked, with a
    `plan` column. A plan is a complete workload; the loop runs over the few plans, not rows."""
    if not plans:
        raise ValueError("no plan chosen; accepted: at least one of the listed workloads")
    base = grid(**axes)
    out = stacked([(base, {**{k: v for k, v in workload.items() if k not in axes}, "plan": label})
                   for label, workload in plans.items()])
    out["plan"] = pd.Categorical(out["plan"], categories=list(plans))
    return out


def _constant_column(values: list, sizes: list[int]):
    """One value per block, repeated over the block's rows: text as a categorical (its codes per
    block; the engine reads categories, never a million strings), numbers and booleans as numpy,
    anything else (or a mix, or a missing value) as objects."""
    block = np.repeat(np.arange(len(values), dtype=np.intp), sizes)
    missing = [isinstance(v, float) and v != v for v in values]  # a block that does not set it (NaN)
    given = [v for v, m in zip(values, missing) if not m]
    if given and all(isinstance(v, str) for v in given):
        texts = list(dict.fromkeys(given))
        codes = np.array([-1 if m else texts.index(v) for v, m in zip(values, missing)], dtype=np.int32)
        return category_codes(codes[block], texts)
    numbers = (int, float, np.integer, np.floating)
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.asarray(values, dtype=bool)[block]
    if all(isinstance(v, numbers) and not isinstance(v, (bool, np.bool_)) for v in values):
        kind = np.int64 if all(isinstance(v, (int, np.integer)) for v in values) else float
        return np.asarray(values, dtype=kind)[block]
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr[block]


def stacked(blocks: list[tuple[pd.DataFrame, dict]]) -> pd.DataFrame:
    """pd.concat of each block's frame with its constants set (`frame[key] = value`), built per
    column: a constant's cells never become a column of Python strings (pandas 3 stores those
    as Arrow text, which the engine converts back row by row), and a key that a block does not
    set is missing there (NaN), as in pd.concat. A constant overrides the frame's column."""
    sizes = [len(frame) for frame, _ in blocks]
    names = list(dict.fromkeys(c for frame, extra in blocks for c in (*frame.columns, *extra)))
    out = {}
    for name in names:
        pieces = [extra[name] if name in extra else frame[name] if name in frame.columns else np.nan
                  for frame, extra in blocks]
        if not any(isinstance(p, pd.Series) for p in pieces):
            out[name] = _constant_column(pieces, sizes)
        elif len(blocks) == 1:
            out[name] = pieces[0].reset_index(drop=True)
        else:
            series = [p.reset_index(drop=True) if isinstance(p, pd.Series) else pd.Series(_constant_column([p], [size]))
                      for p, size in zip(pieces, sizes)]
            if all(isinstance(x.dtype, pd.CategoricalDtype) for x in series):
                out[name] = pd.api.types.union_categoricals([x.array for x in series])
            else:
                out[name] = pd.concat(series, ignore_index=True)
    return pd.DataFrame(out, index=pd.RangeIndex(sum(sizes)))


def _series_or_column(frame: pd.DataFrame, name: str):
    """frame[name] (a Series, categories kept) where the frame has it, else _column's defaults."""
    return frame[name] if name in frame.columns else _column(frame, name)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name in frame.columns:
        return frame[name].to_numpy()
    return np.full(len(frame), DEFAULTS[name], dtype=object if isinstance(DEFAULTS[name], str) else None)


def with_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """Every scenario column present; cells left empty (e.g. by stacking training and inference
    plans) take the engine's default. Typed as the engine types them (text categorical)."""
    out = frame.copy(deep=False)
    # the columns left out, built apart and added in one concat (an insert per column cost ~0.2 ms each, ~60)
    absent = {col: _constant_column([default], [len(out)]) for col, default in DEFAULTS.items() if col not in out.columns}
    if absent:
        out = pd.concat([out, pd.DataFrame(absent, index=out.index)], axis=1)
    for col, default in DEFAULTS.items():
        if col in absent:
            continue
        values = out[col]
        if isinstance(values.dtype, pd.CategoricalDtype) and isinstance(default, str):
            # through the codes, as values.cat.add_categories([default]).fillna(default) fills it: some 30 columns of a
            # sweep of training and inference plans, where the Series' isna, accessor and fillna cost ~0.15 ms each
            cat = values.array
            missing = cat.codes < 0
            if not missing.any():
                continue
            if default not in cat.categories:
                cat = cat.add_categories([default])
            codes = cat.codes.copy()
            codes[missing] = cat.categories.get_loc(default)
            out[col] = pd.Categorical.from_codes(codes, dtype=cat.dtype)
            continue
        missing = values.isna()
        if not missing.any():
            continue
        if values.dtype.kind == "f" and isinstance(default, (int, float)) and not isinstance(default, bool):
            out[col] = values.fillna(float(default))
        else:
            out[col] = values.astype(object).where(~missing, default)
    return out


def _model_fact(frame: pd.DataFrame, models: pd.DataFrame, name: str) -> np.ndarray:
    """models' `name` (as float) for every row's model id; NaN for an id not in `models`."""
    # (the models' column as floats and the rows' positions, each once per models frame / per frame's categories:
    # tables call this for several facts of the same rows; a table changed in place since is read again)
    revalidate(models)
    facts = column_numbers(models, name)
    at = positions(column_text_index(models, "id"), frame["model"])
    return np.where(at >= 0, facts[np.maximum(at, 0)], np.nan)


def beyond_context(frame: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Rows whose sequence is longer than their model's context without `allow_long_context`:
    the engine refuses them (engine/rules.py); tables over many models leave them out and say so."""
    ctx = _model_fact(frame, models, "max_context")
    seq = pd.to_numeric(pd.Series(_column(frame, "seq")), errors="coerce").to_numpy(dtype=float)
    allow = per_value(_series_or_column(frame, "allow_long_context"),
                       lambda u: u.astype(str).str.strip().str.lower().isin(("true", "1", "yes", "on")))
    return (seq > ctx) & ~allow  # NaN (an unknown model, a bad seq) compares False: estimate() names it


def beyond_layers(frame: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Freeze rows that would train more layers than their model has: refused by the engine;
    tables keep them as "✗ layers" rows without figures (e.g. 40 trainable layers on a 32-layer
    model in a matrix that also holds 80-layer models)."""
    if "method" not in frame.columns or "freeze_layers" not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    layers = _model_fact(frame, models, "num_layers")
    k = pd.to_numeric(pd.Series(_column(frame, "freeze_layers")), errors="coerce").to_numpy(dtype=float)
    freeze = per_value(_series_or_column(frame, "method"), lambda u: u.astype(str) == "freeze") \
        & per_value(_series_or_column(frame, "task"), lambda u: u.astype(str) == "train")
    return freeze & (k > layers)


NOT_MODELLED_LABEL = "✗ not modelled"  # the label of a row not_modelled gives
PEFT_REFUSED_LABEL = "✗ peft"  # the label of a LoRA row peft would not build (lora_refused_rows)


def not_modelled(frame: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Training rows of a hybrid model whose training memory is not modelled (engine/params.py
    hybrid_training_unmodelled: LoRA or QLoRA on every projection of Nemotron-H or Falcon-H1, ...): refused by
    the engine (engine/scenarios.py check_combinations); tables keep them as "✗ not modelled" rows without figures."""
    stateful = [c for c in ("linear_attention_layers", "mamba_layers") if c in models.columns]  # (and Mamba2 layers)
    if not stateful or "task" not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    hybrid = sum(np.nan_to_num(_model_fact(frame, models, c)) for c in stateful)
    train = per_value(_series_or_column(frame, "task"), lambda u: u.astype(str) == "train")
    rows = train & (np.nan_to_num(hybrid) > 0)
    if not rows.any():
        return rows
    at = positions(models["id"], frame["model"])
    adapters = per_value(_series_or_column(frame, "method"), lambda u: np.isin(np.asarray(u).astype(str), ("lora", "qlora")))
    every = per_value(_series_or_column(frame, "lora_targets"), lambda u: np.asarray(u).astype(str) == "all")
    by_method = {k: v[np.maximum(at, 0)] for k, v in hybrid_unmodelled_by_method(models).items()}
    return rows & (at >= 0) & unmodelled_rows(by_method, adapters, every)


def refused_rows(frame: pd.DataFrame, models: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows the engine refuses that tables keep out of its call: (beyond the context,
    beyond the layers); a row that is both counts as beyond the context."""
    long_rows = beyond_context(frame, models)
    return long_rows, beyond_layers(frame, models) & ~long_rows


def _nan_as_inf(values: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(values), np.inf, values)


# ---- GPUs needed and the configuration at that count ----------------------------------------

def compatibility_rules() -> pd.DataFrame:
    """The shipped compatibility rules (catalog/gpus.yaml `compatibility`)."""
    from catalog import default_catalog  # lazy: pure callers pass their own rules
    return default_catalog().compatibility()


def shipped_hosts() -> pd.DataFrame:
    """The shipped host classes and network (catalog/gpus.yaml `hosts`)."""
    from catalog import default_catalog  # lazy: pure callers pass their own hosts
    return default_catalog().hosts()


# configurations' system columns (planner/systems.py system_costs), each prefixed where the name is ambiguous
SYSTEM_COLUMNS = {"cost_usd": "system_usd", "gpu_cost_usd": "system_gpu_usd", "host_usd": "host_usd",
                  "network_usd": "network_usd", "nodes": "nodes", "gpus_per_node": "gpus_per_node",
                  "host_class": "host_class", "host_date": "host_date", "host_source": "host_source",
                  "condition": "system_condition", "price_usd_per_card": "system_price_usd_per_card",
                  "price_date": "system_price_date", "price_source": "system_price_source"}


def _as_text(values) -> pd.api.extensions.ExtensionArray:
    """Text values typed as a DataFrame column of Python strings is typed (pandas' "str"), once: a
    frame built from an object or unicode array converts it again, value by value, for every row."""
    values = np.asarray(values)
    if len(values) > 64:  # a sweep's column of a few distinct texts: each distinct text converted once
        codes, uniques = pd.factorize(values)
        return pd.array(np.asarray(uniques, dtype=object), dtype="str").take(codes)
    return pd.array(values.astype(object), dtype="str")


def _with_columns(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """frame with `columns` set, as `frame[name] = values` one by one would leave it (new names after
    the old, in the dict's order; an existing name replaced in place), in one concat."""
    columns = dict(columns)  # (the caller's dict stays as given)
    for name in [n for n in columns if n in frame.columns]:
        frame[name] = columns.pop(name)
    if not columns:
        return frame
    return pd.concat([frame, pd.DataFrame(columns, index=frame.index)], axis=1)


# the largest GPU count a budget's system may have unless asked (`budget --max-gpus`, planner/procurement.py MAX_GPUS; the
# Budget page's 'Largest GPU count'): two 8-GPU nodes
BUDGET_MAX_GPUS = 16

# configurations: from this many one-GPU rows on, their first estimate is reused (see there)
REUSE_ONE_CARD_ROWS = 4096


def rows_replaced(base: pd.DataFrame, rows: np.ndarray, other: pd.DataFrame) -> pd.DataFrame:
    """`base` (a result frame, index 0..n-1) with its rows at positions `rows` taken from `other`
    (a result frame with base's columns, one row per position, in that order). A column whose
    dtype is the same in both keeps it; a categorical whose categories differ gets the union; any
    other mix takes the dtype pandas gives the two parts together."""
    if list(other.columns) != list(base.columns):
        other = other[list(base.columns)]
    return _frame_of(_columns_replaced(base, rows, other, base.columns), base.index)


def _columns_replaced(base: pd.DataFrame, rows: np.ndarray, other: pd.DataFrame | None, names) -> dict:
    """rows_replaced's columns `names` as {name: array}, each array new (none views base's or other's: the engine's
    result arrays are carved from one pooled block, which a view would keep), in `names`' order. other None (or no
    rows): base's columns copied."""
    cols = {}
    replace = other is not None and len(rows) > 0
    for name in names:
        x = base[name]
        if not replace:
            cols[name] = _own_array(x)
            continue
        y = other[name]
        dx, dy = x.dtype, y.dtype
        if isinstance(dx, np.dtype) and dx == dy and dx.kind in "biufcmM":
            values = x.to_numpy(copy=True)
            values[rows] = y.to_numpy()
            cols[name] = values
        elif isinstance(dx, pd.CategoricalDtype) and isinstance(dy, pd.CategoricalDtype):
            # (the arrays' codes: the .cat accessor costs ~20 us a column, some 40 categorical columns a sweep)
            codes = x.array.codes.copy()
            # (the same categories in the same order: unordered dtypes compare equal in any order, where the codes
            # of one would name the other's categories)
            if dx.categories.equals(dy.categories):
                codes[rows] = y.array.codes
                cols[name] = pd.Categorical.from_codes(codes, dtype=dx)
                continue
            cats = x.cat.categories
            extra = y.cat.categories[cats.get_indexer(y.cat.categories) < 0]
            cats = cats.append(extra) if len(extra) else cats
            theirs = y.array.codes
            codes[rows] = np.where(theirs >= 0, cats.get_indexer(y.cat.categories)[theirs], -1)
            cols[name] = pd.Categorical.from_codes(codes, categories=cats)
        elif dx == dy:  # numpy or extension (nullable boolean, text) arrays alike
            values = x.array.copy()
            values[rows] = y.array
            cols[name] = values.to_numpy() if isinstance(dx, np.dtype) else values
        else:
            keep = np.ones(len(base), dtype=bool)
            keep[rows] = False
            both = pd.concat([x[keep], y.set_axis(rows)]).sort_index()
            cols[name] = both.to_numpy() if isinstance(both.dtype, np.dtype) else both.array
    return cols


def _own_array(column: pd.Series):
    """A copy of the column's values (a numpy array for a numpy dtype, its extension array otherwise)."""
    if isinstance(column.dtype, np.dtype):
        return column.to_numpy(copy=True)
    return column.array.copy()


def _as_column(values):
    """`values` typed as a frame built from {name: values} types its column (an object array of texts: pandas' "str";
    a numpy-backed extension array: its numpy array)."""
    if isinstance(values, pd.api.extensions.ExtensionArray) and type(values) is not pd.arrays.NumpyExtensionArray:
        return values
    values = np.asarray(values)
    if values.dtype != object:
        return values
    typed = pd.Series(values, copy=False)
    return typed.to_numpy() if isinstance(typed.dtype, np.dtype) else typed.array


def _frame_of(columns: dict, index: pd.Index) -> pd.DataFrame:
    """A frame of `columns` ({name: numpy or extension array of one dtype, each its own}): the numpy columns of one
    dtype stacked into one block (a frame of a block per column warns and slows at every column a caller adds to it),
    the extension arrays taken as they are. As pd.DataFrame(columns) builds it, less its checks and copies of each
    array (pandas < 3.0, without pandas.api.internals.create_dataframe_from_blocks: that constructor)."""
    if _from_blocks is None:  # pragma: no cover - pandas 2.x
        return pd.DataFrame(columns, index=index, copy=False)
    by_dtype, blocks = {}, []
    for i, values in enumerate(columns.values()):
        if isinstance(values, np.ndarray):
            by_dtype.setdefault(values.dtype, []).append(i)
        else:
            blocks.append((values, np.array([i], dtype=np.intp)))
    arrays = list(columns.values())
    for where in by_dtype.values():
        blocks.append((np.stack([arrays[i] for i in where]), np.array(where, dtype=np.intp)))
    return _from_blocks(blocks, index=index, columns=pd.Index(list(columns)))


def configurations(scenarios: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame,
                   max_gpus: int = 8, overhead: dict | None = None,
                   rules: pd.DataFrame | None = None, hosts: pd.DataFrame | None = None,
                   condition: str = "new", drop=()) -> pd.DataFrame:
    """For every (model, gpu, workload) row: the smallest count of that card that holds it
    (up to `max_gpus`) and the engine's estimate at that count.

    Returns the estimate at the recommended count (components are per GPU there) plus:
    gpus_needed (inf when no count up to the engine's limit holds it), fits_within (a count
    <= max_gpus holds it, confirmed by the estimate at that count; 1 for unified-memory
    systems), max_gpus (that limit per row), label ("2", or "✗ >8" beyond the limit),
    one_gpu_* (the whole workload on a single card: peak, weights, KV cache, fits),
    buy_usd (cards only), system_usd (cards at `condition` + hosts + network, with
    system_gpu_usd, host_usd, network_usd, nodes, gpus_per_node, host_class, host_date,
    host_source, system_condition, system_price_usd_per_card, system_price_date,
    system_price_source; `hosts` default the shipped ones), system_breakeven_months /
    system_breakeven_hours (buying that system vs renting its GPUs, planner/systems.py
    breakeven), rent_usd_per_hour,
    total_vram_bytes and the GPU's catalog facts;
    compatible and compatibility_notes (engine/compat.py over `rules`, default the shipped
    rules): an incompatible row is never `fits_within`, whatever its memory, and its label
    says "✗ incompatible". `drop`: columns left out of the result (those a caller never reads; absent ones ignored).
    Every column of the result is an array of its own (none views the engine's pooled result block).
    """
    if "gpu" not in scenarios.columns or "model" not in scenarios.columns:
        raise ValueError("configurations need 'model' and 'gpu' columns")
    max_gpus = int(max_gpus)
    if condition not in CONDITIONS:
        raise ValueError(f"condition {condition!r} is not accepted; accepted: {', '.join(CONDITIONS)}")
    if max_gpus < 1:
        raise ValueError(f"max_gpus {max_gpus} is not accepted; accepted: a whole number >= 1")
    overhead = overhead or {}
    drop = set(drop)
    everything = with_defaults(scenarios.reset_index(drop=True))
    long_rows, deep_rows = refused_rows(everything, models)
    refused = long_rows | deep_rows
    sc = everything[~refused].reset_index(drop=True) if refused.any() else everything
    n = len(sc)
    # training rows of a hybrid linear-attention model (not_modelled): estimated in the same calls (placing them
    # apart, as the refused rows are, costs a concat of the whole result: ~60 ms a Budget change) and masked below
    unmodelled = not_modelled(sc, models)
    allow = {"allow_unmodelled": True} if unmodelled.any() else {}
    peft_refused = lora_refused_rows(sc, models)

    # (1) one card: the engine solves the count from there. A one-GPU training row that does not fit
    # gets the GPUs it needs at the ZeRO stage asked (engine/estimate.py estimates it again at two
    # GPUs and that stage: tests/test_engine_structure.py), and a serving row the tensor-parallel
    # degree that holds one replica. (Asking two cards at tp = pp = 1 as well, as this did until
    # 2026-12-05, cost half this call again and counted two replicas for serving: Llama 2 70B bf16,
    # 2 x 2,048 tokens on an H100 80GB said 4 GPUs where two at tp 2 hold it.)
    one = estimate(sc.assign(gpus=1, tp=1, pp=1), models, gpus, **allow, **overhead)
    one_fits = one["fits"].fillna(False).to_numpy(dtype=bool)
    solved = _nan_as_inf(one["gpus_needed"].to_numpy(dtype=float))
    needed = np.where(one_fits, 1.0, np.maximum(2.0, solved))
    # Unified-memory systems (Apple) count as single devices: PyTorch's multi-GPU backend
    # (NCCL) is CUDA-only and MPS has no distributed backend, so ZeRO / tensor parallelism
    # across several Macs is outside what this model describes.
    gidx = positions(gpus["id"], sc["gpu"])
    unified = gpus["unified_memory"].fillna(False).to_numpy(dtype=bool)[np.maximum(gidx, 0)] \
        if "unified_memory" in gpus.columns else np.zeros(n, dtype=bool)
    limit = np.where(unified, 1, max_gpus)
    within = np.isfinite(needed) & (needed <= limit)
    count = np.where(within, needed, 1.0).astype(np.int64)

    # (2) the estimate at the recommended count, split over its GPUs as every scenario is
    # (engine/rules.py: tensor parallel over the heads, pipeline stages for the rest, for inference).
    # At one GPU that is the one-card estimate already made (tp and pp resolve to 1 there, and a
    # row's result does not depend on the frame: tests/test_planning.py), so a large frame estimates
    # only its rows at two or more GPUs again and takes the others from the first call. Putting the
    # two together costs ~20 ms whatever the rows (a hundred columns, each typed as it is), ~4 us a
    # row estimated again: below REUSE_ONE_CARD_ROWS one-GPU rows, estimating them again is cheaper.
    several = np.flatnonzero(count > 1)
    rules = compatibility_rules() if rules is None else rules
    # the result is assembled once, from arrays of its own (see _frame_of): the rows estimated again, the added
    # columns, the masked rows and the columns left out (`drop`) in one pass, where setting them on a frame of ~160
    # columns round by round (rows_replaced, two concats, a setitem per masked column, the caller's drop and copy)
    # cost ~35 ms a Budget change (docs/performance.md, session 33)
    read = {"fits", "usable_bytes", *BREAKEVEN_INPUTS} | (compat_columns(rules) & set(one.columns))
    names = [name for name in one.columns if name not in drop or name in read]
    if not len(several):  # every row at one GPU: the first call's rows are the answer
        cols = _columns_replaced(one, several, None, names)
    elif n - len(several) < REUSE_ONE_CARD_ROWS:
        cols = _columns_replaced(estimate(sc.assign(gpus=count, tp=0, pp=0), models, gpus, **allow, **overhead),
                                 several, None, names)
    else:
        at_count = estimate(sc.iloc[several].assign(gpus=count[several], tp=0, pp=0), models, gpus, **allow, **overhead)
        cols = _columns_replaced(one, several, at_count, names)
    # one card "holds it alone" only where the rules let that card run it (bf16 on a T4 held its bytes yet is
    # refused); the rows estimated at more GPUs are asked at their count (a multi-GPU rule, several Macs, refuses the
    # count, not the card). A row's verdict reads that row alone (engine/compat.py), so the rows' verdict at their
    # count is the one-card verdict wherever the count is one, and only there is the one-card verdict read (a row at
    # two or more GPUs did not fit on one: one_fits is false there whatever the rules)
    verdict = compat_check(pd.DataFrame({c: cols[c] for c in compat_columns(rules) if c in cols}, copy=False),
                           gpus, rules)
    compatible = verdict["compatible"].to_numpy(dtype=bool)
    one_fits = one_fits & compatible
    ok = (within & pd.Series(cols["fits"], copy=False).fillna(False).to_numpy(dtype=bool) & compatible & ~unmodelled
          & ~peft_refused)
    cols["gpus_needed"] = needed
    # the new columns (new names after the old, in this order; an existing name replaced in place)
    cols.update({
        "compatible": compatible, "compatibility_notes": _as_column(verdict["compatibility_notes"].to_numpy().copy()),
        "fits_within": ok, "max_gpus": limit,
        "label": _labels(unmodelled, ok, compatible, count, limit, peft_refused),
        "one_gpu_fits": one_fits, "one_gpu_peak_bytes": one["peak_bytes"].to_numpy(copy=True),
        "one_gpu_weights_bytes": one["weights_bytes"].to_numpy(copy=True),
        "one_gpu_kv_cache_bytes": one["kv_cache_context_bytes"].to_numpy(copy=True),  # (at the context, whatever the peak phase)
        "one_gpu_memory_used_fraction": one["memory_used_fraction"].to_numpy(copy=True),
        **{f"gpu_{col}": _as_column(gpus[col].array.take(gidx)) for col in GPU_INFO},
    })
    price = pd.to_numeric(pd.Series(cols["gpu_price_usd"]), errors="coerce").to_numpy(dtype=float)
    cloud = pd.to_numeric(pd.Series(cols["gpu_cloud_usd_per_hour"]), errors="coerce").to_numpy(dtype=float)
    cols["buy_usd"] = np.where(ok, count * price, np.nan)
    cols["rent_usd_per_hour"] = np.where(ok, count * cloud, np.nan)
    system, pair = system_costs_per_pair(pd.DataFrame({"gpu": cols["gpu"]}, copy=False), gpus,
                                         shipped_hosts() if hosts is None else hosts, condition, count=count)
    for src, dst in SYSTEM_COLUMNS.items():
        per_pair = system[src].to_numpy()
        if per_pair.dtype.kind == "f":
            cols[dst] = np.where(ok, per_pair[pair], np.nan)
        else:  # text: typed once per pair (and "" for a row that does not fit), then taken for every row
            cols[dst] = _as_text(np.append(per_pair, "")).take(np.where(ok, pair, len(per_pair)))
    pays = breakeven(cols["system_usd"].astype(float),
                     pd.DataFrame({c: cols[c] for c in BREAKEVEN_INPUTS if c in cols}, index=pd.RangeIndex(n), copy=False))
    cols["system_breakeven_months"] = pays["breakeven_months"].to_numpy(copy=True)
    cols["system_breakeven_hours"] = pays["breakeven_hours"].to_numpy(copy=True)
    cols["total_vram_bytes"] = count * np.asarray(cols["usable_bytes"], dtype=float)
    cols["beyond_context"] = np.zeros(n, dtype=bool)
    cols["beyond_layers"] = np.zeros(n, dtype=bool)
    for name in [name for name in cols if name in drop]:
        del cols[name]
    if unmodelled.any():  # no figure of the engine's stands for these rows: missing, never a fit (the GPU's facts stay)
        _mask_rows(cols, unmodelled, keep={*everything.columns, "usable_bytes", *(c for c in cols if c.startswith("gpu_"))})
    res = _frame_of(cols, pd.RangeIndex(n))
    if refused.any():  # the refused rows, in their places: no figures, labelled, never a fit
        left_out = everything[refused].drop(columns=[c for c in everything.columns if c in drop])
        left_out["beyond_context"] = long_rows[refused]
        left_out["beyond_layers"] = deep_rows[refused]
        left_out["fits_within"] = False
        left_out["compatible"] = True
        left_out["compatibility_notes"] = [[] for _ in range(len(left_out))]
        left_out["label"] = np.where(left_out["beyond_context"], "✗ context", "✗ layers")
        order = np.concatenate([np.flatnonzero(~refused), np.flatnonzero(refused)])
        res = pd.concat([res, left_out], ignore_index=True)
        res = res.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    return res


def _labels(unmodelled: np.ndarray, ok: np.ndarray, compatible: np.ndarray, count: np.ndarray,
            limit: np.ndarray, peft_refused: np.ndarray | None = None) -> pd.api.extensions.ExtensionArray:
    """configurations' label of each row: "✗ not modelled", the GPU count where it fits within its limit, "✗ >limit"
    where it does not, "✗ incompatible" where the rules refuse it, "✗ peft" where peft would not build its LoRA
    (lora_refused_rows; the card may run what it would need, so the rules' verdict comes first). Written once per
    distinct (case, number), as text (a sweep's ~15,000 rows have a few dozen: numpy's per-row text of each count
    and each limit cost ~3 ms)."""
    refused = np.zeros(len(ok), dtype=bool) if peft_refused is None else peft_refused
    case = np.where(unmodelled, 0, np.where(ok, 1, np.where(~compatible, 3, np.where(refused, 4, 2))))
    number = np.where(case == 1, count, np.where(case == 2, limit, 0)).astype(np.int64)
    codes, uniques = pd.factorize(case * (int(number.max(initial=0)) + 1) + number)
    first = np.unique(codes, return_index=True)[1]  # a row of each distinct key, in the key's code order
    texts = [NOT_MODELLED_LABEL if c == 0 else str(k) if c == 1 else f"✗ >{k}" if c == 2
             else PEFT_REFUSED_LABEL if c == 4 else "✗ incompatible"
             for c, k in zip(case[first].tolist(), number[first].tolist())]
    return pd.array(np.asarray(texts, dtype=object), dtype="str").take(codes)


def _mask_rows(cols: dict, rows: np.ndarray, keep) -> None:
    """The engine's float columns (not the scenario's, `keep`) missing at `rows`, and its fit verdicts false there,
    in place (`cols`: configurations' {name: array}, each array its own)."""
    for name, values in cols.items():
        if name in keep:
            continue
        if isinstance(values, np.ndarray) and values.dtype.kind == "f":
            values[rows] = np.nan
        elif name in ("fits", "fits_at_estimate", "one_gpu_fits"):
            values[rows] = False


def groups(frame: pd.DataFrame, by=("model", "plan")) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's group (e.g. model x plan) as a number 0..k-1 in the order the groups are first
    seen, and the k groups' keys as text (one row each, columns `by`), as
    `frame[by].astype(str).drop_duplicates()` gives them (a missing value is a group of its own,
    where a groupby of astype(str) would leave its rows out of every group). Decided per distinct value of each column
    (a categorical's codes; factorized otherwise), not per row as text: a sweep is thousands of rows
    of a few dozen models and plans."""
    by = [c for c in by if c in frame.columns]
    n = len(frame)
    if not by:  # one group of every row
        return np.zeros(n, dtype=np.int64), pd.DataFrame(index=pd.RangeIndex(1 if n else 0))
    if not n:
        return np.zeros(0, dtype=np.int64), frame[by].astype(str).reset_index(drop=True)
    combined = np.zeros(n, dtype=np.int64)
    for col in by:
        codes, uniques = pd.factorize(frame[col], use_na_sentinel=False)
        # distinct values with one text (a missing value and "nan") are one group, as astype(str) has them
        as_text, texts = pd.factorize(pd.Index(uniques, dtype=object).astype(str))
        combined = combined * (len(texts) + 1) + as_text[codes]
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # the groups in first-seen order
    number = np.empty(len(order), dtype=np.int64)
    number[order] = np.arange(len(order))
    keys = frame[by].iloc[first[order]].astype(str).reset_index(drop=True)  # (the columns first: a sweep has ~120)
    return number[inverse.reshape(-1)], keys


def cheapest(configs: pd.DataFrame, cost: str = "buy_usd", by=("model", "plan")) -> pd.DataFrame:
    """Per group (e.g. model x plan): the configuration with the lowest finite `cost`.
    Ties go to fewer GPUs, then to more memory per GPU. Groups keep their first-seen order;
    groups with no priced configuration are left out."""
    finite = np.isfinite(pd.to_numeric(configs[cost], errors="coerce").to_numpy(dtype=float))
    if not finite.any():
        return configs[finite].copy()
    # ranked on the few columns it needs, then the chosen rows taken once (a sweep is thousands of
    # rows x a hundred columns: sorting and copying all of them cost more than the ranking)
    group, _ = groups(configs, by)
    rank = pd.DataFrame({"cost": configs[cost].to_numpy(), "gpus": configs["gpus"].to_numpy(),
                         "usable": configs["usable_bytes"].to_numpy(), "group": group,
                         "row": np.arange(len(configs))})[finite]
    rank = rank.sort_values(["cost", "gpus", "usable"], ascending=[True, True, False], kind="stable")
    best = rank.drop_duplicates(subset="group", keep="first").sort_values("group", kind="stable")
    return configs.iloc[best["row"].to_numpy()].reset_index(drop=True)


def cost_per_fit(configs: pd.DataFrame, by=("model", "plan"), buy_cost: str = "buy_usd",
                 cheapest_buy: pd.DataFrame | None = None, cheapest_rent: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group: the cheapest configuration to buy and the cheapest to rent, side by side.
    Columns: the group keys, buy_* and rent_* (gpu, gpu_name, gpus, cost, memory used, and
    any speed/cost columns the engine returned for that configuration). `buy_cost` chooses
    what "cheapest to buy" weighs: buy_usd (the cards) or system_usd (the whole system, whose
    parts then come as buy_system_usd, buy_system_gpu_usd, buy_host_usd, ...).
    cheapest_buy / cheapest_rent: cheapest(configs, buy_cost, by) and cheapest(configs,
    "rent_usd_per_hour", by) where the caller has them already (computed here otherwise)."""
    if cheapest_buy is None:
        cheapest_buy = cheapest(configs, buy_cost, by)
    if cheapest_rent is None:
        cheapest_rent = cheapest(configs, "rent_usd_per_hour", by)
    by = [c for c in by if c in configs.columns]
    keep = ["gpu", "gpu_name", "gpus", "memory_used_fraction", "peak_bytes", "total_vram_bytes"]
    keep += [c for c in SPEED_COLUMNS if c in configs.columns]
    system = [c for c in (*SYSTEM_COLUMNS.values(), "system_breakeven_months", "system_breakeven_hours")
              if c in configs.columns]
    buy = cheapest_buy[list(dict.fromkeys(by + keep + system + ["buy_usd", buy_cost]))]
    # the rental's price date and source (the catalog's cloud_date / cloud_source): every price shown has both
    dated = [c for c in ("gpu_cloud_date", "gpu_cloud_source") if c in cheapest_rent.columns]
    rent = cheapest_rent[by + keep + ["rent_usd_per_hour"] + dated]
    buy = buy.rename(columns={c: f"buy_{c}" for c in keep + system})
    rent = rent.rename(columns={**{c: f"rent_{c}" for c in keep}, "gpu_cloud_date": "rent_price_date",
                                "gpu_cloud_source": "rent_price_source"})
    group, keys = groups(configs, by)
    out = keys.merge(buy.astype({c: str for c in by}), on=by, how="left")
    out = out.merge(rent.astype({c: str for c in by}), on=by, how="left")
    # (the merges keep the keys' rows in their order: one buy and one rent row per group at most)
    fits_any = np.bincount(group, weights=configs["fits_within"].fillna(False).to_numpy(dtype=float),
                           minlength=len(keys)) > 0
    out["fits_somewhere"] = fits_any
    out["not_modelled"] = _unmodelled_groups(configs, group, len(keys))  # named apart from "none within the limit"
    return out


# ---- budgets --------------------------------------------------------------------------------

def plan_cost(configs: pd.DataFrame, mode: str = "buy", hours: float | None = None) -> pd.Series:
    """What a configuration costs under a budget mode: buy (purchase $), cloud_hour ($ per hour
    for all its GPUs) or cloud_job ($ per hour x hours)."""
    if mode == "buy":
        return configs["buy_usd"].astype(float)
    if mode == "cloud_hour":
        return configs["rent_usd_per_hour"].astype(float)
    if mode == "cloud_job":
        if hours is None or not np.isfinite(hours) or hours <= 0:
            raise ValueError(f"hours {hours!r} is not accepted; accepted: a number of hours > 0")
        return configs["rent_usd_per_hour"].astype(float) * float(hours)
    raise ValueError(f"budget mode {mode!r} is not accepted; accepted: {', '.join(BUDGET_MODES)}")


def _unmodelled_groups(configs: pd.DataFrame, group: np.ndarray, k: int) -> np.ndarray:
    """Per group (`groups`' numbers): every row labelled NOT_MODELLED_LABEL (the engine does not model it;
    no GPU count was tried). False for every group of a frame without labels."""
    if "label" not in configs.columns or not len(configs):
        return np.zeros(k, dtype=bool)
    modelled = configs["label"].astype(str).to_numpy() != NOT_MODELLED_LABEL
    return np.bincount(group, weights=modelled.astype(float), minlength=k) == 0


def budget_plan(configs: pd.DataFrame, budget: float, mode: str = "buy", hours: float | None = None,
                stretch: float = 0.5, by=("model", "plan"), best: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """What a budget runs. Returns three frames, each one row per group with its cheapest
    configuration and `cost_usd`:
      feasible   cost <= budget, cheapest first within the catalog order of groups;
      unlocks    budget < cost <= budget x (1 + stretch), with `extra_usd` = cost - budget;
      out_of_reach  no configuration within the GPU limit (or none priced);
      not_modelled  groups the engine does not model (every row labelled NOT_MODELLED_LABEL: training
                 a linear-attention model), keys only, never counted as out of reach;
      groups     every group of the sweep (its `by` keys as text), in first-seen order.
    best: cheapest(configs with cost_usd = plan_cost(configs, mode, hours), "cost_usd", by) where
    the caller has it already (the budget then only splits it; computed here otherwise)."""
    if not np.isfinite(budget) or budget < 0:
        raise ValueError(f"budget {budget!r} is not accepted; accepted: a number of dollars >= 0")
    if not np.isfinite(stretch) or stretch < 0:
        raise ValueError(f"stretch {stretch!r} is not accepted; accepted: a fraction >= 0, e.g. 0.5 for +50%")
    if best is None:
        best = cheapest(configs.assign(cost_usd=plan_cost(configs, mode, hours)), "cost_usd", by)
    feasible = best[best["cost_usd"] <= budget].reset_index(drop=True)
    # (copied: the few rows in one block per dtype, so that assign does not insert into a result frame of
    # a block per column, which pandas flags as fragmented past 100 blocks)
    more = best[(best["cost_usd"] > budget) & (best["cost_usd"] <= budget * (1 + stretch))].copy()
    unlocks = more.assign(extra_usd=more["cost_usd"] - budget).sort_values("cost_usd", kind="stable").reset_index(drop=True)
    by = [c for c in by if c in configs.columns]
    codes, all_groups = groups(configs, by)
    # the groups with no priced configuration (all_groups.merge(best's keys, how="left", indicator=True) said which:
    # ~4 ms; each group is one row of both, its keys as text)
    if by:
        priced = set(zip(*(best[c].astype(str) for c in by)))
        unpriced = np.fromiter((key not in priced for key in zip(*(all_groups[c] for c in by))), dtype=bool,
                               count=len(all_groups))
    else:  # one group of every row: priced where any row is
        unpriced = np.full(len(all_groups), not len(best))
    # a group whose every row the engine does not model (training a linear-attention model, not_modelled) is
    # named as such, not "out of reach": no GPU count was tried (procurement.budget_within does the same)
    unmodelled = _unmodelled_groups(configs, codes, len(all_groups))
    keep = all_groups
    return {"feasible": feasible, "unlocks": unlocks,
            "out_of_reach": keep[unpriced & ~unmodelled].reset_index(drop=True),
            "not_modelled": keep[unpriced & unmodelled].reset_index(drop=True),
            "groups": all_groups.reset_index(drop=True)}


def tier_checks(refs: pd.DataFrame, workload: dict, models: pd.DataFrame, gpus: pd.DataFrame,
                max_gpus: int = 8, overhead: dict | None = None, rules: pd.DataFrame | None = None,
                hosts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Source article 001's budget tiers beside our answer: for the tier's model, method and
    card (the rest of the training workload as given), the GPUs we need and what they cost.
    `rules`, `hosts`: as configurations' (default the shipped ones)."""
    by_id = refs.set_index("id")
    tiers = pd.DataFrame([t for t in BUDGET_TIERS if t["reference"] in by_id.index])
    if tiers.empty:
        return tiers
    sc = pd.DataFrame(list(by_id.loc[tiers["reference"], "scenario"]))
    tiers["model"] = sc["model"].astype(str).to_numpy()
    tiers["gpu"] = sc["gpu"].astype(str).to_numpy()
    method = DEFAULTS["method"]
    tiers["method"] = sc.get("method", pd.Series([method] * len(sc))).fillna(method).astype(str).to_numpy()
    tiers["article_gpus"] = by_id.loc[tiers["reference"], "value"].to_numpy(dtype=float)
    gidx = pd.Index(gpus["id"]).get_indexer(tiers["gpu"])
    price = np.where(gidx >= 0, gpus["price_usd"].to_numpy(dtype=float)[np.maximum(gidx, 0)], np.nan)
    tiers["article_cost_usd"] = tiers["article_gpus"] * price
    base = {k: v for k, v in workload.items() if k not in ("model", "gpu", "method", "gpus")}
    base["task"] = "train"
    frame = _with_columns(tiers[["model", "gpu", "method"]].copy(),
                          {key: [value] * len(tiers) for key, value in base.items() if key not in ("model", "gpu", "method")})
    auto = DEFAULTS["base_precision"]
    frame["base_precision"] = np.where(frame["method"] == "qlora", frame.get("base_precision", auto), auto)
    conf = configurations(frame, models, gpus, max_gpus=max_gpus, overhead=overhead, rules=rules, hosts=hosts)
    tiers["our_gpus"] = np.where(conf["fits_within"], conf["gpus"], np.inf)
    tiers["our_label"] = conf["label"].to_numpy()
    tiers["our_cost_usd"] = conf["buy_usd"].to_numpy()
    tiers["article_config_fits"] = tiers["our_gpus"] <= tiers["article_gpus"]
    return tiers


# ---- what-if -------------------------------------------------------------------------------

# How much a change alters the result, for ranking (lower first among changes that fit):
# 0 the same run at no cost; 1 the same result, somewhat slower (recomputation, sharding
# traffic); 2 the same result, much slower (states or weights moved over PCIe every step);
# 3 a different setting of the same run (batch, sequence, precision of states, KV cache);
# 4 a different method or a quantized model.
IMPACT_LABELS = {0: "none", 1: "slower", 2: "much slower", 3: "changes the run", 4: "changes the method or model"}
# Gradient checkpointing recomputes each layer's forward in backward: about one extra forward,
# i.e. ~33% more compute for a step of forward (1x) + backward (2x) (Chen et al. 2016,
# "Training Deep Nets with Sublinear Memory Cost"; Korthikanti et al. 2022, sec. 5).
CHECKPOINTING_NOTE = "about 33% more compute: each layer's forward runs again in backward (Chen et al. 2016)"


def _setting(base: dict, name: str):
    """base[name], or the engine's default for it where the dict leaves it out (never a default typed here)."""
    return base.get(name, DEFAULTS[name])


def _variants(base: dict, heads: int, liger_patched: bool = True, flash_runs: bool = True,
              bf16_runs: bool = True) -> list[tuple[str, dict, int, str]]:
    """(label, overrides, impact, trade-off) for the changes that apply to `base`. liger_patched: Liger-Kernel
    has kernels for the model's architecture (engine/rules.py liger_unpatched); flash_runs: the flash-attn package
    runs on the scenario's GPU (flash_attention_runs); bf16_runs: the GPU computes in bf16 (bf16_refused)."""
    out: list[tuple[str, dict, int, str]] = []
    gpus = int(_setting(base, "gpus"))
    if _setting(base, "task") == "train":
        method = _setting(base, "method")
        gc = bool(_setting(base, "grad_checkpointing"))
        opt = _setting(base, "optimizer")
        prec = _setting(base, "precision")
        zero = int(_setting(base, "zero"))
        batch, seq = int(_setting(base, "batch")), int(_setting(base, "seq"))
        rank = int(_setting(base, "lora_rank"))
        if not gc:
            out.append(("Gradient checkpointing", {"grad_checkpointing": True}, 1, CHECKPOINTING_NOTE))
        # the attention's path (issue 12, engine/stacks.py): a padded batch under SDPA keeps a seq x seq
        # mask per layer and K/V repeated to every head; eager attention (Gemma 2 under sdpa) its scores
        decided = {s: (base.get(s) if _setting(base, s) != "auto"
                       else recipe_value(base.get("recipe") or DEFAULT_RECIPE, s, method, gc))
                   for s in ("attention", "padding", "packing")}
        if decided["attention"] in ("sdpa", "eager") and flash_runs:
            out.append(("FlashAttention-2 (no mask or scores kept)", {"attention": "flash"}, 0,
                        "same attention, fused and unpadded: attn_implementation='flash_attention_2' "
                        "(the flash-attn package, an Ampere or newer GPU)"))
        # (not for DPO: no DPO trainer packs pairs, engine/scenarios.py refuses it)
        if (decided["attention"] == "sdpa" and decided["padding"] == "padded" and decided["packing"] != "on"
                and _setting(base, "objective") != "dpo"):
            out.append(("Sequence packing (no padding, no mask)", {"packing": "on"}, 3,
                        "examples packed into full-length sequences (trl packing=True): no padding tokens; "
                        "attention crosses example boundaries unless position_ids / FlashAttention varlen"))
        # Liger's kernels (engine/stacks.py liger): its fused linear cross-entropy drops the logits where the loss is
        # left auto, its RMSNorm and SwiGLU keep less; offered where the recipe's framework has the switch
        recipe = base.get("recipe") or DEFAULT_RECIPE
        liger = base.get("liger") if _setting(base, "liger") != "auto" else recipe_value(recipe, "liger", method, gc)
        if liger == "off" and recipe in LIGER_SWITCH_RECIPES and liger_patched:
            out.append(("Liger kernels (fused cross-entropy, RMSNorm, SwiGLU)", {"liger": "on"}, 0,
                        "same math in Triton kernels (pip install liger-kernel): use_liger_kernel=True in "
                        "TrainingArguments, enable_liger_kernel in LLaMA-Factory, axolotl's Liger plugin"))
        if opt == "adamw":
            out.append(("Fused AdamW (no step temporaries)", {"optimizer": "adamw_fused"}, 0,
                        "same update, one fused kernel: torch.optim.AdamW(fused=True)"))
        if opt in ("adamw", "adamw_fused"):
            out.append(("8-bit AdamW (bitsandbytes)", {"optimizer": "adamw_8bit"}, 3,
                        "8-bit optimizer states; matched 32-bit Adam in Dettmers et al. 2022"))
            out.append(("Paged 8-bit AdamW (states may spill to CPU)", {"optimizer": "paged_adamw_8bit"}, 3,
                        "8-bit states in CUDA unified memory, paged to the CPU under pressure"))
        if "bf16" in str(prec) and not bf16_runs:  # the card has no bf16 (Volta, Turing): its fp16 twin runs there
            out.append(("FP16 instead of BF16 (this card has no bf16)", {"precision": str(prec).replace("bf16", "fp16")},
                        3, "fp16's narrower range: a loss scaler (amp_fp16, mixed_fp16), and pure fp16 training can "
                           "overflow"))
        pure = "bf16" if bf16_runs else "fp16"
        if prec in ("fp32", "amp_bf16", "amp_fp16", "mixed_bf16", "mixed_fp16"):
            out.append((f"Pure {pure} weights, gradients and states", {"precision": pure}, 3,
                        "no fp32 master copy: small updates can round away"))
        # preference tuning (objective dpo, engine/components.py dpo_parts): the reference log-probs computed once
        # before training (TRL's and axolotl's precompute_ref_log_probs), no reference copy nor reference forward in
        # the step; offered only under the recipes that run it (engine/stacks.py DPO_NO_PRECOMPUTED)
        dpo = _setting(base, "objective") == "dpo"
        reference = _setting(base, "dpo_reference")
        decided_ref = reference if reference != "auto" else recipe_value(recipe, "dpo_reference", method, gc)
        if dpo and decided_ref != "precomputed" and recipe not in DPO_NO_PRECOMPUTED:
            out.append(("Precomputed reference log-probs (no reference model in the step)",
                        {"dpo_reference": "precomputed"}, 0,
                        "the reference's log-probs computed in one pass before training: precompute_ref_log_probs: "
                        "true (TRL DPOConfig, axolotl)"))
        # an adapter method takes the recipe's reference for it (the policy with its adapters disabled) where the
        # scenario asked for a copy: a copy beside adapters is not every recipe's (engine/stacks.py DPO_NO_ADAPTER_COPY)
        adapter_ref = {"dpo_reference": "auto"} if dpo and reference == "copy" else {}
        # (every adapter recipe runs the rest: precomputed where the recipe runs it at all, adapters_off)
        adapters = (  # (method, label, trade-off, short trade-off, the methods it replaces)
            ("lora", f"LoRA r={rank}", "trains low-rank adapters only (Hu et al. 2021)", "adapters only",
             ("full", "freeze")),
            ("qlora", f"QLoRA r={rank} (4-bit NF4 base)", "frozen base quantized to NF4; slower matmuls "
             "(Dettmers et al. 2023)", "NF4 base", ("full", "freeze", "lora")))
        for target, label, note, short, replaces in adapters:
            if method in replaces:
                out.append((label, {"method": target, "base_precision": "auto", **adapter_ref}, 4, note))
                if not gc:
                    out.append((label.split(" (")[0] + " + gradient checkpointing",
                                {"method": target, "base_precision": "auto", "grad_checkpointing": True,
                                 **adapter_ref}, 4,
                                f"{short}; " + CHECKPOINTING_NOTE))
        # (only counts the engine takes at the row's tp, pp, cp and ep: engine/scenarios.py gpus_step; ep 4 on 2 or
        # 6 GPUs is refused)
        step = int(gpus_step(max(int(_setting(base, "tp")), 1), max(int(_setting(base, "pp")), 1),
                             _setting(base, "cp"), _setting(base, "ep")))
        for k in (2, 4, 8):
            if k > gpus and k % step == 0:
                out.append((f"ZeRO-3 / FSDP over {k} GPUs", {"zero": 3, "gpus": k}, 1,
                            f"{k} GPUs; parameters gathered layer by layer (communication)"))
        if gpus > 1 and zero < 3:
            out.append((f"ZeRO-3 / FSDP on the same {gpus} GPUs", {"zero": 3}, 1,
                        "parameters gathered layer by layer (communication)"))
        stage = max(zero, 2)
        out.append((f"ZeRO-{stage} + optimizer states offloaded to CPU", {"zero": stage, "offload": "optimizer"}, 2,
                    "optimizer step on the CPU (ZeRO-Offload): slower, needs host memory"))
        out.append(("ZeRO-3 + parameters and optimizer offloaded to CPU", {"zero": 3, "offload": "all"}, 2,
                    "weights streamed from CPU memory every step: much slower"))
        if batch > 1:
            # (a DPO row's batch counts preference pairs: dpo_parts)
            unit = (lambda k: f" pair{'s' if k != 1 else ''}") if dpo else (lambda k: "")
            out.append((f"Micro-batch 1{unit(1)}", {"batch": 1}, 3, "gradient accumulation keeps the effective batch"))
            if batch // 2 > 1:
                out.append((f"Micro-batch {batch // 2:,}{unit(batch // 2)}", {"batch": batch // 2}, 3,
                            "gradient accumulation keeps the effective batch"))
        if seq >= 256:
            out.append((f"Sequence {seq // 2:,}", {"seq": seq // 2}, 3, "shorter training samples"))
    else:
        prec = _setting(base, "precision")
        kv = _setting(base, "kv_precision")
        batch, seq = int(_setting(base, "batch")), int(_setting(base, "seq"))
        tp = int(_setting(base, "tp"))
        if prec == "bf16" and not bf16_runs:  # the card has no bf16: the same checkpoint loaded in fp16
            out.append(("Weights FP16 (this card has no bf16)", {"precision": "fp16"}, 0,
                        "torch_dtype=torch.float16 (vLLM --dtype half): the same bytes"))
        for target, note in (("int8", "8-bit weights (LLM.int8)"), ("int4", "4-bit GPTQ/AWQ weights (group 128)"),
                             ("q4_k_m", "llama.cpp Q4_K_M file")):
            if target != prec:
                out.append((f"Weights {target.upper()}", {"precision": target}, 4, note + "; some quality loss"))
        if kv in ("auto", "fp32", "bf16", "fp16"):
            out.append(("KV cache FP8", {"kv_precision": "fp8"}, 3, "8-bit KV cache (vLLM kv_cache_dtype=fp8)"))
        if batch > 1:
            out.append((f"{max(batch // 2, 1)} concurrent sequences", {"batch": max(batch // 2, 1)}, 3, "less throughput"))
        if seq >= 256:
            out.append((f"Context {seq // 2:,}", {"seq": seq // 2}, 3, "shorter prompts and answers"))
        # the model split by tensor parallel alone (pp 1 where the scenario has stages: k GPUs at tp k and its pp would
        # be refused), and only where that split takes the scenario's expert parallel (engine/scenarios.py ep_accepted:
        # ep a multiple of tp dividing gpus / pp, so tp = ep)
        stages = {"pp": 1} if int(_setting(base, "pp")) > 1 else {}
        for k in (2, 4, 8):
            if k > tp and heads % k == 0 and bool(ep_accepted(k, k, 1, _setting(base, "ep"))):
                out.append((f"Tensor parallel over {k} GPUs", {"tp": k, "gpus": k, **stages}, 1,
                            f"{k} GPUs; all-reduce after every layer"))
    return out


def what_if(base: dict, models: pd.DataFrame, gpus: pd.DataFrame, overhead: dict | None = None) -> pd.DataFrame:
    """The scenario `base` (a full scenario dict with model and gpu) and every change that
    applies to it, all estimated in ONE `estimate` call.

    Each variant is estimated as configured and, in the same call, sharded over two or more
    GPUs (ZeRO-3 for training; inference solves its tensor-parallel degree anyway), which gives
    `gpus_to_fit`: its own GPU count when it fits, else the smallest count that holds it.
    Row 0 is the baseline; the others are ranked: those that fit first (fewer GPUs, then the
    most memory saved, then lower impact), then the rest by the same keys. Changes that add
    memory per GPU are left out (they never make a workload fit).

    Columns: rank (0 = baseline), change, overrides (text), impact, impact_label, tradeoff,
    gpus_to_fit, saved_bytes (baseline peak - this peak), and the estimate's columns.
    """
    rules = compatibility_rules() if gpus is not None else None  # (read once: a catalog query each time)
    frame, variants = _what_if_frame(base, models, gpus, rules)
    ranked = _what_if_ranked(estimate(frame, models, gpus, **(overhead or {})), frame, variants, gpus, rules)
    return _with_combination(ranked, base, variants, models, gpus, overhead, rules)


# FlashAttention-2 (the flash-attn package behind attn_implementation='flash_attention_2') runs on Ampere or newer
# NVIDIA GPUs and, through its Triton backend, on AMD's: not on Volta or Turing (the catalog's compatibility rule
# flash-attention-2-ampere, Dao-AILab/flash-attention README), nor on Apple's GPUs (CUDA and ROCm only).
FLASH2_REFUSED_ARCHITECTURES = ("volta", "turing")
FLASH2_REFUSED_VENDORS = ("apple",)


def flash_attention_runs(gpu: str | None, gpus: pd.DataFrame | None) -> bool:
    """Whether the flash-attn package runs on catalog GPU `gpu` (True where the GPU or its facts are unknown)."""
    if gpus is None or gpu is None or "id" not in gpus:
        return True
    card = gpus[gpus["id"] == gpu]
    if card.empty:
        return True
    arch = str(card["architecture"].iloc[0]).lower() if "architecture" in card else ""
    vendor = str(card["vendor"].iloc[0]).lower() if "vendor" in card else ""
    return arch not in FLASH2_REFUSED_ARCHITECTURES and vendor not in FLASH2_REFUSED_VENDORS


def bf16_refused(gpu: str | None, gpus: pd.DataFrame | None, rules: pd.DataFrame | None = None) -> bool:
    """Whether the compatibility rules (catalog/gpus.yaml; default the shipped ones) refuse bf16 on catalog GPU `gpu`
    where they take fp16 (Volta, Turing: the rule bf16-needs-ampere), asked of engine/compat.py with two probe rows.
    False where the GPU is unknown."""
    if gpus is None or gpu is None or "id" not in gpus or not (gpus["id"] == gpu).any():
        return False
    probes = pd.DataFrame({"gpu": [gpu, gpu], "precision": ["bf16", "fp16"], "gpus": [1, 1]})
    bf16, fp16 = _compatible(probes, gpus, rules)
    return bool(fp16 and not bf16)


def _what_if_frame(base: dict, models: pd.DataFrame, gpus: pd.DataFrame | None = None,
                   rules: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list]:
    """what_if's scenario rows: the baseline and every variant as configured, then the same rows
    sharded over two or more GPUs; and the variants."""
    if not base.get("gpu"):
        raise ValueError("what-if needs a GPU to fit against; accepted: a catalog GPU id")
    known = models.set_index("id")
    heads = int(known.loc[base["model"], "num_heads"]) if base.get("model") in known.index else 1
    patched = (not bool(liger_unpatched([known.loc[base["model"], "family"]])[0])
               if base.get("model") in known.index and "family" in known else True)
    variants = _variants(base, heads, patched, flash_attention_runs(base.get("gpu"), gpus),
                         not bf16_refused(base.get("gpu"), gpus, rules))
    rows = [dict(base)] + [{**base, **v[1]} for v in variants]  # a handful of variants, not scenario rows
    frame = with_defaults(pd.DataFrame(rows))
    count = pd.to_numeric(frame["gpus"]).to_numpy(dtype=np.int64)
    train = frame["task"].astype(str).to_numpy() == "train"
    split = (np.maximum(pd.to_numeric(frame["tp"]).to_numpy(dtype=np.int64), 1)  # 0 = auto: at least 1
             * np.maximum(pd.to_numeric(frame["pp"]).to_numpy(dtype=np.int64), 1))
    # serving: split over those GPUs as the engine decides (tp, pp auto): a tp or pp given would keep the
    # other GPUs as replicas (engine/rules.py), each needing the count again. With expert parallel (ep > 1) the
    # split at another count may not take it (engine/scenarios.py ep_accepted: a refused row fails the whole call):
    # as configured, the engine's solver searching only the counts that take it (engine/executor.py)
    ep = pd.to_numeric(frame["ep"]).to_numpy(dtype=np.int64)
    kept = ~train & (ep > 1)
    # training: ZeRO-3 at a count the engine takes at the row's tp, pp, cp and ep (engine/scenarios.py gpus_step)
    step = gpus_step(frame["tp"], frame["pp"], frame["cp"], ep)
    wider = np.maximum(count, 2 * split)
    wider = np.where(train, -(-wider // step) * step, wider)
    sharded = frame.assign(gpus=np.where(kept, count, wider), zero=np.where(train, 3, frame["zero"]),
                           tp=np.where(train | kept, frame["tp"], 0), pp=np.where(train | kept, frame["pp"], 0))
    return pd.concat([frame, sharded], ignore_index=True), variants


def _compatible(rows: pd.DataFrame, gpus: pd.DataFrame | None, rules: pd.DataFrame | None = None) -> np.ndarray:
    """engine/compat.py's verdict for estimated rows, under `rules` (default the shipped compatibility rules)."""
    if gpus is None or not len(rows):
        return np.ones(len(rows), dtype=bool)
    return compat_check(rows, gpus, compatibility_rules() if rules is None else rules)["compatible"].to_numpy(dtype=bool)


def with_compatibility(rows: pd.DataFrame, gpus: pd.DataFrame | None, rules: pd.DataFrame | None = None) -> pd.DataFrame:
    """Estimated rows with the compatibility rules' verdict, as `estimate --json` and `check` give it: `compatible`,
    `compatibility_notes`, and `fits` false where a rule refuses the card (bf16 on a T4 fits its bytes, not the card).
    The pages' one-scenario rows (Overview, Breakdown) go through it, so they never say "fits" where check says no."""
    out = rows.copy()
    if gpus is None or not len(out):
        out["compatible"] = True
        out["compatibility_notes"] = [[] for _ in range(len(out))]
        return out
    verdict = compat_check(out, gpus, compatibility_rules() if rules is None else rules)
    compatible = verdict["compatible"].to_numpy(dtype=bool)
    out["fits"] = out["fits"].astype(object).where(compatible, False)  # (a null fit, beyond the context, stays null)
    out["compatible"] = compatible
    out["compatibility_notes"] = verdict["compatibility_notes"].to_numpy()
    return out


def _what_if_ranked(both: pd.DataFrame, frame: pd.DataFrame, variants: list, gpus: pd.DataFrame | None = None,
                    rules: pd.DataFrame | None = None) -> pd.DataFrame:
    """what_if's table from the estimate of _what_if_frame's rows (`both`, in that order)."""
    k = len(frame) // 2
    count = pd.to_numeric(frame["gpus"].iloc[:k]).to_numpy(dtype=np.int64)
    res = both.iloc[:k].reset_index(drop=True)
    solved = _nan_as_inf(both["gpus_needed"].iloc[k:].to_numpy(dtype=float))
    # a card the compatibility rules refuse for the row (bf16 on Volta / Turing, ...) fits it at no count
    compatible = _compatible(res, gpus, rules)
    res["fits"] = res["fits"].fillna(False).to_numpy(dtype=bool) & compatible
    res["compatible"] = compatible
    # past the row's own count, the next one the engine takes: a training row keeps its tp, pp, cp and ep (the step
    # of engine/scenarios.py gpus_step; the solved count is one already); a serving row with expert parallel takes
    # only the solver's counts (engine/executor.py: a split whose tp is its ep), none at or below its own
    train = res["task"].astype(str).to_numpy() == "train"
    ep = res["ep"].to_numpy(dtype=np.int64)
    step = np.where(train, gpus_step(res["tp"], res["pp"], res["cp"], ep), 1)
    beyond = np.maximum(-(-(count + 1) // step) * step, solved)
    beyond = np.where(~train & (ep > 1), np.where(solved > count, solved, np.inf), beyond)
    res["gpus_to_fit"] = np.where(res["fits"].to_numpy(dtype=bool), count, np.where(compatible, beyond, np.inf))
    res.insert(0, "change", ["As configured"] + [v[0] for v in variants])
    res.insert(1, "overrides", ["—"] + [", ".join(f"{key}={val}" for key, val in v[1].items()) for v in variants])
    res.insert(2, "impact", [0] + [v[2] for v in variants])
    res.insert(3, "impact_label", ["—"] + [IMPACT_LABELS[v[2]] for v in variants])
    res.insert(4, "tradeoff", ["—"] + [v[3] for v in variants])
    res.insert(5, "change_count", [0] + [1] * len(variants))
    res["saved_bytes"] = res["peak_bytes"].iloc[0] - res["peak_bytes"]
    # a change that adds memory per GPU (e.g. ZeRO-3 + offload on one GPU, whose gathers and
    # pinned buffers cost more than they save there) is no way to make a workload fit: left out
    adds = (res["saved_bytes"].to_numpy(dtype=float) < 0) & (np.arange(k) > 0)
    if adds.any():
        res = res[~adds].reset_index(drop=True)
    return _ranked(res)


def _ranked(res: pd.DataFrame) -> pd.DataFrame:
    """The what-if rows (the baseline first) ranked: fits first, on the fewest GPUs, then by memory saved (most
    first: QLoRA's 10 GiB before 8-bit AdamW's 0.02 GiB), then the lower impact; changes that save nothing go last."""
    res = res.drop(columns="rank", errors="ignore").reset_index(drop=True)
    fits = res["fits"].fillna(False).to_numpy(dtype=bool)
    key = pd.DataFrame({"nofit": ~fits, "gpus": res["gpus_to_fit"], "no_effect": res["saved_bytes"] <= 0,
                        "saved": -res["saved_bytes"].astype(float), "impact": res["impact"]})
    key.iloc[0] = [False, -1.0, False, -np.inf, -1]  # the baseline stays first
    order = key.sort_values(["nofit", "gpus", "no_effect", "saved", "impact"], kind="stable").index
    res = res.loc[order].reset_index(drop=True)
    res.insert(0, "rank", np.arange(len(res)))
    return res


# Changes tried together when no single change fits on the scenario's GPUs: every combination of up to this
# many changes that set no column to two values (~15-18 changes for a training row, so 550-970 rows in one
# more engine call). Three covers the usual remedy (checkpointing, a smaller micro-batch and a
# loss that keeps no logits; or an adapter method, checkpointing and 8-bit states).
COMBINE_MAX = 3
# Where no combination of up to COMBINE_MAX fits on the scenario's own GPUs, sets of four are tried in a second call
# (~1,800 rows): an 8B QLoRA on a T4 needs fp16 (no bf16 there), checkpointing, micro-batch 1 and Liger's loss.
COMBINE_MORE = 4


def _combinations(overrides: list, k: int) -> list[tuple[tuple, dict]]:
    """Every set of k changes (indices into overrides) whose overrides agree where they share a column, with the
    overrides merged."""
    from itertools import combinations
    out = []
    for idx in combinations(range(len(overrides)), k):
        merged: dict = {}
        for i in idx:
            if any(key in merged and merged[key] != value for key, value in overrides[i].items()):
                break
            merged.update(overrides[i])
        else:
            out.append((idx, merged))
    return out


def _with_combination(res: pd.DataFrame, base: dict, variants: list, models: pd.DataFrame, gpus: pd.DataFrame,
                      overhead: dict | None, rules: pd.DataFrame | None = None) -> pd.DataFrame:
    """`res` (what_if's ranked rows) with the best combination of changes added, where no single change fits on
    the scenario's own GPU count: of the combinations that fit (as configured, each on its own GPU count), the one
    on the fewest GPUs, then with the fewest changes, the least impact and the lowest peak. Added only where it
    needs fewer GPUs than any single change (`gpus_to_fit`). Sets of 2-3 in one more engine call, and sets of 4 in
    another where none of those fits on the scenario's own GPU count (the fewest any change has). A row the
    compatibility rules refuse on the card never fits."""
    own = int(res["gpus"].iloc[0])
    singles = res[res["rank"] > 0]
    fits = singles["fits"].fillna(False).to_numpy(dtype=bool)
    if (fits & (singles["gpus_to_fit"].to_numpy(dtype=float) <= own)).any():
        return res
    by_label = {v[0]: v for v in variants}
    # every single change left (those that add memory are out already): one that saves nothing alone may be what a
    # second needs (8-bit states once checkpointing has moved the peak to the optimizer step)
    useful = [by_label[c] for c in singles["change"] if c in by_label]
    combos, parts = [], []
    for sizes in ((2, COMBINE_MAX), (COMBINE_MAX + 1, COMBINE_MORE)):  # a second call only where the first finds none
        these = [c for k in range(sizes[0], sizes[1] + 1) for c in _combinations([v[1] for v in useful], k)]
        if not these:
            break
        part = estimate(with_defaults(pd.DataFrame([{**base, **merged} for _, merged in these])), models, gpus,
                        **(overhead or {}))
        compatible = _compatible(part, gpus, rules)
        part["fits"] = part["fits"].fillna(False).to_numpy(dtype=bool) & compatible
        part["compatible"] = compatible
        combos, parts = combos + these, parts + [part]
        if (part["fits"].to_numpy(dtype=bool) & (part["gpus"].to_numpy(dtype=float) <= own)).any():
            break
    if not combos:
        return res
    est = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    ok = est["fits"].to_numpy(dtype=bool)
    if not ok.any():
        return res
    count = est["gpus"].to_numpy(dtype=float)
    size = np.array([len(idx) for idx, _ in combos], dtype=float)
    worst = np.array([max(useful[i][2] for i in idx) for idx, _ in combos], dtype=float)
    total = np.array([sum(useful[i][2] for i in idx) for idx, _ in combos], dtype=float)
    key = pd.DataFrame({"gpus": count, "size": size, "worst": worst, "total": total,
                        "peak": est["peak_bytes"].to_numpy(dtype=float)})[ok]
    best = int(key.sort_values(["gpus", "size", "worst", "total", "peak"], kind="stable").index[0])
    if count[best] >= np.nanmin(singles["gpus_to_fit"].to_numpy(dtype=float), initial=np.inf):
        return res
    idx, merged = combos[best]
    row = est.iloc[[best]].reset_index(drop=True)
    chosen = [useful[i] for i in idx]
    # (a single change's own label may hold ' + ': the changes are separated by semicolons)
    extra = {"change": "Together: " + "; ".join(v[0].split(" (")[0] for v in chosen),
             "overrides": ", ".join(f"{key}={val}" for key, val in merged.items()),
             "impact": int(worst[best]), "impact_label": IMPACT_LABELS[int(worst[best])],
             "tradeoff": "; ".join(v[3] for v in chosen), "change_count": len(chosen)}
    for pos, (col, value) in enumerate(extra.items()):
        row.insert(pos, col, value)
    row["gpus_to_fit"] = count[best]
    row["saved_bytes"] = res["peak_bytes"].iloc[0] - row["peak_bytes"]
    return _ranked(pd.concat([res.drop(columns="rank"), row[[c for c in res.columns if c != "rank"]]],
                             ignore_index=True))


def memory_curve(base: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs, batches,
                 overhead: dict | None = None) -> pd.DataFrame:
    """Peak per GPU over sequence lengths x batch sizes for one scenario (one estimate call)."""
    return estimate(_curve_frame(base, seqs, batches), models, gpus, **(overhead or {}))


def _curve_frame(base: dict, seqs, batches) -> pd.DataFrame:
    axes = {"seq": list(seqs), "batch": list(batches)}
    return expand({k: v for k, v in base.items() if k not in axes}, **axes)


def breakdown(base: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs, batches,
              overhead: dict | None = None) -> dict:
    """The scenario `base` explained, from ONE estimate call: {'row': its estimate (what_if's
    baseline, the same row), 'what_if': what_if(base), 'curve': memory_curve(base, seqs, batches)}.
    Each part's rows are estimated as in its own function; one call spares the engine's fixed
    cost per call twice (the Breakdown page asks for all three at every change of the workload).
    'reference_bytes': for a DPO row, the reference copy's bytes per GPU (inside its weights; 0 without a copy), the
    row's weights less those of the same row as sft, NaN for an sft row."""
    rules = compatibility_rules() if gpus is not None else None
    frame, variants = _what_if_frame(base, models, gpus, rules)
    curve = with_defaults(_curve_frame(base, seqs, batches))  # every column, as the what-if rows have
    dpo = _setting(base, "objective") == "dpo"
    # (a DPO row: the same row as sft, whose weights are the DPO row's less its reference copy (dpo_parts adds the copy
    # to the weights and nothing else to them); sft, not precomputed log-probs, which not every recipe runs)
    plain = with_defaults(pd.DataFrame([{**base, "objective": "sft"}])) if dpo else curve.iloc[:0]
    both = estimate(pd.concat([frame, curve, plain], ignore_index=True), models, gpus, **(overhead or {}))
    n, k = len(frame), len(curve)
    ranked = _what_if_ranked(both.iloc[:n].reset_index(drop=True), frame, variants, gpus, rules)
    reference = (float(both["weights_bytes"].iloc[0]) - float(both["weights_bytes"].iloc[n + k])) if dpo else np.nan
    return {"row": with_compatibility(both.iloc[[0]], gpus, rules).iloc[0], "what_if": _with_combination(ranked, base, variants, models, gpus, overhead, rules),
            "curve": both.iloc[n:n + k].reset_index(drop=True), "reference_bytes": reference}


# ---- inference table -----------------------------------------------------------------------

def inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids, precisions, seq: int, batch: int,
                    card: str, kv_precision: str = DEFAULTS["kv_precision"], max_gpus: int = 8, gpu_ids=None,
                    allow_long_context: bool = DEFAULTS["allow_long_context"], headroom: float = DEFAULTS["headroom"],
                    overhead: dict | None = None, kv_policy: str = DEFAULTS["kv_policy"],
                    rules: pd.DataFrame | None = None, hosts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per model x weight precision: whole-model weights, KV cache for `batch` sequences of
    `seq` tokens, the total on one GPU (peak, runtime overhead included), the smallest single
    GPU that holds it (least usable memory, then cheapest), and the GPUs needed on `card`."""
    gpu_ids = list(gpu_ids) if gpu_ids is not None else list(gpus["id"])
    if card not in gpu_ids:
        gpu_ids.append(card)
    workload = {"task": "infer", "seq": int(seq), "batch": int(batch), "kv_precision": kv_precision,
                "kv_policy": kv_policy, "allow_long_context": bool(allow_long_context), "headroom": float(headroom)}
    conf = configurations(expand(workload, model=list(model_ids), precision=list(precisions), gpu=gpu_ids),
                          models, gpus, max_gpus=max_gpus, overhead=overhead, rules=rules, hosts=hosts)
    keys = ["model", "precision"]
    speed = [c for c in SPEED_COLUMNS if c in conf.columns]
    # the columns this table reads, before any filter or sort (a sweep is ~150 columns wide)
    used = keys + ["gpu", "seq", "beyond_context", "params", "one_gpu_weights_bytes", "one_gpu_kv_cache_bytes",
                   "one_gpu_peak_bytes", "one_gpu_fits", "usable_bytes", "gpu_price_usd", "gpu_name", "gpus_needed",
                   "label", "fits_within", "memory_used_fraction", "buy_usd", "rent_usd_per_hour", "compatible"] + speed
    conf = conf[list(dict.fromkeys(used))]
    # the model x precision groups and the card's rows found on the sweep's own columns (categorical
    # codes), then the few rows kept typed as text: typing every row's ids as text first cost more
    # than the rest of the table
    group, _ = groups(conf, keys)
    text = {"model": str, "precision": str, "gpu": str}
    first = np.unique(group, return_index=True)[1]
    sizes = conf.iloc[first][keys + ["seq", "beyond_context", "params", "one_gpu_weights_bytes",
                                     "one_gpu_kv_cache_bytes", "one_gpu_peak_bytes"]].astype({k: str for k in keys})
    sizes = sizes.rename(columns={"one_gpu_weights_bytes": "weights_bytes", "one_gpu_kv_cache_bytes": "kv_cache_bytes",
                                  "one_gpu_peak_bytes": "total_bytes"})
    one_card = conf["one_gpu_fits"].fillna(False).to_numpy(dtype=bool)  # NaN: a row beyond its model's context
    rank = pd.DataFrame({"usable": conf["usable_bytes"].to_numpy(), "price": conf["gpu_price_usd"].to_numpy(),
                         "group": group, "row": np.arange(len(conf))})[one_card]
    rank = rank.sort_values(["usable", "price"], kind="stable").drop_duplicates("group")
    singles = conf.iloc[np.sort(rank["row"].to_numpy())]  # each group's smallest card, in the sweep's order
    smallest = singles[keys + ["gpu", "gpu_name", "usable_bytes"]].astype(text).rename(
        columns={"gpu": "smallest_gpu", "gpu_name": "smallest_gpu_name", "usable_bytes": "smallest_gpu_usable_bytes"})
    on_card = conf[per_value(conf["gpu"], lambda u: u.astype(str) == card)]
    # a card that cannot run the row (fp8 on a T4), or no count of it up to max_gpus that holds it, has no speed or
    # cost on it: configurations() estimates such a row at one GPU, whose decode speed described a card that does
    # not hold the model (DeepSeek-R1 FP16 on one RTX 4090: 7.7 tokens/s, $25 per million tokens, beside "✗ >8")
    runs = on_card["fits_within"].fillna(False).to_numpy(dtype=bool) & on_card["compatible"].to_numpy(dtype=bool)
    if speed and not runs.all():
        on_card = on_card.copy()
        on_card.loc[~runs, speed] = np.nan
    on_card = on_card[keys + ["gpus_needed", "label", "fits_within", "memory_used_fraction", "buy_usd",
                              "rent_usd_per_hour"] + speed].astype({"model": str, "precision": str}).rename(
        columns={"gpus_needed": "card_gpus_needed", "label": "card_label", "fits_within": "card_fits",
                 "memory_used_fraction": "card_memory_used_fraction", "buy_usd": "card_buy_usd",
                 "rent_usd_per_hour": "card_rent_usd_per_hour", **{c: f"card_{c}" for c in speed}})
    out = sizes.merge(smallest, on=keys, how="left").merge(on_card, on=keys, how="left")
    out.insert(2, "card", card)
    return out.reset_index(drop=True)


ARTICLE_INFER_PREFIX = "a000-infer-"  # source article 000's inference table in catalog/references.yaml
UNIT_BYTES = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def article_inference_table(refs: pd.DataFrame, ours: pd.DataFrame, precisions=("fp16", "int8", "int4")) -> pd.DataFrame:
    """Source article 000's inference table (weights per precision and minimum card) beside ours.

    refs: the catalog's references (with a parsed `scenario` column); ours: `inference_table`
    output covering those models and precisions. GB = 10^9 bytes on both sides."""
    art = refs[refs["id"].astype(str).str.startswith(ARTICLE_INFER_PREFIX)].reset_index(drop=True)
    if art.empty:
        return pd.DataFrame()
    sc = pd.DataFrame(list(art["scenario"]))
    art = pd.concat([art[["id", "metric", "value", "unit"]], sc[["model", "precision"]].astype(str),
                     sc.get("gpu", pd.Series([""] * len(sc))).fillna("").astype(str).rename("gpu")], axis=1)
    weights = art[art["metric"] == "weights_bytes"].copy()
    weights["gb"] = weights["value"] * weights["unit"].map(UNIT_BYTES).astype(float) / 1e9
    table = weights.pivot_table(index="model", columns="precision", values="gb", aggfunc="first")
    cards = art[art["metric"] == "gpus_needed"].set_index("model")
    ours = ours.astype({"model": str, "precision": str})
    ours_w = ours.pivot_table(index="model", columns="precision", values="weights_bytes", aggfunc="first") / 1e9
    ours_gpu = ours.set_index(["model", "precision"])["smallest_gpu"]
    in_refs = set(weights["model"])
    models_in = [m for m in dict.fromkeys(ours["model"]) if m in in_refs]
    models_in += [m for m in dict.fromkeys(weights["model"]) if m not in models_in]
    out = pd.DataFrame({"model": models_in})
    for p in precisions:
        out[f"article_{p}_gb"] = table[p].reindex(models_in).to_numpy() if p in table else np.nan
        out[f"ours_{p}_gb"] = ours_w[p].reindex(models_in).to_numpy() if p in ours_w else np.nan
    out["article_min_gpus"] = cards["value"].reindex(models_in).to_numpy(dtype=float) if len(cards) else np.nan
    out["article_min_gpu"] = cards["gpu"].reindex(models_in).to_numpy() if len(cards) else None
    out["article_min_precision"] = cards["precision"].reindex(models_in).to_numpy() if len(cards) else None
    for p in precisions:
        idx = pd.MultiIndex.from_arrays([models_in, [p] * len(models_in)])
        out[f"ours_smallest_{p}"] = ours_gpu.reindex(idx).fillna("none fits one card").to_numpy()
    return out


# recipes whose LoRA is peft's (torchtune, LitGPT and torchtitan build their own adapters)
PEFT_RECIPES_EXCLUDED = ("torchtune", "litgpt", "torchtitan")


def lora_targets_problem(models: pd.DataFrame, request: dict, trainable: float | None = None) -> str | None:
    """Why peft 0.21.2 would not build the LoRA a request names, in words, or None: a mixture of experts whose experts
    peft converts with gate_proj or up_proj alone (they are one fused gate_up_proj: "Cannot convert PEFT target(s)
    up_proj without also targeting gate_proj"), or a target list that finds no module of the model ("Target modules
    ... not found": MLP names alone on a model whose every MLP is fused experts they do not reach, gpt-oss's or
    Mixtral's; or, where the estimate is given, no trainable parameter). Both were run in the measuring venv on small
    Qwen3-MoE and Mixtral configs (2026-12-06)."""
    names = _peft_checked_targets(request)
    if names is None:
        return None
    return _lora_problem(models.set_index("id").loc[request["model"]], request, names, trainable)


# a decoder layer's MLP projections, as peft names its LoRA targets (the list that can be refused for a MoE)
MLP_TARGETS = frozenset({"gate_proj", "up_proj", "down_proj"})


def lora_refused_models(models: pd.DataFrame, request: dict, model_ids) -> dict[str, str]:
    """lora_targets_problem for each of model_ids under one request, from the models' facts alone (no estimate): the
    models whose cells a table shows for adapters peft would not build ({id: why})."""
    names = _peft_checked_targets(request)
    if names is None or not names & MLP_TARGETS:
        return {}
    by_id = models.set_index("id")
    out = {}
    for mid in dict.fromkeys(str(m) for m in model_ids):
        if mid in by_id.index:
            why = _lora_problem(by_id.loc[mid], {**request, "model": mid}, names, None)
            if why:
                out[mid] = why
    return out


def lora_refused_rows(scenarios: pd.DataFrame, models: pd.DataFrame) -> np.ndarray:
    """Per row of a scenario frame (defaults filled in): True where peft would not build the LoRA it names
    (lora_refused_models, asked once per distinct workload). configurations labels those rows PEFT_REFUSED_LABEL and
    never counts them as a fit: `estimate` refuses them (exit 2) and `sweep` leaves them out."""
    n = len(scenarios)
    out = np.zeros(n, dtype=bool)
    keys = ("task", "method", "recipe", "lora_targets")
    if not n or any(k not in scenarios.columns for k in keys):
        return out
    targets = scenarios["lora_targets"]
    asked = scenarios["method"].isin(("lora", "qlora")).to_numpy() & (targets != "all").to_numpy()
    if not asked.any():
        return out
    # only a list naming an MLP projection can be refused (lora_refused_models): the others are left at once, so a
    # page's default LoRA (q_proj,v_proj) costs two column checks, not a grouping of its ~15,000 rows
    risky = [t for t in pd.unique(targets[asked]) if {x.strip() for x in str(t).split(",")} & MLP_TARGETS]
    asked &= targets.isin(risky).to_numpy()
    if not asked.any():
        return out
    rows = np.flatnonzero(asked)
    sub = scenarios.iloc[rows]
    for key, where in sub.groupby(list(keys), observed=True, sort=False).indices.items():
        ids = sub["model"].iloc[where]
        refused = lora_refused_models(models, {k: str(v) for k, v in zip(keys, key)}, pd.unique(ids.astype(str)))
        if refused:
            out[rows[where]] = ids.isin(list(refused)).to_numpy()
    return out


def _peft_checked_targets(request: dict) -> set[str] | None:
    """The LoRA target names of a request peft builds (a lora / qlora training row, its targets listed, a recipe of
    peft's), else None."""
    method = str(_setting(request, "method"))
    recipe = str(_setting(request, "recipe"))
    targets = str(_setting(request, "lora_targets") or "all")
    if str(_setting(request, "task")) != "train" or method not in ("lora", "qlora") or targets == "all" \
            or recipe in PEFT_RECIPES_EXCLUDED:
        return None
    return {t.strip() for t in targets.split(",") if t.strip()}


def _lora_problem(row: pd.Series, request: dict, names: set[str], trainable: float | None) -> str | None:
    """lora_targets_problem for one model's catalog row."""
    targets = str(_setting(request, "lora_targets"))
    family = row.get("family", "")
    fact = lambda c: float(pd.to_numeric(row.get(c, 0), errors="coerce") or 0)  # noqa: E731
    mtype = model_types([family])[0]
    pattern = peft_moe_patterns([family], [mtype], [fact("num_experts")])[0]
    if pattern == "qwen2_moe" and len(names & {"gate_proj", "up_proj"}) == 1:
        one = next(iter(names & {"gate_proj", "up_proj"}))
        other = "up_proj" if one == "gate_proj" else "gate_proj"
        return (f"lora targets {targets!r}: {request['model']}'s experts fuse gate_proj and up_proj into one "
                f"gate_up_proj, and peft raises for {one} alone (\"Cannot convert PEFT target(s) {one} without also "
                f"targeting {other}\"); accepted: both gate_proj and up_proj, or neither (or all)")
    only_mlp = names <= MLP_TARGETS
    every_mlp_fused = (pattern == "mixtral" or (
        mtype in PEFT_UNCONVERTED_MOE and fact("num_experts") > 0 and fact("shared_intermediate_size") <= 0
        and fact("first_dense_layers") <= 0 and fact("moe_layer_step") <= 1))
    if (only_mlp and every_mlp_fused) or (trainable is not None and not trainable > 0):
        return (f"lora targets {targets!r} adapt no module of {request['model']} (peft raises \"Target modules ... not "
                "found\"): its MLP is a mixture of fused experts, which these names do not reach; accepted: "
                "attention names (q_proj, k_proj, v_proj, o_proj) or all")
    return None


__all__ = ["SPEED_COLUMNS", "COMPONENT_COLUMNS", "PHASE_COLUMNS", "BUDGET_TIERS", "BUDGET_MODES",
           "expand", "plans_frame", "with_defaults", "with_compatibility", "beyond_context", "beyond_layers", "not_modelled", "refused_rows", "configurations", "cheapest",
           "cost_per_fit", "plan_cost", "budget_plan", "tier_checks", "what_if", "memory_curve", "breakdown",
           "inference_table", "article_inference_table", "lora_targets_problem",
           "lora_refused_models", "lora_refused_rows", "PEFT_REFUSED_LABEL"]

