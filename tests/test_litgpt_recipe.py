"""The litgpt recipe (engine/stacks.py RECIPES["litgpt"], docs/stacks.md *LitGPT*): LitGPT's finetune
scripts and the model it builds, as read at Lightning-AI/litgpt 5895df10, 00af8b0d and HEAD 2685705.
Every expected figure is worked out here from the models' configs and the source's shapes, not by
the engine; the last tests check that the other recipes' estimates did not move."""

import pandas as pd
import pytest

import engine.constants as C
from engine import estimate
from engine.components import kept_graph_bytes, logits, scenario_inputs, totals, workspace, activations
from engine.stacks import RECIPES, SWITCHES, recipe_value
from tests.clirun import run_cli

# Llama 3.2 1B (meta-llama config.json; LitGPT config.py "Llama-3.2-1B{}", padded_vocab_size 128256)
H1, F1, L1, A1, KV1, D1, V1, N1 = 2048, 8192, 16, 32, 8, 64, 128256, 1_235_814_400
# Llama 2 7B: as many KV heads as heads
H7, F7, L7, A7, V7 = 4096, 11008, 32, 32, 32000

LORA_1B = dict(model="llama-3.2-1b", task="train", method="lora", precision="bf16", lora_rank=32,
               lora_targets="q_proj,v_proj", batch=2, seq=512, grad_checkpointing=False)


def rows(models, *scenarios):
    return [r for _i, r in estimate(pd.DataFrame(list(scenarios)), models).iterrows()]


def as_hf(scenario: dict) -> dict:
    """The same scenario under recipe hf with every switch set to the litgpt recipe's value: what is left
    between the two is LitGPT's own model (untied head, attention, the 4-bit head), not its switches."""
    out = dict(scenario, recipe="hf")
    for switch in SWITCHES:
        out[switch] = recipe_value("litgpt", switch, scenario["method"], scenario["grad_checkpointing"])
    return out


def parts(models, scenario, component):
    x = scenario_inputs(pd.DataFrame([scenario]), models)
    return x, component(x, totals(x))


# ---- the recipe's switch values -----------------------------------------------------------------

def test_litgpt_recipe_values_and_their_sources():
    r = RECIPES["litgpt"]
    assert set(r) == set(SWITCHES)
    expected = {"adapter_dtype": "bf16", "logits_upcast": "loss", "checkpointing": "flag", "optimizer_in_backward": "off",
                "activation_offload": "off", "attention": "sdpa", "compile": "off", "packing": "off", "kbit_prep": "off",
                "padding": "unpadded", "loop": "manual", "use_cache": "off", "sequence_parallel": "off", "float8": "off",
                "decode_cache": "dynamic", "bnb_4bit_input": "freed"}
    for switch, value in expected.items():
        assert r[switch][0] == value, switch
    assert r["loss"][0] == {"lora": "litgpt", "qlora": "litgpt", "full": "litgpt_full", "freeze": "litgpt_full"}
    for switch, (_value, source) in r.items():
        assert "litgpt" in source.lower() or "LitGPT" in source or "Fabric" in source, switch


def test_the_decided_frame_under_litgpt(models):
    lora, qlora, full, manual_hf = rows(models, dict(LORA_1B, recipe="litgpt"), dict(LORA_1B, recipe="litgpt", method="qlora"),
                                       dict(LORA_1B, recipe="litgpt", method="full"), dict(LORA_1B, loop="manual"))
    assert (lora["loss"], qlora["loss"], full["loss"]) == ("litgpt", "litgpt", "litgpt_full")
    assert lora["loop"] == "manual" and lora["padding"] == "unpadded" and lora["adapter_dtype"] == "bf16"
    # LitGPT's model builds no KV cache in training: its own manual loop does not turn use_cache on ...
    assert lora["use_cache"] == "off" and qlora["bnb_4bit_input"] == "freed"
    # ... where a hand-written transformers loop still does (the model config's default)
    assert manual_hf["use_cache"] == "on"


# ---- LitGPT's model ------------------------------------------------------------------------------

def test_untied_lm_head_of_a_tied_catalog_model(models):
    litgpt, hf = rows(models, dict(LORA_1B, recipe="litgpt"), as_hf(dict(LORA_1B, recipe="litgpt")))
    # litgpt/model.py GPT.__init__: lm_head = nn.Linear(2048, 128256) beside wte = nn.Embedding(128256, 2048)
    assert litgpt["params"] == N1 + V1 * H1 == 1_498_482_688
    assert hf["params"] == N1
    assert litgpt["weights_bytes"] - hf["weights_bytes"] == 2 * 128_256 * 2_048 == 525_336_576
    # an untied catalog model is the same model under both
    l2, h2 = rows(models, dict(LORA_1B, model="llama-2-7b", recipe="litgpt"), as_hf(dict(LORA_1B, model="llama-2-7b", recipe="litgpt")))
    assert l2["params"] == h2["params"] and l2["weights_bytes"] == h2["weights_bytes"]


def test_attention_keeps_k_and_v_at_the_query_width(models):
    # q, k and v all adapted: LoRAQKVLinear's zero_pad keeps nothing (with some of them it keeps lora_B's
    # output: tests/test_litgpt_dropout.py)
    lit = dict(LORA_1B, recipe="litgpt", lora_targets="q_proj,k_proj,v_proj")
    _x, mine = parts(models, lit, activations)
    _x, theirs = parts(models, as_hf(lit), activations)
    # GQA: K and V expanded to 32 heads before SDPA: 2 x (32 - 8) x 64 x 2 bytes per token and layer, 16 layers
    assert mine["forward"].per_token[0] - theirs["forward"].per_token[0] == 16 * 2 * 24 * 64 * 2 == 98_304
    # MHA (Llama 2 7B): nothing repeated, but V is a view of the fused qkv output (3 x 4096 wide), kept whole:
    # its q and k parts, 2 x 4096 x 2 bytes per token and layer, 32 layers
    lit7 = dict(lit, model="llama-2-7b")
    _x, mine7 = parts(models, lit7, activations)
    _x, theirs7 = parts(models, as_hf(lit7), activations)
    assert mine7["forward"].per_token[0] - theirs7["forward"].per_token[0] == 32 * 2 * 4096 * 2 == 524_288


# ---- the loss: Fabric's fp32 logits, the chunked cross-entropy, the kept output -------------------

def test_litgpt_loss_bytes_per_token_and_at_2_x_512(models):
    x, p = parts(models, dict(LORA_1B, recipe="litgpt"), logits)
    V = 128_256
    # forward's end: the previous step's fp32 logits (4 V, fit()'s `logits`), the new bf16 chunks (2 V) and
    # Fabric's fp32 conversion of them (4 V); the loss's own forward is 4 V logits + 4 V log-softmax outputs
    assert p["forward"].per_token[0] == 10 * V == 1_282_560
    # loss backward: the saved outputs / chunk gradients (4 V) beside the kept fp32 logits (4 V)
    assert p["loss_backward"].per_token[0] == 8 * V
    for phase in ("backward", "backward_end", "optimizer"):
        assert p[phase].per_token[0] == 4 * V, phase
    # at 2 x 512 tokens: 10 x 128,256 x 1,024 bytes in forward, 8 x ... at the loss backward
    assert p["forward"].per_token[0] * 2 * 512 == 1_313_341_440
    assert p["loss_backward"].per_token[0] * 2 * 512 == 1_050_673_152
    # full.py: the shifted slice's reshape copies the fp32 logits, split's and the slice's backward two more
    _x, full = parts(models, dict(LORA_1B, recipe="litgpt", method="full"), logits)
    assert full["forward"].per_token[0] == 12 * V and full["loss_backward"].per_token[0] == 12 * V
    # the loss alone, under a loop that keeps nothing: 2 x 4 V forward, 4 V backward
    _x, alone = parts(models, dict(LORA_1B, recipe="litgpt", loop="trainer"), logits)
    assert alone["forward"].per_token[0] == 8 * V and alone["loss_backward"].per_token[0] == 4 * V


def test_lm_head_backward_holds_every_chunks_16bit_gradient(models):
    x, w = parts(models, dict(LORA_1B, recipe="litgpt"), workspace)
    # the layer's transient (2 h + 6 f) or lm_head's moment: every chunk's bf16 logits gradient, 2 V
    assert w["backward"].per_token[0] == max(2 * H1 + 6 * F1, 2 * V1) == 256_512


# ---- QLoRA under Fabric's BitsandbytesPrecision ----------------------------------------------------

def test_qlora_base_is_nf4_without_double_quantization_with_the_head_quantized(models):
    assert C.BASE_ONLY_BITS["nf4_nodq"] == 4 + 32 / 64 == 4.5
    q = dict(LORA_1B, recipe="litgpt", method="qlora")
    (r,) = rows(models, q)
    # every linear, lm_head's too (Fabric patches torch.nn.Linear while GPT(config) is built), at 4.5 bits;
    # the embedding and norms bf16; the LoRA adapters bf16
    n_lin = 16 * (2048 * 2048 + 2 * 2048 * 512 + 2048 * 2048 + 3 * 2048 * 8192)
    assert n_lin == 973_078_528
    quantized = n_lin + V1 * H1
    rest = (N1 + V1 * H1) - quantized
    assert rest == 262_668_288 + 33 * 2048  # embedding + 2 norms x 16 layers + the final norm
    adapters = 16 * (2 * 32 * 2048 + 32 * (2048 + 512))
    assert r["trainable_params"] == adapters == 3_407_872
    assert r["weights_bytes"] == pytest.approx(quantized * 4.5 / 8 + rest * 2 + adapters * 2, rel=1e-12)
    # nf4_nodq asked for under hf: the linears only, 4.5 against nf4's 4.127 bits
    nodq, dq = rows(models, dict(LORA_1B, model="llama-2-7b", method="qlora", base_precision="nf4_nodq"),
                    dict(LORA_1B, model="llama-2-7b", method="qlora", base_precision="nf4"))
    n_lin7 = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert nodq["weights_bytes"] - dq["weights_bytes"] == pytest.approx(n_lin7 * (4.5 - 4.127) / 8, rel=1e-9)
    assert nodq["bnb_4bit_input"] == "freed"


def test_lm_heads_dequantized_weight_fp16_and_its_bf16_cast(models):
    q = dict(LORA_1B, recipe="litgpt", method="qlora")
    _x, w = parts(models, q, workspace)
    # Lightning quantizes from weight.to(torch.half): MatMul4Bit's dequantize_4bit gives fp16, .to(bf16) a
    # second copy; the largest 4-bit weight is lm_head's 128,256 x 2,048
    assert w["backward"].fixed[0] == 4 * V1 * H1 == 1_050_673_152
    # hf's QLoRA (transformers + peft): the head stays 16-bit, one 16-bit copy of gate/up/down
    _x, w_hf = parts(models, dict(LORA_1B, method="qlora"), workspace)
    assert w_hf["backward"].fixed[0] == 2 * H1 * F1


def test_bitsandbytes_0_42_inputs_live_while_the_loop_keeps_the_graph(models):
    q7 = dict(LORA_1B, model="llama-2-7b", recipe="litgpt", method="qlora", bnb_4bit_input="kept")
    x = scenario_inputs(pd.DataFrame([q7, dict(q7, bnb_4bit_input="freed"), dict(q7, grad_checkpointing=True)]), models)
    # per layer: the attention's input (2 h), its output (2 x 4096), the MLP's input (2 h), the SwiGLU
    # product (2 f); once: lm_head's input (2 h)
    per_token = 32 * (2 * H7 + 2 * 4096 + 2 * H7 + 2 * F7) + 2 * H7
    assert per_token == 1_499_136
    got = kept_graph_bytes(x)
    assert list(got) == [per_token, 0.0, 0.0]
    # the previous step's inputs sit beside its fp32 logits and the new chunks at the forward's end
    p = logits(x, totals(x))
    assert p["forward"].per_token[0] == 10 * V7 + per_token


def test_pagedadamw_keeps_the_fused_qkv_adapters_states_by_their_own_sizes(models):
    q = dict(LORA_1B, recipe="litgpt", method="qlora", optimizer="paged_adamw_32bit")
    lit, hf = rows(models, q, as_hf(q))
    # LitGPT's LoRAQKVLinear: lora_A (2 x 32, 2048) = 131,072 values (>= 1e5: paged), lora_B (2048 + 512, 32)
    # = 81,920 (on the device): 2 fp32 states each, 16 layers
    assert lit["optimizer_bytes"] == 16 * 81_920 * 8 == 10_485_760
    # peft's separate q_proj / v_proj adapters are each under 1e5 values: all on the device
    assert hf["optimizer_bytes"] == 16 * (65_536 + 65_536 + 65_536 + 16_384) * 8


# ---- the CLI and the evidence ------------------------------------------------------------------------

def test_cli_recipe_litgpt_and_base_nf4_nodq():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--recipe", "litgpt",
                             "--base-precision", "nf4_nodq", "--batch", "2", "--seq", "512", "--json")
    assert code == 0, err
    import json
    d = json.loads(out)
    assert d["recipe"] == "litgpt" and d["loss"] == "litgpt" and d["params"] == 1_498_482_688
    code, _out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--base-precision", "nf3")
    assert code == 2 and "nf4_nodq" in err


def test_litgpt_evidence_rows_run_under_the_litgpt_recipe_within_15_percent(cat):
    from planner.evidence import evidence_table
    t = evidence_table(cat.references(), cat.models(), cat.gpus())
    lit = t[t["id"].str.startswith("litgpt-")]
    # (12 of its finetune table, 5 of its resource tables' 1-GPU rows; since --accum-sync, its 4 multi-GPU LoRA rows
    # and 2 config_hub full fine-tuning rows under Fabric's FSDP1)
    assert len(lit) == 23 and (lit["recipe"] == "litgpt").all()
    assert (lit["error_pct"].abs() <= 15).all(), lit[["id", "error_pct"]]


# ---- the other recipes did not move -------------------------------------------------------------------

# peak_bytes at main e7563ca, before the litgpt recipe (batch 2 x 1,024, q_proj,v_proj, a100-80gb-sxm)
BEFORE = (
    ("hf", "llama-2-7b", "full", "auto", "freed", False, 71237806080.0),
    ("hf", "llama-2-7b", "lora", "auto", "freed", False, 27013169971.2),
    ("hf", "llama-2-7b", "qlora", "auto", "freed", False, 16618090197.8112),
    ("torchtune", "llama-2-7b", "full", "auto", "freed", False, 44406602956.8),
    ("torchtune", "llama-2-7b", "qlora", "auto", "freed", False, 5724000367.4112),
    ("unsloth", "llama-2-7b", "lora", "auto", "freed", False, 15192593203.2),
    ("unsloth", "llama-2-7b", "qlora", "auto", "freed", False, 5195518063.4112),
    ("llama-factory", "llama-2-7b", "qlora", "auto", "freed", False, 6023112405.8112),
    ("axolotl", "llama-2-7b", "qlora", "auto", "freed", False, 16921408418.6112),
    ("deepspeed", "llama-2-7b", "lora", "auto", "freed", False, 27013169971.2),
    ("torchtitan", "llama-2-7b", "lora", "auto", "freed", False, 26872241356.8),
    ("hf", "llama-3.2-1b", "full", "manual", "freed", False, 16258146508.8),
    ("hf", "llama-3.2-1b", "lora", "manual", "freed", False, 10499332300.8),
    ("hf", "llama-2-7b", "qlora", "manual", "kept", True, 7550765167.4112),
)


def test_other_recipes_estimates_are_unchanged(models, gpus):
    frame = pd.DataFrame([dict(model=m, task="train", method=meth, precision="bf16", batch=2, seq=1024,
                               lora_targets="q_proj,v_proj", grad_checkpointing=gc, recipe=rec, loop=loop,
                               bnb_4bit_input=bnb, gpu="a100-80gb-sxm")
                          for rec, m, meth, loop, bnb, gc, _peak in BEFORE])
    got = estimate(frame, models, gpus)["peak_bytes"].to_numpy(dtype=float)
    for (rec, m, meth, loop, bnb, gc, peak), value in zip(BEFORE, got):
        assert value == pytest.approx(peak, rel=1e-12), (rec, m, meth, loop, bnb, gc)
