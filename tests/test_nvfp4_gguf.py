"""llama.cpp's NVFP4 file type (LLAMA_FTYPE_MOSTLY_NVFP4 = 39) as the GGUF precision nvfp4_gguf (issue 27: NVFP4 "where a
source gives its layout"). The published NVFP4 GGUFs are convert_hf_to_gguf.py's imports of ModelOpt / compressed-tensors
checkpoints (ggml-org/llama.cpp 0024aa74): the decoder linears repacked as GGML NVFP4 (block_nvfp4: 64 values in 4 UE4M3
scales and 32 bytes of e2m1, 36 bytes, 4.5 bits), token_embd, output and the norms in the --outtype (BF16 by default).
`--precision nvfp4` under llama.cpp is that type, as `mxfp4` is MXFP4_MOE; under vLLM it stays the checkpoint; Ollama's
GGML runner does not load it (ollama/ollama#16056). Figures from the catalog's shapes and those bits."""

from __future__ import annotations

import pandas as pd
import pytest

from catalog import default_catalog
from catalog.checkpoints import GGUF_FILE_TYPE
from engine.serving import serve
from planner.ingest import LCPP_FTYPES
from tests.clirun import run_cli

NVFP4_BITS = 36 * 8 / 64


def _one(model: str, precision: str, engine: str = "llama.cpp") -> pd.Series:
    cat = default_catalog()
    ask = dict(model=model, gpu="rtx-4090", engine=engine, precision=precision, max_model_len=2048)
    return serve(pd.DataFrame([ask]), cat.models(), cat.gpus()).iloc[0]


def _linears(s) -> float:
    """A dense Llama's decoder linears: q and o h x heads x d, k and v h x kv heads x d, gate, up, down h x f."""
    qd, kvd = s["num_heads"] * s["head_dim"], s["num_kv_heads"] * s["head_dim"]
    return s["num_layers"] * (2 * s["hidden_size"] * qd + 2 * s["hidden_size"] * kvd + 3 * s["hidden_size"] * s["intermediate_size"])


def test_nvfp4_under_llama_cpp_is_the_converted_layout():
    s = default_catalog().models().set_index("id").loc["llama-3.2-3b"]
    r = _one("llama-3.2-3b", "nvfp4")
    assert r["precision"] == "nvfp4_gguf"
    lin = _linears(s)
    assert r["weights_bytes"] == pytest.approx(lin * NVFP4_BITS / 8 + (s["params"] - lin) * 2, rel=1e-12)
    # a tied model: token_embd on the host, its output copy on the GPU, both BF16: the GPU holds the whole file
    assert r["weights_gpu_bytes"] == pytest.approx(r["weights_bytes"], rel=1e-12)


def test_the_published_llama_bench_size_of_a_llama_3_1_8b_nvfp4_file():
    """Thireus/GGUF-Tool-Suite#77 (2026-04-24): llama-bench prints `llama 8B NVFP4 | 5.61 GiB | 8.03 B` (its
    llama_model_size, the tensors' bytes); the all-NVFP4 layout (4.5 bits everywhere) was 4.21 GiB, -25%."""
    r = _one("llama-3.1-8b", "nvfp4")
    assert r["weights_bytes"] / 2**30 == pytest.approx(5.61, abs=0.01)


def test_vllm_keeps_its_own_nvfp4_and_ollama_does_not_load_the_file():
    assert _one("llama-3.1-8b", "nvfp4", engine="vllm")["precision"] == "nvfp4"
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--engine", "ollama", "--precision", "nvfp4",
                             "--gpu", "rtx-5090")
    assert code == 2 and out == ""
    assert "'nvfp4_gguf'" in err and "ollama/ollama#16056" in err and "q4_k_m" in err and "Traceback" not in err


def test_the_file_type_and_the_load_logs_name():
    assert GGUF_FILE_TYPE[39] == "nvfp4_gguf"
    assert LCPP_FTYPES["nvfp4"] == "nvfp4_gguf"


def test_serve_cli_plans_it_and_names_the_file():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--engine", "llama.cpp", "--precision", "nvfp4",
                             "--gpu", "rtx-5090")
    assert code == 0, err
    assert "(nvfp4_gguf," in out and "NVFP4_GGUF.gguf" in out
