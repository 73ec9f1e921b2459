"""What `serve` plans and the command it prints, against the engines' own sources: llama.cpp's quantized KV cache in
ggml's blocks, the KV cache types vLLM and SGLang have, and the printed command ("run it", `--json` command)
launching the plan the export (planner/exports.py serve_export) launches, flag for flag.

Expected values are computed here from the published configs (catalog/models.yaml) and the sources
engine/serving.py cites, not read back from its columns."""

from __future__ import annotations


import pandas as pd
import pytest

from catalog import default_catalog
from engine import serving as S

# Llama 3.1 8B: 32 layers, 8 KV heads of 128: K and V values a token
LLAMA31_8B_KV_VALUES = 2 * 32 * 8 * 128


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


def rows(cat, *requests):
    models, gpus = cat
    return S.serve(pd.DataFrame(list(requests)), models, gpus)


# --- llama.cpp / Ollama: a quantized cache in ggml blocks ---------------------------------------------

def test_llamacpp_quantized_cache_takes_ggml_block_bytes(cat):
    """ggml/src/ggml-common.h: block_q8_0 is an fp16 scale and 32 int8 values (34 bytes per 32), block_q4_0 an fp16
    scale and 16 bytes of 4-bit values (18 bytes per 32); llama.cpp's K and V tensors are rows of those blocks. fp8 is
    written as q8_0 (llama.cpp has none). ExLlamaV2's Q8/Q4 cache has the same layout; vLLM's fp8 is 1 byte a value."""
    base = dict(model="llama-3.1-8b", gpu="rtx-4090", max_model_len=8192)
    asked = [("llama.cpp", "q4_k_m", kv) for kv in ("auto", "int8", "int4", "fp8", "fp32")]
    asked += [("ollama", "q4_k_m", "int8"), ("ollama", "q4_k_m", "int4"), ("exllamav2", "exl2-4.0", "int8"),
              ("exllamav2", "exl2-4.0", "int4"), ("vllm", "bf16", "fp8")]
    out = rows(cat, *({**base, "engine": e, "precision": p, "kv_precision": kv} for e, p, kv in asked))
    got = dict(zip(((e, kv) for e, _, kv in asked), out["kv_bytes_per_token"]))
    values = LLAMA31_8B_KV_VALUES
    assert got[("llama.cpp", "auto")] == values * 2  # f16
    assert got[("llama.cpp", "int8")] == got[("llama.cpp", "fp8")] == values * 34 / 32 == 69632
    assert got[("llama.cpp", "int4")] == values * 18 / 32 == 36864
    assert got[("llama.cpp", "fp32")] == values * 4  # f32, no blocks
    assert got[("ollama", "int8")] == values * 34 / 32 and got[("ollama", "int4")] == values * 18 / 32
    assert got[("exllamav2", "int8")] == values * 34 / 32 and got[("exllamav2", "int4")] == values * 18 / 32
    assert got[("vllm", "fp8")] == values * 1  # vLLM's fp8 cache: one byte a value, unchanged
    # llama-server's context of one 8,192-token slot, every layer on the GPU, at those bytes
    q8 = out.iloc[1]
    assert q8.gpu_layers == 33 and q8.kv_cache_bytes_available == values * 34 / 32 * 8192


def test_llamacpp_quantized_cache_leaves_a_linear_attention_state_in_its_dtype(cat):
    """Qwen3-Next under llama.cpp: 12 full-attention layers keep K and V (2 KV heads of 256), 36 Gated DeltaNet
    layers a state per sequence in their own dtype. -ctk q8_0 quantizes the K/V values only."""
    base = dict(model="qwen3-next-80b-a3b", gpu="h100-sxm-80gb", engine="llama.cpp", precision="q4_k_m",
                max_model_len=4096)
    f16, q8, q4 = (r for _, r in rows(cat, *({**base, "kv_precision": kv} for kv in ("fp16", "int8", "int4"))).iterrows())
    values = 2 * 12 * 2 * 256  # K and V values a token
    state = f16.kv_bytes_per_token - values * 2
    assert state > 0
    assert q8.kv_bytes_per_token == pytest.approx(state + values * 34 / 32, rel=1e-12)
    assert q4.kv_bytes_per_token == pytest.approx(state + values * 18 / 32, rel=1e-12)
