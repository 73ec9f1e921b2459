"""Textbook figures the engine must reproduce exactly (computed here by hand, not by the engine)."""

import pandas as pd
import pytest

from engine import estimate

N_7B = 6_738_415_616
# Llama 2 7B by hand: 32 layers x (4 x 4096^2 attention + 3 x 4096 x 11008 MLP) linear weights;
# the rest is 2 x 32000 x 4096 (embedding, lm_head) + 65 x 4096 (RMSNorm weights).
LINEAR_7B = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
REST_7B = 2 * 32000 * 4096 + 65 * 4096
ROWS_7B = 32 * (4 * 4096 + 3 * 11008 - 11008 + 4096)  # output rows of q,k,v,o,gate,up,down


def one(models, **scenario):
    return estimate(pd.DataFrame([scenario]), models).iloc[0]


def test_linear_and_rest_add_up_to_the_published_count():
    assert LINEAR_7B + REST_7B == N_7B
    assert ROWS_7B == 32 * (4096 * 5 + 11008 * 2)


@pytest.mark.parametrize("precision, expected", [
    ("fp32", 4 * N_7B),
    ("bf16", 2 * N_7B),
    ("fp16", 2 * N_7B),
    # LLM.int8: one byte per linear weight + one fp32 scale per output row; the rest 16-bit
    ("int8", LINEAR_7B + ROWS_7B * 4 + REST_7B * 2),
    # GPTQ/AWQ group 128: 4 bits + 16-bit scale + 16-bit zero per 128 weights = 4.25 bits
    ("int4", LINEAR_7B * 4.25 / 8 + REST_7B * 2),
    # NF4 with double quantization: 4.127 bits on the linear layers (QLoRA paper)
    ("nf4", LINEAR_7B * 4.127 / 8 + REST_7B * 2),
    # GGUF: bits per weight over the whole file
    ("q8_0", N_7B * 8.5 / 8),
    ("q4_k_m", N_7B * 4.8944 / 8),
    ("q2_k", N_7B * 3.35 / 8),
])
def test_inference_weights_at_every_precision(models, precision, expected):
    row = one(models, model="llama-2-7b", task="infer", precision=precision, batch=1, seq=16)
    assert row.weights_bytes == pytest.approx(expected, rel=1e-12)


def test_bf16_weights_are_exactly_the_issue_figure(models):
    assert one(models, model="llama-2-7b", task="infer", precision="bf16").weights_bytes == 13_476_831_232


@pytest.mark.parametrize("precision", ["amp_bf16", "mixed_bf16"])
def test_mixed_precision_adam_is_16_bytes_per_parameter(models, precision):
    row = one(models, model="llama-2-7b", task="train", method="full", precision=precision,
              optimizer="adamw_fused", batch=1, seq=16)
    assert row.model_states_bytes == 16 * N_7B
    assert round(row.model_states_bytes / 1e9, 1) == 107.8


@pytest.mark.parametrize("model_id, per_token", [
    ("llama-2-7b", 512 * 1024),   # 2 x 32 layers x 32 KV heads x 128 x 2 bytes
    ("llama-3-70b", 320 * 1024),  # 2 x 80 layers x 8 KV heads x 128 x 2 bytes (GQA)
    ("llama-3-8b", 128 * 1024),   # 2 x 32 x 8 x 128 x 2
])
def test_kv_cache_per_token_in_bf16(models, model_id, per_token):
    row = one(models, model=model_id, task="infer", precision="bf16", batch=3, seq=1000)
    assert row.kv_cache_bytes == 3 * 1000 * per_token


def test_kv_cache_of_the_issue_scenario_is_two_gib(models):
    row = one(models, model="llama-2-7b", task="infer", precision="bf16", batch=1, seq=4096)
    assert row.kv_cache_bytes == 2 * 2**30


def test_kv_cache_precision_is_its_own_setting(models):
    fp8 = one(models, model="llama-3-8b", task="infer", precision="int4", kv_precision="fp8", batch=1, seq=1024)
    assert fp8.kv_cache_bytes == 1024 * 64 * 1024


def _zero_model():
    # The ZeRO paper's example: Psi = 7.5B parameters (only the count matters for model states).
    return pd.DataFrame([{
        "id": "zero-7.5b", "hidden_size": 4096, "intermediate_size": 16384, "num_layers": 36,
        "num_heads": 32, "num_kv_heads": 32, "head_dim": 128, "vocab_size": 32000,
        "max_context": 2048, "tied_embeddings": False, "params": 7_500_000_000,
    }])


@pytest.mark.parametrize("stage, expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_model_states_per_gpu(stage, expected_gb):
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (mixed precision Adam).
    sc = pd.DataFrame([{"model": "zero-7.5b", "task": "train", "method": "full", "precision": "mixed_fp16",
                        "optimizer": "adamw_fused", "zero": stage, "gpus": 64, "batch": 1, "seq": 16}])
    row = estimate(sc, _zero_model()).iloc[0]
    assert round(row.model_states_bytes / 1e9, 1) == expected_gb


def test_lora_trains_the_adapter_parameters_only(models):
    # r=8 on q_proj and v_proj of Llama 2 7B: 32 layers x 2 modules x 8 x (4096 + 4096)
    row = one(models, model="llama-2-7b", task="train", method="lora", precision="bf16", lora_rank=8,
              lora_targets="q_proj,v_proj", batch=1, seq=16)
    assert row.trainable_params == 32 * 2 * 8 * (4096 + 4096) == 4_194_304
    all_linear = one(models, model="llama-3-8b", task="train", method="lora", precision="bf16", lora_rank=16,
                     lora_targets="all", batch=1, seq=16)
    per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 2 * (4096 + 14336) + (14336 + 4096)
    assert all_linear.trainable_params == 32 * 16 * per_layer


def test_qlora_base_is_nf4_on_the_linear_layers(models):
    sc = dict(model="llama-2-7b", task="train", method="qlora", precision="bf16", batch=1, seq=16)
    adapters = 4_194_304 * 4  # peft keeps adapters in fp32 (autocast_adapter_dtype=True)
    # the rest (embeddings, lm_head, norms) in the 16-bit load dtype without peft's prepare_model_for_kbit_training
    row = one(models, kbit_prep="off", **sc)
    assert row.weights_bytes == pytest.approx(LINEAR_7B * 4.127 / 8 + REST_7B * 2 + adapters, rel=1e-12)
    # the hf recipe calls it (issue 13, engine/stacks.py kbit_prep): every non-4-bit parameter in fp32
    row = one(models, **sc)
    assert row.weights_bytes == pytest.approx(LINEAR_7B * 4.127 / 8 + REST_7B * 4 + adapters, rel=1e-12)


def test_tensor_parallel_splits_kv_by_kv_heads_never_below_one(models):
    # Llama 3 70B has 8 KV heads: TP 16 still keeps one head (1/8 of the cache) per GPU.
    tp8 = one(models, model="llama-3-70b", task="infer", precision="bf16", batch=1, seq=1000, gpus=8, tp=8)
    tp16 = one(models, model="llama-3-70b", task="infer", precision="bf16", batch=1, seq=1000, gpus=16, tp=16)
    assert tp8.kv_cache_bytes == tp16.kv_cache_bytes == 1000 * 320 * 1024 / 8
    assert tp16.weights_bytes == pytest.approx(tp8.weights_bytes / 2)


def test_offload_moves_optimizer_states_to_cpu(models):
    on = one(models, model="llama-2-13b", task="train", method="full", precision="mixed_bf16",
             optimizer="adamw_fused", zero=3, gpus=8, batch=1, seq=512)
    off = one(models, model="llama-2-13b", task="train", method="full", precision="mixed_bf16",
              optimizer="adamw_fused", zero=3, gpus=8, offload="optimizer", batch=1, seq=512)
    n13 = 13_015_864_320
    assert on.cpu_bytes == 0
    # 12 bytes/param of fp32 master + Adam states, plus an fp32 gradient copy for the CPU step
    assert off.cpu_bytes == pytest.approx(n13 * (12 + 4))
    assert off.model_states_bytes == pytest.approx(2 * n13 / 8)  # only 16-bit weights stay, sharded


def test_peak_is_one_phase_and_components_add_up(models):
    row = one(models, model="llama-3-8b", task="train", method="full", precision="bf16", batch=2, seq=1024)
    parts = [c for c in row.index if c.endswith("_bytes") and c.split("_bytes")[0] in (
        "weights", "gradients", "optimizer", "optimizer_temp", "autocast_copies", "activations",
        "logits", "kv_cache", "workspace", "runtime_overhead")]
    assert sum(row[c] for c in parts) == pytest.approx(row.peak_bytes)
    phase_total = row[f"{row.peak_phase}_phase_bytes"]
    assert phase_total + row.runtime_overhead_bytes == pytest.approx(row.peak_bytes)
    others = [row[f"{p}_phase_bytes"] for p in ("forward", "loss_backward", "backward", "backward_end", "optimizer")]
    assert phase_total == max(others)
