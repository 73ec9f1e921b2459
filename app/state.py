"""The workload kept in session state, the shared sidebar that edits it, the URL that carries
it, and the workload dicts handed to the planner.

Session state keys:
  "settings"      the workload, one value per sidebar field (survives page switches: widgets
                  are re-seeded from it on every run, so a widget that was not drawn on the
                  last page comes back with the user's value)
  "w_<field>"     the sidebar widgets' own keys
  "user_models", "user_gpus"   catalog entries added in this session only: lists of records
                  validated exactly like the shipped YAML (catalog.schema); the entries saved
                  in the user catalog file are loaded for every session (app/user_entries.py)
  "_model_source_*"  the sidebar's Hugging Face / file field: its resolved row and memo
                  (app/model_source.py; the URL and the settings keep the field's text only)
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from app import model_source
from app import user_entries as _user_entries
from app.data import _shipped_frames, _shipped_ids, decided_notes, merged_frames
from app.labels import md_escape  # noqa: E402  (user text inside Markdown)
from app.labels import (APP_NAME, BASE_LABELS, CATALOG_TABS, GB, GIB, INFER_PRECISION_LABELS, KV_LABELS, KV_POLICY_LABELS, METHOD_LABELS, OBJECTIVE_LABELS,
                        OFFLOAD_LABELS, OPTIMIZER_LABELS, RECIPE_LABELS, SWITCH_LABELS, TASK_LABELS, TRAIN_PRECISION_LABELS,
                        ZERO_LABELS)
from catalog.schema import CatalogError
from engine.constants import GALORE_OPTIMIZERS, INFER_PRECISIONS, LORA_MODULES, OPTIMIZERS, TRAIN_PRECISIONS
from engine.columns import SCENARIO, read_number
from engine.scenarios import KV_PRECISIONS, OBJECTIVES, did_you_mean, dpo_reference_runs
from engine.serving import ENGINES as SERVE_ENGINES
from engine.serving import engine_precisions
from engine.stacks import RECIPE_NAMES, SWITCHES
from planner.planning import BUDGET_MAX_GPUS

INFER_TABLE_PRECISIONS = ("fp16", "int8", "int4", "q8_0", "q4_k_m")  # the Inference page's default formats
TEXT_MAX = 200  # a page's search box as a URL carries it (app/model_source.py has its own bound)


@dataclass(frozen=True)
class Field:
    key: str
    default: object
    kind: str                 # choice | int | number (a finite float) | bool | multi | text
    options: tuple = field(default_factory=tuple)
    low: int | None = None
    high: int | None = None
    accepted: str = ""        # a URL's bad value's message: what is accepted (the column table's words, or the bounds)
    widget: str = ""          # a page-level control's widget key on its page (control() draws it); "" for the sidebar's

    def accepted_text(self) -> str:
        """What the field accepts, in the words the command line uses for the same range (engine/columns.py)."""
        if self.accepted:
            return self.accepted
        if self.kind == "int":
            return f"a whole number from {self.low:,} to {self.high:,}"
        if self.kind == "number":
            return f"a number from {self.low:,.10g} to {self.high:,.10g}"
        if self.kind == "bool":
            return "1 or 0"
        if self.kind == "multi":
            return "a comma list of " + (", ".join(map(str, self.options)) if self.options else "the page's choices")
        if self.kind == "range":
            return f"two numbers low,high from {self.low:,.10g} to {self.high:,.10g}"
        if self.kind == "text":
            return f"one line of text, at most {TEXT_MAX} characters"
        if not self.options:  # model, gpu: the catalog's ids (the user's own too), checked against the frames
            return f"a catalog {self.key} id (see the Catalog page)"
        return ", ".join(map(str, self.options))


# the largest GPU counts a page's sweep offers (Feasibility, Budget, Cost per fit, Inference)
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)

# The named workloads of the multi-workload pages (Budget, Cost per fit): a label -> (task, method or weights)
PLAN_CHOICES = {
    "Full fine-tuning": ("train", "full"), "LoRA": ("train", "lora"), "QLoRA": ("train", "qlora"),
    "Freeze": ("train", "freeze"),
    "Serve BF16": ("infer", "bf16"), "Serve INT8": ("infer", "int8"), "Serve INT4": ("infer", "int4"),
    "Serve GGUF Q4_K_M": ("infer", "q4_k_m"),
}
DEFAULT_PLANS = ["Full fine-tuning", "LoRA", "QLoRA", "Serve BF16", "Serve INT4"]

# Page-level controls (a page's filters and view choices, not the sidebar's workload), each declared once here: its URL
# key, its default, its kind, and the widget key its page draws it under (control() below). They live in the settings
# like the sidebar's, so a page switch brings them back and a shared link reproduces the page. A multi-choice whose
# default is None means "every choice the page lists" (the catalog's families, the evidence's metrics: the list is
# the page's, checked when the page draws it); a range's None is the slider's whole range.
PAGE_FIELDS = (
    # Feasibility matrix: the model families, the largest count, and the GPU filters (app/tables.py gpu_filter)
    Field("feas_families", None, "multi", widget="fm_family"),
    Field("feas_max_gpus", 8, "choice", GPU_COUNTS, widget="fm_max_gpus"),
    Field("feas_vendors", None, "multi", widget="fm_vendor"),
    Field("feas_segments", None, "multi", widget="fm_segment"),
    Field("feas_memory_gb", None, "range", low=0, high=100_000, widget="fm_memory"),
    Field("feas_details", False, "bool", widget="fm_details_open"),  # the one-row-per-cell section open
    # Inference: the source article's table open
    Field("infer_article", False, "bool", widget="inf_article_open"),
    # Evidence: the references' tab and the serving engines' tab
    Field("ev_kinds", None, "multi", widget="ev_kind"),
    Field("ev_metrics", None, "multi", widget="ev_metric"),
    Field("ev_outside", False, "bool", widget="ev_outside"),
    Field("ev_search", "", "text", widget="ev_search"),
    Field("sv_metrics", None, "multi", widget="sv_metric"),
    Field("sv_engines", None, "multi", widget="sv_engine"),
    Field("sv_roles", None, "multi", widget="sv_role"),
    Field("sv_search", "", "text", widget="sv_search"),
    # Budget: the "GPUs only" tables' workloads and largest count (budget --max-gpus's), 'a bit more', one purchase,
    # and the GPU filters
    Field("budget_plans", tuple(DEFAULT_PLANS), "multi", tuple(PLAN_CHOICES), widget="bp_plans"),
    Field("budget_max_gpus", BUDGET_MAX_GPUS, "choice", GPU_COUNTS, widget="bp_max_gpus"),
    Field("budget_stretch", 50, "int", low=10, high=200, widget="bp_stretch"),
    Field("budget_one", True, "bool", widget="bp_one"),
    Field("budget_vendors", None, "multi", widget="bp_vendor"),
    Field("budget_segments", None, "multi", widget="bp_segment"),
    Field("budget_memory_gb", None, "range", low=0, high=100_000, widget="bp_memory"),
    # Cost per fit: its workloads, largest count, model families and GPU filters
    Field("cpf_plans", tuple(DEFAULT_PLANS), "multi", tuple(PLAN_CHOICES), widget="cf_plans"),
    Field("cpf_max_gpus", 8, "choice", GPU_COUNTS, widget="cf_max_gpus"),
    Field("cpf_families", None, "multi", widget="cf_family"),
    Field("cpf_vendors", None, "multi", widget="cf_vendor"),
    Field("cpf_segments", None, "multi", widget="cf_segment"),
    Field("cpf_memory_gb", None, "range", low=0, high=100_000, widget="cf_memory"),
    # Catalog: the search box and the tab open (app/labels.py CATALOG_TABS)
    Field("catalog_search", "", "text", widget="cat_search"),
    Field("catalog_tab", "gpus", "choice", tuple(CATALOG_TABS), widget="catalog_tab"),
)


def _column_fields() -> list[Field]:
    """The sidebar fields of the scenario columns, as the column table declares them
    (engine/columns.py: key = the URL key, the dashboard's default, options or bounds)."""
    out = []
    for col in SCENARIO:
        for sb in col.sidebar:
            options = sb.options if sb.options is not None else (tuple(col.choices) if sb.kind in ("choice", "multi") else ())
            as_type = {"int": int, "number": float}.get(sb.kind)
            low = sb.low if sb.low is not None else (as_type(col.low) if as_type and col.low is not None else None)
            high = sb.high if sb.high is not None else (as_type(col.high) if as_type and col.high is not None else None)
            # the column's own words where the field accepts exactly the column's range (galore_rank: "..., or 0 for
            # the recipe's"; usd_per_kwh: "a price in $/kWh >= 0 and <= 100"); a narrower field (gpus up to 1,024,
            # headroom in percent) says its own bounds
            same = ({"number": "float"}.get(sb.kind, sb.kind) == col.kind and (low, high) == (col.low, col.high)
                    and sb.options is None and not (col.low_open or col.high_open)) or (sb.kind, col.kind) == ("choice", "int")
            out.append(Field(sb.key, sb.default, sb.kind, options, low, high, col.accepted if same else ""))
    return out


FIELDS: dict[str, Field] = {f.key: f for f in (
    *_column_fields(),
    # the dashboard's own fields (no scenario column): units, and the Budget page's budget (whole
    # dollars), mode and card condition, so that a shared link reproduces it
    Field("units", "GiB", "choice", ("GiB", "GB")),
    Field("budget", 10_000, "int", low=0, high=10**10),
    Field("budget_mode", "buy", "choice", ("buy", "cloud_hour", "cloud_job")),
    # the renting modes' own figures: dollars per hour for all GPUs, and the hours one job runs
    Field("budget_per_hour", 10.0, "number", low=0, high=10**6),
    Field("job_hours", 24.0, "number", low=0.5, high=10**6),
    Field("condition", "either", "choice", ("either", "new", "used")),
    # issue 25: a model from the Hugging Face Hub or a file, as typed (the resolved row is never
    # in the URL: app/model_source.py reads it again from the text)
    Field(model_source.KEY, "", "text"),
    # the Serving page's own settings (engine, weights, GPUs per replica, memory share, other processes' memory,
    # experts in host RAM, cards, the target of the cheapest search): a shared link reproduces the page, and a page
    # switch brings them back (they were widget state only). serve_weights 'auto': serve's own default
    # (planner/serving.py default_precision: the model's checkpoint format where the engine takes it, else the
    # engine's); serve_cards empty: the page's default cards (checked against the GPU ids)
    Field("serve_engine", "vllm", "choice", tuple(SERVE_ENGINES)),
    Field("serve_weights", "auto", "choice", ("auto",) + tuple(dict.fromkeys(
        p for e in SERVE_ENGINES for p in engine_precisions(e)))),
    # the page's choices (a count it does not list fell back to 1)
    Field("serve_gpus", 1, "choice", (1, 2, 4, 8), widget="srv_gpus"),
    Field("serve_share_default", True, "bool", widget="srv_util_default"),
    Field("serve_util", 0.9, "number", low=0.5, high=0.98, widget="srv_util"),
    Field("serve_in_use", 0.0, "number", low=0, high=1024, widget="srv_in_use"),
    Field("serve_cpu_moe", "none", "choice", ("none", "auto", "all")),
    Field("serve_cards", (), "multi"),
    Field("serve_users", 32, "int", low=1, high=4096, widget="srv_users"),
    Field("serve_context", 8192, "int", low=256, high=131072, widget="srv_context"),
    Field("serve_tps", 20.0, "number", low=1, high=500, widget="srv_tps"),
    Field("serve_ttft", 2.0, "number", low=0.05, high=60, widget="srv_ttft"),
    # the Inference page's weight formats and largest GPU count
    Field("infer_precisions", INFER_TABLE_PRECISIONS, "multi", tuple(INFER_PRECISIONS), widget="inf_precisions"),
    Field("infer_max_gpus", 8, "choice", GPU_COUNTS, widget="inf_max_gpus"),
    *PAGE_FIELDS,
)}
# multi fields whose options are the catalog's ids (the user's own GPUs too), checked when a URL is read
DYNAMIC_MULTI = {"serve_cards": "gpu"}


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
    """A query-parameter string as the field's value; ValueError names the bad text (clipped to 80
    characters: a URL can carry 100,000) and what is accepted."""
    if field_.kind == "text" and field_.key != model_source.KEY:  # a page's search box: one line, bounded
        if len(text) > TEXT_MAX or "\n" in text or "\r" in text or "\x00" in text:
            raise ValueError(f"{field_.key}={_clip(text)!r} ({len(text):,} characters) ignored; accepted: "
                             f"{field_.accepted_text()}")
        return text
    if field_.kind == "text":  # free text (a Hub id, a path): taken whole, checked when resolved
        if len(text) > model_source.MAX_TEXT:
            raise ValueError(f"{field_.key}={text[:80]!r}… ({len(text):,} characters) ignored; accepted: at most "
                             f"{model_source.MAX_TEXT:,} characters: {model_source.accepted()}")
        if "\n" in text or "\r" in text or "\x00" in text:
            raise ValueError(f"{field_.key}={text[:80]!r} ignored; accepted: one line of text: {model_source.accepted()}")
        return text
    accepted = field_.accepted_text()
    # a list of every option is longer than one value: the cap is 40 characters an option
    # (a page's list of the catalog's names, checked when drawn: up to 4,000 characters, as serve_cards)
    longest = (40 * max(len(field_.options), 1) if field_.options else 4000) if field_.kind == "multi" else 80
    if len(text) > longest:
        raise ValueError(f"{field_.key}={text[:40]!r}… ({len(text):,} characters) ignored; accepted: {accepted}")
    shown = _clip(text)
    def number() -> float:  # as the command line reads one (engine/columns.py read_number: ASCII, finite; 4.0 whole)
        try:
            return read_number(text)
        except ValueError as exc:
            hint = " (ASCII digits)" if str(exc) == "ASCII digits" else ""
            raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}{hint}") from None

    if field_.kind in ("int", "number"):
        value = number()
        if not field_.low <= value <= field_.high or (field_.kind == "int" and value != int(value)):
            raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}")
        return int(value) if field_.kind == "int" else value
    if field_.kind == "bool":
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}")
    if field_.kind == "multi":
        values = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))  # each once
        if field_.default is None and not values:  # a page's list emptied (every choice is the default): nothing chosen
            return ()
        # a page's list of the catalog's or the evidence's names: checked when the page draws it (control())
        bad = [v for v in values if v not in field_.options] if field_.options or field_.default is not None else []
        if bad or not values:
            raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}")
        return values
    if field_.kind == "range":
        parts = text.split(",")
        try:
            low, high = (read_number(part) for part in parts) if len(parts) == 2 else (None, None)
        except ValueError:
            low = high = None
        if low is None or not field_.low <= low <= high <= field_.high:
            raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}")
        return (float(low), float(high))
    options = {str(o): o for o in field_.options}  # (a choice of counts, the ZeRO stage: ints, as the widget lists them)
    if options and all(isinstance(o, int) for o in field_.options):  # a number, read as the CLI reads --zero ("3.0")
        value = number()
        if value not in field_.options:
            raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}")
        return int(value)
    if options and text not in options:  # (catalog_tab=GPUs, method=LoRA: the word it most likely meant)
        raise ValueError(f"{field_.key}={shown!r} ignored; accepted: {accepted}" + did_you_mean(text, options))
    return options[text] if options else text


def _clip(text: str) -> str:
    """A URL's text as a message repeats it: at most 80 characters (a URL can carry 100,000)."""
    return text if len(text) <= 80 else text[:80] + "…"


def _as_param(field_: Field, value) -> str:
    if field_.kind == "bool":
        return "1" if value else "0"
    if field_.kind == "multi":
        return ",".join(value)
    if field_.kind == "range":
        return ",".join(f"{float(v):.10g}" for v in value)
    if field_.kind == "number":
        return f"{float(value):.10g}"  # 55, 2.5, 0.75: as typed, no trailing zeros
    return str(value)


def _load_query_params(settings: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> None:
    """Once per session: a URL's query parameters seed the workload (a shared link reproduces the view)."""
    if st.session_state.get("_query_loaded"):
        return
    st.session_state["_query_loaded"] = True
    notes = []
    dynamic = {"model": set(models["id"]), "gpu": set(gpus["id"])}
    for key, text in st.query_params.items():
        if key not in FIELDS:  # a mistyped key (Batch, bacth) would be dropped from the URL with no word
            notes.append(f"{_clip(key)}={_clip(str(text))!r} ignored: {_clip(key)!r} is not a dashboard setting"
                         + (did_you_mean(key, FIELDS) or "; accepted: the keys of a link the dashboard wrote "
                                                         "(model, task, batch, seq, gpu, ...)"))
            continue
        if key == model_source.KEY:  # read first (_load_source_param)
            continue
        f = FIELDS[key]
        shown = _clip(str(text))
        try:
            if key in DYNAMIC_MULTI:  # a comma list of catalog ids (the user's too): checked against the frames
                ids = dynamic[DYNAMIC_MULTI[key]]
                accepted = f"a comma list of catalog {DYNAMIC_MULTI[key]} ids (see the Catalog page)"
                if len(str(text)) > 4000:
                    raise ValueError(f"{key}={shown!r} ({len(str(text)):,} characters) ignored; accepted: {accepted}")
                value = tuple(dict.fromkeys(v.strip() for v in str(text).split(",") if v.strip()))
                bad = [v for v in value if v not in ids]
                if bad or not value:  # the unknown ids named, the first with the ids it most likely meant
                    why = f": {', '.join(repr(_clip(v)) for v in bad[:5])} not in the catalog" if bad else ""
                    raise ValueError(f"{key}={shown!r} ignored{why}; accepted: {accepted}"
                                     + (did_you_mean(bad[0], ids) if bad else ""))
                settings[key] = value
                continue
            value = _parse(f, str(text))
            if key in dynamic and value not in dynamic[key]:
                raise ValueError(f"{key}={shown!r} ignored; accepted: {f.accepted_text()}" + did_you_mean(value, dynamic[key]))
        except ValueError as exc:
            notes.append(str(exc))
            continue
        settings[key] = value
    # the weights a link names are the link's engine's (the page listed another engine's as its default, unsaid)
    weights, engine = settings["serve_weights"], settings["serve_engine"]
    if "serve_weights" in st.query_params and weights not in ("auto",) + tuple(engine_precisions(engine)):
        notes.append(f"serve_weights={_clip(weights)!r} ignored: the {engine} engine does not run it; accepted with "
                     f"serve_engine={engine}: auto, {', '.join(engine_precisions(engine))}")
        settings["serve_weights"] = FIELDS["serve_weights"].default
    st.session_state["_query_notes"] = st.session_state.get("_query_source_notes", []) + notes


def _load_source_param(settings: dict) -> None:
    """Once per session, before the sidebar resolves it: the URL's model source text (the model
    it names must be in the frames before the URL's `model` is checked against them)."""
    if st.session_state.get("_query_source_loaded"):
        return
    st.session_state["_query_source_loaded"] = True
    text = st.query_params.get(model_source.KEY)
    notes = []
    if text is not None:
        try:
            settings[model_source.KEY] = _parse(FIELDS[model_source.KEY], str(text))
        except ValueError as exc:
            notes.append(str(exc))
    st.session_state["_query_source_notes"] = notes


def _write_query_params(settings: dict) -> None:
    params = {k: _as_param(f, settings[k]) for k, f in FIELDS.items() if settings[k] != f.default}
    current = {k: st.query_params.get(k) for k in st.query_params.keys()}
    if current != params:
        st.query_params.from_dict(params)


def sync_url() -> None:
    """Write the settings to the URL now (a page that changed a setting below the sidebar)."""
    _write_query_params(store())


def _bounds(key: str) -> dict:
    """A number widget's bounds, the field's (from the column table, engine/columns.py; a page's own, PAGE_FIELDS and
    the Serving page's): floats for a number field, whose widget refuses int bounds beside a float value."""
    f = FIELDS[key]
    as_type = float if f.kind == "number" else int
    return {"min_value": as_type(f.low), "max_value": as_type(f.high)}


bounds = _bounds  # (the pages' name for it)


def _widget(key: str, make, options: list | None = None):
    """Draw one sidebar widget whose initial value is the store's, and write its value back.

    The store (st.session_state["settings"]) is the source of truth; each widget gets it as its
    own default (`value=`, `index=`, `default=`), never through st.session_state[<widget key>]:
    Streamlit drops a widget's keyed state when a run is cut short by the next one or when a
    page switch does not render it, and a widget seeded only through its key then came back at
    its own default (sequence 1, rank 1, no LoRA targets, the first model: seen in a real
    browser on a busy machine, tests/test_browser.py). With the store as the default, a lost
    widget state comes back as the user's value."""
    settings = store()
    wkey = f"w_{key}"
    field_ = FIELDS[key]
    choices = list(options if options is not None else field_.options)
    value = settings[key]
    if field_.kind == "choice" and choices and value not in choices:
        value = field_.default if field_.default in choices else choices[0]
    if field_.kind == "choice" and wkey in st.session_state and st.session_state[wkey] not in choices:
        del st.session_state[wkey]  # an entry gone from the list (the field cleared): the store's value
    if field_.kind == "choice":
        init = {"index": choices.index(value)}
    elif field_.kind == "multi":
        init = {"default": [v for v in value if v in choices]}
    else:
        init = {"value": value}
    result = make(wkey, **init)
    settings[key] = tuple(result) if field_.kind == "multi" else result
    return settings[key]


def control(key: str, make, options: list | None = None, read=None):
    """Draw a page-level control declared in FIELDS (PAGE_FIELDS: its URL key, default and widget key) with the
    store's value, write its value back to the store and the URL, and return it. As _widget for the sidebar: a page
    switch, which drops the widget's own state, brings the user's value back, and a shared link reproduces it.

    make(widget_key, **init) draws the widget (init: index= for a choice, default= for a multi-choice, value=
    otherwise); options: the page's choices where they are the catalog's or the data's (the field declares none);
    read(result): the value from what make returned (the tabs' open one). A stored value the page cannot show (a
    link's family the catalog lacks, a count the list does not offer) is named in a warning with what is accepted,
    and left out; the control's other values, and the link's other keys, stay."""
    settings = store()
    field_ = FIELDS[key]
    wkey = field_.widget or key
    choices = list(options if options is not None else field_.options)
    value = settings[key]
    notes = st.session_state.setdefault("_page_notes", {})
    if field_.kind == "choice" and value not in choices:
        notes[key] = f"{key}={_clip(str(value))!r} ignored; accepted: {', '.join(map(str, choices))}"
        value = field_.default if field_.default in choices else choices[0]
    elif field_.kind == "multi" and value is not None and any(v not in choices for v in value):
        bad = [v for v in value if v not in choices]
        notes[key] = (f"{key}={_clip(','.join(value))!r}: {', '.join(repr(_clip(v)) for v in bad[:5])} left out, not "
                      f"among this page's choices; accepted: a comma list of {_clip(', '.join(map(str, choices)))}"
                      + did_you_mean(bad[0], [str(c) for c in choices]))
        value = tuple(v for v in value if v in choices) or field_.default
    elif field_.kind == "range" and value is not None and not options[0] <= value[0] <= value[1] <= options[1]:
        notes[key] = (f"{key}={_clip(_as_param(field_, value))!r} ignored: outside this page's range; accepted: "
                      f"two numbers low,high from {options[0]:,.10g} to {options[1]:,.10g}")
        value = field_.default
    shown = list(choices) if field_.kind == "multi" and value is None else value
    if field_.kind == "range" and value is None:
        shown = tuple(options)
    # a widget state the list no longer holds (a catalog entry removed): the store's value instead (a widget read
    # through `read` holds its own words: the tabs' labels)
    held = st.session_state.get(wkey) if wkey in st.session_state and read is None else None
    if (field_.kind == "choice" and held is not None and held not in choices) or (
            field_.kind == "multi" and held is not None and any(v not in choices for v in held)):
        del st.session_state[wkey]
    if field_.kind == "choice":
        init = {"index": choices.index(shown)}
    elif field_.kind == "multi":
        init = {"default": list(shown)}
    else:
        init = {"value": shown}
    result = make(wkey, **init)
    result = read(result) if read else result
    if field_.kind == "multi":
        result = tuple(result)
        # every choice, in any order (one taken out and put back goes last): the default, not a list of them all
        new = None if field_.default is None and sorted(map(str, result)) == sorted(map(str, choices)) else result
        if not result and field_.default is not None:  # emptied (the page says to choose one): the default kept there
            new = field_.default
    elif field_.kind == "range":
        result = (float(result[0]), float(result[1]))
        new = None if result == tuple(map(float, options)) else result
    else:
        new = result
    if new != value:  # the user changed it: a link's note about it is said
        notes.pop(key, None)
    settings[key] = new
    if key in notes:
        st.warning(md_escape(notes[key]))  # it repeats the URL's text: never Markdown
    sync_url()
    return result


def _model_source_field(sb, settings: dict) -> dict | None:
    """The "model from Hugging Face or a file" field, resolved (app/model_source.py): its row
    joins this session's frames before they are built; a newly resolved model is selected."""
    text = _widget(model_source.KEY, lambda k, **v: sb.text_input(
        model_source.LABEL, key=k, **v, placeholder=model_source.PLACEHOLDER, help=model_source.HELP))
    ids = _shipped_ids(_shipped_frames())
    result = model_source.update(text, ids["models"])
    picked = model_source.pick(text, result, settings["model"])
    if picked is not None:  # a newly read model is selected; when it is gone, the one selected before
        settings["model"] = picked
        st.session_state.pop("w_model", None)  # the list shows the store's value
    return result


def _model_source_status(sb, result: dict | None) -> None:
    """Under the field: the resolved model (exact parameters, where they came from, its source
    and commit) with a button that saves it to the user catalog file, or the one-line error."""
    from app.user_entries import md_code
    if not result:
        return
    if "error" in result:
        sb.error(md_escape(result["error"]))
        return
    row, info, saved = result["row"], result.get("info") or {}, result.get("saved")
    lines = [f"{md_code(row['name'])} ({md_code(row['id'])}): **{int(row['params']):,}** parameters (exact), "
             + md_escape(model_source.weights_line(info)) + "."]
    if info.get("weights_bytes_stored"):
        stored = f"stored weights {int(info['weights_bytes_stored']):,} bytes"
        lines.append(md_escape(stored + (f" ({info['precision']})" if info.get("precision") else "")) + ".")
    lines.append("Source: " + md_code(row["source"].split("; ")[0]) + ".")
    lines += [md_escape(n) for n in (info.get("notes") or [])[:2]]
    if saved is not None and not saved.get("_differs"):
        lines.append("Saved in your catalog file.")
    elif saved is not None:
        lines.append(f"Your catalog file has another {md_code(row['id'])} (another revision or file): this session "
                     "shows the one read now.")
    sb.caption("  \n".join(lines))
    said = st.session_state.pop("_model_source_saved", None)  # what the last click did (_save_source)
    if said is not None:
        (sb.success if said[0] == "ok" else sb.error)(said[1])
    if saved is None or saved.get("_differs"):
        sb.button("Save to my catalog file" if saved is None else "Replace my saved entry", key="model_source_save",
                  on_click=_save_source, args=(result,),
                  help=f"Write it to {_user_entries.catalog_path()} with its source and revision: it then "
                       "loads at start for every session and the CLI.")


def _save_source(result: dict) -> None:
    """The save button's callback: it runs before the next run, which then finds the saved entry
    (the frames show it as saved, with no second run)."""
    from app.user_entries import md_code
    try:
        stored = model_source.save(result, _shipped_ids(_shipped_frames()))
    except CatalogError as exc:
        st.session_state["_model_source_saved"] = ("error", md_escape(exc))
    else:
        st.session_state["_model_source_saved"] = (
            "ok", f"Saved {md_code(stored['id'])} to {md_code(_user_entries.catalog_path())}"
                  + (f" at revision {md_code(stored['revision'])}" if stored.get("revision") else "") + ".")


def sidebar() -> dict:
    """The shared workload sidebar (drawn by dashboard.py on every page). Returns the settings."""
    settings = store()
    _load_source_param(settings)
    sb = st.sidebar
    sb.header("Workload")
    picker = sb.container()  # the catalog's Model list, filled once the field's model is in the frames
    source = _model_source_field(sb, settings)
    models, gpus = merged_frames()
    _load_query_params(settings, models, gpus)
    # a card the user removed from the catalog (a session entry) leaves the Serving page's list, and so the URL:
    # a link copied on another page named it still, and the one who opened it lost the whole list
    known = set(gpus["id"])
    if any(g not in known for g in settings["serve_cards"]):
        settings["serve_cards"] = tuple(g for g in settings["serve_cards"] if g in known)
    model_names = dict(zip(models["id"], models["name"]))
    gpu_names = dict(zip(gpus["id"], gpus["name"]))
    _widget("model", lambda k, **v: picker.selectbox("Model", list(model_names), key=k, **v,
                                                     format_func=lambda i: model_names.get(i, i),
                                                     help="Used by the single-scenario views (Overview, Breakdown)."),
            options=list(model_names))
    _model_source_status(sb, source)
    task = _widget("task", lambda k, **v: sb.radio("Task", list(TASK_LABELS), key=k, **v, format_func=TASK_LABELS.get,
                                              horizontal=True))
    if task == "train":
        method = _widget("method", lambda k, **v: sb.selectbox("Method", list(METHOD_LABELS), key=k, **v, format_func=METHOD_LABELS.get))
        _widget("objective", lambda k, **v: sb.selectbox("Objective", list(OBJECTIVES), key=k, **v,
                                                         format_func=OBJECTIVE_LABELS.get,
                                                         help="dpo: the micro-batch counts preference pairs (chosen and "
                                                              "rejected in one forward) and a reference model is held "
                                                              "as the stack's 'dpo reference' says (docs/stacks.md)."))
        _widget("train_precision", lambda k, **v: sb.selectbox("Precision", list(TRAIN_PRECISIONS), key=k, **v,
                                                          format_func=TRAIN_PRECISION_LABELS.get))
        optimizer = _widget("optimizer", lambda k, **v: sb.selectbox("Optimizer", list(OPTIMIZERS), key=k, **v,
                                                                     format_func=OPTIMIZER_LABELS.get))
        if optimizer in GALORE_OPTIMIZERS:
            _widget("galore_rank", lambda k, **v: sb.number_input(
                "GaLore rank (0: the recipe's)", **_bounds("galore_rank"), step=16, key=k, **v,
                help="The rank of each projected gradient: transformers' default 128, LLaMA-Factory's 16."))
        _widget("batch", lambda k, **v: sb.number_input("Micro-batch per GPU (sequences)", **_bounds("batch"), step=1,
                                                   key=k, **v))
        _widget("seq", lambda k, **v: sb.number_input("Sequence length (tokens)", **_bounds("seq"),
                                                 step=256, key=k, **v))
        _widget("grad_checkpointing", lambda k, **v: sb.checkbox("Gradient checkpointing", key=k, **v,
                                                            help="Keep each layer's input, recompute the rest in backward."))
        if method in ("lora", "qlora"):
            with sb.expander("LoRA", expanded=True):
                _widget("lora_rank", lambda k, **v: st.number_input("Rank r", **_bounds("lora_rank"),
                                                               step=8, key=k, **v))
                _widget("lora_targets", lambda k, **v: st.multiselect("Target modules", list(LORA_MODULES), key=k, **v,
                                                                 help="peft's default for Llama: q_proj, v_proj."))
                _widget("lora_dropout_pct", lambda k, **v: st.number_input(
                    "Dropout (%)", **_bounds("lora_dropout_pct"), step=5, key=k, **v,
                    help="peft's lora_dropout x 100 (0: peft's default; 5 = 0.05, as LitGPT and axolotl's "
                         "examples). Above 0 each adapted module keeps a dropout mask and its own input copy "
                         "(recipe litgpt: one for q, k and v together)."))
                if method == "qlora":
                    _widget("base_precision", lambda k, **v: st.selectbox("Frozen base", list(BASE_LABELS), key=k, **v,
                                                                     format_func=BASE_LABELS.get))
        # its ~30 switches drawn while the section is open only (a lazy expander, Streamlit's on_change="rerun"):
        # ~10 ms of every sidebar change on every page, for a section few open; open at first where a switch is not
        # its default (a shared link's stack), and the values stay in the store (and the URL) while it is closed
        # (decided once a session: a parameter that changes makes Streamlit take the section for a new one)
        first_open = st.session_state.setdefault("_stack_first_open", any(
            settings[name] != FIELDS[name].default for name in ("recipe", *SWITCHES)))
        stack_box = sb.expander("Software stack", key="sidebar_stack_open", on_change="rerun", expanded=first_open)
        if stack_box.open:
            with stack_box:
                _widget("recipe", lambda k, **v: st.selectbox("Recipe", list(RECIPE_NAMES), key=k, **v,
                                                              format_func=lambda r: RECIPE_LABELS.get(r, r),
                                                              help="Whose defaults the switches below take (docs/stacks.md)."))
                for switch, values in SWITCHES.items():
                    _widget(switch, lambda k, label=SWITCH_LABELS.get(switch, switch.replace("_", " ")), values=values, **v:
                            st.selectbox(label, list(values), key=k, **v, help="auto: as the recipe sets it"))
        if method == "freeze":
            _widget("freeze_layers", lambda k, **v: sb.number_input("Trainable last layers", **_bounds("freeze_layers"),
                                                               key=k, **v))
    else:
        if settings.get("objective") == "dpo":  # (kept for training; serving has no objective: infer_workload)
            sb.info("Objective DPO applies to training: the serving figures ignore it (set Task to Train / fine-tune to "
                    "plan the DPO run).")
        _widget("infer_precision", lambda k, **v: sb.selectbox("Weights", list(INFER_PRECISIONS), key=k, **v,
                                                          format_func=INFER_PRECISION_LABELS.get))
        _widget("kv_precision", lambda k, **v: sb.selectbox("KV cache", list(KV_PRECISIONS), key=k, **v, format_func=KV_LABELS.get))
        _widget("kv_policy", lambda k, **v: sb.selectbox("KV cache of sliding-window / MLA layers", list(KV_POLICY_LABELS),
                                                         key=k, **v, format_func=KV_POLICY_LABELS.get,
                                                         help="Models whose layers do not all attend to the whole "
                                                              "context (Gemma 2/3, gpt-oss, DeepSeek MLA); dense "
                                                              "full-attention models are the same under every policy."))
        _widget("batch", lambda k, **v: sb.number_input("Concurrent sequences", **_bounds("batch"),
                                                   step=1, key=k, **v))
        _widget("seq", lambda k, **v: sb.number_input("Context per sequence (tokens)", **_bounds("seq"),
                                                 step=256, key=k, **v))
    sb.header("GPUs")
    _widget("gpu", lambda k, **v: sb.selectbox("GPU", list(gpu_names), key=k, **v, format_func=lambda i: gpu_names.get(i, i),
                                          help="The card of the single-scenario views and the inference table."),
            options=list(gpu_names))
    _widget("gpus", lambda k, **v: sb.number_input("GPU count", **_bounds("gpus"), step=1, key=k, **v,
                                              help="GPUs of the single-scenario views; the matrix and planners find the count themselves."))
    if task == "train":
        _widget("zero", lambda k, **v: sb.selectbox("ZeRO stage when sharding", [0, 1, 2, 3], key=k, **v, format_func=ZERO_LABELS.get,
                                               help="Applied from two GPUs on (one GPU runs unsharded unless offload is on)."))
        _widget("offload", lambda k, **v: sb.selectbox("Offload", list(OFFLOAD_LABELS), key=k, **v, format_func=OFFLOAD_LABELS.get))
    with sb.expander("Display and margins"):
        _widget("headroom_pct", lambda k, **v: st.slider("Headroom kept free (% of each GPU)", FIELDS["headroom_pct"].low,
                                                                 FIELDS["headroom_pct"].high, key=k, **v))
        _widget("allow_long_context", lambda k, **v: st.checkbox("Allow sequences beyond a model's context", key=k, **v))
        _widget("units", lambda k, **v: st.radio("Memory units", ["GiB", "GB"], key=k, **v, horizontal=True,
                                            help="GiB = 2^30 bytes; GB = 10^9 bytes."))
    for note in st.session_state.get("_query_notes", []):
        sb.warning(md_escape(note))  # it repeats the URL's text: never Markdown
    problems_now = problems(settings, single=True)
    for problem in problems_now:
        sb.error(md_escape(problem))
    if not problems_now:
        for note in decided_notes(scenario(settings), models):
            sb.caption(f"Decided: {md_escape(note)}")
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
    return out


def require_valid(training: bool | None = None, single: bool = False) -> dict:
    """Stop the page with the sidebar's messages when its workload cannot be estimated."""
    s = store()
    issues = problems(s, training=training, single=single)
    if issues:
        for issue in issues:
            st.error(md_escape(issue))
        st.stop()
    return s


# The engine's messages name the command line's flags; on the dashboard, say which control to use.
CLI_TO_DASHBOARD = (
    ("(or allow it explicitly with --allow-long-context)",
     "(or tick \"Allow sequences beyond a model's context\" under \"Display and margins\" in the sidebar)"),
    ("--allow-long-context", "\"Allow sequences beyond a model's context\" (sidebar, \"Display and margins\")"),
    # the uncertainty band's paths (engine/uncertainty.py band): the sidebar's Software stack switches
    ("(--loop manual)", "(the sidebar's Software stack: Training loop manual)"),
    ("(--padding padded)", "(the sidebar's Software stack: Batch padding padded)"),
)


def dashboard_message(text: str) -> str:
    """An engine message with the command-line flags it names replaced by the sidebar's controls."""
    for flag, control in CLI_TO_DASHBOARD:
        text = text.replace(flag, control)
    return text


def guard(fn, *args, **kwargs):
    """Call the engine; a bad value becomes one clear error line on the page, never a traceback."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, CatalogError) as exc:
        st.error(md_escape(dashboard_message(str(exc))))
        st.stop()


# ---- workload dicts for the engine ----------------------------------------------------------

def _common(s: dict) -> dict:
    return {"headroom": s["headroom_pct"] / 100.0, "allow_long_context": bool(s["allow_long_context"]),
            "batch": int(s["batch"]), "seq": int(s["seq"])}


def train_workload(s: dict | None = None, method: str | None = None) -> dict:
    """The sidebar's training workload; `method` another method's (the multi-method pages: Budget, Cost per fit),
    where a DPO reference the recipe does not run for that method (adapters_off for full, a copy beside adapters under
    torchtune or axolotl: engine/scenarios.py dpo_reference_runs) becomes the recipe's own (auto), so one method's
    choice does not refuse the others. The sidebar's own method keeps it (its refusal is the sidebar's message)."""
    s = s or store()
    given = s["method"]
    method = method or given
    switches = {switch: s[switch] for switch in SWITCHES}
    if (s["objective"] == "dpo" and method != given
            and not dpo_reference_runs(str(switches["dpo_reference"]), method, str(s["recipe"]))):
        switches["dpo_reference"] = "auto"
    return {**_common(s), "task": "train", "method": method, "precision": s["train_precision"],
            "optimizer": s["optimizer"], "grad_checkpointing": bool(s["grad_checkpointing"]),
            "lora_rank": int(s["lora_rank"]), "lora_targets": ",".join(s["lora_targets"]) or "q_proj,v_proj",
            "lora_dropout": int(s["lora_dropout_pct"]) / 100.0,
            "base_precision": s["base_precision"] if method == "qlora" else "auto",
            "freeze_layers": int(s["freeze_layers"]), "zero": int(s["zero"]), "offload": s["offload"],
            "galore_rank": int(s["galore_rank"]), "objective": s["objective"],
            "recipe": s["recipe"], **switches}


def infer_workload(s: dict | None = None, precision: str | None = None) -> dict:
    s = s or store()
    return {**_common(s), "task": "infer", "method": "full", "precision": precision or s["infer_precision"],
            "kv_precision": s["kv_precision"], "kv_policy": s["kv_policy"], "zero": 0, "offload": "none"}


def workload(s: dict | None = None) -> dict:
    s = s or store()
    return train_workload(s) if s["task"] == "train" else infer_workload(s)


def scenario(s: dict | None = None) -> dict:
    """The single scenario of the Overview and Breakdown pages (model, GPU, count included)."""
    s = s or store()
    # tensor / pipeline split, ZeRO on one GPU, ...: decided by engine/rules.py, as on the CLI
    return {**workload(s), "model": s["model"], "gpu": s["gpu"], "gpus": int(s["gpus"])}


def budget_workloads(s: dict | None = None) -> tuple:
    """The named workloads of `budget` (planner/procurement.py WORKLOADS: full, lora, qlora, infer-bf16, ...) with the
    sidebar's settings, as plans() builds the Budget page's other tables: ((name, ((key, value), ...)), ...), hashable
    for the cache. The Budget page's systems are then the same scenario as its "GPUs only" table and the Overview."""
    from planner.procurement import WORKLOADS  # lazy: the Budget page's alone (not imported at a cold start)
    s = s or store()
    out = []
    for name, w in WORKLOADS.items():
        sc = train_workload(s, method=w["method"]) if w["task"] == "train" else infer_workload(s, precision=w["precision"])
        out.append((name, tuple(sorted(sc.items()))))
    return tuple(out)



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
            if s["lora_dropout_pct"]:
                m += f", dropout {int(s['lora_dropout_pct']) / 100:g}"
        if s["method"] == "freeze":
            m += f" (last {s['freeze_layers']} layers)"
        batch = f"micro-batch {s['batch']} × {s['seq']:,} tokens"
        if s.get("objective") == "dpo":  # (the batch counts preference pairs: two sequences each)
            batch = (f"DPO, micro-batch {s['batch']} preference pair{'s' if s['batch'] != 1 else ''} × {s['seq']:,} "
                     "tokens")
        parts += [m, s["train_precision"], OPTIMIZER_LABELS[s["optimizer"]], batch]
        if s["grad_checkpointing"]:
            parts.append("gradient checkpointing")
        stack = [f"{k.replace('_', ' ')} {s[k]}" for k in SWITCHES if s[k] != "auto"]
        parts.append(f"recipe {s['recipe']}" + (f" ({', '.join(stack)})" if stack else ""))
    else:
        parts += ["serving", INFER_PRECISION_LABELS[s["infer_precision"]] + " weights",
                  f"KV cache {KV_LABELS[s['kv_precision']]}",
                  f"{s['batch']} sequence{'s' if s['batch'] != 1 else ''} × {s['seq']:,} tokens"]
    parts.append(f"{s['headroom_pct']}% headroom")
    return " · ".join(parts)


def csv_settings(**extra) -> dict:
    """The settings recorded at the top of every CSV download."""
    s = store()
    out = {"tool": APP_NAME, "exported": _dt.date.today().isoformat(),
           "memory unit": unit()[0] + " (GiB = 2^30 bytes, GB = 10^9 bytes)", "workload": describe(s)}
    # the pages' own filters and views (PAGE_FIELDS) are not the workload: each page names its own in `extra` (the
    # Evidence page's search in its CSV, not in the Feasibility matrix's)
    own = {f.key for f in PAGE_FIELDS}
    out.update({k: (",".join(map(str, v)) if isinstance(v, tuple) else v) for k, v in s.items() if k not in own})
    out.update(extra)
    return out


def page_settings(*keys: str) -> dict:
    """A page's own controls (PAGE_FIELDS) for its CSV's settings, as the URL writes them ("all" for every choice, the
    whole range)."""
    s = store()
    return {k: "all" if s[k] is None else _as_param(FIELDS[k], s[k]) for k in keys}


def unit() -> tuple[str, float]:
    """('GiB', 2**30) or ('GB', 1e9), as chosen in the sidebar."""
    return ("GiB", float(GIB)) if store()["units"] == "GiB" else ("GB", float(GB))

