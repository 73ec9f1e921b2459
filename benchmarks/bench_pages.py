"""How fast does each dashboard page answer? (run by `make bench`, not by the tests)

    .venv/bin/python benchmarks/bench_pages.py [--runs 5] [--no-browser]

1. Every page through Streamlit's AppTest, as the server runs it (dashboard.py: page config,
   sidebar, navigation, then the page), timed around `AppTest.run()`:
     cold    caches cleared (st.cache_data, st.cache_resource), then a new session whose
             first request is the page: the catalog frames, the engine sweeps, everything
             computed (the modules are imported once beforehand: the cold start counts them);
     warm    the same page run again with the same settings (what every widget
             interaction that does not change the workload costs);
     change  the sidebar's micro-batch set to a new value before each run, so the page's
             sweeps are computed anew (the engine call itself is on the clock).
   Each is the median of --runs runs.
2. Cold start of `streamlit run dashboard.py` (a fresh process, a fresh catalog build
   directory) until the first page has rendered in Chromium: /_stcore/health polled until the
   server answers, then the page fetched with Playwright (/usr/bin/chromium) and waited on
   until the app's script state is notRunning and the page title is shown. Median of 3.

Prints one line per page, then the cold-start line:
  page=<file> cold_ms=<...> warm_ms=<...> change_ms=<...>
  cold_start_s=<median> runs=<...>
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import streamlit as st  # noqa: E402
import streamlit.testing.v1.app_test as app_test_module  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from app.local_server import CHROMIUM, IDLE, launch_chromium, running_dashboard  # noqa: E402

# Clearing the caches outside a server logs "no runtime" / "missing ScriptRunContext" warnings
# each time: not this benchmark's findings (errors still show)
logging.disable(logging.WARNING)

DASHBOARD = str(ROOT / "dashboard.py")
PAGES = ["pages/overview.py", "pages/feasibility.py", "pages/budget.py", "pages/cost_per_fit.py",
         "pages/inference.py", "pages/serving.py", "pages/breakdown.py", "pages/evidence.py", "pages/catalog_browser.py"]
BATCH_LABEL = "Micro-batch per GPU (sequences)"




def _timed_run(at: AppTest) -> float:
    start = time.perf_counter()
    at.run()
    took = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(f"page raised: {[e.value for e in at.exception][:1]}")
    return took


def _open(page: str) -> AppTest:
    """A new session whose first request is the page (a deep link)."""
    at = AppTest.from_file(DASHBOARD, default_timeout=120)
    at.switch_page(page)
    return at


def bench_page(page: str, runs: int) -> dict:
    cold, warm, change = [], [], []
    for _ in range(runs):
        st.cache_data.clear()
        st.cache_resource.clear()
        at = _open(page)
        cold.append(_timed_run(at))
    for _ in range(runs):
        warm.append(_timed_run(at))
    for i in range(runs):
        box = [w for w in at.sidebar.number_input if w.label == BATCH_LABEL]
        if box:  # training workload (the default): a new micro-batch, so new sweeps
            box[0].set_value(2 + i)
        change.append(_timed_run(at))
    return {"cold": statistics.median(cold), "warm": statistics.median(warm), "change": statistics.median(change)}


# ---- cold start in a browser ----------------------------------------------------------------

def cold_start(browser) -> float:
    """Seconds from `streamlit run` to the first page rendered in the browser."""
    env = {**os.environ, "LLM_PLANNER_BUILD_DIR": tempfile.mkdtemp()}
    start = time.perf_counter()
    with running_dashboard(env, timeout_s=120, poll_s=0.05) as url:
        page = browser.new_page(viewport={"width": 1500, "height": 1200})
        try:
            page.goto(url)
            page.wait_for_selector("h1:has-text('LLM hardware planner')", timeout=120_000)
            page.wait_for_selector(IDLE, timeout=120_000)
            return time.perf_counter() - start
        finally:
            page.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement (median reported)")
    ap.add_argument("--no-browser", action="store_true", help="skip the cold start in Chromium")
    args = ap.parse_args(argv)

    _timed_run(_open(PAGES[0]))  # imports (streamlit, altair, the engine): the cold start below counts them
    worst = 0.0
    for page in PAGES:
        t = bench_page(page, args.runs)
        worst = max(worst, t["warm"])
        print(f"page={page} cold_ms={t['cold'] * 1e3:.0f} warm_ms={t['warm'] * 1e3:.0f} "
              f"change_ms={t['change'] * 1e3:.0f}", flush=True)

    if args.no_browser:
        print("cold_start_s=skipped (--no-browser)")
        return 0
    if not CHROMIUM.exists():
        print(f"cold_start_s=skipped ({CHROMIUM} is missing: apt-get install -y chromium)")
        return 1
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            starts = [cold_start(browser) for _ in range(3)]
        finally:
            browser.close()
    print(f"cold_start_s={statistics.median(starts):.2f} runs=" + ",".join(f"{s:.2f}" for s in starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
