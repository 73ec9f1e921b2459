"""Columns of frames read once per frame: a normalized scenario frame (the engine builds it and never writes into it)
and the catalog's models and GPUs frames. `frame[col]` builds a new Series per call (~30-80 us with pandas 3's Arrow
column index, `fillna` another), and one estimate reads the same columns ~200 times, whatever its size: each is read
here once and kept while its frame lives (keyed by the frame's id; a weak reference drops the entry with the frame).

A catalog table changed in place after an estimate read it (`models.loc[...] = `) is read again: the entry points
call `revalidate` on the tables they are given, which compares a token of their contents (each block's bytes or
values' identities) with the one its columns were read under. A normalized scenario frame is the engine's own.
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

_FRAME_COLUMNS: dict[int, tuple] = {}


def _columns_of(frame: pd.DataFrame) -> dict:
    key = id(frame)
    entry = _FRAME_COLUMNS.get(key)
    if entry is not None and entry[0]() is frame:
        return entry[1]
    held: dict = {}
    _FRAME_COLUMNS[key] = (weakref.ref(frame, lambda _, key=key: _FRAME_COLUMNS.pop(key, None)), held)
    return held


def _values_token(values) -> int:
    """A token of an array's values that changes when a value is written in place: its bytes (numbers, codes, masks),
    the identity of each object it holds (Python strings), or the identity of an immutable Arrow array (a write
    replaces it)."""
    if isinstance(values, np.ndarray):
        return hash(tuple(map(id, values.ravel()))) if values.dtype == object else hash(values.tobytes())
    data, mask = getattr(values, "_data", None), getattr(values, "_mask", None)
    if isinstance(data, np.ndarray) and isinstance(mask, np.ndarray):  # nullable numbers and booleans
        return hash((_values_token(data), _values_token(mask)))
    own = getattr(values, "_ndarray", None)  # python-storage strings, a Categorical's codes, datetimes
    if isinstance(own, np.ndarray):
        return _values_token(own)
    return id(getattr(values, "_pa_array", values))


def _frame_token(frame: pd.DataFrame) -> tuple | None:
    """What identifies a catalog table's contents cheaply (~10-50 us for the shipped ones): its columns, shape and
    each block's values (pandas' internal blocks: one array per dtype group); None where pandas has no blocks."""
    try:
        blocks = frame._mgr.blocks
    except AttributeError:  # pragma: no cover - another pandas: no guard, the documented contract alone
        return None
    return (id(frame.columns), frame.shape, tuple((id(b), _values_token(b.values)) for b in blocks))


def revalidate(frame: pd.DataFrame | None) -> None:
    """Forget what is kept of a catalog table whose contents changed since (written in place: `models.loc[...] = `),
    so that it is read again; the entry points that read a table's kept columns call it on the tables they are given
    (estimate, serve, normalize, add_speed_cost, the uncertainty band, the planner's model facts), once a call. A frame
    nobody changed keeps its columns (the token is all this costs)."""
    if not isinstance(frame, pd.DataFrame):
        return  # (None: no table; anything else is refused by the caller's own check)
    held = _columns_of(frame)
    token = _frame_token(frame)
    if held.get(("token",)) != token:
        held.clear()
        held[("token",)] = token


def column(frame: pd.DataFrame, col: str) -> pd.Series:
    """frame[col] of a normalized frame, the same Series on every call."""
    held = _columns_of(frame)
    found = held.get(col)
    if found is None:
        found = held[col] = frame[col]
    return found


def column_values(frame: pd.DataFrame, col: str):
    """The array a normalized frame's column holds (a numpy array, or a Categorical / other extension array), without
    the Series `frame[col]` builds: the arrays `_normalize_columns` made the frame from, kept with it (`prime`)."""
    held = _columns_of(frame)
    key = (col, "values")
    found = held.get(key)
    if found is None:
        series = column(frame, col)
        found = held[key] = series.to_numpy() if isinstance(series.dtype, np.dtype) else series.array
    return found


def prime(frame: pd.DataFrame, arrays: dict) -> pd.DataFrame:
    """Keep the arrays a frame was just built from (pd.DataFrame(arrays, copy=False)) as its columns' values."""
    held = _columns_of(frame)
    for col, values in arrays.items():
        if isinstance(values, pd.Series):
            held[(col, "series")] = True  # (a caller's column, or one made of it: the result keeps it a Series)
            values = values.to_numpy() if isinstance(values.dtype, np.dtype) else values.array
        if isinstance(values, np.ndarray) and values.ndim == 1 or isinstance(values, pd.api.extensions.ExtensionArray):
            if values.dtype == object:
                continue  # (pandas may infer a type for it: read from the frame)
            held[(col, "values")] = values
    return frame


def came_as_series(frame: pd.DataFrame, col: str) -> bool:
    """Was the column given to the frame as a Series (`prime`); True where the frame was not primed."""
    held = _columns_of(frame)
    return (col, "values") not in held or (col, "series") in held


def column_array(frame: pd.DataFrame, col: str, fill=None) -> np.ndarray:
    """frame[col].to_numpy() (with fill: frame[col].fillna(fill).to_numpy(), the column as it is where nothing is
    missing), read once per frame and kept while it lives, read-only: a normalized scenario frame's, and the catalog's
    models and GPUs tables', which an estimate reads ~100 columns of (each `frame[col]` builds a Series, ~40 us, and
    `fillna` another; a table written into in place since is read again: `revalidate`)."""
    held = _columns_of(frame)
    key = (col, "array", fill)
    found = held.get(key)
    if found is None:
        series = column(frame, col)
        found = held[key] = _read_only((series.fillna(fill) if fill is not None and series.hasnans else series).to_numpy())
    return found


def _read_only(value):
    """A kept numpy array, made read-only (a view of it, where it is the frame's own memory): whoever would write into
    what the next estimate reads fails at once instead."""
    if isinstance(value, np.ndarray) and value.flags.writeable:
        value = value.view()
        value.flags.writeable = False
    return value


def frame_memo(frame: pd.DataFrame, key, make):
    """make(), computed once per frame (such a frame as column_array's) and kept with it: what an estimate derives from
    a whole catalog table on every call (its models' transformers types, a column as floats, ...). key: hashable,
    naming what make computes (with every argument it depends on besides the frame)."""
    held = _columns_of(frame)
    key = ("memo", key)
    found = held.get(key, held)  # (the dict itself: a sentinel no make() returns)
    if found is held:
        found = held[key] = _read_only(make())
    return found


def column_numbers(frame: pd.DataFrame, col: str) -> np.ndarray:
    """pd.to_numeric(frame[col], errors="coerce") as floats (a value that is no number: NaN), kept per frame."""
    return frame_memo(frame, ("numbers", col), lambda: pd.to_numeric(column(frame, col), errors="coerce").to_numpy(dtype=float))


def column_floats(frame: pd.DataFrame, col: str) -> np.ndarray:
    """frame[col].to_numpy(dtype=float) (a column of numbers: raises where a value is none), kept per frame."""
    return frame_memo(frame, ("float", col), lambda: column(frame, col).to_numpy(dtype=float))


def column_text_index(frame: pd.DataFrame, col: str) -> pd.Index:
    """pd.Index(frame[col].astype(str)) (ids read as text), kept per frame with its hash table for get_indexer."""
    return frame_memo(frame, ("text index", col), lambda: pd.Index(column(frame, col).astype(str)))


def column_index(frame: pd.DataFrame, col: str) -> pd.Index:
    """pd.Index(frame[col]) of such a frame (its ids), kept with its hash table for get_indexer."""
    return frame_memo(frame, ("index", col), lambda: pd.Index(column(frame, col).to_numpy()))


def column_categories(frame: pd.DataFrame, col: str) -> list:
    """The categories of a normalized frame's categorical column, as a list (read once)."""
    def make():
        values = column_values(frame, col)
        return (values if isinstance(values, pd.Categorical) else column(frame, col).cat).categories.tolist()
    return frame_memo(frame, ("categories", col), make)
