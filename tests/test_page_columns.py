"""The configurations frame the dashboard caches leaves out app.data.NOT_ON_PAGES: the pages built on it
must not need those columns, and must show exactly what they showed with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import data

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = str(ROOT / "dashboard.py")
# the cached calls over planning.configurations (app/data.py)
OVER_CONFIGURATIONS = re.compile(r"\bc\.(configurations|cheapest|cost_per_fit|budget_plan)\b")

pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


def _pages_over_configurations() -> list[Path]:
    return sorted(p for p in (ROOT / "pages").glob("*.py") if OVER_CONFIGURATIONS.search(p.read_text()))


def test_the_pages_over_configurations_are_the_four_known():
    # a new page over the frame joins the render test below by this list changing
    assert [p.name for p in _pages_over_configurations()] == ["budget.py", "cost_per_fit.py", "feasibility.py",
                                                               "overview.py"]


def test_no_page_over_configurations_names_a_dropped_column():
    for page in _pages_over_configurations():
        text = page.read_text()
        named = [col for col in data.NOT_ON_PAGES if re.search(rf"\b{col}\b", text)]
        assert not named, f"{page.name} reads {named}, which app.data.NOT_ON_PAGES leaves out of the cached frame"
        # a column name built from parts (f"{p}_phase_bytes") would escape the search above
        assert "_phase_bytes" not in text, page.name


def test_the_dropped_columns_exist_and_the_frame_keeps_the_rest(monkeypatch):
    """Every dropped name is a column planning.configurations returns (a renamed column would leave a dead entry),
    and the cached frame is the full one less exactly those."""
    import planner.planning as planning
    seen = {}
    real = planning.configurations

    def keep(*args, **kwargs):  # the pages' call (which leaves NOT_ON_PAGES out as it builds), and the full frame
        seen["full"] = real(*args, **{**kwargs, "drop": ()})
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "configurations", keep)
    models, gpus = data.merged_frames()
    plan = {"train": {"task": "train", "method": "lora", "seq": 2048, "batch": 1},
            "serve": {"task": "infer", "seq": 2048, "batch": 1}}
    cut = data.configurations(plan, tuple(models["id"][:4]), tuple(gpus["id"][:6]), models, gpus, 8)
    full = seen["full"]
    missing = [c for c in data.NOT_ON_PAGES if c not in full.columns]
    assert not missing, f"NOT_ON_PAGES names columns planning.configurations does not return: {missing}"
    assert list(cut.columns) == [c for c in full.columns if c not in data.NOT_ON_PAGES]
    assert len(cut) == len(full) > 0
    for col in cut.columns:  # the kept columns unchanged, values and types
        assert cut[col].dtype == full[col].dtype, col
        assert cut[col].equals(full[col]), col


def _rendered(at: AppTest) -> list[bytes]:
    """Every element and block the run drew, serialized (tables as their Arrow bytes, charts as their specs and
    data; a download button as its label and help: the CSV it writes is the table it sits under)."""
    out = []

    def walk(node):
        proto = getattr(node, "proto", None)
        if proto is not None:
            if type(proto).__name__ == "DownloadButton":  # its file is written when pressed (app/tables.py): the
                proto = type(proto)(**{"label": proto.label, "help": proto.help})  # id is new each run; the table is above
            out.append(proto.SerializeToString(deterministic=True))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return out


def _render(page: str, query: dict, tab: str | None) -> list[bytes]:
    import streamlit as st
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(DASHBOARD, default_timeout=120)
    at.query_params.update(query)
    at.run()
    at.switch_page(page).run()
    if tab is not None:
        at.session_state["cf_tab"] = tab
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return _rendered(at)


@pytest.mark.parametrize("page, query, tab", [
    ("pages/overview.py", {}, None),
    ("pages/overview.py", {"task": "infer"}, None),
    ("pages/feasibility.py", {}, None),
    ("pages/feasibility.py", {"task": "infer"}, None),
    ("pages/budget.py", {}, None),
    ("pages/budget.py", {"task": "infer"}, None),
    ("pages/cost_per_fit.py", {}, None),
    ("pages/cost_per_fit.py", {"task": "infer"}, "Chart: buy"),
    ("pages/cost_per_fit.py", {}, "Chart: rent"),
])
def test_a_page_shows_the_same_without_the_dropped_columns(monkeypatch, page, query, tab):
    cut = _render(page, query, tab)
    monkeypatch.setattr(data, "NOT_ON_PAGES", ())
    full = _render(page, query, tab)
    assert len(cut) == len(full) > 10
    differ = [i for i, (a, b) in enumerate(zip(cut, full)) if a != b]
    assert not differ, f"{page} {query} {tab}: {len(differ)} elements differ, the first: {full[differ[0]][:300]!r}"
