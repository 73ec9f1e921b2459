"""The random property search of benchmarks/bench_properties.py on every `make test`.

The suite's hypothesis tests draw the same examples on every run; this draws fresh ones: random
scenarios over the whole input space (every catalog model and a few odd shapes, both tasks,
every method, precision, optimizer, parallel layout, GPU or none), in frames of thousands with
changed copies, for a fixed budget of seconds (PROPERTY_SEARCH_SECONDS, default 40). The
invariants it checks are listed in that script's docstring: a row's result is the same alone
and in any frame, every byte figure finite and >= 0 (NaN exactly where the contract says),
peak = components + runtime overhead, never more per GPU for one more ZeRO stage, more GPUs,
offload, and never less for more batch or a longer sequence.

The seed is fresh each run (tests/conftest.py draws it once per run and prints it in pytest's
header: "property search seed: S"); PROPERTY_SEARCH_SEED=S reruns it. A failing seed prints
the first offending scenario of each broken invariant: paste it into
tests/test_regressions_memory.py, fix the cause, keep the case.
"""

import os
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_properties  # noqa: E402


def test_the_random_property_search_finds_nothing(models, gpus):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    budget = float(os.environ.get("PROPERTY_SEARCH_SECONDS", "40"))
    lines = []
    scenarios, rows, violations = bench_properties.search(
        10**9, seed, 5_000, bench_properties.with_synthetic(models), gpus, lines.append, check_small=40, budget_s=budget)
    print(f"property search seed={seed} scenarios={scenarios} rows={rows} violations={violations}")
    assert scenarios >= 5_000  # at least one whole chunk was checked
    assert violations == 0, (f"property search seed={seed} (rerun: PROPERTY_SEARCH_SEED={seed} make test, or "
                             f"benchmarks/bench_properties.py --seed {seed} --n {scenarios} --chunk 5000):\n"
                             + "\n".join(lines))
