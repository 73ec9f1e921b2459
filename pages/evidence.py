"""Evidence: our estimate beside every published reference point, with the error and the source."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import state
from app.labels import md_escape
from planner.evidence import memory_hit_rate, metric_words, worst_underestimate

c.ensure_frame()

models, gpus = c.merged_frames()
names = c.display_names(models)

c.page_header("Evidence", "Every published figure we know for these models (measurements, others' estimates, and the "
              "source articles' claims) beside the engine's estimate for the same setup, with the error and the "
              "source. Measurements are the test; claims are shown to be checked, not trusted.")

SERVING_METRICS = {"decode_tokens_per_s": "decode speed, batch 1 (tokens/s)",
                   "prefill_tokens_per_s": "prefill speed (tokens/s)",
                   "kv_cache_available_gib": "KV budget at start-up (GiB)"}
ROLE_LABELS = {"holdout": "held out (the accuracy)", "fit": "fit (set a constant)"}


def _matching(frame: pd.DataFrame, columns: tuple, query: str) -> pd.DataFrame:
    """The rows where any of `columns` holds `query` (case-insensitive, plain text): both tabs' search box."""
    hit = np.zeros(len(frame), dtype=bool)
    for col in columns:  # a handful of columns, each searched whole
        hit |= frame[col].astype(str).str.contains(query, case=False, regex=False).to_numpy()
    return frame[hit]


@c.chart
def _serving_chart(points: pd.DataFrame, tolerance: float):
    band = alt.Chart(pd.DataFrame({"lo": [-tolerance], "hi": [tolerance]})).mark_rect(
        opacity=0.15, color="#16a34a").encode(x="lo:Q", x2="hi:Q")
    dots = alt.Chart(points).mark_point(filled=True, size=60, opacity=0.8).encode(
        x=alt.X("error:Q", title="Ours vs published (%; clipped at ±150)"),
        y=alt.Y("engine:N", title=None),
        color=alt.Color("metric:N", title="Metric"),
        shape=alt.Shape("role:N", title="Role"),
        tooltip=[alt.Tooltip("id:N", title="Run"), alt.Tooltip("gpu:N", title="GPU"),
                 alt.Tooltip("model:N", title="Model"), alt.Tooltip("published:Q", title="Published", format=",.2f"),
                 alt.Tooltip("ours:Q", title="Ours", format=",.2f"), alt.Tooltip("raw:Q", title="Error (%)", format="+.1f")],
    )
    return (band + dots).properties(height=alt.Step(40))


def _serving_tab() -> None:
    """The serving engines' published runs (catalog/serving_measurements.yaml) beside the serving model."""
    from planner.serving_evidence import SPEED_TARGET_SHARE, SPEED_TOLERANCE_PCT, held_out_figures

    sv = c.guard(c.serving_evidence)
    st.caption("Batch-1 decode and prefill speeds (llama-bench, the engines' own benchmarks) and the KV budgets "
               "vLLM and SGLang print at start-up, each beside the serving model's figure for the same run "
               "(`serve`; docs/serving.md). Ours is computed from the run's own card figures (its memory "
               "bandwidth, TFLOPS, the total memory its log printed), so this checks the serving model, not "
               "the catalog's cards. A fit row set one of the model's constants; a held-out row set none, so "
               "its error is the accuracy.")
    held = held_out_figures(sv)
    cards = c.wrap_row()
    cards.metric(f"Held-out speed figures: within ±{SPEED_TOLERANCE_PCT:.0f}%", f"{held['speed_hits']} of {held['speed_total']}",
              help=f"Batch-1 decode and prefill speeds no constant was fitted on; the target is at least "
                   f"{SPEED_TARGET_SHARE:.0%} within ±{SPEED_TOLERANCE_PCT:.0f}%.")
    cards.metric("Held-out speed: median |error|", f"{held['speed_median']:.1f}%" if held["speed_total"] else "—")
    cards.metric("Held-out KV budgets: median |error|", f"{held['kv_median']:.1f}%" if held["kv_total"] else "—",
              f"{held['kv_total']} start-up logs", delta_color="off", delta_arrow="off",
              help="vLLM's 'Available KV cache memory' and SGLang's KV pool, against the engine's memory model "
                   "at the log's own settings (gpu_memory_utilization, max_num_seqs, max_model_len, version).")
    with st.container(border=True):
        f1, f2, f3 = st.columns(3)
        metric_names = [m for m in SERVING_METRICS if m in set(sv["metric"])]
        # kept in the settings and the URL (app/state.py PAGE_FIELDS: sv_metrics, sv_engines, sv_roles, sv_search)
        metrics = state.control("sv_metrics", lambda k, **v: f1.multiselect(
            "Metric", metric_names, format_func=SERVING_METRICS.get, key=k, **v), options=metric_names)
        engines = sorted(sv["engine"].astype(str).unique())
        chosen_engines = state.control("sv_engines", lambda k, **v: f2.multiselect("Engine", engines, key=k, **v),
                                       options=engines)
        roles = state.control("sv_roles", lambda k, **v: f3.multiselect(
            "Role", list(ROLE_LABELS), format_func=ROLE_LABELS.get, key=k, **v), options=list(ROLE_LABELS))
        query = state.control("sv_search", lambda k, **v: st.text_input(
            "Search (run, GPU, model, build, source)", key=k, **v))
    shown = sv[sv["metric"].isin(metrics) & sv["engine"].isin(chosen_engines) & sv["role"].isin(roles)]
    if query:
        shown = _matching(shown, ("id", "gpu_name", "model_name", "build", "source", "setup_note"), query)
    if shown.empty:
        st.info("No serving run matches the filters.")
        return
    error = shown["error_pct"].astype(float)
    points = pd.DataFrame({"id": shown["id"], "engine": shown["engine"], "gpu": shown["gpu_name"],
                           "model": shown["model_name"], "metric": shown["metric"].map(SERVING_METRICS),
                           "role": shown["role"].map(ROLE_LABELS), "published": shown["reference"],
                           "ours": shown["estimate"], "error": error.clip(-150, 150),
                           "raw": error}).dropna(subset=["error"])
    if len(points):
        _serving_chart(points, SPEED_TOLERANCE_PCT, width="stretch")
        st.caption(f"Green band: ±{SPEED_TOLERANCE_PCT:.0f}%, the speed target. Positive: we estimate more than "
                   "the run measured.")
    view = pd.DataFrame({
        "Run": shown["id"].astype(str),
        "Role": shown["role"].map(ROLE_LABELS),
        "Engine": shown["engine"].astype(str),
        "Build / version": shown["build"].astype(str),
        "Backend": shown["backend"].astype(str),
        "GPU": shown["gpu_name"].astype(str),
        "Model": shown["model_name"].astype(str),
        "Metric": shown["metric"].map(SERVING_METRICS),
        "Published": shown["reference"].astype(float),
        # rounded to what the table shows, so that its CSV is the table as shown (190.0576509 beside a shown 190.06)
        "Ours": shown["estimate"].astype(float).round(2),
        "Error (%)": error.round(1),
        f"Within ±{SPEED_TOLERANCE_PCT:.0f}%": shown["within_35pct"].astype(bool),
        "Date": shown["date"].astype(str),
        "Source": shown["source"].astype(str),
        "URL": shown["url"].astype(str),
        "Setup": shown["setup_note"].astype(str),
    })
    c.table(view, "serving_evidence",
            c.csv_settings(page="evidence (serving engines)", metrics=",".join(metrics), engines=",".join(chosen_engines),
                           roles=",".join(roles), search=query),
            formats={"Ours": "%.2f", "Error (%)": "%+.1f%%"}, links=("URL",),
            help={"Role": "fit: the run set one of the serving model's constants (benchmarks/serving_accuracy.py "
                          "--fit refits them); held out: it set nothing, so its error is the model's accuracy.",
                  "Ours": "The serving model's figure for the run, from the run's own card figures and settings.",
                  "Build / version": "The engine build or version as the source prints it."})


tab_refs, tab_serving = st.tabs(["Training and memory references", "Serving engines (speed, KV budget)"])
with tab_serving:  # (drawn first: the references' tab may stop the script when no row matches its filters)
    _serving_tab()

with tab_refs:
    ev = c.guard(c.evidence, models, gpus)
    # issue 26: the user's own runs (llm-planner ingest FILE --gpu ID --save; docs/ingest.md), listed with the published
    # ones and marked "yours"; the hit rates above the table stay the published references'
    from planner.ingest import IngestError, load_runs, user_evidence_rows  # noqa: E402

    try:
        mine = user_evidence_rows(models, gpus, load_runs(), warn=False)
    except IngestError as exc:
        st.warning(f"{exc}; your runs are left out")
        mine = ev.iloc[:0]
    for problem in mine.attrs.get("user_runs_problems", []):  # a run that cannot be estimated: named, the rest listed
        st.warning(md_escape(problem))
    rows = pd.concat([ev, mine], ignore_index=True) if len(mine) else ev
    KIND_LABELS = {"measured": "measured", "estimate": "others' estimate", "claim": "claim (source articles etc.)"}

    with st.container(border=True):
        e1, e2, e3 = st.columns([2, 2, 1])
        # kept in the settings and the URL (app/state.py PAGE_FIELDS: ev_kinds, ev_metrics, ev_outside, ev_search)
        kinds = state.control("ev_kinds", lambda k, **v: e1.multiselect(
            "Kind", list(KIND_LABELS), format_func=KIND_LABELS.get, key=k, **v), options=list(KIND_LABELS))
        metrics = sorted(rows["metric"].astype(str).unique())
        chosen_metrics = state.control("ev_metrics", lambda k, **v: e2.multiselect(
            "Metric", metrics, format_func=metric_words, key=k, **v), options=metrics)
        outside = state.control("ev_outside", lambda k, **v: e3.checkbox("Only outside ±10%", key=k, **v))
        query = state.control("ev_search", lambda k, **v: st.text_input("Search (id, model, source, notes)", key=k, **v))

    summary = c.wrap_row()
    for kind in KIND_LABELS:
        part = ev[(ev["kind"] == kind) & ev["error_pct"].notna()]
        summary.metric(f"{KIND_LABELS[kind].capitalize()}: within ±10%", f"{int(part['within_10pct'].sum())} of {len(part)}",
                   help="References with an estimate whose error is at most 10%.")
    mem_hits, mem_total = memory_hit_rate(ev)
    worst_id, worst_err = worst_underestimate(ev)
    summary.metric("Real-run memory figures: within ±15%", f"{mem_hits} of {mem_total}",
                      f"worst under: {worst_err:+.1f}%" if worst_id else "none under", delta_color="off", delta_arrow="off",
                      help="Measured memory figures (each on its own counter: allocated, reserved or whole process), "
                           "against the target of at least 85% within ±15% and none under by more than 10%"
                           + (f"; the furthest under is {worst_id}." if worst_id else "."))

    if len(mine):
        st.caption(f"{len(mine)} figures from your own runs (ingest --save) are in the table, marked \"yours\" in Whose; "
                   "the counts above are the published references'.")
    shown = rows[rows["kind"].isin(kinds) & rows["metric"].astype(str).isin(chosen_metrics)]
    if outside:
        shown = shown[~shown["within_10pct"].astype(bool)]
    if query:
        shown = _matching(shown, ("id", "model", "source", "setup_note", "explanation"), query)

    if shown.empty:
        st.info("No reference matches the filters.")
        st.stop()

    error = shown["error_pct"].astype(float)
    finite_error = error.where(np.isfinite(error))  # inf: our count is beyond the engine's limit (note)
    note = shown["estimate_note"].astype(str) if "estimate_note" in shown else pd.Series("", index=shown.index)
    chart = pd.DataFrame({"id": shown["id"].astype(str), "error": error.clip(-300, 300),
                          "raw": finite_error, "kind": shown["kind"].map(KIND_LABELS),
                          "model": shown["model"].astype(str).map(names), "note": note}).dropna(subset=["error"])


    @c.chart
    def _errors_chart(chart: pd.DataFrame):
        band = alt.Chart(pd.DataFrame({"lo": [-10], "hi": [10]})).mark_rect(opacity=0.15, color="#16a34a").encode(x="lo:Q", x2="hi:Q")
        bars = alt.Chart(chart).mark_bar().encode(
            x=alt.X("error:Q", title="Our estimate vs published (%; clipped at ±300)"),
            y=alt.Y("id:N", sort=alt.EncodingSortField("error", order="ascending"), title=None,
                    axis=alt.Axis(labelLimit=300, labelOverlap=False)),
            color=alt.Color("kind:N", title="Kind", scale=alt.Scale(domain=list(KIND_LABELS.values()),
                                                                    range=["#16a34a", "#2563eb", "#f59e0b"])),
            tooltip=[alt.Tooltip("id:N", title="Reference"), alt.Tooltip("model:N", title="Model"),
                     alt.Tooltip("raw:Q", title="Error (%)", format="+.1f"), alt.Tooltip("note:N", title="Ours"),
                     alt.Tooltip("kind:N", title="Kind")],
        )
        return (band + bars).properties(height=alt.Step(15))


    if len(chart):
        _errors_chart(chart, width="stretch")
        st.caption("Green band: ±10%, the tolerance against measurements. Positive: we estimate more than published.")

    view = pd.DataFrame({
        "Reference": shown["id"].astype(str),
        "Kind": shown["kind"].map(KIND_LABELS),
        "Model": shown["model"].astype(str).map(names),
        "Metric": shown["metric"].astype(str),
        "Counter": shown["counter"].astype(str) if "counter" in shown else "",
        "Published": shown["reference"].astype(float),  # as the source gives it (%g cut 39,300.01 to 39300)
        # to six significant digits, shown and exported alike (%g showed 4,194,304 as 4.1943e+06, its CSV 4194304); a
        # note ("not within 1,024 GPUs") instead of inf
        "Ours": shown["estimate"].astype(float).map(lambda v: float(f"{v:.6g}")).where(note == ""),
        # issue 28: the figure fits, max_batch, max_seq and gpus_needed are decided on, on the same counter
        "Ours, safe": (shown["safe_estimate"].astype(float).map(lambda v: float(f"{v:.6g}"))
                       if "safe_estimate" in shown else np.nan),
        "Unit": shown["unit"].astype(str),
        "Per GPU": shown["per_gpu"].astype(bool),
        "Error (%)": finite_error.round(1),
        "Within ±10%": shown["within_10pct"].astype(bool),
        "Source": shown["source"].astype(str),
        "Whose": (shown["source_kind"].astype(str).replace({"user": "yours"}) if "source_kind" in shown
                  else "published"),
        "URL": shown["url"].astype(str),
        "Setup": shown["setup_note"].astype(str),
        "Why it differs": np.where(note != "", "Ours: " + note + ". " + shown["explanation"].astype(str),
                                   shown["explanation"].astype(str)),
    })
    view["Why it differs"] = view["Why it differs"].str.rstrip()
    c.table(view, "evidence", c.csv_settings(page="evidence", kinds=",".join(kinds), metrics=",".join(chosen_metrics),
                                             only_outside=outside, search=query),
            formats={"Error (%)": "%+.1f%%"}, links=("URL",),
            help={"Per GPU": "Checked: the figure is per GPU; unchecked: total over all GPUs or a whole-model size.",
                  "Counter": "What a memory figure counts: torch.cuda.max_memory_allocated (the tensors), "
                             "max_memory_reserved (+ the allocator's cache and the cuBLAS workspace) or the whole "
                             "process as nvidia-smi shows it (+ the CUDA context, NCCL); ours is taken apart the same way.",
                  "Whose": "published: a figure from a paper, README, doc or log; yours: a run you added yourself "
                           "(llm-planner ingest FILE --gpu ID --save, docs/ingest.md).",
                  "Ours": "Empty where the engine has no figure; 'Why it differs' then says why (e.g. no GPU count up "
                          "to the engine's limit holds it).",
                  "Ours, safe": "A memory peak with a GPU: the figure the verdicts decide on (fits, largest batch and "
                                "sequence, GPUs needed), ours plus the band's high side (docs/accuracy.md), on the same "
                                "counter. A run whose published figure is above it could be called 'fits' and not fit.",
                  "Why it differs": "Recorded with the reference (catalog/references.yaml) where the error exceeds 10%."})
