"""engine/frames.py: the columns an estimate reads once per frame (catalog tables and its own normalized frame).

What the cache must never do: hand one frame's columns to another frame (a copy with a changed value, or a new frame
that reuses a freed frame's id), let a caller write into what the next estimate reads, or keep a frame alive."""

from __future__ import annotations

import gc
import re
import weakref

import numpy as np
import pandas as pd
import pytest

from catalog import default_catalog
from engine import estimate
from engine import frames as F


@pytest.fixture(scope="module")
def tables():
    cat = default_catalog()
    return cat.models(), cat.gpus()


def test_a_column_is_read_once_and_equals_the_frame_s_own():
    frame = pd.DataFrame({"a": [1.0, np.nan, 3.0], "b": ["x", None, "z"]})
    first = F.column_array(frame, "a", 0.0)
    assert F.column_array(frame, "a", 0.0) is first
    np.testing.assert_array_equal(first, frame["a"].fillna(0.0).to_numpy())
    # unfilled and filled are kept apart
    assert np.isnan(F.column_array(frame, "a")[1])
    assert list(F.column_array(frame, "b", "")) == ["x", "", "z"]
    assert list(F.column_index(frame, "b").get_indexer(["z", "x"])) == [2, 0]


def test_what_is_kept_is_read_only():
    frame = pd.DataFrame({"a": [1, 2, 3]})
    kept = F.column_array(frame, "a")
    with pytest.raises(ValueError):
        kept[0] = 5
    memo = F.frame_memo(frame, "twice", lambda: frame["a"].to_numpy() * 2)
    with pytest.raises(ValueError):
        memo[0] = 5
    assert frame["a"].tolist() == [1, 2, 3]


def test_frame_memo_makes_once_per_frame_and_key():
    calls = []
    frame, other = pd.DataFrame({"a": [1]}), pd.DataFrame({"a": [1]})
    make = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert F.frame_memo(frame, "k", make) == 1
    assert F.frame_memo(frame, "k", make) == 1
    assert F.frame_memo(frame, "other key", make) == 2
    assert F.frame_memo(other, "k", make) == 3
    assert F.frame_memo(frame, "none", lambda: None) is None  # a None result is kept, not made again
    assert F.frame_memo(frame, "none", lambda: 1 / 0) is None


def test_a_frame_is_not_kept_alive_and_its_entry_goes_with_it():
    frame = pd.DataFrame({"a": np.arange(5.0)})
    F.column_array(frame, "a")
    key, ref = id(frame), weakref.ref(frame)
    assert key in F._FRAME_COLUMNS
    del frame
    gc.collect()
    assert ref() is None and key not in F._FRAME_COLUMNS


def test_a_changed_copy_of_the_models_table_gets_its_own_answer(tables):
    """A caller who changes a model's shape makes a new frame (the documented contract); the estimate of the new
    frame follows the change, and the old frame's answer is unchanged."""
    models, gpus = tables
    scenario = pd.DataFrame({"model": ["llama-3.1-8b"], "gpu": ["h100-sxm-80gb"], "method": ["full"],
                             "batch": [2], "seq": [2048]})
    before = estimate(scenario, models, gpus)["peak_bytes"].iloc[0]
    deeper = models.copy()
    deeper.loc[deeper["id"] == "llama-3.1-8b", "num_layers"] = 64
    deeper.loc[deeper["id"] == "llama-3.1-8b", "params"] *= 2
    after = estimate(scenario, deeper, gpus)["peak_bytes"].iloc[0]
    assert after > before * 1.5
    assert estimate(scenario, models, gpus)["peak_bytes"].iloc[0] == before


def test_a_new_frame_in_a_freed_frame_s_place_reads_its_own_columns():
    """CPython reuses the ids of freed objects: the entry of a freed frame must not answer for a new one."""
    for i in range(200):
        frame = pd.DataFrame({"a": [float(i)]})
        assert F.column_array(frame, "a")[0] == float(i)
        del frame


def test_a_caller_may_write_into_the_result_and_its_own_frame_stays_as_it_was(tables):
    """The result's scenario columns share memory with the caller's frame through copy-on-write (a Series), never as
    a bare read-only array: `result.loc[0, "batch"] = 8` works, and neither the caller's frame nor the next answer
    changes."""
    models, gpus = tables
    asked = pd.DataFrame({"model": ["llama-3.1-8b", "llama-3.1-70b"], "gpu": ["h100-sxm-80gb"] * 2,
                          "method": ["lora", "full"], "batch": [4, 2], "seq": [2048, 1024], "lora_rank": [16, 16],
                          "headroom": [0.1, 0.1]})
    kept = asked.copy()
    first = estimate(asked, models, gpus)
    for col, value in (("batch", 8), ("seq", 512), ("lora_rank", 64), ("headroom", 0.5), ("zero", 1),
                       ("peak_bytes", 1.0)):
        first.loc[0, col] = value
        assert first.loc[0, col] == value
    pd.testing.assert_frame_equal(asked, kept)
    again = estimate(asked, models, gpus)
    assert (again.loc[0, "batch"], again.loc[0, "seq"], again.loc[0, "lora_rank"]) == (4, 2048, 16)
    assert again.loc[0, "peak_bytes"] > 1e9


def test_a_typed_one_scenario_frame_normalizes_as_the_plain_one(tables):
    """engine.scenarios.scenario_frame (the sidebar's scenario, typed as normalize types it) gives the normalized
    frame pd.DataFrame([scenario]) gives, for random sidebar-like scenarios (every column, text, numbers, flags)."""
    from engine.scenarios import CHOICES, DEFAULTS, normalize, scenario_frame
    models, _ = tables
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    ids = list(models["id"])
    for _ in range(20):
        sc = dict(DEFAULTS)
        sc.update(model=str(rng.choice(ids)), batch=int(rng.integers(1, 64)), seq=int(rng.choice([256, 2048, 4096])),
                  headroom=float(rng.uniform(0, 0.5)), allow_long_context=bool(rng.integers(0, 2)))
        for col in rng.choice(list(CHOICES), size=5, replace=False):
            sc[col] = str(rng.choice(list(CHOICES[col])))
        try:
            plain = normalize(pd.DataFrame([sc]), models)
        except ValueError as refused:
            with pytest.raises(ValueError, match=re.escape(str(refused))):
                normalize(scenario_frame(sc), models)
            continue
        typed = normalize(scenario_frame(sc), models)
        pd.testing.assert_frame_equal(typed, plain)


def test_a_table_changed_in_place_is_read_again(tables):
    """A library caller who writes into the models or GPUs table it estimated with (`models.loc[...] = `) gets the
    answer of the table as it is now: estimate() compares a token of the table's contents with the one its columns
    were read under (engine/frames.py revalidate), numbers and text alike."""
    models, gpus = tables
    models, gpus = models.copy(), gpus.copy()
    scenario = pd.DataFrame({"model": ["llama-3.1-8b"], "gpu": ["h100-sxm-80gb"], "method": ["full"],
                             "batch": [2], "seq": [2048]})
    before = estimate(scenario, models, gpus).iloc[0]
    at = models["id"] == "llama-3.1-8b"
    models.loc[at, "num_layers"] = 64
    models.loc[at, "params"] = models.loc[at, "params"] * 2
    deeper = estimate(scenario, models, gpus).iloc[0]
    assert deeper["peak_bytes"] > before["peak_bytes"] * 1.5
    gpus.loc[gpus["id"] == "h100-sxm-80gb", "usable_memory_bytes"] = 1e15
    assert bool(estimate(scenario, models, gpus).iloc[0]["fits"]) and not bool(deeper["fits"])
    family = models.loc[at, "family"].iloc[0]
    models.loc[at, "family"] = "gemma-2"  # text: Gemma 2's soft-capped logits and norms
    as_gemma = estimate(scenario, models, gpus).iloc[0]["peak_bytes"]
    models.loc[at, "family"] = family
    assert as_gemma != estimate(scenario, models, gpus).iloc[0]["peak_bytes"]


def test_the_planner_s_model_facts_follow_a_table_changed_in_place(tables):
    """planning.refused_rows reads the models' context and layers once per table (its own per-frame memo): a table
    whose context is written in place refuses by the new context."""
    from planner import planning
    models = tables[0].copy()
    frame = planning.with_defaults(pd.DataFrame({"model": ["llama-2-7b"], "gpu": ["h100-sxm-80gb"], "seq": [8192]}))
    assert planning.refused_rows(frame, models)[0].tolist() == [True]  # Llama 2: 4,096 tokens
    models.loc[models["id"] == "llama-2-7b", "max_context"] = 16384
    assert planning.refused_rows(frame, models)[0].tolist() == [False]
