"""llama.cpp's sliding-window (SWA) KV cache as llama.cpp allocates it, against hand-computed cells.

src/llama-kv-cache-iswa.cpp (ggml-org/llama.cpp at 02c28f53): the SWA layers' cache of each sequence stream holds
GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256) cells (the default -ub is 512); public load logs of a Gemma model with a
1,024-token window at -c 8192 print "creating SWA KV cache, size = 1536 cells". Models whose every layer slides
(Mistral 7B v0.1) are converted to llama.cpp's llama arch, whose load_hparams read no sliding window: a full cache.
The model shapes are the catalog's (catalog/models.yaml, from each config.json); the cells are computed here."""

from __future__ import annotations

import json

import pytest

from catalog import default_catalog
from engine import estimate
from engine.scenarios import grid
from tests.clirun import run_cli


def _shape(model: str) -> dict:
    return default_catalog().models().set_index("id").loc[model].to_dict()


def _pad256(n: int) -> int:
    return -(-n // 256) * 256


def _allocated(model: str, ctx: int, *extra: str) -> float:
    code, out, err = run_cli("serve", "--model", model, "--gpu", "rtx-4090", "--engine", "llama.cpp",
                             "--max-model-len", str(ctx), "--json", *extra)
    assert code == 0, err
    return json.loads(out)["kv_cache_bytes_allocated"]


@pytest.mark.parametrize("model, ctx", [("gemma-3-27b", 8192), ("gpt-oss-20b", 8192), ("gemma-3-27b", 1024),
                                        ("gemma-2-9b", 8192)])
def test_the_swa_layers_keep_the_window_plus_a_micro_batch_padded_to_256(model, ctx):
    s = _shape(model)
    per_layer_token = 2 * s["num_kv_heads"] * s["head_dim"] * 2  # K and V, f16 (llama.cpp's default -ctk / -ctv)
    swa, full = s["sliding_window_layers"], s["num_layers"] - s["sliding_window_layers"]
    cells = _pad256(min(ctx, s["sliding_window"] + 512))
    assert _allocated(model, ctx) == (full * ctx + swa * cells) * per_layer_token


def test_gemma_swa_cells_are_the_1536_a_public_load_log_prints():
    assert _pad256(min(8192, _shape("gemma-3-27b")["sliding_window"] + 512)) == 1536  # (the log's figure)
    s = _shape("gemma-3-27b")
    before = (10 * 8192 + 52 * 1024) * 2 * 16 * 128 * 2  # the bare window the engine counted until 2026-12-06
    assert (s["num_layers"], s["sliding_window_layers"], s["num_kv_heads"], s["head_dim"]) == (62, 52, 16, 128)
    assert _allocated("gemma-3-27b", 8192) - before == 52 * 512 * 2 * 16 * 128 * 2  # 208 MiB more


def test_a_model_whose_every_layer_slides_keeps_the_whole_context_under_llama_cpp():
    s = _shape("mistral-7b")
    assert s["sliding_window_layers"] == s["num_layers"] and s["sliding_window"] == 4096
    assert _allocated("mistral-7b", 32768) == s["num_layers"] * 32768 * 2 * s["num_kv_heads"] * s["head_dim"] * 2


def test_the_estimate_of_a_gguf_serving_row_counts_the_same_cells():
    """estimate --task infer with a GGUF precision takes llama.cpp's policy (windowed): one sequence of 16,384 tokens."""
    s = _shape("gemma-3-4b")
    frame = grid(gpus=[1])
    frame["model"], frame["gpu"], frame["task"], frame["precision"], frame["seq"] = "gemma-3-4b", "rtx-4090", "infer", \
        "q4_k_m", 16384
    cat = default_catalog()
    kv = float(estimate(frame, cat.models(), cat.gpus())["kv_cache_context_bytes"].iloc[0])
    swa, full = s["sliding_window_layers"], s["num_layers"] - s["sliding_window_layers"]
    assert kv == (full * 16384 + swa * _pad256(s["sliding_window"] + 512)) * 2 * s["num_kv_heads"] * s["head_dim"] * 2


@pytest.mark.parametrize("per_slot, slots, cells", [(341, 3, 1536), (256, 4, 1024), (1000, 1, 1024),
                                                    (700, 2, 1536)])
def test_each_slot_stream_is_padded_to_256_cells(per_slot, slots, cells):
    """src/llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256); without a unified cache each of the n_seq_max streams holds
    GGML_PAD(n_ctx / n_seq_max, 256) cells. Unsloth Studio's sizing, matched to 39 live allocations (unslothai/unsloth
    PR #7530): 'ctx 1024 with 3 slots allocates 1536 cells / 27.0 MiB, but 4 slots allocates 1024 cells / 18.0 MiB'
    (Gemma 3 270M: 18 layers x 1 KV head x 256 x K and V x 2 B = 18 KiB a cell). The command writes -c = slots x
    --max-model-len (341 x 3 = 1023, padded to 1024)."""
    s = _shape("gemma-3-270m")
    per_cell = s["num_layers"] * 2 * s["num_kv_heads"] * s["head_dim"] * 2
    assert per_cell == 18 * 1024
    allocated = _allocated("gemma-3-270m", per_slot, "--max-num-seqs", str(slots), "--precision", "q8_0")
    # (its sliding layers keep at most the window + a micro-batch of a stream's cells; 512 + 512 >= these streams)
    assert allocated == cells * per_cell
