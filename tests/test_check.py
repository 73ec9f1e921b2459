"""`check` (issue 26): one line, exit status 0 fits / 1 does not fit / 2 bad input, through the
real command line (tests/clirun.py runs planner.cli.main in this process); and schema_version in
every --json output."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from planner import cli
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent
FITS = ("--model", "llama-3.1-8b", "--task", "infer", "--precision", "int4", "--gpu", "rtx-4090")
TOO_BIG = ("--model", "llama-3-70b", "--method", "full", "--gpu", "rtx-4090")
# bf16 on a T4 (compute capability 7.5): catalog/gpus.yaml's bf16-needs-ampere refuses the card,
# whatever the memory says (3 of 15 GiB)
INCOMPATIBLE = ("--model", "llama-3.2-1b", "--task", "infer", "--precision", "bf16", "--gpu", "t4")


def test_fits_exits_0_with_one_line():
    code, out, err = run_cli("check", *FITS)
    assert (code, err) == (0, "")
    assert out.count("\n") == 1
    assert out.startswith("fits: llama-3.1-8b infer int4 on 1x rtx-4090: ")
    assert " of 24.0 GiB (" in out and "headroom 10%" in out


def test_does_not_fit_exits_1_with_one_line_that_says_what_next():
    code, out, err = run_cli("check", *TOO_BIG)
    assert (code, err) == (1, "")
    assert out.count("\n") == 1
    assert out.startswith("does not fit: llama-3-70b full on 1x rtx-4090: ")
    assert "estimate --what-if" in out


def test_an_incompatible_card_exits_1_and_names_the_rule():
    code, out, err = run_cli("check", *INCOMPATIBLE)
    assert (code, err) == (1, "")
    assert out.startswith("does not fit: llama-3.2-1b infer bf16 on 1x t4: ")
    assert "incompatible: bf16 needs compute capability 8.0" in out and out.count("\n") == 1


@pytest.mark.parametrize("argv, named", [
    (("--model", "no-such-model", "--gpu", "rtx-4090"), "no-such-model"),
    (("--model", "llama-3.1-8b", "--gpu", "no-such-gpu"), "no-such-gpu"),
    (("--model", "llama-3.1-8b"), "--gpu"),  # check needs a GPU to fit against
    (("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--batch", "0"), "'0'"),
    (("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--task", "fly"), "'fly'"),
    (("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--no-such-flag"), "--no-such-flag"),
])
def test_bad_input_exits_2_with_one_error_line_naming_the_value(argv, named):
    code, out, err = run_cli("check", *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err
    assert "Traceback" not in err


def test_json_is_the_estimates_object_and_keeps_the_exit_status():
    code, out, _ = run_cli("check", *TOO_BIG, "--json")
    data = json.loads(out)
    assert code == 1 and data["fits"] is False and data["schema_version"] == cli.SCHEMA_VERSION
    code, estimate_out, _ = run_cli("estimate", *TOO_BIG, "--json")
    assert code == 0 and json.loads(estimate_out) == data  # same keys, same values, same order
    code, out, _ = run_cli("check", *INCOMPATIBLE, "--json")
    assert code == 1 and json.loads(out)["compatible"] is False
    code, out, _ = run_cli("check", *FITS, "--json")
    assert code == 0 and json.loads(out)["fits"] is True


def _options(command: str) -> set[str]:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command").choices[command]
    return {o for a in sub._actions for o in a.option_strings}


def test_check_takes_the_estimates_flags():
    # both generated from engine/columns.py; check leaves out only estimate's two other outputs
    assert _options("check") == _options("estimate") - {"--what-if", "--export"}


@pytest.mark.parametrize("argv", [
    ("estimate", "--model", "llama-3.1-8b", "--json"),
    ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--gpu", "rtx-4090", "--what-if", "--json"),
    ("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "4096", "--json"),
    ("budget", "--budget", "2000", "--workloads", "llama-3-8b:lora", "--one-purchase", "--json"),
])
def test_every_json_object_carries_schema_version_last(argv):
    code, out, err = run_cli(*argv)
    assert code == 0, err
    data = json.loads(out)
    assert list(data)[-1] == "schema_version" and data["schema_version"] == 1


@pytest.mark.parametrize("argv", [("catalog", "gpus", "--json"), ("catalog", "hosts", "--json"), ("evidence", "--json")])
def test_a_json_list_carries_schema_version_in_each_record(argv):
    # the lists stay lists (a reader's `.[0]` keeps working): each record gains the key
    code, out, err = run_cli(*argv)
    assert code == 0, err
    records = json.loads(out)
    assert isinstance(records, list) and records
    assert all(r["schema_version"] == 1 for r in records)


def test_every_json_output_goes_through_print_json():
    # a new --json output that calls json.dumps itself would lack schema_version
    tree = ast.parse((ROOT / "planner" / "cli.py").read_text(encoding="utf-8"))
    dumps = [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
             for n in ast.walk(f) if isinstance(n, ast.Attribute) and n.attr == "dumps"]
    assert dumps == ["print_json"]
