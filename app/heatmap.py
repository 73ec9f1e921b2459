"""The feasibility matrix as a heatmap (pages/feasibility.py): one cell per model x GPU.

A cell holds a number (the GPUs of that card it needs) or one symbol; the words a symbol stands
for go to its tooltip and to the legend under the chart (`legend_text`). The planner's labels
(planner.planning.configurations: "2", "✗ >8", "✗ incompatible", "✗ context", "✗ layers",
"✗ not modelled", "✗ peft") map to
the symbols through `cell_symbol`. Cells have a fixed size (`CELL_WIDTH` x `CELL_HEIGHT` px, text
at `FONT_SIZE`), so 47 GPUs x 38 models keep their text inside its cell: the chart grows wider
than the page (and scrolls) instead of squeezing. Pure functions: no Streamlit, no state.
"""

from __future__ import annotations

import re

import altair as alt
import numpy as np
import pandas as pd

from app.labels import COMPONENT_NAMES, md_escape

CELL_WIDTH, CELL_HEIGHT, FONT_SIZE = 24, 22, 11  # px; "64" at 11 px: 10.9 px wide in Chromium
AXIS_FONT_SIZE = 11
X_LABEL_LIMIT, Y_LABEL_LIMIT = 260, 280  # px: the catalog's longest names, whole
LABEL_PADDING = 4  # px between a label and its cell
# An axis title sits past its labels only up to the axis' maxExtent (Vega's default: 200 px):
# the y labels reach Y_LABEL_LIMIT, so its title was drawn across "Llama 3.2 11B Vision (language
# model, approximated)"; the x labels at -45 degrees reach X_LABEL_LIMIT * sin(45 degrees).
Y_MAX_EXTENT, X_MAX_EXTENT = Y_LABEL_LIMIT + LABEL_PADDING, int(X_LABEL_LIMIT * 0.71) + LABEL_PADDING + FONT_SIZE
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "workspace",
              "runtime_overhead")

# state of a cell -> (symbol, words in the tooltip, fill, text colour, the fill in words); "fits"
# shows its count on the memory-share colour scale instead
STATES = {
    "fits": ("", "fits", None, None, ""),
    "over": ("—", "does not fit within the largest count considered", "#cbd5e1", "#111827", "grey"),
    "incompatible": ("✗", "incompatible: the card cannot run this workload", "#64748b", "#ffffff", "slate"),
    "context": ("↔", "sequence longer than the model's context", "#e2e8f0", "#111827", "light grey"),
    "layers": ("≡", "more trainable layers than the model has", "#e2e8f0", "#111827", "light grey"),
    "unmodelled": ("∅", "training this hybrid model's linear-attention or Mamba2 layers is not modelled", "#e2e8f0", "#111827",
                   "light grey"),
    "peft": ("⊘", "peft would not build these LoRA adapters for this model (estimate refuses it, exit 2)", "#e2e8f0",
             "#111827", "light grey"),
    "other": ("?", "another state: hover the cell", "#f1f5f9", "#111827", "pale grey"),
}
SYMBOLS = {state: spec[0] for state, spec in STATES.items() if spec[0]}
_LABEL_STATES = (  # the planner's label -> the cell's state
    (re.compile(r"\d+"), "fits"),
    (re.compile(r"✗ >\d+"), "over"),
    (re.compile(r"✗ incompatible"), "incompatible"),
    (re.compile(r"✗ context"), "context"),
    (re.compile(r"✗ layers"), "layers"),
    (re.compile(r"✗ not modelled"), "unmodelled"),
    (re.compile(r"✗ peft"), "peft"),
)
HOT_SHARE = 70.0  # % of memory in use above which a cell's colour is dark enough for white text


def cell_state(label: str) -> str:
    """The planner's label of a cell -> its state (a key of STATES)."""
    text = str(label).strip()
    return next((state for pattern, state in _LABEL_STATES if pattern.fullmatch(text)), "other")


def cell_symbol(label: str) -> str:
    """What the cell shows: the GPU count for a fit, else the one symbol of its state."""
    state = cell_state(label)
    return str(label).strip() if state == "fits" else STATES[state][0]


def _marked(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with their state, symbol, tooltip words, fill and text colour (a copy)."""
    out = cells.copy()
    states = out["label"].astype(str).map(cell_state)
    out["state"] = states
    out["symbol"] = out["label"].astype(str).map(cell_symbol)
    out["state_words"] = states.map(lambda s: STATES[s][1])
    out["fill"] = states.map(lambda s: STATES[s][2] or "")
    hot = pd.to_numeric(out["share"], errors="coerce").to_numpy(dtype=float) > HOT_SHARE
    out["ink"] = np.where(states == "fits", np.where(hot, "#ffffff", "#111827"),
                          states.map(lambda s: STATES[s][3] or "#111827"))
    return out


def tooltip(unit: str) -> list:
    """The cell's tooltip: its words and its breakdown per GPU (the columns of the page's cells)."""
    tips = [alt.Tooltip("model:N", title="Model"), alt.Tooltip("gpu:N", title="GPU"),
            alt.Tooltip("state_words:N", title="Cell"),
            alt.Tooltip("label:N", title="GPUs needed"), alt.Tooltip("why:N", title="Compatibility"),
            alt.Tooltip("needed:Q", title="GPUs needed (even beyond the limit)", format=",.0f"),
            alt.Tooltip("share:Q", title="Memory used per GPU (%)", format=".1f"),
            alt.Tooltip("peak:Q", title=f"Peak per GPU ({unit})", format=",.2f"),
            alt.Tooltip("phase:N", title="Peak phase")]
    tips += [alt.Tooltip(f"{comp}:Q", title=f"{COMPONENT_NAMES[comp]} ({unit})", format=",.2f")
             for comp in COMPONENTS]
    tips += [alt.Tooltip("buy:Q", title="Purchase ($)", format=",.0f"),
             alt.Tooltip("rent:Q", title="Rent ($/h)", format=",.2f"),
             alt.Tooltip("seq:Q", title="Sequence used (tokens)", format=",")]
    return tips


def feasibility_heatmap(cells: pd.DataFrame, gpu_order: list, model_order: list, unit: str) -> alt.LayerChart:
    """The matrix: a rect per cell (fits: coloured by the share of memory in use; the other
    states: their grey) under its number or symbol. `cells` has the page's columns (model, gpu,
    label, fits, share, needed, peak, phase, the components, buy, rent, seq, why)."""
    data = _marked(cells)
    tips = tooltip(unit)
    base = alt.Chart(data).encode(
        x=alt.X("gpu:N", sort=list(gpu_order), title="GPU (by usable memory per card)",
                scale=alt.Scale(paddingInner=0, paddingOuter=0),
                axis=alt.Axis(orient="top", labelAngle=-45, labelLimit=X_LABEL_LIMIT, labelOverlap=False,
                              labelFontSize=AXIS_FONT_SIZE, labelPadding=LABEL_PADDING, maxExtent=X_MAX_EXTENT,
                              ticks=False, domain=False)),
        y=alt.Y("model:N", sort=list(model_order), title="Model (by family and size)",
                scale=alt.Scale(paddingInner=0, paddingOuter=0),
                axis=alt.Axis(labelLimit=Y_LABEL_LIMIT, labelOverlap=False, labelFontSize=AXIS_FONT_SIZE,
                              labelPadding=LABEL_PADDING, maxExtent=Y_MAX_EXTENT, ticks=False, domain=False)),
        tooltip=tips,
    )
    fits = base.transform_filter("datum.state == 'fits'").mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("share:Q", title="Memory used per GPU (%)",
                        scale=alt.Scale(domain=[0, 100], scheme="yelloworangered"),
                        legend=alt.Legend(orient="bottom", gradientLength=300, direction="horizontal")))
    others = base.transform_filter("datum.state != 'fits'").mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("fill:N", scale=None))
    text = base.mark_text(fontSize=FONT_SIZE, baseline="middle", align="center").encode(
        text="symbol:N", color=alt.Color("ink:N", scale=None))
    return (alt.layer(fits, others, text)
            .resolve_scale(color="independent")
            .properties(width=alt.Step(CELL_WIDTH), height=alt.Step(CELL_HEIGHT))
            .configure_view(strokeWidth=0))


def legend_text(cells: pd.DataFrame, max_gpus: int, unit: str) -> str:
    """The caption under the chart (Markdown): every symbol the cells show, and the colours."""
    labels = cells["label"].astype(str).str.strip()
    states = labels.map(cell_state)
    present = set(states)

    def models_with(state: str) -> str:
        return ", ".join(md_escape(m) for m in dict.fromkeys(cells.loc[states == state, "model"].astype(str)))

    words = [(f"**Cell:** a number is the GPUs of that card needed (1 to {max_gpus}; an Apple system counts as "
              "one device).")]
    if "over" in present:
        limits = sorted({int(label[3:]) for label in labels[states == "over"]}, reverse=True)
        apple = " (within one for an Apple system)" if 1 in limits and limits[0] > 1 else ""
        words.append(f"**—** does not fit within {limits[0]} GPU{'s' if limits[0] > 1 else ''}{apple}; the table "
                     f"says {', '.join(f'✗ >{n}' for n in limits)}.")
    if "incompatible" in present:
        words.append("**✗** incompatible: the card cannot run this workload whatever its memory (e.g. bf16 before "
                     "Ampere, bitsandbytes on Apple); hover the cell for the reason and its source in the Catalog's "
                     "rules; the table says ✗ incompatible.")
    if "context" in present:
        words.append("**↔** the sequence is longer than the model's context (allowed under the sidebar's 'Display "
                     f"and margins') for {models_with('context')}; the table says ✗ context.")
    if "layers" in present:
        words.append(f"**≡** more trainable layers than {models_with('layers')} has; the table says ✗ layers.")
    if "unmodelled" in present:
        words.append(f"**∅** training {models_with('unmodelled')} is not modelled yet: its linear-attention (Gated "
                     "DeltaNet) or Mamba2 layers' training memory is not traced (inference and serving are); the table says "
                     "✗ not modelled.")
    if "peft" in present:
        words.append(f"**⊘** peft would not build the LoRA adapters the sidebar names for {models_with('peft')} (the "
                     "warning above says why; `estimate` refuses it and `sweep` leaves it out); the table says ✗ peft.")
    if "other" in present:
        words.append("**?** another state: hover the cell.")
    words.append("**Colour:** yellow to red, the share of each card's memory in use (the scale under the chart)"
                 + "".join(f"; {STATES[k][4]} behind {STATES[k][0]}" for k in STATES if k != "fits" and k in present)
                 + f". Hover a cell for its breakdown per GPU in {unit}. The chart scrolls sideways when it is "
                 "wider than the page.")
    return "  \n".join(words)
