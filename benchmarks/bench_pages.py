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
   Each is the median of --runs runs. The server compiles each script once per process (its
   Runtime keeps one ScriptCache); AppTest makes a new one per run, so every run compiled
   dashboard.py and the page again with Streamlit's "magic" rewrite (8-35 ms a page on this
   machine, none of it on a server's rerun). One ScriptCache is kept for the whole benchmark
   instead, emptied before each cold run (--fresh-script-cache: AppTest's own, as before).
2. Cold start of `streamlit run dashboard.py` (a fresh process, a fresh catalog build
   directory) until the first page has rendered in Chromium: /_stcore/health polled until the
   server answers, then the page fetched with Playwright (/usr/bin/chromium) and waited on
   until the app's script state is notRunning and the page title is shown. Median of 3.

Prints one line per page, then the cold-start line, the load average at the start and at the end
(/proc/loadavg: other processes on the same cores slow every figure), then one line per target:
  page=<file> cold_ms=<...> warm_ms=<...> change_ms=<...>
  cold_start_s=<median> runs=<...>
  load_start=<1, 5, 15 min> load_end=<1, 5, 15 min>
  PASS warm<=150ms (worst: <page> <ms>)          (or FAIL ...)
  PASS change<=300ms (worst: <page> <ms>)
  PASS cold_start<=3s (median <s> s)             (SKIP without a browser)
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
import streamlit as st
import streamlit.testing.v1.app_test as app_test_module
from streamlit.testing.v1 import AppTest

from app.local_server import CHROMIUM, IDLE, launch_chromium, running_dashboard

# Clearing the caches outside a server logs "no runtime" / "missing ScriptRunContext" warnings
# each time: not this benchmark's findings (errors still show)
logging.disable(logging.WARNING)

DASHBOARD = str(ROOT / "dashboard.py")
PAGES = ["pages/overview.py", "pages/feasibility.py", "pages/budget.py", "pages/cost_per_fit.py",
         "pages/inference.py", "pages/serving.py", "pages/breakdown.py", "pages/evidence.py", "pages/catalog_browser.py"]
BATCH_LABEL = "Micro-batch per GPU (sequences)"
# issue 24's targets on the 2-core machine
WARM_MS, CHANGE_MS, COLD_START_S = 150, 300, 3.0


class _SharedScriptCache:
    """One ScriptCache for every AppTest run, as one server has (see the docstring)."""
    cache = None

    @classmethod
    def install(cls) -> None:
        from streamlit.runtime.scriptrunner.script_cache import ScriptCache
        cls.cache = ScriptCache()
        app_test_module.ScriptCache = lambda: cls.cache

    @classmethod
    def clear(cls) -> None:
        if cls.cache is not None:
            cls.cache.clear()


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
        _SharedScriptCache.clear()
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

def compile_modules() -> None:
    """The project's modules compiled, as `make run` leaves the checkout before it starts the server (and as pip
    installs them): the cold start below is a user's, not the first import's compile (~190 ms where
    PYTHONDONTWRITEBYTECODE keeps Python from writing them)."""
    import compileall
    for part in ("engine", "catalog", "planner", "app", "pages"):
        compileall.compile_dir(str(ROOT / part), quiet=1)
    compileall.compile_file(str(ROOT / "dashboard.py"), quiet=1)


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


def _load() -> str:
    try:
        return ",".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # not Linux
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement (median reported)")
    ap.add_argument("--no-browser", action="store_true", help="skip the cold start in Chromium")
    ap.add_argument("--fresh-script-cache", action="store_true",
                    help="AppTest's own ScriptCache per run (every run compiles the scripts again)")
    ap.add_argument("--pages", nargs="*", default=PAGES, help="only these pages (default: all)")
    args = ap.parse_args(argv)
    if not args.fresh_script_cache:
        _SharedScriptCache.install()

    load_start = _load()
    _timed_run(_open(PAGES[0]))  # imports (streamlit, altair, the engine): the cold start below counts them
    results = {}
    for page in args.pages:
        t = results[page] = bench_page(page, args.runs)
        print(f"page={page} cold_ms={t['cold'] * 1e3:.0f} warm_ms={t['warm'] * 1e3:.0f} "
              f"change_ms={t['change'] * 1e3:.0f}", flush=True)

    start_s, rc = None, 0
    if args.no_browser:
        print("cold_start_s=skipped (--no-browser)")
    elif not CHROMIUM.exists():
        print(f"cold_start_s=skipped ({CHROMIUM} is missing: apt-get install -y chromium)")
        rc = 1
    else:
        from playwright.sync_api import sync_playwright

        compile_modules()
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            try:
                starts = [cold_start(browser) for _ in range(3)]
            finally:
                browser.close()
        start_s = statistics.median(starts)
        print(f"cold_start_s={start_s:.2f} runs=" + ",".join(f"{s:.2f}" for s in starts))

    print(f"load_start={load_start} load_end={_load()}")
    for what, limit in (("warm", WARM_MS), ("change", CHANGE_MS)):
        page, t = max(results.items(), key=lambda item: item[1][what])
        ms = t[what] * 1e3
        print(f"{'PASS' if ms <= limit else 'FAIL'} {what}<={limit}ms (worst: {page} {ms:.0f})")
    if start_s is None:
        print(f"SKIP cold_start<={COLD_START_S:g}s (not measured)")
    else:
        print(f"{'PASS' if start_s <= COLD_START_S else 'FAIL'} cold_start<={COLD_START_S:g}s (median {start_s:.2f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
