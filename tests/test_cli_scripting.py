"""The command line as a shell or Python script drives it (session "qa_cli"): standard output closed or in
an encoding without the text's characters, `--out -`, `ingest --snippet` beside flags for a log, a
did-you-mean for an unknown card in `ingest`, and one `--json` key set for a catalog model and a
checkpoint file alike. Each test failed before its fix."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from planner import cli
from tests.clirun import run_cli
from tests.conftest import ROOT

ESTIMATE = ("estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090")


def _strict(text: str):
    """json.loads refusing NaN / Infinity, which jq and JavaScript refuse."""
    def refuse(literal):
        raise ValueError(f"non-finite literal {literal}")
    return json.loads(text, parse_constant=refuse)


def test_a_closed_stdout_is_an_error_line_not_a_traceback(monkeypatch, capsys):
    # `llm-planner check ... >&-` left sys.stdout None: print() wrote nothing and the final flush raised
    # "AttributeError: 'NoneType' object has no attribute 'flush'" (a traceback, exit 1: "does not fit")
    monkeypatch.setattr(sys, "stdout", None)
    code = cli.main(["check", "--model", "llama-3.1-8b", "--gpu", "rtx-4090"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: standard output is closed") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("encoding", ["ascii", "cp1252", "latin-1"])
def test_a_stdout_without_the_texts_characters_gets_stand_ins(monkeypatch, capsys, encoding):
    # a Windows console redirected to a file (cp1252), PYTHONIOENCODING=ascii: the estimate's "->" and "…"
    # refused the whole output with "error: 'ascii' codec can't encode character '\u2192'" (exit 2)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors="strict", newline="\n")
    monkeypatch.setattr(sys, "stdout", stream)
    code = cli.main([*ESTIMATE])
    stream.flush()
    err = capsys.readouterr().err
    text = raw.getvalue().decode(encoding)
    assert code == 0, err
    assert "decided for this scenario: sequence auto -> 2,048" in text
    assert text.startswith("llama-3.1-8b: train, full, bf16")


def test_stand_ins_are_ascii_and_keep_accented_letters_readable():
    import codecs
    cli._prepare_stdout()  # registers the handler
    assert "seq → 2,048 … ± ≈ é ½".encode("ascii", "planner-stand-in") == b"seq -> 2,048 ... +/- ~ e 1/2"
    assert "漢".encode("ascii", "planner-stand-in") == b"?"
    assert codecs.lookup_error("planner-stand-in")


def test_out_dash_is_standard_output_not_a_file_named_dash(tmp_path, monkeypatch):
    # `sweep --out -` wrote a file named "-" in the working folder and nothing to stdout
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090", "--out", "-")
    assert code == 0, err
    assert out.startswith("model,task,method,") and len(out.splitlines()) == 4
    assert not (tmp_path / "-").exists()


def test_an_empty_out_is_refused_not_a_quiet_switch_to_stdout():
    # `--out "$UNSET"` printed the CSV to stdout as if no --out had been given
    code, out, err = run_cli("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090", "--out", "")
    assert (code, out) == (2, "")
    assert err.startswith("error: --out '' is not accepted; accepted: a file path, or - for standard output")


@pytest.mark.parametrize("flags,named", [(["--json"], "--json"), (["--save"], "--save"),
                                         (["--gpu", "rtx-4090", "--json"], "--json, --gpu")])
def test_ingest_snippet_refuses_the_flags_of_a_log(flags, named):
    # `ingest --snippet --json` printed Python where a script parsed JSON (json.loads: "Expecting value")
    code, out, err = run_cli("ingest", "--snippet", *flags)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {named} ")
    assert "accepted: ingest --snippet [--model ID], or ingest FILE --gpu ID" in err


def test_ingest_names_the_card_meant():
    # estimate, check, serve and sweep said "did you mean 'h100-sxm-80gb'"; ingest only that 'h100' is unknown
    log = ROOT / "tests" / "data" / "run_logs" / "llamacpp-llama31-8b-q4km.log"
    code, out, err = run_cli("ingest", str(log), "--gpu", "rtx4090")
    assert (code, out) == (2, "")
    assert "did you mean 'rtx-4090'" in err
    code, out, err = run_cli("ingest", str(log), "--gpu", "rtx-4090", "--model", "llama-3.1-8bb")
    assert code == 2 and "did you mean 'llama-3.1-8b'" in err


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from tests.test_checkpoints import write_gguf
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.mark.parametrize("command", [
    ("estimate", "--task", "infer"),
    ("estimate", "--task", "infer", "--gpu", "rtx-4090"),
    ("check", "--task", "infer", "--gpu", "rtx-4090"),
    ("serve", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "128"),
])
def test_a_catalog_model_and_a_checkpoint_file_give_the_same_json_keys(tiny_gguf, command):
    # `checkpoint` was there for --model-file only: a script reading data["checkpoint"] failed on a catalog model
    sources = {"catalog": ("--model", "llama-3.2-1b"),
               "config": ("--model-config", str(ROOT / "tests" / "data" / "good_configs" / "llama-3.2-1b.json")),
               "gguf": ("--model-file", str(tiny_gguf))}
    keys = {}
    for name, source in sources.items():
        code, out, err = run_cli(*command, *source, "--json")
        assert code in (0, 1), err
        data = _strict(out)
        keys[name] = list(data)
        assert (data["checkpoint"] is None) == (name != "gguf")
    assert keys["catalog"] == keys["config"] == keys["gguf"]


def test_the_closed_stdout_check_runs_as_a_process():
    """The entry point itself, stdout closed by the shell (`>&-`): one error line, exit 2."""
    import subprocess
    proc = subprocess.run(f"{sys.executable} -m engine catalog gpus >&-", shell=True, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, executable="/bin/bash", env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: standard output is closed; accepted: an open standard output (redirect it to "
                                   "/dev/null to discard the output)")


def test_a_flag_before_its_subcommand_is_named_as_such():
    # `llm-planner --json estimate ...` said "--json: did you mean --json?"; `--gpu=X check ...` said only that
    # --gpu is required, of a flag the user had given
    code, out, err = run_cli("--json", "estimate", "--model", "llama-3.1-8b")
    assert (code, out) == (2, "")
    assert "did you mean --json" not in err
    assert "--json: a flag of estimate, give it after the subcommand (python -m engine estimate ... --json)" in err
    code, out, err = run_cli("--gpu=rtx-4090", "check", "--model", "llama-3.1-8b")
    assert (code, out) == (2, "")
    assert "--gpu given before check: the flags of check go after it" in err
    code, _, err = run_cli("estimate", "--model", "llama-3.1-8b", "--jsn")  # a misspelling still gets its guess
    assert code == 2 and "(--jsn: did you mean --json?)" in err


@pytest.mark.parametrize("typed,meant", [("estimat", "estimate"), ("Check", "check"), ("serv", "serve")])
def test_a_misspelt_subcommand_gets_the_one_meant(typed, meant):
    code, out, err = run_cli(typed, "--model", "llama-3.1-8b")
    assert (code, out) == (2, "")
    assert err.strip().endswith(f"; did you mean {meant}?") and len(err.strip().splitlines()) == 1


def test_whole_number_columns_are_whole_in_the_csv_as_in_the_json():
    # the sweep CSV wrote max_batch "10.0", max_seq "20539.0", gpus_needed "1.0", prompt_tokens "2048.0" where
    # estimate --json gives 10, 20539, 1, 2048 (a shell's integer test refuses "10.0"; pandas read float64)
    import csv
    scenario = ("--models", "llama-3.1-8b,llama-3-70b", "--gpu-ids", "rtx-4090", "--task", "infer")
    code, out, err = run_cli("sweep", *scenario)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    for row in rows:
        code, text, err = run_cli("estimate", "--model", row["model"], "--gpu", "rtx-4090", "--task", "infer", "--json")
        data = _strict(text)
        for key in ("max_batch", "max_seq", "gpus_needed", "prompt_tokens", "params", "batch", "seq"):
            assert row[key] == str(data[key]), (row["model"], key, row[key], data[key])
    import pandas as pd
    frame = pd.read_csv(io.StringIO(out))
    assert {str(frame[c].dtype) for c in ("max_batch", "max_seq", "prompt_tokens", "gpus_needed")} == {"int64"}


def test_a_runs_file_that_cannot_be_written_is_named_with_its_setting(tmp_path, monkeypatch):
    # `ingest ... --save` where the runs file's folder cannot be made read "error: File exists: /path/of/a/file"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LLM_PLANNER_USER_RUNS", str(blocker / "runs" / "user_runs.yaml"))
    log = ROOT / "tests" / "data" / "run_logs" / "llamacpp-llama31-8b-q4km.log"
    code, out, err = run_cli("ingest", str(log), "--gpu", "rtx-4090", "--save", "--json")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: the run cannot be saved to '{blocker / 'runs' / 'user_runs.yaml'}': ")
    assert "$LLM_PLANNER_USER_RUNS" in err and len(err.strip().splitlines()) == 1


def test_a_build_folder_that_cannot_be_written_is_named_with_its_setting(tmp_path, monkeypatch):
    # $LLM_PLANNER_BUILD_DIR under a file read "error: Not a directory: /path/b"
    from catalog import shipped
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LLM_PLANNER_BUILD_DIR", str(blocker / "b"))
    with pytest.raises(OSError) as caught:
        shipped.database_path(rebuild=True)
    assert "the catalog's database cannot be built in" in str(caught.value)
    assert "$LLM_PLANNER_BUILD_DIR" in str(caught.value)


@pytest.mark.parametrize("target", ["/dev/full", "folder", "missing/x.csv"])
def test_an_out_that_cannot_be_written_names_the_file(tmp_path, target):
    # `--out /dev/full` read "error: No space left on device", `--out /proc/version` "error: Input/output error"
    if target == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    path = target if target.startswith("/") else str(tmp_path / target)
    if target == "folder":
        os.mkdir(path)
    code, out, err = run_cli("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090", "--out", path)
    assert (code, out) == (2, "")
    assert err.startswith("error: --out '") and "' cannot be written: " in err  # (a long path is shortened: show())
    assert err.rstrip().endswith("accepted: a writable file path, or - for standard output")


@pytest.mark.parametrize("argv,meant", [
    (("estimate", "--model", "llama-3.1-8b", "--precision", "BF16"), "'bf16'"),
    (("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--precision", "Q4_K_M"), "'q4_k_m'"),
    (("estimate", "--model", "llama-3.1-8b", "--method", "LoRA"), "'lora'"),
    (("estimate", "--model", "llama-3.1-8b", "--task", "INFER"), "'infer'"),
    (("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "VLLM", "--max-model-len", "8192"), "'vllm'"),
])
def test_a_choice_in_another_case_gets_the_one_meant(argv, meant):
    # 'BF16' for training read "cannot be used for training", as if it were a precision training refuses; a
    # choice typed in capitals got the list without the one meant
    code, out, err = run_cli(*argv)
    assert (code, out) == (2, "")
    assert err.rstrip().endswith(f"; did you mean {meant}?"), err
    assert "cannot be used for training" not in err


def test_a_quantized_precision_for_training_keeps_its_hint():
    code, _, err = run_cli("estimate", "--model", "llama-3.1-8b", "--precision", "q4_k_m")
    assert code == 2 and "cannot be used for training (quantized weights train only as a frozen base" in err


def test_serve_names_the_cloud_price_as_estimate_and_budget_do():
    # serve --json's price_source is the cloud price's, estimate's the card's: cloud_source / cloud_date give the cloud
    # price under one name in every subcommand
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len",
                             "8192", "--json")
    served = _strict(out)
    code2, out2, err2 = run_cli("estimate", "--model", "llama-3-8b", "--task", "infer", "--gpu", "rtx-4090", "--json")
    estimated = _strict(out2)
    assert code == code2 == 0, err + err2
    assert (served["cloud_source"], served["cloud_date"]) == (estimated["cloud_source"], estimated["cloud_date"])
    assert (served["price_source"], served["price_date"]) == (served["cloud_source"], served["cloud_date"])  # kept


@pytest.mark.parametrize("flags", [(), ("--task", "infer"), ("--task", "infer", "--precision", "int4", "--seq", "512"),
                                   ("--zero", "3", "--gpus", "2", "--optimizer", "sgd")])
def test_the_sweep_csv_has_the_documented_columns_in_the_documented_order(flags):
    # the columns came in the order of the flags given (--precision 5th with it, 23rd without; model, gpu, method,
    # task first), not RESULT order (engine/columns.py): a script reading a column by position read another one
    from engine import columns
    code, out, err = run_cli("sweep", "--models", "llama-3.2-1b", "--gpu-ids", "rtx-4090", *flags)
    assert code == 0, err
    assert out.splitlines()[0].split(",") == [*columns.result_columns(), *cli.PRICE_KEYS, *cli.COMPATIBILITY_KEYS]


def test_ingest_dash_reads_standard_input(monkeypatch):
    # `vllm serve ... 2>&1 | llm-planner ingest - --gpu ID` read "run file '-' cannot be read: No such file or directory"
    log = ROOT / "tests" / "data" / "run_logs" / "vllm-llama31-8b-h100.log"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log.read_bytes())))
    code, out, err = run_cli("ingest", "-", "--gpu", "h100-sxm-80gb", "--json")
    assert code == 0, err
    piped = _strict(out)
    code, out, err = run_cli("ingest", str(log), "--gpu", "h100-sxm-80gb", "--json")
    named = _strict(out)
    assert piped["file"] == "stdin" and named["file"] == log.name
    assert {**piped, "file": None} == {**named, "file": None}


@pytest.mark.parametrize("workload,meant", [("LoRA", "'lora'"), ("infer_int4", "'infer-int4'")])
def test_a_budget_workload_spelt_otherwise_gets_the_one_meant(workload, meant):
    code, out, err = run_cli("budget", "--budget", "2000", "--workloads", f"llama-3-8b:{workload}", "--json")
    assert (code, out) == (2, "")
    assert err.rstrip().endswith(f"did you mean {meant}?"), err


def test_no_subcommand_is_a_usage_error_on_stderr():
    # `llm-planner` alone printed its help on stdout and exited 2: `out=$(llm-planner $CMD)` captured the help
    code, out, err = run_cli()
    assert (code, out) == (2, "")
    assert err.startswith("usage: python -m engine") and "estimate" in err
    code, out, err = run_cli("--help")  # asked for: on stdout, status 0
    assert code == 0 and out.startswith("usage: python -m engine") and err == ""


def test_a_sweep_row_fits_as_check_answers_for_an_incompatible_card():
    # the CSV said fits True for bf16 inference on a T4 (no bf16 before compute capability 8.0) where check exits 1
    # and estimate --json says fits false, compatible false: one scenario, two answers
    import csv
    code, out, err = run_cli("sweep", "--models", "llama-3.2-1b", "--gpu-ids", "t4,rtx-4090", "--task", "infer",
                             "--precision", "bf16")
    assert code == 0, err
    for row in csv.DictReader(io.StringIO(out)):
        code, text, err = run_cli("check", "--model", "llama-3.2-1b", "--gpu", row["gpu"], "--task", "infer",
                                  "--precision", "bf16", "--json")
        data = _strict(text)
        assert (row["fits"], row["compatible"]) == (str(data["fits"]), str(data["compatible"]))
        assert row["compatibility_notes"] == "; ".join(data["compatibility_notes"])
        assert code == (0 if data["fits"] else 1)
        if row["gpu"] == "t4":
            assert (row["fits"], row["compatible"], row["fits_at_estimate"]) == ("False", "False", "True")


@pytest.mark.parametrize("argv,flag", [(("estimate", "--model", "\udcff"), "--model '\\udcff'"),
                                       (("estimate", "--model=ll\udcffama"), "--model 'll\\udcffama'"),
                                       (("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--lora-targets",
                                         "q\udcfe"), "--lora-targets 'q\\udcfe'")])
def test_a_value_with_bytes_that_are_not_utf8_is_named(argv, flag):
    # `--model $'\xff'` (a byte that is not UTF-8: Python keeps it as U+DCFF) read "error: 'utf-8' codec can't encode
    # character '\udcff' in position 0: surrogates not allowed", naming neither the flag nor the value
    code, out, err = run_cli(*argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {flag} holds bytes that are not UTF-8 text; accepted: UTF-8 text"), err


def test_estimates_decode_speed_says_whose_it_is_beside_serves():
    """estimate --task infer's decode speed is a roofline at llama.cpp's share of the bandwidth (40 tokens/s for
    Llama 3.1 8B on an RTX 4090), serve --engine transformers its fitted generate() speed (29): two figures for what
    read as one scenario. The text names what the first is and where each engine's own is."""
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--gpu", "rtx-4090")
    assert code == 0, err
    line = out.splitlines()[[i for i, t in enumerate(out.splitlines()) if t.startswith("decode: ")][0] + 1]
    assert "as llama.cpp reaches it" in line and "serve --engine ENGINE" in line
