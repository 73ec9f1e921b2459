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


def test_adapter_bytes_metric_is_the_adapters_trainable_parameters_in_their_dtype(table, models, gpus):
    """The QLoRA paper's 26 MB is an adapter size: compared as adapter_bytes, not as weights_bytes
    (which holds the 4-bit base model too)."""
    import pandas as pd
    from engine.estimate import estimate
    from planner.evidence import _adapter_bytes
    row = table.set_index("id").loc["qlora-paper-llama-7b-lora-params"]
    assert row["metric"] == "adapter_bytes" and row["kind"] == "estimate"
    # LLaMA 7B by hand: r=64 on q, k, v, o (4096 -> 4096) and gate, up, down (4096 <-> 11008), 32 layers
    per_layer = 4 * 64 * (4096 + 4096) + 3 * 64 * (4096 + 11008)
    assert row["estimate"] == pytest.approx(32 * per_layer * 2 / 1e6, abs=1e-3)  # bf16 adapters, MB
    sc = dict(model="llama-1-7b", task="train", method="qlora", precision="bf16", lora_rank=64, lora_targets="all",
              batch=1, seq=512, grad_checkpointing=True)
    out = estimate(pd.DataFrame([dict(sc, adapter_dtype="fp32"), dict(sc, adapter_dtype="bf16"),
                                 dict(sc, method="full")]), models, gpus)
    got = _adapter_bytes(out)
    assert got[0] == 32 * per_layer * 4 and got[1] == 32 * per_layer * 2  # peft's fp32 / bf16
    assert np.isnan(got[2])  # full fine-tuning has no adapters


def test_torchtune_8bit_adamw_row_is_torchaos_optimizer_and_saves_its_states(cat, table):
    """The README's '+ 8-bit AdamW' row runs torchao's AdamW8bit (its setup_note: bitsandbytes' paged
    states would not be in torch's statistics). Against the row before it (fused AdamW, bf16 states,
    every other switch the same) the estimate drops by exactly the states' difference, by hand from
    torchao's layout: Llama 3.2 3B's 3,212,749,824 values, 175,104 of them in norm weights of 3072."""
    refs = cat.references().set_index("id")
    ao, fused = (refs.loc[f"torchtune-llama32-3b-flags-{r}", "scenario"]
                 for r in ("adamw-8bit", "activation-offload"))
    assert ao["optimizer"] == "adamw_8bit_torchao" and fused["optimizer"] == "adamw_fused"
    assert {k: v for k, v in ao.items() if k != "optimizer"} == {k: v for k, v in fused.items() if k != "optimizer"}
    n, norms = 3_212_749_824, 175_104
    saving = n * 2 * 2 - ((n - norms) * (2 + 2 * 4 / 256) + norms * 2 * 2)  # bf16 exp_avg + exp_avg_sq -> 8-bit
    rows = table.set_index("id")
    drop = rows.loc["torchtune-llama32-3b-flags-activation-offload", "estimate"] - rows.loc[
        "torchtune-llama32-3b-flags-adamw-8bit", "estimate"]
    assert drop == pytest.approx(saving / 2**30, abs=1e-3)  # 5.890 GiB (estimates in GiB to 3 decimals)
