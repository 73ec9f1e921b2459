"""Vega-Lite dicts of the pages' charts that a sidebar change redraws, built without Altair: constructing a layered
Altair chart and converting it to a dict took ~20 ms of each change (2-core machine) for a spec that only its data
changes. Each is the spec the Altair chart it replaces gives (tests/test_page_charts.py builds both and compares
them). Pure functions: no Streamlit; a frame under "data" becomes a named dataset in app/tables.py `_dict_spec`."""

from __future__ import annotations

import pandas as pd

BUDGET_COLORS = ("#86efac", "#fcd34d", "#e5e7eb")  # within the budget, with the stretch, beyond


def budget_chart_spec(chart: pd.DataFrame, plan_order: list, model_order: list, stretch: int, cost_label: str) -> dict:
    """The Budget planner's matrix: one cell per model x workload, coloured against the budget, with its cost as text.
    chart: model, plan, cost, text, config, status (pages/budget.py)."""
    tip = [{"field": "model", "title": "Model", "type": "nominal"},
           {"field": "plan", "title": "Workload", "type": "nominal"},
           {"field": "config", "title": "Cheapest configuration", "type": "nominal"},
           {"field": "cost", "format": ",.2f", "title": cost_label, "type": "quantitative"}]

    def axes():  # (each layer its own dicts, as Altair's)
        return {"x": {"axis": {"labelAngle": 0, "orient": "top"}, "field": "plan", "sort": list(plan_order),
                      "title": "Workload", "type": "nominal"},
                "y": {"field": "model", "sort": list(model_order), "title": None, "type": "nominal"}}

    cells = {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 2}, "encoding": {
        "color": {"field": "status", "legend": {"labelLimit": 240, "orient": "bottom"},
                  "scale": {"domain": ["within the budget", f"with up to +{stretch}%", "beyond"],
                            "range": list(BUDGET_COLORS)},
                  "title": "Against the budget", "type": "nominal"},
        "tooltip": tip, **axes()}}
    text = {"mark": {"type": "text", "fontSize": 12},
            "encoding": {"text": {"field": "text", "type": "nominal"}, "tooltip": [dict(t) for t in tip], **axes()}}
    return {"layer": [cells, text], "data": chart, "height": {"step": 28}, "width": {"step": 150}}
