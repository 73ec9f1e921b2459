"""The commands `serve` prints for Ollama, ExLlamaV2 and MLC-LLM, read against those engines' own sources (the names
and values are copied here from the files cited; no engine is imported)."""

from __future__ import annotations

import json
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


# turboderp-org/exllamav2 @da07fac: exllamav2/model_init.py add_args (-m, -gs, -l, ...), examples/chat.py (-mode, -c8,
# -cq4, -cq6, -cq8), test_inference.py (-p: its generation builds ExLlamaV2Cache, fp16, with no cache flag)
EXL_MODEL_INIT = {"-m", "-gs", "-tp", "-l", "-rs", "-ra", "-ry", "-nfa", "-nxf", "-nsdpa", "-ng", "-lm", "-ept", "-lq4",
                  "-fst", "-ic", "-chunk"}
EXL_CHAT = EXL_MODEL_INIT | {"-mode", "-c8", "-cq4", "-cq6", "-cq8"}
EXL_TEST_INFERENCE = EXL_MODEL_INIT | {"-p", "-t"}


@pytest.mark.parametrize(("kv", "flag"), [("auto", None), ("fp16", None), ("int8", "-cq8"), ("fp8", "-cq8"),
                                          ("int4", "-cq4")])
def test_exllamav2_command_runs_the_cache_type_planned(frames, kv, flag):
    """The plan sizes a Q8 / Q4 cache for int8 / fp8 / int4 (EXL_CACHE_BYTES); test_inference.py -p always runs an
    fp16 cache (twice a Q8 cache's bytes), so before, an int8 plan's command ran with an fp16 cache. Now a quantized
    cache runs examples/chat.py with its -cq8 / -cq4; -l is the plan's length (model_init.py: config.max_seq_len)."""
    (row,) = rows(frames, dict(model="llama-3.1-8b", gpu="rtx-4090", engine="exllamav2", precision="exl2-4.0",
                               max_model_len=8192, kv_precision=kv)).to_dict("records")
    words = shlex.split(row["command"])
    flags = {w for w in words if w.startswith("-")}
    assert words[words.index("-l") + 1] == "8192"
    if flag is None:
        assert words[:2] == ["python", "test_inference.py"] and flags <= EXL_TEST_INFERENCE, words
    else:
        assert words[:2] == ["python", "examples/chat.py"] and flags <= EXL_CHAT, words
        assert flag in flags and words[words.index("-mode") + 1] == "raw"


# turboderp-org/exllamav3 @4f8ad01: exllamav3/model_init.py add_args (the flags of every example that loads a model and
# a cache; -cq "kv_bits or k_bits,v_bits", each 2-8: cache/quant.py), examples/chat.py (-mode, -prompt)
EXL3_MODEL_INIT = {"-m", "-gs", "-lm", "-or", "-tp", "-mcl", "-mclt", "-tpb", "-swa_full", "-ambs", "-lv", "-asnf",
                   "-layer_map", "-cs", "-cq", "-cca", "-ccs", "-rcs"}
EXL3_CHAT = EXL3_MODEL_INIT | {"-mode", "-prompt", "-sp", "-maxr", "-basic"}


@pytest.mark.parametrize(("kv", "bits", "n_gpus", "seqs"), [("auto", None, 1, 1), ("fp16", None, 2, 3), ("int8", "8,8", 1, 2),
                                                          ("fp8", "8,8", 1, 1), ("int4", "4,4", 2, 1)])
def test_exllamav3_command_runs_the_cache_planned(frames, kv, bits, n_gpus, seqs):
    """ExLlamaV3's examples/chat.py with flags its model_init.py defines: -cs the pool the plan sizes (max_num_seqs x
    max_model_len in whole 256-token pages, its cache.py assert), -cq the k,v bits of the quantized cache it sizes
    (EXL3_CACHE_BITS), -gs auto where the plan splits over GPUs."""
    (row,) = rows(frames, dict(model="llama-3.1-8b", gpu="rtx-4090", engine="exllamav3", precision="exl3-4.0", gpus=n_gpus,
                               max_model_len=5000, max_num_seqs=seqs, kv_precision=kv)).to_dict("records")
    words = shlex.split(row["command"])
    flags = {w for w in words if w.startswith("-")}
    assert words[:2] == ["python", "examples/chat.py"] and flags <= EXL3_CHAT, words
    tokens = int(words[words.index("-cs") + 1])
    assert tokens % 256 == 0 and 0 <= tokens - 5000 * seqs < 256
    assert row["kv_cache_bytes_allocated"] == pytest.approx(tokens * row["kv_bytes_per_token"], rel=1e-12)
    assert (words[words.index("-cq") + 1] if "-cq" in flags else None) == bits
    assert ("-gs" in flags) is (n_gpus > 1) and words[words.index("-mode") + 1] == "raw"


# ollama/ollama @fb307609: envconfig/config.go (OLLAMA_NUM_PARALLEL Uint, OLLAMA_FLASH_ATTENTION BoolWithDefault,
# OLLAMA_KV_CACHE_TYPE String), fs/ggml/ggml.go SupportsKVCacheType (f16, q8_0, q4_0), api/types.go Runner (num_ctx,
# num_gpu: int), server/routes.go GenerateHandler ("model '%s' not found": /api/generate does not pull)
OLLAMA_ENV = {"OLLAMA_NUM_PARALLEL", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE"}


@pytest.mark.parametrize("kv", ["auto", "int8", "int4"])
def test_ollama_command_asks_for_the_model_it_creates(frames, kv):
    """Before, the request named the catalog id (llama-3.1-8b), which is no Ollama library name (llama3.1:8b) and
    which nothing created, so Ollama answered "model 'llama-3.1-8b' not found". Now the command creates the GGUF the
    plan sized as an Ollama model, under the name the export's Modelfile is created as, and asks for that."""
    from engine import serving as S
    from planner.exports import serve_export
    (row,) = rows(frames, dict(model="llama-3.1-8b", gpu="rtx-4090", engine="ollama", precision="q4_k_m",
                               max_model_len=8192, kv_precision=kv)).to_dict("records")
    words = shlex.split(row["command"])
    env = dict(w.split("=", 1) for w in words[:words.index("ollama")])
    assert set(env) <= OLLAMA_ENV and env.get("OLLAMA_KV_CACHE_TYPE", "f16") in ("f16", "q8_0", "q4_0")
    body = json.loads(words[words.index("-d") + 1])
    assert all(isinstance(v, int) for v in body["options"].values()) and set(body["options"]) == {"num_ctx", "num_gpu"}
    created = words[words.index("create") + 1]
    assert body["model"] == created == "llama-3.1-8b-planned"
    assert words[words.index("echo") + 1] == "FROM ./llama-3.1-8b-Q4_K_M.gguf"  # llama-server's -m file
    models, _ = frames
    export = serve_export("ollama", row, models.set_index("id").loc[row["model"]], None).text
    assert f"ollama create {created} -f Modelfile" in export and "FROM ./llama-3.1-8b-Q4_K_M.gguf" in export
    assert S.OLLAMA_CREATED_SUFFIX == "-planned"
