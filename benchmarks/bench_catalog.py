"""How long does a big user catalog take to load? (a benchmark, not a test: no timing is asserted)

    .venv/bin/python benchmarks/bench_catalog.py [--mb 5] [--runs 3] [--no-cli] [--pure-python]

Generates a valid user catalog of about --mb megabytes (distinct GPUs of the size a real entry
has, ~630 bytes each: 5 MB is ~8,000 GPUs) into a temporary folder, points
$LLM_PLANNER_USER_CATALOG at it, and times, as the median of --runs runs:
  load_s     UserCatalog(path).load(): read, parse, validate (a fresh object each run);
  frames_s   catalog.store.catalog_frames(): the shipped + user GPU and model frames, the
             file parsed anew (the parse cache is emptied before each run);
  cli_s      `python -m engine catalog gpus` in a fresh process (imports included), which
             is what each command a user types costs with such a catalog.
The shipped catalog's database is built (once) in a temporary folder beforehand.
--pure-python times PyYAML's pure-Python parser, the fallback where libyaml is missing (the
CLI timing is then skipped: a fresh process would use libyaml again).
Target (the "Hardening" issue): a 5 MB user catalog loads (load + frames) in <= 3 s.

The LAST line printed is exactly:
  catalog_mb=<size> gpus=<N> load_s=<median> frames_s=<median> cli_s=<median or nan> parser=<C|python>
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LLM_PLANNER_BUILD_DIR", tempfile.mkdtemp(prefix="llm-planner-bench-build-"))

from catalog import schema, store  # noqa: E402
from catalog.shipped import shipped_catalog  # noqa: E402


def gpu(i: int) -> dict:
    memory = 24 + i % 100
    return {
        "id": f"bench-gpu-{i}", "name": f"Bench GPU {i} {memory}GB", "vendor": "nvidia", "segment": "workstation",
        "memory_gb": memory, "usable_memory_bytes": memory * 2**30,
        "usable_memory_source": "nvidia-smi memory.total on the bench box", "memory_type": "GDDR6",
        "unified_memory": False, "bandwidth_gbps": 960.0, "bf16_tflops": 150.0, "fp16_tflops": 150.0,
        "fp32_tflops": None, "int8_tops": None, "fp8_tflops": None, "tdp_w": 300.0, "interconnect": "PCIe 4.0 x16",
        "interconnect_gbps": 64.0, "launch_year": 2023, "price_usd": 4000.0 + i, "price_source": "an invoice from the vendor",
        "price_date": "2024-05", "cloud_usd_per_hour": None, "cloud_source": "not rented", "cloud_date": "2024-05",
    }


def make_catalog(target_bytes: int) -> tuple[str, int]:
    """YAML text of a valid user catalog of at least target_bytes, and its number of GPUs."""
    one = len(store.dump_document({"gpus": [gpu(0)], "models": []}).encode())
    n = max(1, target_bytes // max(1, one - len(store.HEADER)))
    while True:
        text = store.dump_document({"gpus": [gpu(i) for i in range(n)], "models": []})
        if len(text.encode()) >= target_bytes:
            return text, n
        n = int(n * 1.05) + 1


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="size of the generated user catalog, in MB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true", help="skip the fresh-process CLI timing")
    parser.add_argument("--pure-python", action="store_true", help="time the parser used without libyaml")
    args = parser.parse_args(argv)
    if args.pure_python:
        schema._CParser = None

    folder = Path(tempfile.mkdtemp(prefix="llm-planner-bench-user-"))
    path = folder / "user_catalog.yaml"
    text, n = make_catalog(int(args.mb * 1e6))
    path.write_text(text, encoding="utf-8")
    os.environ[store.ENV_VAR] = str(path)
    shipped_catalog().gpus()  # build the shipped database before timing

    def load():
        data = store.UserCatalog(path, shipped_ids={}).load()
        assert len(data["gpus"]) == n

    def frames():
        store._saved_cache.clear()  # parse anew, as a fresh process does
        out = store.catalog_frames()
        assert (out["gpus"]["origin"] == "user").sum() == n

    load_s = median_time(load, args.runs)
    frames_s = median_time(frames, args.runs)
    cli_s = float("nan")
    if not (args.no_cli or args.pure_python):
        def cli():
            done = subprocess.run([sys.executable, "-m", "engine", "catalog", "gpus"], cwd=ROOT, env=os.environ.copy(),
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        cli_s = median_time(cli, args.runs)
    size_mb = path.stat().st_size / 1e6
    parser_name = "C" if schema._CParser is not None else "python"
    print(f"catalog_mb={size_mb:.2f} gpus={n} load_s={load_s:.2f} frames_s={frames_s:.2f} cli_s={cli_s:.2f} "
          f"parser={parser_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
