"""Categorical columns with a few text categories, their dtypes built once.

`pd.Categorical.from_codes(codes, categories=[...])` builds and validates a new CategoricalDtype
each call: about 0.5 ms (an Index, its uniqueness, its inferred type), whatever the length of
the column. The engine makes ~50 such columns per `estimate()` call, so a one-row estimate
spent a quarter of its time there. `dtype(categories)` returns the same dtype pandas would build
for that list, made once per distinct list of text categories.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_DTYPES: dict[tuple, pd.CategoricalDtype] = {}
_MAX_DTYPES = 4096  # a bound on what distinct inputs can make it hold


def dtype(categories, index_dtype: str | None = None) -> pd.CategoricalDtype:
    """pd.CategoricalDtype(list(categories)) (or, with index_dtype, of pd.Index(list(categories),
    dtype=index_dtype)), shared for lists of text (other lists: built anew)."""
    key = tuple(categories)
    if not all(type(c) is str for c in key):
        return pd.CategoricalDtype(list(key))
    found = _DTYPES.get((key, index_dtype))
    if found is None:
        found = pd.CategoricalDtype(list(key) if index_dtype is None else pd.Index(list(key), dtype=index_dtype))
        if len(_DTYPES) < _MAX_DTYPES:
            _DTYPES[(key, index_dtype)] = found
    return found


def from_codes(codes: np.ndarray, categories, validate: bool = True) -> pd.Categorical:
    """pd.Categorical.from_codes(codes, categories=categories, validate=validate), through dtype()."""
    return pd.Categorical.from_codes(codes, dtype=dtype(categories), validate=validate)


def positions(ids: pd.Series, column: pd.Series) -> np.ndarray:
    """Each row's position in `ids` (a catalog's id column) of its `column` value read as text, as
    `column.astype(str)` reads it (a missing value is "nan"); -1 where it is not there. A categorical
    column is looked up once per category, not per row (a sweep has a few dozen GPUs or models). `ids` may be that
    text as an Index already (kept with its hash table: engine.frames.frame_memo)."""
    index = ids if isinstance(ids, pd.Index) else pd.Index(ids.astype(str))
    if isinstance(column.dtype, pd.CategoricalDtype):
        at = np.append(index.get_indexer(column.cat.categories.astype(str)), index.get_indexer(["nan"]))
        return at[column.cat.codes.to_numpy()]  # code -1 (missing): the last, "nan"'s
    return index.get_indexer(column.astype(str))


def distinct(values) -> tuple[np.ndarray, pd.Series]:
    """(each row's code, the distinct values of `values` as an object Series ending with one missing
    value): a Series, categorical (its categories) or not (factorized), or an array; a missing value
    (NaN, None, NA) has the last code, the NaN's."""
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), pd.Series(values.cat.categories, dtype=object)
    else:
        codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
        uniques = pd.Series(np.asarray(uniques, dtype=object), dtype=object)
    return (np.where(codes >= 0, codes, len(uniques)),
            pd.concat([uniques, pd.Series([np.nan], dtype=object)], ignore_index=True))


def per_value(values, decide) -> np.ndarray:
    """decide(a Series of distinct values) -> one boolean each, decided once per distinct value of
    `values` (a Series, categorical or not, or an array) and taken for every row; a missing value
    (NaN, None, NA) is decided as NaN."""
    codes, uniques = distinct(values)
    return np.asarray(decide(uniques), dtype=bool)[codes]
