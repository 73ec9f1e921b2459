"""The random property search of benchmarks/bench_properties.py on every `make test`.

The suite's hypothesis tests draw the same examples on every run; this draws fresh ones: random
scenarios over the whole input space (every catalog model and a few odd shapes, both tasks,
every method, precision, optimizer, parallel layout, GPU or none), in frames of thousands with
changed copies, for a fixed budget of seconds (PROPERTY_SEARCH_SECONDS, default 15). The
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

import pandas as pd
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_properties  # noqa: E402


def test_the_random_property_search_finds_nothing(models, gpus):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    budget = float(os.environ.get("PROPERTY_SEARCH_SECONDS", "15"))
    lines = []
    scenarios, rows, violations = bench_properties.search(
        10**9, seed, 5_000, bench_properties.with_synthetic(models), gpus, lines.append, check_small=40, budget_s=budget)
    print(f"property search seed={seed} scenarios={scenarios} rows={rows} violations={violations}")
    assert scenarios >= 5_000  # at least one whole chunk was checked
    assert violations == 0, (f"property search seed={seed} (rerun: PROPERTY_SEARCH_SEED={seed} make test, or "
                             f"benchmarks/bench_properties.py --seed {seed} --n {scenarios} --chunk 5000):\n"
                             + "\n".join(lines))


def _flags(row) -> list[str]:
    """The command line of one scenario row, from the column table (engine/columns.py)."""
    from engine import columns
    argv = []
    for col in columns.SCENARIO:
        if col.group not in ("scenario", "stack") or col.name not in row or not col.cli:
            continue
        value = row[col.name]
        if col.kind == "bool":
            argv += [col.cli] if bool(value) else []
        elif not (col.name == "method" and row["task"] == "infer"):
            argv += [col.cli, repr(float(value)) if col.kind == "float" else str(value)]
    return argv + (["--gpu", str(row["gpu"])] if row["gpu"] else [])


def test_random_sweep_rows_equal_estimate_json_for_the_same_flags(models, gpus, capsys):
    """A wide sweep never shows a figure the same row alone would not: random rows of one big
    frame, each asked again as `estimate --json` with the flags the column table names."""
    import json

    import numpy as np

    from engine import columns, estimate
    from planner import cli

    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    rng = np.random.default_rng(seed)
    frame = bench_properties.random_scenarios(rng, 2_000, models, gpus)  # the catalog's models only
    out = estimate(frame, models, gpus)
    numeric = [r.name for r in columns.RESULT if r.json and r.name.endswith(("_bytes", "_params", "params"))]
    numeric += ["max_batch", "max_seq", "gpus_needed", "memory_used_fraction", "train_flops"]
    compared = 0
    for i in rng.choice(len(frame), 12, replace=False):
        row = frame.iloc[i]
        argv = ["estimate", *_flags(row), "--json"]
        assert cli.main(argv) == 0, argv
        data = json.loads(capsys.readouterr().out)
        for key in numeric:
            if key not in data:
                assert not row["gpu"] or columns.RESULT_BY_NAME[key].needs_gpu is False, (key, argv)
                continue
            want, got = out[key].iloc[i], data[key]
            compared += 1
            if pd.isna(want) or (isinstance(want, float) and not np.isfinite(want)):
                assert got is None or got == "inf", (seed, key, argv, want, got)
            else:  # --json writes whole numbers and values over 1e6 rounded
                assert got is not None and abs(float(got) - float(want)) <= max(0.5, 1e-12 * abs(float(want))), \
                    (seed, key, argv, want, got)
        assert data["peak_phase"] == str(out["peak_phase"].iloc[i]), (seed, argv)
        if row["gpu"] and data.get("compatible", True):
            assert data["fits"] == bool(out["fits"].iloc[i]), (seed, argv)
    assert compared >= 12 * 15  # every row's byte figures and counts were compared
