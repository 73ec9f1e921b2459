"""GaLore's projection rank as a scenario column (issue 27 item 3; issue 24's one table of columns):
the engine's states follow it, `auto` is the recipe's (transformers 128, LLaMA-Factory 16), and the
flag, the JSON key, the dashboard's field and the exports carry it. Expected figures are worked out
here from Llama 3 8B's shapes, not by the engine."""

import json

import pandas as pd
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from engine import estimate
from tests.clirun import run_cli
from tests.conftest import ROOT

GALORE = dict(model="llama-3-8b", task="train", method="full", precision="bf16", optimizer="galore_adamw", batch=1,
              seq=512)
# Llama 3 8B's projected matrices per layer (m x n): q, o 4096 x 4096; k, v 1024 x 4096; gate, up 14336 x 4096;
# down 4096 x 14336. At a rank r <= the smaller side each keeps exp_avg and exp_avg_sq of r x the larger side and
# the projection r x the smaller side, in bf16 (the gradient's dtype): (2 max + min) x r x 2 bytes.
PER_RANK = 32 * (2 * (2 * 4096 + 4096) + 2 * (2 * 4096 + 1024) + 3 * (2 * 14336 + 4096)) * 2


def test_the_states_follow_the_rank(models):
    out = estimate(pd.DataFrame([dict(GALORE, galore_rank=r) for r in (64, 128, 256)]), models)
    steps = out["optimizer_bytes"].diff().iloc[1:].to_numpy()
    assert steps[0] == pytest.approx(64 * PER_RANK, rel=1e-12)
    assert steps[1] == pytest.approx(128 * PER_RANK, rel=1e-12)
    assert list(out["galore_rank"]) == [64, 128, 256]


def test_auto_is_the_recipes_and_an_asked_rank_wins(models):
    out = estimate(pd.DataFrame([GALORE, dict(GALORE, recipe="llama-factory"),
                                 dict(GALORE, recipe="llama-factory", galore_rank=128)]), models)
    assert list(out["galore_rank"]) == [128, 16, 128]  # transformers' optim_args default; LLaMA-Factory's galore_rank
    assert out["optimizer_bytes"].iloc[0] - out["optimizer_bytes"].iloc[1] == pytest.approx(112 * PER_RANK, rel=1e-12)
    assert out["optimizer_bytes"].iloc[2] == out["optimizer_bytes"].iloc[0]


def test_the_flag_the_json_key_and_the_decision_note():
    code, out, _ = run_cli("estimate", "--model", "llama-3-8b", "--task", "train", "--method", "full",
                           "--optimizer", "galore_adamw", "--galore-rank", "256", "--json")
    assert code == 0 and json.loads(out)["galore_rank"] == 256
    code, out, _ = run_cli("estimate", "--model", "llama-3-8b", "--task", "train", "--method", "full",
                           "--optimizer", "galore_adamw", "--recipe", "llama-factory")
    assert code == 0 and "GaLore rank auto → 16 (the llama-factory recipe's)" in out
    code, out, _ = run_cli("estimate", "--model", "llama-3-8b", "--optimizer", "galore_adamw", "--galore-rank", "0",
                           "--json")
    assert code == 0 and json.loads(out)["galore_rank"] == 128  # 0: the recipe's
    code, _, err = run_cli("estimate", "--model", "llama-3-8b", "--optimizer", "galore_adamw", "--galore-rank", "70000")
    assert code == 2 and "'70000'" in err and "1 to 65,536, or 0 for the recipe's" in err


def test_the_exports_launch_galore_at_the_planned_rank():
    base = ("estimate", "--model", "llama-3-8b", "--task", "train", "--method", "full", "--optimizer")
    code, out, _ = run_cli(*base, "galore_adamw_8bit", "--galore-rank", "64", "--export", "trl")
    cfg = yaml.safe_load(out)
    assert code == 0 and cfg["optim"] == "galore_adamw_8bit" and cfg["optim_args"] == "rank=64"
    assert cfg["optim_target_modules"] == ["attn", "mlp"]  # transformers refuses GaLore without them
    code, out, _ = run_cli(*base, "galore_adamw_8bit", "--galore-rank", "64", "--export", "axolotl")
    cfg = yaml.safe_load(out)
    assert code == 0 and cfg["optimizer"] == "galore_adamw_8bit" and cfg["optim_args"] == "rank=64"
    code, out, _ = run_cli(*base, "galore_adamw_layerwise", "--recipe", "llama-factory", "--export", "llama-factory")
    cfg = yaml.safe_load(out)
    assert code == 0 and cfg["use_galore"] is True and cfg["galore_rank"] == 16 and cfg["galore_layerwise"] is True
    assert cfg["optim"] == "adamw_torch"  # LLaMA-Factory maps adamw_torch to GaLoreAdamW


def test_the_dashboard_field_reaches_the_estimate(models, gpus):
    """A shared link with a GaLore optimizer and a rank: the Overview's peak is the engine's at that rank."""
    want = estimate(pd.DataFrame([dict(GALORE, seq=2048, galore_rank=512, gpu="a100-80gb-sxm",
                                       grad_checkpointing=True)]), models, gpus).iloc[0]
    at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=120)
    at.query_params.update({"model": "llama-3-8b", "gpu": "a100-80gb-sxm", "task": "train", "method": "full",
                            "train_precision": "bf16", "optimizer": "galore_adamw", "galore_rank": "512",
                            "zero": "0", "seq": "2048", "batch": "1", "grad_checkpointing": "1"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [w.value for w in at.sidebar.number_input if w.label.startswith("GaLore rank")] == [512]
    metric = {m.label: m.value for m in at.metric}["Peak per GPU"]
    assert metric == f"{want['peak_bytes'] / 2**30:,.2f} GiB"
