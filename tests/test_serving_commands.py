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


# --- vLLM and SGLang: the KV cache types they have ------------------------------------------------------

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("kv", ["int8", "int4", "fp32"])
def test_vllm_and_sglang_refuse_a_kv_cache_they_do_not_have(cat, engine, kv):
    """vLLM's --kv-cache-dtype (vllm/config/cache.py CacheDType: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...)
    and SGLang's (server_args.py: auto, fp8_e5m2, fp8_e4m3, bf16) have no int8 or int4 cache of 1 or 0.5 bytes a value,
    and fp32 only as the model's own dtype: planned on one, the plan counted bytes the engine never allocates."""
    with pytest.raises(ValueError, match=rf"kv_precision '{kv}' is not accepted for {engine}; accepted: auto, fp16, "
                                         r"bf16, fp8 \(its --kv-cache-dtype"):
        rows(cat, dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine=engine, precision="bf16", max_model_len=8192,
                       kv_precision=kv))


def test_vllm_and_sglang_plan_the_kv_caches_they_have(cat):
    kvs = ("auto", "fp16", "bf16", "fp8")
    out = rows(cat, *(dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine=e, precision="bf16", max_model_len=8192,
                           kv_precision=kv) for e in ("vllm", "sglang") for kv in kvs))
    per_token = dict(zip(((e, kv) for e in ("vllm", "sglang") for kv in kvs), out["kv_bytes_per_token"]))
    for e in ("vllm", "sglang"):
        assert per_token[(e, "auto")] == per_token[(e, "fp16")] == per_token[(e, "bf16")] == LLAMA31_8B_KV_VALUES * 2
        assert per_token[(e, "fp8")] == LLAMA31_8B_KV_VALUES


def test_serve_exits_2_naming_the_kv_type_and_the_accepted_ones():
    from tests.clirun import run_cli
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                             "--max-model-len", "8192", "--kv-precision", "int8")
    assert code == 2 and out == ""
    assert "'int8' is not accepted for vllm; accepted: auto, fp16, bf16, fp8" in err and len(err.splitlines()) == 1


def test_a_search_over_engines_leaves_out_the_kv_cache_an_engine_does_not_have(cat):
    """cheapest with an int8 KV cache over vLLM, SGLang and llama.cpp: vLLM and SGLang have none, so their rows are
    left out (engine/serving.py kv_refused), as a weight format an engine does not run is (formats_refused); the
    llama.cpp rows still answer, on its q8_0 cache."""
    from planner.serving import cheapest
    models, gpus = cat
    out = cheapest("llama-3.1-8b", 4, 8192, 10.0, 5.0, models, gpus, engines=("vllm", "sglang", "llama.cpp"),
                   precisions=("bf16", "q4_k_m"), gpu_ids=["rtx-4090", "h100-sxm-80gb"], kv_precision="int8")
    assert len(out) and set(out["engine"]) == {"llama.cpp"}
    assert (out["kv_bytes_per_token"] * out["gpus"] == LLAMA31_8B_KV_VALUES * 34 / 32).all()  # (per GPU)
    fp8 = cheapest("llama-3.1-8b", 4, 8192, 10.0, 5.0, models, gpus, engines=("vllm", "sglang", "llama.cpp"),
                   precisions=("bf16", "q4_k_m"), gpu_ids=["rtx-4090", "h100-sxm-80gb"], kv_precision="fp8")
    assert set(fp8["engine"]) == {"vllm", "sglang", "llama.cpp"}  # a type every one of them has
    req = pd.DataFrame({"engine": ["vllm", "sglang", "llama.cpp", "llama.cpp", "ollama", "ollama", "mlc-llm", "exllamav2",
                                   "exllamav2"],
                        "kv_precision": ["int4", "fp8", "int4", "fp32", "int8", "fp32", "int8", "int4", "fp32"]})
    assert S.kv_refused(req).tolist() == [True, False, False, False, False, True, True, False, True]


def test_ollama_refuses_an_fp32_cache(cat):
    """OLLAMA_KV_CACHE_TYPE is f16, q8_0 or q4_0: an fp32 plan counted 4 bytes a value where Ollama runs 2."""
    with pytest.raises(ValueError, match=r"kv_precision 'fp32' is not accepted for ollama; accepted: auto, fp16, bf16, "
                                         r"fp8, int8, int4 \(its OLLAMA_KV_CACHE_TYPE: f16, q8_0, q4_0"):
        rows(cat, dict(model="llama-3.1-8b", gpu="rtx-4090", engine="ollama", precision="q4_k_m", max_model_len=8192,
                       kv_precision="fp32"))
