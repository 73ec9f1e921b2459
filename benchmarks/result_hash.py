"""A guard for refactors of the engine: one SHA-256 per result column of `engine.estimate`.

    .venv/bin/python benchmarks/result_hash.py --save /tmp/hashes.json    # before a change
    .venv/bin/python benchmarks/result_hash.py --check /tmp/hashes.json   # after it: exit 1 on a difference

Every column of every case is hashed from its values as bytes (its dtype's name first):
floats with every NaN written as one NaN pattern (-0.0 and 0.0 stay apart: bit-identical means
bit-identical), nullable booleans as 0 / 1 / 2 (NA), categoricals, strings and objects by the
text of each value (so a change of categories' order alone is no difference, a change of any
row's text is). The column list and order of each case are compared too.

The cases (each one or a few `estimate()` calls; about 1.3 M rows in all):
  bench            the 1,053,696-row grid of benchmarks/bench_engine.py (its own grid builder)
  mixed            50,000 random valid scenarios of benchmarks/bench_properties.py (seed 20261202,
                   the catalog and its SYNTHETIC shapes, ~70% training, ~30% serving, a catalog
                   GPU or none per row), default overhead
  mixed_no_gpus    the first 10,000 of them with gpus=None (no fit columns)
  mixed_overhead   the next 10,000 with other runtime-overhead settings
  mixed_small      frames of 1, 7 and 300 of them (below the pooled-memory size)
  mixed_settings   5,000 with per-row speed settings (tokens, mfu, prompt_tokens, ...)
  mixed_shape      2,000 carrying their own model shape columns (the add_speed_cost path)
  stacks           20,000 of them with one random stack switch, recipe, kv_policy or ep per
                   row (rows the engine refuses left out, found by bisection)
  measured         tests/data/measured_peaks.csv's scenarios (benchmarks/accuracy_table.py),
                   as compare() asks them, padded and unpadded
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy_table
import bench_engine
import bench_properties

from catalog import default_catalog
from engine import estimate
from engine.scenarios import CHOICES, SWITCHES
from engine.speed import MODEL_SHAPE

SEED = 20261202
NAN = np.float64(np.nan)


def column_hash(values) -> str:
    """SHA-256 of one column: its dtype's name, then its values as bytes (see the module doc)."""
    dtype = values.dtype
    h = hashlib.sha256(str(dtype).encode())
    if isinstance(dtype, pd.CategoricalDtype):
        text = np.asarray(values.cat.categories.astype(str), dtype=object) if isinstance(values, pd.Series) \
            else np.asarray(values.categories.astype(str), dtype=object)
        codes = values.cat.codes.to_numpy() if isinstance(values, pd.Series) else values.codes
        words = np.append(text, "\x00<NA>")[np.where(codes < 0, len(text), codes)]
        h.update("\x1f".join(words.tolist()).encode())
    elif isinstance(dtype, pd.BooleanDtype):
        arr = pd.array(values, dtype="boolean")
        h.update(np.where(arr.isna(), 2, arr.to_numpy(dtype=bool, na_value=False)).astype(np.uint8).tobytes())
    elif isinstance(dtype, np.dtype) and dtype.kind in "biufcmM":
        arr = np.ascontiguousarray(np.asarray(values))
        if dtype.kind in "fc":
            arr = arr.copy()
            arr[np.isnan(arr)] = NAN
        h.update(arr.tobytes())
    else:  # object, strings, other extension types: by text
        words = ["\x00<NA>" if (v is None or (not isinstance(v, str) and pd.isna(v))) else str(v)
                 for v in np.asarray(values, dtype=object)]
        h.update("\x1f".join(words).encode())
    return h.hexdigest()


def frame_hashes(frame: pd.DataFrame) -> dict:
    return {"columns": list(map(str, frame.columns)), "rows": len(frame),
            "hash": {str(c): column_hash(frame[c]) for c in frame.columns}}


def _refused(frame, models, gpus) -> bool:
    try:
        estimate(frame, models, gpus)
        return False
    except ValueError:
        return True


def _accepted_rows(frame, models, gpus, lo=0, hi=None) -> list[int]:
    """The rows of frame (positions) that estimate() accepts, by bisection of refused chunks."""
    hi = len(frame) if hi is None else hi
    if hi <= lo:
        return []
    if not _refused(frame.iloc[lo:hi], models, gpus):
        return list(range(lo, hi))
    if hi - lo == 1:
        return []
    mid = (lo + hi) // 2
    return _accepted_rows(frame, models, gpus, lo, mid) + _accepted_rows(frame, models, gpus, mid, hi)


LATER_SWITCHES = ("loop", "use_cache", "liger", "dpo_reference")  # issue 28; liger and dpo_reference (2026-12-05)
# left out so that the draws stay
LATER_RECIPES = ("automodel",)  # (2026-12-05) likewise


def stack_frame(base: pd.DataFrame, rng, models, gpus, keep=None) -> tuple[pd.DataFrame, list[int]]:
    """base with, per row, one random change of the columns random_scenarios leaves at their
    defaults (a stack switch, the recipe, kv_policy, ep), the rows estimate() refuses dropped
    (found by bisection, which takes minutes: --save stores the rows kept, --check reuses them),
    and those rows."""
    # the switches as of issue 24, in that order (a switch added later would change every draw below
    # and so the rows saved hashes were taken on); later switches: the `loops` case
    columns = [*[s for s in SWITCHES if s not in LATER_SWITCHES], "recipe", "kv_policy", "ep"]
    frame = base.copy()
    n = len(frame)
    which = rng.integers(0, len(columns) + 1, n)  # len(columns): no change
    for i, col in enumerate(columns):
        rows = which == i
        if col == "ep":
            values = np.ones(n, dtype=np.int64)
            values[rows] = rng.choice([1, 2, 4, 8], int(rows.sum()))
        else:
            choices = [c for c in CHOICES[col] if c not in LATER_RECIPES] if col == "recipe" else CHOICES[col]
            values = np.full(n, "auto" if "auto" in choices else choices[0], dtype=object)
            values[rows] = bench_properties.pick(rng, choices, int(rows.sum()))
        frame[col] = values
    if keep is None:
        keep = []
        for lo in range(0, n, 1000):
            keep += [lo + i for i in _accepted_rows(frame.iloc[lo:lo + 1000].reset_index(drop=True), models, gpus)]
    return frame.iloc[keep].reset_index(drop=True), keep


def cases(models, gpus, only=None, state=None):
    """(name, callable giving the result frames) per case. state: what a case needs kept from
    --save to --check (the stacks case's rows), read and written there."""
    state = {} if state is None else state
    mixed_models = bench_properties.with_synthetic(models)
    rng = np.random.default_rng(SEED)
    mixed = bench_properties.random_scenarios(rng, 50_000, mixed_models, gpus)

    def bench():
        frame, _ = bench_engine.build_grid(models, gpus)
        return [estimate(frame, models, gpus)]

    def settings():
        part = mixed.iloc[30_000:35_000].reset_index(drop=True)
        r = np.random.default_rng(SEED + 1)
        k = len(part)
        part["tokens"] = r.choice([1e6, 1e9, 3e10], k)
        part["mfu"] = r.uniform(0.1, 0.7, k)
        part["bandwidth_efficiency"] = r.uniform(0.3, 0.9, k)
        part["prompt_tokens"] = np.minimum(r.integers(1, 4096, k), part["seq"].to_numpy())
        part["utilization"] = r.uniform(0.1, 1.0, k)
        return [estimate(part, mixed_models, gpus)]

    def shape():
        part = mixed.iloc[35_000:37_000].reset_index(drop=True)
        table = mixed_models.set_index("id")
        for c in MODEL_SHAPE:
            part[c] = table[c].reindex(part["model"]).to_numpy()
        return [estimate(part, mixed_models, gpus)]

    def stacks():
        frame, state["stacks_rows"] = stack_frame(mixed.iloc[:20_000].reset_index(drop=True),
                                                  np.random.default_rng(SEED + 2), mixed_models, gpus,
                                                  state.get("stacks_rows"))
        return [estimate(frame, mixed_models, gpus)]

    def measured():
        sc = accuracy_table.scenario_frame(accuracy_table.load())
        unpadded = sc.assign(padding="unpadded")
        return [estimate(sc, models), estimate(unpadded, models, gpus),
                estimate(sc.assign(gpu="h100-sxm-80gb"), models, gpus)]

    overhead = {"context_bytes": 7e8, "cublas_bytes": 1e7, "fragmentation": 0.17, "nccl_bytes": 3e8}
    table = {
        "bench": bench,
        "mixed": lambda: [estimate(mixed, mixed_models, gpus)],
        "mixed_no_gpus": lambda: [estimate(mixed.iloc[:10_000].reset_index(drop=True), mixed_models)],
        "mixed_overhead": lambda: [estimate(mixed.iloc[10_000:20_000].reset_index(drop=True), mixed_models, gpus,
                                            **overhead)],
        "mixed_small": lambda: [estimate(mixed.iloc[lo:hi].reset_index(drop=True), mixed_models, gpus)
                                for lo, hi in ((20_000, 20_001), (20_001, 20_008), (20_008, 20_308))],
        "mixed_settings": settings,
        "mixed_shape": shape,
        "stacks": stacks,
        "measured": measured,
    }
    return [(k, v) for k, v in table.items() if only is None or k in only]


def compute(only=None, state=None) -> dict:
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    out = {}
    for name, run in cases(models, gpus, only, state):
        t0 = time.perf_counter()
        frames = run()
        for i, frame in enumerate(frames):
            out[f"{name}[{i}]"] = frame_hashes(frame)
        print(f"  {name}: {sum(len(f) for f in frames):,} rows, {len(frames)} frame(s), "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return out


def compare(saved: dict, now: dict) -> list[str]:
    """One line per difference (a case, its column list, or a column's hash)."""
    lines = []
    for case in sorted(set(saved) | set(now)):
        if case not in now or case not in saved:
            lines.append(f"{case}: only in {'the saved file' if case in saved else 'this run'}")
            continue
        a, b = saved[case], now[case]
        if a["rows"] != b["rows"]:
            lines.append(f"{case}: {a['rows']} rows saved, {b['rows']} now")
        if a["columns"] != b["columns"]:
            lines.append(f"{case}: columns differ: saved-only {sorted(set(a['columns']) - set(b['columns']))}, "
                         f"new {sorted(set(b['columns']) - set(a['columns']))}"
                         + ("; same set, other order" if set(a["columns"]) == set(b["columns"]) else ""))
        for col in a["columns"]:
            if col in b["hash"] and a["hash"][col] != b["hash"][col]:
                lines.append(f"{case}: column {col} differs")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE", help="write the hashes to FILE")
    group.add_argument("--check", metavar="FILE", help="compare with the hashes in FILE (exit 1 on a difference)")
    ap.add_argument("--only", nargs="*", help="these cases only (names as in the module doc)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    saved = json.loads(Path(args.check).read_text()) if args.check else {}
    state = saved.pop("_state", {})
    now = compute(set(args.only) if args.only else None, state)
    columns = sum(len(v["hash"]) for v in now.values())
    if args.save:
        Path(args.save).write_text(json.dumps({**now, "_state": state}, indent=1, sort_keys=True))
        print(f"result_hash: saved {columns} column hashes of {len(now)} frames to {args.save} "
              f"({time.perf_counter() - t0:.1f} s)")
        return 0
    if args.only:
        saved = {k: v for k, v in saved.items() if k.split("[")[0] in args.only}
    diff = compare(saved, now)
    for line in diff:
        print("DIFF " + line)
    print(f"result_hash: {'FAIL' if diff else 'OK'}: {columns} column hashes of {len(now)} frames compared with "
          f"{args.check}, {len(diff)} differences ({time.perf_counter() - t0:.1f} s)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
