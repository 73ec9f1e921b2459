"""engine/uncertainty.py: the band around the peak, and its keys in `estimate --json`."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import estimate, uncertainty

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy_table  # noqa: E402


def _band(models, **row):
    result = estimate(pd.DataFrame([row]), models)
    return result.iloc[0], uncertainty.band(result, models).iloc[0]


def test_a_measured_path_gets_the_held_out_band(models):
    row, b = _band(models, model="llama-3-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048)
    tensors = row["peak_bytes"] - row["runtime_overhead_bytes"]
    assert row["padding"] == "padded"  # the hf recipe's default: the mask is in the estimate already
    assert b["uncertainty_high_pct"] == uncertainty.MEASURED_HIGH_PCT
    # the trainer's loop keeps only the loss; a hand-written loop (--loop manual) keeps the logits
    # through backward: its bytes are on the band's high side, named (issue 28)
    manual, _ = _band(models, model="llama-3-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048,
                      loop="manual")
    kept = (manual["peak_bytes"] - manual["runtime_overhead_bytes"]) - tensors
    # the bf16 logits (batch x seq x vocabulary) and, use_cache on in a loop of one's own (no checkpointing),
    # the cache's un-repeated K/V of every layer (a padded batch: SDPA saves K/V repeated to every head)
    assert kept == pytest.approx(2 * 2048 * 128256 * 2 + 32 * 2 * 1024 * 2 * (2 * 2048))
    assert b["peak_high_bytes"] == pytest.approx(row["peak_bytes"] + kept + tensors * uncertainty.MEASURED_HIGH_PCT / 100)
    assert b["peak_low_bytes"] == pytest.approx(row["peak_bytes"] - tensors * uncertainty.MEASURED_LOW_PCT / 100)
    assert b["peak_padded_batch_bytes"] == row["peak_bytes"]
    assert b["uncertainty_reasons"] == ("measured paths: held-out error; a hand-written loop keeping its outputs "
                                        "(--loop manual): logits and KV cache through backward")
    # asked unpadded, the band's high side still holds a padded batch: per layer b x s x 2 bytes x
    # (s mask values + 2 x (32 - 8) x 128 repeated K/V), 32 layers: 2 x 2048 x 2 x (2048 + 6144) x 32
    # = 2 GiB more at the start of backward (the peak)
    unpadded, ub = _band(models, model="llama-3-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048,
                         padding="unpadded")
    padded = 2 * 2048 * 2 * (2048 + 2 * 24 * 128) * 32
    assert padded == 2**31
    assert unpadded["peak_phase"] == "loss_backward"
    utensors = unpadded["peak_bytes"] - unpadded["runtime_overhead_bytes"]
    # unpadded, SDPA saves the un-repeated K/V the cache holds: a hand-written loop adds its logits alone
    umanual, _ = _band(models, model="llama-3-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048,
                       padding="unpadded", loop="manual")
    ukept = (umanual["peak_bytes"] - umanual["runtime_overhead_bytes"]) - utensors
    assert ukept == pytest.approx(2 * 2048 * 128256 * 2)
    assert ub["peak_high_bytes"] == pytest.approx(unpadded["peak_bytes"] + padded + ukept + utensors * uncertainty.MEASURED_HIGH_PCT / 100)
    assert ub["peak_padded_batch_bytes"] == pytest.approx(unpadded["peak_bytes"] + padded)
    assert ub["uncertainty_reasons"] == ("measured paths: held-out error; a padded batch (--padding padded): attention "
                                         "mask and repeated K/V; a hand-written loop keeping its outputs (--loop manual): "
                                         "logits and KV cache through backward")
    # the padded estimate itself holds those bytes (and the fragmentation share of them)
    assert row["peak_bytes"] - row["runtime_overhead_bytes"] == pytest.approx(utensors + padded)
    # checkpointed, the frames keep the model's bool (2, 1, 2048, 2048) mask from the forward on: the
    # peak (start of backward) holds 2 x 2048 x 2048 bytes more padded, and so does the band's figure
    ck, ckb = _band(models, model="llama-3-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048,
                    padding="unpadded", grad_checkpointing=True)
    assert ck["peak_phase"] == "loss_backward"
    assert ckb["peak_padded_batch_bytes"] == pytest.approx(ck["peak_bytes"] + 2 * 2048 * 2048)
    _, infer = _band(models, model="llama-3-8b", task="infer", precision="bf16", batch=2, seq=2048)
    assert infer["uncertainty_reasons"] == "measured paths: held-out error"


@pytest.mark.parametrize("row, reason, pct", [
    (dict(model="llama-3-70b", task="train", method="qlora"), "bitsandbytes", uncertainty.BNB_HIGH_PCT),
    (dict(model="llama-3-8b", task="train", method="full", optimizer="paged_adamw_8bit"), "bitsandbytes", uncertainty.BNB_HIGH_PCT),
    (dict(model="llama-3-8b", task="infer", precision="nf4"), "bitsandbytes", uncertainty.BNB_HIGH_PCT),
    (dict(model="llama-3-70b", task="train", method="full", gpus=8, zero=2), "ZeRO-1/2", uncertainty.PARALLEL_HIGH_PCT),
    (dict(model="llama-3-70b", task="infer", gpus=4, tp=4), "tensor/pipeline", uncertainty.PARALLEL_HIGH_PCT),
    (dict(model="llama-3-8b", task="infer", precision="q4_k_m"), "llama.cpp", uncertainty.GGUF_HIGH_PCT),
])
def test_an_unmeasured_path_widens_the_band_and_says_why(models, row, reason, pct):
    _, b = _band(models, **row)
    assert reason in b["uncertainty_reasons"]
    assert b["uncertainty_high_pct"] == uncertainty.MEASURED_HIGH_PCT + pct


# the architectures that had a 10% allowance as "architecture without a measured run" until the loops harness ran them
# (MLA and shared experts: DeepSeek-V3; attention sinks and expert biases: gpt-oss; shared experts: Llama 4 Scout)
MEASURED_SINCE = ("deepseek-v3", "gpt-oss-20b", "llama-4-scout")


def test_the_architectures_measured_since_get_the_measured_band_alone(models):
    measured = pd.read_csv(accuracy_table.LOOPS_DATA)
    rows = measured[measured["model"].isin(MEASURED_SINCE) & (measured["split"] == "heldout")].reset_index(drop=True)
    assert set(rows["model"]) == set(MEASURED_SINCE)
    assert set(rows["task"]) == {"train", "infer"}
    compared = accuracy_table.compare_loops(rows, models)
    # held out, training and prefills alike: the engine's error is that of the other measured families
    assert compared["error"].abs().max() < 0.01, compared[["model", "method", "task", "error"]]
    for model in MEASURED_SINCE:
        for task in ("train", "infer"):
            _, b = _band(models, model=model, task=task, method="lora" if task == "train" else "full", batch=1, seq=2048)
            assert b["uncertainty_reasons"].startswith("measured paths: held-out error"), (model, task)
            assert "architecture" not in b["uncertainty_reasons"]


def test_every_measured_peak_lies_inside_its_band(models):
    measured = accuracy_table.load()
    result = estimate(accuracy_table.scenario_frame(measured), models)
    b = uncertainty.band(result, models)
    overhead = result["runtime_overhead_bytes"].to_numpy()
    low = b["peak_low_bytes"].to_numpy() - overhead
    high = b["peak_high_bytes"].to_numpy() - overhead
    inside = (measured["peak_bytes"].to_numpy() >= low) & (measured["peak_bytes"].to_numpy() <= high)
    assert inside.all(), measured.loc[~inside, ["model", "method", "precision", "optimizer", "batch", "seq", "split"]]


def test_band_is_vectorized_and_keeps_the_index(models):
    frame = pd.DataFrame([dict(model=m, task="train", method="lora") for m in ("llama-3-8b", "mixtral-8x7b")] * 3)
    result = estimate(frame, models)
    result.index = np.arange(10, 16)
    b = uncertainty.band(result, models)
    assert list(b.columns) == list(uncertainty.COLUMNS) and list(b.index) == list(range(10, 16))
    assert (b["peak_low_bytes"] < b["peak_high_bytes"]).all()


def test_estimate_json_carries_the_band():
    out = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-3-70b", "--method", "qlora",
                          "--json"], capture_output=True, text=True, cwd=ROOT, check=True)
    data = json.loads(out.stdout)
    for key in uncertainty.COLUMNS:
        assert key in data
    assert data["peak_low_bytes"] < data["peak_bytes"] < data["peak_high_bytes"]
    assert "bitsandbytes" in data["uncertainty_reasons"]
    # the hf recipe estimates a padded batch (its mask and repeated K/V are in peak_bytes already)
    assert data["padding"] == "padded"
    assert data["peak_bytes"] == data["peak_padded_batch_bytes"] < data["peak_high_bytes"]


def _measured_as_asked(split: str | None = None, **extra) -> pd.DataFrame:
    """The rows of tests/data/measured_peaks.csv (of one split, or all), asked the way a user asks
    them: the CSV's own columns, every other setting at the engine's default (kv_policy auto, hf
    recipe, foreach AdamW) unless given in `extra`; read with the csv module rather than through
    benchmarks/accuracy_table.py, with the measured tensors' peak in column `measured`."""
    import csv

    rows = []
    with open(ROOT / "tests" / "data" / "measured_peaks.csv", newline="") as f:
        for r in csv.DictReader(f):
            if split is not None and r["split"] != split:
                continue
            lora = r["method"] == "lora"
            rows.append(dict(
                model=r["model"], task=r["task"], method=r["method"] if r["task"] == "train" else "full",
                precision=r["precision"], optimizer=r["optimizer"] or "adamw", batch=int(r["batch"]), seq=int(r["seq"]),
                grad_checkpointing=r["grad_checkpointing"] == "true",
                lora_rank=int(r["lora_rank"]) if lora else 8, lora_targets=r["lora_targets"] if lora else "q_proj,v_proj",
                freeze_layers=int(r["freeze_layers"]) if r["method"] == "freeze" else 2,
                gpus=int(r["gpus"]), zero=int(r["zero"]), **extra, measured=int(r["peak_bytes"])))
    return pd.DataFrame(rows)


def test_no_measured_row_exceeds_the_high_side_of_the_band_a_user_gets(models):
    # "Never under-promise memory silently" (issue 12): every measured row, asked as a user asks it;
    # the measured tensors' peak must not exceed peak_high_bytes minus the runtime overhead (which a
    # fake-tensor run cannot see)
    frame = _measured_as_asked()
    assert len(frame) >= 100
    result = estimate(frame.drop(columns="measured"), models)
    high = uncertainty.band(result, models)["peak_high_bytes"].to_numpy() - result["runtime_overhead_bytes"].to_numpy()
    over = frame["measured"].to_numpy() > high
    assert not over.any(), frame.loc[over, ["model", "task", "method", "precision", "batch", "seq", "measured"]]


def test_the_estimate_is_within_the_targets_on_the_held_out_runs(models):
    # issue 12's targets, on the held-out rows asked as a user asks them (hf recipe defaults: a padded
    # batch, the runs' own path; the whole prefill's K/V kept): every row within 5%, none under by more
    # than 3%, the median within 2%; for both peak_bytes and peak_padded_batch_bytes (the same figure
    # here), read with the csv module rather than through benchmarks/accuracy_table.py
    frame = _measured_as_asked("heldout", kv_policy="full")
    assert len(frame) >= 40
    result = estimate(frame.drop(columns="measured"), models)
    overhead = result["runtime_overhead_bytes"].to_numpy()
    padded = uncertainty.band(result, models)["peak_padded_batch_bytes"].to_numpy()
    for figure in (result["peak_bytes"].to_numpy(), padded):
        err = (figure - overhead - frame["measured"].to_numpy()) / frame["measured"].to_numpy() * 100
        show = frame.assign(err=err)[["model", "task", "method", "batch", "seq", "gpus", "err"]]
        assert (abs(err) <= 5).all(), show[abs(err) > 5]
        assert (err >= -3).all(), show[err < -3]
        assert abs(np.median(err)) <= 2, np.median(err)


def test_unpadded_runs_would_hold_less_than_the_default_estimate(models):
    # the same held-out training rows asked --padding unpadded are below the padded runs wherever
    # the mask counts (what the padded default protects a buyer from): at least 8 rows more than 3% under
    frame = _measured_as_asked("heldout", kv_policy="full", padding="unpadded")
    result = estimate(frame.drop(columns="measured"), models)
    err = (result["peak_bytes"] - result["runtime_overhead_bytes"]).to_numpy() / frame["measured"].to_numpy() - 1
    assert (err < -0.03).sum() >= 8


# ---- issue 28: the measured part calibrated on both harnesses, and the verdicts on the high side ----

def test_the_measured_part_follows_its_rule_on_both_harnesses(models):
    """engine/margins.py: the high side is the smallest whole percent at least twice the worst held-out
    underestimate of any measured set (asked as each run was set up), the low side likewise from the worst
    held-out overestimate: recomputed here from the three data files, so a new measurement that breaks it
    fails this test."""
    import math

    first = accuracy_table.compare(accuracy_table.load(), models)
    loops = accuracy_table.compare_loops(pd.read_csv(ROOT / "tests" / "data" / "measured_loops.csv"), models)
    dropout = accuracy_table.compare_dropout(pd.read_csv(ROOT / "tests" / "data" / "measured_dropout.csv"), models)
    held = pd.concat([s.loc[s["split"] == "heldout", "error"] for s in (first, loops, dropout)])
    assert len(held) >= 78
    assert uncertainty.MEASURED_HIGH_PCT == max(1, math.ceil(-2 * 100 * min(held.min(), 0.0)))
    assert uncertainty.MEASURED_LOW_PCT == max(1, math.ceil(2 * 100 * max(held.max(), 0.0)))


def test_every_loops_row_lies_inside_its_band_as_it_ran(models):
    measured = pd.read_csv(ROOT / "tests" / "data" / "measured_loops.csv")
    # (the hybrids, ERNIE and Qwen1.5-MoE from the config files the harness built them from)
    models = accuracy_table.with_config_models(models, measured["model"])
    result = estimate(accuracy_table.loops_scenario_frame(measured), models)
    b = uncertainty.band(result, models)
    overhead = result["runtime_overhead_bytes"].to_numpy()
    peak = measured["peak_bytes"].to_numpy()
    assert ((peak >= b["peak_low_bytes"].to_numpy() - overhead) & (peak <= b["peak_high_bytes"].to_numpy() - overhead)).all()


def test_every_dropout_row_lies_inside_its_band_as_it_ran(models):
    """The LoRA dropout set (tests/data/measured_dropout.csv), asked with its lora_dropout and adapter dtype:
    every measured peak inside the band (its worst held-out errors, -0.85% and +1.65%, are inside the measured
    part: 3% high, 4% low, the rule above)."""
    measured = pd.read_csv(ROOT / "tests" / "data" / "measured_dropout.csv")
    result = estimate(accuracy_table.dropout_scenario_frame(measured), models)
    b = uncertainty.band(result, models)
    overhead = result["runtime_overhead_bytes"].to_numpy()
    peak = measured["peak_bytes"].to_numpy()
    assert ((peak >= b["peak_low_bytes"].to_numpy() - overhead) & (peak <= b["peak_high_bytes"].to_numpy() - overhead)).all()


def test_a_verdict_is_decided_on_the_safe_peak(models, gpus):
    """fits, max_batch and the safe peak agree: the tensors' estimate x (1 + margin) against what the card
    leaves them; at the largest batch the next one does not fit, and the estimate alone may fit where the
    verdict says no (never the other way round)."""
    base = dict(model="llama-3.1-8b", task="train", method="lora", precision="bf16", seq=2048, gpu="rtx-4090",
                grad_checkpointing=True)
    row = estimate(pd.DataFrame([base]), models, gpus).iloc[0]
    most = int(row["max_batch"])
    rows = estimate(pd.DataFrame([{**base, "batch": most}, {**base, "batch": most + 1}]), models, gpus)
    assert rows["fits"].tolist() == [True, False]
    usable = float(rows["usable_bytes"].iloc[0]) * (1 - 0.1)  # the default headroom
    assert (rows["safe_peak_bytes"] <= usable).tolist() == [True, False]
    assert rows["verdict_margin_pct"].tolist() == [uncertainty.MEASURED_HIGH_PCT] * 2
    tensors = rows["peak_bytes"] - rows["runtime_overhead_bytes"]
    margin = uncertainty.MEASURED_HIGH_PCT / 100
    assert rows["safe_peak_bytes"].to_numpy() == pytest.approx((rows["peak_bytes"] + tensors * margin * 1.05).to_numpy())
    # somewhere between the two verdicts: the estimate fits, the margin does not
    b = np.arange(most + 1, 4 * most + 2)
    grid = estimate(pd.DataFrame([{**base, "batch": int(x)} for x in b]), models, gpus)
    at_estimate, fits = grid["fits_at_estimate"].to_numpy(dtype=bool), grid["fits"].to_numpy(dtype=bool)
    assert not fits.any() and (at_estimate | ~fits).all()
