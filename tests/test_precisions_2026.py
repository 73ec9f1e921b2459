"""Checkpoints as 2026 stores them (issue 27 item 1): fp8, nvfp4 and mxfp4 weights, and llama.cpp's
MXFP4_MOE file type. Every expected figure is worked out here from the model's config numbers
and the formats' layouts (engine/constants.py cites them), not by the engine."""

import pandas as pd
import pytest

from catalog import default_catalog
from engine import estimate
from engine.compat import check

# Llama 3.1 8B: 32 layers, h 4096, 32 heads, 8 KV heads of 128, MLP 14336, vocabulary 128256, untied
L8, H8, F8, KV8, V8 = 32, 4096, 14336, 8 * 128, 128256
LINEAR_8B = L8 * (2 * H8 * H8 + 2 * H8 * KV8 + 3 * H8 * F8)  # q, o, k, v, gate, up, down
N_8B = 8_030_261_248
REST_8B = N_8B - LINEAR_8B                                    # embeddings, lm_head, norms: 16-bit

# gpt-oss-20b: 24 layers, 32 experts of width 2880 on h 2880 (gate, up, down = 3 matrices each)
EXPERT_MATRICES_20B = 24 * 32 * 3 * 2880 * 2880
N_20B = 20_914_757_184


def one(models, **scenario):
    return estimate(pd.DataFrame([{**dict(task="infer", batch=1, seq=64), **scenario}]), models).iloc[0]


@pytest.mark.parametrize("precision, bits", [
    ("fp8", 8 + 32 / (128 * 128)),   # e4m3 + an fp32 scale per 128 x 128 block
    ("nvfp4", 4 + 8 / 16),           # e2m1 + an e4m3 scale per 16 values
    ("mxfp4", 4 + 8 / 32),           # e2m1 + an e8m0 scale per 32 values (a dense model: every linear)
])
def test_dense_weights_at_the_new_precisions(models, precision, bits):
    assert LINEAR_8B + REST_8B == N_8B
    row = one(models, model="llama-3.1-8b", precision=precision)
    assert row.weights_bytes == pytest.approx(LINEAR_8B * bits / 8 + REST_8B * 2, rel=1e-12)


def test_gpt_oss_mxfp4_quantizes_only_the_experts(models):
    """gpt-oss's quantization_config keeps attention, the router, the embeddings and lm_head in
    bf16: 19.1B expert values at 4.25 bits and 1.8B at 16 make 13.76 GB (the checkpoint's
    safetensors; llama.cpp's bf16 conversion of it, MXFP4 experts kept, writes 13.8G)."""
    rest = N_20B - EXPERT_MATRICES_20B
    expected = EXPERT_MATRICES_20B * 4.25 / 8 + rest * 2
    row = one(models, model="gpt-oss-20b", precision="mxfp4")
    assert row.weights_bytes == pytest.approx(expected, rel=1e-12)
    assert round(expected / 1e9, 2) == 13.76
    # all linear layers at 4.25 bits would be wrong by the attention and router share
    assert one(models, model="gpt-oss-20b", precision="bf16").weights_bytes == 2 * N_20B


def test_gguf_mxfp4_moe_is_mxfp4_experts_and_q8_0_for_the_rest(models):
    """llama-quant.cpp: 'MoE tensors -> MXFP4, other tensors -> Q8_0' (8.5 bits: 32 values in 34
    bytes); a dense model in that file type is all Q8_0."""
    expected = EXPERT_MATRICES_20B * 4.25 / 8 + (N_20B - EXPERT_MATRICES_20B) * 8.5 / 8
    assert one(models, model="gpt-oss-20b", precision="mxfp4_moe").weights_bytes == pytest.approx(expected, rel=1e-12)
    assert one(models, model="llama-3.1-8b", precision="mxfp4_moe").weights_bytes == pytest.approx(N_8B * 8.5 / 8,
                                                                                                 rel=1e-12)


@pytest.mark.parametrize("engine", ["llama.cpp", "ollama"])
def test_mxfp4_under_llama_cpp_is_its_mxfp4_moe_file_type(engine):
    """llama.cpp writes MXFP4 only as the MXFP4_MOE file type (llama-quantize's QUANT_OPTIONS): `--precision mxfp4`
    under llama.cpp / Ollama was refused ('accepted: ... mxfp4_moe') and is now that type, the same plan as asking
    mxfp4_moe; vLLM keeps mxfp4 as the checkpoint stores it."""
    from engine.serving import serve
    cat = default_catalog()
    ask = dict(model="gpt-oss-20b", gpu="rtx-4090", max_model_len=8192)
    alias = serve(pd.DataFrame([dict(ask, engine=engine, precision="mxfp4")]), cat.models(), cat.gpus()).iloc[0]
    named = serve(pd.DataFrame([dict(ask, engine=engine, precision="mxfp4_moe")]), cat.models(), cat.gpus()).iloc[0]
    assert alias["precision"] == "mxfp4_moe"
    expected = EXPERT_MATRICES_20B * 4.25 / 8 + (N_20B - EXPERT_MATRICES_20B) * 8.5 / 8
    assert alias["weights_bytes"] == named["weights_bytes"] == pytest.approx(expected, rel=1e-12)
    vllm = serve(pd.DataFrame([dict(ask, engine="vllm", precision="mxfp4")]), cat.models(), cat.gpus()).iloc[0]
    assert vllm["precision"] == "mxfp4"


def test_mxfp4_under_llama_cpp_on_the_command_line(capsys):
    from planner.cli import main
    rc = main(["serve", "--model", "gpt-oss-20b", "--engine", "llama.cpp", "--precision", "mxfp4", "--gpu", "rtx-4090",
               "--max-model-len", "8192"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "(mxfp4_moe," in out and "gpt-oss-20b-MXFP4_MOE.gguf" in out


def test_the_new_precisions_are_refused_for_training_and_named(models):
    with pytest.raises(ValueError, match="mxfp4"):
        estimate(pd.DataFrame([dict(model="llama-3.1-8b", task="train", method="full", precision="mxfp4")]), models)


@pytest.mark.parametrize("gpu, precision, compatible, fragment", [
    ("v100-32gb", "fp8", False, "FP8 Marlin from 7.5"),
    ("rtx-3090", "fp8", True, "weight-only W8A16"),
    ("h100-sxm-80gb", "fp8", True, None),
    ("rtx-3090", "mxfp4", True, "no FP4 tensor cores before Blackwell"),
    ("v100-32gb", "nvfp4", False, "need Ampere"),
])
def test_compatibility_rules_of_the_new_precisions(gpu, precision, compatible, fragment):
    cat = default_catalog()
    frame = pd.DataFrame({"gpu": [gpu], "precision": [precision], "task": ["infer"], "gpus": [1]})
    out = check(frame, cat.gpus(), cat.compatibility())
    assert bool(out["compatible"].iloc[0]) is compatible
    notes = " ".join(out["compatibility_notes"].iloc[0])
    if fragment is None:
        assert "FP8" not in notes and "FP4" not in notes
    else:
        assert fragment in notes


def test_transformers_tuple_cache_holds_two_caches_at_the_last_decode_step(models):
    """transformers < 4.36 (decode_cache tuple): generate's model_kwargs keep the previous step's
    tuple while the forward builds the new one: Llama 2 13B, 16 x 1,024 tokens, fp16 K and V of
    40 layers x 5,120 wide = 819,200 bytes per token, twice."""
    per_token = 2 * 40 * 5120 * 2
    rows = {cache: one(models, model="llama-2-13b", precision="fp16", batch=16, seq=1024, prefill_logits="all",
                       decode_cache=cache) for cache in ("dynamic", "tuple")}
    assert rows["dynamic"].kv_cache_bytes == per_token * 16 * 1024
    assert rows["tuple"].kv_cache_bytes == 2 * per_token * 16 * 1024
    assert rows["tuple"].peak_bytes > rows["dynamic"].peak_bytes
