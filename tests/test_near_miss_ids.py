"""An unknown catalog id names the ids the user most likely meant (bad input gets a clear message naming the bad value
and what is accepted): `--model llama-3.1-8B` was answered with 'e.g. deepseek-r1, deepseek-r1-distill-llama-70b, ...'
(the catalog's first four ids in sort order) and `--gpu h100` with 'e.g. h100-sxm-80gb, rtx-4090', on every surface."""

from __future__ import annotations

import pytest

from engine.scenarios import closest_ids, did_you_mean
from tests.clirun import run_cli
from tests.test_pages import open_app, shown


def test_closest_ids_by_case_then_prefix_then_spelling():
    ids = ["llama-3.1-8b", "llama-3-8b", "llama-3.1-70b", "h100-sxm-80gb", "h100-pcie-80gb", "h100-nvl-94gb", "rtx-4090"]
    assert closest_ids("llama-3.1-8B", ids) == ["llama-3.1-8b"]
    assert closest_ids("h100", ids) == ["h100-nvl-94gb", "h100-pcie-80gb", "h100-sxm-80gb"]
    assert closest_ids("llama3.1-8b", ids)[0] == "llama-3.1-8b"
    assert closest_ids("rtx4090", ids)[0] == "rtx-4090"
    assert closest_ids("zzz", ids) == [] and did_you_mean("zzz", ids) == "" and did_you_mean("", ids) == ""
    assert did_you_mean("4090", ids) == "; did you mean 'rtx-4090'?"


@pytest.mark.parametrize("argv, message", [
    (("check", "--model", "llama-3.1-8B", "--gpu", "rtx-4090"),
     "model 'llama-3.1-8B' is not accepted; accepted: a catalog model id (python -m engine catalog models); "
     "did you mean 'llama-3.1-8b'?"),
    (("check", "--model", "llama-3.1-8b", "--gpu", "h100"),
     "gpu 'h100' is not in the catalog; accepted: a catalog GPU id (python -m engine catalog gpus); "
     "did you mean 'h100-nvl-94gb', 'h100-pcie-80gb' or 'h100-sxm-80gb'?"),
    (("estimate", "--model", "llama-3.1-8b", "--gpu", "rtx4090"), "did you mean 'rtx-4090'"),
    (("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "H100-SXM-80GB"), "did you mean 'h100-sxm-80gb'?"),
    (("budget", "--budget", "1000", "--workloads", "llama-3.1-8B:qlora"), "did you mean 'llama-3.1-8b'?"),
    (("serve", "--model", "llama-3.1-8b", "--gpu", "4090", "--engine", "vllm", "--max-model-len", "4096"),
     "did you mean 'rtx-4090'?"),
])
def test_the_cli_names_the_id_meant(argv, message):
    code, out, err = run_cli(*argv)
    assert code == 2 and message in err, err


def test_an_id_nothing_is_close_to_keeps_the_examples():
    code, out, err = run_cli("check", "--model", "llama-3.1-8b", "--gpu", "zzz")
    assert code == 2 and "e.g. h100-sxm-80gb, rtx-4090" in err and "did you mean" not in err


@pytest.mark.usefixtures("clear_streamlit_caches")
def test_a_mistyped_url_id_names_the_id_meant_and_keeps_the_rest():
    at = open_app(None, {"model": "llama-3.1-8B", "gpu": "h100-sxm", "batch": "4"})
    said = shown(" ".join(str(e.value) for e in [*at.warning, *at.error]))
    assert "did you mean 'llama-3.1-8b'?" in said and "'h100-sxm-80gb'" in said, said
    assert at.session_state["settings"]["batch"] == 4
