"""Shared pieces of every page: the catalog (cached), the merged catalog frames (shipped +
this session's additions), the workload sidebar kept in session state, cached engine calls,
and tables with their CSV downloads.

No formulas here: every number comes from `engine.estimate` or `engine.planning`.

Session state keys:
  "settings"      the workload, one value per sidebar field (survives page switches: widgets
                  are re-seeded from it on every run, so a widget that was not drawn on the
                  last page comes back with the user's value)
  "w_<field>"     the sidebar widgets' own keys
  "user_models", "user_gpus"   catalog entries added in this session only: lists of records
                  validated exactly like the shipped YAML (catalog.schema); the entries saved
                  in the user catalog file are loaded for every session (app/user_entries.py)
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import streamlit as st

from app import user_entries
from catalog import default_catalog
from catalog.schema import GPU_FIELDS, MODEL_FIELDS, CatalogError, check_gpu, check_model, validate_entries
from engine import planning
from engine.constants import INFER_PRECISIONS, LORA_MODULES, OPTIMIZERS, TRAIN_PRECISIONS
from engine.estimate import estimate
from engine.evidence import evidence_table
from engine.report import COMPONENT_LABELS, PHASE_LABELS, to_csv
from engine.scenarios import KV_PRECISIONS, LIMITS

GIB = 2**30
GB = 10**9
APP_NAME = "LLM hardware planner"

# ---- labels shown to people ----------------------------------------------------------------
TASK_LABELS = {"train": "Train / fine-tune", "infer": "Serve (inference)"}
METHOD_LABELS = {"full": "Full fine-tuning", "lora": "LoRA", "qlora": "QLoRA (4-bit base)",
                 "freeze": "Freeze (train the last layers)"}
TRAIN_PRECISION_LABELS = {
    "bf16": "bf16 (pure 16-bit)", "fp16": "fp16 (pure 16-bit)",
    "amp_bf16": "AMP bf16 (fp32 weights)", "amp_fp16": "AMP fp16 (fp32 weights)",
    "mixed_bf16": "Mixed bf16 (fp32 master)", "mixed_fp16": "Mixed fp16 (fp32 master)",
    "fp32": "fp32",
}
INFER_PRECISION_LABELS = {p: p.upper() if not p.startswith("q") else f"GGUF {p.upper()}" for p in INFER_PRECISIONS}
INFER_PRECISION_LABELS.update({"int8": "INT8 (LLM.int8)", "int4": "INT4 (GPTQ/AWQ, g128)", "nf4": "NF4 (bitsandbytes)"})
OPTIMIZER_LABELS = {"adamw": "AdamW (PyTorch default)", "adamw_fused": "AdamW fused", "adamw_8bit": "AdamW 8-bit",
                    "paged_adamw_8bit": "Paged AdamW 8-bit", "sgd": "SGD with momentum", "adafactor": "Adafactor"}
ZERO_LABELS = {0: "0: none (plain data parallel)", 1: "1: shard optimizer states", 2: "2: + gradients",
               3: "3: + parameters (FSDP full shard)"}
OFFLOAD_LABELS = {"none": "none", "optimizer": "optimizer states to CPU", "all": "parameters + optimizer to CPU"}
KV_LABELS = {"auto": "auto (as the activations)", **{k: k.upper() for k in KV_PRECISIONS if k != "auto"}}
BASE_LABELS = {"auto": "auto (NF4)", "nf4": "NF4", "int8": "INT8", "int4": "INT4"}
COMPONENT_NAMES = {k.removesuffix("_bytes"): v for k, v in COMPONENT_LABELS.items()}


@dataclass(frozen=True)
class Field:
    key: str
    default: object
    kind: str                 # choice | int | bool | multi
    options: tuple = field(default_factory=tuple)
    low: int | None = None
    high: int | None = None


FIELDS: dict[str, Field] = {f.key: f for f in (
    Field("model", "llama-3-8b", "choice"),
    Field("gpu", "rtx-4090", "choice"),
    Field("task", "train", "choice", tuple(TASK_LABELS)),
    Field("method", "lora", "choice", tuple(METHOD_LABELS)),
    Field("train_precision", "bf16", "choice", TRAIN_PRECISIONS),
    Field("infer_precision", "bf16", "choice", INFER_PRECISIONS),
    Field("kv_precision", "auto", "choice", KV_PRECISIONS),
    Field("optimizer", "adamw", "choice", OPTIMIZERS),
    Field("batch", 1, "int", low=1, high=LIMITS["batch"]),
    Field("seq", 2048, "int", low=1, high=LIMITS["seq"]),
    # On by default: the usual setting for fine-tuning on one card (peft/torchtune recipes).
    Field("grad_checkpointing", True, "bool"),
    Field("lora_rank", 8, "int", low=1, high=LIMITS["lora_rank"]),
    Field("lora_targets", ("q_proj", "v_proj"), "multi", LORA_MODULES),
    Field("base_precision", "auto", "choice", tuple(BASE_LABELS)),
    Field("freeze_layers", 2, "int", low=1, high=LIMITS["freeze_layers"]),
    Field("gpus", 1, "int", low=1, high=1024),
    Field("zero", 3, "choice", (0, 1, 2, 3)),
    Field("offload", "none", "choice", tuple(OFFLOAD_LABELS)),
    Field("headroom_pct", 0, "int", low=0, high=50),
    Field("allow_long_context", False, "bool"),
    Field("units", "GiB", "choice", ("GiB", "GB")),
)}


# ---- catalog --------------------------------------------------------------------------------

@st.cache_resource
def catalog():
    """The shipped catalog (one DuckDB connection per process, read-only)."""
    return default_catalog()


@st.cache_resource(show_spinner=False)
def _shipped_frames() -> dict[str, pd.DataFrame]:
    """Read once per process and shared by every session (st.cache_data would unpickle a copy
    of all four frames at each of the many calls of a page run)."""
    cat = catalog()
    return {"models": cat.models(), "gpus": cat.gpus(), "references": cat.references(), "aliases": cat.aliases()}


def shipped(name: str) -> pd.DataFrame:
    """A shipped catalog frame. A shallow copy: copy-on-write keeps the shared one intact
    whatever the caller changes, and copies nothing until then."""
    return _shipped_frames()[name].copy(deep=False)


def _append(base: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    if not records:
        return base
    extra = pd.DataFrame(records, columns=list(base.columns))
    for col in base.columns:
        try:
            extra[col] = extra[col].astype(base[col].dtype)
        except (TypeError, ValueError):
            pass
    return pd.concat([base, extra], ignore_index=True)


def shipped_ids() -> dict[str, set]:
    """{'gpus': ids, 'models': ids} of the shipped catalog (user ids may not reuse them)."""
    return {"gpus": set(shipped("gpus")["id"]), "models": set(shipped("models")["id"])}


def merged_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(models, gpus): the shipped catalog, plus the entries saved in the user catalog file
    (every session), plus this session's own validated additions (this session only); see
    app/user_entries.py. Every page uses these."""
    base = {"models": shipped("models"), "gpus": shipped("gpus")}
    ids = {kind: set(frame["id"]) for kind, frame in base.items()}
    user_entries.notify_once(ids)
    return (_append(base["models"], user_entries.visible("models", ids["models"])),
            _append(base["gpus"], user_entries.visible("gpus", ids["gpus"])))


# Shorter GPU names for chart axes and tables: vendor brand words and parentheticals dropped
# (the id is added back wherever two names would collide).
SHORT_NAME_RULES = ((r"^NVIDIA (GeForce |Tesla )?", ""), (r"^AMD Instinct ", "AMD "),
                    (r" Grace Hopper Superchip \((\d+) GB [^)]*\)", r" \1GB"),
                    (r" \(OAM [^)]*\)", ""), (r"\s*\([^)]*\)$", ""))


def display_names(frame: pd.DataFrame, short: bool = False) -> dict:
    """id -> name shown in charts and tables (the id is added where two entries share a name)."""
    names = frame["name"].astype(str)
    if short:
        for pattern, repl in SHORT_NAME_RULES:
            names = names.str.replace(pattern, repl, regex=True)
    dup = names.duplicated(keep=False).to_numpy()
    shown = np.where(dup, names + " (" + frame["id"].astype(str) + ")", names)
    return dict(zip(frame["id"].astype(str), shown))


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


# ---- the workload in session state ---------------------------------------------------------

def store() -> dict:
    """The workload settings of this session (field -> value)."""
    if "settings" not in st.session_state:
        st.session_state["settings"] = {k: f.default for k, f in FIELDS.items()}
    settings = st.session_state["settings"]
    for k, f in FIELDS.items():
        settings.setdefault(k, f.default)
    return settings


def _parse(field_: Field, text: str):
    """A query-parameter string as the field's value; ValueError names what is accepted."""
    if field_.kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{field_.key}={text!r} ignored; accepted: a whole number") from None
        if not field_.low <= value <= field_.high:
            raise ValueError(f"{field_.key}={text!r} ignored; accepted: {field_.low} to {field_.high:,}")
        return value
    if field_.kind == "bool":
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{field_.key}={text!r} ignored; accepted: 1 or 0")
    if field_.kind == "multi":
        values = tuple(v for v in text.split(",") if v)
        bad = [v for v in values if v not in field_.options]
        if bad or not values:
            raise ValueError(f"{field_.key}={text!r} ignored; accepted: a comma list of {', '.join(field_.options)}")
        return values
    options = field_.options
    if field_.key == "zero":
        options = tuple(str(o) for o in options)
    if options and text not in options:
        raise ValueError(f"{field_.key}={text!r} ignored; accepted: {', '.join(map(str, options))}")
    return int(text) if field_.key == "zero" else text


def _as_param(field_: Field, value) -> str:
    if field_.kind == "bool":
        return "1" if value else "0"
    if field_.kind == "multi":
        return ",".join(value)
    return str(value)


def _load_query_params(settings: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> None:
    """Once per session: a URL's query parameters seed the workload (a shared link reproduces the view)."""
    if st.session_state.get("_query_loaded"):
        return
    st.session_state["_query_loaded"] = True
    notes = []
    dynamic = {"model": set(models["id"]), "gpu": set(gpus["id"])}
    for key, text in st.query_params.items():
        if key not in FIELDS:
            continue
        f = FIELDS[key]
        try:
            value = _parse(f, str(text))
            if key in dynamic and value not in dynamic[key]:
                raise ValueError(f"{key}={text!r} ignored; accepted: a catalog {key} id (see the Catalog page)")
        except ValueError as exc:
            notes.append(str(exc))
            continue
        settings[key] = value
    st.session_state["_query_notes"] = notes


def _write_query_params(settings: dict) -> None:
    params = {k: _as_param(f, settings[k]) for k, f in FIELDS.items() if settings[k] != f.default}
    current = {k: st.query_params.get(k) for k in st.query_params.keys()}
    if current != params:
        st.query_params.from_dict(params)


def _widget(key: str, make, options: list | None = None):
    """Draw one sidebar widget seeded from the store and write its value back."""
    settings = store()
    wkey = f"w_{key}"
    value = settings[key]
    if options is not None and value not in options:
        value = FIELDS[key].default if FIELDS[key].default in options else options[0]
    if wkey not in st.session_state or (options is not None and st.session_state[wkey] not in options):
        st.session_state[wkey] = list(value) if FIELDS[key].kind == "multi" else value
    result = make(wkey)
    settings[key] = tuple(result) if FIELDS[key].kind == "multi" else result
    return settings[key]


def sidebar() -> dict:
    """The shared workload sidebar (drawn by dashboard.py on every page). Returns the settings."""
    models, gpus = merged_frames()
    settings = store()
    _load_query_params(settings, models, gpus)
    model_names = dict(zip(models["id"], models["name"]))
    gpu_names = dict(zip(gpus["id"], gpus["name"]))
    sb = st.sidebar
    sb.header("Workload")
    _widget("model", lambda k: sb.selectbox("Model", list(model_names), key=k, format_func=lambda i: model_names.get(i, i),
                                            help="Used by the single-scenario views (Overview, Breakdown)."),
            options=list(model_names))
    task = _widget("task", lambda k: sb.radio("Task", list(TASK_LABELS), key=k, format_func=TASK_LABELS.get,
                                              horizontal=True))
    if task == "train":
        method = _widget("method", lambda k: sb.selectbox("Method", list(METHOD_LABELS), key=k, format_func=METHOD_LABELS.get))
        _widget("train_precision", lambda k: sb.selectbox("Precision", list(TRAIN_PRECISIONS), key=k,
                                                          format_func=TRAIN_PRECISION_LABELS.get))
        _widget("optimizer", lambda k: sb.selectbox("Optimizer", list(OPTIMIZERS), key=k, format_func=OPTIMIZER_LABELS.get))
        _widget("batch", lambda k: sb.number_input("Micro-batch per GPU (sequences)", min_value=1,
                                                   max_value=LIMITS["batch"], step=1, key=k))
        _widget("seq", lambda k: sb.number_input("Sequence length (tokens)", min_value=1, max_value=LIMITS["seq"],
                                                 step=256, key=k))
        _widget("grad_checkpointing", lambda k: sb.checkbox("Gradient checkpointing", key=k,
                                                            help="Keep each layer's input, recompute the rest in backward."))
        if method in ("lora", "qlora"):
            with sb.expander("LoRA", expanded=True):
                _widget("lora_rank", lambda k: st.number_input("Rank r", min_value=1, max_value=LIMITS["lora_rank"],
                                                               step=8, key=k))
                _widget("lora_targets", lambda k: st.multiselect("Target modules", list(LORA_MODULES), key=k,
                                                                 help="peft's default for Llama: q_proj, v_proj."))
                if method == "qlora":
                    _widget("base_precision", lambda k: st.selectbox("Frozen base", list(BASE_LABELS), key=k,
                                                                     format_func=BASE_LABELS.get))
        if method == "freeze":
            _widget("freeze_layers", lambda k: sb.number_input("Trainable last layers", min_value=1,
                                                               max_value=LIMITS["freeze_layers"], key=k))
    else:
        _widget("infer_precision", lambda k: sb.selectbox("Weights", list(INFER_PRECISIONS), key=k,
                                                          format_func=INFER_PRECISION_LABELS.get))
        _widget("kv_precision", lambda k: sb.selectbox("KV cache", list(KV_PRECISIONS), key=k, format_func=KV_LABELS.get))
        _widget("batch", lambda k: sb.number_input("Concurrent sequences", min_value=1, max_value=LIMITS["batch"],
                                                   step=1, key=k))
        _widget("seq", lambda k: sb.number_input("Context per sequence (tokens)", min_value=1, max_value=LIMITS["seq"],
                                                 step=256, key=k))
    sb.header("GPUs")
    _widget("gpu", lambda k: sb.selectbox("GPU", list(gpu_names), key=k, format_func=lambda i: gpu_names.get(i, i),
                                          help="The card of the single-scenario views and the inference table."),
            options=list(gpu_names))
    _widget("gpus", lambda k: sb.number_input("GPU count", min_value=1, max_value=1024, step=1, key=k,
                                              help="GPUs of the single-scenario views; the matrix and planners find the count themselves."))
    if task == "train":
        _widget("zero", lambda k: sb.selectbox("ZeRO stage when sharding", [0, 1, 2, 3], key=k, format_func=ZERO_LABELS.get,
                                               help="Applied from two GPUs on (one GPU runs unsharded unless offload is on)."))
        _widget("offload", lambda k: sb.selectbox("Offload", list(OFFLOAD_LABELS), key=k, format_func=OFFLOAD_LABELS.get))
    with sb.expander("Display and margins"):
        _widget("headroom_pct", lambda k: st.slider("Headroom kept free (% of each GPU)", 0, 50, key=k))
        _widget("allow_long_context", lambda k: st.checkbox("Allow sequences beyond a model's context", key=k))
        _widget("units", lambda k: st.radio("Memory units", ["GiB", "GB"], key=k, horizontal=True,
                                            help="GiB = 2^30 bytes; GB = 10^9 bytes."))
    for note in st.session_state.get("_query_notes", []):
        sb.warning(note)
    for problem in problems(settings, single=True):
        sb.error(problem)
    _write_query_params(settings)
    return settings


def problems(settings: dict | None = None, training: bool | None = None, single: bool = False) -> list[str]:
    """Combinations the sidebar allows but the engine does not, as one-line messages.
    training: check the training settings (default: when the task is training); single: also
    check the single scenario (model, GPU count) of the Overview and Breakdown pages."""
    s = settings or store()
    training = (s["task"] == "train") if training is None else training
    out = []
    if training:
        if s["method"] in ("lora", "qlora") and not s["lora_targets"]:
            out.append("LoRA target modules: none chosen; accepted: at least one of " + ", ".join(LORA_MODULES)
                       + " (q_proj, v_proj is peft's default).")
        if s["offload"] == "all" and s["zero"] != 3:
            out.append(f"Offload 'parameters + optimizer' needs ZeRO stage 3 (you chose {s['zero']}); "
                       "accepted with this stage: none or optimizer states.")
    if single and s["task"] == "infer":
        models, _ = merged_frames()
        known = models.set_index("id")
        if s["model"] in known.index:
            heads, count = int(known.loc[s["model"], "num_heads"]), int(s["gpus"])
            if heads % count:
                divisors = [d for d in range(1, heads + 1) if heads % d == 0]
                out.append(f"GPU count {count} cannot split {known.loc[s['model'], 'name']}'s {heads} attention heads "
                           f"evenly (tensor parallelism); accepted: {', '.join(map(str, divisors))}.")
    return out


def require_valid(training: bool | None = None, single: bool = False) -> dict:
    """Stop the page with the sidebar's messages when its workload cannot be estimated."""
    s = store()
    issues = problems(s, training=training, single=single)
    if issues:
        for issue in issues:
            st.error(issue)
        st.stop()
    return s


def guard(fn, *args, **kwargs):
    """Call the engine; a bad value becomes one clear error line on the page, never a traceback."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, CatalogError) as exc:
        st.error(str(exc))
        st.stop()


# ---- workload dicts for the engine ----------------------------------------------------------

def _common(s: dict) -> dict:
    return {"headroom": s["headroom_pct"] / 100.0, "allow_long_context": bool(s["allow_long_context"]),
            "batch": int(s["batch"]), "seq": int(s["seq"])}


def train_workload(s: dict | None = None, method: str | None = None) -> dict:
    s = s or store()
    method = method or s["method"]
    return {**_common(s), "task": "train", "method": method, "precision": s["train_precision"],
            "optimizer": s["optimizer"], "grad_checkpointing": bool(s["grad_checkpointing"]),
            "lora_rank": int(s["lora_rank"]), "lora_targets": ",".join(s["lora_targets"]) or "q_proj,v_proj",
            "base_precision": s["base_precision"] if method == "qlora" else "auto",
            "freeze_layers": int(s["freeze_layers"]), "zero": int(s["zero"]), "offload": s["offload"]}


def infer_workload(s: dict | None = None, precision: str | None = None) -> dict:
    s = s or store()
    return {**_common(s), "task": "infer", "method": "full", "precision": precision or s["infer_precision"],
            "kv_precision": s["kv_precision"], "zero": 0, "offload": "none"}


def workload(s: dict | None = None) -> dict:
    s = s or store()
    return train_workload(s) if s["task"] == "train" else infer_workload(s)


def scenario(s: dict | None = None) -> dict:
    """The single scenario of the Overview and Breakdown pages (model, GPU, count included)."""
    s = s or store()
    sc = {**workload(s), "model": s["model"], "gpu": s["gpu"], "gpus": int(s["gpus"])}
    if sc["task"] == "infer":
        sc["tp"] = int(s["gpus"])  # serving splits the model over its GPUs (tensor parallel)
    return sc


PLAN_CHOICES = {
    "Full fine-tuning": ("train", "full"), "LoRA": ("train", "lora"), "QLoRA": ("train", "qlora"),
    "Freeze": ("train", "freeze"),
    "Serve BF16": ("infer", "bf16"), "Serve INT8": ("infer", "int8"), "Serve INT4": ("infer", "int4"),
    "Serve GGUF Q4_K_M": ("infer", "q4_k_m"),
}
DEFAULT_PLANS = ["Full fine-tuning", "LoRA", "QLoRA", "Serve BF16", "Serve INT4"]


def plans(labels, s: dict | None = None) -> dict[str, dict]:
    """Named workloads (training methods and serving precisions) from the sidebar's settings."""
    s = s or store()
    out = {}
    for label in labels:
        task, what = PLAN_CHOICES[label]
        out[label] = train_workload(s, method=what) if task == "train" else infer_workload(s, precision=what)
    return out


def describe(s: dict | None = None, with_model: bool = True) -> str:
    """The workload in one line of words."""
    s = s or store()
    models, gpus = merged_frames()
    name = dict(zip(models["id"], models["name"])).get(s["model"], s["model"])
    parts = [name] if with_model else []
    if s["task"] == "train":
        m = METHOD_LABELS[s["method"]]
        if s["method"] in ("lora", "qlora"):
            m += f" r={s['lora_rank']} on {', '.join(s['lora_targets']) or '—'}"
        if s["method"] == "freeze":
            m += f" (last {s['freeze_layers']} layers)"
        parts += [m, s["train_precision"], OPTIMIZER_LABELS[s["optimizer"]],
                  f"micro-batch {s['batch']} × {s['seq']:,} tokens"]
        if s["grad_checkpointing"]:
            parts.append("gradient checkpointing")
    else:
        parts += ["serving", INFER_PRECISION_LABELS[s["infer_precision"]] + " weights",
                  f"KV cache {KV_LABELS[s['kv_precision']]}",
                  f"{s['batch']} sequence{'s' if s['batch'] != 1 else ''} × {s['seq']:,} tokens"]
    if s["headroom_pct"]:
        parts.append(f"{s['headroom_pct']}% headroom")
    return " · ".join(parts)


def csv_settings(**extra) -> dict:
    """The settings recorded at the top of every CSV download."""
    s = store()
    out = {"tool": APP_NAME, "exported": _dt.date.today().isoformat(),
           "memory unit": unit()[0] + " (GiB = 2^30 bytes, GB = 10^9 bytes)", "workload": describe(s)}
    out.update({k: (",".join(v) if isinstance(v, tuple) else v) for k, v in s.items()})
    out.update(extra)
    return out


# ---- units and tables -----------------------------------------------------------------------

def unit() -> tuple[str, float]:
    """('GiB', 2**30) or ('GB', 1e9), as chosen in the sidebar."""
    return ("GiB", float(GIB)) if store()["units"] == "GiB" else ("GB", float(GB))


def mem(x, digits: int = 2):
    """Bytes in the chosen unit, rounded to what the tables show."""
    return np.round(np.asarray(x, dtype=float) / unit()[1], digits)


def fmt_mem(x: float) -> str:
    label, div = unit()
    return f"{x / div:,.2f} {label}" if np.isfinite(x) else "—"


def fmt_usd(x: float, digits: int = 0) -> str:
    return f"${x:,.{digits}f}" if x is not None and np.isfinite(x) else "—"


def table(view: pd.DataFrame, key: str, settings: dict, formats: dict | None = None, help: dict | None = None,
          file_name: str | None = None, height: int | str = "auto", links: tuple = ()) -> None:
    """Show a table (column names carry their units) and a CSV download of exactly that table,
    with the settings that produced it as leading comment lines."""
    formats = formats or {}
    help = help or {}
    config = {}
    for col in view.columns:
        series = view[col]
        if col in links:
            config[col] = st.column_config.LinkColumn(col, help=help.get(col))
        elif pd.api.types.is_bool_dtype(series):
            config[col] = st.column_config.CheckboxColumn(col, help=help.get(col))
        elif pd.api.types.is_numeric_dtype(series):
            config[col] = st.column_config.NumberColumn(col, help=help.get(col), format=formats.get(col, "localized"))
        else:
            config[col] = st.column_config.TextColumn(col, help=help.get(col))
    st.dataframe(view, column_config=config, hide_index=True, width="stretch", height=height, placeholder="—")
    st.download_button("Download CSV", data=_csv(view, settings), file_name=file_name or f"{key}.csv",
                       mime="text/csv", key=f"download_{key}", on_click="ignore",
                       help="This table as shown, with the settings that produced it.")


@st.cache_data(max_entries=64, show_spinner=False)
def _csv(view: pd.DataFrame, settings: dict) -> str:
    """to_csv, once per table and settings: a rerun that shows the same table reuses it."""
    return to_csv(view, settings)


# ---- cached engine calls (keyed by their arguments: settings, catalog frames) ----------------
# A page's tables are derived from these, each cached on the same arguments (plus its own), so
# a rerun that changes nothing in the workload (a tab, a filter of the view, a download) costs
# cache look-ups only, and one that does recomputes only what the change reaches.

@st.cache_data(max_entries=24, show_spinner="Estimating every model × GPU…")
def configurations(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                   max_gpus: int) -> pd.DataFrame:
    frame = planning.plans_frame(plan_map, model=list(model_ids), gpu=list(gpu_ids))
    return planning.configurations(frame, models, gpus, max_gpus=max_gpus)


@st.cache_data(max_entries=24, show_spinner=False)
def cheapest(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
             max_gpus: int, cost: str = "buy_usd", by: tuple = ("model", "plan"), mode: str | None = None,
             hours: float | None = None) -> pd.DataFrame:
    """planning.cheapest over configurations(...) (costed by a budget mode when given)."""
    conf = configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus)
    if mode is not None:
        conf, cost = conf.assign(cost_usd=planning.plan_cost(conf, mode, hours)), "cost_usd"
    return planning.cheapest(conf, cost, by)


@st.cache_data(max_entries=24, show_spinner=False)
def cost_per_fit(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                 max_gpus: int) -> pd.DataFrame:
    """planning.cost_per_fit over configurations(...)."""
    return planning.cost_per_fit(configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus))


@st.cache_data(max_entries=24, show_spinner=False)
def budget_plan(plan_map: dict, model_ids: tuple, gpu_ids: tuple, models: pd.DataFrame, gpus: pd.DataFrame,
                max_gpus: int, budget: float, mode: str, hours: float | None, stretch: float) -> dict:
    """planning.budget_plan over configurations(...)."""
    conf = configurations(plan_map, model_ids, gpu_ids, models, gpus, max_gpus)
    return planning.budget_plan(conf, budget, mode, hours, stretch)


@st.cache_data(max_entries=16, show_spinner=False)
def article_inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                            batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                            headroom: float) -> pd.DataFrame:
    """planning.article_inference_table beside inference_table(...) for the article's models."""
    ours = inference_table(models, gpus, model_ids, precisions, seq, batch, card, kv_precision, max_gpus,
                           allow_long_context, headroom)
    return planning.article_inference_table(shipped("references"), ours)


@st.cache_data(max_entries=24, show_spinner=False)
def estimate_one(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.Series:
    sc = dict(sc)
    sc["zero"] = int(planning.effective_zero(sc.get("gpus", 1), sc.get("zero", 0), sc.get("offload", "none")))
    return estimate(pd.DataFrame([sc]), models, gpus).iloc[0]


@st.cache_data(max_entries=16, show_spinner="Trying the changes…")
def what_if(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    return planning.what_if(sc, models, gpus)


@st.cache_data(max_entries=16, show_spinner=False)
def memory_curve(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, seqs: tuple, batches: tuple) -> pd.DataFrame:
    return planning.memory_curve(sc, models, gpus, seqs, batches)


@st.cache_data(max_entries=16, show_spinner="Sizing every model at every precision…")
def inference_table(models: pd.DataFrame, gpus: pd.DataFrame, model_ids: tuple, precisions: tuple, seq: int,
                    batch: int, card: str, kv_precision: str, max_gpus: int, allow_long_context: bool,
                    headroom: float) -> pd.DataFrame:
    return planning.inference_table(models, gpus, list(model_ids), list(precisions), seq, batch, card,
                                    kv_precision=kv_precision, max_gpus=max_gpus,
                                    allow_long_context=allow_long_context, headroom=headroom)


@st.cache_data(max_entries=4, show_spinner="Comparing with every published figure…")
def evidence(models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    return evidence_table(shipped("references"), models, gpus)


@st.cache_data(max_entries=8, show_spinner=False)
def tier_checks(train: dict, models: pd.DataFrame, gpus: pd.DataFrame, max_gpus: int) -> pd.DataFrame:
    return planning.tier_checks(shipped("references"), train, models, gpus, max_gpus=max_gpus)


def gpu_filter(gpus: pd.DataFrame, key: str) -> pd.DataFrame:
    """Vendor / segment / memory filters for the GPU axis of a page (their own widget keys)."""
    c1, c2, c3 = st.columns(3)
    vendors = sorted(gpus["vendor"].astype(str).unique())
    segments = sorted(gpus["segment"].astype(str).unique())
    chosen_v = c1.multiselect("GPU vendor", vendors, default=vendors, key=f"{key}_vendor")
    chosen_s = c2.multiselect("GPU segment", segments, default=segments, key=f"{key}_segment")
    low, high = float(gpus["memory_gb"].min()), float(gpus["memory_gb"].max())
    rng = c3.slider("GPU memory (GB, vendor figure)", min_value=0.0, max_value=float(np.ceil(high)),
                    value=(0.0, float(np.ceil(high))), step=1.0, key=f"{key}_memory") if high > low else (low, high)
    keep = (gpus["vendor"].astype(str).isin(chosen_v) & gpus["segment"].astype(str).isin(chosen_s)
            & gpus["memory_gb"].between(rng[0], rng[1]))
    return gpus[keep]


def ensure_frame() -> None:
    """Every page runs inside dashboard.py (page config, sidebar, navigation). Streamlit treats an
    app with a pages/ folder as a legacy multipage app until st.navigation has run once in the
    process, so a fresh server whose first request is a deep link (or AppTest, which resets that
    flag before every run) would run the page file alone. Then switch to st.navigation and rerun
    the same page through dashboard.py (st.Page url paths equal the legacy ones: the file stems)."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - a Streamlit without the legacy mode
        return
    if getattr(PagesManager, "uses_pages_directory", False):
        PagesManager.uses_pages_directory = False
        st.rerun()


def page_header(title: str, caption: str) -> None:
    st.title(title)
    st.caption(caption)
