"""The commands `serve` prints for Ollama, ExLlamaV2 and MLC-LLM, read against those engines' own sources (the names
and values are copied here from the files cited; no engine is imported)."""

from __future__ import annotations

import shlex

import pytest

from tests.test_serving_engines import rows  # noqa: E402  (serve() of the requests, on `frames`)


@pytest.fixture(scope="module")
def frames(models, gpus):  # (the shipped catalog's frames, as rows() takes them; conftest's session fixtures)
    return models, gpus


# mlc-ai/mlc-llm @79d603f0 python/mlc_llm/cli/serve.py EngineConfigOverride.from_str: the keys --overrides takes
MLC_OVERRIDES = {"max_num_sequence", "max_total_seq_length", "prefill_chunk_size", "max_history_size",
                 "gpu_memory_utilization", "spec_draft_length", "spec_tree_width", "prefix_cache_mode",
                 "prefix_cache_max_num_recycling_seqs", "prefill_mode", "context_window_size", "sliding_window_size",
                 "attention_sink_size", "tensor_parallel_shards", "pipeline_parallel_stages", "opt"}


def _mlc_overrides(command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["mlc_llm", "serve"] and words[words.index("--mode") + 1] == "server"
    return dict(item.split("=", 1) for item in words[words.index("--overrides") + 1].split(";") if item)


@pytest.mark.parametrize("n_gpus", [1, 2])
def test_mlc_command_sets_the_planned_context_window(frames, n_gpus):
    """MLC-LLM's serve takes the request length as the override context_window_size (cli/serve.py: passed as
    max_single_sequence_length, and by serve/engine_base.py to the JIT compile, whose prefill chunk is
    min(context window, 8192): the chunk the plan sizes). Before, the command left it out: the server took the
    model's whole context (131072 for Llama 3.1), compiled a larger chunk than planned and admitted longer requests."""
    (row,) = rows(frames, dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine="mlc-llm", precision="q4f16_1",
                               max_model_len=4096, gpus=n_gpus)).to_dict("records")
    over = _mlc_overrides(row["command"])
    assert set(over) <= MLC_OVERRIDES, set(over) - MLC_OVERRIDES
    assert over["context_window_size"] == "4096"
    assert int(over["max_num_sequence"]) == row["max_num_seqs"]
    assert over.get("tensor_parallel_shards", "1") == str(n_gpus)
    assert 0 < float(over["gpu_memory_utilization"]) < 1
