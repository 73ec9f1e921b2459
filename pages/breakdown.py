"""Breakdown & what-if: one scenario by component and by phase, the largest batch and longest
context that fit, and the ranked changes that would make it fit."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import state
from app.labels import md_escape
from engine.compat import refusal_reasons
from app.tables import describe_md, fmt_share

c.ensure_frame()
from app.labels import moe_caption
from engine import uncertainty
from engine.memory import PHASES
from planner import planning

s = c.require_valid(single=True)
models, gpus = c.merged_frames()
u, div = c.unit()
names = c.display_names(models)
gnames = c.display_names(gpus, short=True)

sc = c.scenario(s)
# the memory curve's axes: powers of two up to the model's context (or the sidebar's longer sequence)
ctx = int(models.set_index("id")["max_context"].get(s["model"], int(s["seq"])))  # not in the catalog: the guard says so
top = max(int(s["seq"]), ctx) if s["allow_long_context"] else ctx
candidates = 256 * 2 ** np.arange(0, 20)
seqs = sorted(set(candidates[candidates < top].tolist()) | {top} | ({int(s["seq"])} if int(s["seq"]) <= top else set()))
batches = sorted({1, 2, 4, 8, int(s["batch"])})
# the scenario, its what-if changes and its memory curve: one engine call (planning.breakdown)
explained = c.guard(c.breakdown, sc, models, gpus, tuple(seqs), tuple(batches))
row = explained["row"]
card = f"{sc['gpus']}× {gnames.get(s['gpu'], s['gpu'])}"

c.page_header("Breakdown & what-if", "Why the workload needs the memory it does, what limits it, and what would make "
              "it fit. The scenario is the sidebar's (model, GPU and GPU count included); every figure is per GPU.")
st.caption(describe_md(s) + f" · on {md_escape(card)}")
if "active_params" in row.index and pd.notna(row["active_params"]) and row["active_params"] != row["params"]:
    # issue 15: a mixture-of-experts model holds every expert but a token uses a few
    st.caption(moe_caption(int(row["params"]), int(row["active_params"]), str(row.get("kv_policy", ""))))
if "vision_params" in row.index and pd.notna(row["vision_params"]) and int(row["vision_params"]) > 0:
    # issue 25: a vision tower / projector is loaded beside the language model (in the weights)
    st.caption(f"Vision tower and projector: {int(row['vision_params']):,} parameters beside the language model's "
               f"{int(row['params']):,}, loaded in 16-bit and counted in the weights (frozen when training).")

problem = planning.lora_targets_problem(models, dict(sc), float(row.get("trainable_params", 0) or 0))
if problem:  # peft would not build these adapters: the run stops at its start (the CLI refuses it, exit 2)
    st.warning("peft would not start this run: " + md_escape(problem))
fits = bool(row["fits"]) if pd.notna(row["fits"]) else False
if not bool(row.get("compatible", True)):  # the card cannot run it, whatever its memory (catalog compatibility rules)
    st.warning(f"{md_escape(card)} cannot run this scenario, so it does not fit at any memory: "
               + md_escape(refusal_reasons(row["compatibility_notes"])))
cards = c.wrap_row()
cards.metric("Peak per GPU", c.fmt_mem(row["peak_bytes"]), help="The largest phase, runtime overhead included.")
cards.metric("Usable per GPU", c.fmt_mem(row["usable_bytes"]),
          fmt_share(float(row["memory_used_fraction"])).replace(" of each card", " used") + " · "
          + ("fits" if fits else "does not fit"),
          delta_color="green" if fits else "red", delta_arrow="off")
_dpo = str(row.get("objective", "sft")) == "dpo"  # (the batch counts preference pairs: two sequences each)
_serve = str(row.get("task")) == "infer"  # (the sidebar's "Concurrent sequences" and "Context per sequence")
# the unit goes in the label (sequences, pairs, tokens): a long value ("4,383 tokens") widens the card
cards.metric("Largest micro-batch (pairs)" if _dpo else "Most concurrent sequences" if _serve
             else "Largest micro-batch (sequences)", f"{int(row['max_batch']):,}",
             f"at {int(row['seq']):,} tokens", delta_color="off", delta_arrow="off",
             help=("Preference pairs (chosen + rejected) per GPU" if _dpo else "Sequences served at once"
                   if _serve else "Sequences per GPU") + " that still fit at this sequence length (0: not even one).")
cards.metric("Longest context (tokens)" if _serve else "Longest sequence (tokens)", f"{int(row['max_seq']):,}",
             f"at {int(row['batch']):,} concurrent sequence{'s' if int(row['batch']) != 1 else ''}" if _serve
             else f"at batch {int(row['batch']):,}", delta_color="off", delta_arrow="off",
             help="Tokens per sequence that still fit at this " + ("concurrency." if _serve else "micro-batch."))
cards.metric("CPU memory needed", c.fmt_mem(row["cpu_bytes"]), help="Offloaded or paged optimizer states and parameters, all processes.")
# issue 12: the band around the peak (engine/uncertainty.py): held-out error plus what is not measured
_band = uncertainty.band(row.to_frame().T, models).iloc[0]
st.caption(f"Peak per GPU likely between {c.fmt_mem(_band['peak_low_bytes'])} and {c.fmt_mem(_band['peak_high_bytes'])} "
           f"(−{_band['uncertainty_low_pct']:.1f}% / +{_band['uncertainty_high_pct']:.1f}% of the tensors: "
           f"{md_escape(state.dashboard_message(str(_band['uncertainty_reasons'])))}).")  # (the sidebar's words, no flag)
if float(row.get("allocator_cached_bytes", 0) or 0) > 0:  # reserved, reclaimable: not in the peak or the verdict
    st.caption(f"nvidia-smi and torch.cuda.max_memory_reserved() will show about "
               f"{c.fmt_mem(row['allocator_cached_bytes'])} more than the peak: the dropped 16-bit logits' block, "
               f"which PyTorch's caching allocator keeps reserved through the loss's backward and gives back "
               f"before it would run out of memory (docs/evidence.md).")
# issue 28: the verdicts are decided on the band's high side (engine/margins.py), never on the estimate alone
if pd.notna(row.get("safe_peak_bytes")):
    _at_estimate = bool(row["fits_at_estimate"]) if pd.notna(row.get("fits_at_estimate")) else False
    # the stack behind the margin: a training row's switches (the sidebar's Software stack); an inference row is a
    # transformers prefill, whose attention path the model decides (gpt-oss, Gemma 2: eager), not those switches
    _stack = (f"{md_escape(str(row.get('padding', 'padded')))} batch, {md_escape(str(row.get('attention', 'sdpa')))} "
              f"attention, {md_escape(str(row.get('loop', 'trainer')))} loop: the sidebar's Software stack"
              if str(row.get("task")) == "train" else
              "a transformers prefill, with the attention transformers runs for this model; the Serving page sizes "
              "vLLM, SGLang and llama.cpp")
    st.caption(f"Fits, the largest batch, the longest sequence and the GPUs needed are decided on the safe peak, "
               f"{c.fmt_mem(row['safe_peak_bytes'])}: the tensors' estimate +{float(row['verdict_margin_pct']):.0f}% "
               f"({_stack})."
               + (" The estimate alone would fit; the margin does not." if _at_estimate and not fits else ""))

# ---- by component ------------------------------------------------------------------------
st.markdown(f"#### By component, at the peak phase ({c.PHASE_LABELS.get(str(row['peak_phase']), row['peak_phase'])})")
comp_cols = [col for col in planning.COMPONENT_COLUMNS if col in row.index]
comp = pd.DataFrame({
    "component": [c.COMPONENT_LABELS.get(col, col) for col in comp_cols],
    "value": [float(row[col]) / div for col in comp_cols],
})
comp = comp[comp["value"] > 0].reset_index(drop=True)
if str(row.get("objective", "sft")) == "dpo":
    # preference tuning (engine/components.py dpo_parts): what the components above hold beside an SFT step
    _pairs, _ref = int(row["batch"]), str(row.get("dpo_reference"))
    _reference = {
        "copy": f"a frozen copy of the model, {c.fmt_mem(explained['reference_bytes'])} of the weights above",
        "adapters_off": "the policy itself with its LoRA adapters disabled (no second copy); its forward runs in "
                        "every step",
        "precomputed": "none in the step (its log-probs computed once before training)"}.get(_ref, md_escape(_ref))
    st.caption(f"DPO: {_pairs:,} preference pair{'s' if _pairs != 1 else ''} = {2 * _pairs:,} sequences (chosen and "
               f"rejected in one forward) of up to {int(row['seq']):,} tokens: the activations and the loss count "
               f"both. Reference model: {_reference}.")
comp["order"] = np.arange(len(comp))
comp["bar"] = "peak per GPU"
usable = float(row["usable_bytes"]) / div


def _limit(usable: float):
    return alt.Chart(pd.DataFrame({"x": [usable], "what": ["usable memory of the card"]})).mark_rule(
        color="#dc2626", strokeDash=[6, 3], size=2).encode(x="x:Q", tooltip=[alt.Tooltip("what:N"), alt.Tooltip("x:Q", format=",.2f")])


@c.chart
def _stack_chart(comp: pd.DataFrame, usable: float, u: str):
    stack = alt.Chart(comp).mark_bar(size=56).encode(
        x=alt.X("sum(value):Q", title=f"Memory per GPU ({u})", stack="zero"),
        y=alt.Y("bar:N", title=None),
        color=alt.Color("component:N", title="Component", sort=list(comp["component"]), legend=alt.Legend(labelLimit=320)),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("component:N", title="Component"), alt.Tooltip("value:Q", title=f"{u} per GPU", format=",.2f")],
    )
    return (stack + _limit(usable)).properties(height=40 + 22 * len(comp))


_stack_chart(comp, usable, u, width="stretch")
comp_view = pd.DataFrame({
    "Component": comp["component"],
    f"Per GPU ({u})": np.round(comp["value"], 3),
    "Share of peak (%)": np.round(comp["value"] / comp["value"].sum() * 100, 1),
})
c.table(comp_view, "breakdown_components", c.csv_settings(page="breakdown: components", peak_phase=str(row["peak_phase"])),
        formats={"Share of peak (%)": "%.1f%%", f"Per GPU ({u})": "%.3f"})

# ---- by phase -----------------------------------------------------------------------------
st.markdown("#### By phase of a step")
phase_names = [p for p in PHASES if pd.notna(row.get(f"{p}_phase_bytes"))]
phases = pd.DataFrame({
    "phase": [c.PHASE_LABELS.get(p, p) for p in phase_names],
    "value": [float(row[f"{p}_phase_bytes"]) / div for p in phase_names],
    "peak": ["sets the peak" if p == str(row["peak_phase"]) else "other phase" for p in phase_names],
})


@c.chart
def _phase_chart(phases: pd.DataFrame, u: str):
    pchart = alt.Chart(phases).mark_bar().encode(
        x=alt.X("value:Q", title=f"Tensors alive per GPU ({u}, before runtime overhead)"),
        y=alt.Y("phase:N", sort=list(phases["phase"]), title=None, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("peak:N", title=None, scale=alt.Scale(domain=["sets the peak", "other phase"], range=["#dc2626", "#93c5fd"])),
        tooltip=[alt.Tooltip("phase:N", title="Phase"), alt.Tooltip("value:Q", title=f"{u} per GPU", format=",.2f")],
    )
    return pchart.properties(height=60 + 32 * len(phases))


_phase_chart(phases, u, width="stretch")
st.caption("The peak is the largest phase, not the sum of everything: activations are gone by the optimizer step, "
           "gradients do not exist during the forward pass.")

# ---- what-if --------------------------------------------------------------------------------
st.markdown("#### What would make it fit" if not fits else "#### What-if: changes ranked")
if fits:
    st.caption("It fits as configured; the changes below show what each saves (room for a larger batch or longer "
               "sequences) and which ones would not fit.")
variants = explained["what_if"]
vview = pd.DataFrame({
    "Rank": variants["rank"].astype(int),
    "Change": variants["change"].astype(str),
    "Fits": variants["fits"].fillna(False).astype(bool),
    "GPUs": variants["gpus"].astype(int),
    "GPUs to fit": np.where(np.isfinite(variants["gpus_to_fit"].astype(float)),
                            variants["gpus_to_fit"].astype(float).fillna(0).clip(upper=1e9).astype(int).astype(str),
                            "more than 1,024"),
    f"Peak per GPU ({u})": c.mem(variants["peak_bytes"]),
    "Memory used (%)": np.round(variants["memory_used_fraction"].astype(float) * 100, 1),
    f"Saved vs now ({u})": c.mem(variants["saved_bytes"]),
    "Impact": variants["impact_label"].astype(str),
    "Trade-off": variants["tradeoff"].astype(str),
})
c.table(vview, "breakdown_what_if", c.csv_settings(page="breakdown: what-if"),
        formats={"Memory used (%)": "%.1f%%"},
        # the order planner/planning.py _ranked gives (the words said "least impact first", where the most memory
        # saved comes first: ZeRO-3 with offload, much slower, ranked above a kernel change of no impact)
        help={"Rank": "0 is the scenario as configured; then the changes that fit, on the fewest GPUs first, then the "
                      "most memory saved, then the least impact; then the rest in the same order (fewest GPUs needed "
                      "first). Changes that save nothing come after the others on the same GPUs. Where no single "
                      "change fits on these GPUs, the fewest changes that fit together lead as one 'Together: ...' row.",
              "GPUs to fit": "Its own GPU count when it fits; otherwise the count that would hold it with ZeRO-3 "
                             "(training) or tensor parallelism (serving).",
              "Impact": "none < slower < much slower < changes the run < changes the method or model."})
wchart = pd.DataFrame({"change": vview["Change"], "peak": vview[f"Peak per GPU ({u})"],
                       "fits": np.where(vview["Fits"], "fits", "does not fit")})


@c.chart
def _what_if_chart(wchart: pd.DataFrame, usable: float, u: str):
    bars = alt.Chart(wchart).mark_bar().encode(
        x=alt.X("peak:Q", title=f"Peak per GPU ({u})"),
        y=alt.Y("change:N", sort=list(wchart["change"]), title=None, axis=alt.Axis(labelLimit=320)),
        color=alt.Color("fits:N", title=None, scale=alt.Scale(domain=["fits", "does not fit"], range=["#16a34a", "#d1d5db"])),
        tooltip=[alt.Tooltip("change:N", title="Change"), alt.Tooltip("peak:Q", title=f"Peak per GPU ({u})", format=",.2f")],
    )
    return (bars + _limit(usable)).properties(height=40 + 24 * len(wchart))


_what_if_chart(wchart, usable, u, width="stretch")
st.caption("All changes are estimated together in one engine call. Red line: the card's usable memory.")

# ---- memory as a function of sequence length and batch ------------------------------------------
st.markdown("#### Memory against sequence length and batch")
curve = explained["curve"]
cdata = pd.DataFrame({"seq": curve["seq"].astype(int), "batch": curve["batch"].astype(int).astype(str),
                      "peak": c.mem(curve["peak_bytes"])})


@c.chart
def _curve_chart(cdata: pd.DataFrame, batch_order: list, usable: float, u: str):
    lines = alt.Chart(cdata).mark_line(point=True).encode(
        x=alt.X("seq:Q", title="Sequence length (tokens, log scale)", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("peak:Q", title=f"Peak per GPU ({u})"),
        color=alt.Color("batch:N", title="Micro-batch", sort=batch_order),
        tooltip=[alt.Tooltip("seq:Q", title="Tokens", format=","), alt.Tooltip("batch:N", title="Batch"),
                 alt.Tooltip("peak:Q", title=f"Peak ({u})", format=",.2f")],
    )
    hline = alt.Chart(pd.DataFrame({"y": [usable]})).mark_rule(color="#dc2626", strokeDash=[6, 3]).encode(y="y:Q")
    return (lines + hline).properties(height=340)


_curve_chart(cdata, [str(b) for b in batches], usable, u, width="stretch")
st.caption(f"Red line: usable memory of one {md_escape(gnames.get(s['gpu'], s['gpu']))}. "
           + (f"Up to the model's context of {ctx:,} tokens." if top == ctx else
              f"Up to the sequence asked, {top:,} tokens, beyond the model's context of {ctx:,} (sequences beyond a "
              "model's context allowed)."))
