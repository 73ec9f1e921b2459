"""The engine's structure: one physics function per memory component (engine/components.py),
each giving its bytes phase by phase, and an executor (engine/executor.py) that evaluates them.

Each component alone, on one scenario, gives the textbook bytes (computed here by hand); the
phases are exactly the sums of their components' parts; and over a varied grid the components
of the peak phase add up to the peak less the runtime overhead."""

import inspect

import numpy as np
import pandas as pd
import pytest

from engine import estimate, grid
from engine.components import (
    COMPONENT_FUNCTIONS,
    last_logits_bytes,
    physics,
    runtime_overhead,
    scenario_inputs,
    totals,
)
from engine.memory import COMPONENTS, INFER_PHASES, PHASE_COMPONENTS, PHASES, TRAIN_PHASES, Part, assemble

N_7B = 6_738_415_616  # Llama 2 7B: h 4096, MLP 11008, 32 layers, 32 heads (no GQA), vocab 32000
H, F, L, V = 4096, 11008, 32, 32000
OVERHEAD = dict(context_bytes=430 * 2**20, cublas_bytes=32 * 2**20, fragmentation=0.05, nccl_bytes=256 * 2**20)


def parts(models, component, **scenario):
    """One component's {phase: Part} for one scenario (a one-row frame), with scalars."""
    x = scenario_inputs(pd.DataFrame([{"model": "llama-2-7b", **scenario}]), models)
    by_phase = COMPONENT_FUNCTIONS[component](x, totals(x))
    return {phase: Part(*(float(np.asarray(v).ravel()[0]) if np.ndim(v) else float(v) for v in part))
            for phase, part in by_phase.items()}


def test_every_component_has_one_function_and_each_phase_holds_what_its_parts_say(models):
    assert tuple(COMPONENT_FUNCTIONS) == COMPONENTS
    assert set(PHASE_COMPONENTS) == set(PHASES)
    frame = grid(model=["llama-3.2-1b", "llama-2-7b"], task=["train"], method=["full", "lora", "qlora", "freeze"],
                 precision=["bf16", "amp_bf16", "mixed_bf16"], zero=[0, 3], gpus=[1, 4], batch=[2], seq=[128])
    infer = grid(model=["llama-3.2-1b", "llama-2-7b"], task=["infer"], precision=["bf16", "int4", "q4_k_m"],
                 prefill_logits=["last", "all"], batch=[2], seq=[128])
    for f in (frame, infer):
        x = scenario_inputs(f, models)
        t = totals(x)
        for comp, fn in COMPONENT_FUNCTIONS.items():
            for phase in fn(x, t):
                assert comp in PHASE_COMPONENTS[phase], (comp, phase)


def test_a_part_in_a_phase_that_does_not_hold_its_component_is_refused():
    with pytest.raises(AssertionError, match="gradients"):
        assemble({"gradients": {"prefill": Part(per_token=1.0)}})


def test_phases_are_exactly_the_sums_of_their_components_parts(models):
    frame = grid(model=["llama-3.2-3b", "llama-2-13b"], method=["full", "lora", "freeze"], precision=["bf16", "amp_fp16", "mixed_bf16"],
                 optimizer=["adamw", "adamw_8bit", "adafactor"], zero=[1, 2, 3], offload=["none", "optimizer"],
                 grad_checkpointing=[False, True], gpus=[8], batch=[1], seq=[256])
    x = scenario_inputs(frame, models)
    ph = physics(x, OVERHEAD)
    for name in PHASES:
        fixed, shard, per_token = ph.phases[name].totals()
        want = [0.0, 0.0, 0.0]
        for comp in PHASE_COMPONENTS[name]:
            part = ph.parts[comp].get(name)
            if part is not None:
                want = [w + v for w, v in zip(want, part)]
        for got, expected in zip((fixed, shard, per_token), want):
            assert np.array_equal(np.broadcast_to(got, (len(frame),)), np.broadcast_to(expected, (len(frame),)))


# ---- each component alone: the textbook bytes ------------------------------------------------

@pytest.mark.parametrize("precision, per_param", [("bf16", 2), ("fp32", 4), ("amp_bf16", 4), ("mixed_bf16", 2)])
def test_weights_of_llama_2_7b_are_bytes_per_parameter_times_parameters(models, precision, per_param):
    p = parts(models, "weights", precision=precision)
    for phase in TRAIN_PHASES:
        assert p[phase] == Part(per_param * N_7B, 0.0, 0.0)


def test_inference_weights_in_bf16_are_two_bytes_per_parameter(models):
    p = parts(models, "weights", task="infer", precision="bf16")
    assert p["prefill"].fixed == p["logits"].fixed == 2 * N_7B == 13_476_831_232


def test_zero_3_shards_the_weights_over_the_data_parallel_ranks(models):
    p = parts(models, "weights", precision="bf16", zero=3, gpus=8)
    assert p["forward"] == Part(0.0, 2 * N_7B, 0.0)  # fixed + shard / dp: 2N / 8 per GPU
    assert parts(models, "weights", precision="bf16", zero=3, gpus=8, tp=2)["forward"] == Part(0.0, N_7B, 0.0)


def test_gradients_exist_from_the_backward_on(models):
    p = parts(models, "gradients", precision="bf16")
    assert p["optimizer"].fixed == 2 * N_7B
    assert p["backward"].fixed == V * H * 2  # lm_head's, from the first layer's backward on
    assert set(p) == {"backward", "backward_end", "optimizer"}
    # ZeRO-2 is DeepSpeed's stage-2 optimizer, whose step converts the rank's 16-bit gradient partition to
    # fp32 (stage_1_and_2.py v0.16.4 line 1896 `self.flatten(self.averaged_gradients[i]).to(fp32)`): 4 bytes
    # a value, sharded (engine/components.py deepspeed_zero12)
    assert parts(models, "gradients", precision="bf16", zero=2, gpus=4)["optimizer"] == Part(0.0, 4 * N_7B, 0.0)


@pytest.mark.parametrize("precision, optimizer, per_param", [
    ("bf16", "adamw", 2 * 2),        # exp_avg, exp_avg_sq in bf16
    ("fp32", "adamw", 2 * 4),
    ("mixed_bf16", "adamw", 12),     # ZeRO paper's K = 12: fp32 master + two fp32 states
    ("fp32", "sgd", 4),              # momentum
])
def test_optimizer_states_are_states_times_their_bytes(models, precision, optimizer, per_param):
    p = parts(models, "optimizer", precision=precision, optimizer=optimizer)
    for phase in TRAIN_PHASES:
        assert p[phase].fixed == per_param * N_7B


def test_multi_tensor_adamw_takes_one_state_of_temporaries_at_the_step(models):
    assert parts(models, "optimizer_temp", precision="bf16", optimizer="adamw") == {"optimizer": Part(2 * N_7B, 0.0, 0.0)}
    assert parts(models, "optimizer_temp", precision="bf16", optimizer="adamw_fused")["optimizer"].fixed == 0


def test_lora_trains_l_x_r_x_in_plus_out_fp32_parameters(models):
    x = scenario_inputs(pd.DataFrame([{"model": "llama-2-7b", "method": "lora", "lora_rank": 8}]), models)
    t = totals(x)
    assert t.trainable[0] == 32 * 8 * (2 * (4096 + 4096)) == 4_194_304  # q_proj and v_proj, r = 8
    assert t.gradients[0] == 4 * 4_194_304


def test_autocast_keeps_a_16_bit_copy_of_every_linear_weight_and_lm_head(models):
    p = parts(models, "autocast_copies", precision="amp_bf16")
    linear = 32 * (4 * H * H + 3 * H * F)
    assert p["forward"].fixed == 2 * (linear + V * H)
    assert parts(models, "autocast_copies", precision="bf16")["forward"].fixed == 0


def test_checkpointed_activations_are_each_layer_input_and_the_final_norm(models):
    p = parts(models, "activations", precision="bf16", grad_checkpointing=True)
    # each layer's bf16 input (2h per token); the final norm: fp32 input (4h) + its rsqrt (4)
    # + the bf16 output lm_head keeps (2h) and the norm weight's input (2h), both trained
    assert p["forward"].per_token == 32 * 2 * H + (4 * H + 4 + 2 * H + 2 * H)


def test_the_loss_keeps_16_bit_logits_their_fp32_upcast_and_log_softmax(models):
    p = parts(models, "logits", precision="bf16")
    assert p["forward"].per_token == (2 + 4 + 4) * V
    assert p["loss_backward"].per_token == 12 * V  # three fp32 tensors over the vocabulary


def test_generate_keeps_the_last_positions_logits_per_sequence(models):
    x = scenario_inputs(pd.DataFrame([{"model": "llama-2-7b", "task": "infer", "precision": "bf16"}]), models)
    batch = np.array([4.0])
    assert last_logits_bytes(x, batch, lambda v: v)[0] == 4 * V * (2 + 4)  # bf16, then fp32 for sampling
    assert parts(models, "logits", task="infer", precision="bf16")["logits"].per_token == 0


def test_kv_cache_is_two_x_layers_x_kv_width_x_bytes_per_token(models):
    p = parts(models, "kv_cache", task="infer", precision="bf16")
    assert p["prefill"].per_token == p["logits"].per_token == 2 * 32 * 4096 * 2 == 524_288
    assert parts(models, "kv_cache", task="infer", precision="bf16", kv_precision="fp8")["prefill"].per_token == 262_144


def test_zero_3_gathers_the_root_unit_and_one_layer_and_holds_two_reduce_scatter_inputs(models):
    # FSDP2 (issue 12, docs/accuracy.md): the root unit (embedding, untied lm_head, final norm) stays
    # unsharded through backward, one decoder layer (4 h^2 + 3 h f + 2 h) is gathered at a time, and in
    # backward two layers' unsharded gradients wait as reduce-scatter inputs; llama-2-7b, bf16
    p = parts(models, "workspace", precision="bf16", zero=3, gpus=8)
    layer = 4 * H * H + 3 * H * F + 2 * H
    root = 2 * V * H + H
    assert p["forward"].fixed == p["loss_backward"].fixed == (root + layer) * 2 == 929_062_912
    assert p["backward"].fixed == (root + layer) * 2 + 2 * layer * 2
    assert parts(models, "workspace", precision="bf16")["forward"].fixed == 0


def test_runtime_overhead_adds_nccl_from_two_gpus(models):
    x = scenario_inputs(pd.DataFrame([{"model": "llama-2-7b", "gpus": g} for g in (1, 2)]), models)
    context, fragmentation = runtime_overhead(x, OVERHEAD)
    assert list(context) == [462 * 2**20, 718 * 2**20]
    assert fragmentation == 0.05


# ---- the executor: the components of the peak are the peak ------------------------------------

def test_components_at_the_peak_add_up_to_the_peak_less_the_runtime_overhead(models, gpus):
    train = grid(model=["llama-3.2-1b", "llama-2-7b", "llama-3-70b"], gpu=["a100-80gb-sxm"],
                 method=["full", "lora", "qlora", "freeze"], precision=["bf16", "amp_bf16", "mixed_bf16", "fp32"],
                 optimizer=["adamw", "paged_adamw_8bit", "adafactor"], zero=[0, 2, 3], offload=["none", "optimizer"],
                 grad_checkpointing=[False, True], gpus=[1, 4], batch=[1, 8], seq=[512, 2048])
    infer = grid(model=["llama-3.2-1b", "llama-2-7b", "llama-3-70b"], gpu=["h100-sxm-80gb", ""], task="infer",
                 precision=["bf16", "int8", "q4_k_m"], prefill_logits=["last", "all"], gpus=[1, 2], batch=[1, 16],
                 seq=[512, 8192], allow_long_context=True)
    result = estimate(pd.concat([train, infer], ignore_index=True), models, gpus)
    components = sum(result[f"{c}_bytes"] for c in COMPONENTS)
    tensors = result["peak_bytes"] - result["runtime_overhead_bytes"]
    np.testing.assert_allclose(components, tensors, rtol=1e-12)
    # and the peak phase's own total
    phase_total = np.array([result.at[i, f"{p}_phase_bytes"] for i, p in enumerate(result["peak_phase"])])
    np.testing.assert_allclose(phase_total, tensors, rtol=1e-12)
    assert set(result["peak_phase"].astype(str)) >= {"forward", "optimizer", "prefill"}
    assert set(result.loc[result["task"] == "infer", "peak_phase"].astype(str)) <= set(INFER_PHASES)


def test_estimate_is_a_short_front_door():
    from engine import estimate as front
    lines = inspect.getsource(front).splitlines()
    assert len(lines) < 30, "estimate() should validate, normalize and hand over (components, executor)"


def _midpoint(name):
    from engine.speed import _RANGES
    low, _, high, _, _ = _RANGES[name]
    return (low + high) / 2


@pytest.mark.parametrize("name", sorted(__import__("engine.speed", fromlist=["x"]).PER_CONFIG_SETTINGS))
def test_a_per_configuration_speed_setting_given_per_row_gives_each_row_its_own_answer(models, gpus, name):
    """Settings that enter per-configuration figures (rates, prices, power) switch the speed
    model to per row when a frame gives them per row (every SETTINGS key but tokens and
    prompt_tokens, so a new setting is covered the day it is added)."""
    from engine.speed import PER_CONFIG_SETTINGS
    from engine.speed import SETTINGS
    assert set(PER_CONFIG_SETTINGS) == set(SETTINGS) - {"tokens", "prompt_tokens"}
    train = grid(model=["llama-2-7b", "llama-3-8b"], gpu=["h100-sxm-80gb", "rtx-4090"], method=["full", "lora"],
                 batch=[1, 2, 4, 8], seq=[256, 512, 1024, 2048])
    infer = grid(model=["llama-2-7b"], gpu=["h100-sxm-80gb", "rtx-4090"], task="infer", batch=[1, 8], seq=[512, 2048])
    frame = pd.concat([train, infer], ignore_index=True)
    frame[name] = np.where(np.arange(len(frame)) % 2, _midpoint(name), SETTINGS[name])
    result = estimate(frame, models, gpus)
    numbers = [c for c in result.columns if result[c].dtype.kind == "f"]
    for i in (0, 1, 37, 100, len(train), len(frame) - 1):
        alone = estimate(frame.iloc[[i]].reset_index(drop=True), models, gpus)
        pd.testing.assert_frame_equal(result.iloc[[i]].reset_index(drop=True)[numbers], alone[numbers], check_exact=True)


def test_a_one_gpu_row_that_does_not_fit_needs_what_the_full_sweep_gives_it_at_two_gpus(models, gpus):
    """One GPU runs without ZeRO (engine/rules.py); a one-GPU row that does not fit is estimated
    again at two GPUs and the stage asked, by a lean sweep that computes gpus_needed only
    (engine/estimate.py). Its answer is the GPUs needed that a full estimate of the same rows at
    two GPUs gives (no probe there: two GPUs keep the stage)."""
    frame = grid(model=["llama-2-7b", "llama-3-8b", "llama-2-13b"], gpu=["rtx-4090", "a100-40gb-sxm", "h100-sxm-80gb"],
                 method=["full", "lora", "qlora", "freeze"], precision=["bf16", "mixed_bf16"], batch=[1, 8],
                 seq=[512, 2048], recipe=["hf", "torchtune", "unsloth"], gpus=1, zero=[2, 3])
    result = estimate(frame, models, gpus)
    no_fit = ~result["fits"].to_numpy(dtype=bool, na_value=True)
    assert 50 <= no_fit.sum() < len(frame)  # both kinds of row, many probed
    assert (result["zero"].to_numpy() == 0).all()  # the stage was dropped on one GPU
    at_two = estimate(frame[no_fit].assign(gpus=2), models, gpus)
    assert (at_two["zero"].to_numpy() == frame["zero"].to_numpy()[no_fit]).all()
    np.testing.assert_array_equal(result["gpus_needed"].to_numpy()[no_fit], at_two["gpus_needed"].to_numpy())
    assert np.isfinite(at_two["gpus_needed"].to_numpy()).any()


def test_a_dead_results_pooled_block_is_reused_without_the_garbage_collector(models, gpus):
    """engine/buffers.py: a big result's columns are carved from one pooled block, free again
    when no result holds it (CPython's reference count). Nothing of a sweep may keep the block in
    a reference cycle (a Columns that named itself as its root did: the block was held until a
    full garbage collection, which a dashboard or CLI rarely runs, so each sweep took ~800 MB of
    fresh pages instead of reusing them)."""
    import gc
    import sys
    import weakref

    from engine import buffers
    frame = grid(model=["llama-2-7b"], gpu=["rtx-4090"], batch=list(range(1, 129)), seq=list(range(1, 513)),
                 gpus=1, zero=3)  # 65,536 rows: pooled, and one-GPU rows at ZeRO-3 (the probe's scratch)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        estimate(frame, models, gpus)  # (a first sweep sizes the block: the next is as large as it asked)
        result = estimate(frame, models, gpus)
        block = weakref.ref(buffers._idle)  # (a weak reference: no count of its own)
        assert result["peak_bytes"].to_numpy().base is block()
        del result
        holders = sys.getrefcount(buffers._idle)  # (outside the assert, which keeps what it shows)
        assert buffers._idle is block() and holders == 2  # _idle and getrefcount's argument: free
        again = estimate(frame, models, gpus)
        assert again["peak_bytes"].to_numpy().base is block()  # reused, not a fresh one
        del again
    finally:
        if was:
            gc.enable()


def test_a_serving_rows_gpus_needed_is_the_fewest_that_hold_it_split_as_the_engine_splits(models, gpus):
    """gpus_needed of a serving row is the smallest power of two at which the same scenario, split over
    those GPUs as engine/rules.py splits it (tp over the heads, pp for the rest), fits; half of it does not.
    The solver divided only the weights, KV cache and logits by the candidate degree and kept the prefill's
    working set at the row's own tp, so large prefills were asked twice the GPUs they need: DeepSeek-R1-
    Distill-Qwen-7B bf16, 4 x 4,096 tokens on an RTX 3060 12GB said 4 where 2 at tp 2 hold it."""
    frame = grid(model=["deepseek-r1-distill-qwen-7b", "llama-3-8b", "gemma-2-9b", "qwen2.5-32b", "llama-2-70b",
                        "mixtral-8x7b", "gemma-7b"],
                 gpu=["rtx-3060-12gb", "rtx-4090", "a10", "l40s", "h100-sxm-80gb"], task="infer",
                 precision=["bf16", "int4", "int8"], batch=[1, 4, 16], seq=[2048, 4096], gpus=1)
    one = estimate(frame, models, gpus)
    need = one["gpus_needed"].to_numpy(float)
    several = np.isfinite(need) & (need >= 2) & (need <= 64)
    assert several.sum() >= 40
    at = estimate(frame[several].assign(gpus=need[several].astype(int), tp=0, pp=0), models, gpus)
    half = estimate(frame[several].assign(gpus=(need[several] // 2).astype(int), tp=0, pp=0), models, gpus)
    assert at["fits"].to_numpy(dtype=bool, na_value=False).all()
    assert not half["fits"].to_numpy(dtype=bool, na_value=True).any()
    row = one[(one["model"] == "deepseek-r1-distill-qwen-7b") & (one["gpu"] == "rtx-3060-12gb")
              & (one["precision"] == "bf16") & (one["batch"] == 4) & (one["seq"] == 4096)].iloc[0]
    assert row["gpus_needed"] == 2 and not row["fits"]


@pytest.mark.parametrize("scenario", [
    dict(model="mistral-7b", gpu="rtx-5070-ti", precision="bf16", gpus=2, batch=4, seq=1024),
    dict(model="gemma-3-12b", gpu="rtx-4090", precision="fp8", gpus=1, batch=4, seq=2048),
    dict(model="llama-4-scout", gpu="b200-180gb", precision="fp8", gpus=1, batch=2, seq=256),
])
def test_the_longest_context_under_kv_policy_windowed_is_the_longest_that_fits(models, gpus, scenario):
    """max_seq is the longest sequence at the row's batch that fits (one more does not) under kv_policy
    windowed too, where a sliding-window layer keeps only its window: the solver counted the saving at the
    row's own seq, so the longest context came out short (Mistral 7B bf16, 4 sequences on two RTX 5070 Ti:
    11,124 where 17,203 fit; Llama 4 Scout fp8 on a B200: 48,861 where 79,048 fit)."""
    frame = pd.DataFrame([dict(scenario, task="infer", kv_policy="windowed", allow_long_context=True)])
    longest = int(estimate(frame, models, gpus).iloc[0]["max_seq"])
    at = estimate(pd.concat([frame, frame]).assign(seq=[longest, longest + 1]), models, gpus)["fits"].tolist()
    assert at == [True, False], (longest, at)
