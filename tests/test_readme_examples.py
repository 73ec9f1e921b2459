"""Figures the README quotes from the command line, produced again here so that they cannot drift.

(Each README sentence is matched with its whitespace folded; the figures are the CLI's own output.)
"""

from __future__ import annotations

import json

import pytest

from tests.clirun import run_cli
from tests.conftest import ROOT

README = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


@pytest.mark.parametrize("gpu,link", [("l40s", "8x L40S (PCIe 4.0, 64 GB/s)"), ("h100-sxm-80gb", "8x H100 SXM (NVLink 4, 900 GB/s)")])
def test_the_communication_example(gpu, link):
    """'Llama 3 8B full bf16, 8 GPUs, batch 4, seq 2048, 1e9 tokens: ... X h of Y h' (the Speed section)."""
    code, out, err = run_cli("estimate", "--model", "llama-3-8b", "--method", "full", "--precision", "bf16", "--gpu", gpu,
                             "--gpus", "8", "--batch", "4", "--seq", "2048", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert f"{link} {data['comm_hours']:.2f} h of {data['train_hours']:.2f} h" in README


def test_the_llamacpp_offload_example():
    """The Serving section's llama.cpp command and its comment: '41 of 80 layers on the GPU'."""
    code, out, err = run_cli("serve", "--model", "llama-3-70b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--precision",
                             "q4_k_m", "--max-model-len", "8192", "--gpu-layers", "auto")
    assert code == 0, err
    repeating = out.split("then ")[1].split(" repeating layers")[0]  # "41 of 80"
    assert f"# {repeating} layers on the GPU, the rest in RAM" in README
