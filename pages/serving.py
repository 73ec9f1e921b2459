"""Serving: how many concurrent requests of each context fit on each card under a serving
engine (vLLM's KV budget, llama.cpp's layer split, ...), and the cheapest configuration that
meets a target (users, context, tokens/s per user, time to first token). Widgets in,
planner.serving out; the physics is engine/serving.py."""

import altair as alt
import pandas as pd
import streamlit as st

from app import common as c
from app import model_source, state
from app.labels import md_escape, moe_caption

c.ensure_frame()
from engine.serving import CPU_MOE_ALL, CPU_MOE_AUTO, ENGINES, GGUF_ENGINES, engine_precisions
from planner.serving import (CUDAGRAPH_NOTE, capacity_curve, check_model_len, cheapest, checkpoint_advice,
                             command_with_files, default_precision, quantized_checkpoint_needed,
                             stored_precision)

s = c.require_valid(training=False)
models, gpus = c.merged_frames()
names = c.display_names(models)
gnames = c.display_names(gpus, short=True)
model = s["model"]

c.page_header("Serving", "Concurrent requests against context length on each card, the way the serving engine "
              "allocates memory (vLLM: utilization x card - weights - profiled activation peak - non-torch memory, "
              "the rest in 16-token KV blocks; llama.cpp/Ollama: the layers that fit, the rest in host RAM), with "
              "batch-1 decode speed fitted per engine on published runs and checked on held-out ones (docs/serving.md).")
st.caption(f"Model: {md_escape(names.get(model, model))}, KV cache {c.KV_LABELS.get(s['kv_precision'], s['kv_precision'])} "
           "(the sidebar's). Prices: the catalog's cloud $/GPU-hour, "
           "with their source and date in the table.")
_m = models.set_index("id").loc[model]
_active = _m.get("active_params", _m["params"])
moe_info = bool(pd.notna(_active) and int(_active) != int(_m["params"]))
if moe_info:  # issue 15: total vs active, and what llama.cpp can keep in host RAM
    st.caption(moe_caption(int(_m["params"]), int(_active)) + " On llama.cpp the routed experts can stay in host "
               "RAM (--n-cpu-moe), read at the host bandwidth (55 GB/s assumed, docs/serving.md).")


@st.cache_data(max_entries=32, show_spinner=False)
def _curve(model, gpu_ids, engine, precision, models, gpus, n_gpus, util, cpu_moe=0, in_use=0.0, kv="auto"):
    settings = {} if util is None else {"gpu_memory_utilization": util}
    return capacity_curve(model, gpu_ids, engine, precision, models, gpus, gpu_count=n_gpus, cpu_moe_layers=cpu_moe,
                          gpu_memory_in_use_gib=in_use, kv_precision=kv, **settings)


@st.cache_data(max_entries=32, show_spinner=False)
def _cheapest(model, users, context, tps, ttft, models, gpus, engines, precisions, cpu_moe=0, in_use=0.0, kv="auto"):
    return cheapest(model, users, context, tps, ttft, models, gpus, engines=engines, precisions=precisions,
                    cpu_moe_layers=cpu_moe, gpu_memory_in_use_gib=in_use, kv_precision=kv)


with st.container(border=True):
    e1, e2, e3, e4 = st.columns(4)
    engine = e1.selectbox("Serving engine", list(ENGINES), key="srv_engine",
                          index=list(ENGINES).index(s["serve_engine"]) if s["serve_engine"] in ENGINES else 0)
    # each engine's own formats (engine/serving.py engine_precisions): GGUF, MLC's, EXL2, torch + fp8/FP4
    choices = list(engine_precisions(engine))
    # the store's where the engine takes it; 'auto' (the default): serve's own default, the model's published
    # checkpoint format where the engine takes it (gpt-oss: MXFP4), else the engine's (planner/serving.py default_precision)
    auto = default_precision(models, model, engine)
    asked = s["serve_weights"] if s["serve_weights"] in choices else auto
    # left at 'auto', another model's default is a new start for the widget, not the previous model's format kept
    # as its state (gpt-oss's MXFP4 carried over to Llama)
    weights_key = f"srv_precision_{'gguf' if engine in GGUF_ENGINES else engine}"
    if s["serve_weights"] == "auto" and st.session_state.get("srv_precision_auto", (weights_key, auto)) != (weights_key, auto):
        st.session_state.pop(weights_key, None)
    st.session_state["srv_precision_auto"] = (weights_key, auto)
    precision = e2.selectbox("Weights", choices, index=choices.index(asked) if asked in choices else 0,
                             key=weights_key,
                             format_func=lambda p: c.INFER_PRECISION_LABELS.get(p, p))
    # the controls below are declared once in app/state.py (URL key, default, bounds, widget key) and kept there
    gpu_count = state.control("serve_gpus", lambda k, **v: e3.selectbox(
        "GPUs per replica", state.FIELDS["serve_gpus"].options, key=k, **v))
    paged = engine in ("vllm", "sglang", "mlc-llm")  # the engines that take a share of the card (gpu_memory_utilization)
    own_share = state.control("serve_share_default", lambda k, **v: e4.checkbox(
        "Engine's default memory share", key=k, **v, disabled=not paged,
        help="vLLM: 0.9 of the card; SGLang: its mem-fraction-static default, by the card's memory "
             "(0.830 on an H100, docs/serving.md). Untick to set the share yourself."))
    util = state.control("serve_util", lambda k, **v: e4.slider(
        "GPU memory utilization (vLLM / SGLang / MLC-LLM, share of each card)", **state.bounds("serve_util"),
        step=0.01, key=k, **v, disabled=not paged or own_share))
    in_use = state.control("serve_in_use", lambda k, **v: e4.number_input(
        "GiB in use by other processes", **state.bounds("serve_in_use"), step=0.5, key=k, **v,
        help="What a desktop or another server already holds on each GPU (nvidia-smi shows it): vLLM and MLC-LLM "
             "do not start where their share of the card is not free; the other engines size themselves from what "
             "is free."))
    # llama.cpp's --n-cpu-moe / --cpu-moe for mixture-of-experts models (engine/serving.py)
    cpu_moe_choices = {"none": 0, "auto (fewest layers that fit)": CPU_MOE_AUTO, "all (--cpu-moe)": CPU_MOE_ALL}
    CPU_MOE_KEYS = ("none", "auto", "all")  # the choices above in the URL (serve_cpu_moe), in their order
    cpu_moe_label = st.selectbox("Routed experts in host RAM (llama.cpp --n-cpu-moe)", list(cpu_moe_choices),
                                 index=CPU_MOE_KEYS.index(s["serve_cpu_moe"]) if s["serve_cpu_moe"] in CPU_MOE_KEYS else 0,
                                 key="srv_cpu_moe", disabled=engine != "llama.cpp" or not moe_info,
                                 help="Keeps the routed experts' weights of the first layers in host RAM; attention, "
                                      "shared experts and the KV cache stay on the GPU. Dense models have none.")
    cpu_moe = cpu_moe_choices[cpu_moe_label] if engine == "llama.cpp" and moe_info else 0
    default_cards = [g for g in ("rtx-4090", "l40s", "a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm-80gb")
                     if g in set(gpus["id"])] or list(gpus["id"][:3])
    stored_cards = [g for g in s["serve_cards"] if g in set(gpus["id"])]
    cards = st.multiselect("Cards", list(gpus["id"]), default=stored_cards or default_cards, key="srv_cards",
                           format_func=lambda g: gnames.get(g, g))
# into the store and the URL (a shared link, a page switch): the cards only where they differ from the default set
s.update(serve_engine=engine, serve_weights="auto" if precision == auto and s["serve_weights"] == "auto" else precision,
         serve_cpu_moe=CPU_MOE_KEYS[list(cpu_moe_choices).index(cpu_moe_label)],
         serve_cards=tuple(cards) if list(cards) != default_cards else ())
state.sync_url()
if not cards:
    st.info("Choose at least one card.")
    st.stop()

def _page_words(text: str) -> str:
    """An engine message in this page's words: its GPU count is the 'GPUs per replica' control."""
    return state.dashboard_message(text.replace(f"gpus {int(gpu_count)} is not accepted",
                                                f"{int(gpu_count)} GPUs per replica is not accepted")
                                   .replace("kv_precision '", "the sidebar's KV cache '"))


# the sidebar's KV cache type (Task: Serve), as `serve --kv-precision`; an engine without it says so (KV_ENGINE_TYPES)
kv_type = str(s["kv_precision"])
curve_args = (engine, precision, models, gpus, int(gpu_count), float(util) if paged and not own_share else None, cpu_moe,
              float(in_use), kv_type)
with st.spinner("Sizing the KV cache on every card…"):
    try:
        curve = _curve(model, tuple(cards), *curve_args)
    except ValueError:
        # one card the engine refuses (a format it cannot run, ...) no longer empties the page: each card is asked
        # alone, the refused ones are named, the others drawn (a QA pass: one T4 among mxfp4 cards hid them all)
        parts, refused = [], {}
        for card_id in cards:
            try:
                parts.append(_curve(model, (card_id,), *curve_args))
            except ValueError as exc:
                refused[card_id] = str(exc)
        if refused and not parts and len(set(refused.values())) == 1:  # the model or settings, not a card
            st.warning(md_escape(_page_words(next(iter(refused.values())))))
        elif refused:
            st.warning("Not sized: " + "; ".join(f"{md_escape(gnames.get(g, g))}: {md_escape(_page_words(m))}"
                                                 for g, m in refused.items()))
        curve = pd.concat(parts, ignore_index=True) if parts else None  # none sized: the cheapest search still runs

if curve is not None:  # (every card refused: the warning above says why)
    u, _ = c.unit()
    if "refused_at_start" in curve and curve["refused_at_start"].any():
        # vLLM / MLC-LLM check at start that their share of the card is free (engine/serving.py refused_at_start): say
        # so, or the cards read 0 requests beside a KV cache (a QA pass)
        stopped = sorted(set(curve.loc[curve["refused_at_start"].to_numpy(bool), "gpu"].map(gnames)))
        st.warning(f"{md_escape(engine)} would not start on {md_escape(', '.join(stopped))}: its share of the card is not "
                   f"free with {float(in_use):g} GiB in use by other processes. Untick \"Engine's default memory share\" "
                   "and lower the utilization, or free the memory.")
    st.markdown("#### Concurrent requests against context, per card")
    chart = pd.DataFrame({"card": curve["gpu"].map(gnames), "context": curve["max_model_len"].astype(int),
                          "users": curve["max_concurrency"].astype(float).round(2),
                          "kv": c.mem(curve["kv_cache_bytes_available"]), "layers": curve["gpu_layers"].astype(int)})
    plot = chart[chart["users"] > 0]


    @c.chart
    def _users_chart(plot: pd.DataFrame, u: str):
        lines = alt.Chart(plot).mark_line(point=True).encode(
            x=alt.X("context:Q", title="Context per request (tokens, log scale)", scale=alt.Scale(type="log", base=2)),
            # two lines: one was taller than the chart, cut at both ends
            y=alt.Y("users:Q", title=["Max concurrent requests", "(of that many tokens, log scale)"],
                    scale=alt.Scale(type="log")),
            color=alt.Color("card:N", title="Card"),
            tooltip=[alt.Tooltip("card:N", title="Card"), alt.Tooltip("context:Q", title="Context (tokens)", format=","),
                     alt.Tooltip("users:Q", title="Max concurrent requests", format=",.2f"),
                     alt.Tooltip("kv:Q", title=f"KV cache available ({u})", format=",.2f")],
        )
        return lines.properties(height=360)


    # the cards that hold no request at any context: named, and no empty chart when that is every card
    missing = [gnames.get(g, g) for g in dict.fromkeys(curve["gpu"])
               if not (curve.loc[curve["gpu"] == g, "max_concurrency"].astype(float) > 0).any()]
    if plot.empty:
        st.info(f"No chosen card holds a single request at any context with {int(gpu_count)} GPU(s) per replica "
                f"(the weights alone do not fit, {md_escape(c.INFER_PRECISION_LABELS.get(precision, precision))}): raise "
                "'GPUs per replica', choose smaller weights, or add a bigger card.")
    else:
        _users_chart(plot, u, width="stretch")
    st.caption(("Not on the chart, no request at any context (the weights alone do not fit): "
                + md_escape(", ".join(missing)) + ". " if missing and not plot.empty else "")
               + ("llama.cpp/Ollama: the slots (-np) of that context whose KV cache fits beside every layer on the GPU; where "
                  "not every layer fits, the one slot asked runs with the rest of the layers in host RAM (the layers "
                  "column), and 0 where none fits." if engine in GGUF_ENGINES else "")
               + (md_escape(CUDAGRAPH_NOTE[2:3].upper() + CUDAGRAPH_NOTE[3:]) + "." if engine == "vllm" else ""))
    view = pd.DataFrame({"Card": chart["card"], "Context (tokens)": chart["context"],
                         "Max concurrent requests": chart["users"], f"KV cache available ({u})": chart["kv"],
                         "Layers on the GPU": chart["layers"],
                         # no speed where not one request of that context fits (a QA pass: 0.00 requests beside 66 tok/s)
                         "Decode (tokens/s per user)": curve["decode_tokens_per_s"].astype(float).round(1).where(
                             chart["users"] >= 1)})
    if engine in GGUF_ENGINES:
        view["Experts' layers in host RAM (--n-cpu-moe)"] = curve["cpu_moe_layers"].astype(int)
        view[f"Host RAM ({u})"] = c.mem(curve["host_ram_bytes"])
    c.table(view, "serving_curve", c.csv_settings(page="serving", engine=engine, precision=precision, gpus=gpu_count,
                                                 cards=",".join(cards),
                                                 utilization="engine default" if own_share or not paged else util,
                                                 gpu_memory_in_use_gib=in_use, cpu_moe=cpu_moe_label),
            formats={"Context (tokens)": "%d"},
            help={"Max concurrent requests": "vLLM: KV blocks x 16 / context (its 'Maximum concurrency' log line).",
                  f"KV cache available ({u})": "The room left for the KV cache on each GPU after the weights, the "
                                               "activation peak and the engine's own memory, for every engine; what "
                                               "the engine allocates out of it (llama.cpp: its -c tokens) is "
                                               "`serve --json`'s kv_cache_bytes_allocated.",
                  "Layers on the GPU": "llama.cpp -ngl: layer slots on the GPU, the output layer first, then the "
                                       "repeating layers; the model's layer count + 1 = everything."})

st.markdown("#### Cheapest configuration for a target")
with st.container(border=True):
    t1, t2, t3, t4 = st.columns(4)
    users = state.control("serve_users", lambda k, **v: t1.number_input(
        "Concurrent users", **state.bounds("serve_users"), key=k, **v))
    context = state.control("serve_context", lambda k, **v: t2.number_input(
        "Context per user (tokens)", **state.bounds("serve_context"), step=256, key=k, **v))
    tps = state.control("serve_tps", lambda k, **v: t3.number_input(
        "Tokens/s per user, at least", **state.bounds("serve_tps"), key=k, **v))
    ttft = state.control("serve_ttft", lambda k, **v: t4.number_input(
        "Time to first token, at most (s)", **state.bounds("serve_ttft"), key=k, **v))
# the page's default context (8,192) on a model with a shorter one (Llama 2's 4,096): the model's whole context, said so,
# where a context the user or a link gave is refused below as `serve` refuses it
own_context = pd.to_numeric(models.set_index("id")["max_context"].get(model), errors="coerce")
if int(context) == state.FIELDS["serve_context"].default and not s["allow_long_context"] and pd.notna(own_context) \
        and 0 < own_context < int(context):
    context = int(own_context)
    st.caption(f"Context per user: {context:,} tokens, the model's whole context (the page's default, "
               f"{state.FIELDS['serve_context'].default:,}, is longer).")
try:  # a context beyond the model's, as `serve --max-model-len` refuses it unless allowed (the sidebar's switch)
    check_model_len(model, int(context), models, bool(s["allow_long_context"]))
except ValueError as exc:
    st.error(md_escape(_page_words(str(exc).replace("max-model-len ", "Context per user ", 1))))
    st.stop()
with st.spinner("Searching cards × GPU counts…"):
    best = c.guard(_cheapest, model, int(users), int(context), float(tps), float(ttft), models, gpus,
                   (engine,), (precision,), cpu_moe, float(in_use), kv_type)
if best is None or best.empty:
    st.info("No card and GPU count up to 8 meets this target with these weights and engine; relax the target, "
            "or choose smaller weights.")
    best = pd.DataFrame(columns=["gpu", "gpus", "max_concurrency", "decode_tokens_per_s", "ttft_s",
                                 "aggregate_tokens_per_s", "usd_per_hour", "usd_per_million_tokens", "price_source",
                                 "price_date", "command"])
top = best.head(10)
commands = top["command"].astype(str)
read = model_source.files_read(model)
if read:  # a model from the sidebar's file: its commands name those files, as `serve --model-file` prints them
    commands = commands.map(lambda cmd: command_with_files(cmd, read, model, str(precision), engine))
bview = pd.DataFrame({
    "Card": top["gpu"].map(gnames).astype(str), "GPUs": top["gpus"].astype(int),
    "Max concurrent requests": top["max_concurrency"].astype(float).round(1),
    "Decode (tokens/s per user)": top["decode_tokens_per_s"].astype(float).round(1),
    "TTFT (s)": top["ttft_s"].astype(float).round(3),
    "Aggregate (tokens/s)": top["aggregate_tokens_per_s"].astype(float).round(0),
    "$ per hour (rented)": top["usd_per_hour"].astype(float).round(2),
    "$ per million tokens": top["usd_per_million_tokens"].astype(float).round(3),
    "Price source (date)": (top["price_source"].astype(str) + " (" + top["price_date"].astype(str) + ")"),
    "Command": commands,
})
c.table(bview, "serving_cheapest", c.csv_settings(page="serving, cheapest", engine=engine, precision=precision,
                                                 users=users, context=context, tokens_per_s=tps, ttft_s=ttft,
                                                 gpu_memory_in_use_gib=in_use),
        formats={"$ per hour (rented)": "$%.2f", "$ per million tokens": "$%.3f"},
        help={"TTFT (s)": "Prefill of a 512-token prompt plus one decode step, without queueing.",
              "Command": "The command line that runs this configuration."})
st.caption("Cards without a cloud price come last. Speed: each engine's constants fitted on published runs, the "
           "error on held-out ones in docs/serving.md (SGLang takes vLLM's: no published batch-1 run names its GPU).")
stored = stored_precision(models, model)
version = str(top.iloc[0].get("engine_version", "") or "") if len(top) else ""
if not read and quantized_checkpoint_needed({"engine": engine, "precision": str(precision), "engine_version": version},
                                            stored):
    st.caption(f"Weights {precision}: the commands name the model's own repository, "
               f"{checkpoint_advice(str(precision), stored, 'the engine')} (as written, the engine loads the stored "
               "weights, not the ones planned).")
