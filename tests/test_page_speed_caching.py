"""What a page rerun recomputes (issue 24, item 4): counted calls, never timings (the timed
targets are benchmarks/bench_pages.py's). A rerun that changes nothing runs no sweep and no chart
builder; a budget change does not re-run the model x GPU sweep; a workload change runs it once;
one set of argument values is one cache entry however it is spelled; the catalog frames are the
same objects from run to run while nothing in the catalog changed."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import data, tables
from planner import planning
from tests.conftest import ROOT

DASHBOARD = str(ROOT / "dashboard.py")
pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


@pytest.fixture
def sweeps(monkeypatch):
    """Counts the dashboard's model x GPU sweeps (app.data.configurations -> planning.plans_frame)."""
    calls = []
    real = planning.plans_frame

    def counted(plans, **axes):
        calls.append(tuple(plans))
        return real(plans, **axes)

    monkeypatch.setattr(planning, "plans_frame", counted)
    return calls


def run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=120)
    at.switch_page(page)
    return run(at)


def test_budget_page_sweeps_once_per_workload_and_not_again_for_a_new_budget(sweeps):
    at = open_page("pages/budget.py")
    assert len(sweeps) == 1  # one sweep of the chosen workloads (its table, chart and plan share it)
    shown = [f.value.copy() for f in at.dataframe]
    run(at)
    assert len(sweeps) == 1  # a rerun with nothing changed: cache hits only
    assert next(f.value for f in at.dataframe).equals(shown[0])
    at.number_input(key="bp_budget").set_value(25_000)
    run(at)
    assert len(sweeps) == 1  # only the budget changed: the sweep is reused, the plan recomputed
    at.number_input(key="bp_budget").set_value(10_000)
    run(at)
    assert len(sweeps) == 1
    for before, after in zip(shown, [f.value for f in at.dataframe]):  # back to the first budget: the same tables
        pd.testing.assert_frame_equal(before, after)
    batch = next(w for w in at.sidebar.number_input if w.label == "Micro-batch per GPU (sequences)")
    batch.set_value(2)
    run(at)
    assert len(sweeps) == 2  # a new workload: one new sweep, not one per table


@pytest.mark.parametrize("page", ["pages/overview.py", "pages/feasibility.py", "pages/cost_per_fit.py"])
def test_a_rerun_with_nothing_changed_runs_no_sweep_and_builds_no_chart(page, sweeps, monkeypatch):
    built = []
    real = tables._vega_lite_spec
    monkeypatch.setattr(tables, "_vega_lite_spec", lambda chart: built.append(1) or real(chart))
    at = open_page(page)
    first, charts = len(sweeps), len(built)
    assert first >= 1 and charts >= 1
    specs = [el.proto.spec for el in at.get("vega_lite_chart")]
    run(at)
    assert (len(sweeps), len(built)) == (first, charts)
    assert [el.proto.spec for el in at.get("vega_lite_chart")] == specs  # the same charts, from the cache


def test_one_set_of_argument_values_is_one_cache_entry(models, gpus, sweeps):
    plan = {"LoRA": {"task": "train", "method": "lora", "batch": 1, "seq": 512}}
    ids = (tuple(models["id"][:2]), tuple(gpus["id"][:3]))
    first = data.configurations(plan, *ids, models, gpus, 4)
    again = data.configurations(plan, *ids, models, gpus, 4, "new")         # the default spelled out
    by_name = data.configurations(plan, *ids, models=models.copy(deep=True), gpus=gpus, max_gpus=4)  # keywords, an equal copy
    assert len(sweeps) == 1
    pd.testing.assert_frame_equal(first, again)
    pd.testing.assert_frame_equal(first, by_name)
    data.configurations(plan, *ids, models, gpus, 4, "used")                # another value: another entry
    assert len(sweeps) == 2


def test_a_cached_result_is_the_callers_own_copy(models, gpus):
    plan = {"LoRA": {"task": "train", "method": "lora", "batch": 1, "seq": 512}}
    args = (plan, tuple(models["id"][:1]), tuple(gpus["id"][:2]), models, gpus, 2)
    mine = data.configurations(*args)
    mine["gpus"] = -1                       # a caller that changes its frame ...
    del mine["peak_bytes"]
    fresh = data.configurations(*args)      # ... changes nobody else's
    assert (fresh["gpus"] > 0).all() and "peak_bytes" in fresh


def test_value_key_follows_values_not_objects(models):
    assert data.value_key({"a": "x" * 3}, [1, 2.0]) == data.value_key({"a": "".join("xxx")}, [1, 2.0])
    assert data.value_key(models) == data.value_key(models.copy(deep=True))
    assert data.value_key(models) != data.value_key(models.iloc[:-1])
    assert data.value_key(1) != data.value_key(1.0) != data.value_key(True)
    assert data.value_key(("a", None)) != data.value_key(("a", "None"))


def test_merged_frames_are_the_same_objects_until_the_catalog_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_PLANNER_USER_CATALOG", str(tmp_path / "user_catalog.yaml"))
    models, gpus = data.merged_frames()
    again = data.merged_frames()
    assert again[0] is models and again[1] is gpus  # their cache-key digests are computed once
    record = {"id": "my-card", "name": "My card", "vendor": "nvidia", "segment": "workstation", "memory_gb": 42.0,
              "usable_memory_bytes": 40_000 * 2**20, "usable_memory_source": "nvidia-smi", "memory_type": "GDDR6",
              "unified_memory": False, "bandwidth_gbps": 800.0, "bf16_tflops": 100.0, "fp16_tflops": 100.0,
              "fp32_tflops": None, "int8_tops": None, "fp8_tflops": None, "tdp_w": 300.0, "interconnect": "PCIe 4.0 x16",
              "interconnect_gbps": 64.0, "launch_year": 2023, "price_usd": 3000.0, "price_source": "invoice",
              "price_date": "2024-05", "cloud_usd_per_hour": None, "cloud_source": "not rented", "cloud_date": "2024-05"}
    state = {"user_gpus": [record]}
    monkeypatch.setattr(data.user_entries, "session_records",
                        lambda kind: list(state.get("user_" + data.user_entries.kind_name(kind), [])))
    with_card = data.merged_frames()[1]
    assert with_card is not gpus and "my-card" in set(with_card["id"])
    assert data.merged_frames()[1] is with_card


def test_subset_is_one_object_per_frame_and_rows(gpus):
    keep = gpus["memory_gb"] > 40
    first = data.subset(gpus, keep)
    assert data.subset(gpus, keep.copy()) is first
    pd.testing.assert_frame_equal(first, gpus[keep])
    assert data.subset(gpus, ~keep) is not first
