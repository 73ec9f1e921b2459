"""Parallelism as it is run (issue 27 item 2) and what is loaded beside the language model (issue 25):
context parallel, sequence parallel beside tensor parallel, pipeline parallel's 1F1B first stage,
Float8 training's compatibility, a vision tower and a checkpoint's stored bytes. Expected figures
are worked out here from the model's config numbers, not by the engine."""

import json

import pandas as pd
import pytest

from engine import estimate
from engine.margins import MEASURED_HIGH_PCT as MEASURED  # the band's measured part (engine/margins.py's rule)
from tests.clirun import run_cli
from tests.conftest import ROOT
from tests.test_checkpoints import write_gguf

# Llama 3.1 8B: 32 layers, h 4096, 8 KV heads of 128 (kv width 1024)
L, H, KVD = 32, 4096, 1024
TITAN = dict(model="llama-3.1-8b", task="train", method="full", precision="mixed_bf16", optimizer="adamw_fused",
             zero=3, grad_checkpointing=True, recipe="torchtitan", batch=1)


def one(models, **scenario):
    return estimate(pd.DataFrame([scenario]), models).iloc[0]


def test_context_parallel_splits_the_tokens_and_gathers_k_and_v(models):
    """cp GPUs share a sequence: twice the sequence on cp 2 keeps the per-GPU activations of the
    single sequence on cp 1; a layer's backward adds the all-gathered K and V of the whole sequence
    and their fp32 gradients (torch context_parallel's ALL_GATHER rotation, convert_to_f32)."""
    s = 4096
    one_gpu = one(models, **TITAN, gpus=2, cp=1, seq=s)
    split = one(models, **TITAN, gpus=2, cp=2, seq=2 * s)
    assert split.activations_bytes == pytest.approx(one_gpu.activations_bytes, rel=1e-12)
    assert split.model_states_bytes == one_gpu.model_states_bytes  # ZeRO shards over data x cp = 2 either way
    kv_gathered = 2 * KVD * (2 + 4)  # K and V (bf16) + their fp32 gradients, per token of the sequence
    assert split.backward_phase_bytes - one_gpu.backward_phase_bytes == pytest.approx(kv_gathered * 2 * s, rel=1e-9)


def test_sequence_parallel_divides_the_residual_stream_by_tp(models, gpus):
    """With full checkpointing each layer keeps its input (2 bytes x h per token, mixed_bf16) and the
    final norm 4h + 4 + 2h (its fp32 input, rsqrt, bf16 normed output): sequence parallel keeps 1/tp of
    each (torchtitan's SequenceParallel). lm_head's input (2h) is all-gathered over the sequence by the
    output layer's ColwiseParallel(input_layouts=Shard(1)) and kept whole: the same on and off."""
    s, tp = 2048, 2
    kept = L * 2 * H + (4 * H + 4 + 2 * H)
    frame = pd.DataFrame([dict(TITAN, gpus=2, tp=tp, seq=s, sequence_parallel=sp, gpu="h100-sxm-80gb")
                          for sp in ("off", "on")])
    off, on = (row for _i, row in estimate(frame, models, gpus).iterrows())
    assert off.forward_phase_bytes - on.forward_phase_bytes == pytest.approx(kept * (1 - 1 / tp) * s, rel=1e-9)
    # the recomputed layer's backward: its two RMSNorms' tensors (4h + 4 + 2h each) are sharded, the
    # all-gathered inputs of wq/wk/wv and of w1/w3 (2h each, torchtitan's PrepareModuleInput Shard(1) ->
    # Replicate) are whole on both
    norms = 2 * (4 * H + 4 + 2 * H)
    assert off.backward_phase_bytes - on.backward_phase_bytes == pytest.approx((kept + norms) * (1 - 1 / tp) * s,
                                                                               rel=1e-9)
    # verdicts: the measured 3% + the largest allowance, ZeRO-3's 10% or (not measured) sequence parallel's 30%
    assert off.verdict_margin_pct == MEASURED + 10 and on.verdict_margin_pct == MEASURED + 30


def test_torchtitan_turns_sequence_parallel_on_and_the_70b_2d_run_is_no_longer_three_times_over(models):
    """torchtitan's published Llama 3.1 70B run (FSDP 32 x TP 8, 16 x 8,192, full checkpointing):
    71.9 GiB max reserved. Without sequence parallel the layer inputs alone are 80 x 2 x 8192 bytes
    x 131,072 tokens = 160 GiB per GPU."""
    row = dict(TITAN, model="llama-3.1-70b", gpus=256, tp=8, batch=16, seq=8192, compile="on")
    sp = one(models, **row)
    assert sp.sequence_parallel == "on"
    no_sp = one(models, **row, sequence_parallel="off")
    inputs = 80 * 2 * 8192 * 16 * 8192
    # (both at the loss backward: sequence parallel keeps 1/tp of every saved activation but lm_head's
    # all-gathered input, 2 bytes x 8,192 per token of the 131,072, whole on every rank)
    head = 2 * 8192 * 16 * 8192
    assert no_sp.activations_bytes >= inputs and inputs / 8 <= sp.activations_bytes
    assert sp.activations_bytes == pytest.approx(no_sp.activations_bytes / 8 + head * (1 - 1 / 8), rel=1e-12)
    assert sp.peak_bytes < no_sp.peak_bytes / 3


def test_pipeline_first_stage_holds_pp_micro_batches_of_its_layers(models):
    """1F1B: stage 1 holds pp micro-batches in flight, each of L / pp layers: the activations of
    one micro-batch through all L layers (Korthikanti et al. 2022, section 4.2.3), whatever pp."""
    base = dict(TITAN, zero=0, gpus=4, seq=2048, recipe="hf")
    assert one(models, **base, pp=4).activations_bytes == one(models, **base, pp=1).activations_bytes


def test_context_parallel_is_refused_for_inference_and_a_gpu_count_it_does_not_divide():
    code, _out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--cp", "2", "--gpus", "2")
    assert code == 2 and "cp 2 applies to training" in err and len(err.strip().splitlines()) == 1
    code, _out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "full", "--cp", "4", "--gpus", "6")
    assert code == 2 and "tp x pp x cp = 4" in err


@pytest.mark.parametrize("gpu, compatible", [("a100-80gb-sxm", False), ("h100-sxm-80gb", True)])
def test_float8_training_needs_fp8_tensor_cores(gpu, compatible):
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "full", "--recipe", "torchtitan",
                             "--float8", "on", "--gpu", gpu, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["float8"] == "on" and data["compatible"] is compatible


def test_a_vision_tower_is_loaded_beside_the_language_model(models):
    """Gemma 3 4B: 3,880,263,168 language-model parameters and 419,816,304 in the SigLIP tower and
    projector (the checkpoint's 4,300,079,472), all bf16."""
    row = one(models, model="gemma-3-4b", task="infer", precision="bf16", batch=1, seq=64)
    assert row.params == 3_880_263_168 and row.vision_params == 419_816_304
    assert row.weights_bytes == 2 * (3_880_263_168 + 419_816_304)
    assert one(models, model="llama-3.1-8b", task="infer", batch=1, seq=64).vision_params == 0


def test_a_checkpoints_stored_bytes_win_at_its_own_precision(tmp_path):
    path = write_gguf(tmp_path / "tiny-Q8_0.gguf")
    proj = write_gguf(tmp_path / "mmproj.gguf", arch="clip", tensors=[("mm.0.weight", (64, 64)), ("v.norm", (64,))])
    code, out, err = run_cli("estimate", "--model-file", path, "--task", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["weights_bytes"] == data["checkpoint"]["weights_bytes_stored"]
    assert data["checkpoint"]["weights_bytes_source"] == "header"
    code, out, err = run_cli("estimate", "--model-file", path, "--task", "infer", "--precision", "q4_0", "--json")
    other = json.loads(out)
    assert other["weights_bytes"] != data["weights_bytes"]  # another precision: the arithmetic
    code, out, err = run_cli("estimate", "--model-file", path, "--model-file", proj, "--task", "infer", "--json")
    with_proj = json.loads(out)
    assert with_proj["vision_params"] == 64 * 64 + 64
    assert with_proj["weights_bytes"] == data["weights_bytes"] + 2 * (64 * 64 + 64)


def test_torchtitans_op_level_checkpointing_keeps_every_other_matmul(models):
    """Per layer and token (bf16, no tp): the block input 2h, the wq / wv / w1 / w2 outputs
    2(a d + kv + f + h), SDPA's output 2 a d and its fp32 log-sum-exp 4 per head; full checkpointing
    keeps only the input."""
    op_layer = 2 * H + 2 * (4096 + KVD + 14336 + H) + 2 * 4096 + 4 * 32
    rows = estimate(pd.DataFrame([dict(TITAN, gpus=8, seq=8192, batch=2, checkpointing=c) for c in ("full", "op")]),
                    models)
    full, op = rows.iloc[0], rows.iloc[1]
    assert op.forward_phase_bytes - full.forward_phase_bytes == pytest.approx(L * (op_layer - 2 * H) * 2 * 8192,
                                                                            rel=1e-12)


def test_fsdp_under_pipeline_parallel_keeps_the_stage_gathered_and_its_gradients(models):
    """torchtitan: no reshard after forward with pp, and FSDP2 accumulates the micro-batches'
    unsharded gradients in fp32 (mixed precision's reduce dtype): Llama 3.1 8B on pp 2, the stage's
    half of the bf16 weights (N bytes) and of the fp32 gradients (2N bytes), beside the two
    reduce-scatter inputs of a layer (2 x 218,112,000 values x 2 bytes / 2 stages)."""
    from engine.components import scenario_inputs, totals, workspace
    n = 8_030_261_248
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    x = scenario_inputs(pd.DataFrame([dict(TITAN, gpus=8, pp=2, seq=2048, recipe="hf")]), models)
    assert workspace(x, totals(x))["backward"].fixed[0] == pytest.approx(n + 2 * n + 2 * layer * 2 / 2, rel=1e-12)


def test_gpus_needed_under_context_parallel_come_in_whole_groups_of_cp(models, gpus):
    frame = pd.DataFrame([dict(TITAN, gpus=4, cp=cp, seq=16384, gpu="rtx-4090") for cp in (1, 4)])
    one_seq, split = (r for _i, r in estimate(frame, models, gpus).iterrows())
    # one GPU per sequence: its activations never shard, no count fits; four per sequence: a multiple of 4
    assert one_seq.gpus_needed == float("inf") and split.gpus_needed % 4 == 0


def test_context_parallel_verdicts_carry_their_own_allowance(models, gpus):
    frame = pd.DataFrame([dict(TITAN, gpus=8, cp=cp, seq=8192 * cp, gpu="h100-sxm-80gb", allow_long_context=True)
                          for cp in (1, 8)])
    one_gpu, split = (r for _i, r in estimate(frame, models, gpus).iterrows())
    # the measured 3% + the largest allowance: ZeRO-3's 10%, or context parallel's 15% (not measured here)
    assert one_gpu.verdict_margin_pct == MEASURED + 10 and split.verdict_margin_pct == MEASURED + 15


def test_torchtitans_loss_parallel_holds_four_bytes_more_per_logit_each_way(models):
    """torch's loss_parallel (torchtitan's default with TP) computes log-softmax by hand over the
    vocab-sharded logits: the shifted values beside their exp in forward, the zeros, exp and their sum
    beside the saved output in backward: 4 bytes more per logit than the unfused loss in each phase,
    on the 1/tp of the vocabulary each GPU holds (where an unfused loss under TP holds the whole
    vocabulary: transformers and torchtune gather lm_head's output). Without TP it is the unfused loss."""
    vocab, tokens, tp = 128_256, 16 * 8192, 8
    row = dict(TITAN, model="llama-3.1-70b", gpus=256, tp=tp, batch=16, seq=8192)
    out = estimate(pd.DataFrame([row, dict(row, loss="unfused"), dict(TITAN, gpus=8, seq=8192),
                                 dict(TITAN, gpus=8, seq=8192, loss="unfused")]), models)
    par, unfused, one_par, one_unfused = (r for _i, r in out.iterrows())
    assert par.loss == "parallel" and one_par.loss == "parallel"  # the recipe's value
    assert unfused.loss_backward_phase_bytes - par.loss_backward_phase_bytes == pytest.approx(
        (12.0 - 16.0 / tp) * tokens * vocab, rel=1e-9)
    assert unfused.forward_phase_bytes - par.forward_phase_bytes == pytest.approx(
        (10.0 - 14.0 / tp) * tokens * vocab, rel=1e-9)
    assert one_par.loss_backward_phase_bytes == one_unfused.loss_backward_phase_bytes  # tp 1: the same loss
    assert one_par.forward_phase_bytes == one_unfused.forward_phase_bytes


def test_only_loss_parallel_splits_the_training_logits_over_tensor_parallel(models):
    """transformers' tp_plan gathers lm_head's output on every GPU (LlamaForCausalLM `_tp_plan =
    {"lm_head": "colwise_rep"}`) and torchtune replicates it (`ColwiseParallel(output_layouts=Replicate())`):
    the loss holds the whole vocabulary on every rank, as without TP. torchtitan's loss_parallel keeps V / tp.
    Read at the loss backward, between losses of the same row (the rest of the phase is the same)."""
    vocab, tokens, tp = 128_256, 2 * 4096, 4
    base = dict(model="llama-3.1-8b", task="train", method="full", precision="mixed_bf16", optimizer="adamw",
                zero=0, batch=2, seq=4096, grad_checkpointing=True, gpus=tp, tp=tp)
    out = estimate(pd.DataFrame([dict(base, loss="unfused"), dict(base, loss="compiled"),
                                 dict(base, recipe="torchtitan", loss="parallel"),
                                 dict(base, recipe="torchtitan", loss="unfused")]), models)
    unfused, compiled, par, titan_unfused = (r for _i, r in out.iterrows())
    # the unfused loss's 12 bytes per logit against the compiled loss's 2 + 2, both over the whole vocabulary
    assert unfused.loss_backward_phase_bytes - compiled.loss_backward_phase_bytes == pytest.approx(
        (12.0 - 4.0) * tokens * vocab - 8.0 * tokens, rel=1e-12)
    # loss_parallel's 16 bytes per logit over a quarter of the vocabulary, against the unfused loss's 12 over all
    assert titan_unfused.loss_backward_phase_bytes - par.loss_backward_phase_bytes == pytest.approx(
        (12.0 - 16.0 / tp) * tokens * vocab, rel=1e-12)


def test_per_module_checkpointing_keeps_four_inputs_per_layer(models):
    """--checkpointing module (NeMo Automodel's parallelizer wraps each layer's self_attn, mlp, input_layernorm and
    post_attention_layernorm in its own checkpoint_wrapper): four h-wide inputs kept per layer where full keeps one.
    Llama 3.2 1B (16 layers, h 2,048), bf16, 8 x 2,048 tokens: 3 x 2 B x 2,048 x 16 x 16,384 = 3.0 GiB more saved;
    under activation offload the host holds four inputs per layer too."""
    base = dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", batch=8, seq=2048, gpus=8, zero=3,
                padding="unpadded")
    rows = estimate(pd.DataFrame([dict(base, checkpointing=c) for c in ("full", "module")]), models)
    full, module = rows.iloc[0], rows.iloc[1]
    assert bool(module["grad_checkpointing"]) and module["peak_phase"] == full["peak_phase"]
    assert module["activations_bytes"] - full["activations_bytes"] == pytest.approx(3 * 2 * 2048 * 16 * 16384, rel=1e-12)
    off = estimate(pd.DataFrame([dict(base, checkpointing=c, activation_offload="on") for c in ("full", "module")]),
                   models)
    assert off["cpu_bytes"].iloc[1] - off["cpu_bytes"].iloc[0] == pytest.approx(3 * 2 * 2048 * 16 * 16384, rel=1e-12)
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "full", "--checkpointing", "module",
                             "--json")
    assert code == 0 and json.loads(out)["checkpointing"] == "module", err


def test_liger_keeps_the_norms_input_and_swiglus_two_inputs(models):
    """--liger on (Liger-Kernel v0.6.2: LigerRMSNormFunction saves X, W, RSTD; LigerSiLUMulFunction saves a, b).
    Llama 3.2 1B full, bf16, 2 x 1,024 tokens, no checkpointing, the loss unfused in both: per layer each of the two
    norms keeps 2h + 4 B where transformers' keeps 4h + 4 + 2h (8h less for both, h 2,048), and the MLP 2 x 2 f
    where SiLU and the product keep 3 x 2 f (2 f less, f 8,192): 32,768 B per token and layer x 16 layers, plus the
    final norm's 4h: 532,480 B per token, 1,090,519,040 B for 2,048 tokens. A loss left auto becomes fused."""
    base = dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", batch=2, seq=1024,
                padding="unpadded", loss="unfused")
    rows = estimate(pd.DataFrame([dict(base, liger="off"), dict(base, liger="on"), dict(base, liger="on", loss="auto"),
                                  dict(base, loss="auto")]), models)
    assert rows["activations_bytes"].iloc[0] - rows["activations_bytes"].iloc[1] == 1_090_519_040
    assert list(rows["loss"]) == ["unfused", "unfused", "fused", "unfused"]
    assert rows["logits_bytes"].iloc[2] < rows["logits_bytes"].iloc[1] / 10  # (no whole logits under the fused loss)


def test_liger_swiglu_backward_writes_its_gradients_in_place(models):
    """Under checkpointing the backward phase holds the checkpoints, the recomputed layer and the layer's backward
    transients. Liger (v0.6.2 ops/swiglu.py) writes the gradients of gate's and up's outputs into the saved a and b,
    so of transformers' three f-wide gradients only down_proj's input's is new: 2 x 2 f less (f 8,192), beside the
    recomputed layer's 8h + 2f (as without checkpointing) and the final norm's 4h (h 2,048): 73,728 B per token,
    2,048 tokens."""
    base = dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", batch=2, seq=1024,
                padding="unpadded", loss="fused", checkpointing="full")
    rows = estimate(pd.DataFrame([dict(base, liger="off"), dict(base, liger="on")]), models)
    assert rows["backward_phase_bytes"].iloc[0] - rows["backward_phase_bytes"].iloc[1] == 73_728 * 2048


@pytest.mark.parametrize("model", ["gpt-oss-20b", "deepseek-v3", "mistral-small-3.1-24b"])
def test_liger_on_an_architecture_it_does_not_patch_is_off(models, model):
    """Liger-Kernel v0.6.2 patches the model_types of monkey_patch.py MODEL_TYPE_TO_APPLY_LIGER_FN only; gpt_oss,
    deepseek_v3 and mistral3 are not among them, so --liger on runs transformers' modules there: decided off, the
    loss the recipe's, the estimate as with --liger off (and the same for NeMo Automodel's default on)."""
    base = dict(model=model, task="train", method="lora", precision="bf16", batch=1, seq=512)
    rows = estimate(pd.DataFrame([dict(base, liger="off"), dict(base, liger="on"), dict(base, recipe="automodel"),
                                  dict(base, model="llama-3.2-1b", liger="on")]), models)
    assert list(rows["liger"]) == ["off", "off", "off", "on"]
    assert list(rows["loss"])[:2] == ["unfused", "unfused"] and rows["loss"].iloc[3] == "fused"
    assert rows["peak_bytes"].iloc[1] == rows["peak_bytes"].iloc[0]
    code, out, err = run_cli("estimate", "--model", model, "--method", "lora", "--liger", "on", "--seq", "512", "--json")
    assert code == 0, err
    assert any(n.startswith("Liger kernels on → off") for n in json.loads(out)["normalization_notes"])


def test_liger_reads_a_model_files_own_model_type(models):
    """A model read from a config.json is looked up by its model_type: llama is patched, deepseek_v3 is not."""
    from catalog.user import model_from_config_file
    data = ROOT / "tests" / "data" / "good_configs"
    records = [dict(model_from_config_file(data / name), id=f"file-{name}") for name in ("llama-3.2-1b.json", "deepseek-v3.json")]
    frame = pd.concat([models, pd.DataFrame(records)], ignore_index=True)
    rows = estimate(pd.DataFrame([dict(model=r["id"], task="train", method="lora", batch=1, seq=512, liger="on")
                                  for r in records]), frame)
    assert list(rows["liger"]) == ["on", "off"]


@pytest.mark.parametrize("recipe", ["torchtune", "unsloth", "torchtitan", "litgpt"])
def test_liger_on_under_a_recipe_that_builds_its_own_modules_is_off(models, recipe):
    """Liger's patches replace transformers' modeling classes and forwards; torchtune, Unsloth, torchtitan and LitGPT
    build their own modules, which the patches never reach: --liger on is decided off there, and the estimate is the
    recipe's own (engine/stacks.py LIGER_RECIPES)."""
    base = dict(model="llama-3.2-1b", task="train", method="lora", precision="bf16", batch=2, seq=1024, recipe=recipe)
    rows = estimate(pd.DataFrame([dict(base, liger="off"), dict(base, liger="on")]), models)
    assert list(rows["liger"]) == ["off", "off"] and rows["loss"].iloc[1] == rows["loss"].iloc[0]
    assert rows["peak_bytes"].iloc[1] == rows["peak_bytes"].iloc[0]
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--recipe", recipe, "--liger", "on",
                             "--json")
    assert code == 0, err
    assert any(n.startswith(f"Liger kernels on → off (the {recipe} recipe runs its own modules")
               for n in json.loads(out)["normalization_notes"])
