"""The dashboard's data: the catalog (one cached DuckDB connection per process), the merged
catalog frames (shipped + saved user entries + this session's additions), and the cached
calls of the planner (keyed by their arguments: settings and catalog frames).

A page's tables are derived from these, each cached on the same arguments (plus its own), so
a rerun that changes nothing in the workload (a tab, a filter of the view, a download) costs
cache look-ups only, and one that does recomputes only what the change reaches.
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
import weakref

import pandas as pd
import streamlit as st

from app import user_entries
from catalog import default_catalog
from catalog.store import ShippedFrames, UserCatalogWarning, catalog_frames
from catalog.schema import GPU_FIELDS, MODEL_FIELDS, CatalogError, check_gpu, check_model, validate_entries
from engine import rules
from engine.estimate import estimate
from engine.scenarios import normalize
from planner import planning, procurement
from planner.evidence import evidence_table

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


def merged_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(models, gpus): the shipped catalog, plus the entries saved in the user catalog file
    (every session), plus this session's own validated additions (this session only), through
    the catalog's one load path (catalog.store.catalog_frames, as the CLI); see
    app/user_entries.py. Every page uses these."""
    base = {"models": shipped("models"), "gpus": shipped("gpus")}
    ids = {kind: set(frame["id"]) for kind, frame in base.items()}
    user_entries.notify_once(ids)  # a corrupt or clashing file: said once on the page
    with warnings.catch_warnings():  # ... and not again in the server log on every run
        warnings.simplefilter("ignore", UserCatalogWarning)
        frames = catalog_frames(catalog=ShippedFrames(base), store=user_entries.store(ids),
                                extra={kind: user_entries.session_records(kind) for kind in ("gpus", "models")})
    return frames["models"], frames["gpus"]


def validate_user_entry(kind: str, raw: dict) -> dict:
    """Validate a GPU or model typed (or uploaded) by the user like the shipped YAML.
    Raises CatalogError with one line naming the field and what is accepted."""
    fields, checker, source = ((GPU_FIELDS, check_gpu, "added GPU") if kind == "gpu"
                               else (MODEL_FIELDS, check_model, "added model"))
    record = validate_entries([raw], fields, source, "gpus" if kind == "gpu" else "models")[0]
    checker(record, source)
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


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner="Estimating every model × GPU…")
def configurations(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                   max_gpus: int, condition: str = "new") -> pd.DataFrame:
    """planning.configurations; `condition` (new | used | either) prices the whole systems (system_usd)."""
    frame = planning.plans_frame(plan_map, model=list(model_ids), gpu=list(gpu_ids))
    return planning.configurations(frame, models, gpus, max_gpus=max_gpus, rules=shipped("compatibility"),
                                   hosts=shipped("hosts"), condition=condition)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner=False)
def cheapest(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
             max_gpus: int, cost: str = "buy_usd", by: tuple = ("model", "plan"), mode: str | None = None,
             hours: float | None = None, condition: str = "new") -> pd.DataFrame:
    """planning.cheapest over configurations(...) (costed by a budget mode when given)."""
    conf = configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus, condition)
    if mode is not None:
        conf, cost = conf.assign(cost_usd=planning.plan_cost(conf, mode, hours)), "cost_usd"
    return planning.cheapest(conf, cost, by)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner=False)
def cost_per_fit(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                 max_gpus: int, condition: str = "new") -> pd.DataFrame:
    """planning.cost_per_fit over configurations(...): the cheapest to buy is the cheapest whole system."""
    return planning.cost_per_fit(configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus, condition),
                                 buy_cost="system_usd")


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner="Pricing systems (cards, hosts, network)…")
def plan_budget(models: pd.DataFrame, gpus: pd.DataFrame, budget: float, mode: str, hours: float | None,
                workloads: str, deadline_days: float | None, one_purchase: bool, condition: str, max_gpus: int,
                headroom: float, tco: tuple = ()) -> dict:
    """planning/procurement.plan_budget: the function `python -m engine budget` calls; `tco` as
    ((setting, value), ...) pairs of procurement.TCO_KEYS (hashable, for the cache)."""
    return procurement.plan_budget(models, gpus, shipped("hosts"), budget, mode, hours, workloads, deadline_days,
                                   one_purchase, condition, max_gpus, headroom, shipped("compatibility"),
                                   tco=dict(tco))


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner=False)
def budget_plan(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                max_gpus: int, budget: float, mode: str, hours: float | None, stretch: float) -> dict:
    """planning.budget_plan over configurations(...)."""
    conf = configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus)
    return planning.budget_plan(conf, budget, mode, hours, stretch)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=16, show_spinner=False)
def article_inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                            batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                            headroom: float, kv_policy: str = "auto") -> pd.DataFrame:
    """planning.article_inference_table beside inference_table(...) for the article's models."""
    ours = inference_table(models, gpus, model_ids, precisions, seq, batch, card, kv_precision, max_gpus,
                           allow_long_context, headroom, kv_policy)
    return planning.article_inference_table(shipped("references"), ours)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=24, show_spinner=False)
def estimate_one(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.Series:
    return estimate(pd.DataFrame([sc]), models, gpus).iloc[0]  # engine/rules.py decides ZeRO, tp, pp, ...


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=64, show_spinner=False)
def decided_notes(sc: dict, models: pd.DataFrame) -> list[str]:
    """What engine/rules.py decided for the sidebar's scenario, in words ("ZeRO stage 3 → 0
    (one GPU without offload)"); nothing when the scenario cannot be estimated (the page says why)."""
    try:
        row = normalize(pd.DataFrame([sc]), models).iloc[0]
    except ValueError:
        return []
    return rules.notes(sc, row)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=16, show_spinner="Trying the changes…")
def what_if(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    return planning.what_if(sc, models, gpus)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=16, show_spinner=False)
def memory_curve(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs: tuple, batches: tuple) -> pd.DataFrame:
    return planning.memory_curve(sc, models, gpus, seqs, batches)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=16, show_spinner="Sizing every model at every precision…")
def inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                    batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                    headroom: float, kv_policy: str = "auto") -> pd.DataFrame:
    return planning.inference_table(models, gpus, list(model_ids), list(precisions), seq, batch, card,
                                    kv_precision=kv_precision, max_gpus=max_gpus,
                                    allow_long_context=allow_long_context, headroom=headroom, kv_policy=kv_policy)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=4, show_spinner="Comparing with every published figure…")
def evidence(models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    return evidence_table(shipped("references"), models, gpus)


@st.cache_data(hash_funcs=FRAME_HASH, max_entries=8, show_spinner=False)
def tier_checks(train: dict, models: pd.DataFrame, gpus: pd.DataFrame, max_gpus: int) -> pd.DataFrame:
    return planning.tier_checks(shipped("references"), train, models, gpus, max_gpus=max_gpus)

