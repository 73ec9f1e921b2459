"""The pages' charts built as Vega-Lite dicts (app/charts.py) are the specs of the Altair charts they replace.

Each reference below is the Altair chart the page drew before (pages/budget.py until 2026-12-06), converted as
Streamlit converts it (app/tables.py _vega_lite_spec); the dict goes through the same function. Equal but for
Altair's "$schema" line, the data included (the same Arrow bytes under the same name)."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from app.charts import budget_chart_spec
from app.tables import _vega_lite_spec


def _altair_budget_chart(chart, plan_order, model_order, stretch, cost_label):
    tip = [alt.Tooltip("model:N", title="Model"), alt.Tooltip("plan:N", title="Workload"),
           alt.Tooltip("config:N", title="Cheapest configuration"), alt.Tooltip("cost:Q", title=cost_label, format=",.2f")]
    base = alt.Chart(chart).encode(
        x=alt.X("plan:N", sort=plan_order, title="Workload", axis=alt.Axis(orient="top", labelAngle=0)),
        y=alt.Y("model:N", sort=model_order, title=None))
    cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
        color=alt.Color("status:N", title="Against the budget", legend=alt.Legend(orient="bottom", labelLimit=240), scale=alt.Scale(
            domain=["within the budget", f"with up to +{stretch}%", "beyond"], range=["#86efac", "#fcd34d", "#e5e7eb"])),
        tooltip=tip)
    text = base.mark_text(fontSize=12).encode(text="text:N", tooltip=tip)
    return (cells + text).properties(width=alt.Step(150), height=alt.Step(28))


def _budget_frame(rng) -> pd.DataFrame:
    n = 12
    cost = rng.uniform(100, 50_000, n)
    cost[rng.integers(0, n)] = np.nan
    return pd.DataFrame({
        "model": rng.choice(["Llama 3.1 8B", "Qwen3 32B", "Mixtral 8x7B"], n),
        "plan": rng.choice(["LoRA · 2k", "Serve INT4", "Full · 4k"], n),
        "cost": cost, "text": [f"${c:,.0f}" if c == c else "✗" for c in cost],
        "config": rng.choice(["2× H100 SXM", "none within the GPU limit"], n),
        "status": rng.choice(["within the budget", "with up to +25%", "beyond"], n)})


def test_the_budget_chart_is_the_altair_chart_it_replaces():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for stretch, label in ((25, "System cost ($)"), (10, "Rent per hour ($)")):
        frame = _budget_frame(rng)
        args = (frame, ["Full · 4k", "LoRA · 2k", "Serve INT4"], ["Qwen3 32B", "Llama 3.1 8B", "Mixtral 8x7B"], stretch, label)
        ours = _vega_lite_spec(budget_chart_spec(*args))
        theirs = _vega_lite_spec(_altair_budget_chart(*args))
        theirs.pop("$schema", None)
        assert ours == theirs
        assert ours["datasets"] and ours["data"]["name"] in ours["datasets"]
