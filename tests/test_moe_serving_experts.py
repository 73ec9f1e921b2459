"""Which serving engines hold a mixture of experts' routed experts in 16 bits under a 4- or 8-bit precision
(engine/serving.py HF_FUSED_EXPERTS_16BIT): transformers 5 keeps the experts fused, and its bitsandbytes path (the
engine's nf4, int8 and int4 commands are BitsAndBytesConfig loads) quantizes nn.Linear layers only, so they stay in
the load dtype; vLLM and SGLang quantize them with the rest (their MoE methods). The expert count is worked out here
from the config (catalog/models.yaml), not from engine/serving.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import engine.constants as C
from catalog import default_catalog
from engine import serving as S
from tests.clirun import run_cli

MIXTRAL_EXPERTS = 32 * 8 * 3 * 4096 * 14336  # layers x experts x (w1, w3, w2) x hidden x intermediate


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


def serve(cat, **kw):
    models, gpus = cat
    row = dict(model="mixtral-8x7b", gpu="h100-sxm-80gb", max_model_len=4096)
    row.update(kw)
    return S.serve(pd.DataFrame([row]), models, gpus).iloc[0]


@pytest.mark.parametrize("precision", ["nf4", "int8"])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_vllm_and_sglang_quantize_the_experts(cat, engine, precision):
    """The same checkpoint under transformers holds the experts in 16 bits; vLLM / SGLang at the precision's bits."""
    hf = serve(cat, engine="transformers", precision=precision)
    other = serve(cat, engine=engine, precision=precision, **({"engine_version": "0.10"} if engine == "vllm" else {}))
    bits = C.LINEAR_BITS[precision]
    assert hf["weights_bytes"] - other["weights_bytes"] == pytest.approx(MIXTRAL_EXPERTS * (2.0 - bits / 8), rel=1e-9)
    assert other["expert_bytes"] == pytest.approx(MIXTRAL_EXPERTS * bits / 8, rel=1e-9)
    assert hf["expert_bytes"] == pytest.approx(MIXTRAL_EXPERTS * 2.0, rel=1e-9)


def test_transformers_int4_holds_the_experts_in_16_bits(cat):
    """transformers' int4 (bitsandbytes FP4, the command it writes) was counted with 4.25-bit experts: 15.6 GiB of
    Mixtral's 84 GiB of experts. It holds all 84 GiB (85.2 GiB of weights, against 23.5 GiB under vLLM)."""
    hf = serve(cat, engine="transformers", precision="int4", gpu="rtx-4090")
    vllm = serve(cat, engine="vllm", precision="int4", gpu="rtx-4090")
    assert "BitsAndBytesConfig(load_in_4bit=True" in hf["command"]
    assert hf["weights_bytes"] - vllm["weights_bytes"] == pytest.approx(
        MIXTRAL_EXPERTS * (2.0 - C.LINEAR_BITS["int4"] / 8), rel=1e-9)
    assert hf["expert_bytes"] == MIXTRAL_EXPERTS * 2.0
    assert not hf["fits"] and hf["weights_bytes"] > 80 * 2**30


def test_a_dense_model_is_the_same_under_every_engine(cat):
    for precision in ("nf4", "int8", "int4"):
        hf = serve(cat, model="llama-3.1-8b", engine="transformers", precision=precision)
        vllm = serve(cat, model="llama-3.1-8b", engine="vllm", precision=precision, engine_version="0.10")
        assert hf["weights_bytes"] == vllm["weights_bytes"] and hf["expert_bytes"] == 0


def test_the_text_says_why():
    code, out, err = run_cli("serve", "--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--engine", "transformers",
                             "--precision", "nf4", "--max-model-len", "4096")
    assert code == 0, err
    assert "routed experts 84.00 GiB in 16 bits: transformers keeps them fused" in out
    code, out, err = run_cli("serve", "--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--engine", "transformers",
                             "--precision", "int4", "--max-model-len", "4096", "--json")
    assert code == 0, err
    assert json.loads(out)["expert_bytes"] == MIXTRAL_EXPERTS * 2


def test_transformers_llama4_prefill_runs_every_expert_on_every_token(cat):
    """transformers' Llama4TextMoe repeats each token for all E experts (engine/constants.py DENSE_EXPERTS_MODEL_TYPES):
    its prefill holds E x (h + 4 fe) 16-bit values a token at the experts' largest moment, spread over the GPUs as
    the rest of the working set is (it was counted at the routed expert's width: 0.53 GiB a GPU here, now 2.63)."""
    E, h, fe, ctx, gpus = 16, 5120, 8192, 8192, 4  # Llama 4 Scout (catalog/models.yaml)
    hf = serve(cat, model="llama-4-scout", engine="transformers", precision="bf16", max_model_len=ctx, gpus=gpus)
    experts = ctx * 2 * E * (h + 4 * fe) / gpus
    assert experts <= hf["activation_peak_bytes"] <= experts * 1.2
