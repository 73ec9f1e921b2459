"""CSV exports cannot run formulas in a spreadsheet (OWASP "CSV injection"), and numbers stay
numbers: a text cell starting with =, +, -, @, tab or carriage return gets a leading single
quote; a negative number (or text that is only a number) is written as it is."""

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from catalog.user import model_from_config
from engine import estimate
from planner.report import neutralize, to_csv

CONFIGS = Path(__file__).resolve().parent / "data" / "good_configs"
FORMULA = '=HYPERLINK("http://x")'


def rows_of(text: str) -> list[list[str]]:
    body = "".join(line for line in io.StringIO(text) if not line.startswith("# "))
    return list(csv.reader(io.StringIO(body)))


def test_a_model_named_like_a_formula_goes_through_estimate_and_csv_harmlessly(models, gpus):
    cfg = json.loads((CONFIGS / "llama-3.2-1b.json").read_text())
    cfg["_name_or_path"] = FORMULA
    named = model_from_config(cfg, "config.json")  # a valid catalog record with that display name
    raw = {**named, "id": FORMULA}  # and the engine on a models frame whose id is the formula itself
    table = pd.concat([models, pd.DataFrame([named, raw])], ignore_index=True)
    out = estimate(pd.DataFrame([{"model": named["id"], "gpu": "rtx-4090"}, {"model": FORMULA, "gpu": "rtx-4090"}]), table, gpus)
    out = out.merge(table[["id", "name"]], left_on="model", right_on="id", how="left")
    text = to_csv(out[["model", "name", "peak_bytes", "fits"]], settings={"model": FORMULA})
    rows = rows_of(text)
    assert rows[0] == ["model", "name", "peak_bytes", "fits"]
    assert rows[1][:2] == [named["id"], "'" + FORMULA]
    assert rows[2][:2] == ["'" + FORMULA, "'" + FORMULA]
    assert float(rows[1][2]) == out["peak_bytes"].iloc[0] > 0  # the number is written as a number
    assert '# model,"\'=HYPERLINK(""http://x"")"\n' in text  # a settings row: "# key", the value quoted
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) or _is_number(cell), cell


def _is_number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


HOSTILE = ["=1+1", "+1+1", "-1+1", "@SUM(A1:A2)", "\t=1+1", "\r=1+1", "\n=1+1", "=cmd|' /C calc'!A0",
           "\uff1d1+1", "-", "+", "@", " =1+1", '"=1+1"', ' "@SUM(1)']  # trimmed spaces and quotes too
HARMLESS = ["abc", "llama-2-7b", "'already quoted", "a=b", "", "-5", "+1.5e3", "-0.25", " -5", "text =1"]


@pytest.mark.parametrize("value", HOSTILE)
def test_formula_text_is_quoted(value):
    assert neutralize(value) == "'" + value


@pytest.mark.parametrize("value", HARMLESS + [-5, -1.5e-3, 0, np.int64(-7), np.float64(-2.5), True, None])
def test_everything_else_is_left_alone(value):
    assert neutralize(value) is value


def test_hostile_columns_round_trip_with_numbers_intact():
    frame = pd.DataFrame({
        "text": HOSTILE + HARMLESS[:3],
        "category": pd.Categorical((["=2*3", "plain", "-2+2"] * 7)[: len(HOSTILE) + 3]),
        "negative": np.linspace(-5, -1, len(HOSTILE) + 3),
        "ints": np.arange(-7, -7 + len(HOSTILE) + 3, dtype=np.int64),
        "mixed": pd.Series(([-3, "=1", 2.5, "-4"] * 7)[: len(HOSTILE) + 3], dtype=object),
        "=formula header": 1,
    })
    rows = rows_of(to_csv(frame))
    assert rows[0] == ["text", "category", "negative", "ints", "mixed", "'=formula header"]
    for i, row in enumerate(rows[1:]):
        text, cat, neg, ints, mixed, _ = row
        expected_text = frame["text"][i]
        expected_text = "'" + expected_text if expected_text in HOSTILE else expected_text
        assert text == expected_text.replace("\r", "\n")  # a CR inside a cell is written as LF (quoted)
        assert cat == ("'" + frame["category"][i] if frame["category"][i] != "plain" else "plain")
        assert float(neg) == frame["negative"][i] and not neg.startswith("'")
        assert int(ints) == frame["ints"][i] and not ints.startswith("'")
        m = frame["mixed"][i]
        assert mixed == ("'=1" if m == "=1" else str(m))  # -3 and the text "-4" stay numbers
    assert len(rows) == len(frame) + 1  # the \n and \r inside cells did not split rows


def test_a_carriage_return_inside_a_cell_cannot_start_a_row():
    text = to_csv(pd.DataFrame({"name": ["ok\r=HYPERLINK(\"http://x\")", "a\r\nb"], "n": [1, 2]}))
    assert "\r" not in text
    assert rows_of(text) == [["name", "n"], ['ok\n=HYPERLINK("http://x")', "1"], ["a\nb", "2"]]


def test_a_category_that_would_collide_when_quoted_still_exports_both():
    frame = pd.DataFrame({"c": pd.Categorical(["=a", "'=a", "=a"])})
    assert [r[0] for r in rows_of(to_csv(frame))[1:]] == ["'=a", "'=a", "'=a"]


def test_settings_cannot_break_out_of_their_comment_line():
    text = to_csv(pd.DataFrame({"x": [1]}), settings={"note": "fine\n=HYPERLINK(\"http://x\")", "=key": "-1+1"})
    lines = text.splitlines()
    assert lines[0] == '# note,"fine =HYPERLINK(""http://x"")"'  # one row of two cells, the value whole
    assert lines[1] == "# =key,'-1+1"  # the key cell starts with '#': never a formula
    assert lines[2:] == ["x", "1"]


def test_byte_columns_are_whole_bytes_as_in_the_json(capsys):
    """A 4.127-bit base's weights wrote "7817846718.464" bytes in the sweep CSV and zeros "0.0"; `--json`
    gives whole bytes. The CSV now gives the JSON's figures; a null phase stays an empty cell."""
    from planner import cli
    assert cli.main(["sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090", "--methods", "qlora"]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert cli.main(["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--method", "qlora", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    byte_cols = [k for k in row if k.endswith("_bytes")]
    assert len(byte_cols) > 20
    for k in byte_cols:
        assert row[k] == "" or row[k].isdigit(), (k, row[k])
        if k in data:
            assert row[k] == ("" if data[k] is None else str(data[k])), (k, row[k], data[k])
    assert row["gradients_bytes"] == "0" and row["prefill_phase_bytes"] == ""
    # a frame whose byte column holds an infinity keeps the float path (no cast of inf to an integer)
    text = to_csv(pd.DataFrame({"x_bytes": [1.5, np.inf, np.nan]}))
    assert rows_of(text)[1:] == [["1.5"], ["inf"], [""]]
