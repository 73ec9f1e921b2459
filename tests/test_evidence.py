"""The evidence table: every published reference beside our estimate, and every large gap explained."""

import numpy as np
import pytest

from planner.evidence import evidence_table
from tests.test_cli import run


@pytest.fixture(scope="module")
def table(cat, models, gpus):
    return evidence_table(cat.references(), models, gpus)


def test_every_reference_gets_a_row_with_its_source(cat, table):
    assert len(table) == len(cat.references())
    assert table["source"].str.len().min() > 0


def test_every_difference_over_ten_percent_is_explained(table):
    big = table[~(table["error_pct"].abs() <= 10)]
    assert len(big) > 0  # the articles' claims do disagree with the engine
    unexplained = big[big["explanation"].str.len() == 0]
    assert unexplained.empty, unexplained[["id", "error_pct"]]
    assert not big["explanation"].str.startswith("no explanation").any()


def test_exact_published_figures_are_reproduced(table):
    rows = table.set_index("id")
    # llama.cpp's file sizes for Llama 3.1 8B, and the 16 bytes/param rule for 13B
    for rid in ("llamacpp-llama31-8b-fp16-size", "llamacpp-llama31-8b-q8-0-size",
                "llamacpp-llama31-8b-q4-k-m-size", "a000-13b-model-states-16bpp"):
        assert abs(rows.loc[rid, "error_pct"]) <= 1.0, rid


def test_llama_paper_gpu_hours_within_fifteen_percent(table):
    rows = table[table["id"].str.startswith("llama-paper-")]
    assert len(rows) == 4
    assert np.all(rows["error_pct"].abs() <= 15)


def test_cli_prints_the_table():
    code, out, err = run("evidence")
    assert code == 0, err
    assert "torchtune-llama31-8b-full-4090" in out and "error_pct" in out
