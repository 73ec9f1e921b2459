"""Memory for the columns of a big result, reused from one sweep to the next.

A sweep of a million rows returns about 60 new columns of 8 MB. Fresh memory from the
operating system arrives as zeroed pages, one page fault each: on the development machine
that was about 80 ms of a 186 ms sweep (docs/performance.md), more than any formula. So the
columns of a big result are carved out of one block, and when no result (nor any view of
one of its columns) holds that block any more, the next sweep writes into it again instead
of asking the system for new pages. This is the engine's own memory only: the process's
allocator is left as it is. The entry points (the command line, the dashboard) also ask numpy
for small pages (`prefer_small_pages`, below), which makes fresh pages cheaper where the kernel
would otherwise try for huge ones.

Liveness is CPython's reference count: every column is a numpy view whose `base` is the
block, so the block is free exactly when its only holder is the pool. A block in use is
never written; a sweep that finds none free gets a new one. The pool keeps one idle block
at most, and a sweep that does not reuse it lets it go (`release()` does so at once).
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

# Below this many rows a column is under 512 KiB, which malloc serves from memory it keeps
# anyway: pooling would only hold memory for nothing.
POOL_MIN_ROWS = 1 << 16
# Columns' worth of room in a new block: touched pages only count once written, so room to
# spare costs address space, not memory. A sweep that needs more falls back to plain arrays
# and the next block is made as large as that sweep needed.
FIRST_BLOCK_COLUMNS = 112  # (96 until issue 28 added the verdict columns)
ALIGN = 64  # each column starts on a cache line

_lock = threading.Lock()
_idle: np.ndarray | None = None  # the pooled block (uint8), or None
_wanted_bytes = 0  # the most bytes a sweep has asked for


def _acquire(n: int) -> np.ndarray | None:
    """A block for a sweep of n rows: the pooled one if free and large enough, else a new one."""
    global _idle
    need = max(_wanted_bytes, n * 8 * FIRST_BLOCK_COLUMNS)
    with _lock:
        block = _idle
        if block is not None and sys.getrefcount(block) == 3 and need <= block.size <= 2 * need:
            return block  # (3 = _idle, `block`, getrefcount's argument: no result holds it)
        if block is not None and sys.getrefcount(block) == 3:
            _idle = None  # idle but the wrong size: let it go
        block = np.empty(need, dtype=np.uint8)
        _idle = block
        return block


# numpy advises the kernel to back every array of 4 MiB or more with transparent huge pages
# (madvise MADV_HUGEPAGE; numpy's "Global state" docs, "madvise hugepage on Linux", switch
# NUMPY_MADVISE_HUGEPAGE, read at import). Where THP is `madvise` with `defrag` `madvise` (the
# development VM: Debian 12, 2 cores, 24 GiB), the first touch of such an array waits while the
# kernel compacts memory for a free 2 MiB page and zeroes it. Measured there (2026-12-05):
# - 20 new 1 MB arrays and one 19 MB block, written in a new thread, 4 runs: 116-186 ms of system
#   time with the advice, 11-24 ms without;
# - a million-row estimate()'s first call: 1.2-4.8 s with it (866 MB of huge pages obtained),
#   0.62-0.66 s without; the later calls, which reuse the pooled block, alike (0.244-0.276 s
#   with, 0.254-0.269 s without: `bench_engine.py --engine-only`, NUMPY_MADVISE_HUGEPAGE=1 / 0);
# - a Budget-page sidebar change: `configurations`' own system time 81-103 ms with the advice,
#   57-67 ms without (each change's results are new memory, kept by the page's cache).
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"


def _hugepage_switch():
    """numpy's runtime switch of that advice (returns the previous setting), or None where absent."""
    from numpy._core import multiarray  # (numpy >= 2, requirements.txt)
    return getattr(multiarray, "_set_madvise_hugepage", None)


def hugepage_advice() -> bool | None:
    """Whether numpy advises huge pages now (None where this numpy has no such switch)."""
    switch = _hugepage_switch()
    if switch is None:
        return None
    enabled = bool(switch(True))
    switch(enabled)
    return enabled


def prefer_small_pages(environ=None) -> bool:
    """Turn numpy's huge-page advice off for this process, unless the user chose it in
    NUMPY_MADVISE_HUGEPAGE (then it stays as they set it). True when it was turned off here."""
    environ = os.environ if environ is None else environ
    switch = _hugepage_switch()
    if switch is None or environ.get(HUGEPAGE_ENV, "").strip():
        return False
    switch(False)
    return True


# pandas 3 keeps text columns as Arrow arrays by default (mode.string_storage "pyarrow"); taking rows of
# one calls into pyarrow.compute.take, ~100 us each, and a page's sweep takes rows of ~40 text columns
# hundreds of times. The "python" storage (an object array of str, same "str" dtype, same NaN for
# missing) takes them with numpy. Measured on the 2-core machine (2026-12-06, both storages alternated
# twice in one session): Budget change 432/437 -> 337/376 ms, Cost per fit 346/354 -> 250/279 ms
# (benchmarks/bench_page_change.py), `estimate --json` in-process 61/60 -> 47/45 ms, the 1M-row grid
# 0.47 -> 0.44 s (bench_engine.py --engine-only). The values are the same under both storages
# (tests/test_string_storage.py checks the engine's results frame by frame).
STRING_STORAGE = "python"


def prefer_python_strings() -> bool:
    """New text columns of this process in pandas' python storage (above); the entry points call it, as
    they call prefer_small_pages. pandas 2 already defaults to it (its text columns are object arrays
    unless future.infer_string is on). True when the option was set here."""
    import pandas as pd
    try:
        pd.set_option("mode.string_storage", STRING_STORAGE)
    except (KeyError, ValueError, pd.errors.OptionError):
        return False
    return True


def release() -> None:
    """Drop the pooled block (its memory is freed once no result uses it)."""
    global _idle
    with _lock:
        _idle = None


def pooled_bytes() -> int:
    """Bytes held by the pool's block (0 when none)."""
    block = _idle
    return 0 if block is None else int(block.size)


class Columns:
    """Where the new per-row columns of one result are written.

    `empty`, `full` and `take` each return a new, writable array of n rows that nothing
    else refers to; for n >= POOL_MIN_ROWS it is carved out of a pooled block (unless `pooled`
    is false: plain arrays).
    """

    def __init__(self, n: int, pooled: bool = True, _root: Columns | None = None):
        self.n = n
        # who carves the block (and counts what was asked): None for this one itself, never a
        # reference to itself (a cycle would keep a dead result's block held until the garbage
        # collector runs, and the next sweep would take fresh pages instead of reusing it)
        self._parent = _root
        if _root is None:
            self._block = _acquire(n) if pooled and n >= POOL_MIN_ROWS else None
            self._offset = 0
            self._asked = 0

    def rows(self, n: int) -> Columns:
        """Columns of n rows carved from this one's block: the scratch of a smaller sweep made
        inside this one (estimate's one-GPU probe), whose arrays are gone before the result is
        returned. Plain arrays where this one has no block."""
        return Columns(n, _root=self._root)

    @property
    def _root(self) -> Columns:
        return self if self._parent is None else self._parent

    def empty(self, dtype=np.float64, length: int | None = None) -> np.ndarray:
        """A new array of n rows (or of `length`: scratch for per-group figures)."""
        dtype = np.dtype(dtype)
        length = self.n if length is None else length
        nbytes = length * dtype.itemsize
        root = self._root
        root._asked += -(-nbytes // ALIGN) * ALIGN
        block = root._block
        if block is None or root._offset + nbytes > block.size:
            root._note_need()
            return np.empty(length, dtype=dtype)
        start = root._offset
        root._offset += -(-nbytes // ALIGN) * ALIGN
        return block[start:start + nbytes].view(dtype)

    def _note_need(self) -> None:
        global _wanted_bytes
        if self._block is not None and self._asked > _wanted_bytes:
            _wanted_bytes = self._asked + 8 * ALIGN

    def full(self, value, dtype=np.float64) -> np.ndarray:
        out = self.empty(dtype)
        out.fill(value)
        return out

    def take(self, values: np.ndarray, index: np.ndarray) -> np.ndarray:
        """values[index] (index: valid positions, as Configs builds them)."""
        values = np.asarray(values)
        out = self.empty(values.dtype)
        return np.take(values, index, out=out, mode="clip")
