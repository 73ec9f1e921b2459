"""The dashboard's data: the catalog (one cached DuckDB connection per process), the merged
catalog frames (shipped + saved user entries + this session's additions), and the cached
calls of the planner (keyed by their arguments: settings and catalog frames).

A page's tables are derived from these, each cached on the same arguments (plus its own), so
a rerun that changes nothing in the workload (a tab, a filter of the view, a download) costs
cache look-ups only, and one that does recomputes only what the change reaches.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import io
import marshal
import pickle
import threading
import warnings
import weakref

import numpy as np
import pandas as pd
import streamlit as st

from app import labels, user_entries
from catalog import default_catalog
from catalog.schema import (
    GPU_FIELDS,
    MODEL_FIELDS,
    CatalogError,
    check_dates_not_future,
    check_gpu,
    check_model,
    validate_entries,
)
from catalog.store import ShippedFrames, UserCatalogWarning, catalog_frames
from engine import rules
from engine.estimate import estimate
from engine.scenarios import normalize, scenario_frame
from planner import planning

# ---- cache keys of the catalog frames ---------------------------------------------------------
# Every cached call below takes the merged models and gpus frames; Streamlit hashes each DataFrame
# argument afresh at every call (hash_pandas_object over all cells: ~15 ms for the two frames, some
# 25 calls per page run). A frame is hashed once instead, as Streamlit hashes it (shape, column
# names and dtypes, every value and the index), and that digest is reused for the same object: the
# entry holds a weak reference and is used only while it still points to that very frame. Nothing
# in app/, pages/ or planner/ changes a frame in place after it is built (copy-on-write pandas;
# a filter or an added column is a new frame, hashed anew).
_DIGESTS: dict[int, tuple[weakref.ref, bytes]] = {}


def _frame_digest(frame: pd.DataFrame) -> bytes:
    key = id(frame)
    hit = _DIGESTS.get(key)
    if hit is not None and hit[0]() is frame:
        return hit[1]
    h = hashlib.sha256(repr((frame.shape, list(map(str, frame.columns)), list(map(str, frame.dtypes)))).encode())
    try:
        h.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    except TypeError:  # unhashable cells (lists, dicts): as Streamlit does, pickle the frame
        h.update(pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL))
    digest = h.digest()
    _DIGESTS[key] = (weakref.ref(frame, lambda _ref, k=key: _DIGESTS.pop(k, None)), digest)
    return digest


FRAME_HASH = {pd.DataFrame: _frame_digest}


# ---- cached planner calls ----------------------------------------------------------------------
# st.cache_data keys a call on its arguments as passed: f(a, b) and f(a, b, "new") (the default
# spelled out) or f(a, cost=x, by=y) and f(a, by=y, cost=x) are different entries, and the Budget
# page computed the whole model x GPU sweep twice per workload that way. Every call is bound to
# the signature (defaults filled in), so one set of values is one entry.
# Streamlit's hasher walks every argument object by object in Python (the workload dicts, the
# tuples of ids, the settings: ~1,500 objects and 0.1-0.2 s per page run); the key is instead one
# pickle of the bound arguments with each frame replaced by its digest (value_key), and Streamlit
# caches on that string alone.
# And st.cache_data unpickles a copy of the result on every hit (the sweep's frame: thousands of
# rows x ~100 columns, some 25 hits per page run); the result is kept once per process instead
# (st.cache_resource, cleared with the other caches) and each call gets a shallow copy:
# copy-on-write pandas keeps the cached frame intact whatever the caller does with its copy, and
# copies nothing until then. (Cells that hold lists, e.g. compatibility_notes, are shared:
# callers read them, never change them.)

class _KeyPickler(pickle.Pickler):
    """Pickles a frame (or series) as its digest, everything else as pickle does."""

    def persistent_id(self, obj):
        if isinstance(obj, pd.DataFrame):
            return ("<frame>", _frame_digest(obj))
        if isinstance(obj, pd.Series):
            return ("<series>", _frame_digest(obj.to_frame()), str(obj.name))
        return None


def value_key(*parts) -> str:
    """A digest of the values (frames by content): equal values, equal keys. Pickled without
    its memo (Pickler.fast), so that two equal strings give the same bytes whether or not they
    are one object."""
    buf = io.BytesIO()
    pickler = _KeyPickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    pickler.dump(parts)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def shared_copy(value):
    """A caller's own view of a cached result: frames and series shallow-copied (copy-on-write),
    dicts and lists rebuilt around them, anything else deep-copied."""
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=False)
    if isinstance(value, dict):
        return {k: shared_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shared_copy(v) for v in value]
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    return copy.deepcopy(value)


def planner_cache(max_entries: int, show_spinner: bool | str = False):
    """The decorated function cached per process on value_key(bound arguments) (st.cache_resource,
    one cache per function), returning shared_copy(result): see above."""
    def wrap(fn):
        signature = inspect.signature(fn)

        def run(key: str, _args: tuple, _kwargs: dict):  # Streamlit hashes `key` only
            return fn(*_args, **_kwargs)

        # Streamlit tells cached functions apart by module, name and source: one cache per function
        # (and its code: an edited function, reloaded by a running server, starts a new cache)
        code = hashlib.sha256(marshal.dumps(fn.__code__)).hexdigest()[:16]
        run.__module__, run.__qualname__ = fn.__module__, f"{fn.__qualname__}.<cached {code}>"
        cached = st.cache_resource(max_entries=max_entries, show_spinner=show_spinner)(run)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return shared_copy(cached(value_key(fn.__qualname__, bound.args, bound.kwargs), bound.args, bound.kwargs))

        call.clear = cached.clear
        call.calls = fn  # the undecorated function (tests count its calls)
        return call
    return wrap


@st.cache_resource
def catalog():
    """The shipped catalog (one DuckDB connection per process, read-only)."""
    return default_catalog()


@st.cache_resource(show_spinner=False)
def _shipped_frames() -> dict[str, pd.DataFrame]:
    """Read once per process and shared by every session (st.cache_data would unpickle a copy
    of all four frames at each of the many calls of a page run)."""
    cat = catalog()
    return {"models": cat.models(), "gpus": cat.gpus(), "references": cat.references(), "aliases": cat.aliases(),
            "hosts": cat.hosts(), "compatibility": cat.compatibility()}


def shipped(name: str) -> pd.DataFrame:
    """A shipped catalog frame. A shallow copy: copy-on-write keeps the shared one intact
    whatever the caller changes, and copies nothing until then."""
    return _shipped_frames()[name].copy(deep=False)


def shipped_ids() -> dict[str, set]:
    """{'gpus': ids, 'models': ids} of the shipped catalog (user ids may not reuse them)."""
    return {"gpus": set(shipped("gpus")["id"]), "models": set(shipped("models")["id"])}


# The merged frames, built once per version of their inputs (the shipped frames object, the
# user catalog file's path and signature, this session's own records) and shared by every run
# and session with the same inputs: the same two objects come back, so their cache-key digests
# above are computed once, not on every call (a page run asks for them 3-5 times). The frames are
# never changed in place (see the note on the digests).
_MERGED: dict[bytes, tuple] = {}
_MERGED_LOCK = threading.Lock()
_MERGED_MAX = 32


def merged_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(models, gpus): the shipped catalog, plus the entries saved in the user catalog file
    (every session), plus this session's own validated additions (this session only: the Catalog
    page's entries and the model of the sidebar's Hugging Face / file field), through
    the catalog's one load path (catalog.store.catalog_frames, as the CLI); see
    app/user_entries.py. Every page uses these."""
    frames = _shipped_frames()
    ids = _shipped_ids(frames)
    user_entries.notify_once(ids)  # a corrupt or clashing file: said once on the page
    extra = {kind: user_entries.session_records(kind) for kind in ("gpus", "models")}
    row = user_entries.source_row()  # the sidebar's Hugging Face / file field (app/model_source.py)
    if row is not None:
        extra["models"] = [*extra["models"], row]
    path = user_entries.catalog_path()
    try:
        own = pickle.dumps(extra, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an unpicklable record: build the frames afresh, as before
        own = None
    key = None if own is None else hashlib.sha256(
        repr((str(path), user_entries._signature(path))).encode() + own).digest()
    if key is not None:
        with _MERGED_LOCK:
            hit = _MERGED.get(key)
        if hit is not None and hit[0] is frames:
            return hit[1], hit[2]
    base = {"models": frames["models"].copy(deep=False), "gpus": frames["gpus"].copy(deep=False)}
    with warnings.catch_warnings():  # ... and not again in the server log on every run
        warnings.simplefilter("ignore", UserCatalogWarning)
        out = catalog_frames(catalog=ShippedFrames(base), store=user_entries.store(ids), extra=extra)
    if key is not None:
        with _MERGED_LOCK:
            if len(_MERGED) >= _MERGED_MAX:
                _MERGED.clear()
            _MERGED[key] = (frames, out["models"], out["gpus"])
    return out["models"], out["gpus"]


_IDS: dict[int, tuple] = {}


def _shipped_ids(frames: dict) -> dict[str, set]:
    """{'models': ids, 'gpus': ids} of the shipped frames, once per frames object."""
    hit = _IDS.get(id(frames))
    if hit is not None and hit[0] is frames:
        return hit[1]
    ids = {kind: set(frames[kind]["id"]) for kind in ("models", "gpus")}
    _IDS.clear()
    _IDS[id(frames)] = (frames, ids)
    return ids


# A filtered catalog frame (a page's GPU filters): the same object for the same frame and rows,
# so that its cache-key digest, too, is computed once.
_SUBSETS: dict[tuple, tuple] = {}
_SUBSETS_MAX = 64


def subset(frame: pd.DataFrame, keep) -> pd.DataFrame:
    """frame[keep] (a boolean mask), the same object while the frame and the mask are the same."""
    mask = np.asarray(keep, dtype=bool)
    key = (id(frame), mask.tobytes())
    hit = _SUBSETS.get(key)
    if hit is not None and hit[0]() is frame:
        return hit[1]
    out = frame[mask]
    if len(_SUBSETS) >= _SUBSETS_MAX:
        _SUBSETS.clear()
    _SUBSETS[key] = (weakref.ref(frame), out)
    return out


_NAMES: dict[tuple, tuple] = {}


def display_names(frame: pd.DataFrame, short: bool = False) -> dict:
    """app.labels.display_names, once per frame object (a page run asks 2-6 times for the same
    frames' names); a new dict each call."""
    key = (id(frame), bool(short))
    hit = _NAMES.get(key)
    if hit is None or hit[0]() is not frame:
        if len(_NAMES) >= 64:
            _NAMES.clear()
        hit = _NAMES[key] = (weakref.ref(frame), labels.display_names(frame, short=short))
    return dict(hit[1])


def validate_user_entry(kind: str, raw: dict) -> dict:
    """Validate a GPU or model typed (or uploaded) by the user like the shipped YAML.
    Raises CatalogError with one line naming the field and what is accepted."""
    fields, checker, source = ((GPU_FIELDS, check_gpu, "added GPU") if kind == "gpu"
                               else (MODEL_FIELDS, check_model, "added model"))
    record = validate_entries([raw], fields, source, "gpus" if kind == "gpu" else "models")[0]
    checker(record, source)
    if kind == "gpu":
        check_dates_not_future(record, source)
    models, gpus = merged_frames()
    taken = set((gpus if kind == "gpu" else models)["id"])
    if record["id"] in taken:
        raise CatalogError(source, f"'{record['id']}'", "id", "is already in the catalog; choose another id")
    return record


def add_user_entry(kind: str, record: dict) -> None:
    """Add a validated entry to this session only (the Catalog page can then save it to the file)."""
    user_entries.add_to_session(kind, record)


def remove_user_entry(kind: str, ident: str) -> None:
    user_entries.remove_from_session(kind, ident)


# planning.configurations' columns that no page built on it reads (Overview, Feasibility, Budget planner, Cost per
# fit, and the planning functions they call: cheapest, cost_per_fit, budget_plan): left out of the frame the cache
# keeps. A server keeps up to 24 of these frames; what they hold is new memory at every sidebar change, and its page
# faults were a fifth of a Budget change (docs/performance.md, sessions 25 and 26). The command line calls
# planning.configurations itself (`python -m engine budget`, planner/procurement.py) and keeps every column.
# tests/test_page_columns.py: no page names one of them, and each of those pages
# shows the same with and without them.
NOT_ON_PAGES = (
    *planning.PHASE_COLUMNS,  # the per-phase totals (the Breakdown page, which estimates its own row)
    # the card's catalog facts no page reads from these rows (gpu_name, gpu_vendor, gpu_cloud_date and gpu_cloud_source
    # stay: Cost per fit and Overview read them here)
    "gpu_segment", "gpu_memory_gb", "gpu_price_usd", "gpu_cloud_usd_per_hour", "gpu_price_date", "gpu_price_source",
    # the one-card estimate's parts beside the one-card verdict and share (one_gpu_fits, one_gpu_memory_used_fraction)
    "one_gpu_peak_bytes", "one_gpu_weights_bytes", "one_gpu_kv_cache_bytes", "kv_cache_context_bytes",
    # one scenario's detail (the Breakdown page and `estimate`)
    "allocator_cached_bytes", "autocast_copies_bytes", "optimizer_temp_bytes", "paged_optimizer_bytes", "cpu_bytes",
    "model_states_bytes", "capacity_bytes", "fits_at_estimate", "safe_peak_bytes", "verdict_margin_pct",
    "trainable_params", "vision_params", "prompt_tokens", "mfu", "bandwidth_efficiency",
)


@planner_cache(max_entries=24, show_spinner="Estimating every model × GPU…")
def configurations(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                   max_gpus: int, condition: str = "new") -> pd.DataFrame:
    """planning.configurations without NOT_ON_PAGES; `condition` (new | used | either) prices the whole systems
    (system_usd)."""
    frame = planning.plans_frame(plan_map, model=list(model_ids), gpu=list(gpu_ids))
    # (left out as it is built: every column of the result is an array of its own, so none keeps the engine's block,
    # whose memory goes back; the drop and deep copy of the whole result this did cost ~8 ms a Budget change)
    return planning.configurations(frame, models, gpus, max_gpus=max_gpus, rules=shipped("compatibility"),
                                   hosts=shipped("hosts"), condition=condition, drop=NOT_ON_PAGES)


@planner_cache(max_entries=24, show_spinner=False)
def cheapest(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
             max_gpus: int, cost: str = "buy_usd", by: tuple = ("model", "plan"), mode: str | None = None,
             hours: float | None = None, condition: str = "new") -> pd.DataFrame:
    """planning.cheapest over configurations(...) (costed by a budget mode when given)."""
    conf = configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus, condition)
    if mode is not None:
        conf, cost = conf.assign(cost_usd=planning.plan_cost(conf, mode, hours)), "cost_usd"
    return planning.cheapest(conf, cost, by)


@planner_cache(max_entries=24, show_spinner=False)
def cost_per_fit(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                 max_gpus: int, condition: str = "new") -> pd.DataFrame:
    """planning.cost_per_fit over configurations(...): the cheapest to buy is the cheapest whole system;
    the cheapest to buy and to rent are the cached cheapest(...) entries the page's charts draw."""
    sweep = (plan_map, model_ids, gpu_ids, models, gpus, max_gpus)
    return planning.cost_per_fit(configurations(*sweep, condition), buy_cost="system_usd",
                                 cheapest_buy=cheapest(*sweep, cost="system_usd", condition=condition),
                                 cheapest_rent=cheapest(*sweep, cost="rent_usd_per_hour", condition=condition))


@planner_cache(max_entries=24, show_spinner="Pricing systems (cards, hosts, network)…")
def budget_sweep(models: pd.DataFrame, gpus: pd.DataFrame, workloads: str, condition: str, max_gpus: int,
                 headroom: float, tco: tuple = (), scenarios: tuple = (), known: tuple = ()) -> dict:
    """procurement.budget_sweep: plan_budget's sweep, which no budget, mode, hours or deadline enters. `scenarios`:
    ((workload, ((key, value), ...)), ...), each named workload's settings (hashable, for the cache). `known`: the
    page's own sweep, configurations(*known)'s arguments: where it holds every (model, workload) at the same
    settings, its rows are taken (procurement._known_rows) and nothing is estimated again (the Budget page's
    default: its two workloads are two of its chosen plans)."""
    from planner import procurement  # lazy: the Budget page's alone (not imported at a cold start)
    return procurement.budget_sweep(models, gpus, shipped("hosts"), workloads, condition, max_gpus, headroom,
                                    shipped("compatibility"), tco=dict(tco),
                                    scenarios={w: dict(items) for w, items in scenarios} or None,
                                    known=configurations(*known) if known else None,
                                    known_plans=known[0] if known else None)


@planner_cache(max_entries=24, show_spinner=False)
def plan_budget(models: pd.DataFrame, gpus: pd.DataFrame, budget: float, mode: str, hours: float | None,
                workloads: str, deadline_days: float | None, one_purchase: bool, condition: str, max_gpus: int,
                headroom: float, tco: tuple = (), scenarios: tuple = (), known: tuple = ()) -> dict:
    """planning/procurement.plan_budget, the function `python -m engine budget` calls, as its two
    halves: the sweep (budget_sweep, cached on its own arguments) and the budget's filter over it, so
    a new budget, mode, job length or deadline estimates nothing; `tco` as ((setting, value), ...)
    pairs of procurement.TCO_KEYS (hashable, for the cache); `known` as budget_sweep's."""
    from planner import procurement  # lazy: the Budget page's alone (not imported at a cold start)
    sweep = budget_sweep(models, gpus, workloads, condition, max_gpus, headroom, tco, scenarios, known)
    return procurement.budget_within(sweep, gpus, shipped("hosts"), budget, mode, hours, deadline_days, one_purchase)


@planner_cache(max_entries=24, show_spinner=False)
def budget_plan(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                max_gpus: int, budget: float, mode: str, hours: float | None, stretch: float) -> dict:
    """planning.budget_plan over configurations(...), split from the cached cheapest(..., mode, hours)
    (the page's chart draws the same): a new budget or stretch is a filter."""
    sweep = (plan_map, model_ids, gpu_ids, models, gpus, max_gpus)
    return planning.budget_plan(configurations(*sweep), budget, mode, hours, stretch,
                                best=cheapest(*sweep, mode=mode, hours=hours))


@planner_cache(max_entries=16, show_spinner=False)
def article_inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                            batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                            headroom: float, kv_policy: str = "auto", shown: tuple = ()) -> pd.DataFrame:
    """planning.article_inference_table beside inference_table(...) for the article's models.
    `shown`: the precisions of the page's own table over every catalog model; where they hold the
    article's, its rows are taken from that table (each (model, precision) row is the same estimate
    in either table) instead of estimating the article's models again."""
    settings = (seq, batch, card, kv_precision, max_gpus, allow_long_context, headroom, kv_policy)
    if set(precisions) <= set(shown) and set(model_ids) <= set(models["id"]):
        table = inference_table(models, gpus, tuple(models["id"]), tuple(shown), *settings)
        wanted = pd.MultiIndex.from_product([list(model_ids), list(precisions)], names=["model", "precision"])
        ours = table.set_index(["model", "precision"]).loc[wanted].reset_index()  # ordered as its own call orders them
    else:
        ours = inference_table(models, gpus, model_ids, precisions, *settings)
    return planning.article_inference_table(shipped("references"), ours)


@planner_cache(max_entries=24, show_spinner=False)
def estimate_one(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.Series:
    # engine/rules.py decides ZeRO, tp, pp, ...; the compatibility rules decide whether the card runs it at all
    return planning.with_compatibility(estimate(pd.DataFrame([sc]), models, gpus), gpus, shipped("compatibility")).iloc[0]


@planner_cache(max_entries=64, show_spinner=False)
def decided_notes(sc: dict, models: pd.DataFrame) -> list[str]:
    """What engine/rules.py decided for the sidebar's scenario, in words ("ZeRO stage 3 → 0
    (one GPU without offload)"); nothing when the scenario cannot be estimated (the page says why)."""
    try:
        row = normalize(scenario_frame(sc), models).iloc[0]
    except ValueError:
        return []
    return rules.notes(sc, row)


@planner_cache(max_entries=16, show_spinner="Trying the changes…")
def what_if(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    return planning.what_if(sc, models, gpus)


@planner_cache(max_entries=16, show_spinner="Trying the changes…")
def breakdown(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs: tuple, batches: tuple) -> dict:
    """planning.breakdown: estimate_one's row, what_if and memory_curve of the scenario in one engine call."""
    return planning.breakdown(sc, models, gpus, seqs, batches)


@planner_cache(max_entries=16, show_spinner=False)
def memory_curve(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs: tuple, batches: tuple) -> pd.DataFrame:
    return planning.memory_curve(sc, models, gpus, seqs, batches)


@planner_cache(max_entries=16, show_spinner="Sizing every model at every precision…")
def inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                    batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                    headroom: float, kv_policy: str = "auto") -> pd.DataFrame:
    return planning.inference_table(models, gpus, list(model_ids), list(precisions), seq, batch, card,
                                    kv_precision=kv_precision, max_gpus=max_gpus,
                                    allow_long_context=allow_long_context, headroom=headroom, kv_policy=kv_policy,
                                    rules=shipped("compatibility"), hosts=shipped("hosts"))


@planner_cache(max_entries=4, show_spinner="Comparing with every published figure…")
def evidence(models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    from planner.evidence import evidence_table  # lazy: the Evidence page's alone (not imported at a cold start)
    return evidence_table(shipped("references"), models, gpus)


@planner_cache(max_entries=2, show_spinner="Comparing with every published serving run…")
def serving_evidence() -> pd.DataFrame:
    """catalog/serving_measurements.yaml beside the serving model (shipped models and cards only: every
    measurement names a shipped model, and its card is described by the row's own figures)."""
    from planner.serving_evidence import serving_evidence_table  # lazy: the Evidence page's alone
    return serving_evidence_table(models=shipped("models"), gpus=shipped("gpus"))


@planner_cache(max_entries=8, show_spinner=False)
def tier_checks(train: dict, models: pd.DataFrame, gpus: pd.DataFrame, max_gpus: int) -> pd.DataFrame:
    return planning.tier_checks(shipped("references"), train, models, gpus, max_gpus=max_gpus,
                                rules=shipped("compatibility"), hosts=shipped("hosts"))

