"""The serving engines' published runs as evidence (planner/serving_evidence.py): every measurement of
catalog/serving_measurements.yaml beside the serving model's figure, on the Evidence page's second tab,
in `evidence --serving [--json]` and in README's sentence, all from one table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from catalog import default_catalog
from catalog.serving_data import load_measurements
from planner.serving_evidence import (
    README_BEGIN,
    README_END,
    SERVING_EVIDENCE_JSON_KEYS,
    SPEED_METRICS,
    readme_sentence,
    serving_evidence_table,
    speed_summary,
)
from tests.clirun import run_cli
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def meas():
    return load_measurements()


@pytest.fixture(scope="module")
def table(meas):
    cat = default_catalog()
    return serving_evidence_table(meas, cat.models(), cat.gpus())


def test_every_measurement_is_a_row_with_its_figure_error_and_source(meas, table):
    assert list(table["id"]) == list(meas["id"])
    assert set(SERVING_EVIDENCE_JSON_KEYS) <= set(table.columns)
    assert (table["reference"].to_numpy() == meas["value"].to_numpy(float)).all()
    assert np.isfinite(table["estimate"]).all() and (table["estimate"] > 0).all()
    expected = (table["estimate"] / table["reference"] - 1) * 100
    assert np.allclose(table["error_pct"], expected)
    assert (table["within_35pct"] == (expected.abs() <= 35)).all()
    for col in ("source", "url", "date", "setup_note"):
        assert table[col].astype(str).str.len().gt(0).all(), col
    assert set(table["unit"]) == {"tokens/s", "GiB"}
    assert (table.loc[table["metric"] == "kv_cache_available_gib", "unit"] == "GiB").all()


def test_fit_rows_reproduce_the_runs_they_were_fitted_on(table):
    """A fit row set a constant of the speed model, so the table, which must use the shipped constants, gives it back
    (closed-form fits: the rows a constant was solved from come out exact, the two-row least squares close)."""
    fit = table[(table["role"] == "fit") & table["metric"].isin(SPEED_METRICS)]
    assert len(fit) >= 10
    # transformers' efficiency row: its step is the GPU's on its own (faster) host, while the model keeps the H100 fit
    # row's host cost, which is longer than this row's GPU time: the model gives this row the host's step. Its GPU side
    # is checked instead: the bytes at the fitted efficiency take exactly the measured step.
    from engine import serving as S
    meas = load_measurements().set_index("id")
    term = meas["fit_term"].reindex(fit["id"]).to_numpy()
    host_bound = fit["engine"].isin(S.CPU_BOUND_ENGINES).to_numpy() & (term == "efficiency")
    assert host_bound.sum() == 1
    r = fit[host_bound].iloc[0]
    m = meas.loc[r["id"]]
    gpu_s = m["weights_gib"] * 2**30 / (S.DECODE_EFFICIENCY[("transformers", "nvidia")] * m["bandwidth_gbps"] * 1e9)
    assert gpu_s == pytest.approx(1.0 / r["reference"], rel=0.01)
    assert r["estimate"] < r["reference"]  # the host side is the longer: never faster than the run
    fit = fit[~host_bound]
    # the PCIe all-reduce pair (one rig's TP 1 and TP 2 runs): it sets the latency by their difference, whatever the
    # efficiency, so each row carries the rig's efficiency error (both below the run) and the pair's difference is exact
    pair = (term[~host_bound] == "allreduce")
    assert pair.sum() == 2
    t1, t2 = (1.0 / fit[pair].sort_values("id")[col].to_numpy() for col in ("reference", "estimate"))
    assert t2[1] - t2[0] / 2 == pytest.approx(t1[1] - t1[0] / 2, rel=0.01)  # (the ids sort TP 1 first)
    assert (fit[pair]["estimate"] < fit[pair]["reference"]).all()
    fit = fit[~pair]
    assert (fit["error_pct"].abs() < 5).all(), fit.loc[fit["error_pct"].abs() >= 5, ["id", "error_pct"]]


def test_the_evidence_figure_is_what_serve_gives_a_user_on_the_same_card(table):
    """The RTX 4090 llama-bench row (Llama 2 7B Q4_0, tg128 after pp512) against `serve` for the catalog's RTX 4090:
    the same model, within the prompt's KV reads and the catalog's file size (a few %)."""
    row = table.set_index("id").loc["lcpp-cuda-rtx4090-llama2-7b-q4-0-tg128"]
    code, out, err = run_cli("serve", "--model", "llama-2-7b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                             "--precision", "q4_0", "--max-model-len", "4096", "--concurrency", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["decode_tokens_per_s"] == pytest.approx(row["estimate"], rel=0.10)


def test_the_summary_counts_the_held_out_speed_rows_against_the_target(table):
    held = table[(table["role"] == "holdout") & table["metric"].isin(SPEED_METRICS)]
    ratio = held["estimate"].to_numpy() / held["reference"].to_numpy()
    hits = int(((ratio >= 0.65) & (ratio <= 1.35)).sum())
    line = speed_summary(table)
    assert f": {hits} of {len(held)} (" in line
    assert line.split("target (>= 75%): ")[1].startswith("met" if hits / len(held) >= 0.75 else "not met")
    # a fit row never counts: flipping every held-out row to fit leaves no speed row to count
    assert ": 0 of 0 (0%)" in speed_summary(table.assign(role="fit"))


def test_readme_states_the_serving_figures_the_code_computes(table):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(README_BEGIN) + len(README_BEGIN)
    assert text[start:text.index(README_END)] == readme_sentence(table)


def test_cli_serving_json_is_a_list_with_the_contract_keys(meas):
    code, out, err = run_cli("evidence", "--serving", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data) == len(meas)
    assert all(list(d) == [*SERVING_EVIDENCE_JSON_KEYS, "schema_version"] for d in data)
    kv = next(d for d in data if d["metric"] == "kv_cache_available_gib")
    assert kv["unit"] == "GiB" and isinstance(kv["estimate"], float) and kv["engine"] in ("vllm", "sglang")


def test_cli_serving_text_lists_every_run_and_ends_with_the_summary(meas, table):
    code, out, err = run_cli("evidence", "--serving")
    assert code == 0, err
    lines = out.rstrip("\n").splitlines()
    assert lines[-1] == speed_summary(table)
    assert sum(line.split(" ")[0] in set(meas["id"]) for line in lines) == len(meas)
    # the references' table is unchanged without the flag
    code, plain, _ = run_cli("evidence")
    assert code == 0 and "held-out batch-1 speed" not in plain


def test_the_evidence_page_lists_every_serving_run_in_its_own_tab(meas):
    from tests.test_pages import open_app

    at = open_app("pages/evidence.py")
    assert [t.label for t in at.tabs] == ["Training and memory references", "Serving engines (speed, KV budget)"]
    serving = at.tabs[1]
    view = serving.dataframe[0].value
    assert list(view["Run"]) == list(meas["id"])
    assert any(m.label.startswith("Held-out speed figures") for m in serving.metric)
    at.multiselect(key="sv_engine").set_value(["sglang"]).run()
    assert not at.exception
    shown = at.tabs[1].dataframe[0].value
    assert set(shown["Engine"]) == {"sglang"} and len(shown) == int((meas["engine"] == "sglang").sum())
    # the references' tab keeps every published reference (its own test: tests/test_pages.py)
    assert len(at.tabs[0].dataframe[0].value) >= len(default_catalog().references())
    at.text_input(key="sv_search").set_value("no-such-run-anywhere").run()
    assert not at.exception
    assert any("No serving run matches" in i.value for i in at.tabs[1].info)
