"""Print the engine-vs-measured table of docs/accuracy.md (markdown) from tests/data.

    .venv/bin/python benchmarks/accuracy_table.py > /tmp/table.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import default_catalog  # noqa: E402
from engine import estimate  # noqa: E402
from tests.test_accuracy import MEASURED, scenario_frame  # noqa: E402

GIB = 2**30


def main() -> None:
    result = estimate(scenario_frame(MEASURED), default_catalog().models())
    ours = result["peak_bytes"] - result["runtime_overhead_bytes"]
    error = (ours / MEASURED["peak_bytes"] - 1) * 100
    print("| model | task | method | precision | optimizer | batch x seq | ckpt | LoRA | measured GiB | ours GiB | error % | phase (ours) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, m in MEASURED.iterrows():
        lora = f"r{m.lora_rank} {m.lora_targets}" if m.method == "lora" else ""
        print(f"| {m.model} | {m.task} | {m.method} | {m.precision} | {'' if pd.isna(m.optimizer) else m.optimizer} "
              f"| {m.batch} x {m.seq} | {'yes' if m.grad_checkpointing else ''} | {lora} "
              f"| {m.peak_bytes / GIB:.2f} | {ours[i] / GIB:.2f} | {error[i]:+.1f} | {result['peak_phase'][i]} |")
    print()
    print(f"rows: {len(MEASURED)}; median |error| {error.abs().median():.2f}%; max |error| {error.abs().max():.2f}%; "
          f"within 5%: {(error.abs() <= 5).sum()}; within 10%: {(error.abs() <= 10).sum()}")


if __name__ == "__main__":
    main()
