"""Overview: the sidebar's workload answered at a glance (peak per GPU, the cards that hold
it, the cheapest to buy and to rent)."""

import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app.labels import md_escape, moe_caption
from engine.compat import refusal_reasons
from app.tables import describe_md, fmt_share

c.ensure_frame()

s = c.require_valid(single=True)
models, gpus = c.merged_frames()
u, _ = c.unit()

c.page_header(c.APP_NAME, "Which LLMs you can train, fine-tune or serve on which GPUs, how many you need, what it "
              "costs, and why. Set the workload in the sidebar: every page follows it.")
st.subheader(describe_md(s))
_m = models.set_index("id").loc[s["model"]] if s["model"] in set(models["id"]) else None
if _m is not None and "active_params" in _m.index and pd.notna(_m["active_params"]) and _m["active_params"] != _m["params"]:
    st.caption(moe_caption(int(_m["params"]), int(_m["active_params"])))  # a mixture of experts: total vs active

sc = c.scenario(s)
row = c.guard(c.estimate_one, sc, models, gpus)
condition = s["condition"]  # card prices new / used / either: the Budget page's choice, in the URL
sweep = ({"this workload": c.workload(s)}, (s["model"],), tuple(gpus["id"]), models, gpus, 8, condition)
conf = c.guard(c.configurations, *sweep)
gpu_names = c.display_names(gpus, short=True)
gpu_md = {k: md_escape(v) for k, v in gpu_names.items()}  # catalog names inside Markdown (metrics, alerts)
one_card = conf[conf["one_gpu_fits"]]
buy = c.guard(c.cheapest, *sweep[:6], cost="system_usd", by=("model",), condition=condition)
rent = c.guard(c.cheapest, *sweep[:6], cost="rent_usd_per_hour", by=("model",), condition=condition)

cards = c.wrap_row()
cards.metric("Peak per GPU", c.fmt_mem(row["peak_bytes"]), f"on {sc['gpus']}× {gpu_md.get(s['gpu'], md_escape(s['gpu']))}",
          delta_color="off", delta_arrow="off", border=True,
          help="The largest phase of a step, runtime overhead included; its parts are on the Breakdown page.")
cards.metric("Cards that hold it alone", f"{len(one_card)} of {len(conf)}", "GPUs in the catalog", delta_color="off",
          delta_arrow="off", border=True, help="GPUs of the catalog on which one card holds the whole workload.")
if len(buy):
    b = buy.iloc[0]
    cards.metric("Cheapest to buy", c.fmt_usd(b["system_usd"]),
              f"{int(b['gpus'])}× {gpu_md.get(b['gpu'], md_escape(b['gpu']))} + {md_escape(b['host_class'])}",
              delta_color="off", delta_arrow="off", border=True,
              help=f"A whole system, up to 8 GPUs: the cards {c.fmt_usd(b['system_gpu_usd'])} ({md_escape(condition)} "
                   f"prices: {md_escape(b['system_condition'])}, price of {md_escape(b['system_price_date'])}, "
                   + md_escape(b["system_price_source"]) + f") + {int(b['nodes'])} {md_escape(b['host_class'])} "
                   f"host(s) {c.fmt_usd(b['host_usd'])} (price of {md_escape(b['host_date'])}, "
                   + md_escape(b["host_source"]) + ")"
                   + (f" + the network between nodes {c.fmt_usd(b['network_usd'])}" if float(b["network_usd"]) > 0 else "")
                   + ". New / used / either is chosen on the Budget planner.")
else:
    cards.metric("Cheapest to buy", "—", "nothing priced fits within 8 GPUs", delta_color="off", delta_arrow="off", border=True)
if len(rent):
    r = rent.iloc[0]
    cards.metric("Cheapest to rent", c.fmt_usd(r["rent_usd_per_hour"], 2) + "/h",
              f"{int(r['gpus'])}× {gpu_md.get(r['gpu'], md_escape(r['gpu']))} · {md_escape(r.get('gpu_cloud_date', ''))}",
              delta_color="off", delta_arrow="off", border=True,
              help="On-demand $/GPU-hour snapshots from the catalog, times the GPU count. Source: "
                   + md_escape(r.get("gpu_cloud_source", "")))
else:
    cards.metric("Cheapest to rent", "—", "no cloud price fits within 8 GPUs", delta_color="off", delta_arrow="off", border=True)

if len(buy):  # the purchase in words, each price with its date (the metric's delta has room for the system only)
    b = buy.iloc[0]
    st.caption(f"Cheapest to buy: {int(b['gpus'])}× {gpu_md.get(b['gpu'], md_escape(b['gpu']))} "
               f"{md_escape(b['system_condition'])} {c.fmt_usd(b['system_gpu_usd'])} (price of "
               f"{md_escape(b['system_price_date'])}) + {int(b['nodes'])} {md_escape(b['host_class'])} host "
               f"{c.fmt_usd(b['host_usd'])} (price of {md_escape(b['host_date'])})"
               + (f" + network {c.fmt_usd(b['network_usd'])}" if float(b["network_usd"]) > 0 else "")
               + f". Card prices: {md_escape(condition)} (chosen on the Budget planner); sources in the tooltip.")

fits = bool(row["fits"]) if pd.notna(row["fits"]) else False
verdict = (f"On {sc['gpus']}× **{gpu_md.get(s['gpu'], md_escape(s['gpu']))}** ({c.fmt_mem(row['usable_bytes'])} usable per card) it "
           + ("**fits**" if fits else "**does not fit**")
           + f", {'using' if float(row['memory_used_fraction']) < 2 else 'needing'} "
           + f"{fmt_share(float(row['memory_used_fraction']))}; peak during the "
           + f"{c.PHASE_LABELS.get(str(row['peak_phase']), row['peak_phase'])} phase. "
           + f"Largest micro-batch at this length: {int(row['max_batch']):,}; longest sequence at this batch: "
           + f"{int(row['max_seq']):,} tokens.")
if not bool(row.get("compatible", True)):  # the card cannot run it, whatever its memory (catalog compatibility rules)
    verdict += " The card cannot run it: " + md_escape(refusal_reasons(row["compatibility_notes"]))
(st.success if fits else st.warning)(verdict)

st.markdown("#### Which cards hold it")
need = (conf["one_gpu_memory_used_fraction"].astype(float) * 100).to_numpy()
view_chart = pd.DataFrame({
    "gpu": conf["gpu"].astype(str).map(gpu_names),
    "need": np.round(need, 1), "shown": np.minimum(need, 200.0),
    "usable": c.mem(conf["usable_bytes"]),
    "needed": conf["label"].astype(str),
    "status": np.where(conf["one_gpu_fits"], "one card holds it",
                       np.where(conf["fits_within"], "needs several cards", "not within 8 cards")),
    "price": conf["system_usd"].astype(float),
})


@c.chart
def _cards_chart(view_chart: pd.DataFrame, u: str) -> dict:
    # a Vega-Lite dict, not Altair: the first page a server shows imports no Altair (~0.5 s of a cold start)
    order = list(view_chart.sort_values(["usable", "gpu"])["gpu"])
    tip = [{"field": "gpu", "title": "GPU", "type": "nominal"},
           {"field": "usable", "format": ",.1f", "title": f"Usable per card ({u})", "type": "quantitative"},
           {"field": "need", "format": ",.1f", "title": "Whole workload on one card (% of its memory)",
            "type": "quantitative"},
           {"field": "needed", "title": "GPUs needed", "type": "nominal"},
           {"field": "price", "format": ",.0f", "title": "System at that count ($)", "type": "quantitative"}]
    y = {"axis": {"labelLimit": 200}, "field": "gpu", "sort": order, "title": None, "type": "nominal"}
    bars = {"mark": {"type": "bar"}, "encoding": {
        "color": {"field": "status", "scale": {"domain": ["one card holds it", "needs several cards", "not within 8 cards"],
                                               "range": ["#16a34a", "#f59e0b", "#9ca3af"]},
                  # above the bars, one entry a line: at the right it sat where the count labels of the
                  # bars cut at 200% run ("✗ incompatible" was drawn across "not within 8 cards"), and
                  # one line of three entries ran past an 800 px page
                  "legend": {"orient": "top", "direction": "vertical"}, "title": "This workload", "type": "nominal"},
        "tooltip": tip,
        "x": {"field": "shown", "scale": {"domain": [0, 200]}, "type": "quantitative",
              # two lines: one ran past the chart's right edge on an 800 px page
              "title": ["Memory the workload needs on one card", "(% of the card's usable memory; cut at 200%)"]},
        "y": y}}
    labels = {"mark": {"type": "text", "align": "left", "color": "#374151", "dx": 4, "fontSize": 11},
              "encoding": {"text": {"field": "needed", "type": "nominal"}, "tooltip": tip,
                           "x": {"field": "shown", "type": "quantitative"}, "y": y}}
    rule = {"data": pd.DataFrame({"x": [100.0]}), "mark": {"type": "rule", "color": "#dc2626", "size": 2, "strokeDash": [6, 3]},
            "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    return {"layer": [bars, labels, rule], "data": view_chart, "height": {"step": 20}}


_cards_chart(view_chart, u, width="stretch")
st.caption("Bars ending left of the red line (100%): one card holds the workload. Longer bars need ZeRO sharding "
           "(training) or tensor parallelism (serving) over several cards; the label is the count needed.")

view = pd.DataFrame({
    "GPU": conf["gpu"].astype(str).map(gpu_names),
    "Vendor": conf["gpu_vendor"].astype(str),
    f"Usable per card ({u})": c.mem(conf["usable_bytes"]),
    "GPUs needed": conf["label"].astype(str),
    f"Peak per GPU ({u})": c.mem(conf["peak_bytes"]),
    "Memory used (%)": np.round(conf["memory_used_fraction"].astype(float) * 100, 1),
    "System ($)": conf["system_usd"].round(0),
    "Cards ($)": conf["system_gpu_usd"].round(0),
    "Host + network ($)": (conf["host_usd"] + conf["network_usd"]).round(0),
    # (a card the catalog has no price for shows no condition or date: they would date a price that is not there)
    "Card price": (conf["system_condition"].fillna("").astype(str) + np.where(
        conf["system_price_date"].fillna("").astype(str) != "", " (" + conf["system_price_date"].fillna("").astype(str) + ")",
        "")).where(conf["system_gpu_usd"].notna(), ""),
    "Host (price date)": conf["host_class"].fillna("").astype(str) + np.where(
        conf["host_date"].fillna("").astype(str) != "", " (" + conf["host_date"].fillna("").astype(str) + ")", ""),
    "Nodes": conf["nodes"],
    "Rent ($/h)": conf["rent_usd_per_hour"].round(2),
    "Rent price date": conf["gpu_cloud_date"].fillna("").astype(str).where(conf["rent_usd_per_hour"].notna(), ""),
})
if "train_hours" in conf and s["task"] == "train":
    tokens = float(conf["tokens"].iloc[0]) if "tokens" in conf else float("nan")
    view[f"Training time for {tokens:,.0f} tokens (h)"] = conf["train_hours"].where(conf["fits_within"]).round(1)
if "aggregate_tokens_per_s" in conf and s["task"] == "infer":
    view["Tokens/s (all sequences)"] = conf["aggregate_tokens_per_s"].where(conf["fits_within"]).round(1)
view = view.sort_values([f"Usable per card ({u})", "GPU"]).reset_index(drop=True)
c.table(view, "overview", c.csv_settings(page="overview", max_gpus=8, condition=condition),
        formats={"System ($)": "dollar", "Cards ($)": "dollar", "Host + network ($)": "dollar", "Rent ($/h)": "$%.2f",
                 "Memory used (%)": "%.1f%%"},
        help={"GPUs needed": "Smallest count of this card that holds the workload; ✗ >8 when 8 do not.",
              "System ($)": "Cards + one host per node (by the card's host class) + the network from two nodes; "
                            "empty when a price is unknown (never counted as free).",
              "Card price": "new (list price) or used (market quote), with the price's date; sources on the Catalog page.",
              "Rent price date": "When the on-demand $/GPU-hour was recorded; its source is on the Catalog page.",
              f"Peak per GPU ({u})": "Per GPU at the count in 'GPUs needed' (at one card when none fits)."})

st.markdown("#### Go further")
links = c.wrap_row()
links.page_link("pages/feasibility.py", label="Every model × GPU", icon=":material/grid_on:")
links.page_link("pages/budget.py", label="What a budget buys", icon=":material/savings:")
links.page_link("pages/breakdown.py", label="Why this much memory", icon=":material/stacked_bar_chart:")
links.page_link("pages/evidence.py", label="How accurate is it", icon=":material/fact_check:")
