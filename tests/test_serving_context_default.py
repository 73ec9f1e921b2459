"""`serve` without --max-model-len: each engine's own context when its flag is left out (engine/serving.py's block
"Each engine's own context", planner/serving.py default_model_len), said in the report and in --json."""

from __future__ import annotations

import json

import pytest

import engine.constants as C
from engine.serving import EXL3_DEFAULT_CACHE_TOKENS, FIT_MARGIN_BYTES, ollama_default_context, serve
from planner.serving import SERVE_JSON_KEYS
from tests.clirun import run_cli

LLAMA31_CONTEXT = 131072  # Llama 3.1's max_position_embeddings (catalog max_context)


def serve_json(*args: str) -> dict:
    code, out, err = run_cli("serve", *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == [*SERVE_JSON_KEYS, "schema_version"]  # the keys only added to
    return data


@pytest.mark.parametrize("engine,flag", [("vllm", "--max-model-len"), ("sglang", "--context-length"),
                                         ("exllamav2", " -l "), ("mlc-llm", "context_window_size")])
def test_engines_that_read_the_model_context_take_it_and_leave_the_flag_out(engine, flag):
    data = serve_json("--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", engine)
    assert data["max_model_len"] == LLAMA31_CONTEXT and data["max_model_len_default"] is True
    assert "the model's context" in data["max_model_len_source"]
    assert flag not in data["command"]  # the engine derives the same length itself


def test_a_given_length_is_kept_and_said_so():
    data = serve_json("--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--max-model-len", "8192")
    assert (data["max_model_len"], data["max_model_len_default"]) == (8192, False)
    assert data["max_model_len_source"] == "--max-model-len" and "--max-model-len 8192" in data["command"]


def test_vllm_at_the_model_context_that_does_not_fit_says_so_and_what_does():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("max-model-len 131,072)")
    assert lines[1].startswith("  max-model-len 131,072: vLLM's default, the model's context")
    assert "vLLM stops at start" in lines[1]
    assert lines[2].startswith("  DOES NOT FIT: one 131,072-token request's KV cache")
    assert lines[3].startswith("  fits with:") and "--max-model-len " in lines[3]
    assert "--max-model-len" not in out.split("run it: ")[1]


def test_exllamav3_takes_its_chat_cache_size_shared_by_the_sequences():
    one = serve_json("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "exllamav3")
    assert one["max_model_len"] == EXL3_DEFAULT_CACHE_TOKENS == 32768 and f"-cs {EXL3_DEFAULT_CACHE_TOKENS}" in one["command"]
    three = serve_json("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "exllamav3", "--max-num-seqs", "3")
    assert three["max_model_len"] == 10752  # 32,768 / 3 in whole 256-token pages
    assert three["kv_cache_bytes_allocated"] <= one["kv_cache_bytes_allocated"]  # the same pool, no larger


@pytest.mark.parametrize("gpu,gpus,tokens", [("rtx-4060-ti-16gb", 1, 4096), ("rtx-4090", 1, 32768),
                                             ("rtx-a6000", 1, LLAMA31_CONTEXT), ("rtx-4090", 2, LLAMA31_CONTEXT)])
def test_ollama_by_the_vram_of_all_gpus_at_most_the_model_context(gpu, gpus, tokens):
    """16 GiB: 4k; 24 GiB: 32k; 48 GiB (one card or two of 24): 256k, lowered to Llama 3.1's 131,072."""
    data = serve_json("--model", "llama-3.1-8b", "--gpu", gpu, "--gpus", str(gpus), "--engine", "ollama")
    assert data["max_model_len"] == tokens and data["max_model_len_default"] is True
    assert f'"num_ctx": {tokens}' in data["command"]  # stated: the plan is reproduced whatever the machine


def test_ollama_tiers_at_their_thresholds_and_the_trained_context():
    assert ollama_default_context(22.99 * C.GIB, None)[0] == 4096
    assert ollama_default_context(23 * C.GIB, None)[0] == 32768  # routes.go's 23 GiB, not the docs' 24
    assert ollama_default_context(46.99 * C.GIB, None)[0] == 32768
    assert ollama_default_context(47 * C.GIB, None)[0] == 262144
    assert ollama_default_context(80 * C.GIB, 4096)[0] == 4096  # llm/server.go: at most n_ctx_train


def _fits_with_margin(model, gpu, precision, length, gpu_layers=10**6):
    from catalog import default_catalog
    cat = default_catalog()
    row = serve(__import__("pandas").DataFrame([{"model": model, "gpu": gpu, "engine": "llama.cpp", "precision": precision,
                                                 "max_model_len": length, "gpu_layers": gpu_layers}]),
                cat.models(), cat.gpus()).iloc[0]
    return row["gpu_memory_used_bytes"] + FIT_MARGIN_BYTES <= row["usable_bytes"]


def test_llamacpp_trained_context_else_fit_lowers_it_else_the_minimum_and_layers():
    trained = serve_json("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp")
    assert trained["max_model_len"] == LLAMA31_CONTEXT and "-c 131072" in trained["command"]
    lowered = serve_json("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--precision", "q8_0")
    n = lowered["max_model_len"]
    assert 4096 < n < LLAMA31_CONTEXT and n % 256 == 0 and lowered["gpu_layers"] == lowered["total_layers"] + 1
    assert _fits_with_margin("llama-3.1-8b", "rtx-4090", "q8_0", n)  # the longest that keeps 1 GiB free ...
    assert not _fits_with_margin("llama-3.1-8b", "rtx-4090", "q8_0", n + 256)
    least = serve_json("--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "llama.cpp")
    assert least["max_model_len"] == 4096 and least["gpu_layers"] < least["total_layers"] + 1  # then the layers
    assert "fit_params_min_ctx" in least["max_model_len_source"]


@pytest.mark.parametrize("engine", ["transformers", "mlx-lm"])
def test_engines_without_a_cache_of_their_own_still_need_the_length(engine):
    gpu = "apple-m4-max-128gb" if engine == "mlx-lm" else "rtx-4090"
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", gpu, "--engine", engine)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"--max-model-len is required with --engine {engine}" in err and "preallocates no KV cache" in err
    assert "accepted: --max-model-len N" in err


@pytest.mark.parametrize("engine,flag", [("vllm", "--max-model-len"), ("sglang", "--context-length")])
def test_exports_leave_the_derived_length_out_as_the_command_does(engine, flag):
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", engine, "--export", engine)
    assert code == 0, err
    assert "131,072 tokens per request" in out and flag not in out.splitlines()[-1]
