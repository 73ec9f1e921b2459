"""Models a user brings in 2025-2026 that the shipped catalog does not hold (DeepSeek-V3.1, Kimi K2, ...), read
from their config.json, safetensors headers or GGUF files: what the architecture gives, what the files store, and
how the engines hold them. Each fixture is built here, in tmp_path, with the real checkpoints' tensor names; the
published figures are in each test's docstring."""

from __future__ import annotations

import pandas as pd
import pytest

from catalog import default_catalog
from engine import serving as S


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_mla_latent_is_held_whole_by_every_tensor_parallel_rank(cat, engine):
    """DeepSeek-V3's KV cache is MLA's latent, (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 bytes = 70,272
    bytes a token (DeepSeek-V3 report, 2.1.1), and vLLM and SGLang keep one 576-wide "head" of it on every
    tensor-parallel rank (vLLM ModelConfig.get_num_kv_heads returns 1 for MLA): at TP 8 each GPU holds the whole
    latent of every request, so the requests that fit are the pool of one GPU over 70,272 bytes a token, not eight
    times that (it was split by the 128 query heads, as if it were grouped-query K/V)."""
    models, gpus = cat
    req = dict(model="deepseek-v3", gpu="h200-sxm-141gb", gpus=8, engine=engine, precision="fp8", max_model_len=32768)
    out = S.serve(pd.DataFrame([req]), models, gpus).iloc[0]
    assert out["kv_policy"] == "latent"
    assert out["kv_bytes_per_token"] == 61 * (512 + 64) * 2
    assert out["max_concurrency"] == pytest.approx(out["kv_cache_bytes_available"] / (70_272 * 32768), rel=0.01)
    assert out["max_concurrency"] < 25  # 43.8 GiB a GPU / 2.3 GB a request (it said 163.5 under vLLM)
