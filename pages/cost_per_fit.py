"""Cost per fit: for each model x workload, the cheapest configuration to buy and to rent,
with the speed and cost figures the engine gives for that configuration."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import state
from engine.columns import SCENARIO_BY_NAME

c.ensure_frame()

s = c.store()
models, gpus = c.merged_frames()
u, _ = c.unit()

c.page_header("Cost per fit", "For each model and workload: the cheapest GPU type × count that holds it, to buy (the "
              "whole system: cards + a host per node + the network from two nodes) and to rent, and what that "
              "configuration delivers. Prices are the catalog's, each with its date (sources on the Catalog page); "
              "speed and job cost come from the engine's speed model.")

TOKENS = SCENARIO_BY_NAME["tokens"]
with st.container(border=True):
    p1, p2, p3 = st.columns([3, 1, 1])
    chosen = list(state.control("cpf_plans", lambda k, **v: p1.multiselect("Workloads", list(c.PLAN_CHOICES), key=k, **v)))
    max_gpus = state.control("cpf_max_gpus", lambda k, **v: p2.selectbox("Largest GPU count",
                                                                             state.FIELDS["cpf_max_gpus"].options, key=k, **v))
    # up to the column table's limit (engine/columns.py tokens, as --tokens): beyond it the engine's refusal replaced
    # the page, in tokens where the field is in billions
    tokens_b = p3.number_input("Training tokens (billions)", min_value=0.001, max_value=TOKENS.high / 1e9,
                               value=TOKENS.default / 1e9, step=0.5, format="%.3f",
                               key="cf_tokens", help="The job size for training time and cost (speed model).")
    families = list(dict.fromkeys(models["family"].astype(str)))
    chosen_families = state.control("cpf_families", lambda k, **v: st.multiselect("Model family", families, key=k, **v),
                                    options=families)
    shown_gpus = c.gpu_filter(gpus, "cf")

c.require_valid(training=any(c.PLAN_CHOICES[p][0] == "train" for p in chosen))
shown_models = models[models["family"].astype(str).isin(chosen_families)]
if not chosen or shown_gpus.empty or shown_models.empty:
    st.info("Choose at least one workload, one model family and one GPU.")
    st.stop()

plan_map = c.plans(chosen, s)
if s.get("objective") == "dpo" and any(wl["task"] == "train" for wl in plan_map.values()):
    # (the training workloads take the sidebar's objective: app/state.py train_workload)
    st.caption("Training workloads: DPO (the sidebar's objective): the micro-batch counts preference pairs (chosen and "
               "rejected, two sequences each), with a reference model as the Software stack's DPO reference says; the "
               "training tokens count both sequences of every pair.")
for wl in plan_map.values():
    if wl["task"] == "train":
        wl["tokens"] = float(tokens_b) * 1e9
condition = s["condition"]  # card prices new / used / either: the Budget page's choice, in the URL
sweep = (plan_map, tuple(shown_models["id"]), tuple(shown_gpus["id"]), models, gpus, int(max_gpus), condition)
conf = c.guard(c.configurations, *sweep)
c.lora_refusal_note(plan_map, tuple(shown_models["id"]), models, c.display_names(models))
per_fit = c.guard(c.cost_per_fit, *sweep)
names = c.display_names(models)
gnames = c.display_names(gpus, short=True)


def _config(gpu_col: str, count_col: str) -> pd.Series:
    ok = per_fit[gpu_col].notna()
    text = per_fit[count_col].fillna(0).astype(int).astype(str) + "× " + per_fit[gpu_col].astype(str).map(gnames)
    # training a linear-attention model is not modelled (planning.not_modelled): no count was tried
    missing = np.where(per_fit["not_modelled"], "not modelled yet (hybrid layers)", "none within the limit")
    return text.where(ok, pd.Series(missing, index=text.index))


def _col(name: str, digits: int) -> pd.Series:
    return per_fit[name].astype(float).round(digits) if name in per_fit else pd.Series(np.nan, index=per_fit.index)


_params = models.set_index("id").reindex(per_fit["model"].astype(str))
_total = pd.to_numeric(_params["params"], errors="coerce").to_numpy(dtype=float)
_active = pd.to_numeric(_params.get("active_params", _params["params"]), errors="coerce").to_numpy(dtype=float)
_active = np.where(np.isfinite(_active), _active, _total)
view = pd.DataFrame({
    "Model": per_fit["model"].map(names),
    "Parameters (B, total / active)": [f"{t / 1e9:,.1f}" + ("" if t == a else f" / {a / 1e9:,.1f}")
                                       for t, a in zip(_total, _active)],
    "Workload": per_fit["plan"],
    "Buy: configuration": _config("buy_gpu", "buy_gpus"),
    "Buy: system ($)": _col("buy_system_usd", 0),
    "Buy: cards ($)": _col("buy_system_gpu_usd", 0),
    "Buy: host + network ($)": (_col("buy_host_usd", 0) + _col("buy_network_usd", 0)).round(0),
    "Buy: card price": (per_fit["buy_system_condition"].fillna("").astype(str) + " ("
                        + per_fit["buy_system_price_date"].fillna("").astype(str) + ")").where(per_fit["buy_gpu"].notna(), ""),
    "Buy: host (price date)": (per_fit["buy_host_class"].fillna("").astype(str) + " ("
                               + per_fit["buy_host_date"].fillna("").astype(str) + ")").where(per_fit["buy_gpu"].notna(), ""),
    "Rent: configuration": _config("rent_gpu", "rent_gpus"),
    "Rent ($/h)": _col("rent_usd_per_hour", 2),
    "Rent: price date": per_fit["rent_price_date"].fillna("").astype(str).where(per_fit["rent_gpu"].notna(), ""),
})
extra_help = {}
if "buy_usd_per_gb_vram" in per_fit:
    view["$ per GB of VRAM (buy)"] = _col("buy_usd_per_gb_vram", 1)
    extra_help["$ per GB of VRAM (buy)"] = "Card price / its memory in GB (vendor figure), from the speed model."
if "buy_system_breakeven_months" in per_fit:
    view["Buy pays off after (months)"] = _col("buy_system_breakeven_months", 1)
    view["Buy pays off after (hours of use)"] = _col("buy_system_breakeven_hours", 0)
    extra_help["Buy pays off after (months)"] = (
        "Months after which buying the cheapest system (cards + host + network) costs less than renting its GPUs: "
        "its price x (1 - resale share) over the monthly rent saved minus the GPUs' electricity (x PUE), at the "
        "engine's utilisation; ∞: renting never costs more.")
    extra_help["Buy pays off after (hours of use)"] = "The same break-even in hours the GPUs are busy."
if "rent_train_hours" in per_fit:
    view["Training time (h, rented config)"] = _col("rent_train_hours", 1)
    view["Training job cost ($, rented)"] = _col("rent_cloud_cost_usd", 0)
if "rent_aggregate_tokens_per_s" in per_fit:
    view["Tokens/s (rented config, all sequences)"] = _col("rent_aggregate_tokens_per_s", 1)
    view["$ per million tokens (rented)"] = _col("rent_usd_per_million_tokens", 3)
if "buy_aggregate_tokens_per_s" in per_fit:
    view["Tokens/s (bought config, all sequences)"] = _col("buy_aggregate_tokens_per_s", 1)


def _table() -> None:
    c.table(view, "cost_per_fit", c.csv_settings(page="cost per fit", workloads=",".join(chosen), max_gpus=max_gpus,
                                                 training_tokens=tokens_b * 1e9, condition=condition),
            formats={"Buy: system ($)": "dollar", "Buy: cards ($)": "dollar", "Buy: host + network ($)": "dollar", "Rent ($/h)": "$%.2f", "$ per GB of VRAM (buy)": "$%.1f",
                     "Training job cost ($, rented)": "dollar", "$ per million tokens (rented)": "$%.3f"},
            help={"Parameters (B, total / active)": "Billions of parameters; a mixture of experts shows total / "
                                                    "active per token (every expert is in memory, a token uses a few).",
                  "Buy: configuration": "Cheapest whole system that holds the workload: cards (new, used or "
                                        "either, as chosen on the Budget planner) + hosts + network.",
                  "Rent: configuration": "Cheapest on-demand rental per hour that holds the workload.",
                  "Rent: price date": "When the on-demand $/GPU-hour was recorded; its source is on the Catalog page.",
                  **extra_help})
    st.caption("Training rows: time and cost for the token budget above at the engine's default utilisation (MFU); "
               "serving rows: tokens/s for the sidebar's concurrent sequences at its context. Empty cells: no price "
               "in the catalog, or the figure does not apply to the workload.")


@c.chart
def _dots_chart(sweep: tuple, condition: str, cost_col: str, title: str, fmt: str, names: dict, gnames: dict):
    conf = c.configurations(*sweep)
    ok = conf[np.isfinite(conf[cost_col].astype(float))]
    best = c.cheapest(*sweep[:6], cost=cost_col, condition=condition)  # = planning.cheapest(ok, cost_col): it keeps finite costs only
    combo = ok["model"].astype(str).map(names) + " · " + ok["plan"].astype(str)
    dots = pd.DataFrame({"combo": combo, "cost": ok[cost_col].astype(float),
                         "config": ok["gpus"].astype(int).astype(str) + "× " + ok["gpu"].astype(str).map(gnames),
                         "vendor": ok["gpu_vendor"].astype(str)})
    top = pd.DataFrame({"combo": best["model"].astype(str).map(names) + " · " + best["plan"].astype(str),
                        "cost": best[cost_col].astype(float),
                        "config": best["gpus"].astype(int).astype(str) + "× " + best["gpu"].astype(str).map(gnames)})
    order = list(top.sort_values("cost")["combo"])
    # one row per model x workload (~250 rows, 5,000 px): the cost axis above the rows as well as below,
    # where it was the only one, and the legend above them (at the right it took a fifth of an 800 px
    # page, and the labels of the dearest rows ran under it)
    lines = title.replace(" (", "\n(").split("\n")  # the axis title in two lines: its unit below its words
    x = alt.X("cost:Q", title=lines, scale=alt.Scale(type="log"), axis=alt.Axis(orient="top"))
    x_below = alt.X("cost:Q", title=lines, scale=alt.Scale(type="log"), axis=alt.Axis(orient="bottom"))
    y = alt.Y("combo:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    tip = [alt.Tooltip("combo:N", title="Model · workload"), alt.Tooltip("config:N", title="Configuration"),
           alt.Tooltip("cost:Q", title=title, format=fmt)]
    others = alt.Chart(dots).mark_circle(size=45, opacity=0.6).encode(
        x=x, y=y, color=alt.Color("vendor:N", title="Vendor", legend=alt.Legend(orient="top", direction="vertical")),
        tooltip=tip + [alt.Tooltip("vendor:N")])
    cheapest = alt.Chart(top).mark_point(shape="diamond", size=160, filled=True, color="#16a34a").encode(
        x=x_below, y=y, tooltip=tip)
    # (a label at most 150 px, the whole configuration in the tooltip: the longest, "2× RTX PRO 6000 Blackwell
    # Workstation Edition", took the chart's room from the cost axis)
    text = alt.Chart(top).mark_text(align="left", dx=9, fontSize=11, fontWeight="bold", color="#166534",
                                    limit=150).encode(
        x=alt.X("cost:Q", scale=alt.Scale(type="log"), axis=None), y=y, text="config:N", tooltip=tip)
    return (others + cheapest + text).resolve_axis(x="independent").properties(height=max(300, 20 * len(order)))


def _dots(cost_col: str, title: str, fmt: str) -> bool:
    """Draw the chart of every configuration's cost (False: nothing priced to draw)."""
    if not np.isfinite(conf[cost_col].astype(float)).any():
        return False
    c.guard(c.cheapest, *sweep[:6], cost=cost_col, condition=condition)  # a bad value: one line on the page
    _dots_chart(sweep, condition, cost_col, title, fmt, names, gnames, width="stretch")
    return True


# Only the open tab runs (Streamlit's lazy tabs: a click on another tab reruns the page with it):
# the two charts of every configuration were a sixth of a sidebar change while hidden.
tab_table, tab_buy, tab_rent = st.tabs(["Table", "Chart: buy", "Chart: rent"], key="cf_tab", on_change="rerun")
if tab_table.open:
    with tab_table:
        _table()
if tab_buy.open:
    with tab_buy:
        if not _dots("system_usd", "Price of the whole system ($: cards + hosts + network, log scale)", ",.0f"):
            st.info("No priced configuration holds these workloads.")
        else:
            st.caption("Green diamond and label: the cheapest configuration; dots: every other GPU type that holds it "
                       "(at its smallest count), coloured by vendor.")
if tab_rent.open:
    with tab_rent:
        if not _dots("rent_usd_per_hour", "Rent of the configuration ($ per hour, log scale)", ",.2f"):
            st.info("No configuration with a cloud price holds these workloads.")
        else:
            st.caption("Green diamond and label: the cheapest rental; dots: the alternatives.")
