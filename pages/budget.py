"""Budget planner: what a purchase (or cloud) budget runs, on its cheapest configuration, and
what a bit more would unlock."""

import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import data, state
from app.charts import budget_chart_spec
from app.labels import md_escape
from planner import procurement

c.ensure_frame()
from planner import planning

# training a model with linear-attention (Gated DeltaNet) layers: the engine does not model it yet
# (planning.not_modelled); named apart from "out of reach", as `budget` names it (not_modelled)
UNMODELLED_TEXT = "Not modelled yet (training this hybrid model's linear-attention or Mamba2 layers; inference is): "

s = c.store()
models, gpus = c.merged_frames()
u, _ = c.unit()
MODE_LABELS = {"buy": "Buying GPUs ($)", "cloud_hour": "Renting ($ per hour)", "cloud_job": "Renting for one job ($)"}
COST_LABELS = {"buy": "Purchase ($)", "cloud_hour": "Cloud ($/h)", "cloud_job": "Job cost ($)"}

c.page_header("Budget planner", "Every model × workload your budget can run, each on its cheapest configuration "
              "(GPU type × count), and what a bit more budget would unlock. The workloads use the sidebar's "
              "settings (batch, sequence, precision, ZeRO stage, …).")

# the budget and its mode live in the shared settings (and so in the URL); the widgets take them
# as their defaults, never through their keys' session state (app/state.py _widget says why)


def _preset():
    label = st.session_state.get("bp_tier")
    for tier in planning.BUDGET_TIERS:
        if tier["label"] == label:
            s["budget"] = int(tier["high"])
            st.session_state.pop("bp_budget", None)  # the widget starts again from the preset


with st.container(border=True):
    m1, m2 = st.columns([2, 3])
    mode = m1.radio("Budget for", list(MODE_LABELS), format_func=MODE_LABELS.get, key="bp_mode", horizontal=False,
                    index=list(MODE_LABELS).index(s["budget_mode"]) if s["budget_mode"] in MODE_LABELS else 0)
    if mode in ("buy", "cloud_job"):
        m2.segmented_control("Source-article tiers (sets the budget to the tier's top)",
                             [t["label"] for t in planning.BUDGET_TIERS], key="bp_tier", on_change=_preset)
    b1, b2, b3 = st.columns(3)
    hours = None
    if mode == "cloud_hour":
        budget = b1.number_input("Budget ($ per hour, all GPUs)", min_value=0.0, max_value=float(state.FIELDS["budget_per_hour"].high),
                                 value=float(s["budget_per_hour"]), step=1.0, key="bp_hourly")
    else:
        budget = b1.number_input("Budget ($)", min_value=0.0, max_value=float(state.FIELDS["budget"].high),
                                 value=float(s["budget"]), step=1_000.0, format="%.0f", key="bp_budget",
                                 help="The systems below count cards, a host per node (chassis, CPU, RAM, PSU) and the network; "
                                      "the tables further down count GPU prices only." if mode == "buy" else None)
        if mode == "cloud_job":
            hours = b2.number_input("Hours the job runs", min_value=float(state.FIELDS["job_hours"].low),
                                    max_value=float(state.FIELDS["job_hours"].high), value=float(s["job_hours"]), step=1.0,
                                    key="bp_hours")
    stretch = state.control("budget_stretch", lambda k, **v: b3.slider("'A bit more' means up to (+%)", 10, 200, step=10,
                                                                      key=k, **v))
    p1, p2 = st.columns([3, 1])
    chosen = list(state.control("budget_plans", lambda k, **v: p1.multiselect("Workloads", list(c.PLAN_CHOICES), key=k,
                                                                              **v)))
    # (the default: `budget --max-gpus`'s, so both list the same systems)
    max_gpus = state.control("budget_max_gpus", lambda k, **v: p2.selectbox("Largest GPU count",
                                                                             state.FIELDS["budget_max_gpus"].options, key=k, **v))
    shown_gpus = c.gpu_filter(gpus, "bp")

s["budget_mode"] = mode
if mode == "cloud_hour":
    s["budget_per_hour"] = float(budget)
else:
    s["budget"] = round(budget)
if hours is not None:
    s["job_hours"] = float(hours)
state.sync_url()

c.require_valid(training=any(c.PLAN_CHOICES[p][0] == "train" for p in chosen))
if not chosen or shown_gpus.empty:
    st.info("Choose at least one workload and one GPU to plan.")
    st.stop()

# ---- systems a buyer can order: planner/procurement.plan_budget, as `python -m engine budget` ----
st.markdown("#### Systems you can order")
o1, o2, o3 = st.columns([1, 2, 1])
condition = o1.radio("Card prices", list(procurement.CONDITIONS)[::-1], key="bp_condition", horizontal=True,
                     index=list(procurement.CONDITIONS)[::-1].index(s["condition"]),
                     help="new: list prices; used: used-market quotes; either: the cheaper known price. "
                          "Each price shows its date and source.")
s["condition"] = condition
state.sync_url()
pair_options = [f"{m}:{w}" for m in models["id"] for w in procurement.WORKLOADS]
# first shown for the sidebar's model (Llama 3 8B where it is a file or Hub model the list does not hold): training it
# with QLoRA and serving it at INT4, two of the chosen workloads below, so their rows come from that sweep
own = s["model"] if f"{s['model']}:qlora" in pair_options else "llama-3-8b"
pairs = o2.multiselect("Workloads (model:workload)", pair_options, key="bp_pairs",
                       default=[p for p in (f"{own}:qlora", f"{own}:infer-int4") if p in pair_options])
deadline = o3.number_input("Training deadline (days, 0 = none)", min_value=0.0, value=0.0, step=1.0, key="bp_deadline",
                           help="Per 1e9 training tokens, at the engine's speed model.")
one = state.control("budget_one", lambda k, **v: st.checkbox("One purchase for all of them", key=k, **v))
with st.expander("Buy vs rent: utilisation, PUE, electricity, resale"):
    t1, t2, t3, t4 = st.columns(4)
    # bounds and defaults: the column table's (engine/columns.py, as the CLI's --utilization, --pue, --usd-per-kwh,
    # --resale-fraction); the values live in the shared settings, so a page switch and a shared link keep them
    F = state.FIELDS
    s["utilization_pct"] = t1.slider("Utilisation (% of hours busy)", F["utilization_pct"].low, F["utilization_pct"].high,
                                     int(s["utilization_pct"]), key="bp_util")
    s["pue"] = t2.number_input("PUE", min_value=F["pue"].low, max_value=F["pue"].high, value=float(s["pue"]), step=0.1,
                               key="bp_pue", help="Facility power / IT power: 1.0 at a desk; ~1.58 an average data "
                                                  "centre (Uptime Institute survey 2023).")
    s["usd_per_kwh"] = t3.number_input("Electricity ($/kWh)", min_value=F["usd_per_kwh"].low, max_value=F["usd_per_kwh"].high,
                                       value=float(s["usd_per_kwh"]), step=0.01, key="bp_kwh",
                                       help="Default: U.S. commercial average 2023 (EIA), rounded.")
    s["resale_pct"] = t4.slider("Resale at the end (% of the price)", F["resale_pct"].low, F["resale_pct"].high,
                                int(s["resale_pct"]), key="bp_resale")
    state.sync_url()
    tco = (("utilization", s["utilization_pct"] / 100.0), ("pue", float(s["pue"])),
           ("usd_per_kwh", float(s["usd_per_kwh"])), ("resale_fraction", s["resale_pct"] / 100.0))
# the "GPUs only" tables' sweep below: every model x chosen workload x card, at the sidebar's settings
sweep = (c.plans(chosen, s), tuple(models["id"]), tuple(shown_gpus["id"]), models, gpus, int(max_gpus))
c.lora_refusal_note(sweep[0], sweep[1], models, c.display_names(models))
if pairs:
    # `sweep` as known: where it holds the chosen pairs (the default two are two of its plans), their rows come from it
    sysres = c.guard(data.plan_budget, data.subset(models, models["id"].isin({p.split(":")[0] for p in pairs})), shown_gpus,
                     float(budget), mode, hours, ",".join(pairs), float(deadline) or None, bool(one), condition,
                     int(max_gpus), s["headroom_pct"] / 100.0, tco, c.budget_workloads(s), sweep)
    st.caption(f"Each workload with the sidebar's settings ({md_escape(c.describe(s, with_model=False))}; the method "
               f"or weights are the workload's). Headroom: {s['headroom_pct']}% of each GPU kept free (sidebar). "
               "Incompatible combinations (bf16 before Ampere, bitsandbytes on Apple, several Macs, ...) are never offered.")
    p = sysres["purchase"]
    if one and p is not None:
        st.success(f"One purchase: {p['gpus']}× {md_escape(p['gpu_name'])} in {p['nodes']} node(s), "
                   f"{c.fmt_usd(p['cost_usd'], 0)} = cards {c.fmt_usd(p['gpu_cost_usd'], 0)} ({p['condition']}, "
                   f"price of {p['price_date']}) + {p['host_class']} host {c.fmt_usd(p['host_usd'], 0)} "
                   f"(price of {p['host_date']}) + network {c.fmt_usd(p['network_usd'], 0)}. "
                   f"Covers {md_escape(', '.join(p['covers']))}. {md_escape(procurement.pays_text(p)).capitalize()} "
                   "against renting the same GPUs.")
    elif one:
        st.warning("No single system covers every chosen workload within this budget.")
    rows = sysres["rows"]
    if sysres.get("not_modelled"):
        st.caption(UNMODELLED_TEXT + md_escape("; ".join(
            f"{c.display_names(models).get(p['model'], p['model'])} · {p['workload']}" for p in sysres["not_modelled"])))
    if rows.empty:
        st.info("No system runs these workloads within this budget.")
    else:
        sview = pd.DataFrame({
            "Model": rows["model"].astype(str).map(c.display_names(models)), "Workload": rows["workload"],
            "Parameters (B, total / active)": [f"{t / 1e9:,.1f}" + ("" if t == a else f" / {a / 1e9:,.1f}")
                                               for t, a in zip(rows["params"], rows["active_params"])],
            "GPU": rows["gpu"].astype(str).map(c.display_names(gpus, short=True)), "GPUs": rows["gpus"].astype(int),
            # Nodes empty: a card without a per-node limit in the catalog (GH200), only rented
            "Nodes": rows["nodes"].astype("Int64"), "Total ($)": rows["cost_usd"].astype(float).round(0),
            "Card ($)": rows["price_usd_per_card"].astype(float).round(0), "Condition": rows["condition"],
            "Price date": rows["price_date"], "Price source": rows["price_source"],
            "Host ($)": rows["host_usd"].astype(float).round(0), "Host price date": rows["host_date"],
            "Host source": rows["host_source"], "Network ($)": rows["network_usd"].astype(float).round(0),
            "Memory used (%)": np.round(rows["memory_used_fraction"].astype(float) * 100, 1),
            "Training days (1e9 tokens)": rows["train_days"].astype(float).round(1),
            "Tokens/s": rows["tokens_per_s"].astype(float).round(1),
            "Buy pays off after (months)": rows["breakeven_months"].astype(float).round(1),
            "Buy pays off after (hours of use)": rows["breakeven_hours"].astype(float).round(0),
        })
        c.table(sview, "budget_systems", c.csv_settings(page="budget systems", budget=budget, budget_mode=mode,
                                                         condition=condition, workloads=",".join(pairs), **dict(tco)),
                formats={"Total ($)": "dollar", "Card ($)": "dollar", "Host ($)": "dollar", "Network ($)": "dollar",
                         "Memory used (%)": "%.1f%%"},
                help={"Buy pays off after (months)": (
                    "Buying this system (cards + host + network) vs renting the same GPUs on demand: the price x "
                    "(1 - resale) over the monthly rent saved minus the GPUs' electricity (x PUE), at the utilisation "
                    "above. ∞: renting never costs more; empty: no cloud price. Host power is not counted."),
                      "Buy pays off after (hours of use)": "The same break-even in hours the GPUs are busy."})
st.markdown("#### Every model × workload, GPUs only")

result = c.guard(c.budget_plan, *sweep, float(budget), mode, hours, stretch / 100.0)
feasible, unlocks, out = result["feasible"], result["unlocks"], result["out_of_reach"]
unmodelled = result.get("not_modelled", pd.DataFrame(columns=["model", "plan"]))
names = c.display_names(models)
gnames = c.display_names(gpus, short=True)
budget_text = c.fmt_usd(budget, 2 if mode == "cloud_hour" else 0) + ("/h" if mode == "cloud_hour" else "")
total = len(result["groups"])  # model x workload combinations, in the sweep's order

cards = c.wrap_row()
cards.metric(f"Fit within {budget_text}", f"{len(feasible)} of {total}", help="model × workload combinations")
cards.metric(f"Unlocked by up to +{stretch}%", f"{len(unlocks)}")
cards.metric("Not within the GPU limit at any price", f"{len(out)}")


def _view(frame: pd.DataFrame, extra: bool = False) -> pd.DataFrame:
    v = pd.DataFrame({
        "Model": frame["model"].astype(str).map(names),
        "Workload": frame["plan"].astype(str),
        "GPU": frame["gpu"].astype(str).map(gnames),
        "GPUs": frame["gpus"].astype(int),
        COST_LABELS[mode]: frame["cost_usd"].astype(float).round(2 if mode == "cloud_hour" else 0),
        f"Peak per GPU ({u})": c.mem(frame["peak_bytes"]),
        "Memory used (%)": np.round(frame["memory_used_fraction"].astype(float) * 100, 1),
    })
    if extra:
        v["Extra needed ($)"] = frame["extra_usd"].astype(float).round(2 if mode == "cloud_hour" else 0)
    return v


settings = c.csv_settings(page="budget planner", budget_mode=mode, budget=budget, job_hours=hours,
                          stretch_pct=stretch, workloads=",".join(chosen), max_gpus=max_gpus)
money_format = "$%.2f" if mode == "cloud_hour" else "dollar"
fmt = {COST_LABELS[mode]: money_format, "Extra needed ($)": money_format, "Memory used (%)": "%.1f%%"}

# chart: every model x workload, coloured by whether its cheapest configuration fits the budget
best = c.guard(c.cheapest, *sweep, mode=mode, hours=hours)
grid_ = result["groups"].merge(
    best.astype({"model": str, "plan": str})[["model", "plan", "cost_usd", "gpus", "gpu"]], on=["model", "plan"], how="left")
cost = grid_["cost_usd"].astype(float).to_numpy()
# the groups the engine does not model (training a linear-attention model): ∅, as on the Feasibility page
not_done = grid_[["model", "plan"]].astype(str).merge(unmodelled[["model", "plan"]].astype(str).assign(_u=True),
                                                      on=["model", "plan"], how="left")["_u"].fillna(False).to_numpy(bool)
with np.errstate(invalid="ignore"):
    short = np.where(not_done, "∅", np.where(np.isnan(cost), "✗",
                     np.where(cost >= 1e6, "$" + np.char.mod("%.1fM", cost / 1e6),
                              np.where(cost >= 1e3, "$" + np.char.mod("%.1fk", cost / 1e3),
                                       "$" + np.char.mod("%.2f" if mode == "cloud_hour" else "%.0f", cost)))))
chart = pd.DataFrame({
    "model": grid_["model"].map(names), "plan": grid_["plan"], "cost": cost, "text": short,
    "config": np.where(not_done, "not modelled yet (hybrid layers)", np.where(np.isnan(cost), "none within the GPU limit",
                       grid_["gpus"].fillna(0).astype(int).astype(str) + "× " + grid_["gpu"].astype(str).map(gnames))),
    "status": np.select([cost <= budget, cost <= budget * (1 + stretch / 100)],
                        ["within the budget", f"with up to +{stretch}%"], "beyond"),
})


@c.chart
def _budget_chart(chart: pd.DataFrame, plan_order: list, model_order: list, stretch: int, cost_label: str) -> dict:
    # a Vega-Lite dict, not Altair: building the layered Altair chart and its dict was ~20 ms of each sidebar change;
    # the same spec as Altair's (tests/test_page_charts.py compares them)
    return budget_chart_spec(chart, plan_order, model_order, stretch, cost_label)


_budget_chart(chart, list(chosen), [names[i] for i in models["id"]], stretch, COST_LABELS[mode], width="content")
st.caption(f"Cell: the cheapest configuration's {COST_LABELS[mode].lower()} (hover for the GPU type × count). "
           "✗: nothing within the GPU limit, or no price in the catalog."
           + (" ∅: " + UNMODELLED_TEXT.rstrip(": ") + "." if not_done.any() else ""))

st.markdown(f"#### Within {budget_text}")
if feasible.empty:
    st.info("Nothing in the catalog runs within this budget: raise it, allow more GPUs, or try QLoRA / INT4 serving.")
else:
    c.table(_view(feasible), "budget_feasible", settings, formats=fmt)

st.markdown(f"#### What up to +{stretch}% more would unlock")
if unlocks.empty:
    st.info(f"Nothing more becomes possible with up to {stretch}% more; try a larger stretch.")
else:
    c.table(_view(unlocks, extra=True), "budget_unlocks", settings, formats=fmt)

if len(out):
    st.caption("Not within the GPU limit (or no priced GPU holds it): "
               + md_escape("; ".join(out["model"].astype(str).map(names) + " · " + out["plan"].astype(str))))
if len(unmodelled):
    st.caption(UNMODELLED_TEXT
               + md_escape("; ".join(unmodelled["model"].astype(str).map(names) + " · " + unmodelled["plan"].astype(str))))

# the article's tiers at the sidebar's training settings: estimated when the section is open only (a lazy
# expander, Streamlit's on_change="rerun"): a sixth of every sidebar change while few read it
tiers_box = st.expander("The source article's tiers, checked", key="bp_tiers_open", on_change="rerun")
if tiers_box.open:
    with tiers_box:
        tiers = c.guard(c.tier_checks, c.train_workload(s), models, gpus, 64)
        if len(tiers):
            tview = pd.DataFrame({
                "Tier": tiers["label"], "Article's configuration": tiers["article"],
                "Article's GPUs at catalog prices ($)": tiers["article_cost_usd"].round(0),
                "Our GPUs needed on that card": tiers["our_label"].astype(str),
                "Our cost on that card ($)": tiers["our_cost_usd"].round(0),
                "Article's GPU count enough?": tiers["article_config_fits"].astype(bool),
            })
            c.table(tview, "budget_tiers", c.csv_settings(page="budget tiers"),
                    formats={"Article's GPUs at catalog prices ($)": "dollar", "Our cost on that card ($)": "dollar"},
                    help={"Our GPUs needed on that card": "At your sidebar workload (batch, sequence, precision, ZeRO stage), "
                                                          "for the tier's model and method, up to 64 GPUs."})
            st.caption("Source article 001's budget table (catalog/references.yaml, a001-budget-*), evaluated at the sidebar's "
                       "training settings with the article's model, method and card.")
