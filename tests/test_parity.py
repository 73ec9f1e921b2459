"""One scenario, one answer: the library, `estimate --json`, the sweep's CSV row and the
dashboard give the same figures for the same request, because every surface hands the raw
request to the same rules (engine/rules.py) and the same estimate.

The grid (240 scenarios, built below, not tuned): every task and method, ZeRO 0-3 on one and
on several GPUs, offload, sequences beyond the model's context (allowed explicitly, and refused
everywhere when not), tensor and pipeline parallel for serving, LoRA targets written with
duplicates. A request leaves out what a user would leave out (seq, tp, pp) so that the rules
decide it on every surface."""

from __future__ import annotations

import csv
import io
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from engine import estimate
from planner import cli

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30
COMPARED = ("peak_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
            "logits_bytes", "kv_cache_bytes", "runtime_overhead_bytes", "zero", "tp", "pp", "seq", "gpus_needed")


def _train_grid() -> list[dict]:
    out = []
    models = ("llama-2-7b", "llama-3-8b", "llama-1-7b", "llama-3.2-1b")
    for (m, model), method, zero, gpus in itertools.product(
            enumerate(models), ("full", "lora", "qlora", "freeze"), (0, 1, 2, 3), (1, 4)):
        # offload alternates over the models, so that every method x stage x count meets both
        # (a [::2] of the product with offload as its last axis kept only "none")
        offload = ("none", "optimizer")[(m + zero + gpus // 4) % 2]
        req = {"model": model, "task": "train", "method": method, "zero": zero, "gpus": gpus, "offload": offload,
               "gpu": "a100-80gb-sxm" if gpus > 1 else "rtx-4090", "grad_checkpointing": zero % 2 == 0}
        if method == "full":
            req["precision"] = ("bf16", "amp_bf16", "fp32")[zero % 3]
        if method in ("lora", "qlora"):
            req["lora_targets"] = "v_proj,q_proj,q_proj" if zero == 1 else "all"
        out.append(req)
    return out  # 128: every model x method x stage on one and on four GPUs, offload half the time


def _infer_grid() -> list[dict]:
    out = []
    for model, precision, gpus, split in itertools.product(
            ("llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b"), ("bf16", "int8", "int4", "q4_k_m"),
            (1, 2, 3, 8), ("auto", "tp", "pp")):
        req = {"model": model, "task": "infer", "precision": precision, "gpus": gpus, "batch": 4,
               "gpu": "h100-sxm-80gb"}
        if split == "tp" and gpus in (2, 8):
            req["tp"] = gpus
        elif split == "pp" and gpus > 1:
            req["pp"] = gpus
        out.append(req)
    return out[::2]  # 96 of 192


def _long_grid() -> list[dict]:
    # beyond the model's context, allowed explicitly: estimated at the asked length everywhere
    return [{"model": m, "task": t, "method": "qlora" if t == "train" else None, "seq": seq, "batch": 2,
             "allow_long_context": True, "gpu": "rtx-3090"}
            for m, t, seq in itertools.product(("llama-2-7b", "llama-1-7b"), ("train", "infer"), (8192, 16384))]


GRID = [{k: v for k, v in r.items() if v is not None} for r in _train_grid() + _infer_grid() + _long_grid()]


def _argv(req: dict) -> list[str]:
    argv = []
    for key, value in req.items():
        if key == "gpu":
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def library(models, gpus):
    """The library's answer for the whole grid, in one vectorized call."""
    frame = pd.DataFrame(GRID)
    return estimate(frame, models, gpus)


def test_the_grid_covers_what_the_issue_names():
    assert len(GRID) >= 200
    tasks_methods = {(r["task"], r.get("method", "full")) for r in GRID}
    assert {("train", m) for m in ("full", "lora", "qlora", "freeze")} | {("infer", "full")} <= tasks_methods
    assert {(r.get("zero", 0), r.get("gpus", 1) > 1) for r in GRID if r["task"] == "train"} >= \
        {(z, many) for z in range(4) for many in (False, True)}
    assert {(r["method"], r["zero"], r["gpus"], r["offload"]) for r in GRID if r["task"] == "train" and "zero" in r} == \
        {(m, z, g, o) for m in ("full", "lora", "qlora", "freeze") for z in range(4) for g in (1, 4)
         for o in ("none", "optimizer")}
    assert any("tp" in r for r in GRID) and any("pp" in r for r in GRID)
    assert any(r.get("allow_long_context") for r in GRID)
    # the dashboard sessions: every combination of the settings it carries, and every model
    assert {_settings(r) for r in DASHBOARD} == {_settings(r) for r in EXPRESSIBLE}
    assert {r["model"] for r in DASHBOARD} == {r["model"] for r in EXPRESSIBLE}


def test_library_one_row_at_a_time_equals_the_grid(library, models, gpus):
    # a one-row frame per scenario and the whole grid at once: the same answer
    for i in range(0, len(GRID), 7):
        one = estimate(pd.DataFrame([GRID[i]]), models, gpus).iloc[0]
        for key in COMPARED:
            assert one[key] == library.iloc[i][key] or (np.isnan(one[key]) and np.isnan(library.iloc[i][key])), (GRID[i], key)


def _sweep_groups() -> list[list[int]]:
    """The grid's requests that differ only in their model, together: one `sweep --models a,b,..`
    answers each group, so every sweep row is read inside a frame of several models (one scenario,
    one answer at any frame size) and the 232 requests take 88 sweeps, not 232 (a group can hold one request
    twice: the split asked is the one the rules decide)."""
    groups: dict[tuple, list[int]] = {}
    for i, req in enumerate(GRID):
        groups.setdefault(tuple(sorted((k, str(v)) for k, v in req.items() if k != "model")), []).append(i)
    return list(groups.values())


SWEEP_GROUPS = _sweep_groups()


@pytest.mark.parametrize("part", range(4))  # four parts of the groups: test workers share the 232 requests
def test_estimate_json_and_the_sweep_row_equal_the_library(library, capsys, part):
    for group in SWEEP_GROUPS[part::4]:
        answers = {}
        for i in group:
            req, row = GRID[i], library.iloc[i]
            code, out, err = _cli(capsys, "estimate", *_argv(req), "--gpu", req["gpu"], "--json")
            assert code == 0, (req, err)
            data = answers[req["model"]] = json.loads(out)
            for key in COMPARED:
                want = row[key]
                got = data[key]
                if isinstance(want, float) and not np.isfinite(want):
                    assert got is None, (req, key, got)
                else:
                    assert got == pytest.approx(float(want), rel=0, abs=0.5), (req, key, got, want)  # JSON rounds bytes to integers
        first = GRID[group[0]]
        sweep_argv = [a for a in _argv(first) if a not in ("--model", first["model"])]
        code, out, err = _cli(capsys, "sweep", "--models", ",".join(GRID[i]["model"] for i in group),
                              "--gpu-ids", first["gpu"], *sweep_argv)
        assert code == 0, (first, err)
        rows = {r["model"]: r for r in csv.DictReader(io.StringIO(out))}
        assert sorted(rows) == sorted(answers), (first, sorted(rows))
        for i in group:
            req, row = GRID[i], library.iloc[i]
            data, swept = answers[req["model"]], rows[req["model"]]
            for key in COMPARED:
                want, got = row[key], swept[key]
                if isinstance(want, float) and not np.isfinite(want):
                    assert got.startswith("not within") or got in ("", "inf"), (req, key, got)
                elif key.endswith("_bytes"):  # whole bytes in both, the same integer
                    assert got == str(data[key]) and float(got) == pytest.approx(float(want), rel=0, abs=0.5), (req, key, got, want)
                else:
                    assert float(got) == pytest.approx(float(want), rel=1e-12, abs=1e-6), (req, key, got, want)


def test_a_sequence_beyond_the_context_is_refused_everywhere(models, gpus, capsys):
    req = {"model": "llama-2-7b", "task": "train", "method": "qlora", "seq": 8192, "batch": 4}
    with pytest.raises(ValueError, match="context of 4,096"):
        estimate(pd.DataFrame([req]), models, gpus)
    code, _, err = _cli(capsys, "estimate", *_argv(req), "--gpu", "rtx-3090")
    assert code == 2 and "4,096" in err and "--allow-long-context" in err
    code, out, err = _cli(capsys, "sweep", "--models", "llama-2-7b,llama-3-8b", "--gpu-ids", "rtx-3090",
                          *[a for a in _argv(req) if a not in ("--model", "llama-2-7b")])
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["model"] for r in rows] == ["llama-3-8b"]  # left out, not cut to 4,096
    assert "left out llama-2-7b" in err
    assert rows[0]["seq"] == "8192"


# ---- the dashboard -------------------------------------------------------------------------

def _query(req: dict) -> dict:
    """The request as the dashboard's URL carries it (app/state.py FIELDS)."""
    q = {"model": req["model"], "gpu": req["gpu"], "task": req["task"], "gpus": str(req.get("gpus", 1)),
         "batch": str(req.get("batch", 1)), "seq": str(req.get("seq", 2048)),
         "grad_checkpointing": "1" if req.get("grad_checkpointing") else "0",
         "allow_long_context": "1" if req.get("allow_long_context") else "0"}
    if req["task"] == "train":
        q.update(method=req.get("method", "full"), train_precision=req.get("precision", "bf16"),
                 zero=str(req.get("zero", 0)), offload=req.get("offload", "none"),
                 lora_targets=req.get("lora_targets", "q_proj,v_proj").replace("all", ",".join(
                     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))))
    else:
        q.update(infer_precision=req.get("precision", "bf16"))
    return q


# The dashboard has no tensor/pipeline fields (it leaves them to the rules) and asks for the
# sequence explicitly: its requests are the grid's rows without tp/pp, with seq given.
EXPRESSIBLE = [r for r in GRID if "tp" not in r and "pp" not in r]


def _settings(req: dict) -> tuple:
    """What the dashboard's URL carries of a request, but the model."""
    return tuple(sorted((k, v) for k, v in req.items() if k != "model"))


# Each distinct combination of those settings once (76 of the 184 requests), the models taken in
# turn across them (a fresh session costs about a second of CPU; the library and the CLI are
# compared on every row above).
_FIRST = {}
for _i, _req in enumerate(EXPRESSIBLE):
    _FIRST.setdefault(_settings(_req), []).append(_req)
DASHBOARD = [reqs[n % len(reqs)] for n, reqs in enumerate(_FIRST.values())]


@pytest.mark.parametrize("start", range(0, 4))
def test_the_dashboard_shows_the_library_figure(start, models, gpus):
    # a quarter of DASHBOARD per test (every 4th request), each as a shared link opened in a
    # fresh session, read off the Overview's "Peak per GPU"
    for req in DASHBOARD[start::4]:
        st.cache_data.clear()
        full_req = {**req, "seq": req.get("seq", 2048), "gpus": req.get("gpus", 1)}
        want = estimate(pd.DataFrame([full_req]), models, gpus).iloc[0]
        at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=120)
        at.query_params.update(_query(req))
        at.run()
        assert not at.exception, (req, [e.value for e in at.exception])
        assert not at.error, (req, [e.value for e in at.error])
        metric = {m.label: m.value for m in at.metric}["Peak per GPU"]
        assert metric == f"{want['peak_bytes'] / GIB:,.2f} GiB", (req, metric)


def test_the_readme_states_every_rule_as_the_code_has_it():
    from engine.rules import RULES
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, text in RULES:
        assert f"- **{name}**: {text}\n" in readme, name
