"""The dashboard's cache keys for catalog frames (app/data.py _frame_digest): content decides the
key, and the memo of one frame object never serves another frame."""

import gc

import pandas as pd

from app import data


def test_equal_frames_share_a_key_and_any_change_of_cell_column_or_dtype_makes_another(models):
    one, copy = models.copy(deep=True), models.copy(deep=True)
    assert data._frame_digest(one) == data._frame_digest(copy)                    # content, not identity
    changed = copy.assign(num_layers=copy["num_layers"] + (copy.index == 3))       # one cell
    assert data._frame_digest(changed) != data._frame_digest(one)
    assert data._frame_digest(one.rename(columns={"name": "label"})) != data._frame_digest(one)
    assert data._frame_digest(one.astype({"num_layers": "float64"})) != data._frame_digest(one)
    assert data._frame_digest(one.iloc[:-1]) != data._frame_digest(one)           # a filter is a new frame


def test_a_frame_gone_leaves_no_key_for_the_next_object_at_its_address():
    first = pd.DataFrame({"a": [1, 2]})
    key = id(first)
    digest = data._frame_digest(first)
    assert data._DIGESTS[key][1] == digest
    del first
    gc.collect()
    assert key not in data._DIGESTS  # the weak reference's callback dropped the entry
    other = pd.DataFrame({"a": [3, 4]})
    assert data._frame_digest(other) != digest


def test_unhashable_cells_fall_back_to_pickling():
    frame = pd.DataFrame({"a": [[1, 2], [3]]})
    assert data._frame_digest(frame) != data._frame_digest(pd.DataFrame({"a": [[1, 2], [4]]}))
