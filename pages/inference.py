"""Inference: weights, KV cache and total for every model at FP16 / INT8 / INT4 and GGUF types,
the smallest single GPU that serves it, and how many of the chosen card; the source article's
table beside ours."""

import altair as alt
import pandas as pd
import streamlit as st

from app import common as c
from app import state
from app.labels import md_escape

c.ensure_frame()
from engine.constants import INFER_PRECISIONS

s = c.require_valid(training=False)
models, gpus = c.merged_frames()
u, _ = c.unit()
names = c.display_names(models)
gnames = c.display_names(gpus, short=True)
card = s["gpu"]

c.page_header("Inference", "Memory to serve every model at each weight precision: the weights, the KV cache for the "
              "sidebar's concurrent sequences at its context, and the total on one GPU (the prefill working set and "
              "runtime overhead included); the smallest single GPU that holds it; and the GPUs needed on the "
              "sidebar's card.")
st.caption(f"Context {int(s['seq']):,} tokens × {int(s['batch'])} concurrent sequence(s), KV cache "
           f"{c.KV_LABELS[s['kv_precision']]}, card: {md_escape(gnames.get(card, card))}, headroom {s['headroom_pct']}%. "
           "Change these in the sidebar (Task: Serve shows the inference settings).")

with st.container(border=True):
    i1, i2 = st.columns([3, 1])
    # kept in the settings and the URL (app/state.py: infer_precisions, infer_max_gpus); an emptied list stays the
    # page's default there
    precisions = list(state.control("infer_precisions", lambda k, **v: i1.multiselect(
        "Weight precisions", list(INFER_PRECISIONS), key=k, **v, format_func=c.INFER_PRECISION_LABELS.get)))
    max_gpus = state.control("infer_max_gpus", lambda k, **v: i2.selectbox(
        "Largest GPU count", state.FIELDS["infer_max_gpus"].options, key=k, **v,
        help="The GPUs-needed column counts up to this many of the sidebar's card."))
if not precisions:
    st.info("Choose at least one weight precision.")
    st.stop()

args = {"seq": int(s["seq"]), "batch": int(s["batch"]), "card": card, "kv_precision": s["kv_precision"],
        "kv_policy": s["kv_policy"], "max_gpus": int(max_gpus), "allow_long_context": bool(s["allow_long_context"]),
        "headroom": s["headroom_pct"] / 100}
table = c.guard(c.inference_table, models, gpus, tuple(models["id"]), tuple(precisions), **args)

# issue 15: total vs active parameters (a mixture-of-experts model holds every expert, a token uses a few)
_params = models.set_index("id")["params"].astype(float)
_active = pd.to_numeric(models.set_index("id").get("active_params", _params), errors="coerce").fillna(_params)
view = pd.DataFrame({
    "Model": table["model"].map(names),
    "Parameters (billions)": (table["model"].map(_params) / 1e9).round(2),
    "Active per token (billions)": (table["model"].map(_active) / 1e9).round(2),
    "Weights": table["precision"].map(c.INFER_PRECISION_LABELS),
    f"Weights ({u})": c.mem(table["weights_bytes"]),
    f"KV cache ({u})": c.mem(table["kv_cache_bytes"]),
    f"Total on one GPU ({u})": c.mem(table["total_bytes"]),
    "Context used (tokens)": table["seq"].astype(int),
    "Smallest single GPU": table["smallest_gpu"].map(gnames).fillna("none holds it alone"),
    f"GPUs needed: {gnames.get(card, card)}": table["card_label"].astype(str),
})
if "card_decode_tokens_per_s" in table:
    view[f"Tokens/s per sequence on {gnames.get(card, card)}"] = table["card_decode_tokens_per_s"].astype(float).round(1)
if "card_usd_per_million_tokens" in table:
    view["$ per million tokens (rented)"] = table["card_usd_per_million_tokens"].astype(float).round(3)
# the rented cost's price, with its source and date (the catalog's), beside the table and in its CSV
_gpu = gpus.set_index("id").loc[card]
_price = float(_gpu["cloud_usd_per_hour"]) if pd.notna(_gpu.get("cloud_usd_per_hour")) else None
price_words = {"cloud_usd_per_gpu_hour": _price if _price is not None else "none in the catalog",
               "cloud_price_source": str(_gpu.get("cloud_source", "") or ""),
               "cloud_price_date": str(_gpu.get("cloud_date", "") or "")}
c.table(view, "inference", c.csv_settings(page="inference", precisions=",".join(precisions), card=card, max_gpus=max_gpus,
                                          **price_words),
        formats={"Context used (tokens)": "%d", "$ per million tokens (rented)": "$%.3f"},
        help={"Active per token (billions)": "Mixture of experts: the parameters one token uses (its routed experts, "
                                             "the shared ones, attention and embeddings); the weights column holds "
                                             "every expert. Equal to the total for a dense model.",
              f"Total on one GPU ({u})": "Peak on a single card: weights + KV cache + the larger of one layer's "
                                         "prefill working set and the output logits, + runtime overhead.",
              "Smallest single GPU": "The card with the least usable memory that holds it alone (then the cheapest).",
              "Context used (tokens)": "The sidebar's context, cut to the model's own context length where longer.",
              f"Tokens/s per sequence on {gnames.get(card, card)}": "At the GPUs needed on that card; empty where no "
                                                                     "count up to the largest holds it, or the card "
                                                                     "cannot run it.",
              "$ per million tokens (rented)": "At the GPUs needed on the card; empty where it does not run there, or "
                                               "the card has no cloud price."})

if "card_usd_per_million_tokens" in table:
    st.caption(f"\\$ per million tokens: {md_escape(gnames.get(card, card))} rented at "
               + (f"\\${_price:,.10g} per GPU-hour ({md_escape(price_words['cloud_price_source'])}, "
                  f"{md_escape(price_words['cloud_price_date'])}; the catalog's price, Catalog page)"
                  if _price is not None else "no cloud price in the catalog (the column is empty)")
               + f" × the GPUs needed, over the tokens the {int(s['batch'])} concurrent sequence(s) generate per hour. "
               "Tokens/s: the decode roofline (memory bandwidth against compute, README \"Speed and cost\").")

chart_data = pd.DataFrame({
    "model": table["model"].map(names), "precision": table["precision"].map(c.INFER_PRECISION_LABELS),
    "weights": c.mem(table["weights_bytes"]), "kv": c.mem(table["kv_cache_bytes"]),
    "total": c.mem(table["total_bytes"]),
})
model_order = [names[i] for i in models["id"]]
usable = float(gpus.set_index("id").loc[card, "usable_memory_bytes"]) / c.unit()[1]
precision_order = [c.INFER_PRECISION_LABELS[p] for p in precisions]


@c.chart
def _sizes_chart(chart_data: pd.DataFrame, model_order: list, precision_order: list, usable: float,
                 card_name: str, u: str):
    # one row per model (the catalog's ~60 names, whole and level: along x at -30 degrees they
    # overlapped one another and the axis title)
    points = alt.Chart(chart_data).mark_point(filled=True, size=70, opacity=0.85).encode(
        y=alt.Y("model:N", sort=model_order, title=None,
                axis=alt.Axis(labelLimit=300, labelOverlap=False, labelFontSize=11, grid=True)),
        x=alt.X("total:Q", title=f"Total on one GPU ({u}, log scale)", scale=alt.Scale(type="log"),
                axis=alt.Axis(orient="top", labelFlush=True)),  # (flush: the last label inside the chart)
        # one entry a line: a line of five ran past the chart on an 800 px page
        color=alt.Color("precision:N", title="Weights", sort=precision_order,
                        legend=alt.Legend(orient="top", direction="vertical")),
        shape=alt.Shape("precision:N", title="Weights", sort=precision_order),
        tooltip=[alt.Tooltip("model:N", title="Model"), alt.Tooltip("precision:N", title="Weights"),
                 alt.Tooltip("weights:Q", title=f"Weights ({u})", format=",.2f"),
                 alt.Tooltip("kv:Q", title=f"KV cache ({u})", format=",.2f"),
                 alt.Tooltip("total:Q", title=f"Total ({u})", format=",.2f")],
    )
    rule = alt.Chart(pd.DataFrame({"x": [usable], "what": [f"{card_name} usable memory"]})).mark_rule(
        color="#dc2626", strokeDash=[6, 3], size=2).encode(x="x:Q", tooltip=[alt.Tooltip("what:N"), alt.Tooltip("x:Q", format=",.2f")])
    return (points + rule).properties(height=alt.Step(18))  # a row: an 11 px name with room


_sizes_chart(chart_data, model_order, precision_order, usable, gnames.get(card, card), u, width="stretch")
st.caption(f"Red line: one {md_escape(gnames.get(card, card))} ({usable:,.1f} {u} usable). Points right of it need several cards "
           "(tensor parallelism) or a bigger one. A point a little left of it may too: a fit keeps the sidebar's headroom "
           f"({s['headroom_pct']}% of the card) free and is decided on the estimate's safe side (its margin, docs/accuracy.md); "
           "the table's GPUs needed column is the verdict.")

# the source article's table beside ours: built when the section is open only (a lazy expander,
# Streamlit's on_change="rerun"), as the Budget page's tiers
# (open or closed, kept in the settings and the URL: app/state.py infer_article)
drawn: dict = {}
state.control("infer_article", lambda k, value: drawn.setdefault("box", st.expander(
    "The source article's inference table, beside ours (GB = 10⁹ bytes, as the article)", expanded=value, key=k,
    on_change="rerun")), read=lambda box: bool(box.open))
article_box = drawn["box"]
if article_box.open:
    with article_box:
        article_models = ("llama-2-7b", "llama-2-13b", "llama-3-70b")
        if set(article_models) <= set(models["id"]):
            art = c.guard(c.article_inference_table, models, gpus, article_models, ("fp16", "int8", "int4"), **args,
                          shown=tuple(precisions))  # its rows from the table above where that holds them
            if len(art):
                aview = pd.DataFrame({"Model": art["model"].map(names)})
                for p in ("fp16", "int8", "int4"):
                    aview[f"{p.upper()} article (GB)"] = art[f"article_{p}_gb"].astype(float).round(2)
                    aview[f"{p.upper()} ours (GB)"] = art[f"ours_{p}_gb"].astype(float).round(2)
                aview["Article's minimum card"] = (art["article_min_gpus"].map(lambda n: f"{n:g}× " if pd.notna(n) else "")
                                                   + art["article_min_gpu"].map(lambda g: gnames.get(g, g) if isinstance(g, str) else "—")
                                                   + art["article_min_precision"].map(lambda p: f" ({p.upper()})" if isinstance(p, str) else ""))
                for p in ("fp16", "int8", "int4"):
                    aview[f"Our smallest single GPU, {p.upper()}"] = art[f"ours_smallest_{p}"].map(lambda g: gnames.get(g, g))
                c.table(aview, "inference_article", c.csv_settings(page="inference, source article table"),
                        help={"Article's minimum card": "As published (catalog/references.yaml, a000-infer-*-min-card); "
                                                        "the precision is our reading of the article."})
                st.caption("The article's weights are nominal parameters × bytes (7e9 × 2 = 14 GB); ours use the exact "
                           "parameter counts and the formats' real sizes (INT8 adds per-row scales; INT4 GPTQ/AWQ with "
                           "group 128 is 4.25 bits per weight, embeddings and lm_head stay 16-bit). Our smallest GPU also "
                           "counts the KV cache at the sidebar's context and concurrency, and the runtime overhead. "
                           "The whole table above extends it to every model and GGUF type.")
