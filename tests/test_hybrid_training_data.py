"""The measured training steps of hybrid models (tests/data/measured_hybrid_training.csv, benchmarks/measure_peaks.py
--set hybrid: Qwen3.5 27B and Qwen3-Next 80B-A3B's Gated DeltaNet layers, Granite 4.0-H Micro's Mamba2 layers, at
their real sizes on fake tensors, transformers' torch paths). The engine still refuses to estimate training these
models (engine/scenarios.py check_combinations); these rows are what its hybrid terms are to be checked against, with
the calibration / held-out split fixed here before any of them is fitted. (Since then the terms are in the engine, and
the hybrid probe of 2026-12-07 appended nine held-out rows of other hybrids: tests/test_hybrid_training_accuracy.py.)"""

import hashlib
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parent / "data" / "measured_hybrid_training.csv"


def test_the_rows_are_the_ones_measured_before_any_fit():
    # sha256 of the file as written by `measure_peaks.py --set hybrid` on 2026-12-06 (its first 18 rows, header
    # included) and of the whole file as written again on 2026-12-07 with the hybrid probe's rows, five Nemotron-H rows,
    # four Falcon-H1 rows, three freeze rows of alternating hybrids and four LoRA rows on Nemotron-H and Falcon-H1 after
    # them (committed before their data in 22a9f1f, d2e440d, a040c48, 498ccec and 468159e; meta file beside it), and
    # its first 44 lines as they stood then, with Nemotron 3 Nano's three LoRA rows after them (2ada8a7, measured again
    # whole on 2026-12-07), its first 47 lines as they stood then, and three held-out rows after them (38f4137, for the
    # mechanisms those rows' trace gave: block_lead, the shared expert gate), its first 50 lines as they stood then, and
    # two Granite rows after them (d25dfe8): a held-out row changed after the engine is fitted fails here
    lines = DATA.read_bytes().splitlines(keepends=True)
    assert hashlib.sha256(b"".join(lines[:19])).hexdigest() == (
        "377cd848b78531e28d870636e09e857d6fdc7b93d299a73a954b1492ea4b7b87")
    assert hashlib.sha256(b"".join(lines[:44])).hexdigest() == (
        "a5025b37e5dc2ed6bd9571e53136d66099803e31505132842249442766db5e8a")
    assert hashlib.sha256(b"".join(lines[:47])).hexdigest() == (
        "d19fe7584385cacce70adb810399889a1f74171b94984fb2178a41a079ecd396")
    assert hashlib.sha256(b"".join(lines[:50])).hexdigest() == (
        "59e477b53fb3bcdb1639af4df4b72dfe89436f9a90041b6d99dea1cc0b4160e3")
    assert hashlib.sha256(DATA.read_bytes()).hexdigest() == (
        "3481e4e9762b686dc3595aff1d02b4047dc5bce4d996265c4507f772c98af9a2")


def test_both_splits_hold_both_layer_kinds_methods_and_checkpointing():
    rows = pd.read_csv(DATA)
    assert set(rows["split"]) == {"calibration", "heldout"}
    cal = rows[rows["split"] == "calibration"]
    # (and Falcon-H1 7B's 1 x 2,048 full step, the calibration row of its mixers beside attention, a040c48)
    falcon = cal["model"] == "falcon-h1-7b-instruct"
    assert falcon.sum() == 1 and set(cal.loc[falcon, "seq"]) == {2048}
    cal = cal[~falcon]
    assert set(cal["seq"]) == {1024} and set(cal["model"]) == {"qwen3.5-27b", "granite-4.0-h-micro"}
    for split, part in rows.groupby("split"):
        assert {"qwen3.5-27b", "granite-4.0-h-micro"} <= set(part["model"]), split  # Gated DeltaNet and Mamba2
        # (freeze: the Nemotron-H rows held out for its block layout)
        assert {"full", "lora"} <= set(part["method"]) <= {"full", "lora", "freeze"}, split
        assert set(part["grad_checkpointing"]) == {True, False}, split
    key = ["model", "method", "batch", "seq", "grad_checkpointing"]
    assert rows[rows["split"] == "heldout"].merge(cal[key], on=key).empty
    # peft's own resolution, and (Nemotron-H, Falcon-H1, where peft refuses all-linear) the projections named
    assert set(rows.loc[rows["method"] == "lora", "lora_targets"]) == {"all-linear", "q_proj,v_proj", "up_proj,down_proj",
                                                                       "q_proj,k_proj,v_proj,o_proj,up_proj,down_proj"}
