"""Would a schema library validate the sweep fast enough? (issue "One scenario, one answer", item 3)

    python benchmarks/bench_schema.py [--rows 1000000]

Times, on the same rows, (1) pydantic v2 validating every scenario record against a model
with the engine's columns, choices and ranges (TypeAdapter(list[Scenario]), its fastest bulk
path, records already built), and (2) the engine's own column checks (engine.scenarios
.normalize_columns, which checks distinct values and min/max, never row by row). Needs
pydantic, which the product does not install: run it in a scratch venv with
`pip install pydantic pandas numpy`. Prints one line per method and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Literal

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.constants import OPTIMIZERS  # noqa: E402
from engine.scenarios import CHOICES, INT_RANGES, PRECISIONS, grid, normalize_columns  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    from pydantic import BaseModel, Field, TypeAdapter

    def rng(col):
        low, high = INT_RANGES[col]
        return Field(ge=low, le=high)

    class Scenario(BaseModel):  # the engine's schema, written for pydantic
        model: str
        task: Literal[CHOICES["task"]]  # type: ignore[valid-type]
        method: Literal[CHOICES["method"]]  # type: ignore[valid-type]
        precision: Literal[PRECISIONS]  # type: ignore[valid-type]
        optimizer: Literal[OPTIMIZERS]  # type: ignore[valid-type]
        batch: int = rng("batch")
        seq: int = rng("seq")
        zero: int = rng("zero")
        gpus: int = rng("gpus")
        gpu: str

    models = pd.DataFrame({"id": [f"m{i}" for i in range(14)], "max_context": 4096, "num_heads": 32,
                           "num_layers": 32})
    side = int(round((args.rows / (14 * 4 * 2 * 4)) ** 0.5))
    frame = grid(model=list(models["id"]), method=["full", "lora", "qlora", "freeze"], precision=["bf16", "fp32"],
                 zero=[0, 1, 2, 3], batch=list(range(1, side + 1)), seq=[256 * (i + 1) for i in range(side)])
    frame["gpu"] = "rtx-4090"
    frame["task"] = "train"
    frame["optimizer"] = "adamw"
    frame["gpus"] = 2
    n = len(frame)

    start = time.perf_counter()
    normalize_columns(frame, models)
    engine_s = time.perf_counter() - start

    records = frame.astype({c: object for c in ("model", "method", "precision", "gpu", "task", "optimizer")}) \
        .to_dict("records")
    adapter = TypeAdapter(list[Scenario])
    start = time.perf_counter()
    adapter.validate_python(records)
    pydantic_s = time.perf_counter() - start
    print(f"rows={n:,} engine_checks_s={engine_s:.3f} pydantic_s={pydantic_s:.3f} "
          f"ratio={pydantic_s / engine_s:,.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
