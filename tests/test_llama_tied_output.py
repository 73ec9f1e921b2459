"""llama.cpp's output layer of a tied-embedding model is a second copy of token_embd on the GPU.

src/llama-model.cpp: `output = create_tensor(tn(LLM_TENSOR_OUTPUT, "weight"), ..., TENSOR_NOT_REQUIRED)`; where the file
has none (tied embeddings), `output = create_tensor(tn(LLM_TENSOR_TOKEN_EMBD, "weight"), ..., TENSOR_DUPLICATED)`
("duplicated to allow offloading"): the output layer offloaded with -ngl holds its own copy, token_embd stays on the
host. src/llama-quant.cpp stores that tensor at the output type: Q8_0 in Q8_0 and MXFP4_MOE files, else Q6_K (6.5625
bits: 210 bytes a 256-value block). Two published loads of Q4_K_M files print a CUDA0 model buffer of 1,918.36 MiB
(Llama-3.2-3B) and 2,375.91 MiB (Qwen3-4B); without the copy the plan was 14% and 11% under them. The shapes are the
catalog's (catalog/models.yaml, from each config.json); the bytes are computed here."""

from __future__ import annotations

import pandas as pd
import pytest

from catalog import default_catalog
from engine.constants import GGUF_BITS
from engine.serving import serve


def _one(model: str, precision: str, **extra) -> pd.Series:
    cat = default_catalog()
    ask = dict(model=model, gpu="rtx-4090", engine="llama.cpp", precision=precision, max_model_len=2048, **extra)
    return serve(pd.DataFrame([ask]), cat.models(), cat.gpus()).iloc[0]


def _shape(model: str) -> dict:
    return default_catalog().models().set_index("id").loc[model].to_dict()


@pytest.mark.parametrize("model, precision, output_bits", [("llama-3.2-3b", "q4_k_m", 6.5625), ("qwen3-4b", "q4_k_m", 6.5625),
                                                           ("llama-3.2-1b", "q8_0", 8.5), ("qwen3-4b", "q3_k_m", 6.5625)])
def test_a_tied_models_output_layer_is_a_copy_of_token_embd_at_the_output_type(model, precision, output_bits):
    s = _shape(model)
    assert s["tied_embeddings"]
    r = _one(model, precision)
    assert r["gpu_layers"] > r["total_layers"]  # every layer and the output layer offloaded
    vocab_x_hidden = s["vocab_size"] * s["hidden_size"]
    token_embd = vocab_x_hidden * GGUF_BITS[precision] / 8  # on the host (the input layer), at the file's mean bits
    copy = vocab_x_hidden * output_bits / 8
    assert r["weights_gpu_bytes"] == pytest.approx(r["weights_bytes"] - token_embd + copy, rel=1e-12)
    # on the host: token_embd once (the copy is on the GPU)
    assert r["host_ram_bytes"] == pytest.approx(token_embd, rel=1e-9)


@pytest.mark.parametrize("model, logged_mib", [("llama-3.2-3b", 1918.36), ("qwen3-4b", 2375.91)])
def test_the_published_model_buffers_of_tied_q4_k_m_files(model, logged_mib):
    planned = _one(model, "q4_k_m")["weights_gpu_bytes"] / 2**20
    assert 0 <= planned / logged_mib - 1 < 0.03  # +1.8% and +2.0% (the copy left out: -14.3% and -10.8%)


def test_an_untied_model_keeps_one_output_layer():
    s = _shape("qwen2.5-7b")
    assert not s["tied_embeddings"]
    r = _one("qwen2.5-7b", "q4_k_m")
    token_embd = s["vocab_size"] * s["hidden_size"] * GGUF_BITS["q4_k_m"] / 8
    assert r["weights_gpu_bytes"] == pytest.approx(r["weights_bytes"] - token_embd, rel=1e-12)


def test_a_tied_output_left_on_the_host_is_the_mapped_file_not_a_second_copy():
    """-ngl 0: every layer and the output layer on the host, where the duplicated output maps the file's token_embd
    bytes again (llama-model-loader: a CPU buffer of a mapped file points into the mapping): the file once, and the
    layers' K/V (src/llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers, the output layer the first offloaded)."""
    r = _one("llama-3.2-3b", "q4_k_m", gpu_layers=0)
    assert r["gpu_layers"] == 0 and r["weights_gpu_bytes"] == 0
    s = _shape("llama-3.2-3b")
    kv_on_host = s["num_layers"] * 2 * s["num_kv_heads"] * s["head_dim"] * 2 * 2048  # K and V, f16, -c 2048
    assert r["host_ram_bytes"] == pytest.approx(r["weights_bytes"] + kv_on_host, rel=1e-9)
