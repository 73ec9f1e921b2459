"""Tables with their CSV downloads, memory and money formats in the chosen unit, the GPU
filters and the page header."""

from __future__ import annotations

import functools
import hashlib
import marshal

import numpy as np
import pandas as pd
import streamlit as st

from app.data import subset, value_key
from app.labels import md_escape
from app.state import FIELDS, control, describe, unit
from planner.report import to_csv


def mem(x, digits: int = 2):
    """Bytes in the chosen unit, rounded to what the tables show."""
    return np.round(np.asarray(x, dtype=float) / unit()[1], digits)


def fmt_mem(x: float) -> str:
    label, div = unit()
    return f"{x / div:,.2f} {label}" if np.isfinite(x) else "—"


def fmt_usd(x: float, digits: int = 0) -> str:
    return f"${x:,.{digits}f}" if x is not None and np.isfinite(x) else "—"


def fmt_share(fraction: float) -> str:
    """A card's memory in use, in words: "97% of each card", or for a workload far beyond it
    "10,035× each card's memory" (never "1003464%")."""
    if fraction is None or not np.isfinite(fraction):
        return "— of each card"
    if fraction >= 10:
        return f"{fraction:,.0f}× each card's memory"
    if fraction >= 2:
        return f"{fraction:,.1f}× each card's memory"
    return f"{fraction:.0%} of each card"


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
    # the CSV is written when the button is pressed (Streamlit's deferred download: a callable as
    # `data`), not on every run that shows the table: a sweep's table took to_csv and a digest of the
    # table on every sidebar change (~5-15 ms a table on the 2-core machine) for a file few download
    st.download_button("Download CSV", data=functools.partial(to_csv, view.copy(deep=False), dict(settings)),
                       file_name=file_name or f"{key}.csv", mime="text/csv", key=f"download_{key}", on_click="ignore",
                       help="This table as shown, with the settings that produced it.")


def gpu_filter(gpus: pd.DataFrame, key: str) -> pd.DataFrame:
    """Vendor / segment / memory filters for the GPU axis of a page (their own widget keys). Where app/state.py
    declares the page's filters (PAGE_FIELDS, widget keys <key>_vendor, _segment, _memory), they are kept in the
    settings and the URL (a page switch, a shared link); otherwise they are widget state only."""
    declared = {f.widget: f.key for f in FIELDS.values() if f.widget}
    c1, c2, c3 = st.columns(3)
    vendors = sorted(gpus["vendor"].astype(str).unique())
    segments = sorted(gpus["segment"].astype(str).unique())

    def draw(suffix: str, make, options):
        if f"{key}_{suffix}" in declared:
            return control(declared[f"{key}_{suffix}"], make, options=options)
        defaults = {"vendor": {"default": vendors}, "segment": {"default": segments}}.get(suffix, {"value": options})
        return make(f"{key}_{suffix}", **defaults)

    chosen_v = draw("vendor", lambda k, **v: c1.multiselect("GPU vendor", vendors, key=k, **v), vendors)
    chosen_s = draw("segment", lambda k, **v: c2.multiselect("GPU segment", segments, key=k, **v), segments)
    low, high = float(gpus["memory_gb"].min()), float(gpus["memory_gb"].max())
    bounds = (0.0, float(np.ceil(high)))
    rng = draw("memory", lambda k, **v: c3.slider("GPU memory (GB, vendor figure)", min_value=bounds[0],
                                                  max_value=bounds[1], step=1.0, key=k, **v),
               bounds) if high > low else (low, high)
    keep = (gpus["vendor"].astype(str).isin(chosen_v) & gpus["segment"].astype(str).isin(chosen_s)
            & gpus["memory_gb"].between(rng[0], rng[1]))
    return subset(gpus, keep)  # gpus[keep], the same object on every run that keeps the same rows


# ---- charts: the Vega-Lite spec built once per distinct chart ------------------------------------
# st.altair_chart converts the Altair chart to a Vega-Lite spec on every run, and Altair validates
# the spec against the whole Vega-Lite JSON schema each time: 30-250 ms per chart, most of a warm
# rerun. A page's chart builder decorated with @chart (its data and settings in, an Altair chart
# out; everything it shows comes through its arguments) is converted by Streamlit's own code once
# per distinct arguments, and the spec is drawn with st.vega_lite_chart: the same element, spec
# and data as st.altair_chart sends.
# The schema check is the same for every chart one builder makes (its marks, encodings and scales
# are its code; the data goes in as Arrow datasets, which the schema does not see), so it runs on a
# builder's first chart in the process only: a sidebar change that redraws a chart does not pay it
# again (half a changed chart's time, and most of the feasibility heatmap's).
_VALIDATED: set[str] = set()


class _Unvalidated:
    """An Altair chart whose to_dict() skips the schema check (what Streamlit's conversion calls)."""

    def __init__(self, built):
        self._built = built

    def to_dict(self, *args, **kwargs):
        return self._built.to_dict(*args, **{**kwargs, "validate": False})


def _vega_lite_spec(built) -> dict:
    if isinstance(built, dict):  # a Vega-Lite dict (no Altair import: the first page's chart)
        return _dict_spec(built)
    try:  # what st.altair_chart does (datasets as Arrow bytes, named by their hash); Streamlit 1.5x-1.6x
        from streamlit.elements.vega_charts import (
            _convert_altair_to_vega_lite_spec as convert,
        )
    except ImportError:  # pragma: no cover - another Streamlit: Altair's own dict (data inline)
        return built.to_dict()
    return convert(built)


def _dict_spec(spec: dict) -> dict:
    """A Vega-Lite dict whose "data" entries are DataFrames, with each frame stored as Streamlit's
    Altair conversion stores it (Arrow bytes in "datasets", named by their hash): the same spec
    an Altair chart of the same frames gives, without Altair (and its schema check)."""
    try:
        from streamlit.elements.vega_charts import _to_arrow_dataset
    except ImportError:  # pragma: no cover - another Streamlit: the rows inline
        def _to_arrow_dataset(frame, datasets):
            return {"values": frame.to_dict(orient="records")}
    datasets: dict = {}

    def walk(node):
        if isinstance(node, dict):
            return {k: (_to_arrow_dataset(v, datasets) if k == "data" and isinstance(v, pd.DataFrame) else walk(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out = walk(spec)
    out["datasets"] = datasets
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def _chart_spec(key: str, _ident: str, _build, _args: tuple, _kwargs: dict) -> dict:
    """key: value_key(the builder, its arguments); a copy of the spec on every hit (the page's own)."""
    built = _build(*_args, **_kwargs)
    spec = _vega_lite_spec(built if isinstance(built, dict) or _ident not in _VALIDATED else _Unvalidated(built))
    _VALIDATED.add(_ident)
    return spec


def chart(build):
    """Decorator: `build(*args)` -> Altair chart (or a Vega-Lite dict, see _dict_spec) becomes
    `draw(*args, width=..., height=...)`, which draws it, its spec cached on (the builder's code, args)."""
    code = build.__code__
    ident = f"{code.co_filename}:{build.__qualname__}:{hashlib.sha256(marshal.dumps(code)).hexdigest()}"

    @functools.wraps(build)
    def draw(*args, width="stretch", height="content", **kwargs):
        spec = _chart_spec(value_key(ident, args, kwargs), ident, build, args, kwargs)
        st.vega_lite_chart(spec=spec, width=width, height=height)
    return draw


def describe_md(s: dict | None = None, with_model: bool = True) -> str:
    """app.state.describe for a Markdown element (subheader, caption): the model's name, user
    text, escaped with md_escape; the rest is the planner's own words, kept as they read."""
    full = describe(s, with_model=with_model)
    if not with_model:
        return full
    rest = describe(s, with_model=False)
    if full.endswith(" · " + rest):
        return md_escape(full[: len(full) - len(rest) - 3]) + " · " + rest
    return md_escape(full)


def lora_refusal_note(workloads: dict, model_ids, models: pd.DataFrame, names: dict | None = None) -> None:
    """A warning naming the models whose cells show LoRA adapters peft would not build for a workload
    (planner.planning.lora_refused_models; `estimate` refuses them, exit 2, and `sweep` leaves them out)."""
    from planner.planning import lora_refused_models

    found: dict[str, str] = {}
    for wl in workloads.values():
        for mid, why in lora_refused_models(models, wl, model_ids).items():
            found.setdefault(mid, why)
    if found:
        shown = ", ".join((names or {}).get(m, m) for m in found)
        st.warning(md_escape(f"peft would not start the LoRA runs of {shown}: {next(iter(found.values()))}. "
                             "Their cells say ✗ peft (⊘ in the matrix) and never count as a fit."))


def page_header(title: str, caption: str) -> None:
    st.title(title)
    st.caption(caption)



def wrap_row():
    """A row of cards or links (`row.metric(...)`, `row.page_link(...)`, in order): a horizontal
    container that wraps an element to the next line when the row is too narrow for it. In
    st.columns(n) each got 1/n of the width whatever it held: at 800 px with the sidebar open the
    Overview's "19.84 GiB" read "19…", the Breakdown's five cards "23.…", "0.0…", and the
    Overview's links "Every mode", "What a bud"."""
    return st.container(horizontal=True, gap="medium")
