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
