"""objective dpo (engine/components.py dpo_parts, docs/stacks.md "DPO"): the measured set's held-out bound, the
terms by hand, the sft rows untouched, the refusals, every surface of the column, the exports."""

import json
import sys

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.stacks import DPO_RECIPES, RECIPES, TRL_TILE_TOKENS, TRL_TILE_VOCAB, recipe_value
from tests.clirun import run_cli
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy_table  # noqa: E402

DPO = pd.read_csv(ROOT / "tests" / "data" / "measured_dpo.csv")
BASE = dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", optimizer="adamw", batch=1, seq=1024)


@pytest.fixture(scope="module")
def dpo_rows(models):
    return accuracy_table.compare_dpo(DPO, models)


def _tensors(models, *rows):
    out = estimate(pd.DataFrame(list(rows)), models)
    return out, (out["peak_bytes"] - out["runtime_overhead_bytes"]).to_numpy()


def test_the_dpo_split_was_fixed_before_the_engine_changed():
    """TRL's rows: calibration Llama 3.2 1B only; held-out four other models (no held-out row shares a calibration
    row's model), full and LoRA, q,v and all-linear, with and without checkpointing, at batch x seq none of the
    calibration rows uses. LLaMA-Factory's rows: all held-out (its whole-logits term was derived from its code and
    committed before they were run)."""
    trl, lf = DPO[DPO["dpo_impl"] == "trl"], DPO[DPO["dpo_impl"] == "llama-factory"]
    cal, held = trl[trl["split"] == "calibration"], trl[trl["split"] == "heldout"]
    assert set(cal["model"]) == {"llama-3.2-1b"} and "llama-3.2-1b" not in set(held["model"])
    assert len(set(held["model"])) == 4 and len(held) == 8 and (DPO["objective"] == "dpo").all()
    assert set(held["method"]) == {"full", "lora"} and set(held["grad_checkpointing"]) == {True, False}
    assert set(held.loc[held["method"] == "lora", "lora_targets"]) == {"q_proj,v_proj", "all"}
    assert not set(zip(held["batch"], held["seq"], held["method"])) & set(zip(cal["batch"], cal["seq"], cal["method"]))
    assert len(lf) == 4 and (lf["split"] == "heldout").all() and set(lf["method"]) == {"full", "lora"}
    assert len(DPO) == 16


def test_dpo_held_out_error_bound(dpo_rows):
    """The held-out rows asked as they ran (--objective dpo; LLaMA-Factory's under --recipe llama-factory): median
    |error| within 1%, every row within 2.5%, none under by more than 2% (measured: median 0.14%, max 1.66%,
    docs/accuracy.md); LLaMA-Factory's peak at its reference forward, as the engine's forward phase."""
    held = dpo_rows[dpo_rows["split"] == "heldout"]
    err = held["error"]
    assert len(held) == 12
    lf = (DPO["dpo_impl"] == "llama-factory").to_numpy()
    assert set(dpo_rows.loc[lf, "peak_phase"]) == {"forward"} and set(DPO.loc[lf, "peak_phase"]) == {"reference"}
    assert err.abs().median() <= 0.01, err.abs().median()
    assert (err.abs() <= 0.025).all(), held.loc[err.abs() > 0.025, ["model", "error"]]
    assert (err >= -0.02).all(), held.loc[err < -0.02, ["model", "error"]]


def test_the_objective_is_what_was_missing(dpo_rows):
    """Asked as an sft row of the same 2 x batch sequences every held-out row but one misses by more than 2% (no
    reference copy, the SFT loss's whole logits where TRL's head keeps none, no reference forward beside them)."""
    held = dpo_rows[dpo_rows["split"] == "heldout"]
    assert (held["error_without"].abs() > 0.02).sum() >= 11, held[["model", "error_without"]]


def test_docs_state_the_dpo_figures_the_script_computes(models):
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    assert accuracy_table.between(doc, accuracy_table.P_BEGIN, accuracy_table.P_END) == \
        accuracy_table.render_dpo_doc(DPO, models)


def test_sft_is_the_default_and_asking_it_changes_nothing(models, gpus):
    rows = [BASE, dict(BASE, method="lora", batch=4, grad_checkpointing=True), dict(BASE, recipe="torchtune")]
    a = estimate(pd.DataFrame(rows), models, gpus)
    b = estimate(pd.DataFrame([dict(r, objective="sft") for r in rows]), models, gpus)
    pd.testing.assert_frame_equal(a, b[a.columns])
    assert (a["objective"] == "sft").all()


def test_a_full_dpo_row_holds_the_reference_copy_and_twice_the_sequences(models):
    """Llama 3.2 1B full bf16, 1 pair x 1,024, against the same with precomputed reference log-probs: the copy is
    the model's bf16 weights, 1,235,814,400 x 2 bytes, in every training phase (the optimizer step's too)."""
    out, _ = _tensors(models, dict(BASE, objective="dpo"), dict(BASE, objective="dpo", dpo_reference="precomputed"))
    copy = 1_235_814_400 * 2
    assert out["optimizer_phase_bytes"].iloc[0] - out["optimizer_phase_bytes"].iloc[1] == copy
    assert list(out["dpo_reference"]) == ["copy", "precomputed"]


def test_trl_head_terms_by_hand(models):
    """TRL's fused head (trl 1.16.0 trl/kernels/chunked_logprob.py): at the head's backward a full row holds the
    tile buffer (4,096 x 32,768 bf16), lm_head's fp32 gradient and its bf16 copy ((4 + 2) x V x h) and per token of
    the 2 x batch sequences the fp32 gradient of the hidden states and its bf16 copy ((4 + 2) x h) and 28 bytes; a
    LoRA row the buffer and per token (4 + 2) x h + the saved copy of the hidden states (2 x h) + 28."""
    V, h = 128256, 2048
    tokens = 2 * 1 * 1024
    tile = TRL_TILE_TOKENS * TRL_TILE_VOCAB * 2
    out, _ = _tensors(models, dict(BASE, objective="dpo"), dict(BASE, method="lora", objective="dpo"))
    full_head = tile + 6 * V * h + tokens * (6 * h + 28)
    lora_head = tile + tokens * (6 * h + 2 * h + 28)
    assert out["logits_bytes"].iloc[0] == full_head and out["peak_phase"].iloc[0] == "loss_backward"
    assert out["logits_bytes"].iloc[1] == lora_head


def test_dpo_doubles_the_per_token_terms_of_the_stack(models):
    """The saved activations of 1 pair are those of 2 sequences (precomputed: no reference, the same loss terms
    aside)."""
    out = estimate(pd.DataFrame([dict(BASE, method="lora", objective="dpo", dpo_reference="precomputed"),
                                 dict(BASE, method="lora", batch=2)]), models)
    assert list(out["peak_phase"]) == ["loss_backward", "loss_backward"]
    assert out["activations_bytes"].iloc[0] == out["activations_bytes"].iloc[1] > 0


def test_recipe_reference_defaults():
    for recipe in ("hf", "llama-factory", "axolotl", "torchtune", "unsloth", "deepspeed"):
        assert recipe_value(recipe, "dpo_reference", "full", False) == "copy"
        assert recipe_value(recipe, "dpo_reference", "lora", False) == "adapters_off"
        assert recipe_value(recipe, "dpo_reference", "qlora", True) == "adapters_off"
        assert RECIPES[recipe]["dpo_reference"][1]
    assert set(DPO_RECIPES) == {"hf", "deepspeed", "unsloth", "axolotl", "llama-factory", "torchtune"}


def test_the_reference_forward_costs_a_forward_of_flops(models, gpus):
    rows = [dict(BASE, objective="dpo", gpu="h100-sxm-80gb"), dict(BASE, gpu="h100-sxm-80gb"),
            dict(BASE, objective="dpo", dpo_reference="precomputed", gpu="h100-sxm-80gb")]
    out = estimate(pd.DataFrame(rows), models, gpus)
    f = out["train_flops"].to_numpy()
    assert f[2] == f[1] and f[0] > f[1] and abs(f[0] / f[1] - 4 / 3) < 0.02


@pytest.mark.parametrize("args, words", [
    (("--task", "infer", "--objective", "dpo"), "objective 'dpo' applies to training"),
    (("--recipe", "litgpt", "--method", "lora", "--objective", "dpo"), "has no trainer under recipe 'litgpt'"),
    (("--objective", "ppo"), "ppo"),
    (("--objective", "dpo", "--dpo-reference", "adapters_off"), "dpo_reference 'adapters_off' needs adapters"),
    # references the recipe's DPO trainer cannot hold (engine/stacks.py DPO_NO_PRECOMPUTED, DPO_NO_ADAPTER_COPY)
    (("--objective", "dpo", "--recipe", "llama-factory", "--method", "lora", "--dpo-reference", "precomputed"),
     "dpo_reference 'precomputed' is not run by recipe 'llama-factory'"),
    (("--objective", "dpo", "--recipe", "torchtune", "--dpo-reference", "precomputed"),
     "dpo_reference 'precomputed' is not run by recipe 'torchtune'"),
    (("--objective", "dpo", "--recipe", "torchtune", "--method", "qlora", "--dpo-reference", "copy"),
     "dpo_reference 'copy' with method 'qlora' is not run by recipe 'torchtune'"),
    (("--objective", "dpo", "--recipe", "axolotl", "--method", "lora", "--dpo-reference", "copy"),
     "dpo_reference 'copy' with method 'lora' is not run by recipe 'axolotl'"),
])
def test_bad_objective_rows_exit_2_with_one_line(args, words):
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", *args)
    assert code == 2, (code, out, err)
    assert words in err and "accepted" in err and "Traceback" not in err


def test_the_references_a_recipe_runs_are_accepted(models):
    """The refusals above are only those: a copy under torchtune's full_dpo_distributed, a copy beside adapters under
    LLaMA-Factory (its ref_model), precomputed log-probs under TRL's recipes, and an sft row with any reference."""
    rows = [dict(BASE, objective="dpo", recipe="torchtune", dpo_reference="copy"),
            dict(BASE, objective="dpo", recipe="llama-factory", method="lora", dpo_reference="copy"),
            dict(BASE, objective="dpo", recipe="axolotl", method="lora", dpo_reference="precomputed"),
            dict(BASE, recipe="torchtune", method="lora", dpo_reference="precomputed")]
    out = estimate(pd.DataFrame(rows), models)
    assert list(out["dpo_reference"]) == ["copy", "copy", "precomputed", "precomputed"]


def test_estimate_json_has_the_objective_and_the_reference():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--objective", "dpo", "--json")
    assert code == 0, err
    row = json.loads(out)
    row = row[0] if isinstance(row, list) else row
    assert row["objective"] == "dpo" and row["dpo_reference"] == "adapters_off"


def test_sweep_csv_has_the_objective_column(tmp_path):
    path = tmp_path / "s.csv"
    code, out, err = run_cli("sweep", "--models", "llama-3.2-1b", "--methods", "lora", "--objective", "dpo",
                             "--out", str(path))
    assert code == 0, err
    frame = pd.read_csv(path, comment="#")
    assert len(frame) and set(frame["objective"]) == {"dpo"} and set(frame["dpo_reference"]) == {"adapters_off"}
    assert np.all(np.isfinite(frame["peak_bytes"]))


# ---- exports (planner/exports.py) ---------------------------------------------------------------------------------
def _export(target, *args):
    return run_cli("estimate", "--model", "llama-3.2-1b", "--objective", "dpo", "--export", target, *args)


@pytest.mark.parametrize("target, method, lines", [
    ("trl", "lora", ["run: trl dpo --config FILE", "beta: 0.1", "precompute_ref_log_probs: false", "- sigmoid"]),
    ("llama-factory", "lora", ["stage: dpo", "pref_beta: 0.1", "pref_loss: sigmoid", "ranking: true"]),
    ("llama-factory", "full", ["stage: dpo", "finetuning_type: full"]),
    ("axolotl", "lora", ["rl: dpo"]),
    ("torchtune", "lora", ["tune run lora_dpo_single_device", "torchtune.rlhf.loss.DPOLoss"]),
    ("torchtune", "full", ["tune run --nproc_per_node 1 full_dpo_distributed"]),
    ("deepspeed", "full", ["trl dpo"]),
])
def test_dpo_exports_write_the_targets_dpo_config(target, method, lines):
    code, out, err = _export(target, "--method", method)
    assert code == 0, err
    for line in lines:  # (a JSON export's notes go to stderr)
        assert line in out + err, (line, out, err)
    assert "stage: sft" not in out and "trl sft" not in out
    if target == "trl":  # (DPOConfig has no packing key)
        assert "packing:" not in out


def test_sft_exports_are_unchanged_by_the_objective_keys():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--export", "trl")
    assert code == 0 and "trl sft --config FILE" in out and "beta:" not in out and "loss_type: nll" in out


def test_axolotl_writes_precomputed_log_probs_and_a_full_runs_copy():
    """axolotl runs a copy without an adapter (setup_reference_model loads the model again) and precomputed log-probs;
    a copy beside an adapter it cannot (its validation drops rl_adapter_ref_model): refused below."""
    code, out, err = _export("axolotl", "--method", "full", "--dpo-reference", "copy")
    assert code == 0 and "rl: dpo" in out and "rl_adapter_ref_model" not in out and "adapter:" not in out
    code, out, err = _export("axolotl", "--method", "lora", "--dpo-reference", "precomputed")
    assert code == 0 and "precompute_ref_log_probs: true" in out


@pytest.mark.parametrize("target, args, words", [
    ("litgpt", ("--method", "lora"), "objective 'dpo' cannot be exported to litgpt: LitGPT ships no DPO script"),
    ("llama-factory", ("--method", "lora", "--dpo-reference", "precomputed"),
     "dpo_reference 'precomputed' cannot be exported to llama-factory"),
    ("torchtune", ("--method", "lora", "--dpo-reference", "copy"),
     "dpo_reference 'copy' with LoRA cannot be exported to torchtune"),
    ("axolotl", ("--method", "qlora", "--dpo-reference", "copy"),
     "dpo_reference 'copy' with LoRA cannot be exported to axolotl: axolotl's config validation drops "
     "rl_adapter_ref_model"),
])
def test_dpo_exports_refuse_what_the_target_cannot_run(target, args, words):
    code, out, err = _export(target, *args)
    assert code == 2, (code, out, err)
    assert words in err and "accepted" in err and "Traceback" not in err


def test_the_text_estimate_says_dpo_pairs_and_the_reference():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--objective", "dpo",
                             "--batch", "2")
    assert code == 0, err
    assert "train, lora, DPO (reference: adapters_off), bf16, batch 2 pairs, seq 2,048" in out.splitlines()[0]
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora")
    assert "DPO" not in out.splitlines()[0] and "batch 1, seq" in out.splitlines()[0]


def test_what_if_offers_precomputed_log_probs_only_where_the_recipe_runs_them(models, gpus):
    """A full DPO row with its reference copy: what-if offers the precomputed reference log-probs under TRL's recipes
    (saving the copy), never under LLaMA-Factory or torchtune, which the engine refuses them."""
    from planner.planning import what_if
    base = dict(with_defaults_row(), model="llama-3-8b", gpu="h100-sxm-80gb", objective="dpo", method="full",
                batch=1, seq=1024)
    hf = what_if(dict(base, recipe="hf"), models, gpus)
    row = hf[hf["overrides"] == "dpo_reference=precomputed"]
    assert len(row) == 1 and row["dpo_reference"].iloc[0] == "precomputed"
    assert row["saved_bytes"].iloc[0] >= 14.9 * 2**30  # the bf16 copy of 8.03 B parameters, 14.96 GiB
    for recipe in ("llama-factory", "torchtune"):
        out = what_if(dict(base, recipe=recipe), models, gpus)
        assert not out["overrides"].str.contains("precomputed").any(), recipe


def test_what_if_of_a_copy_under_torchtune_offers_lora_with_its_reference(models, gpus):
    """--dpo-reference copy, full, under torchtune: the LoRA changes take torchtune's LoRA reference (adapters
    disabled), not a copy beside adapters, which the engine refuses (the whole what-if would fail)."""
    from planner.planning import what_if
    base = dict(with_defaults_row(), model="llama-3-8b", gpu="h100-sxm-80gb", objective="dpo", method="full",
                dpo_reference="copy", recipe="torchtune", batch=1, seq=1024)
    out = what_if(base, models, gpus)
    lora = out[out["method"].isin(["lora", "qlora"])]
    assert len(lora) and set(lora["dpo_reference"]) == {"adapters_off"}


def with_defaults_row() -> dict:
    from engine.scenarios import DEFAULTS
    return dict(DEFAULTS)


def test_check_says_dpo_and_the_pairs():
    """check's one line says the objective and that --batch counts pairs (an sft line reads as before)."""
    code, out, err = run_cli("check", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--method", "lora",
                             "--objective", "dpo", "--batch", "4")
    assert (code, err) == (0, ""), err
    assert out.startswith("fits: llama-3.2-1b lora DPO, 4 pairs on 1x h100-sxm-80gb: ") and out.count("\n") == 1
    code, out, err = run_cli("check", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--method", "lora")
    assert out.startswith("fits: llama-3.2-1b lora on 1x h100-sxm-80gb: ")


def test_the_fit_line_gives_the_largest_batch_in_pairs():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--method", "lora",
                             "--objective", "dpo", "--seq", "1024")
    assert code == 0, err
    line = next(s for s in out.splitlines() if s.startswith("on h100-sxm-80gb"))
    assert " pairs, longest seq " in line, line
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--method", "lora")
    line = next(s for s in out.splitlines() if s.startswith("on h100-sxm-80gb"))
    assert " pairs" not in line and "largest batch " in line


@pytest.mark.parametrize("method", ["full", "lora"])
def test_torchtune_dpo_export_sets_no_dataset_packed_and_names_the_reference_checkpointer(method):
    """torchtune's DPO recipes instantiate the preference builders, which hand an unknown `packed` to
    datasets.load_dataset (torchtune 0.7.0 datasets/_preference.py **load_dataset_kwargs): no dataset key; the full
    recipe reads cfg.ref_checkpointer (recipes/full_dpo_distributed.py), which an SFT config lacks: the note says so."""
    import yaml
    code, out, err = _export("torchtune", "--method", method)
    assert code == 0, err
    cfg = yaml.safe_load(out)
    assert "dataset" not in cfg and cfg["loss"]["_component_"] == "torchtune.rlhf.loss.DPOLoss"
    assert ("ref_checkpointer" in out) == (method == "full")
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", method, "--export", "torchtune")
    assert yaml.safe_load(out)["dataset"] == {"packed": False}  # (an SFT recipe's builders take it)


def test_llama_factory_quantizes_a_qlora_reference_copy_as_the_plan_counts_it():
    """LLaMA-Factory loads ref_model with ref_model_quantization_bit (default None: a 16-bit copy, trainer_utils.py
    create_ref_model); the plan counts the copy quantized as the policy, so the export sets the bits."""
    import yaml
    code, out, err = _export("llama-factory", "--method", "qlora", "--dpo-reference", "copy")
    assert code == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["ref_model"] == cfg["model_name_or_path"] and cfg["ref_model_quantization_bit"] == cfg["quantization_bit"] == 4
    code, out, err = _export("llama-factory", "--method", "lora", "--dpo-reference", "copy")
    assert "ref_model_quantization_bit" not in yaml.safe_load(out)  # (a 16-bit base: a 16-bit copy)


def test_axolotl_dpo_export_names_a_dpo_prompt_strategy():
    """axolotl loads an rl: dpo dataset's type from prompt_strategies/dpo (0.18.0: chatml, chat_template, llama3, ...);
    an SFT type (alpaca) is none of them, so the export names chatml.intel (an SFT export keeps alpaca)."""
    import yaml
    code, out, err = _export("axolotl", "--method", "lora")
    assert code == 0, err
    assert yaml.safe_load(out)["datasets"] == [{"path": "DATASET", "type": "chatml.intel"}]
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--export", "axolotl")
    assert yaml.safe_load(out)["datasets"] == [{"path": "DATASET", "type": "alpaca"}]


def test_dpo_with_packing_is_refused_and_never_offered(models, gpus):
    """No DPO trainer packs pairs (TRL 1.16.0 turns padding_free off, axolotl refuses sample_packing with rl,
    LLaMA-Factory packs only stage sft, torchtune pads): the engine refuses packing on with dpo, and what-if does not
    offer "Sequence packing" to a DPO row (it does to the same sft row)."""
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--objective", "dpo",
                             "--packing", "on")
    assert code == 2 and "packing 'on' is not run by any DPO trainer" in err and "accepted" in err, (code, err)
    from planner.planning import what_if
    base = dict(with_defaults_row(), model="llama-3-8b", gpu="rtx-4090", method="lora", batch=1, seq=2048)
    sft = what_if(base, models, gpus)
    dpo = what_if(dict(base, objective="dpo"), models, gpus)
    assert (sft["overrides"] == "packing=on").any() and not (dpo["overrides"] == "packing=on").any()


def test_breakdown_page_names_the_pairs_and_the_reference_copy():
    """The Breakdown page of a full DPO row: the largest micro-batch in pairs, a caption with the two sequences per
    pair and the reference copy's share of the weights (Llama 3 8B bf16: 14.96 GiB, docs/stacks.md "DPO")."""
    from tests.test_pages import open_app, shown
    at = open_app("pages/breakdown.py", {"objective": "dpo", "method": "full", "model": "llama-3-8b",
                                         "gpu": "h100-sxm-80gb"})
    assert "Largest micro-batch (pairs)" in [m.label for m in at.metric]
    caption = " ".join(shown(x.value) for x in at.caption if "DPO:" in x.value)
    assert "1 preference pair = 2 sequences" in caption and "a frozen copy of the model, 14.96 GiB" in caption, caption
    # (under torchtune, which runs no precomputed log-probs, the same copy)
    at = open_app("pages/breakdown.py", {"objective": "dpo", "method": "full", "model": "llama-3-8b",
                                         "gpu": "h100-sxm-80gb", "recipe": "torchtune", "dpo_reference": "copy"})
    assert not at.error, [e.value for e in at.error]
    assert "14.96 GiB" in " ".join(shown(x.value) for x in at.caption if "DPO:" in x.value)
    at = open_app("pages/breakdown.py", {"method": "full", "model": "llama-3-8b", "gpu": "h100-sxm-80gb"})
    assert "Largest micro-batch (sequences)" in [m.label for m in at.metric]
    assert not [x for x in at.caption if "DPO:" in x.value]


def test_serving_with_objective_dpo_in_the_url_says_it_is_ignored():
    from tests.test_pages import open_app
    at = open_app("pages/overview.py", {"task": "infer", "objective": "dpo"})
    assert any("Objective DPO applies to training" in i.value for i in at.sidebar.info)
    at = open_app("pages/overview.py", {"task": "infer"})
    assert not any("Objective DPO" in i.value for i in at.sidebar.info)


def test_cost_per_fit_says_its_training_workloads_are_dpo():
    from tests.test_pages import open_app
    at = open_app("pages/cost_per_fit.py", {"objective": "dpo"})
    assert any("Training workloads: DPO" in x.value and "preference pairs" in x.value for x in at.caption)
    at = open_app("pages/cost_per_fit.py")
    assert not any("Training workloads: DPO" in x.value for x in at.caption)


def test_what_if_and_budget_say_pairs_for_a_dpo_batch():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--gpu", "rtx-4090", "--method", "full",
                             "--objective", "dpo", "--batch", "8", "--what-if")
    assert code == 0, err
    assert "Micro-batch 1 pair " in out and "Micro-batch 4 pairs " in out
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--gpu", "rtx-4090", "--method", "full",
                             "--batch", "8", "--what-if")
    assert "Micro-batch 1 " in out and "pair" not in out
    code, out, err = run_cli("budget", "--budget", "3000", "--objective", "dpo", "--batch", "4")
    assert code == 0, err
    assert "workload settings: batch 4 (pairs for training), objective dpo" in out


@pytest.mark.parametrize("query", [{"objective": "dpo", "method": "lora", "dpo_reference": "adapters_off"},
                                   {"objective": "dpo", "method": "full", "recipe": "axolotl", "dpo_reference": "copy"}])
def test_the_multi_method_pages_take_each_methods_reference(query):
    """The sidebar's DPO reference is its method's: the Budget and Cost per fit pages, which plan full, LoRA and QLoRA
    together, give a method for which the recipe does not run it the recipe's own (auto) instead of refusing every
    workload (adapters_off has no adapters under full; axolotl keeps no copy beside adapters)."""
    from app.state import train_workload
    from tests.test_pages import open_app
    for page in ("pages/budget.py", "pages/cost_per_fit.py"):
        at = open_app(page, query)
        assert not at.error, (page, [e.value for e in at.error])
    settings = _settings(query)
    own = train_workload(settings)
    assert own["dpo_reference"] == query["dpo_reference"]
    other = train_workload(settings, method="qlora" if query["method"] == "full" else "full")
    assert other["dpo_reference"] == "auto"


def _settings(query: dict) -> dict:
    """The sidebar's settings (app/state.py FIELDS defaults) with `query`'s values."""
    from app.state import FIELDS
    s = {k: f.default for k, f in FIELDS.items()}
    s.update(query)
    return s


def test_trl_note_for_a_qlora_copy_says_to_quantize_it():
    code, out, err = _export("trl", "--method", "qlora", "--dpo-reference", "copy")
    assert code == 0, err
    assert "with the policy's quantization_config" in out
    code, out, err = _export("trl", "--method", "lora", "--dpo-reference", "copy")
    assert "pass ref_model=" in out and "quantization_config (the plan" not in out
