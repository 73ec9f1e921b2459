"""llama.cpp's NVFP4 file type (LLAMA_FTYPE_MOSTLY_NVFP4 = 39) as the GGUF precision nvfp4_gguf (issue 27: NVFP4 "where a
source gives its layout"). ggml's block_nvfp4 holds 64 values in 4 UE4M3 scales and 32 bytes of e2m1: 36 bytes, 4.5 bits
a weight; src/llama-quant.cpp (007dbbf3) gives every weight matrix that type and the output tensor (a tied model's
token_embd copy) Q6_K, 210 bytes a 256-value block. `--precision nvfp4` under llama.cpp / Ollama is that type, as
`mxfp4` is MXFP4_MOE; under vLLM it stays ModelOpt's checkpoint. Figures from the catalog's shapes and those bits."""

from __future__ import annotations

import pandas as pd
import pytest

from catalog import default_catalog
from catalog.checkpoints import GGUF_FILE_TYPE
from engine.serving import serve
from planner.ingest import LCPP_FTYPES
from tests.clirun import run_cli

NVFP4_BITS = 36 * 8 / 64
Q6_K_BITS = 210 * 8 / 256


def _one(model: str, precision: str, engine: str = "llama.cpp") -> pd.Series:
    cat = default_catalog()
    ask = dict(model=model, gpu="rtx-4090", engine=engine, precision=precision, max_model_len=2048)
    return serve(pd.DataFrame([ask]), cat.models(), cat.gpus()).iloc[0]


def test_nvfp4_under_llama_cpp_is_the_gguf_type_at_4_5_bits():
    shape = default_catalog().models().set_index("id").loc["llama-3.2-3b"]
    r = _one("llama-3.2-3b", "nvfp4")
    assert r["precision"] == "nvfp4_gguf"
    assert r["weights_bytes"] == pytest.approx(shape["params"] * NVFP4_BITS / 8, rel=1e-12)
    # a tied model: token_embd on the host, its output copy on the GPU at Q6_K (hidden 3,072: whole 256-blocks)
    vh = shape["vocab_size"] * shape["hidden_size"]
    assert r["weights_gpu_bytes"] == pytest.approx(r["weights_bytes"] - vh * NVFP4_BITS / 8 + vh * Q6_K_BITS / 8, rel=1e-12)


def test_vllm_keeps_its_own_nvfp4():
    r = _one("llama-3.1-8b", "nvfp4", engine="vllm")
    assert r["precision"] == "nvfp4"


def test_the_file_type_and_the_load_logs_name():
    assert GGUF_FILE_TYPE[39] == "nvfp4_gguf"
    assert LCPP_FTYPES["nvfp4"] == "nvfp4_gguf"


def test_serve_cli_plans_it_and_names_the_file():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--engine", "llama.cpp", "--precision", "nvfp4",
                             "--gpu", "rtx-5090")
    assert code == 0, err
    assert "(nvfp4_gguf," in out and "NVFP4_GGUF.gguf" in out
