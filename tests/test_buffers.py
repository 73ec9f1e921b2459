"""The pooled memory of big results (engine/buffers.py): never shared with a result that is
still held, reused once none is, and the numbers are those of plain arrays."""

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import buffers, estimate, grid

ROWS = buffers.POOL_MIN_ROWS
ROOT = Path(__file__).resolve().parents[1]


def _spread(models, gpus) -> tuple[list, list]:
    return list(models["id"].iloc[::4]), list(gpus["id"].iloc[::2])


@pytest.fixture(scope="module")
def frames(models, gpus):
    """Two sweeps of the same size (over the pool's threshold) whose numbers differ, and one
    with inference rows (other columns: KV cache, decode speed). Every 4th model on every 2nd GPU: a
    spread of the catalog, each frame over the pool's threshold (the whole catalog made them ~1M rows)."""
    model_ids, gpu_ids = _spread(models, gpus)
    train = grid(model=model_ids, gpu=gpu_ids, method=["full", "lora", "qlora"],
                 precision=["bf16", "amp_bf16", "fp32"], batch=[1, 2, 4, 8], seq=[256, 512, 2048], gpus=[1, 2, 8],
                 zero=3)
    assert len(train) >= ROWS  # else the pool is not used and this file tests nothing
    other = train.assign(batch=train["batch"] * 3, seq=train["seq"] // 2)
    infer = grid(model=model_ids, gpu=gpu_ids, task="infer",
                 precision=["bf16", "int8", "int4", "q4_k_m"], batch=[1, 4, 16, 32], seq=[512, 2048, 8192, 16384],
                 gpus=[1, 2, 4], allow_long_context=True)
    mixed = pd.concat([infer, train.iloc[: ROWS // 2]], ignore_index=True)
    assert len(infer) >= ROWS and len(mixed) >= ROWS
    return {"train": train, "other": other, "infer": infer, "mixed": mixed}


@pytest.fixture(scope="module")
def plain(frames, models, gpus):
    """Each frame's result with the pool switched off (every column a plain new array)."""
    saved = buffers.POOL_MIN_ROWS
    buffers.POOL_MIN_ROWS = 1 << 62
    try:
        return {name: estimate(frame, models, gpus) for name, frame in frames.items()}
    finally:
        buffers.POOL_MIN_ROWS = saved


def _pooled(result: pd.DataFrame) -> bool:
    block = buffers._idle
    return block is not None and np.shares_memory(result["peak_bytes"].to_numpy(), block)


def _span(array: np.ndarray) -> tuple[int, int]:
    return array.__array_interface__["data"][0], array.nbytes


@pytest.mark.parametrize("name", ["train", "other", "infer", "mixed"])
def test_pooled_result_equals_plain_arrays(frames, plain, models, gpus, name):
    result = estimate(frames[name], models, gpus)
    assert _pooled(result)
    pd.testing.assert_frame_equal(result, plain[name], check_exact=True)


def test_a_held_result_is_never_written_by_the_next_sweep(frames, plain, models, gpus):
    first = estimate(frames["train"], models, gpus)
    kept = first.copy(deep=True)
    second = estimate(frames["other"], models, gpus)
    pd.testing.assert_frame_equal(first, kept, check_exact=True)
    pd.testing.assert_frame_equal(second, plain["other"], check_exact=True)
    for column in ("peak_bytes", "gpus_needed", "train_hours", "lora_rank"):
        assert not np.shares_memory(first[column].to_numpy(), second[column].to_numpy())


def test_a_held_column_keeps_its_block(frames, models, gpus):
    first = estimate(frames["train"], models, gpus)
    peak = first["peak_bytes"]
    values = peak.to_numpy().copy()
    del first
    gc.collect()
    second = estimate(frames["other"], models, gpus)
    assert np.array_equal(peak.to_numpy(), values)
    assert not np.shares_memory(peak.to_numpy(), second["peak_bytes"].to_numpy())


def test_a_dropped_result_is_reused_and_fully_overwritten(frames, plain, models, gpus):
    first = estimate(frames["train"], models, gpus)
    start, size = _span(buffers._idle)  # (no reference kept: that alone would keep the block busy)
    # scribble over every number of the first result, as a caller may do to its own frame
    for column in first.columns:
        values = first[column].to_numpy()
        if values.dtype.kind in "fi" and values.flags.writeable:
            values.fill(-7)
    del first, values
    gc.collect()
    second = estimate(frames["other"], models, gpus)
    at = _span(second["peak_bytes"].to_numpy())[0]
    assert start <= at < start + size  # the same memory again
    pd.testing.assert_frame_equal(second, plain["other"], check_exact=True)


def test_release_lets_the_block_go(frames, models, gpus):
    result = estimate(frames["train"], models, gpus)
    assert buffers.pooled_bytes() > 0
    buffers.release()
    assert buffers.pooled_bytes() == 0
    again = estimate(frames["train"], models, gpus)
    pd.testing.assert_frame_equal(again, result, check_exact=True)


def test_a_small_sweep_leaves_the_pool_alone(frames, models, gpus):
    estimate(frames["train"], models, gpus)
    gc.collect()
    assert buffers.pooled_bytes() > 0
    estimate(frames["train"].iloc[: ROWS * 3 // 4].reset_index(drop=True), models, gpus)  # another size
    size = buffers.pooled_bytes()
    estimate(frames["train"].iloc[:100], models, gpus)  # under the threshold: plain arrays
    assert buffers.pooled_bytes() == size


def test_sweeps_in_threads_each_get_their_own_numbers(frames, plain, models, gpus):
    # two frames, each swept by two threads at once (the pooled block can be asked for twice at once)
    names = ["train", "mixed"] * 2
    results, errors = {}, []

    def run(i, name):
        try:
            results[i] = estimate(frames[name], models, gpus)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, name)) for i, name in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, name in enumerate(names):
        pd.testing.assert_frame_equal(results[i], plain[name], check_exact=True)


def test_rows_estimated_again_at_their_zero_stage_leave_the_pool_to_the_result(models, gpus):
    """One-GPU rows that do not fit are estimated again at the ZeRO stage asked (engine/rules.py);
    that second sweep writes plain arrays, so the pool keeps the result's block and the next
    sweep reuses it (it once took the pool's place: every big sweep got fresh memory)."""
    model_ids, gpu_ids = _spread(models, gpus)
    frame = grid(model=model_ids, gpu=gpu_ids, method=["full", "lora", "qlora", "freeze"],
                 precision=["bf16", "fp32", "amp_bf16", "mixed_bf16"], batch=[1, 2, 4, 8, 16, 32], seq=[256, 512, 1024, 2048],
                 gpus=1, zero=3)
    first = estimate(frame, models, gpus)
    assert (~first["fits"].to_numpy(dtype=bool)).sum() >= ROWS  # a pool's worth of rows estimated again
    assert _pooled(first)
    at, _ = _span(first["peak_bytes"].to_numpy())
    del first
    gc.collect()
    second = estimate(frame, models, gpus)
    assert _pooled(second) and _span(second["peak_bytes"].to_numpy())[0] == at  # the same memory again


def test_numpy_huge_page_advice_is_off_unless_the_user_chose_it(monkeypatch):
    """The entry points ask numpy not to advise huge pages (engine/buffers.py prefer_small_pages: on a
    kernel whose THP defrag is `madvise`, every fresh page of a big array cost ~8x); a user who set
    NUMPY_MADVISE_HUGEPAGE keeps their choice."""
    before = buffers.hugepage_advice()
    if before is None:
        pytest.fail("numpy has no huge-page switch any more: prefer_small_pages does nothing (engine/buffers.py)")
    try:
        buffers._hugepage_switch()(True)
        assert buffers.prefer_small_pages({}) is True
        assert buffers.hugepage_advice() is False
        buffers._hugepage_switch()(True)
        assert buffers.prefer_small_pages({buffers.HUGEPAGE_ENV: "1"}) is False
        assert buffers.hugepage_advice() is True  # the user's setting stands
    finally:
        buffers._hugepage_switch()(before)


@pytest.mark.parametrize("entry", ["planner.cli", "app.frame"])
def test_the_command_line_and_the_dashboard_turn_the_advice_off(entry):
    """Checked in a fresh interpreter (numpy reads NUMPY_MADVISE_HUGEPAGE at import; the switch is per process)."""
    run = ("from planner import cli; cli.main(['catalog', '--help'])" if entry == "planner.cli" else "import app.frame")
    code = ("import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    try:\n        "
            f"{run}\n    except SystemExit:\n        pass\nfrom engine import buffers\nprint(buffers.hugepage_advice())")
    env = {k: v for k, v in os.environ.items() if k != buffers.HUGEPAGE_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, buffers.HUGEPAGE_ENV: "1"}, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True"
