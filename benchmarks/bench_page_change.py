"""One page's sidebar change, timed N times in one process, with the engine calls it makes.

`bench_pages.py` times every page three times in one process; on a shared 2-core machine its
medians move by +-50 ms from run to run. To compare two commits, run this script in each checkout
alternately (e.g. `git worktree add /tmp/base <rev>`, then `cd /tmp/base && python
/path/to/benchmarks/bench_page_change.py pages/budget.py`): it times the page in the checkout it
is run from.

    python benchmarks/bench_page_change.py pages/budget.py [pages/inference.py ...] [--changes 8]

Prints per page: each change's ms, their median, and the estimate() calls of the last change as
(rows, ms). A change is what bench_pages.py's "change" is: the sidebar's micro-batch set to a new
value, so every sweep of the workload runs again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.getcwd()
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

import bench_pages as bp  # noqa: E402  (the same AppTest set-up, one ScriptCache as a server has)


def _count_estimate_calls(log: list) -> None:
    """Wrap engine.estimate.estimate where the planner and the dashboard call it."""
    import app.data
    import planner.planning
    import planner.report
    estimate_module = sys.modules["engine.estimate"]
    real = estimate_module.estimate

    def timed(frame, *args, **kwargs):
        start = time.perf_counter()
        out = real(frame, *args, **kwargs)
        log.append((len(frame), round((time.perf_counter() - start) * 1000)))
        return out

    for module in (planner.planning, app.data, planner.report):
        module.estimate = timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="+", help="page files, e.g. pages/budget.py")
    parser.add_argument("--changes", type=int, default=8, help="sidebar changes timed per page")
    args = parser.parse_args()
    import engine.estimate  # noqa: F401  (loaded, so that sys.modules has it)
    log: list = []
    _count_estimate_calls(log)
    bp._SharedScriptCache.install()
    print(f"dashboard: {bp.DASHBOARD}")
    for page in args.pages:
        at = bp._open(page)
        bp._timed_run(at)
        bp._timed_run(at)
        took, cpu = [], []
        for i in range(args.changes):
            box = [w for w in at.sidebar.number_input if w.label == bp.BATCH_LABEL]
            if not box:
                raise SystemExit(f"{page}: no '{bp.BATCH_LABEL}' in the sidebar (a training workload is needed)")
            box[0].set_value(2 + i)
            log.clear()
            start = time.process_time()
            took.append(bp._timed_run(at) * 1000)
            cpu.append((time.process_time() - start) * 1000)
        # cpu_ms: the process's CPU time over the change (every thread): beside the wall time it tells a slow
        # machine (both up) from waiting (the wall time alone up)
        print(f"page={page} change_ms={','.join(f'{t:.0f}' for t in took)} median_ms={statistics.median(took):.0f} "
              f"cpu_median_ms={statistics.median(cpu):.0f} estimate_calls={log} estimate_ms={sum(ms for _, ms in log)}",
              flush=True)


if __name__ == "__main__":
    main()
