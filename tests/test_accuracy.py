"""The engine against real PyTorch peaks measured by benchmarks/measure_peaks.py.

tests/data/measured_peaks.csv was produced by running Hugging Face *ForCausalLM training
steps and prefills under torch's MemTracker on fake tensors (see the script and the meta
file). Here, without torch, every measured row is compared with the engine's estimate
without the runtime overhead (which a fake-tensor run cannot see), per split: the
calibration rows (what the engine was fitted on) and the held-out rows (chosen before the
engine changes of issue 12: docs/accuracy.md). The comparison code is
benchmarks/accuracy_table.py, which also writes docs/accuracy.md's tables and README's sentence.
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy_table  # noqa: E402
from engine import estimate  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
MEASURED = accuracy_table.load(DATA / "measured_peaks.csv")
TOLERANCE = 0.10       # the first issue's bound for every row
CATEGORY_SHARE = 0.05  # a category may differ by at most 5% of the measured peak
scenario_frame = accuracy_table.scenario_frame


@pytest.fixture(scope="module")
def compared(models):
    result = accuracy_table.compare(MEASURED, models)
    result["estimate_no_overhead"] = result["ours"]
    return result


def test_the_first_54_rows_are_the_committed_measurements():
    # sha256 of tests/data/measured_peaks.csv as committed before issue 12 (git show
    # e5f5383:tests/data/measured_peaks.csv | sha256sum); issue 12 only appended columns and rows
    lines = (DATA / "measured_peaks.csv").read_text().splitlines()[:55]
    suffixes = [",freeze_layers,gpus,zero,split"] + [",0,1,0,calibration"] * 54
    assert all(line.endswith(sfx) for line, sfx in zip(lines, suffixes))
    original = "\n".join(line[:-len(sfx)] for line, sfx in zip(lines, suffixes)) + "\n"
    assert hashlib.sha256(original.encode()).hexdigest() == "f9909f6fb6efee6a5277cf7d31385a78b45853f12b5dd097e4073d19e028d5ca"


def test_both_splits_cover_the_new_mechanisms_and_families():
    assert set(MEASURED["split"]) == {"calibration", "heldout"}
    new = MEASURED.iloc[54:]
    for split in ("calibration", "heldout"):
        part = new[new["split"] == split]
        assert {"freeze", "full", "lora"} <= set(part["method"]), split
        assert "adafactor" in set(part["optimizer"]), split
        assert {"qwen2-1.5b", "gemma-2b", "gemma-2-2b", "mistral-7b"} & set(part["model"]), split
        assert (part["task"] == "infer").any(), split
    held = new[new["split"] == "heldout"]
    cal = MEASURED[MEASURED["split"] == "calibration"]
    # no held-out row repeats a calibration row's model, task, method, optimizer, batch x seq and
    # sharding (the probe's FSDP2 row over 4 ranks shares its model and shape with a one-GPU row)
    key = ["model", "task", "method", "optimizer", "batch", "seq", "gpus", "zero"]
    overlap = held.merge(cal[key].drop_duplicates(), on=key)
    assert overlap.empty, overlap[key]


def test_the_data_spans_the_space_users_ask_about():
    assert len(MEASURED) >= 30
    assert {"fp32", "amp_bf16", "bf16"} <= set(MEASURED["precision"])
    assert {"adamw", "adamw_fused", "sgd"} <= set(MEASURED["optimizer"].dropna())
    lora = MEASURED[MEASURED["method"] == "lora"]
    assert lora["lora_rank"].nunique() >= 2 and lora["lora_targets"].nunique() >= 2
    assert set(lora["grad_checkpointing"]) == {True, False}
    full = MEASURED[(MEASURED["method"] == "full") & (MEASURED["task"] == "train")]
    assert set(full["grad_checkpointing"]) == {True, False}
    assert (MEASURED["task"] == "infer").sum() >= 5
    assert MEASURED["batch"].min() == 1 and MEASURED["batch"].max() >= 16
    assert MEASURED["seq"].min() <= 512 and MEASURED["seq"].max() >= 8192
    assert {"llama-3.2-1b", "llama-2-7b", "llama-3-8b", "llama-2-70b"} <= set(MEASURED["model"])
    meta = json.loads((DATA / "measured_peaks.meta.json").read_text())
    assert meta["versions"]["torch"].startswith("2.")


def test_every_measured_peak_within_ten_percent(compared):
    known = np.array([_key(r) in KNOWN_MISSES for _, r in compared.iterrows()])
    bad = compared[(compared["error"].abs() > TOLERANCE) & ~known]
    assert bad.empty, bad[["model", "task", "method", "precision", "optimizer", "batch", "seq",
                           "grad_checkpointing", "measured", "estimate_no_overhead", "error"]].to_string()


def test_median_error_is_small(compared):
    assert compared["error"].abs().median() <= 0.05


def test_categories_match_the_measured_ones(compared):
    peak = MEASURED["peak_bytes"].to_numpy(dtype=float)
    ours = {
        "param_bytes": compared["weights_bytes"],
        "grad_bytes": compared["gradients_bytes"],
        "optimizer_bytes": compared["optimizer_bytes"],
        # MemTracker files everything made in forward as activations and everything made in
        # backward or in the optimizer step as temporaries; ours splits the same bytes finer
        "act_and_temp": compared[["activations_bytes", "logits_bytes", "autocast_copies_bytes",
                                  "workspace_bytes", "optimizer_temp_bytes", "kv_cache_bytes"]].sum(axis=1),
    }
    theirs = {
        "param_bytes": MEASURED["param_bytes"] + MEASURED["buffer_bytes"],
        "grad_bytes": MEASURED["grad_bytes"],
        "optimizer_bytes": MEASURED["optimizer_bytes"],
        "act_and_temp": MEASURED["activation_bytes"] + MEASURED["temp_bytes"] + MEASURED["other_bytes"],
    }
    # issue 12's rows: FSDP2's gathered parameters are Parameter storage to MemTracker (the engine's
    # ZeRO-3 workspace), and the known misses are listed below: those rows are not compared by
    # category here (the padded-batch mask and eager scores are in activations / workspace already)
    keep = ((MEASURED["zero"] != 3) & ~np.array([_key(r) in KNOWN_MISSES for _, r in MEASURED.iterrows()])).to_numpy().copy()
    # ... and a new row whose peak phase differs from ours (a near tie: its categories are of another moment)
    phase = compared["peak_phase"].astype(str).replace({"loss_backward": "backward", "backward_end": "backward",
                                                        "logits": "prefill", "attention": "prefill"}).to_numpy()
    keep &= (np.arange(len(MEASURED)) < 54) | (phase == MEASURED["peak_phase"].to_numpy())
    for name in ours:
        gap = np.where(keep, np.abs(ours[name].to_numpy(dtype=float) - theirs[name].to_numpy(dtype=float)) / peak, 0.0)
        worst = int(np.argmax(gap))
        assert gap[worst] <= CATEGORY_SHARE, (name, MEASURED.iloc[worst].to_dict(), float(gap[worst]))


def test_the_peak_phase_agrees(compared):
    # MemTracker's phases: forward / backward / optimizer / prefill. Our backward is split
    # into the loss gradient and the layers; our inference peak is prefill or logits.
    ours = compared["peak_phase"].astype(str).replace({"loss_backward": "backward", "backward_end": "backward", "logits": "prefill"})
    theirs = MEASURED["peak_phase"]
    agree = (ours.to_numpy() == theirs.to_numpy()).mean()
    assert agree >= 0.9, pd.DataFrame({"ours": ours, "theirs": theirs})[ours.to_numpy() != theirs.to_numpy()]


def test_docs_accuracy_tables_are_the_scripts_output(models):
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    assert accuracy_table.between(doc, accuracy_table.BEGIN, accuracy_table.END) == accuracy_table.render_doc(MEASURED, models)


def test_readme_states_the_held_out_figures_the_script_computes(models):
    readme = (ROOT / "README.md").read_text()
    sentence = accuracy_table.between(readme, accuracy_table.R_BEGIN, accuracy_table.R_END)
    assert sentence == accuracy_table.render_readme(MEASURED, models)
    assert "held-out" in sentence


# ---- per split (issue 12): the targets on the held-out rows ----------------------------------
# Held-out rows that miss a target, each with why (docs/accuracy.md "The first version's known misses, traced"). The tests below
# assert the targets on every other held-out row AND that exactly these rows miss, so a fix or a
# new miss shows up here; each known miss must still lie inside the uncertainty band
# (tests/test_uncertainty.py checks every measured row).
KNOWN_MISSES = {
    # (none: the three of the first version were traced and modelled, docs/accuracy.md)
}


def _key(row):
    return (row["model"], row["task"], int(row["batch"]), int(row["seq"]))


@pytest.fixture(scope="module")
def held_out(compared):
    held = compared[compared["split"] == "heldout"]
    return held


def _misses(frame, bad):
    return {_key(r) for _, r in frame[bad].iterrows()}


def test_held_out_median_error_within_two_percent(held_out):
    assert len(held_out) >= 25
    assert held_out["error"].abs().median() <= 0.02


def test_every_held_out_row_within_five_percent_but_the_known_misses(held_out):
    bad = held_out["error"].abs() > 0.05
    assert _misses(held_out, bad) <= set(KNOWN_MISSES), held_out[bad][["model", "method", "batch", "seq", "error"]]


def test_no_held_out_row_underestimated_by_more_than_three_percent_but_the_known_misses(held_out):
    bad = held_out["error"] < -0.03
    assert _misses(held_out, bad) == set(KNOWN_MISSES), held_out[bad][["model", "method", "batch", "seq", "error"]]


def test_held_out_categories_within_five_percent_of_the_peak_where_the_phase_agrees(compared):
    # MemTracker's categories are taken at its peak moment, ours at our peak phase: where the two
    # phases differ (a near tie) the categories are of different moments and not compared
    gaps = accuracy_table.category_gaps(MEASURED, compared)
    ours = compared["peak_phase"].astype(str).replace({"loss_backward": "backward", "backward_end": "backward",
                                                       "logits": "prefill"}).to_numpy()
    same = (ours == MEASURED["peak_phase"].to_numpy()) & (MEASURED["split"] == "heldout").to_numpy()
    known = np.array([_key(r) in KNOWN_MISSES for _, r in MEASURED.iterrows()])
    # FSDP2's gathered parameters are Parameter storage to MemTracker, the engine's ZeRO-3 workspace
    fsdp = (MEASURED["zero"] == 3).to_numpy()
    worst = gaps[same & ~known & ~fsdp].abs().max()
    assert same.sum() >= 20 and (worst <= CATEGORY_SHARE).all(), worst.to_dict()


# ---- issue 28: the second harness, the loops people run (tests/data/measured_loops.csv) -------------
LOOPS = pd.read_csv(DATA / "measured_loops.csv")


@pytest.fixture(scope="module")
def loops(models):
    return accuracy_table.compare_loops(LOOPS, models)


def test_the_loops_split_was_fixed_before_the_engine_changed():
    """The loops harness's split: calibration is Llama 3.2 1B plus one Gemma 2 and one Mistral row, and
    the Gemma 3 1B prefill and three training rows that found the SDPA sliding-window mask (Gemma 3 1B and 4B,
    Mistral 7B); every held-out row is another model or
    another batch x seq than any calibration row of its loop and method (docs/accuracy.md: committed
    before the engine change)."""
    cal, held = LOOPS[LOOPS["split"] == "calibration"], LOOPS[LOOPS["split"] == "heldout"]
    assert set(cal["model"]) == {"llama-3.2-1b", "gemma-2-2b", "mistral-7b", "gemma-3-1b", "gemma-3-4b", "gpt-oss-20b"}
    # (the sliding-window mask's calibration rows: the Gemma 3 1B prefill, and three training rows)
    assert len(cal[cal["model"].isin(["gemma-3-1b", "gemma-3-4b"])]) == 3
    assert len(held) >= 20 and set(LOOPS["loop"]) == {"trainer", "manual", "accelerate", "torchtune", "generate"}
    # (checkpointing in the key: the sliding-window mask's calibration LoRA of Gemma 3 4B at 1 x 8,192 runs
    # without it, the second probe's held-out one, measured before either engine change, with it)
    # (and the GPU count: the FSDP2 row of Llama 3.2 1B at 4 x 1,024 over 2 ranks, padded, shards what its
    # calibration twin on one GPU does not)
    seen = {(r.model, r.batch, r.seq, r.method, r.loop, r.grad_checkpointing, r.gpus) for r in cal.itertuples()}
    for r in held.itertuples():
        assert (r.model, r.batch, r.seq, r.method, r.loop, r.grad_checkpointing, r.gpus) not in seen
    # every mechanism has held-out rows: kept outputs with and without a cache, freeze, padded, a prefill
    assert {"manual", "trainer", "generate"} <= set(held["loop"])
    assert {"freeze", "lora", "full"} <= set(held["method"]) and set(held["padding"]) == {"padded", "unpadded"}


def test_loops_held_out_targets(loops):
    """Issue 28's targets on the held-out rows asked as they ran (--loop, --use-cache, --padding): median
    |error| within 2%, every row within 5%, none under by more than 3%."""
    held = loops[loops["split"] == "heldout"]
    err = held["error"]
    assert err.abs().median() <= 0.02, err.abs().median()
    assert (err.abs() <= 0.05).all(), held.loc[err.abs() > 0.05, ["model", "error"]]
    assert (err >= -0.03).all(), held.loc[err < -0.03, ["model", "error"]]


def test_the_loop_is_what_was_missing(loops):
    """Asked as the first harness's loop (the engine before issue 28), the same runs are under by more
    than 3% in most kept-outputs rows: the loop's terms are what closes the gap, not a factor."""
    manual = loops[loops["run_loop"].isin(["manual", "accelerate"]).to_numpy()]
    assert (manual["error_harness"] < -0.03).sum() >= len(manual) // 2
    assert (manual["error"].abs() <= 0.02).all()


def test_the_generality_probe_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The generality probe of 2026-12-05': the last 12 rows of the loops set, all
    held-out, measured with no engine change made for them: every row within 0.7%; asked as the harness
    loop, up to 11.2% under."""
    probe = loops.iloc[36:48]  # (rows 37 to 48 of the set; the second probe follows them)
    assert list(probe["model"])[:3] == ["qwen2.5-7b", "mistral-7b", "qwen2-1.5b"] and list(probe["seq"])[0] == 32768
    assert (probe["split"] == "heldout").all()
    assert probe["error"].abs().max() < 0.007, probe[["model", "error"]]
    assert round(float(probe["error_harness"].min()) * 100, 1) == -11.2


def test_the_second_probe_and_the_sliding_mask_rows_hold_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The second generality probe': rows 49 to 61 (architectures no harness had measured),
    of which the Gemma 3 1B 16k prefill became calibration when it found the SDPA sliding-window mask; then
    five prefills held out for that mask, committed before their data and after the engine change. Now: the
    probe's 12 held-out rows within 1.3%, the mask's five within 0.5%, one of them peaking at the mask phase."""
    probe, mask = loops.iloc[48:61], loops.iloc[61:66]
    assert list(probe["model"])[:2] == ["gemma-3-1b", "gemma-3-1b"] and list(probe["model"])[-1] == "gemma-3-1b"
    assert list(probe["split"]).count("calibration") == 1 and probe["split"].iloc[-1] == "calibration"
    held = probe[probe["split"] == "heldout"]
    assert len(held) == 12 and held["error"].abs().max() < 0.013, held[["model", "error"]]
    assert len(mask) == 5 and (mask["split"] == "heldout").all() and (mask["task"] == "infer").all()
    assert mask["error"].abs().max() < 0.005, mask[["model", "error"]]
    assert (mask["peak_phase"] == "mask").sum() == 1


def test_the_training_side_of_the_sliding_mask_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The training side of the same mask': rows 67 to 75, three calibration rows that found
    it and six held out after the change (one of them just below Mistral 7B's window): every one within 1.1%."""
    rows = loops.iloc[66:75]
    assert list(rows["split"]) == ["calibration"] * 3 + ["heldout"] * 6
    assert (rows["task"] == "train").all() and set(rows["model"]) == {"gemma-3-1b", "gemma-3-4b", "mistral-7b"}
    assert rows["error"].abs().max() < 0.011, rows[["model", "error"]]
    assert int(rows["seq"].iloc[-1]) == 4000 and str(rows["model"].iloc[-1]) == "mistral-7b"


def test_gpt_oss_rows_hold_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'gpt-oss attends eagerly under transformers': rows 76 to 82, three calibration rows
    and four held out after the eager change, every one within 0.5%."""
    rows = loops.iloc[75:82]
    assert (rows["model"] == "gpt-oss-20b").all() and list(rows["split"]) == ["calibration"] * 3 + ["heldout"] * 4
    assert rows["error"].abs().max() < 0.005, rows[["task", "method", "batch", "seq", "error"]]


def _paragraph_states(rows, heading: str, figures=("rows", "median", "largest", "worst")) -> str:
    """The paragraph of docs/accuracy.md that starts with `heading` (to its first blank line) holds the named figures
    of `rows` (their `error`), and the rows hold issue 28's per-row targets; returns the paragraph."""
    err = rows["error"] * 100
    text = (ROOT / "docs" / "accuracy.md").read_text()
    para = text[text.index(heading):]
    para = para[:para.index("\n\n")]
    stated = {"rows": f"{len(rows)} rows", "median": f"median |error| {err.abs().median():.2f}%",
              "largest": f"largest {err.abs().max():.2f}%", "largest_abs": f"largest |error| {err.abs().max():.2f}%",
              "worst": f"worst underestimate {err.min():+.2f}%"}
    for name in figures:
        assert stated[name] in para, stated[name]
    assert err.abs().max() <= 5 and err.min() >= -3  # issue 28's per-row targets
    return para


def _before_the_router_term(frame, models) -> float:
    """The tensors' estimate (peak - runtime overhead) of a one-row frame without the fp32 router weights' term
    (engine/constants.py FP32_ROUTER_WEIGHTS_MODEL_TYPES), the engine as it stood before the sixth probe."""
    from engine import constants
    kept = constants.FP32_ROUTER_WEIGHTS_MODEL_TYPES
    try:
        constants.FP32_ROUTER_WEIGHTS_MODEL_TYPES = ()
        before = estimate(frame, models)
    finally:
        constants.FP32_ROUTER_WEIGHTS_MODEL_TYPES = kept
    return float((before["peak_bytes"] - before["runtime_overhead_bytes"]).iloc[0])


def test_the_third_probe_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The third generality probe': rows 87 to 108, all held-out, committed before their data
    (0b2ad5e) and measured with no engine change made for them; the paragraph's figures (rows, median, largest
    |error|, worst underestimate) are this table's."""
    rows, measured = loops.iloc[86:108], LOOPS.iloc[86:108]
    assert len(rows) == 22 and (rows["split"] == "heldout").all()
    assert list(measured["model"])[:2] == ["llama-2-13b", "llama-2-7b"] and list(measured["model"])[-1] == "mixtral-8x7b"
    # every model family the probe names: Llama 2, Gemma 7B / 2 27B, 70B, the MoE models, the hybrids
    assert {"llama-2-13b", "gemma-7b", "gemma-2-27b", "llama-3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b",
            "llama-4-scout", "ernie-4.5-21b-a3b", "granite-4.0-h-micro", "qwen3-next-80b-a3b",
            "qwen3.5-27b"} <= set(measured["model"])
    _paragraph_states(rows, "**The third generality probe**")


def test_fsdp2_under_the_loops_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'FSDP2 under those loops': rows 109 to 113, held out, sharded over 2 to 8 ranks under the
    manual, accelerate and trainer loops; the paragraph's figures are this table's."""
    rows, measured = loops.iloc[108:113], LOOPS.iloc[108:113]
    assert len(rows) == 5 and (rows["split"] == "heldout").all() and (measured["zero"] == 3).all()
    assert set(measured["loop"]) == {"manual", "accelerate", "trainer"} and set(measured["gpus"]) == {2, 4, 8}
    _paragraph_states(rows, "**FSDP2 under those loops**", ("rows", "largest_abs", "worst"))


def test_the_fourth_probe_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The fourth probe': rows 114 to 122, held out, committed before their data (f2ccce7); the
    paragraph's figures are this table's."""
    rows, measured = loops.iloc[113:122], LOOPS.iloc[113:122]
    assert len(rows) == 9 and (rows["split"] == "heldout").all()
    assert {"fp16", "amp_fp16"} <= set(measured["precision"]) and "all-linear" in set(measured["lora_targets"])
    assert measured["model"].iloc[-1] == "llama-4-scout" and measured["task"].iloc[-1] == "infer"
    _paragraph_states(rows, "**The fourth probe**")


def test_the_fifth_probe_holds_as_docs_accuracy_says(loops, models):
    """docs/accuracy.md, 'The fifth probe': rows 123 to 128, committed before their data (568840d): DeepSeek-V3 (the
    last catalog architecture no harness had run), Phi-4 and Gemma 3 270M; the paragraph's figures are this table's
    (the prefill's figure before the MLA cache rule is the engine's own with --kv-policy full, 4.x's cache)."""
    rows, measured = loops.iloc[122:128], LOOPS.iloc[122:128]
    assert len(rows) == 6 and (rows["split"] == "heldout").all()
    assert list(measured["model"]) == ["deepseek-v3"] * 3 + ["phi-4"] + ["gemma-3-270m"] * 2
    assert list(measured["task"])[:3] == ["train", "train", "infer"]
    para = _paragraph_states(rows, "**The fifth probe**")
    # the prefill under the per-head cache transformers 4.x kept (the rule before) and without the sixth probe's fp32
    # router term (which came after): the engine as it stood, the figure the paragraph gives
    prefill = accuracy_table.loops_scenario_frame(measured.iloc[[2]].reset_index(drop=True)).assign(kv_policy="full")
    was = _before_the_router_term(prefill, models) / measured["peak_bytes"].iloc[2] - 1
    assert f"prefill was {was * 100:+.2f}%" in para


def test_the_sixth_probe_holds_as_docs_accuracy_says(loops, models):
    """docs/accuracy.md, 'The sixth probe': rows 129 to 131, DeepSeek-V2-Lite read from its config.json (full, LoRA,
    prefill), committed before their data; the paragraph's figures are this table's, and the prefill's figure before
    the fp32 router term is the engine's own without it."""
    rows, measured = loops.iloc[128:131], LOOPS.iloc[128:131]
    assert len(rows) == 3 and (rows["split"] == "heldout").all()
    assert (measured["model"] == "deepseek-v2-lite").all() and list(measured["task"]) == ["train", "train", "infer"]
    para = _paragraph_states(rows, "**The sixth probe**", ("rows", "largest", "worst"))
    # the prefill without the fp32 router weights' two k x h tensors (the term the row found)
    prefill = accuracy_table.loops_scenario_frame(measured.iloc[[2]].reset_index(drop=True))
    own = accuracy_table.with_config_models(models, ["deepseek-v2-lite"])
    was = _before_the_router_term(prefill, own) / measured["peak_bytes"].iloc[2] - 1
    assert f"prefill was {was * 100:+.2f}%" in para


def test_the_seventh_probe_holds_as_docs_accuracy_says(loops):
    """docs/accuracy.md, 'The seventh probe': rows 132 to 139, the config.json families no measured row had run (OLMo 2
    and 3, Seed-OSS, Granite 4.0 micro, ERNIE 4.5 0.3B, MiniMax-M2), committed before their data (a80818d); each
    model is read from its config file as a user's --model-config is; the paragraph's figures are this table's."""
    rows, measured = loops.iloc[131:139], LOOPS.iloc[131:139]
    assert len(rows) == 8 and len(LOOPS) == 139 and (rows["split"] == "heldout").all()
    assert set(measured["model"]) == {"olmo-2-1124-7b", "olmo-3-1025-7b", "seed-oss-36b-instruct", "granite-4.0-micro",
                                      "ernie-4.5-0.3b-pt", "minimax-m2"}
    assert set(measured["model"]) <= set(accuracy_table.CONFIG_MODELS)  # none of them is a catalog model
    para = _paragraph_states(rows, "**The seventh probe**")
    # what modelling the loops changed for them: the rows more than 3% under when asked as the first harness's loop
    under = rows[rows["error_harness"] < -0.03].sort_values("error_harness")
    assert f"{len(under)} of them would be more than 3%" in para
    for (_, row), name in zip(under.iterrows(), ("ERNIE's", "Olmo 3's")):
        assert f"{name} ({row['error_harness'] * 100:+.2f}%)" in para


def test_docs_and_readme_state_the_loops_figures_the_script_computes(models):
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    assert accuracy_table.between(doc, accuracy_table.L_BEGIN, accuracy_table.L_END) == \
        accuracy_table.render_loops_doc(LOOPS, models)
    readme = (ROOT / "README.md").read_text()
    assert accuracy_table.between(readme, accuracy_table.LR_BEGIN, accuracy_table.LR_END) == \
        accuracy_table.render_loops_readme(LOOPS, models)


# ---- LoRA dropout: a third set (tests/data/measured_dropout.csv, measure_peaks.py --set dropout) -----
DROPOUT = pd.read_csv(DATA / "measured_dropout.csv")


@pytest.fixture(scope="module")
def dropout_rows(models):
    return accuracy_table.compare_dropout(DROPOUT, models)


def test_the_dropout_split_was_fixed_before_the_engine_changed():
    """Calibration: Llama 3.2 1B only; held-out: other models, each at a batch x seq that no calibration row
    of its model uses in any set; both dropout values, both adapter dtypes, q,v and all-linear, with and
    without checkpointing among the held-out rows (docs/accuracy.md: committed before the engine change)."""
    cal, held = DROPOUT[DROPOUT["split"] == "calibration"], DROPOUT[DROPOUT["split"] == "heldout"]
    assert set(cal["model"]) == {"llama-3.2-1b"} and "llama-3.2-1b" not in set(held["model"])
    assert len(held) >= 8 and (DROPOUT["method"] == "lora").all() and (DROPOUT["lora_dropout"] > 0).all()
    every_cal = pd.concat([d[d["split"] == "calibration"] for d in (MEASURED, LOOPS, DROPOUT)])
    seen = {(r.model, r.batch, r.seq) for r in every_cal.itertuples()}
    assert not [r for r in held.itertuples() if (r.model, r.batch, r.seq) in seen]
    assert set(held["lora_dropout"]) == {0.05, 0.1} and set(held["adapter_dtype"]) == {"fp32", "bf16"}
    assert set(held["lora_targets"]) == {"q_proj,v_proj", "all"} and set(held["grad_checkpointing"]) == {True, False}


def test_dropout_held_out_targets(dropout_rows):
    """The same targets as the other sets on the held-out rows asked as they ran (--lora-dropout,
    --adapter-dtype): median |error| within 2%, every row within 5%, none under by more than 3%."""
    held = dropout_rows[dropout_rows["split"] == "heldout"]
    err = held["error"]
    assert err.abs().median() <= 0.02, err.abs().median()
    assert (err.abs() <= 0.05).all(), held.loc[err.abs() > 0.05, ["model", "error"]]
    assert (err >= -0.03).all(), held.loc[err < -0.03, ["model", "error"]]


def test_the_dropout_term_is_what_was_missing(dropout_rows):
    """Asked with lora_dropout 0 (the engine before the term) every row without checkpointing is under by
    more than 1% (the masks and copies every layer keeps); with checkpointing the peak is the start of
    backward, before any layer is recomputed, so the term changes nothing there, as measured."""
    gc = DROPOUT["grad_checkpointing"].to_numpy(dtype=bool)
    plain = dropout_rows[~gc]
    assert (plain["error_without"] < -0.01).all(), plain[["model", "error_without"]]
    assert (plain["error"].abs() <= 0.02).all(), plain[["model", "error"]]
    ckpt = dropout_rows[gc]
    assert len(ckpt) >= 3 and (ckpt["error"] == ckpt["error_without"]).all()


def test_dropout_twins_differ_by_the_term_to_the_byte(models):
    """Where the first harness measured the same run at p = 0, the measured difference is the engine's
    term exactly: Llama 3.2 1B bf16, fp32 adapters on q,v, 4 x 1,024 tokens, p = 0.1: the bool mask of each
    of 2 modules (2,048 values per token) in 15 of 16 layers (the first layer's q/v input needs no grad) =
    2 x 2,048 x 1 x 4,096 x 15 = 251,658,240 bytes; with autocast (amp_bf16, all-linear r16, 2 x 2,048, p =
    0.05) every module's mask only: (3 x 2,048 + 2,048 + 2 x 2,048 + 8,192) x 4,096 tokens x 16 layers less the
    first layer's q, k, v (3 x 2,048 x 4,096) = 1,317,011,456 bytes."""
    from engine import estimate
    cases = [(dict(precision="bf16", batch=4, seq=1024, lora_rank=8, lora_targets="q_proj,v_proj"), 0.1,
              2 * 2048 * 1 * 4096 * 15),
             (dict(precision="amp_bf16", batch=2, seq=2048, lora_rank=16, lora_targets="all"), 0.05,
              (3 * 2048 + 2048 + 2 * 2048 + 8192) * 4096 * 16 - 3 * 2048 * 4096)]
    for case, p, hand in cases:
        assert hand in (251_658_240, 1_317_011_456)
        def same(d):
            return d[(d["model"] == "llama-3.2-1b") & (d["method"] == "lora") & ~d["grad_checkpointing"]
                     & (d[list(case)] == pd.Series(case)).all(axis=1)]
        twin, row = same(MEASURED), same(DROPOUT)
        assert len(twin) == 1 and len(row) == 1
        assert int(row["peak_bytes"].iloc[0]) - int(twin["peak_bytes"].iloc[0]) == hand
        base = dict(model="llama-3.2-1b", task="train", method="lora", optimizer="adamw", **case)
        out = estimate(pd.DataFrame([dict(base, lora_dropout=0.0), dict(base, lora_dropout=p)]), models)
        tensors = out["peak_bytes"] - out["runtime_overhead_bytes"]  # (the overhead scales with the tensors)
        assert tensors.iloc[1] - tensors.iloc[0] == hand


def test_docs_state_the_dropout_figures_the_script_computes(models):
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    assert accuracy_table.between(doc, accuracy_table.D_BEGIN, accuracy_table.D_END) == \
        accuracy_table.render_dropout_doc(DROPOUT, models)
