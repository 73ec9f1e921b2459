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
pytestmark = pytest.mark.usefixtures("cold_streamlit_caches")


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
    if page == "pages/cost_per_fit.py":  # its charts run in their tab only (lazy tabs): open one
        at.session_state["cf_tab"] = "Chart: buy"
        run(at)
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


@pytest.fixture
def estimates(monkeypatch):
    """Counts the rows of every engine call the planner makes (planning.estimate)."""
    calls = []
    real = planning.estimate

    def counted(frame, *args, **kwargs):
        calls.append(len(frame))
        return real(frame, *args, **kwargs)

    monkeypatch.setattr(planning, "estimate", counted)
    return calls


def test_a_new_budget_mode_hours_or_deadline_on_the_budget_page_estimates_nothing(estimates, monkeypatch):
    from planner import procurement

    swept = []
    real = procurement.budget_sweep
    monkeypatch.setattr(procurement, "budget_sweep", lambda *a, **k: swept.append(1) or real(*a, **k))
    at = open_page("pages/budget.py")
    assert swept == [1] and estimates  # the systems' sweep, the model x GPU sweep and the tiers, once each
    first = next(f.value for f in at.dataframe).copy()  # the systems you can order
    estimates.clear()
    at.number_input(key="bp_budget").set_value(60_000)
    run(at)
    at.number_input(key="bp_deadline").set_value(3.0)
    run(at)
    at.radio(key="bp_mode").set_value("cloud_job")
    run(at)
    at.number_input(key="bp_hours").set_value(48.0)
    run(at)
    assert (swept, estimates) == ([1], [])  # filters over the sweeps already made, nothing estimated
    at.radio(key="bp_mode").set_value("buy")
    run(at)
    at.number_input(key="bp_deadline").set_value(0.0)
    run(at)
    at.number_input(key="bp_budget").set_value(10_000)
    run(at)
    pd.testing.assert_frame_equal(next(f.value for f in at.dataframe), first)  # the same answer as at first
    at.selectbox(key="bp_max_gpus").set_value(4)  # a setting the sweep depends on: swept again, once
    run(at)
    assert swept == [1, 1]


def test_a_sidebar_change_on_the_budget_page_takes_its_systems_rows_from_the_page_sweep(estimates):
    """The default systems' workloads (llama-3-8b:qlora, llama-3-8b:infer-int4) are two of the page's chosen plans
    at the sidebar's settings: after a sidebar change the engine estimates the page's sweep and its tiers, never the
    two workloads again (two calls of 2 x 47 rows, ~90 ms of a 300 ms target). The systems' table is the one a
    fresh sweep gives (tests/test_procurement.py compares the frames)."""
    at = open_page("pages/budget.py")
    cards = len(data.shipped("gpus"))
    estimates.clear()
    box = [w for w in at.sidebar.number_input if w.label == "Micro-batch per GPU (sequences)"]
    box[0].set_value(3)
    run(at)
    assert estimates and 2 * cards not in estimates, estimates
    systems = next(f.value for f in at.dataframe)
    assert set(systems["Workload"]) == {"qlora", "infer-int4"}


def test_one_md_escape_the_stricter_for_both_former_callers():
    """app/user_entries.py had its own md_escape (no # + - . & escaped, only \\n as a break); both
    callers now use app/labels.py's. Inputs of each: a catalog name on a page, a user-catalog problem
    in a toast."""
    from app import labels, user_entries

    assert user_entries.md_escape is labels.md_escape
    page_name = "Llama *3* [8B](http://x.example) - #1 & <b>~v2~</b> $x$ :red[hot] www.evil.example"
    toast = "C:\\users\\me\\catalog.yaml: entry 'my_card' line 3:\r\n- price `1.5` + tax\rnext"
    for text in (page_name, toast):
        escaped = labels.md_escape(text)
        assert "\n" not in escaped and "\r" not in escaped  # every kind of line break is a space
        unescaped = escaped.replace("\\\\", "\0")
        for ch in labels.MD_SPECIAL - {"\\"}:  # every formatting character shown as typed
            assert unescaped.count("\\" + ch) == unescaped.count(ch)
        assert " ".join(text.splitlines()) == __import__("re").sub(r"\\(.)", r"\1", escaped)
    assert labels.md_escape("a-b.c #d +e &f") == "a\\-b\\.c \\#d \\+e \\&f"  # the ones the other one left live


def test_a_chart_builder_is_schema_checked_on_its_first_chart_only(monkeypatch):
    """Altair's Vega-Lite schema check (most of a changed chart's time) runs on a builder's first
    chart in the process; the charts it draws after a sidebar change skip it, with the same spec."""
    seen = []
    real = tables._vega_lite_spec
    monkeypatch.setattr(tables, "_vega_lite_spec", lambda chart: seen.append(type(chart).__name__) or real(chart))
    monkeypatch.setattr(tables, "_VALIDATED", set())
    at = open_page("pages/breakdown.py")
    first = len(seen)
    assert first >= 2 and "_Unvalidated" not in seen  # every builder's first chart: checked
    batch = next(w for w in at.sidebar.number_input if w.label == "Micro-batch per GPU (sequences)")
    batch.set_value(3)
    run(at)
    assert len(seen) > first and set(seen[first:]) == {"_Unvalidated"}  # redrawn charts: not checked again
    changed = [el.proto.spec for el in at.get("vega_lite_chart")]
    tables._VALIDATED.clear()
    tables._chart_spec.clear()
    run(at)  # the same charts built again, every one checked
    assert [el.proto.spec for el in at.get("vega_lite_chart")] == changed


def test_a_workload_change_on_the_breakdown_page_is_one_engine_call(estimates, monkeypatch):
    """The scenario, its what-if changes and its memory curve are one estimate() of their rows
    (planning.breakdown), not three (the engine's fixed cost per call, twice spared)."""
    alone = []
    monkeypatch.setattr(data, "estimate", lambda *a, **k: alone.append(1) or planning.estimate(*a, **k))
    at = open_page("pages/breakdown.py")
    assert len(estimates) == 1 and alone == []
    estimates.clear()
    batch = next(w for w in at.sidebar.number_input if w.label == "Micro-batch per GPU (sequences)")
    batch.set_value(3)
    run(at)
    assert len(estimates) == 1 and alone == []


def test_the_inference_page_sweeps_every_model_once_for_both_its_tables(monkeypatch):
    """The source article's table takes its rows from the page's own table (the same estimates)
    when that table holds the article's precisions; otherwise it sizes its three models alone."""
    calls = []
    real = planning.configurations
    monkeypatch.setattr(planning, "configurations", lambda frame, *a, **k: calls.append(len(frame)) or real(frame, *a, **k))
    at = open_page("pages/inference.py")
    at.session_state["inf_article_open"] = True  # the article's table: a lazy section, opened
    run(at)
    assert len(calls) == 1  # both tables, one sweep
    assert len(at.dataframe) >= 2
    at.multiselect(key="inf_precisions").set_value(["int4", "q4_k_m"])  # no fp16 / int8 in the page's table
    run(at)
    assert len(calls) == 3  # the page's table, and the article's three models on their own
