"""bitsandbytes' training paths (issue 27 item 4), from bitsandbytes' source (autograd/_functions.py
at 95f9af3): what MatMul4Bit / MatMul8bitLt keep for backward and the dequantized weight of a
matmul. Expected figures are worked out here from Llama 2 7B's config, not by the engine."""

import pandas as pd
import pytest

from engine import estimate
from engine.components import scenario_inputs, totals, workspace

L, H, F = 32, 4096, 11008  # Llama 2 7B
QLORA = dict(model="llama-2-7b", task="train", method="qlora", batch=4, seq=1024)


def run(models, *rows):
    return [r for _i, r in estimate(pd.DataFrame(list(rows)), models).iterrows()]


def test_bitsandbytes_before_0_43_2_kept_every_4bit_linears_input(models):
    """QLoRA under the hf recipe (peft's kbit prep: an fp32 residual, bf16 autocast): each of q, k, v,
    gate and up keeps its own 16-bit copy of its input (x.to(compute_dtype)), and the frozen down
    projection keeps the SiLU product: per layer and token 5 x 2h + 2f bytes."""
    freed, kept = run(models, dict(QLORA, bnb_4bit_input="freed"), dict(QLORA, bnb_4bit_input="kept"))
    per_token = L * (5 * 2 * H + 2 * F)
    assert kept.activations_bytes - freed.activations_bytes == pytest.approx(per_token * 4 * 1024, rel=1e-12)
    assert freed.bnb_4bit_input == "freed"  # the recipes' default: bitsandbytes >= 0.43.2


def test_llm_int8_bases_keep_their_inputs_in_every_version(models):
    int8, bf16 = run(models, dict(QLORA, method="lora", base_precision="int8"),
                     dict(QLORA, method="lora", base_precision="bf16"))
    # a LoRA over a 16-bit base keeps only what the adapters need; LLM.int8's matmuls keep theirs too
    assert int8.activations_bytes > bf16.activations_bytes


def test_a_bitsandbytes_base_dequantizes_one_whole_weight_in_backward(models):
    frame = pd.DataFrame([QLORA, dict(QLORA, method="lora", base_precision="bf16")])
    x = scenario_inputs(frame, models)
    back = workspace(x, totals(x))["backward"].fixed
    assert back[0] == 2 * H * F and back[1] == 0
