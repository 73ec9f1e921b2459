"""Feasibility matrix: every catalog model x every GPU for the sidebar's workload."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app.labels import md_escape

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
    chosen_families = f1.multiselect("Model family", families, default=families, key="fm_family")
    max_gpus = f2.selectbox("Largest GPU count considered", [1, 2, 4, 8, 16, 32, 64], index=3, key="fm_max_gpus",
                            help="Cells needing more cards than this show ✗ >N.")
    shown_gpus = c.gpu_filter(gpus, "fm")
shown_models = models[models["family"].astype(str).isin(chosen_families)]
if shown_models.empty or shown_gpus.empty:
    st.info("No model or no GPU matches the filters: widen them to see the matrix.")
    st.stop()

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
    "phase": conf["peak_phase"].astype(str),
    "buy": conf["buy_usd"].astype(float),
    "rent": conf["rent_usd_per_hour"].astype(float),
    "seq": conf["seq"].astype(int),
    # why a card cannot run it at all (catalog/gpus.yaml `compatibility`, engine/compat.py)
    "why": conf["compatibility_notes"].map(lambda n: "; ".join(n) if isinstance(n, (list, tuple)) else "")
    if "compatibility_notes" in conf.columns else "",
})
for comp in ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "workspace", "runtime_overhead"):
    cells[comp] = c.mem(conf[f"{comp}_bytes"])

tooltip = [alt.Tooltip("model:N", title="Model"), alt.Tooltip("gpu:N", title="GPU"),
           alt.Tooltip("label:N", title="GPUs needed"), alt.Tooltip("why:N", title="Compatibility"),
           alt.Tooltip("needed:Q", title="GPUs needed (even beyond the limit)", format=",.0f"),
           alt.Tooltip("share:Q", title="Memory used per GPU (%)", format=".1f"),
           alt.Tooltip("peak:Q", title=f"Peak per GPU ({u})", format=",.2f"),
           alt.Tooltip("phase:N", title="Peak phase")]
tooltip += [alt.Tooltip(f"{comp}:Q", title=f"{c.COMPONENT_NAMES[comp]} ({u})", format=",.2f")
            for comp in ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "workspace",
                         "runtime_overhead")]
tooltip += [alt.Tooltip("buy:Q", title="Purchase ($)", format=",.0f"), alt.Tooltip("rent:Q", title="Rent ($/h)", format=",.2f"),
            alt.Tooltip("seq:Q", title="Sequence used (tokens)", format=",")]
base = alt.Chart(cells).encode(
    x=alt.X("gpu:N", sort=gpu_order, title="GPU (by usable memory per card)",
            axis=alt.Axis(labelAngle=-45, labelLimit=180, labelOverlap=False, orient="top")),
    y=alt.Y("model:N", sort=model_order, title="Model (by family and size)"),
)
rect = base.mark_rect(stroke="white", strokeWidth=1).encode(
    color=alt.condition("datum.fits", alt.Color("share:Q", title="Memory used per GPU (%)",
                                                scale=alt.Scale(domain=[0, 100], scheme="yelloworangered"),
                                                legend=alt.Legend(orient="bottom", gradientLength=300)),
                        alt.value("#cbd5e1")),
    tooltip=tooltip,
)
text = base.mark_text(fontSize=9).encode(
    text="label:N",
    color=alt.condition("datum.share > 70", alt.value("white"), alt.value("#111827")),
    tooltip=tooltip,
)
st.altair_chart((rect + text).properties(width="container", height=alt.Step(28)), width="stretch")
# planner.planning keeps the rows the engine refuses as labelled rows without figures:
# "✗ context" (sequence beyond the model's context) and "✗ layers" (freeze beyond its layers)
def _named(flag: str) -> str:
    rows = conf[flag].fillna(False).astype(bool) if flag in conf else pd.Series(False, index=conf.index)
    return md_escape(", ".join(conf.loc[rows, "model"].astype(str).map(model_names).unique()))


long_models, deep_models = _named("beyond_context"), _named("beyond_layers")
st.caption("Cell text: GPUs needed (✗ >N: more than the largest count considered; Apple systems count as one "
           f"device, ✗ >1). Grey: does not fit within {max_gpus} GPUs. Hover a cell for its breakdown per GPU in {u}."
           + (f" ✗ context: the sequence is longer than the model's context (allowed under the sidebar's 'Display "
              f"and margins') for {long_models}." if long_models else "")
           + (f" ✗ layers: more trainable layers than {deep_models} has." if deep_models else "")
           + (" ✗ incompatible: the card cannot run this workload whatever its memory (e.g. bf16 before Ampere, "
              "bitsandbytes on Apple); hover the cell for the reason and its source in the Catalog's rules."
              if (conf["label"].astype(str) == "✗ incompatible").any() else ""))

st.markdown("#### As a table: GPUs needed")
pivot = cells.pivot(index="model", columns="gpu", values="label").reindex(index=model_order, columns=gpu_order)
pivot = pivot.reset_index().rename(columns={"model": "Model"})
pivot.columns.name = None
c.table(pivot, "feasibility_matrix", c.csv_settings(page="feasibility matrix", max_gpus=max_gpus,
                                                     families=",".join(chosen_families)),
        help={"Model": "Cells: GPUs of that card needed; ✗ >N when more than the limit."})

with st.expander("Details: one row per model × GPU"):
    detail = pd.DataFrame({
        "Model": cells["model"], "GPU": cells["gpu"], "GPUs needed": cells["label"],
        f"Peak per GPU ({u})": cells["peak"], "Memory used (%)": cells["share"], "Peak phase": cells["phase"],
        f"Weights per GPU ({u})": cells["weights"], f"Activations per GPU ({u})": cells["activations"],
        "Purchase ($)": cells["buy"].round(0), "Rent ($/h)": cells["rent"].round(2),
        "Sequence used (tokens)": cells["seq"],
    })
    c.table(detail, "feasibility_details", c.csv_settings(page="feasibility details", max_gpus=max_gpus),
            formats={"Purchase ($)": "dollar", "Rent ($/h)": "$%.2f", "Memory used (%)": "%.1f%%",
                     "Sequence used (tokens)": "%d"})
