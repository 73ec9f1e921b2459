"""LitGPT's own LoRA layers under recipe litgpt (engine/components.py `_litgpt_lora_kept`): what its model
keeps for backward beyond transformers + peft, read in Lightning-AI/litgpt (5895df10, 00af8b0d, 2685705)
litgpt/lora.py and model.py, checked here against bytes worked by hand from the shapes and against
benchmarks/check_litgpt_lora_saved.py's trace of LitGPT's real modules; the other recipes unchanged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import engine.constants as C
from engine.components import _layer_activations, _litgpt_lora_kept, scenario_inputs

# Llama 3.2 1B: h 2,048, q width 32 x 64 = 2,048, kv width 8 x 64 = 512, MLP 8,192, 16 layers
H1, QD1, KV1, F1, L1 = 2048, 2048, 512, 8192, 16
# Llama 2 7B: h 4,096, q width 4,096, kv width 4,096 (as many KV heads as heads), MLP 11,008, 32 layers
H7, QD7, KV7, F7, L7 = 4096, 4096, 4096, 11008, 32

LIT = dict(task="train", method="lora", precision="bf16", lora_rank=32, batch=2, seq=512, grad_checkpointing=False,
           recipe="litgpt")


def per_layer(models, **kw) -> float:
    x = scenario_inputs(pd.DataFrame([{**LIT, **kw}]), models)
    return float(_layer_activations(x)[0])


def tiny(models) -> pd.DataFrame:
    """benchmarks/check_litgpt_lora_saved.py's shapes: h 64, 4 heads of 24 (q width 96), MLP 160; 2 query
    groups (GQA, kv width 48) or 4 (MHA, 96)."""
    base = models[models["id"] == "llama-3.2-1b"].copy()
    gqa, mha = base.copy(), base.copy()
    gqa["id"], mha["id"] = "tiny-gqa", "tiny-mha"
    cols = ["hidden_size", "intermediate_size", "num_heads", "num_kv_heads", "head_dim", "num_layers"]
    gqa[cols] = [64, 160, 4, 2, 24, 3]
    mha[cols] = [64, 160, 4, 4, 24, 3]
    return pd.concat([models, gqa, mha], ignore_index=True)


def term(models, **kw) -> float:
    """_litgpt_lora_kept's bytes per token and layer, its arguments as _layer_activations builds them."""
    x = scenario_inputs(pd.DataFrame([{**LIT, **kw}]), models)
    trains = np.where(x.full | x.freeze, 1.0, 0.0)
    adapted = {mod: np.where(x.lora, x.flags[mod], 0.0) for mod in C.LORA_MODULES}
    return float(_litgpt_lora_kept(x, trains, adapted)[0])


# ---- zero_pad keeps lora_B's output where some but not all of q, k, v are adapted -------------------

@pytest.mark.parametrize("model, targets, hand", [
    # q and v: lora_B's bf16 output is q width + v's kv width wide
    ("llama-3.2-1b", "q_proj,v_proj", 2 * (QD1 + KV1)),            # 5,120 B per token and layer
    ("llama-2-7b", "q_proj,v_proj", 2 * (QD7 + KV7)),              # 16,384
    ("llama-3.2-1b", "q_proj", 2 * QD1),
    ("llama-3.2-1b", "k_proj,v_proj", 2 * 2 * KV1),
    # all three: zero_pad returns lora_B's output as it is, index_copy never runs
    ("llama-3.2-1b", "q_proj,k_proj,v_proj", 0),
    ("llama-2-7b", "q_proj,k_proj,v_proj", 0),
])
def test_zero_pad_keeps_lora_b_output(models, model, targets, hand):
    assert term(models, model=model, lora_targets=targets) == hand


def test_zero_pad_in_the_layer(models):
    """Llama 2 7B: q,v keeps zero_pad's 16,384 B per token and layer that q,k,v does not, less k's own
    lora_A output (2 x r = 64 B) that q,k,v keeps more; at the config_hub row's 2 x 512 tokens and 32 layers
    zero_pad's tensors are 536,870,912 bytes."""
    qv = per_layer(models, model="llama-2-7b", lora_targets="q_proj,v_proj")
    qkv = per_layer(models, model="llama-2-7b", lora_targets="q_proj,k_proj,v_proj")
    assert qv - qkv == 16_384 - 2 * 32
    assert 16_384 * L7 * 2 * 512 == 536_870_912


# ---- attention's output copy: kept by proj's lora_A (p = 0), trained weight, or bitsandbytes 0.42 -------

def test_attention_output_copy_kept_by_whatever_saves_proj_input(models):
    seven = dict(model="llama-2-7b", lora_targets="q_proj,k_proj,v_proj")  # no zero_pad
    # o adapted, p = 0: proj's lora_A keeps the 4,096-wide bf16 copy
    assert term(models, **dict(seven, lora_targets="q_proj,k_proj,v_proj,o_proj")) == 2 * QD7
    # with dropout lora_A keeps the dropout's output instead (engine/memory.py): the copy is freed
    assert term(models, **dict(seven, lora_targets="q_proj,k_proj,v_proj,o_proj", lora_dropout=0.05)) == 0.0
    # o not adapted: nothing keeps it ...
    assert term(models, **seven) == 0.0
    # ... unless bitsandbytes 0.42's MatMul4Bit keeps proj's input (ctx.tensors), dropout or not
    for p in (0.0, 0.05):
        assert term(models, **seven, method="qlora", bnb_4bit_input="kept", lora_dropout=p) == 2 * QD7
    assert term(models, **seven, method="qlora", bnb_4bit_input="freed") == 0.0
    # full.py: proj's trained weight keeps its input
    assert term(models, model="llama-2-7b", method="full") == 2 * QD7


# ---- the engine's layer against LitGPT's real modules ---------------------------------------------------

# benchmarks/check_litgpt_lora_saved.py, block 1, bytes per token (the same at 5895df10, 00af8b0d, 2685705)
TRACED = {("tiny-gqa", "q_proj,v_proj", 0.0): 2696, ("tiny-gqa", "all", 0.0): 3088,
          ("tiny-mha", "q_proj,v_proj", 0.0): 3176, ("tiny-mha", "all", 0.0): 3472}


@pytest.mark.parametrize("case", sorted(TRACED))
def test_the_traced_litgpt_block_matches_the_engine(models, case):
    model, targets, p = case
    got = per_layer(tiny(models), model=model, lora_targets=targets, lora_rank=4, lora_dropout=p)
    assert got == TRACED[case]


def test_other_recipes_keep_neither_tensor(models):
    """The same scenarios under the peft-based recipes: no LitGPT model, nothing of this term."""
    for recipe in ("hf", "torchtune", "unsloth", "axolotl"):
        for targets in ("q_proj,v_proj", "all"):
            assert term(models, model="llama-2-7b", recipe=recipe, lora_targets=targets) == 0.0
