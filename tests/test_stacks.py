"""The software stack as part of the scenario (issue 13): recipes, switches, their terms, the
solvers under them, the CLI and the evidence under each reference's own recipe."""

import json

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.stacks import RECIPES, SWITCHES, recipe_value, stacks_table
from tests.conftest import ROOT
from tests.clirun import run_cli

GIB = 2**30
ALL_LINEAR = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
MEMORY = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "optimizer_temp_bytes", "activations_bytes",
          "logits_bytes", "workspace_bytes", "peak_bytes", "cpu_bytes", "max_batch", "max_seq", "gpus_needed")


def run(*args):
    return run_cli(*args)  # `python -m engine *args`, in this process (tests/clirun.py)


def one(models, gpus=None, **sc):
    base = dict(model="llama-3.1-8b", task="train", method="lora", precision="bf16", batch=2, seq=2048,
                lora_targets=ALL_LINEAR, grad_checkpointing=True)
    base.update(sc)
    return estimate(pd.DataFrame([base]), models, gpus).iloc[0]


# ---- the hf recipe is the engine as it was --------------------------------------------------

def test_hf_recipe_with_its_values_given_explicitly_is_bit_identical_to_the_defaults(models, gpus):
    rows = [dict(model=m, task="train", method=meth, precision=p, optimizer=o, batch=b, seq=s, grad_checkpointing=g,
                 lora_targets="q_proj,v_proj", gpu="rtx-4090")
            for m in ("llama-2-7b", "llama-3.1-8b") for meth in ("full", "lora", "qlora", "freeze")
            for p in ("bf16", "amp_bf16") for o in ("adamw", "paged_adamw_8bit") for b, s in ((1, 512), (4, 2048))
            for g in (False, True)]
    plain = estimate(pd.DataFrame(rows), models, gpus)
    explicit = pd.DataFrame(rows)
    explicit["recipe"] = "hf"
    for switch in SWITCHES:
        explicit[switch] = [recipe_value("hf", switch, r["method"], r["grad_checkpointing"]) for r in rows]
    stated = estimate(explicit, models, gpus)
    for col in MEMORY:
        np.testing.assert_array_equal(plain[col].to_numpy(dtype=float), stated[col].to_numpy(dtype=float), err_msg=col)
    # and 'auto' resolves to those values in the result
    assert (plain["recipe"] == "hf").all() and (plain["loss"] == "unfused").all()
    assert list(plain["checkpointing"]) == ["full" if r["grad_checkpointing"] else "none" for r in rows]


def test_every_recipe_value_is_a_value_of_its_switch_and_has_a_source():
    for recipe, switches in RECIPES.items():
        assert set(switches) == set(SWITCHES), recipe
        for switch, (value, source) in switches.items():
            values = value.values() if isinstance(value, dict) else [value]
            for v in values:
                # ('flag': full or none as --grad-checkpointing; 'flag_module': module or none, NeMo Automodel's)
                assert v in ("flag", "flag_module") or v in SWITCHES[switch][1:], (recipe, switch, v)
            assert len(source) > 15, (recipe, switch)
    assert len(stacks_table()) == len(RECIPES) * len(SWITCHES)


# ---- each switch's term, against bytes worked out by hand ----------------------------------------

def test_bf16_adapters_halve_the_adapter_bytes_and_drop_the_fp32_input_copies(models):
    fp32 = one(models, adapter_dtype="fp32")
    bf16 = one(models, adapter_dtype="bf16")
    trainable = fp32["trainable_params"]
    # Llama 3.1 8B, q,k,v,o,gate,up,down at r=8: 32 x 8 x (2x(4096+4096) + 2x(4096+1024) + 3x(4096+14336))
    assert trainable == 32 * 8 * (2 * 8192 + 2 * 5120 + 3 * 18432) == 20_971_520
    assert fp32["weights_bytes"] - bf16["weights_bytes"] == 2 * trainable
    # end of backward: weights, gradients (2 bytes less each) and the two AdamW states (2 x 2 less)
    assert fp32["backward_end_phase_bytes"] - bf16["backward_end_phase_bytes"] == (2 + 2 + 4) * trainable
    # without checkpointing the saved activations shrink too: per layer peft's fp32 inputs of the
    # 7 adapted modules (4 x (5h + qd + f)) are gone, lora_B's saved output halves (4r -> 2r per module)
    a = one(models, adapter_dtype="fp32", grad_checkpointing=False, batch=1, seq=4096)
    b = one(models, adapter_dtype="bf16", grad_checkpointing=False, batch=1, seq=4096)
    assert a["peak_phase"] in ("forward", "loss_backward", "backward") and b["peak_phase"] in ("forward", "loss_backward", "backward")
    h, f, qd = 4096, 14336, 4096
    per_layer_fp32 = 4.0 * (5 * h + qd + f)  # q,k,v,gate,up inputs (h each), o's (qd), down's (f)
    shared = 2.0 * h * 2 + 2.0 * f  # what the 16-bit base keeps once per norm output / down input instead
    expected = 32 * (per_layer_fp32 - shared + (4 - 2) * 8 * 7) * 4096
    assert a["activations_bytes"] - b["activations_bytes"] == expected


def test_loss_variants_per_token_bytes(models):
    V, h = 128256, 4096
    tokens = 2 * 2048
    rows = {k: one(models, loss=k, grad_checkpointing=True) for k in ("unfused", "chunked", "linear_chunked", "fused")}
    # the loss buffers sit in the forward phase when the peak is there; compare the phases directly
    fwd = {k: r["forward_phase_bytes"] for k, r in rows.items()}
    unfused_logits = (2 + 4 + 4) * V * tokens
    assert fwd["unfused"] - fwd["chunked"] == pytest.approx(unfused_logits - (2 * V + 4 * V + 4 * V / 8) * tokens)
    assert fwd["unfused"] - fwd["linear_chunked"] == pytest.approx(unfused_logits - (4 * V + 6 * V / 8) * tokens)
    assert fwd["unfused"] - fwd["fused"] == pytest.approx(unfused_logits - (2 * 10 * h + 2 * h) * tokens)
    assert fwd["fused"] < fwd["linear_chunked"] < fwd["chunked"] < fwd["unfused"]
    compiled = one(models, loss="chunked", compile="on")
    # compiled (benchmarks/check_compiled_ce_buffers.py): no V-wide fp32 tensor in forward, the 16-bit
    # chunks and 8 bytes per token (max, log-sum-exp) instead of 4 V + the last chunk's 4 V / 8 upcast
    assert fwd["chunked"] - compiled["forward_phase_bytes"] == pytest.approx((4 * V + 4 * V / 8) * tokens - 8 * tokens)
    # compile changes nothing else: with the unfused loss the figures are those without it
    assert one(models, compile="on")["peak_bytes"] == rows["unfused"]["peak_bytes"]
    # older transformers: the fp32 logits and their shifted copy live in forward (12 V per token)
    legacy = one(models, logits_upcast="model")
    assert legacy["forward_phase_bytes"] - fwd["unfused"] == pytest.approx((12 - 10) * V * tokens)


def test_checkpointing_variants(models):
    none = one(models, checkpointing="none")
    full = one(models, checkpointing="full")
    sel = one(models, checkpointing="selective")
    off = one(models, checkpointing="offload")
    assert none["grad_checkpointing"] is False or not none["grad_checkpointing"]
    assert full["activations_bytes"] < sel["activations_bytes"] < none["activations_bytes"]
    # offloaded checkpointing (Unsloth): 2 layer inputs (bf16, h) on the GPU, all 32 in host RAM
    tokens, h = 2 * 2048, 4096
    assert off["cpu_bytes"] == 32 * 2 * h * tokens
    assert full["forward_phase_bytes"] - off["forward_phase_bytes"] == pytest.approx((32 - 2) * 2 * h * tokens)
    assert full["cpu_bytes"] == 0
    # the bool flag is the 'full' variant
    assert one(models, grad_checkpointing=True)["peak_bytes"] == full["peak_bytes"]
    # activation offload (torchtune) with checkpointing is the same placement
    assert one(models, checkpointing="full", activation_offload="on")["cpu_bytes"] == off["cpu_bytes"]


def test_optimizer_in_backward_keeps_one_gradient_at_a_time(models):
    base = dict(method="full", optimizer="paged_adamw_8bit")
    off = one(models, optimizer_in_backward="off", **base)
    on = one(models, optimizer_in_backward="on", **base)
    V, h, N = 128256, 4096, off["trainable_params"]
    assert off["gradients_bytes"] > 0 and off["peak_phase"] in ("backward_end", "optimizer")
    # every bf16 gradient at the step (paged 8-bit states are not on the GPU, its step has no
    # temporaries) against the largest tensor's alone: lm_head's V x h
    assert off["optimizer_phase_bytes"] - on["optimizer_phase_bytes"] == 2 * N - 2 * V * h
    assert off["peak_bytes"] - on["peak_bytes"] > 7 * GIB  # the peak moves to the forward pass


def test_paged_adamw_32bit_states_are_fp32_and_paged_except_small_tensors(models):
    r = one(models, optimizer="paged_adamw_32bit", adapter_dtype="bf16", lora_rank=64)
    trainable = r["trainable_params"]
    # r=64: only k_proj's and v_proj's lora_B (1024 x 64 = 65,536 values) are under 1e5: not paged
    resident64 = 32 * 2 * 1024 * 64
    assert r["optimizer_bytes"] == 8 * resident64
    assert r["paged_optimizer_bytes"] == 8 * (trainable - resident64) == r["cpu_bytes"]
    small = one(models, optimizer="paged_adamw_32bit", lora_rank=8)
    # r=8: every A and B is r x 4096 (32,768), r x 1024 or r x 14336 (114,688 >= 1e5): gate's and
    # up's B and down's A are paged, the other 9 of r x 4096 and 2 of r x 1024 stay
    L, r8 = 32, 8
    resident = L * r8 * (9 * 4096 + 2 * 1024)
    assert small["optimizer_bytes"] == 8 * resident
    assert small["paged_optimizer_bytes"] == 8 * (small["trainable_params"] - resident)


# Llama 3.2 3B by hand (config.json: hidden 3072, 28 layers, 24 heads / 8 KV heads of 128, MLP 8192,
# vocabulary 128256, tied embedding): per layer q, o 3072x3072, k, v 3072x1024, gate, up, down
# 3072x8192, two norms of 3072; plus the embedding and the final norm.
L3B, H3B = 28, 3072
NORMS_3B = H3B * (2 * L3B + 1)  # 175,104 values in 57 norm weights of 3072 (< 4096)
N_3B = L3B * (H3B * (2 * 3072 + 2 * 1024) + 3 * H3B * 8192) + NORMS_3B + 128256 * H3B


def test_torchao_adamw_8bit_states_follow_its_layout(models):
    """torchao AdamW8bit (b714026 adam.py _new_buffer, subclass_8bit.py OptimState8bit.zeros): a tensor of
    >= 4096 values (a multiple of 256) gets two uint8 code tensors and two fp32 scales per 256 values;
    a smaller one two states in its own dtype (bf16 here: 2 x 2 bytes), where bitsandbytes keeps fp32."""
    assert N_3B == 3_212_749_824
    sc = dict(model="llama-3.2-3b", method="full", batch=1, seq=512, grad_checkpointing=True)
    ao = one(models, optimizer="adamw_8bit_torchao", **sc)
    assert ao["trainable_params"] == N_3B
    per_value = 2 * 1 + 2 * 4 / 256  # codes + scales, both states
    assert ao["optimizer_bytes"] == (N_3B - NORMS_3B) * per_value + NORMS_3B * 2 * 2 == 6_526_242_816
    assert ao["optimizer_temp_bytes"] == 0 and ao["paged_optimizer_bytes"] == 0
    bnb = one(models, optimizer="adamw_8bit", **sc)
    assert bnb["optimizer_bytes"] - ao["optimizer_bytes"] == NORMS_3B * (8 - 4)  # bnb: fp32 states under 4096
    # Llama 3.1 8B's norms have 4096 values (>= 4096, 16 blocks of 256): every tensor is quantized
    big = one(models, optimizer="adamw_8bit_torchao", model="llama-3.1-8b", method="full", batch=1, seq=512,
              grad_checkpointing=True)
    assert big["optimizer_bytes"] == big["trainable_params"] * per_value
    # LoRA: the adapters (r x 4096, r x 1024, r x 14336 for r = 8: all >= 4096 values) are all quantized
    lora = one(models, optimizer="adamw_8bit_torchao", lora_rank=8)
    assert lora["optimizer_bytes"] == lora["trainable_params"] * per_value


def test_torchao_adamw_8bit_on_the_cli_and_a_bad_optimizer_names_it():
    code, out, err = run("estimate", "--model", "llama-3.2-3b", "--method", "full", "--precision", "bf16",
                         "--optimizer", "adamw_8bit_torchao", "--batch", "1", "--seq", "512", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["optimizer"] == "adamw_8bit_torchao" and d["optimizer_bytes"] == 6_526_242_816
    code, out, err = run("estimate", "--model", "llama-3.2-3b", "--method", "full", "--optimizer", "adamw_4bit_torchao")
    assert code == 2 and "adamw_4bit_torchao" in err and "adamw_8bit_torchao" in err and "Traceback" not in err


# ---- the targets ------------------------------------------------------------------------

def test_qlora_paper_65b_fits_one_48gb_card_with_bf16_adapters_and_paged_32bit_adamw():
    code, out, err = run("estimate", "--model", "llama-1-65b", "--method", "qlora", "--lora-rank", "64", "--lora-targets",
                         ALL_LINEAR, "--adapter-dtype", "bf16", "--optimizer", "paged_adamw_32bit", "--grad-checkpointing",
                         "--batch", "1", "--seq", "512", "--gpu", "rtx-a6000", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] is True and data["headroom"] == 0.1 and data["gpus_needed"] == 1
    assert data["adapter_dtype"] == "bf16" and data["recipe"] == "hf"
    # the states (6.4 GB of fp32 for 0.8 B adapter values) live in paged memory: host RAM when evicted
    assert data["paged_optimizer_bytes"] == 8 * data["trainable_params"] == data["cpu_bytes"]
    assert data["peak_bytes"] < 0.9 * data["usable_bytes"]


def test_longest_qlora_context_on_a_24gb_card_is_longer_under_unsloth_and_torchtune_than_under_hf(models, gpus):
    sc = dict(model="llama-3.1-8b", method="qlora", lora_rank=16, gpu="rtx-4090", allow_long_context=True, batch=1, seq=2048)
    hf = one(models, gpus, recipe="hf", **sc)
    tt = one(models, gpus, recipe="torchtune", **sc)
    un = one(models, gpus, recipe="unsloth", **sc)
    assert hf["max_seq"] < tt["max_seq"] < un["max_seq"]
    # the solver's answer fits and one more 1% does not (it honours every switch's per-token terms)
    for row, recipe in ((hf, "hf"), (un, "unsloth")):
        at = one(models, gpus, recipe=recipe, **{**sc, "seq": int(row["max_seq"])})
        beyond = one(models, gpus, recipe=recipe, **{**sc, "seq": int(row["max_seq"] * 1.01) + 1})
        assert at["fits"] and not beyond["fits"], recipe
    # a bigger batch under unsloth too
    assert un["max_batch"] > hf["max_batch"]


def test_torchtune_rows_within_15_percent_under_their_recipe(cat):
    from planner.evidence import evidence_table, hit_rate
    table = evidence_table(cat.references(), cat.models(), cat.gpus())
    assert (table.loc[table["id"].str.startswith("torchtune-"), "recipe"] == "torchtune").all()
    # the README's 'Optimization flags' rows (Llama 3.2 3B, techniques added one by one): all but
    # 8-bit AdamW (its saving is smaller than two bytes per value) within 15%, every one within 20%
    # (before: checkpointing +20% with multi-tensor AdamW's step temporary, QLoRA +24% with an fp32
    # chunk the compiled loss never materialises)
    flags = table[table["id"].str.startswith("torchtune-llama32-3b-flags-")]
    assert len(flags) == 9 and (flags["error_pct"].abs() <= 20).all()
    assert set(flags.loc[flags["error_pct"].abs() > 15, "id"]) == {"torchtune-llama32-3b-flags-adamw-8bit"}
    tt = table[table["id"].str.startswith("torchtune-llama31-")]
    assert len(tt) == 8
    off = set(tt.loc[tt["error_pct"].abs() > 15, "id"])
    # the README's two A6000 rows are far above its 4090 rows of the same config (unexplained by the
    # README): see their explanations; the only torchtune rows outside 15% (the 405B row, in GiB as
    # torchtune logged it since 2024-08 though the README prints GB, is within)
    assert off == {"torchtune-llama31-8b-full-a6000", "torchtune-llama31-8b-lora-a6000"}, off
    assert (tt.loc[tt["id"].isin(off), "explanation"].str.len() > 40).all()
    # issue 13's target over the figures on issue 13's counters (before issue 13: 9 of 20; docs/stacks.md
    # prints it). The real runs issue 28 added on the counters it named (reserved, whole process,
    # optimum's allocated + external) are held to issue 28's own target by planner.evidence
    # (memory_summary; not met yet: docs/evidence.md says which rows and why)
    # The second round's sources (LitGPT's finetune table, AutoAWQ's README, torchao's torchtitan runs, a vLLM
    # load log) are held to issue 28's target with the rest, by planner.evidence; this guards the rows issue 13
    # was judged on. (So are the third round's, 2026-12-05: Answer.AI's fsdp_qlora, axolotl's gpt-oss, NeMo
    # Automodel, GaLore; LitGPT's resource tables share the litgpt- prefix.)
    later = ("litgpt-", "autoawq-", "torchao-", "vllm-llama31-405b-fp8-", "answerai-", "axolotl-", "automodel-", "galore-")
    earlier = table[~table["metric"].isin(("reserved_peak_bytes", "process_peak_bytes", "alloc_ext_peak_bytes"))
                    & ~table["id"].str.startswith(later)]
    hits, total = hit_rate(earlier)
    assert total >= 34 and hits / total >= 0.85, (hits, total)


# ---- peft prepare_model_for_kbit_training (kbit_prep) and the published longest QLoRA contexts --

def test_kbit_prep_holds_embeddings_lm_head_and_norms_in_fp32_and_an_fp32_residual(models, gpus):
    # Llama 3.1 8B by hand: V = 128,256, h = 4,096, 32 layers, f = 14,336, kv width 1,024
    V, h, L = 128256, 4096, 32
    n_lin = L * (h * h + 2 * h * 1024 + h * h + 3 * h * 14336)
    rest = 8030261248 - n_lin  # embed_tokens + lm_head + 65 norms: 2 V h + 65 h
    assert rest == 2 * V * h + 65 * h
    sc = dict(method="qlora", lora_rank=32, batch=1, seq=4096, gpu="rtx-4090", recipe="hf")
    on, off = one(models, gpus, kbit_prep="on", **sc), one(models, gpus, kbit_prep="off", **sc)
    auto = one(models, gpus, **sc)
    assert auto["kbit_prep"] == "on" and auto["peak_bytes"] == on["peak_bytes"]  # hf QLoRA: on
    # fp32 instead of bf16: 2 more bytes per parameter outside the 4-bit linears
    assert on["weights_bytes"] - off["weights_bytes"] == 2 * rest
    # checkpointed layer inputs in fp32: 4 h instead of 2 h per layer per token (4,096 tokens)
    assert on["activations_bytes"] - off["activations_bytes"] == 2 * h * L * 4096
    # lm_head's fp32 weight cast to a bf16 copy under autocast (the 4-bit linears keep none)
    assert off["autocast_copies_bytes"] == 0 and on["autocast_copies_bytes"] == 2 * V * h
    # the optimizer side is untouched
    assert on["optimizer_bytes"] == off["optimizer_bytes"] and on["trainable_params"] == off["trainable_params"]
    # only QLoRA rows: a 16-bit LoRA row with kbit_prep on is the row without it
    lo_on, lo_off = (one(models, gpus, method="lora", seq=4096, gpu="rtx-4090", kbit_prep=v) for v in ("on", "off"))
    for col in MEMORY:
        assert lo_on[col] == lo_off[col], col


@pytest.mark.parametrize("recipe, value", [("hf", "on"), ("deepspeed", "on"), ("torchtune", "off"), ("unsloth", "off"),
                                           ("llama-factory", "off"), ("axolotl", "off")])
def test_kbit_prep_per_recipe(recipe, value):
    assert recipe_value(recipe, "kbit_prep", "qlora", True) == value
    assert recipe_value(recipe, "kbit_prep", "lora", True) == "off"


# Unsloth README "Context length benchmarks", "Llama 3.1 (8B) max. context length" (github.com/unslothai/unsloth
# README.md, commit 000252c947fe; first in the Llama 3.3 blog, unsloth.ai/blog/llama3-3, Dec 2024): Llama 3.1 8B
# Instruct, 4-bit QLoRA on q, k, v, o, gate, up, down, rank 32, batch 1, sequences padded to the length, measured
# on the card sizes below: (Unsloth, Hugging Face + FA2) tokens. 8 GB (2,972 / OOM) has no card with bf16 here.
UNSLOTH_MAX_CONTEXT = {  # GPU VRAM -> (catalog card, Unsloth, HF + FA2)
    12: ("rtx-3060-12gb", 21848, 932),
    16: ("rtx-4060-ti-16gb", 40724, 2551),
    24: ("rtx-4090", 78475, 5789),
    40: ("a100-40gb-sxm", 153977, 12264),
    48: ("rtx-a6000", 191728, 15502),
    80: ("a100-80gb-sxm", 342733, 28454),
}


def _unsloth_context_rows(model: str, table: dict) -> tuple[list[dict], list]:
    """The setup of Unsloth's context tables (QLoRA r32 on all linear layers, checkpointing, batch 1,
    the whole card) on each card of `table` under --recipe unsloth and --recipe hf, with the published
    figure of each row (None: OOM)."""
    rows = [dict(model=model, task="train", method="qlora", precision="bf16", lora_rank=32,
                 lora_targets=ALL_LINEAR, grad_checkpointing=True, batch=1, seq=2048, gpu=card, recipe=recipe,
                 headroom=0.0, allow_long_context=True,
                 # the Hugging Face column ran FlashAttention-2 (no padding mask, no s x s tensor)
                 attention="flash" if recipe == "hf" else "auto")
            for card, _, _ in table.values() for recipe in ("unsloth", "hf")]
    return rows, [ref for _, un, hf in table.values() for ref in (un, hf)]


def _longest_at_estimate(rows: list[dict], models, gpus) -> list[float]:
    """Each row's longest sequence at which the point estimate alone fits (`fits_at_estimate`), on a
    grid of sequences 1% apart: since issue 28 `max_seq` is decided on the safe side (the estimate +
    the verdict margin), while issue 13's target compares the estimate with what ran."""
    seqs = np.unique(np.round(np.geomspace(64, 400_000, 900)).astype(int))
    frame = pd.DataFrame([{**r, "seq": int(s)} for r in rows for s in seqs])
    ok = estimate(frame, models, gpus)["fits_at_estimate"].to_numpy(dtype=bool, na_value=False).reshape(len(rows), -1)
    return [float(seqs[o].max()) if o.any() else 0.0 for o in ok]


def test_longest_qlora_context_within_minus_40_plus_25_percent_of_unsloths_published_table(models, gpus):
    """Issue 13's target, under each column's own stack: --recipe unsloth and --recipe hf (peft's
    prepare_model_for_kbit_training). headroom 0: the published figure is what ran on the whole card.
    The estimate's own longest context is compared (the verdict's, max_seq, is shorter by the margin)."""
    rows, refs = _unsloth_context_rows("llama-3.1-8b", UNSLOTH_MAX_CONTEXT)
    longest = _longest_at_estimate(rows, models, gpus)
    out = estimate(pd.DataFrame(rows), models, gpus)
    assert (out["max_seq"].to_numpy(dtype=float) <= np.array(longest) * 1.011).all()  # the verdict's: never longer
    errors = {(r["gpu"], r["recipe"]): float(est) / ref - 1 for r, est, ref in zip(rows, longest, refs)}
    bad = {k: f"{100 * e:+.1f}%" for k, e in errors.items() if not -0.40 <= e <= 0.25}
    assert not bad, bad
    # hf no longer says longer than measured by more than the target allows on any card (before: +44% to +201%)
    assert max(e for (g, rec), e in errors.items() if rec == "hf") <= 0.25


# The README's second table, "Llama 3.3 (70B) max. context length" (same setup, same commit): 48 GB:
# Unsloth 12,106, Hugging Face + FA2 OOM; 80 GB: 89,389 and 6,916.
UNSLOTH_MAX_CONTEXT_70B = {48: ("rtx-a6000", 12106, None), 80: ("a100-80gb-sxm", 89389, 6916)}


def test_longest_qlora_context_of_llama_33_70b_within_the_band_and_oom_where_published(models, gpus):
    rows, refs = _unsloth_context_rows("llama-3.3-70b", UNSLOTH_MAX_CONTEXT_70B)
    out = estimate(pd.DataFrame(rows), models, gpus)
    for r, est, fits, ref in zip(rows, _longest_at_estimate(rows, models, gpus), out["fits"], refs):
        if ref is None:  # OOM on the card: not even the shortest sequence fits under hf
            assert est == 0 and not fits, (r["gpu"], r["recipe"], est)
        else:
            assert -0.40 <= float(est) / ref - 1 <= 0.25, (r["gpu"], r["recipe"], est, ref)


def test_docs_published_context_block_names_every_published_figure(cat):
    from planner.stacks_report import published_context_rows
    t = published_context_rows(cat)
    published = {(m, g, rec): p for m, g, rec, p in zip(t["model"], t["gpu"], t["recipe"], t["published"])}
    for _, (card, un, hf) in UNSLOTH_MAX_CONTEXT.items():
        assert published[("llama-3.1-8b", card, "unsloth")] == un and published[("llama-3.1-8b", card, "hf")] == hf
    for _, (card, un, hf) in UNSLOTH_MAX_CONTEXT_70B.items():
        assert published[("llama-3.3-70b", card, "unsloth")] == un
        assert published[("llama-3.3-70b", card, "hf")] == hf or (hf is None and pd.isna(published[("llama-3.3-70b", card, "hf")]))


# ---- the CLI and the JSON contract -----------------------------------------------------------

def test_estimate_json_names_the_recipe_and_every_decided_switch():
    code, out, err = run("estimate", "--model", "llama-3.1-8b", "--method", "full", "--optimizer", "paged_adamw_8bit",
                         "--recipe", "torchtune", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["recipe"] == "torchtune"
    assert {k: data[k] for k in SWITCHES} == {"adapter_dtype": "bf16", "loss": "linear_chunked", "logits_upcast": "loss",
                                              "checkpointing": "full", "optimizer_in_backward": "on",
                                              "activation_offload": "off", "attention": "sdpa", "compile": "off",
                                              "packing": "off", "kbit_prep": "off", "padding": "unpadded",
                                              "loop": "trainer", "use_cache": "off",
                                              "sequence_parallel": "off", "float8": "off", "decode_cache": "dynamic",
                                              "bnb_4bit_input": "freed", "int4_kernel": "none",
                                              "bnb_double_quant": "on", "rope_cache": "none", "vision_tower": "on",
                                              "liger": "off", "dpo_reference": "copy", "quantize_experts": "off",
                                              "flat_params": "off", "accum_sync": "every"}
    assert data["grad_checkpointing"] is True  # torchtune's configs checkpoint


def test_estimate_json_kbit_prep_key_and_off_is_the_engine_before_it():
    args = ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--lora-rank", "32", "--lora-targets", ALL_LINEAR,
            "--grad-checkpointing", "--batch", "1", "--seq", "4096", "--gpu", "rtx-4090", "--json")
    code, out, err = run(*args)
    assert code == 0, err
    on = json.loads(out)
    code, out, err = run(*args, "--kbit-prep", "off", "--padding", "unpadded")
    assert code == 0, err
    off = json.loads(out)
    assert (on["recipe"], on["kbit_prep"], off["kbit_prep"]) == ("hf", "on", "off")
    # off (and unpadded, the one path the engine had then): the peak the engine gave before the switch
    # existed (measured on 7934d51: peak 15,346,011,272 B, max_seq 8,201 at the estimate); since issue 28
    # the longest context is decided on the safe side (the estimate + the verdict margin): shorter
    assert off["peak_bytes"] == 15346011272
    assert 0.85 * 8201 < off["max_seq"] < 8201 and off["fits_at_estimate"]
    assert on["max_seq"] < off["max_seq"] and on["peak_bytes"] > off["peak_bytes"]


def test_text_estimate_title_names_the_recipe():
    code, out, err = run("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--recipe", "unsloth")
    assert code == 0, err
    assert out.splitlines()[0].endswith("recipe unsloth")


@pytest.mark.parametrize("flag, value", [("--recipe", "hugging"), ("--loss", "chunky"), ("--adapter-dtype", "fp8"),
                                         ("--checkpointing", "yes"), ("--attention", "flash3"),
                                         ("--padding", "yes"), ("--kbit-prep", "yes")])
def test_bad_stack_values_exit_2_with_one_line(flag, value):
    code, out, err = run("estimate", "--model", "llama-3.1-8b", flag, value)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and value in err and "accepted" in err


def test_evidence_json_rows_carry_the_recipe():
    code, out, err = run("evidence", "--json")
    assert code == 0, err
    rows = json.loads(out)
    for key in ("id", "kind", "metric", "reference", "estimate", "unit", "error_pct", "recipe", "explanation"):
        assert all(key in r for r in rows), key
    by_id = {r["id"]: r for r in rows}
    assert by_id["torchtune-llama31-8b-qlora-4090"]["recipe"] == "torchtune"
    assert by_id["qlora-paper-65b-one-48gb-gpu"]["estimate"] == 1


def test_sweep_csv_has_the_stack_columns():
    code, out, err = run("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090", "--methods", "qlora",
                         "--recipe", "unsloth")
    assert code == 0, err
    header = out.splitlines()[0].split(",")
    for col in ("recipe",) + tuple(SWITCHES):
        assert col in header, col
    assert ",unsloth," in out.splitlines()[1]


def test_docs_stacks_page_holds_the_computed_figures(cat):
    from planner.stacks_report import blocks
    doc = (ROOT / "docs" / "stacks.md").read_text(encoding="utf-8")
    for name, text in blocks(cat).items():
        assert f"<!-- {name} -->\n{text}\n" in doc, name


def test_the_automodel_recipe_is_nemo_automodels_llm_recipe():
    """--recipe automodel (NeMo Automodel b4733bdc1): Liger's kernels on, its per-module checkpointing where
    checkpointing is asked (none where not), its loop keeping the output through backward, flash attention, bf16
    adapters, and its MaskedCrossEntropy on the logits: the loss stays unfused under Liger (its loop pops the
    labels). The same scenario with those switches given under hf has the same figures."""
    from catalog import default_catalog

    models = default_catalog().models()
    base = dict(model="llama-3.2-1b", task="train", method="lora", precision="bf16", batch=8, seq=2048, gpus=8, zero=3)
    rows = estimate(pd.DataFrame([dict(base, recipe="automodel", grad_checkpointing=g) for g in (True, False)]), models)
    on, off = rows.iloc[0], rows.iloc[1]
    assert (on["checkpointing"], off["checkpointing"]) == ("module", "none")
    assert (on["liger"], on["loss"], on["loop"], on["attention"], on["adapter_dtype"]) == ("on", "unfused", "manual",
                                                                                           "flash", "bf16")
    explicit = estimate(pd.DataFrame([dict(base, recipe="hf", grad_checkpointing=True, checkpointing="module", liger="on",
                                           loss="unfused", loop="manual", attention="flash", adapter_dtype="bf16",
                                           use_cache="off")]), models).iloc[0]
    assert on["peak_bytes"] == explicit["peak_bytes"]
