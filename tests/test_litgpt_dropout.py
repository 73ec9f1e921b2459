"""LitGPT's own LoRA layers under recipe litgpt: what its model keeps for backward beyond transformers +
peft (engine/components.py `_litgpt_lora_kept`) and its LoRA dropout, one for q, k and v together
(engine/memory.py layer_activation_bytes `fused_qkv`), read in Lightning-AI/litgpt (5895df10, 00af8b0d,
2685705) litgpt/lora.py and model.py, checked here against bytes worked by hand from the shapes and
against benchmarks/check_litgpt_lora_saved.py's trace of LitGPT's real modules; the peft-based recipes'
dropout term unchanged (their peaks pinned at main 2171f3a)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import engine.constants as C
from engine import estimate
from engine.components import (COMPONENT_FUNCTIONS, _layer_activations, _litgpt_lora_kept,
                               first_layer_unsaved_masks, scenario_inputs, totals)

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
          ("tiny-mha", "q_proj,v_proj", 0.0): 3176, ("tiny-mha", "all", 0.0): 3472,
          ("tiny-gqa", "q_proj,v_proj", 0.1): 2760, ("tiny-gqa", "all", 0.1): 3664,
          ("tiny-mha", "q_proj,v_proj", 0.1): 3240, ("tiny-mha", "all", 0.1): 4048}


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


# ---- LoRA dropout: one for q, k and v (LoRAQKVLinear), one per LoRALinear ------------------------------

def added(models, recipe="litgpt", **kw) -> float:
    """Bytes per token and layer that lora_dropout 0.05 adds to what one decoder layer saves."""
    return per_layer(models, recipe=recipe, lora_dropout=0.05, **kw) - per_layer(models, recipe=recipe, **kw)


def as_peft(**kw) -> dict:
    """The same scenario under recipe hf (transformers + peft) with the litgpt recipe's switch values where
    they bear on the layer: bf16 adapters, no kbit_prep."""
    return dict(kw, recipe="hf", adapter_dtype="bf16", kbit_prep="off")


QLORA_042 = dict(method="qlora", bnb_4bit_input="kept")  # bitsandbytes 0.42.0, pinned by LitGPT until 2024-12


@pytest.mark.parametrize("kw, lit, peft", [
    # q,v: LitGPT's one dropout on the fused qkv input: its bf16 output (2 h) replaces the input lora_A kept
    # (2 h), and one bool mask (1 h): +1 h.  peft: q and v each their own output and mask, -2h + 2 x 3h = 4 h
    (dict(model="llama-3.2-1b", lora_targets="q_proj,v_proj"), H1, 4 * H1),                     # 2,048 / 8,192
    (dict(model="llama-2-7b", lora_targets="q_proj,v_proj"), H7, 4 * H7),                       # 4,096 / 16,384
    # all seven: q,k,v +1 h (peft +7 h); o: the dropout's output and mask (3 qd) where lora_A kept the
    # attention output's copy (2 qd; peft: SDPA's own output, kept anyway: +3 qd); fc_1, fc_2 (gate, up): each
    # its output and mask, the shared input no longer kept: -2h + 6h; down: the product kept by lora_A
    # replaced by the dropout's output, + mask: +1 f
    (dict(model="llama-3.2-1b", lora_targets="all"), H1 + QD1 + 4 * H1 + F1, 7 * H1 + 3 * QD1 + 4 * H1 + F1),
    (dict(model="llama-2-7b", lora_targets="all"), H7 + QD7 + 4 * H7 + F7, 7 * H7 + 3 * QD7 + 4 * H7 + F7),
    # bitsandbytes 0.42 (QLoRA rows): MatMul4Bit keeps every 4-bit linear's input anyway (the dropout's input
    # and attention's output copy): q,v +3 h (one output and mask); peft +6 h
    (dict(model="llama-3.2-1b", lora_targets="q_proj,v_proj", **QLORA_042), 3 * H1, 6 * H1),     # 6,144 / 12,288
    (dict(model="llama-2-7b", lora_targets="q_proj,v_proj", **QLORA_042), 3 * H7, 6 * H7),       # 12,288 / 24,576
    # all seven: q,k,v +3 h (peft 9 h), o +3 qd, gate, up +6 h, down +3 f (the product kept by MatMul4Bit)
    (dict(model="llama-3.2-1b", lora_targets="all", **QLORA_042), 3 * H1 + 3 * QD1 + 6 * H1 + 3 * F1,
     9 * H1 + 3 * QD1 + 6 * H1 + 3 * F1),
    (dict(model="llama-2-7b", lora_targets="all", **QLORA_042), 3 * H7 + 3 * QD7 + 6 * H7 + 3 * F7,
     9 * H7 + 3 * QD7 + 6 * H7 + 3 * F7),
    # bitsandbytes >= 0.43.2 (LitGPT's pin at HEAD): as the bf16 LoRA
    (dict(model="llama-2-7b", lora_targets="q_proj,v_proj", method="qlora", bnb_4bit_input="freed"), H7, 4 * H7),
])
def test_dropout_adds_what_litgpts_path_allocates_per_layer(models, kw, lit, peft):
    assert added(models, **kw) == lit
    assert added(models, **as_peft(**kw)) == peft


def test_the_worked_figures():
    assert (H1 + QD1 + 4 * H1 + F1, H7 + QD7 + 4 * H7 + F7) == (20_480, 35_584)
    assert (3 * H1 + 3 * QD1 + 6 * H1 + 3 * F1, 3 * H7 + 3 * QD7 + 6 * H7 + 3 * F7) == (49_152, 82_176)


def test_the_first_layer_keeps_no_qkv_mask(models):
    """LitGPT never calls enable_input_require_grads: the first block's input (the frozen embedding's
    output) needs no grad, so its one q/k/v dropout keeps no mask (traced: block 0 adds 0 for q,v and
    576 - 64 for 'all', benchmarks/check_litgpt_lora_saved.py). Llama 2 7B q,v at 2 x 512: 31 x 4,096 B per
    token, 130,023,424 bytes more in the stack; peft's two masks there: 32 x 4 h - 2 h."""
    def stack(p, **kw):
        x = scenario_inputs(pd.DataFrame([{**LIT, "model": "llama-2-7b", "lora_dropout": p, **kw}]), models)
        return float(COMPONENT_FUNCTIONS["activations"](x, totals(x))["forward"].per_token[0]), x

    (with_p, x), (without, _) = stack(0.05, lora_targets="q_proj,v_proj"), stack(0.0, lora_targets="q_proj,v_proj")
    assert float(first_layer_unsaved_masks(x)[0]) == H7
    assert with_p - without == 31 * H7 == 126_976
    assert 31 * H7 * 2 * 512 == 130_023_424
    (with_p, x), (without, _) = stack(0.05, **as_peft(lora_targets="q_proj,v_proj")), \
        stack(0.0, **as_peft(lora_targets="q_proj,v_proj"))
    assert with_p - without == 32 * 4 * H7 - 2 * H7
    # 'all': the first block's q/k/v mask only (o, fc_1, fc_2, proj follow the adapted qkv)
    _p, x = stack(0.05, lora_targets="all")
    assert float(first_layer_unsaved_masks(x)[0]) == H7
    # checkpointing (LitGPT's FSDP on several devices): the stack holds layer inputs only
    _p, x = stack(0.05, lora_targets="q_proj,v_proj", grad_checkpointing=True)
    assert float(first_layer_unsaved_masks(x)[0]) == 0.0


# peak_bytes at main 2171f3a (before this branch): Llama 2 7B, 2 x 512, r 32, lora_dropout 0.05, a100-80gb-sxm
PEFT_PEAKS = (
    ("hf", "lora", "freed", "q_proj,v_proj", 21253534310.4),
    ("hf", "lora", "freed", "all", 26779477401.6),
    ("hf", "qlora", "kept", "q_proj,v_proj", 13595552469.8112),
    ("hf", "qlora", "kept", "all", 17229969314.6112),
    ("hf", "qlora", "freed", "all", 15063191868.2112),
    ("torchtune", "lora", "freed", "q_proj,v_proj", 15288298905.6),
    ("torchtune", "qlora", "kept", "all", 5819224380.2112),
    ("unsloth", "lora", "freed", "all", 16314147225.6),
    ("unsloth", "qlora", "kept", "q_proj,v_proj", 5191720457.0112),
    ("llama-factory", "qlora", "kept", "all", 6401587106.6112),
    ("axolotl", "qlora", "kept", "q_proj,v_proj", 12482978517.8112),
    ("axolotl", "lora", "freed", "all", 26779477401.6),
    ("deepspeed", "qlora", "freed", "q_proj,v_proj", 11428775023.4112),
)


def test_peft_recipes_dropout_unchanged(models, gpus):
    frame = pd.DataFrame([dict(model="llama-2-7b", task="train", method=meth, precision="bf16", batch=2, seq=512,
                               lora_rank=32, lora_targets=t, grad_checkpointing=False, recipe=rec, bnb_4bit_input=bnb,
                               lora_dropout=0.05, gpu="a100-80gb-sxm") for rec, meth, bnb, t, _p in PEFT_PEAKS])
    got = estimate(frame, models, gpus)["peak_bytes"].to_numpy(dtype=float)
    for (rec, meth, bnb, t, peak), value in zip(PEFT_PEAKS, got):
        assert value == peak, (rec, meth, bnb, t)
