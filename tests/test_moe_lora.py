"""LoRA and bitsandbytes on a mixture of experts as transformers 5.24 and peft 0.21.2 build them (engine/constants.py
PEFT_FUSED_MOE and BNB_FUSED_EXPERTS, engine/components.py fused_moe_lora_in_out and _expert_wrapper_kept), against the
whole-model steps measured on fake tensors in tests/data/measured_moe_lora.csv (benchmarks/measure_peaks.py --set
moe_lora). The comparison is the peak without the runtime overhead, as tests/test_accuracy.py."""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import estimate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy_table  # noqa: E402

DATA = ROOT / "tests" / "data"
CSV = DATA / "measured_moe_lora.csv"


def _sha(lines: list[bytes]) -> str:
    return hashlib.sha256(b"".join(lines)).hexdigest()


def test_the_rows_are_the_ones_measured_before_any_engine_change():
    # sha256 of the file as `measure_peaks.py --set moe_lora` wrote it, four times on 2026-12-06, each split committed
    # before the engine changed for it: the converted models (9 rows), the unconverted ones (6), Llama 4's prefill (2),
    # and Llama 4 Maverick (2: no engine change, a check of the Scout-derived terms); and on 2026-12-07 with two
    # Qwen1.5-MoE rows after them (38f4137, committed before their data: the shared expert gate and its down_proj
    # adapter's width, read from the first Qwen1.5-MoE row's trace); each run rewrote the rows before it byte for byte
    lines = CSV.read_bytes().splitlines(keepends=True)
    assert _sha(lines[:10]) == "3f57bf87436e3a483dcef4daaaeba1f0173f83fd425ef83b914195e9b9e5f6c8"
    assert _sha(lines[:16]) == "098de4422521868a178de4af1504f270d8be1c78fa4e17a3c9e30821ef6dfa51"
    assert _sha(lines[:18]) == "64d986676f56596af3077818a9338f808b0a407243fa7ff7e6c0d39e1dc87aa3"
    assert _sha(lines[:20]) == "f6f32f8f6603a42236f54a62c43dfdb75b7202f3b0cd5a179c51a59a850e807e"
    assert _sha(lines) == "fd730033beefb9a1becd9f2733f25bc594dfff1cee04ac94d550f3a14bbd9c05"
    rows = pd.read_csv(CSV)
    cal = rows[rows["split"] == "calibration"]
    assert set(cal["model"]) == {"qwen3-30b-a3b"} and set(cal["seq"]) == {1024}
    held = rows[rows["split"] == "heldout"]
    assert {"mixtral-8x7b", "ernie-4.5-21b-a3b", "gpt-oss-20b", "qwen1.5-moe-a2.7b", "llama-4-scout",
            "llama-4-maverick"} <= set(held["model"])
    assert len(held) == 19


@pytest.fixture(scope="module")
def compared(models):
    measured = pd.read_csv(CSV)
    # ERNIE 4.5 and Qwen1.5-MoE from their config files (accuracy_table.CONFIG_MODELS)
    models = accuracy_table.with_config_models(models, measured["model"])
    result = estimate(accuracy_table.scenario_frame(measured), models)
    measured["ours"] = (result["peak_bytes"] - result["runtime_overhead_bytes"]).to_numpy()
    measured["error"] = measured["ours"] / measured["peak_bytes"] - 1
    measured["ours_trainable"] = result["trainable_params"].to_numpy()
    return measured


UNCONVERTED = ("gpt-oss-20b", "qwen1.5-moe-a2.7b", "llama-4-scout", "llama-4-maverick")


def test_the_adapters_peft_puts_on_the_fused_experts_are_counted_exactly(compared):
    # all-linear: gate_up_proj at twice the rank and down_proj on every expert (ParamWrapper) and the router; the
    # engine counted a dense MLP of intermediate_size before (Qwen3-30B-A3B r 16: 32,243,712)
    linear = compared[compared["lora_targets"] == "all-linear"]
    assert (linear["ours_trainable"] == linear["trainable_params"]).all(), linear[["model", "ours_trainable"]]
    assert set(linear["trainable_params"]) == {996_507_648, 359_665_664, 433_146_880, 7_962_624, 15_925_632}


def test_a_mixture_of_experts_peft_does_not_convert_adapts_its_linear_modules_alone(compared):
    # gpt-oss: q/k/v/o alone (7,962,624 at r 16, where the engine counted 24,551,424: a dense MLP of 4 experts' width on
    # every layer); Qwen1.5-MoE: attention, the shared expert and its gate; Llama 4 Scout: attention and the shared expert
    rows = compared[compared["model"].isin(UNCONVERTED) & (compared["method"] == "lora")]
    assert len(rows) == 9
    exact = rows[(rows["lora_targets"] != "all") | (rows["model"] != "qwen1.5-moe-a2.7b")]
    assert (exact["ours_trainable"] == exact["trainable_params"]).all(), exact[["model", "ours_trainable"]]
    assert set(exact["trainable_params"]) == {7_962_624, 15_925_632, 55_836_672, 65_273_856, 1_572_864}
    # the seven names on Qwen1.5-MoE leave its shared_expert_gate (nn.Linear(h, 1)) out; the engine reads them as
    # all-linear (_every_target), 24 x 8 x 2,049 values over: the safe side
    listed = rows[(rows["model"] == "qwen1.5-moe-a2.7b") & (rows["lora_targets"] == "all")].iloc[0]
    assert listed["ours_trainable"] - listed["trainable_params"] == 24 * 8 * (2048 + 1)


def test_held_out_rows_meet_the_targets_and_none_is_under_by_more_than_two_percent(compared):
    # before: -49.2% .. +0.5% (the rebuilt expert stacks and the adapters' states not counted); the one row over is
    # Mixtral with the seven names listed, which peft reads as no expert (the engine, and the configs the planner
    # writes, read them as all-linear: engine/components.py _every_target). Llama 4 Scout without checkpointing was
    # -25.0% (every expert runs every token: DENSE_EXPERTS_MODEL_TYPES), its prefills -2.1%; Maverick, measured after
    # those terms were written and not used for them, was -18.7% and -2.4% before them
    held = compared[compared["split"] == "heldout"]
    err = held["error"].to_numpy()
    assert np.median(np.abs(err)) <= 0.02 and np.all(err >= -0.02), held[["model", "seq", "error"]]
    listed = held[(held["model"] == "mixtral-8x7b") & (held["lora_targets"] == "all")]
    assert len(listed) == 1 and 0 < listed["error"].iloc[0] < 0.06
    rest = held.drop(listed.index)
    assert np.all(np.abs(rest["error"]) <= 0.02), rest[["model", "seq", "error"]]


def test_calibration_rows_are_within_two_percent(compared):
    cal = compared[compared["split"] == "calibration"]
    assert len(cal) == 2 and np.all(np.abs(cal["error"]) <= 0.02), cal[["seq", "grad_checkpointing", "error"]]


def _one(models, catalog_gpus, **ask):
    row = {"task": "train", "precision": "bf16", "batch": 1, "seq": 1024, "grad_checkpointing": True, **ask}
    return estimate(pd.DataFrame([row]), models, catalog_gpus).iloc[0]


def test_bitsandbytes_leaves_the_fused_experts_in_sixteen_bits(models, gpus):
    # transformers 5.24 replace_with_bnb_linear swaps nn.Linear alone: Mixtral 8x7B's experts (45,097,156,608 values)
    # stay bf16 under QLoRA, and fp32 under peft's prepare_model_for_kbit_training; its attention is 4-bit
    experts = 32 * 8 * 3 * 4096 * 14336
    qlora = _one(models, gpus, model="mixtral-8x7b", method="qlora", lora_targets="q_proj,v_proj", kbit_prep="off")
    prep = _one(models, gpus, model="mixtral-8x7b", method="qlora", lora_targets="q_proj,v_proj", kbit_prep="on")
    assert qlora["weights_bytes"] > experts * 2 and prep["weights_bytes"] > experts * 4
    assert prep["weights_bytes"] - qlora["weights_bytes"] >= experts * 2
    # an int4 base is bitsandbytes' FP4 in every config the planner writes (planner/exports.py BNB_BASES): the same
    fp4 = _one(models, gpus, model="mixtral-8x7b", method="lora", base_precision="int4", lora_targets="q_proj,v_proj")
    assert fp4["weights_bytes"] > experts * 2
    # a dense model keeps every linear 4-bit: Llama 3 8B's QLoRA weights are under 6 GB
    dense = _one(models, gpus, model="llama-3-8b", method="qlora", lora_targets="q_proj,v_proj", kbit_prep="off")
    assert dense["weights_bytes"] < 6e9
    # LitGPT's own MoE has nn.Linear experts, which Fabric's bitsandbytes plugin quantizes
    litgpt = _one(models, gpus, model="mixtral-8x7b", method="qlora", lora_targets="q_proj,v_proj", recipe="litgpt")
    assert litgpt["weights_bytes"] < experts * 1.0
    # NF4 inference through transformers likewise
    infer = _one(models, gpus, model="mixtral-8x7b", task="infer", precision="nf4", method="full")
    assert infer["weights_bytes"] > experts * 2


def test_lora_on_a_fused_mixture_of_experts_keeps_every_value_finite_and_positive(models, gpus):
    # the property search's seed 272934100548156848: Mixtral with up_proj alone counted paged adapters peft never makes;
    # seed 5584044324347088877: Llama 4 Scout (unconverted) with gate_proj alone, its MLP adapters' dims at the routed
    # width where their count was the shared expert's
    for targets in ("up_proj", "gate_proj", "q_proj,up_proj", "gate_proj,up_proj,down_proj", "down_proj", "all"):
        for model in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "llama-4-scout", "gpt-oss-20b"):
            row = _one(models, gpus, model=model, method="qlora", lora_targets=targets, optimizer="paged_adamw_32bit",
                       offload="optimizer", zero=1, gpus=8)
            for col in ("cpu_bytes", "paged_optimizer_bytes", "peak_bytes", "activations_bytes", "optimizer_bytes"):
                assert np.isfinite(row[col]) and row[col] >= 0, (model, targets, col, row[col])
    seed_row = _one(models, gpus, model="llama-4-scout", method="qlora", precision="fp16", optimizer="paged_adamw_32bit",
                    batch=58, seq=5, lora_rank=2, lora_targets="gate_proj", zero=3, gpus=3, base_precision="int8")
    for col in ("cpu_bytes", "paged_optimizer_bytes"):
        assert np.isfinite(seed_row[col]) and seed_row[col] >= 0, (col, seed_row[col])


def test_docs_state_the_figures_this_comparison_gives(compared):
    """docs/accuracy.md's paragraph on LoRA over a mixture of experts quotes these figures: they are this test's own."""
    held = compared[compared["split"] == "heldout"]["error"].to_numpy() * 100
    cal = compared[compared["split"] == "calibration"]["error"].to_numpy() * 100
    text = " ".join((ROOT / "docs" / "accuracy.md").read_text().split())
    quoted = (f"median |error| {np.median(np.abs(held)):.2f}%, from {held.min():+.2f}% (Mixtral all-linear 1 x 2,048 "
              f"with checkpointing) to {held.max():+.2f}% (Mixtral with the seven names listed")
    assert quoted in text, quoted
    assert f"the 2 calibration rows (Qwen3-30B-A3B 1 x 1,024) {cal.min():+.2f}% and {cal.max():+.2f}%" in text
    assert f"the {len(held)} held-out rows (" in text
    maverick = compared[compared["model"] == "llama-4-maverick"].set_index("task")["error"] * 100
    assert f"to {maverick['train']:+.2f}% and {maverick['infer']:+.2f}% with no change for it" in text


@pytest.mark.parametrize("target, key", [("trl", "lora_target_modules:"), ("axolotl", "lora_target_modules:")])
def test_llama4_configs_name_the_seven_projections(target, key):
    """peft 0.21.2's all-linear wraps Llama 4's router (an nn.Linear returning a tuple) and the first forward fails
    (engine/constants.py PEFT_ALL_LINEAR_FAILS): a LoRA over 'all' names the seven projections for Llama 4, and keeps
    the shorthand for the others."""
    from tests.clirun import run_cli

    code, out, err = run_cli("estimate", "--model", "llama-4-scout", "--method", "lora", "--lora-targets", "all",
                             "--gpu", "h100-sxm-80gb", "--gpus", "8", "--export", target)
    assert code == 0, err
    assert "all-linear" not in out.replace("peft's all-linear shorthand", "") and "lora_target_linear" not in out
    assert key in out and all(name in out for name in ("q_proj", "o_proj", "gate_proj", "down_proj"))
    assert "the first forward fails" in out
    code, out, err = run_cli("estimate", "--model", "llama-3-8b", "--method", "lora", "--lora-targets", "all",
                             "--gpu", "h100-sxm-80gb", "--export", target)
    assert code == 0, err
    assert ("- all-linear" in out) if target == "trl" else ("lora_target_linear: true" in out)


@pytest.mark.parametrize("model, targets, said", [
    ("qwen3-30b-a3b", "up_proj", "peft raises for up_proj alone"),
    ("qwen3-30b-a3b", "q_proj,gate_proj", "peft raises for gate_proj alone"),
    ("gpt-oss-20b", "gate_proj,up_proj,down_proj", "adapt no module of gpt-oss-20b"),
    ("mixtral-8x7b", "down_proj", "adapt no module of mixtral-8x7b"),
])
def test_a_lora_peft_would_not_build_is_refused(model, targets, said):
    """peft 0.21.2 raises for these (run on small Qwen3-MoE and Mixtral configs in the measuring venv): the plan of a
    run that cannot start is bad input, exit 2, with what is accepted (planner/planning.py lora_targets_problem)."""
    from tests.clirun import run_cli

    code, out, err = run_cli("estimate", "--model", model, "--method", "lora", "--lora-targets", targets,
                             "--gpu", "h100-sxm-80gb", "--gpus", "8")
    assert code == 2 and said in err and "accepted:" in err, (code, err)


@pytest.mark.parametrize("model, targets", [("qwen3-30b-a3b", "gate_proj,up_proj"), ("mixtral-8x7b", "q_proj,down_proj"),
                                            ("gpt-oss-20b", "q_proj,v_proj"), ("llama-3-8b", "up_proj")])
def test_a_lora_peft_builds_is_planned(model, targets):
    from tests.clirun import run_cli

    code, out, err = run_cli("estimate", "--model", model, "--method", "lora", "--lora-targets", targets,
                             "--gpu", "h100-sxm-80gb", "--gpus", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["trainable_params"] > 0


def test_a_sweep_leaves_out_the_lora_rows_estimate_refuses():
    """One scenario, one answer: a sweep row whose LoRA peft would not build (up_proj alone on Qwen3-MoE, on Mixtral)
    is left out and named, as `estimate` refuses it; the other rows stay."""
    import csv
    import io

    from tests.clirun import run_cli

    code, out, err = run_cli("sweep", "--models", "qwen3-30b-a3b,llama-3-8b,mixtral-8x7b", "--gpu-ids", "h100-sxm-80gb",
                             "--methods", "lora,full", "--lora-targets", "up_proj", "--out", "-")
    assert code == 0, err
    rows = {(r["model"], r["method"]) for r in csv.DictReader(io.StringIO(out))}
    assert rows == {("qwen3-30b-a3b", "full"), ("llama-3-8b", "lora"), ("llama-3-8b", "full"), ("mixtral-8x7b", "full")}
    assert "left out LoRA rows of qwen3-30b-a3b, mixtral-8x7b" in err


def _errors_without_the_shared_expert_terms(models, rows):
    """The rows' errors with the engine as it was before the shared expert's gate and its down_proj adapter's width were
    read (Inputs.shared_gate 0, Inputs.down_f None)."""
    import dataclasses

    entry = sys.modules["engine.estimate"]  # (the module: engine.estimate, the attribute, is its function)
    saved = entry.inputs

    def older(*args, **kwargs):
        return dataclasses.replace(saved(*args, **kwargs), shared_gate=0.0, down_f=None)
    entry.inputs = older
    try:
        models = accuracy_table.with_config_models(models, rows["model"])
        result = estimate(accuracy_table.scenario_frame(rows), models)
    finally:
        entry.inputs = saved
    return (result["peak_bytes"] - result["runtime_overhead_bytes"]).to_numpy() / rows["peak_bytes"].to_numpy() - 1


def test_qwen2_moe_shared_expert_gate_and_down_proj_width_hold_on_rows_measured_after(compared, models):
    """docs/accuracy.md: Qwen1.5-MoE's all-linear 1 x 2,048 row (line 12 of the file) was traced to read what its shared
    expert keeps (the gate's product keeps the expert's output, the adapted gate an fp32 copy of its input, down_proj's
    adapter a copy at the shared expert's width); the last two rows were committed after that and before their data
    (38f4137), held out."""
    traced = compared.iloc[[11]]
    after = compared.iloc[19:21]
    assert (traced["model"] == "qwen1.5-moe-a2.7b").all() and (after["model"] == "qwen1.5-moe-a2.7b").all()
    assert (after["split"] == "heldout").all() and not after["grad_checkpointing"].any()
    err = after["error"].to_numpy() * 100
    assert np.all(np.abs(err) <= 0.5), after[["lora_targets", "error"]]
    rows = pd.concat([traced, after])
    before = _errors_without_the_shared_expert_terms(models, rows) * 100
    now = rows["error"].to_numpy() * 100
    text = " ".join((ROOT / "docs" / "accuracy.md").read_text().split())
    quoted = (f"Qwen1.5-MoE's traced all-linear row went from {before[0]:+.2f}% to {now[0]:+.2f}%; the two rows committed "
              f"after it and before their data (2 x 1,024 all-linear, 1 x 4,096 q, v at r 8) would have been "
              f"{before[1]:+.2f}% and {before[2]:+.2f}% and are {now[1]:+.2f}% and {now[2]:+.2f}%.")
    assert quoted in text, quoted
