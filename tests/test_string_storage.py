"""The entry points keep text columns in pandas' python storage (engine/buffers.py prefer_python_strings),
for speed; a library caller keeps pandas' default (Arrow-backed text in pandas 3). Both must give every
scenario the same answer: the engine's results, frame by frame, under either storage, on random scenarios
drawn with the run's fresh seed (tests/conftest.py)."""

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import buffers, estimate
from engine import serving as S

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_properties  # noqa: E402
from test_serve_properties import random_requests  # noqa: E402

ARROW = "pyarrow"


def _text_as(frame: pd.DataFrame, storage: str) -> pd.DataFrame:
    """The frame with its text columns in `storage` (pandas 3's "str" dtype, NaN for missing)."""
    text = [c for c in frame.columns if isinstance(frame[c].dtype, pd.StringDtype)]
    return frame.astype({c: pd.StringDtype(storage, na_value=np.nan) for c in text})


def _same(a: pd.DataFrame, b: pd.DataFrame, seed: int, what: str) -> None:
    assert list(a.columns) == list(b.columns), f"seed={seed}: {what}: the columns differ"
    for col in a.columns:
        x, y = a[col], b[col]
        if isinstance(x.dtype, pd.StringDtype) or isinstance(y.dtype, pd.StringDtype):
            x, y = x.astype(object), y.astype(object)
        pd.testing.assert_series_equal(x, y, check_exact=True, check_dtype=True,
                                       obj=f"seed={seed}: {what} column {col!r}")


@pytest.fixture(scope="module")
def arrow_available():
    pytest.importorskip("pyarrow", reason="pandas' Arrow string storage needs pyarrow (a pandas 3 dependency)")


def test_the_entry_points_choose_python_strings():
    """planner.cli.main sets it for the command line (app/frame.py for the dashboard, at import)."""
    from planner.cli import main
    with pd.option_context("mode.string_storage", ARROW):
        assert main(["catalog", "gpus", "--json"]) == 0
        assert pd.get_option("mode.string_storage") == buffers.STRING_STORAGE


def test_estimate_is_the_same_under_either_text_storage(models, gpus, arrow_available):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    rng = np.random.default_rng(seed + 7)
    frame = bench_properties.random_scenarios(rng, 1500, models, gpus, recipes=("hf", "torchtune", "axolotl"))
    with pd.option_context("mode.string_storage", "python"):
        python = estimate(_text_as(frame, "python"), _text_as(models, "python"), _text_as(gpus, "python"))
    with pd.option_context("mode.string_storage", ARROW):
        arrow = estimate(_text_as(frame, ARROW), _text_as(models, ARROW), _text_as(gpus, ARROW))
    print(f"string storage seed={seed} rows={len(frame)}")
    _same(python, arrow, seed, "estimate")


def test_serve_is_the_same_under_either_text_storage(models, gpus, arrow_available):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    rng = np.random.default_rng(seed + 8)
    kept = []
    for req in random_requests(rng, models, gpus, 60):  # those serve takes alone (it refuses a frame for one)
        try:
            S.serve(pd.DataFrame([req]), models, gpus)
            kept.append(req)
        except ValueError:
            pass
    outs = {}
    for storage in ("python", ARROW):
        with pd.option_context("mode.string_storage", storage):
            outs[storage] = S.serve(_text_as(pd.DataFrame(kept), storage), _text_as(models, storage),
                                    _text_as(gpus, storage))
    print(f"string storage seed={seed} requests={len(kept)}")
    _same(outs["python"], outs[ARROW], seed, "serve")
