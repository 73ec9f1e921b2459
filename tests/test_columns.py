"""Every surface against the column tables of engine/columns.py (issue 24, item 1): the CLI's
flags, defaults, help and ranges; the engine's own ranges (one range per column, for the CLI and
the library alike); the result frame's columns; estimate --json's keys; the sweep CSV's header;
the dashboard's fields and URL keys; the README's two tables."""

import argparse
import csv
import io
import json
import re

import pandas as pd
import pytest

from engine import columns, estimate
from planner import cli, columns_doc

SCENARIO_FLAGS = [c for c in columns.SCENARIO if c.cli]
# flags of estimate / sweep that are not scenario columns
OTHER_ESTIMATE_FLAGS = {"--help", "--model-config", "--model-file", "--gpu", "--what-if", "--json", "--export"}  # --export: issue 26
OTHER_SWEEP_FLAGS = {"--help", "--model-config", "--model-file", "--out", "--models", "--gpu-ids", "--methods"}


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _actions(p: argparse.ArgumentParser) -> dict:
    return {opt: a for a in p._actions for opt in a.option_strings if opt.startswith("--")}


@pytest.mark.parametrize("command, others", [("estimate", OTHER_ESTIMATE_FLAGS), ("sweep", OTHER_SWEEP_FLAGS)])
def test_the_scenario_flags_are_the_tables(command, others):
    actions = _actions(_subparser(command))
    assert set(actions) - others == {c.cli for c in SCENARIO_FLAGS}
    for col in SCENARIO_FLAGS:
        a = actions[col.cli]
        if col.kind == "bool":
            assert a.default is False, col.name
        elif col.cli_default == columns.ENGINE:
            assert a.default == (col.default / col.cli_scale if col.cli_scale != 1 else col.default), col.name
        else:
            assert a.default is None, col.name  # left out: engine/rules.py decides
        assert f"(default {col.describe_default()})" in (a.help % {}), col.name  # the help states the table's default


def test_every_column_has_one_range_for_the_cli_and_the_engine(models, gpus):
    """At each checked column's bounds: the CLI's parser and the engine accept the bound and
    refuse just beyond it, each naming the value and what is accepted (the engine's words)."""
    parse = {c.name: cli._column_parser(c) for c in SCENARIO_FLAGS if c.kind in ("int", "float") and c.cli_checks}
    assert {"batch", "gpus", "tokens", "mfu", "headroom", "hours_per_month", "zero"} <= set(parse)
    base = dict(model="llama-2-7b", task="train", gpu="rtx-4090")
    for name, parser in parse.items():
        col = columns.SCENARIO_BY_NAME[name]
        step = 1 if col.kind == "int" else max(abs(col.high) * 1e-9, 1e-12)
        for bound, beyond, is_open in ((col.low, col.low - step, col.low_open), (col.high, col.high + step, col.high_open)):
            inside = bound if not is_open else (bound + step if bound == col.low else bound - step)
            assert parser(repr(inside)) == pytest.approx(inside), (name, inside)
            with pytest.raises(argparse.ArgumentTypeError) as info:
                parser(repr(beyond))
            assert "not accepted" in str(info.value) and col.accepted_text().split(",")[0] in str(info.value), name
            if col.group == "speed":  # the engine's own check: the same range, the same words
                with pytest.raises(ValueError, match=re.escape("not accepted; accepted: " + col.accepted_text().split(",")[0])):
                    estimate(pd.DataFrame([{**base, name: beyond}]), models, gpus)
                if name != "prompt_tokens":  # (its bound is the row's seq as well)
                    estimate(pd.DataFrame([{**base, name: inside}]), models, gpus)


@pytest.mark.parametrize("gpu", ["", "rtx-4090"])
def test_the_result_frame_has_exactly_the_tables_columns(models, gpus, gpu):
    frame = pd.DataFrame([dict(model="llama-2-7b", gpu=gpu), dict(model="llama-2-7b", task="infer", gpu=gpu)])
    out = estimate(frame, models, gpus)
    assert set(out.columns) == set(columns.result_columns())
    for r in columns.RESULT:  # a column never null where the table says it has a value
        if not r.null:
            assert out[r.name].notna().all(), r.name


def _estimate_json(capsys, *argv) -> dict:
    assert cli.main(["estimate", "--model", "llama-2-7b", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_json_carries_every_table_key(capsys):
    with_gpu = _estimate_json(capsys, "--gpu", "rtx-4090")
    assert set(columns.json_keys(with_gpu=True)) <= set(with_gpu)
    assert {r.name for r in columns.RESULT if r.json} <= set(with_gpu)
    # issue 24: the phases the sweep CSV has are in --json too
    assert {"backward_end_phase_bytes", "model_states_bytes", "capacity_bytes"} <= set(with_gpu)
    without = _estimate_json(capsys)
    assert set(columns.json_keys(with_gpu=False)) <= set(without)
    assert not {r.name for r in columns.RESULT if r.needs_gpu} & set(without)


def test_the_sweep_csv_header_is_the_result_columns(capsys, tmp_path):
    out = tmp_path / "sweep.csv"
    assert cli.main(["sweep", "--models", "llama-2-7b", "--gpu-ids", "rtx-4090", "--out", str(out)]) == 0
    header = next(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    # and, added by the CLI at the end, the dates and sources of the prices behind the cost columns, then the card's
    # compatibility as estimate --json gives it
    assert header[-len(cli.PRICE_KEYS) - 2:] == [*cli.PRICE_KEYS, *cli.COMPATIBILITY_KEYS]
    assert set(header) == set(columns.result_columns()) | set(cli.PRICE_KEYS) | set(cli.COMPATIBILITY_KEYS)


def test_the_dashboard_fields_and_url_keys_are_the_tables():
    from app.state import FIELDS, _as_param, _parse
    declared = [(col, sb) for col in columns.SCENARIO for sb in col.sidebar]
    assert {sb.key for _, sb in declared} <= set(FIELDS)
    for col, sb in declared:
        f = FIELDS[sb.key]
        assert f.default == sb.default and f.kind == sb.kind, sb.key
        if sb.kind == "int" and not sb.key.endswith("_pct"):
            assert col.low <= f.low <= f.high <= col.high, sb.key  # never wider than the engine accepts
        if sb.key.endswith("_pct"):  # a fraction in whole percent (headroom, LoRA dropout): within the engine's range
            assert col.low <= f.low / 100 and (f.high / 100 < col.high if col.high_open else f.high / 100 <= col.high)
        if sb.kind in ("choice", "multi") and col.choices:
            assert set(f.options) <= set(col.choices), sb.key
        assert _parse(f, _as_param(f, f.default)) == f.default, sb.key  # the URL round trip
        if sb.kind == "int":
            with pytest.raises(ValueError, match="ignored; accepted"):
                _parse(f, str(f.high + 1))


def test_the_readme_tables_are_generated_from_the_tables():
    text = columns_doc.README.read_text(encoding="utf-8")
    assert columns_doc.render(text) == text, "README.md's column tables are stale: python -m planner.columns_doc --write"
    for col in columns.SCENARIO:
        assert f"| `{col.name}` |" in text
    for r in columns.RESULT:
        assert f"| `{r.name}` |" in text


def test_a_column_row_renders_on_every_generated_surface(monkeypatch):
    """A new row (here a copy of 'batch' under another name) reaches the README table and the
    help without another edit: the surfaces read the table, not a list of names."""
    extra = columns.Column("new_column", "int", "a column added for the test", 3, low=1, high=9, cli="--new-column",
                           sidebar=(columns.Sidebar("new_column", 3, "int"),))
    monkeypatch.setattr(columns, "SCENARIO", columns.SCENARIO + (extra,))
    assert "| `new_column` | `--new-column` | `new_column` | 3 | a whole number from 1 to 9 |" in columns_doc.scenario_table()
    assert "--new-column" in _actions(_subparser("estimate"))
    p = argparse.ArgumentParser()
    cli.add_column_flag(p, extra)
    assert p.parse_args(["--new-column", "4"]).new_column == 4 and p.parse_args([]).new_column == 3
    with pytest.raises(argparse.ArgumentTypeError, match="new column '10' is not accepted; accepted: a whole number "
                                                         "from 1 to 9"):
        cli._column_parser(extra)("10")
