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

import gc
import runpy
import threading
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from engine import buffers

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
        _settle_gc()


# Python's cyclic garbage collector walks every tracked object of the process on each full
# collection, and a page run allocates enough (pandas frames, Altair specs) to trigger ~200 young
# and ~20 middle collections and one or two full ones per run. A running dashboard holds ~270,000
# to ~390,000 tracked objects (Streamlit, pandas, Altair, the catalog), all of them alive for the
# process: measured with gc.callbacks over 4 micro-batch changes (2-core machine, 2026-12-02), the
# collector took 43 ms of each Budget change, 126 of Cost per fit, 59 of Inference. After the first
# page run those objects go to the permanent generation (gc.freeze: never scanned again) and young
# collections wait for 50,000 allocations instead of 700: 6, 9 and 0 ms. What freezing keeps
# forever is the first run's own garbage (one run's worth, once per process).
_GC_SETTLED = False
GC_THRESHOLD = (50_000, 20, 100)

# numpy's huge-page advice off for the dashboard's process (engine/buffers.py prefer_small_pages says
# why): every sidebar change makes new result frames, kept by the pages' caches, so it meets fresh
# pages each time. bench_pages.py, the advice on then off (NUMPY_MADVISE_HUGEPAGE=1 / 0), twice: cold
# start 3.27 / 2.65 s and 2.82 / 2.74 s, Budget change 379 / 320 ms and 343 / 352 ms.
buffers.prefer_small_pages()
# text columns in pandas' python storage for the same process (engine/buffers.py prefer_python_strings:
# a Budget change ~430 -> ~350 ms); set before the catalog's frames are read
buffers.prefer_python_strings()


def _settle_gc() -> None:
    global _GC_SETTLED
    if _GC_SETTLED:
        return
    _GC_SETTLED = True
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def inside_frame() -> bool:
    return getattr(_local, "depth", 0) > 0


def ensure_frame() -> None:
    """Called first by every page: outside the frame, run the frame (which runs this page)."""
    if inside_frame():
        return
    runpy.run_path(str(ENTRY_POINT), run_name="__main__")
    st.stop()
