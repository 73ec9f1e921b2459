"""The command line contract: JSON keys and values, one-line errors, catalog listing, sweep CSV."""

import csv
import math
import io
import json
import subprocess
import sys

import pytest

from tests.clirun import run_cli
from tests.conftest import ROOT


def run(*args):
    return run_cli(*args)  # `python -m engine *args`, in this process (tests/clirun.py)


def test_issue_scenario_gives_exact_weights_and_kv_cache():
    code, out, err = run("estimate", "--model", "llama-2-7b", "--task", "infer", "--precision", "bf16",
                         "--batch", "1", "--seq", "4096", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["weights_bytes"] == 13_476_831_232
    assert data["kv_cache_bytes"] == 2 * 2**30
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
                "kv_cache_bytes", "runtime_overhead_bytes", "peak_bytes", "peak_phase", "cpu_bytes", "params",
                "trainable_params"):
        assert key in data, key
    assert data["peak_bytes"] > data["weights_bytes"] + data["kv_cache_bytes"]


def test_gpu_adds_fit_and_gpus_needed():
    code, out, err = run("estimate", "--model", "llama-2-70b", "--task", "infer", "--precision", "bf16",
                         "--batch", "1", "--seq", "4096", "--gpu", "a100-80gb-sxm", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] is False
    assert data["gpus_needed"] == 2  # 137.9 GB of weights over two 80 GB cards


@pytest.mark.parametrize("args, words", [
    (["--model", "llama-2-7b", "--task", "train", "--method", "full", "--precision", "int4"], ["int4", "fp32", "bf16"]),
    (["--model", "llama-2-7b", "--batch", "0"], ["batch", "'0'", "from 1"]),
    (["--model", "llama-2-7b", "--method", "lora", "--lora-rank", "0"], ["lora rank", "'0'"]),
    (["--model", "llama-2-7b", "--seq", "5000"], ["5,000", "4,096", "--allow-long-context"]),
    (["--model", "llama-2-7b", "--zero", "4"], ["zero", "4", "0, 1, 2 or 3"]),
    (["--model", "gpt-5"], ["model", "gpt-5", "catalog model id"]),
    (["--model", "llama-2-7b", "--gpu", "h100-160g"], ["gpu", "h100-160g", "catalog GPU id"]),
    (["--model", "llama-2-7b", "--optimizer", "lion"], ["optimizer", "lion", "adamw"]),
    (["--model", "llama-2-7b", "--offload", "all"], ["offload", "--zero 3"]),
    (["--model", "llama-2-7b", "--method", "lora", "--lora-targets", "q_proj,attn"], ["attn", "q_proj"]),
    (["--model", "llama-2-7b", "--task", "serve"], ["task", "serve", "train, infer"]),
    (["--model", "llama-2-7b", "--batch", "two"], ["batch", "two"]),
])
def test_bad_values_exit_non_zero_with_one_clear_line(args, words):
    code, out, err = run("estimate", *args)
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_catalog_lists_ids():
    code, out, _ = run("catalog", "gpus")
    assert code == 0 and len(out.split()) >= 24 and "h100-sxm-80gb" in out.split()
    code, out, _ = run("catalog", "models")
    assert code == 0 and len(out.split()) >= 14 and "llama-3.1-405b" in out.split()
    code, _, err = run("catalog", "tpus")
    assert code == 2 and "gpus, models" in err


def test_a_bare_catalog_says_what_it_lists():
    """argparse said "the following arguments are required: what": its own name for the argument, no choices."""
    for args in (("catalog",), ("catalog", "--json")):
        code, out, err = run(*args)
        assert code == 2 and out == ""
        assert err == "error: catalog needs what to list; accepted: gpus, models, aliases, hosts, compatibility " \
                      "(e.g. catalog gpus)\n"


def test_sweep_writes_every_model_and_gpu(tmp_path):
    target = tmp_path / "report.csv"
    code, _, err = run("sweep", "--out", str(target), "--models", "llama-2-7b,llama-3-8b",
                       "--gpu-ids", "rtx-4090,h100-sxm-80gb", "--methods", "full,lora", "--zero", "3")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == 2 * 2 * 2
    assert {r["gpu"] for r in rows} == {"rtx-4090", "h100-sxm-80gb"}
    full = [r for r in rows if r["method"] == "full" and r["model"] == "llama-2-7b" and r["gpu"] == "rtx-4090"][0]
    lora = [r for r in rows if r["method"] == "lora" and r["model"] == "llama-2-7b" and r["gpu"] == "rtx-4090"][0]
    def needed(row):  # a count, or the CSV's explicit "not within 1,024 GPUs"
        return math.inf if row["gpus_needed"].startswith("not within") else float(row["gpus_needed"])
    assert needed(full) > needed(lora)


def test_config_json_model(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
           "max_position_embeddings": 4096, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = run("estimate", "--model-config", str(path), "--task", "infer", "--precision", "bf16", "--json")
    assert code == 0, err
    assert json.loads(out)["params"] == 6_738_415_616
    path.write_text("{not json")
    code, _, err = run("estimate", "--model-config", str(path), "--task", "infer")
    assert code == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1


def test_what_if_ranks_every_change_with_its_own_fit():
    """`--what-if --json`: the changes the Breakdown page ranks, each with a fit that agrees with its
    own peak against the card, fitting ones first and those on fewer GPUs before more."""
    code, out, err = run("estimate", "--model", "llama-2-7b", "--gpu", "rtx-4090", "--what-if", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] is False  # full fine-tuning of 7B with AdamW: 16+ bytes per parameter > 24 GB
    changes = data["what_if"]
    assert [c["rank"] for c in changes] == list(range(1, len(changes) + 1))
    assert len(changes) >= 10
    for c in changes:
        # decided on the safe peak (the estimate + the verdict margin) against the card less its headroom
        assert c["fits"] == (c["safe_peak_bytes"] <= data["usable_bytes"] * (1 - data["headroom"]) + 1.0), c
        assert c["fits_at_estimate"] or not c["fits"], c
        assert c["saved_bytes"] == data["peak_bytes"] - c["peak_bytes"], c
        if c["fits"]:
            assert c["gpus_to_fit"] == c["gpus"]
    fits = [c["fits"] for c in changes]
    assert fits == sorted(fits, reverse=True)  # every change that fits comes first
    to_fit = [c["gpus_to_fit"] for c in changes if c["fits"]]
    assert to_fit == sorted(to_fit)
    by_name = {c["change"]: c for c in changes}
    # the peak is the optimizer step: 8-bit states save there, checkpointing (activations) does not
    assert data["peak_phase"] == "optimizer"
    assert by_name["8-bit AdamW (bitsandbytes)"]["saved_bytes"] > 0
    assert by_name["Gradient checkpointing"]["saved_bytes"] == 0
    assert by_name["QLoRA r=8 + gradient checkpointing"]["fits"] is True
    assert {c["change_count"] for c in changes} == {1}  # single changes fit here: no combination is tried
    assert all(c["compatible"] is True for c in changes)  # an RTX 4090 refuses none of them


def test_what_if_json_says_which_changes_the_card_refuses():
    """On a T4 (no bf16: catalog/gpus.yaml bf16-needs-ampere) a bf16 change is never compatible nor a fit; the fp16
    change is offered and compatible."""
    code, out, err = run("estimate", "--model", "llama-3.2-1b", "--gpu", "t4", "--method", "full", "--what-if", "--json")
    assert code == 0, err
    changes = {c["change"]: c for c in json.loads(out)["what_if"]}
    fp16 = changes["FP16 instead of BF16 (this card has no bf16)"]
    assert fp16["compatible"] is True and "precision=fp16" in fp16["overrides"]
    refused = [c for c in changes.values() if not c["compatible"]]
    assert refused and not any(c["fits"] for c in refused)


def test_where_no_single_change_fits_the_cli_suggests_changes_together():
    args = ("estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--method", "qlora", "--batch", "4", "--seq", "8192")
    code, out, err = run(*args)
    assert code == 0, err
    assert "changes that fit, best first" in out and "Together: " in out
    code, out, err = run(*args, "--what-if", "--json")
    together = [c for c in json.loads(out)["what_if"] if c["change_count"] > 1]
    assert len(together) == 1 and together[0]["rank"] == 1 and together[0]["fits"] is True
    assert together[0]["change"].startswith("Together: ") and together[0]["overrides"].count("=") >= 2


def test_an_estimate_that_does_not_fit_suggests_the_best_changes():
    code, out, err = run("estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm-80gb", "--method", "qlora")
    assert code == 0, err
    assert "does not fit" in out
    hint = out[out.index("changes that fit, best first"):].splitlines()
    assert "Gradient checkpointing" in hint[2] and " yes " in hint[2]  # the first change: 52 GB of activations go
    code, out, err = run("estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm-80gb", "--method", "qlora",
                         "--grad-checkpointing")
    assert code == 0, err
    assert ": fits;" in out and "changes that fit" not in out


def test_what_if_needs_a_gpu():
    code, out, err = run("estimate", "--model", "llama-2-7b", "--what-if")
    assert code == 2 and out == ""
    assert err.strip() == "error: --what-if needs --gpu to fit against; accepted: a catalog GPU id (see: catalog gpus)"


def test_a_failing_hint_never_costs_the_estimate(monkeypatch, capsys):
    from planner import cli, planning

    def broken(*args, **kwargs):
        raise ValueError("seq 1 is not accepted")

    monkeypatch.setattr(planning, "what_if", broken)
    assert cli.main(["estimate", "--model", "llama-2-7b", "--gpu", "rtx-4090"]) == 0
    out = capsys.readouterr().out
    assert "peak per GPU" in out and "does not fit" in out
    assert out.rstrip().endswith("(no changes to suggest: seq 1 is not accepted)")


@pytest.mark.parametrize("argv, see", [
    # a serving plan's way to what fits is serve's own report (its "fits with" line), not the training commands
    (("serve", "--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "8192",
      "--export", "vllm"), "(see: serve without --export: why, and its 'fits with' line where a change fits)"),
    (("estimate", "--model", "llama-3-70b", "--method", "full", "--gpu", "rtx-4090", "--export", "trl"),
     "(see: check, estimate --what-if)"),
])
def test_an_export_that_does_not_fit_points_to_its_own_command(argv, see):
    code, out, err = run(*argv)
    assert code == 0 and out, err
    warning = [line for line in err.splitlines() if line.startswith("warning: this plan does not fit rtx-4090")]
    assert warning == [f"warning: this plan does not fit rtx-4090 {see}"], err
    if argv[0] == "serve":  # and what it points to is there: serve without --export says what fits
        code, report, err = run(*argv[:-2])
        assert code == 0 and "\n  fits with: --gpus " in report, (report, err)


def _process(*args):
    proc = subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("code, args", [
    (0, ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--gpu", "rtx-4090", "--json")),
    (2, ("estimate", "--model", "llama-2-7b", "--batch", "-3")),           # a bad value: one line
    (2, ("estimate", "--model", "llama-2-7b", "--task", "nope")),          # argparse's own refusal
    (0, ("sweep", "--models", "llama-3.2-1b", "--gpu-ids", "rtx-4090,a100-80gb-sxm")),  # CSV on stdout
])
def test_the_entry_point_is_main(code, args):
    """Most CLI tests call planner.cli.main in the test process (tests/clirun.py); a real
    `python -m engine` gives the same exit code, stdout and stderr."""
    real = _process(*args)
    assert real[0] == code and (real[1] or real[2])
    assert real == run_cli(*args)
