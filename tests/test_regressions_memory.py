"""Failures found by the property tests and the property search (benchmarks/bench_properties.py),
kept as explicit cases so that they are checked on every run, whatever hypothesis draws.

A new one: paste the scenario dict the search prints into REGRESSIONS, with where it came from.
"""

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.memory import COMPONENTS, INFER_PHASES, PHASES, TRAIN_PHASES

# (why, scenario): each estimated alone and all together in one frame
REGRESSIONS = [
    # Hardening issue, item 8 (test_every_result_is_finite_and_non_negative, at random): the tied
    # embedding's not-yet-set .grad was taken off the gradients on the GPU even where ZeRO-2 +
    # optimizer offload keeps none there: gradients_bytes -1,050,673,152 at backward_end.
    ("issue 8: ZeRO-2 + offload, tied, fp32, one GPU",
     dict(model="llama-3.2-1b", task="train", method="full", precision="fp32", optimizer="adamw",
          batch=1, seq=1, zero=2, offload="optimizer", gpus=1)),
    # its kin, from the property search (seed 1, 20,000 scenarios): the other tied model, 16-bit
    ("search: ZeRO-2 + offload, Llama 3.2 3B, mixed_fp16, sgd",
     dict(model="llama-3.2-3b", task="train", method="full", precision="mixed_fp16", optimizer="sgd",
          batch=1, seq=110, zero=2, offload="optimizer", gpus=1, headroom=0.28595935990269694,
          lora_rank=2, lora_targets="q_proj,k_proj,v_proj,o_proj", freeze_layers=67, gpu="a100-40gb-sxm")),
    ("kin: ZeRO-2 + offload over 8 GPUs (the sharded part)",
     dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", optimizer="adamw",
          batch=1, seq=1, zero=2, offload="optimizer", gpus=8)),
    ("kin: ZeRO-3 + offload all, tensor parallel",
     dict(model="llama-3.2-3b", task="train", method="full", precision="amp_bf16", optimizer="adamw_8bit",
          batch=1, seq=1, zero=3, offload="all", gpus=4, tp=2)),
    ("kin: ZeRO-3 + offload optimizer, paged states, checkpointing",
     dict(model="llama-3.2-1b", task="train", method="full", precision="mixed_bf16", optimizer="paged_adamw_8bit",
          batch=1, seq=1, zero=3, offload="optimizer", gpus=1, grad_checkpointing=True)),
    ("kin: ZeRO-1 + offload keeps the gradients on the GPU",
     dict(model="llama-3.2-1b", task="train", method="full", precision="fp32", optimizer="adafactor",
          batch=1, seq=1, zero=1, offload="optimizer", gpus=2)),
]
IDS = [why for why, _ in REGRESSIONS]
PART_COLUMNS = [f"{c}_bytes" for c in COMPONENTS] + ["runtime_overhead_bytes"]


def assert_consistent(frame: pd.DataFrame, out: pd.DataFrame) -> None:
    """Every component finite and >= 0; peak = components + runtime overhead = the peak phase's
    total + runtime overhead; the peak phase is the task's largest; fit columns NaN (fits NA)
    exactly where no GPU is chosen."""
    for col in [c for c in out.columns if c.endswith("_bytes") and not c.endswith("phase_bytes")
                and c not in ("usable_bytes", "capacity_bytes", "safe_peak_bytes")]:
        values = out[col].to_numpy(dtype=float)
        assert np.all(np.isfinite(values) & (values >= 0)), (col, values)
    peak = out["peak_bytes"].to_numpy(dtype=float)
    parts = sum(out[c].to_numpy(dtype=float) for c in PART_COLUMNS)
    np.testing.assert_allclose(parts, peak, rtol=1e-12)
    train = (frame["task"] == "train").to_numpy()
    zero = out["zero"].to_numpy(dtype=float)
    for i, phase in enumerate(out["peak_phase"].astype(str)):
        own = TRAIN_PHASES if train[i] else INFER_PHASES
        if train[i] and zero[i] not in (1, 2):  # DeepSpeed ZeRO-1/2's reduction after backward: its rows only
            own = tuple(p for p in own if p != "grad_reduce")
        assert phase in own
        totals = {p: out[f"{p}_phase_bytes"].iloc[i] for p in PHASES}
        assert all(np.isfinite(totals[p]) and totals[p] >= 0 for p in own), totals
        assert all(np.isnan(totals[p]) for p in PHASES if p not in own), totals
        assert totals[phase] == max(totals[p] for p in own)
        assert totals[phase] + out["runtime_overhead_bytes"].iloc[i] == pytest.approx(peak[i], rel=1e-12)
    no_gpu = (frame["gpu"].fillna("").astype(str) == "").to_numpy() if "gpu" in frame else np.ones(len(frame), bool)
    for col in ("usable_bytes", "capacity_bytes", "memory_used_fraction", "max_batch", "max_seq", "gpus_needed",
                "safe_peak_bytes", "verdict_margin_pct"):
        values = out[col].to_numpy(dtype=float)
        assert np.all(np.isnan(values[no_gpu])), (col, values)
        assert not np.any(np.isnan(values[~no_gpu])), (col, values)
    assert np.all(out["fits"].isna().to_numpy() == no_gpu)


@pytest.mark.parametrize("scenario", [sc for _, sc in REGRESSIONS], ids=IDS)
def test_regression_alone(models, gpus, scenario):
    frame = pd.DataFrame([scenario])
    assert_consistent(frame, estimate(frame, models, gpus))


def test_regressions_together_with_and_without_a_gpu(models, gpus):
    # one frame: each case with no GPU and on an H100, 80 rows (the engine's grouped path)
    rows = [{**sc, "gpu": ""} for _, sc in REGRESSIONS] + [{**sc, "gpu": "h100-sxm-80gb"} for _, sc in REGRESSIONS]
    frame = pd.DataFrame(rows * 7)
    assert_consistent(frame, estimate(frame, models, gpus))


# DeepSpeed ZeRO-1/2 (engine/components.py deepspeed_zero12, v0.16.4 stage_1_and_2.py): the reduction bucket
# of reduce_bucket_size values (5e8) in the trained parameters' dtype through backward (backward(), lines
# 2048-2060), and under optimizer offload a copy buffer of the largest trained tensor on the GPU from __init__
# (temp_grad_buffer_for_gpu_offload, lines 483-485): Llama 3.2 1B's embedding, 128,256 x 2,048 values
BUCKET = 500_000_000


def test_issue_8_the_gpu_holds_weights_and_the_tied_buffers_at_the_end_of_backward(models):
    """With ZeRO-2 and optimizer offload the gradients go to the host: at the end of backward
    the GPU holds the weights and autograd's three V x h buffers of the tied embedding
    (lm_head's gradient, the embedding's, their sum), no gradient and no optimizer state; beside
    them DeepSpeed's reduction bucket and its offload copy buffer (fp32 here: 4 bytes a value)."""
    row = estimate(pd.DataFrame([REGRESSIONS[0][1]]), models).iloc[0]
    V, h, N = 128_256, 2048, 1_235_814_400
    assert row.peak_phase == "backward_end"
    assert row.gradients_bytes == 0 and row.optimizer_bytes == 0
    assert row.workspace_bytes == 3 * V * h * 4 + BUCKET * 4 + V * h * 4
    assert row.weights_bytes == N * 4
    assert row.backward_end_phase_bytes == N * 4 + 3 * V * h * 4 + BUCKET * 4 + V * h * 4


@pytest.mark.parametrize("scenario, grad_bytes", [
    (REGRESSIONS[0][1], 4),
    (REGRESSIONS[2][1], 2),
    # found by the property search's per-phase check (seed 1): backward_end is not the peak here,
    # so the negative gradients were hidden in its total (weights + 3 V x h - V x h / 4)
    (dict(model="llama-3.2-1b", task="train", method="full", precision="fp16", optimizer="sgd", batch=19, seq=33751,
          grad_checkpointing=True, zero=2, offload="optimizer", gpus=4, headroom=0.029709192296939524, gpu="mi250x"), 2),
    (dict(model="llama-3.2-3b", task="train", method="full", precision="bf16", optimizer="adamw_8bit", batch=15, seq=2,
          zero=2, offload="optimizer", gpus=384, tp=6), 2),
], ids=["issue 8", "8 GPUs", "not the peak", "tp 6"])
def test_zero_2_offload_backward_end_is_weights_and_tied_buffers(models, gpus, scenario, grad_bytes):
    row = estimate(pd.DataFrame([scenario]), models, gpus).iloc[0]
    m = models.set_index("id").loc[scenario["model"]]
    tied_buffers = 3 * m.vocab_size * m.hidden_size * grad_bytes / scenario.get("tp", 1)
    # DeepSpeed's bucket and offload copy buffer (the embedding, the largest trained tensor), as above
    deepspeed = BUCKET * grad_bytes + m.vocab_size * m.hidden_size * grad_bytes / scenario.get("tp", 1)
    # the weights are the same in every training phase; nothing else is on the GPU then
    assert row.backward_end_phase_bytes == pytest.approx(row.weights_bytes + tied_buffers + deepspeed, rel=1e-12)


def test_zero_2_without_offload_keeps_the_tied_grads_slot_in_its_partition_buffer(models):
    """Without offload the sharded gradients stay on the GPU. DeepSpeed ZeRO-2 allocates the rank's
    gradient partition whole at its first bucket's reduction (stage_1_and_2.py v0.16.4
    copy_grads_in_partition, lines 1343-1356: `torch.empty(numel of the partition's parameters)`),
    the tied embedding's slot too, before autograd has summed its two gradients: N x 2 bytes / 4
    ranks in bf16 (before DeepSpeed's buffers were modelled: (N - V x h) x 2 / 4). bf16 under ZeRO-2
    runs as DeepSpeed's mixed_bf16 (engine/rules.py, the precision rule): an fp32 master copy and fp32
    states, sharded (before that rule: AdamW's two states in bf16, N x 2 x 2 / 4)."""
    sc = dict(model="llama-3.2-1b", task="train", method="full", precision="bf16", optimizer="adamw_fused",
              batch=1, seq=1, zero=2, gpus=4)
    row, off = estimate(pd.DataFrame([sc, {**sc, "offload": "optimizer"}]), models).itertuples()
    V, h, N = 128_256, 2048, 1_235_814_400
    # backward_end: weights + states / 4 + the partition buffer + the tied buffers + the bucket, and with
    # offload the weights + the tied buffers + the bucket + the offload copy buffer (the embedding, bf16)
    assert row.precision == off.precision == "mixed_bf16"
    states = N * (4 + 2 * 4) / 4  # DeepSpeed's fp32 master copy and AdamW's two fp32 states, sharded
    assert row.backward_end_phase_bytes - off.backward_end_phase_bytes == pytest.approx(
        states + N * 2 / 4 - V * h * 2, rel=1e-12)


def test_a_row_without_a_gpu_has_no_fit_figures_beside_one_with(models, gpus):
    # found by the property search: beside a row with a GPU, a row without one read max_batch 0
    # and max_seq 0 (alone it reads NaN, as its gpus_needed and usable_bytes do)
    sc = dict(model="llama-3.1-8b", task="train", method="freeze", precision="mixed_bf16", batch=31, seq=1)
    for frame in (pd.DataFrame([{**sc, "gpu": ""}, {**sc, "gpu": "h100-sxm-80gb"}]),
                  pd.DataFrame([{**sc, "gpu": ""}, {**sc, "gpu": "h100-sxm-80gb"}] * 40)):
        out = estimate(frame, models, gpus)
        assert_consistent(frame, out)
        assert np.isnan(out["max_batch"].iloc[0]) and np.isnan(out["max_seq"].iloc[0])
        assert out["max_batch"].iloc[1] >= 31


def test_a_training_row_keeps_no_kv_cache_beside_a_windowed_serving_row(models, gpus):
    # issue 24 (make bench's property search, seed 7630439920007785647): a gpt-oss-20b training row
    # (sliding-window layers) read kv_cache_bytes -1,423,319,040 inside a frame holding serving rows,
    # 0 alone: the windowed cache's saving was added to every row of the frame, training rows too
    train = dict(model="gpt-oss-20b", task="train", method="freeze", precision="bf16", optimizer="sgd", batch=33,
                 seq=1883, freeze_layers=24, zero=2, offload="optimizer", gpus=4, allow_long_context=True,
                 gpu="gh200-96gb")
    serve = dict(model="gpt-oss-20b", task="infer", precision="bf16", batch=4, seq=8192, kv_policy="windowed",
                 gpu="gh200-96gb")
    alone = estimate(pd.DataFrame([train]), models, gpus).iloc[0]
    frame = pd.DataFrame([train, serve] * 3)
    together = estimate(frame, models, gpus)
    assert alone["kv_cache_bytes"] == 0
    for col in together.columns:  # the training rows' every result, as alone
        a, b = alone[col], together[col].iloc[0]
        assert (pd.isna(a) and pd.isna(b)) or a == b, (col, a, b)
    assert (together["kv_cache_bytes"].to_numpy() >= 0).all()
    assert together["kv_cache_bytes"].iloc[1] > 0  # the serving row keeps its (windowed) cache


def test_bf16_adafactor_on_a_model_of_one_dominant_tensor_needs_more_than_fp32(models, gpus):
    """Property-search seed 1511800570530616253 (bench_properties.py --n 200000): pure bf16 full training of
    gemma-3-270m with Adafactor peaked above fp32. Not a defect: transformers' Adafactor.step copies a 16-bit
    parameter and its gradient to fp32 (16 bytes a value of the largest tensor, 8 in fp32), and its
    262,144 x 640 embedding is 63% of the model, so the step costs 8 x largest more where the weights and
    gradients save 4 bytes a parameter. The optimizer phases differ by exactly that."""
    row = {"model": "gemma-3-270m", "task": "train", "method": "full", "optimizer": "adafactor", "batch": 12,
           "seq": 36, "zero": 3, "gpus": 1, "gpu": "a40", "float8": "on", "headroom": 0.0}
    out = estimate(pd.DataFrame([{**row, "precision": "fp32"}, {**row, "precision": "bf16"}]), models, gpus)
    m = models.set_index("id").loc["gemma-3-270m"]
    largest = 262_144 * 640  # the embedding (vocab x hidden), its largest tensor
    assert int(m["vocab_size"]) * int(m["hidden_size"]) == largest
    params = out["params"].iloc[0]
    step = out["optimizer_phase_bytes"].to_numpy()
    assert step[1] - step[0] == pytest.approx(8 * largest - 4 * params, abs=1)
    assert out["peak_bytes"].iloc[1] > out["peak_bytes"].iloc[0]


def test_a_serving_row_that_fits_needs_no_more_gpus_than_it_has(models, gpus):
    """Property search (bench_properties.py --n 12000 --seed 583491386): gpt-oss-120b, nf4 weights, eager attention at
    1,753 tokens on one RTX PRO 6000 fits (its peak phase, the attention scores, leaves ~5 MB) yet gpus_needed was 2:
    the GPU-count solver put the int4 library's workspace bytes (23.6 MB, the workspace phase's own) on top of the
    attention scores, which no phase holds together. (Since bitsandbytes is known to leave a mixture of experts' fused
    experts in 16-bit, engine/constants.py BNB_FUSED_EXPERTS, the row needs a B300: the headroom is the largest at
    which it still fits there, found by bisection, so the slack is far under that workspace.)"""
    row = dict(model="gpt-oss-120b", task="infer", precision="nf4", batch=4, seq=1753, kv_precision="int4",
               prefill_logits="all", headroom=0.02391585811698865, allow_long_context=True, gpus=1, tp=1, pp=1,
               gpu="b300", decode_cache="dynamic", bnb_4bit_input="kept", int4_kernel="none",
               bnb_double_quant="on")
    out = estimate(pd.DataFrame([row]), models, gpus).iloc[0]
    assert out["peak_phase"] == "attention"
    assert bool(out["fits"]) and out["gpus_needed"] == 1


def test_the_longest_context_between_the_masks_window_and_the_caches_fits(models, gpus):
    """Property search seed 4491125714197518905 (tests/test_property_search.py, the limits that fit): Llama 4 Scout,
    bf16 on a B300, an SDPA prefill under kv_policy windowed. Its chunked layers' mask counts from the 8,192-token
    window on, while the windowed cache keeps llama.cpp's SWA cells (8,192 + 512 = 8,704) before it saves anything;
    the solver took the piece between the two as if neither applied: max_seq 8,703, where 8,600 did not fit. Every
    piece is solved now (engine/executor.py _windowed_root): the row fits at its max_seq and not one token more.
    (Since transformers' Llama 4 prefill is known to run every expert on every token, engine/constants.py
    DENSE_EXPERTS_MODEL_TYPES, the default headroom puts its longest context near 2,000 tokens: the headroom here is the
    one at which the row's safe peak at 8,450 tokens fills the card, found from the estimate at that length, so the
    limit falls in the same piece; found again when the 10% allowance for Llama 4's shared experts went, 2026-12-06.)"""
    row = dict(model="llama-4-scout", gpu="b300", task="infer", precision="bf16", gpus=1, batch=1, seq=1024,
               kv_policy="windowed", attention="sdpa", padding="unpadded", allow_long_context=True,
               headroom=0.1456531707029275)
    longest = int(estimate(pd.DataFrame([row]), models, gpus)["max_seq"].iloc[0])
    assert 8192 < longest < 8704  # (between the two windows: the piece the solver skipped)
    at = estimate(pd.DataFrame([{**row, "seq": longest}, {**row, "seq": longest + 1}]), models, gpus)["fits"].tolist()
    assert at == [True, False], (longest, at)


def test_litgpt_s_fused_qkv_adapter_on_an_mla_model_pages_no_fewer_values_than_it_trains(models, gpus):
    """Property search seed 4971602839768075449: DeepSeek-V3 LoRA on q, k, v, o under recipe litgpt with bitsandbytes'
    paged 32-bit AdamW. The values bitsandbytes keeps on the device (tensors under 1e5 elements) were counted for
    LitGPT's fused qkv adapter as h x the enabled projections, but MLA's q and kv paths read h plus their ranks:
    more small values than the adapters hold, so the paged states came out negative (-1.19 MB) and the host's bytes
    too low. Each projection's own input width now: the paged states are the trainable states less the small ones,
    never below zero, and a dense model's figures are what they were."""
    row = dict(model="deepseek-v3", task="train", method="qlora", precision="fp32", optimizer="paged_adamw_32bit",
               batch=40, seq=4, grad_checkpointing=True, lora_rank=1, lora_targets="q_proj,k_proj,v_proj,o_proj",
               zero=0, offload="optimizer", gpus=4, tp=1, pp=4, base_precision="q5_k_m", recipe="litgpt",
               gpu="rtx-4060-ti-16gb")
    out = estimate(pd.DataFrame([row, {**row, "method": "lora", "precision": "amp_fp16", "base_precision": "q2_k",
                                       "offload": "none", "gpus": 1, "pp": 1, "lora_targets": "k_proj"},
                                 {**row, "lora_rank": 8}]),
                   models, gpus)
    assert (out["paged_optimizer_bytes"] >= 0).all() and (out["cpu_bytes"] >= 0).all()
    assert out["paged_optimizer_bytes"].iloc[0] == 0  # r 1: every adapter tensor under 1e5 values, none paged
    assert out["paged_optimizer_bytes"].iloc[2] > 0  # r 8: the larger adapters are
    assert (out["paged_optimizer_bytes"] <= out["trainable_params"] * 8).all()  # 32-bit AdamW: two fp32 states
