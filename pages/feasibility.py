"""Feasibility matrix: every catalog model x every GPU for the sidebar's workload."""

import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import heatmap, state

c.ensure_frame()

s = c.require_valid()
models, gpus = c.merged_frames()
u, div = c.unit()

c.page_header("Feasibility matrix", "How many cards of each GPU hold each model for the workload in the sidebar. "
              "Training shards with the sidebar's ZeRO stage from two GPUs on; serving splits the model by "
              "tensor parallelism. Colour: share of each card's memory in use.")
st.caption(c.describe(s, with_model=False))

with st.container(border=True):
    families = list(dict.fromkeys(models["family"].astype(str)))
    f1, f2 = st.columns([3, 1])
    # kept in the settings and the URL (app/state.py PAGE_FIELDS: feas_families, feas_max_gpus, ...)
    chosen_families = state.control("feas_families", lambda k, **v: f1.multiselect("Model family", families, key=k, **v),
                                    options=families)
    max_gpus = state.control("feas_max_gpus", lambda k, **v: f2.selectbox(
        "Largest GPU count considered", state.FIELDS["feas_max_gpus"].options, key=k, **v,
        help="Cells needing more cards than this show ✗ >N."))
    shown_gpus = c.gpu_filter(gpus, "fm")
shown_models = models[models["family"].astype(str).isin(chosen_families)]
if shown_models.empty or shown_gpus.empty:
    st.info("No model or no GPU matches the filters: widen them to see the matrix.")
    st.stop()

c.lora_refusal_note({"workload": c.workload(s)}, tuple(shown_models["id"]), models, c.display_names(models))
conf = c.guard(c.configurations, {"workload": c.workload(s)}, tuple(shown_models["id"]), tuple(shown_gpus["id"]),
               models, gpus, int(max_gpus))

model_names, gpu_names = c.display_names(models), c.display_names(gpus, short=True)
model_order = [model_names[i] for i in shown_models["id"].astype(str)]
gpu_order = [gpu_names[i] for i in shown_gpus.sort_values(["usable_memory_bytes", "name"])["id"].astype(str)]
share = conf["memory_used_fraction"].astype(float).to_numpy() * 100
cells = pd.DataFrame({
    "model": conf["model"].astype(str).map(model_names),
    "gpu": conf["gpu"].astype(str).map(gpu_names),
    "label": conf["label"].astype(str),
    "fits": conf["fits_within"].astype(bool),
    "share": np.where(conf["fits_within"], np.round(share, 1), np.nan),
    "needed": np.where(np.isfinite(conf["gpus_needed"]), conf["gpus_needed"], np.nan),
    "peak": c.mem(conf["peak_bytes"]),
    "phase": conf["peak_phase"].astype(str).map(lambda p: c.PHASE_LABELS.get(p, p)),  # in words, as the Breakdown
    "buy": conf["buy_usd"].astype(float),
    "rent": conf["rent_usd_per_hour"].astype(float),
    "seq": conf["seq"].astype(int),
    # why a card cannot run it at all (catalog/gpus.yaml `compatibility`, engine/compat.py)
    "why": conf["compatibility_notes"].map(lambda n: "; ".join(n) if isinstance(n, (list, tuple)) else "")
    if "compatibility_notes" in conf.columns else "",
})
for comp in ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "workspace", "runtime_overhead"):
    cells[comp] = c.mem(conf[f"{comp}_bytes"])

# the chart and its legend: app/heatmap.py (a number or one symbol per cell, the words in the tooltip and below)
with st.container(horizontal=True, wrap=False):  # wider than the page: it scrolls sideways, the page does not
    # the spec built once per distinct cells (app.tables.chart): the heatmap's Altair validation is most of a rerun
    c.chart(heatmap.feasibility_heatmap)(cells, gpu_order, model_order, unit=u, width="content")
st.caption(heatmap.legend_text(cells, int(max_gpus), u))

st.markdown("#### As a table: GPUs needed")
pivot = cells.pivot(index="model", columns="gpu", values="label").reindex(index=model_order, columns=gpu_order)
pivot = pivot.reset_index().rename(columns={"model": "Model"})
pivot.columns.name = None
# the page's filters in its CSVs (the GPU filters too: the matrix's columns)
filters = state.page_settings("feas_families", "feas_max_gpus", "feas_vendors", "feas_segments", "feas_memory_gb")
c.table(pivot, "feasibility_matrix", c.csv_settings(page="feasibility matrix", **filters),
        help={"Model": "Cells: GPUs of that card needed; ✗ >N when more than the limit."})

def _dated(price: pd.Series, date: pd.Series) -> pd.Series:
    """A price's date beside it, empty where there is no price (a date would date a price that is not there)."""
    return date.fillna("").astype(str).where(price.notna().to_numpy(), "").to_numpy()


# one row per cell: built when the section is open only (a lazy expander, on_change="rerun")
# (open or closed, kept in the settings and the URL: app/state.py feas_details)
drawn: dict = {}
state.control("feas_details", lambda k, value: drawn.setdefault("box", st.expander(
    "Details: one row per model × GPU", expanded=value, key=k, on_change="rerun")), read=lambda box: bool(box.open))
details_box = drawn["box"]
if details_box.open:
    with details_box:
        detail = pd.DataFrame({
            "Model": cells["model"], "GPU": cells["gpu"], "GPUs needed": cells["label"],
            f"Peak per GPU ({u})": cells["peak"], "Memory used (%)": cells["share"], "Peak phase": cells["phase"],
            f"Weights per GPU ({u})": cells["weights"], f"Activations per GPU ({u})": cells["activations"],
            "Purchase ($)": cells["buy"].round(0),
            # each price with its date (the catalog's; its source on the Catalog page): prices are dated snapshots
            "Price date": _dated(cells["buy"], conf["gpu"].astype(str).map(gpus.set_index("id")["price_date"])),
            "Rent ($/h)": cells["rent"].round(2),
            "Rent price date": _dated(cells["rent"], conf["gpu"].astype(str).map(gpus.set_index("id")["cloud_date"])),
            "Sequence used (tokens)": cells["seq"],
        })
        c.table(detail, "feasibility_details", c.csv_settings(page="feasibility details", **filters),
                formats={"Purchase ($)": "dollar", "Rent ($/h)": "$%.2f", "Memory used (%)": "%.1f%%",
                         "Sequence used (tokens)": "%d"},
                help={"Purchase ($)": "The cards only (count x the catalog's list price); the Overview and Budget "
                                      "planner price whole systems.",
                      "Price date": "When the card's price was recorded; its source is on the Catalog page.",
                      "Rent price date": "When the on-demand $/GPU-hour was recorded; its source is on the Catalog "
                                         "page."})
