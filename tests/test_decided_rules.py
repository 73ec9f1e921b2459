"""Rules that change a value the user asked (engine/rules.py) say so: the library decides, the CLI prints the
decided note ("decided for this scenario: ..."; `normalization_notes` in --json), the dashboard's sidebar shows
the same notes (app/data.py decided_notes: rules.notes).

- An optimizer offloaded at ZeRO stage 0 runs at stage 1: DeepSpeed's offload_optimizer is "Valid for ZeRO
  stage 1, 2, 3" (runtime/zero/config.py @1b88ac3), and at stage 0 no ZeRO optimizer is built, so the
  states would stay on the GPU that the stage-0 plan had emptied of them.
- --ep on a dense model is 1 (no experts to place), said where it was asked.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.rules import notes
from tests.clirun import run_cli
from tests.conftest import ROOT

FULL = dict(model="llama-3.1-8b", task="train", method="full", optimizer="adamw", batch=1, seq=2048)
OFFLOAD_NOTE = "ZeRO stage 0 → 1 (DeepSpeed offloads the optimizer from ZeRO stage 1 on)"
EP_NOTE = "expert parallel 2 → 1 (llama-3.1-8b is a dense model: no experts to place)"


# ---- the optimizer offloaded at ZeRO stage 0 -------------------------------------------------

def test_an_optimizer_offloaded_at_stage_0_is_planned_at_stage_1_on_any_gpu_count(models):
    frame = pd.DataFrame([{**FULL, "zero": 0, "offload": "optimizer", "gpus": 1},
                          {**FULL, "zero": 0, "offload": "optimizer", "gpus": 2},
                          {**FULL, "zero": 1, "offload": "optimizer", "gpus": 1},
                          {**FULL, "zero": 1, "offload": "optimizer", "gpus": 2},
                          {**FULL, "offload": "optimizer", "gpus": 1},  # (the stage left out: the default 0)
                          {**FULL, "zero": 0, "offload": "none", "gpus": 2},
                          {**FULL, "zero": 2, "offload": "optimizer", "gpus": 1}])
    out = estimate(frame, models)
    assert out["zero"].tolist() == [1, 1, 1, 1, 1, 0, 2]
    # the row asked at stage 0 is the stage-1 row in every figure (DeepSpeed's ZeRO-Offload: its fp32 master
    # copy too, the precision rule's mixed_bf16), not a stage-0 row with its states on the host
    assert out["precision"].astype(str).tolist()[:5] == ["mixed_bf16"] * 5
    byte_cols = [c for c in out.columns if c.endswith("_bytes")]
    for asked, same in ((0, 2), (1, 3), (4, 2)):
        pd.testing.assert_series_equal(out.loc[asked, byte_cols], out.loc[same, byte_cols], check_names=False)
    # on the GPU at the step: the fp32 partition copied back (stage_1_and_2.py `fp32_partition.to(device)`),
    # which the stage-0 plan (33.2 GiB on one H100 before this rule) never counted
    assert out.loc[0, "optimizer_phase_bytes"] > out.loc[0, "weights_bytes"] + 4 * 8_030_261_248


def test_offload_all_below_stage_3_and_offload_for_inference_are_still_refused(models):
    with pytest.raises(ValueError, match="offload 'all' .* needs ZeRO stage 3"):
        estimate(pd.DataFrame([{**FULL, "zero": 0, "offload": "all", "gpus": 1}]), models)
    with pytest.raises(ValueError, match="offload 'optimizer' applies to training"):
        estimate(pd.DataFrame([{"model": "llama-3.1-8b", "task": "infer", "offload": "optimizer"}]), models)


def test_the_raised_stage_is_a_decided_note_asked_or_left_to_the_default(models):
    for asked in ({**FULL, "zero": 0, "offload": "optimizer", "gpus": 1},
                  {**FULL, "offload": "optimizer", "gpus": 2}):
        row = estimate(pd.DataFrame([asked]), models).iloc[0]
        assert OFFLOAD_NOTE in notes(asked, row), asked
    # no offload: stage 0 is no decision (nor the one-GPU drop's own reason changed)
    plain = {**FULL, "zero": 0, "offload": "none", "gpus": 2}
    assert not [n for n in notes(plain, estimate(pd.DataFrame([plain]), models).iloc[0]) if n.startswith("ZeRO")]
    dropped = {**FULL, "zero": 3, "gpus": 1}
    assert "ZeRO stage 3 → 0 (one GPU without offload)" in notes(dropped, estimate(pd.DataFrame([dropped]), models).iloc[0])


@pytest.mark.parametrize("gpus", ["1", "2"])
def test_estimate_says_the_stage_it_planned_for_an_offloaded_optimizer(gpus):
    argv = ("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "0", "--offload", "optimizer",
            "--gpu", "h100-sxm-80gb", "--gpus", gpus)
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["zero"], data["offload"], data["precision"]) == (1, "optimizer", "mixed_bf16")
    assert OFFLOAD_NOTE in data["normalization_notes"]
    code, out, err = run_cli(*argv)
    assert code == 0, err
    decided = [line for line in out.splitlines() if line.startswith("decided for this scenario: ")]
    assert len(decided) == 1 and OFFLOAD_NOTE in decided[0], out


def test_the_deepspeed_export_of_an_offloaded_optimizer_names_a_stage_that_offloads():
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "full", "--offload", "optimizer",
                             "--gpu", "h100-sxm-80gb", "--export", "deepspeed")
    assert code == 0, err
    zero = json.loads(out)["zero_optimization"]
    assert zero["stage"] == 1 and zero["offload_optimizer"]["device"] == "cpu"


@pytest.mark.usefixtures("clear_streamlit_caches")
def test_the_sidebar_says_the_stage_an_offloaded_optimizer_runs_at():
    """The dashboard's sidebar runs the same rules: ZeRO stage 0 with the optimizer offloaded is decided 1 there
    too, and said under the workload as the CLI says it."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=60)
    at.run()
    at.selectbox(key="w_method").set_value("full").run()
    at.selectbox(key="w_zero").set_value(0).run()
    at.selectbox(key="w_offload").set_value("optimizer").run()
    assert not at.exception, [e.value for e in at.exception]
    # (the caption's Markdown escapes dropped: md_escape)
    decided = [c.value.replace("\\", "") for c in at.sidebar.caption if c.value.startswith("Decided:")]
    assert f"Decided: {OFFLOAD_NOTE}" in decided, decided
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]


# ---- expert parallel on a dense model --------------------------------------------------------

def test_ep_on_a_dense_model_is_1_and_estimate_says_so():
    argv = ("estimate", "--model", "llama-3.1-8b", "--ep", "2", "--gpus", "2", "--gpu", "h100-sxm-80gb")
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ep"] == 1 and EP_NOTE in data["normalization_notes"]
    code, out, err = run_cli(*argv)
    assert code == 0, err
    decided = [line for line in out.splitlines() if line.startswith("decided for this scenario: ")]
    assert len(decided) == 1 and EP_NOTE in decided[0], out
    # check --json carries the same notes (its one text line stays the verdict)
    code, out, err = run_cli("check", *argv[1:], "--json")
    assert code in (0, 1), err
    assert EP_NOTE in json.loads(out)["normalization_notes"]


def test_ep_on_a_mixture_of_experts_model_is_kept_and_not_noted(models):
    moe = {"model": "mixtral-8x7b", "task": "train", "method": "lora", "ep": 2, "gpus": 2}
    dense = {**moe, "model": "llama-3.1-8b"}
    out = estimate(pd.DataFrame([moe, dense]), models)
    assert out["ep"].tolist() == [2, 1]
    assert not [n for n in notes(moe, out.iloc[0]) if n.startswith("expert parallel")]
    assert EP_NOTE in notes(dense, out.iloc[1])
    # ep left out, or 1 asked, on a dense model: nothing decided
    for asked in ({**dense, "ep": 1}, {k: v for k, v in dense.items() if k != "ep"}):
        row = estimate(pd.DataFrame([asked]), models).iloc[0]
        assert not [n for n in notes(asked, row) if n.startswith("expert parallel")] and np.int64(row["ep"]) == 1


# ---- Liger left 'auto' (the dashboard always asks 'auto') ------------------------------------

@pytest.mark.parametrize("recipe", ["hf", "torchtune", "automodel"])
def test_liger_auto_taking_the_recipes_own_value_is_no_decision(models, recipe):
    """The sidebar asks liger 'auto'; the recipe's default (off under hf and torchtune, on under NeMo Automodel)
    is then no decision, as for every other stack switch. It was explained as "Liger-Kernel has no kernels for this
    architecture" on Llama, which Liger patches (Overview and Breakdown's captions, `--liger auto`), and under
    automodel as "auto → on (... no kernels for this architecture ...)"."""
    asked = dict(model="llama-3.1-8b", task="train", method="lora", batch=1, seq=512, liger="auto", recipe=recipe)
    row = estimate(pd.DataFrame([asked]), models).iloc[0]
    assert not [n for n in notes(asked, row) if n.startswith("Liger")], notes(asked, row)


def test_liger_auto_turned_off_against_the_recipe_still_says_why(models):
    """NeMo Automodel's default is on; on gpt-oss (not patched by Liger) it is decided off: that is said."""
    asked = dict(model="gpt-oss-20b", task="train", method="lora", batch=1, seq=512, liger="auto", recipe="automodel")
    row = estimate(pd.DataFrame([asked]), models).iloc[0]
    assert "Liger kernels auto → off (Liger-Kernel has no kernels for this architecture: transformers' own modules run)" \
        in notes(asked, row)
