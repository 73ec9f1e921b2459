"""Every page runs inside the frame of dashboard.py (page config, sidebar, st.navigation).

Streamlit treats an app whose entry point has a pages/ folder beside it as a legacy multipage
app until st.navigation has run once in the process: a fresh server whose first request is a
deep link (http://host/feasibility) runs pages/feasibility.py alone, without the sidebar
(Streamlit's runtime/scriptrunner/script_runner.py, `_mpa_v1`, 1.67). Instead of patching
Streamlit's private flag, a page that finds itself outside the frame runs the frame itself:
dashboard.py calls st.navigation (public API; from then on the process uses it), which runs
the requested page (same url path) inside the frame, and the outer run stops there. One run,
no extra rerun; tests/test_pages.py checks a deep link renders with its sidebar.
"""

from __future__ import annotations

import runpy
import threading
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

ENTRY_POINT = Path(__file__).resolve().parent.parent / "dashboard.py"
_local = threading.local()  # each session's script runs in its own thread


@contextmanager
def framed():
    """dashboard.py runs the chosen page inside this block."""
    before = getattr(_local, "depth", 0)
    _local.depth = before + 1
    try:
        yield
    finally:
        _local.depth = before


def inside_frame() -> bool:
    return getattr(_local, "depth", 0) > 0


def ensure_frame() -> None:
    """Called first by every page: outside the frame, run the frame (which runs this page)."""
    if inside_frame():
        return
    runpy.run_path(str(ENTRY_POINT), run_name="__main__")
    st.stop()
