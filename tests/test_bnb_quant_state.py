"""A bitsandbytes 4-bit base's QuantState under ZeRO-3 / FSDP and CPU offload (engine/components.py
`_quant_state_bytes`): an attribute of the Params4bit and of its Linear4bit, never a parameter, so FSDP1,
FSDP2 and DeepSpeed ZeRO-3 shard and offload only the packed 4-bit data and every GPU keeps the whole
state. Expected figures are worked out here from the models' configs and the engine's bit counts
(engine/constants.py: nf4 4.127 bits = 4 packed + 0.127; nf4_nodq 4.5 = 4 + 0.5), not by the engine."""

import pandas as pd
import pytest

from engine import estimate
from engine.components import _fsdp_gathered_params, host_bytes, scenario_inputs, totals, weights, workspace

# Llama 2 70B: 80 layers, hidden 8192, MLP 28672, 8 KV heads x 128 = 1024: q, o (h x h), k, v (h x 1024),
# gate, up, down (h x f) per layer
N_70B = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
QS_70B = N_70B * 0.127 / 8  # 1,086,660,280.32 bytes: the previous helper's 1.09 GB
# Llama 3 8B: 32 layers, hidden 4096, MLP 14336, 8 KV heads x 128
N_8B = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
QS_8B = N_8B * 0.127 / 8        # 110,796,734.464 bytes
QS_8B_NODQ = N_8B * 0.5 / 8     # 436,207,616 bytes: an fp32 absmax per 64 weights

# the PEFT docs' Llama 2 70B QLoRA runs (catalog/references.yaml peft-docs-70b-qlora-*)
PEFT_70B = dict(model="llama-2-70b", task="train", method="qlora", precision="bf16", optimizer="adamw",
                lora_rank=8, lora_targets="all", lora_dropout=0.1, batch=2, seq=2048, grad_checkpointing=True,
                zero=3, gpus=2, packing="on", attention="flash")
QLORA_8B = dict(model="llama-3-8b", task="train", method="qlora", precision="bf16", optimizer="adamw",
                batch=1, seq=2048, grad_checkpointing=True, zero=3, gpus=2)


def parts(models, *rows):
    x = scenario_inputs(pd.DataFrame(list(rows)), models)
    t = totals(x)
    return x, t, weights(x, t)["optimizer"]


def test_the_figures_worked_here():
    assert N_70B == 68_451_041_280 and QS_70B == pytest.approx(1_086_660_280.32, rel=1e-12)
    assert N_8B == 6_979_321_856 and QS_8B == pytest.approx(110_796_734.464, rel=1e-12)
    assert QS_8B_NODQ == 436_207_616


def test_llama2_70b_fsdp_offload_keeps_the_whole_quant_state_on_each_gpu(models):
    """FSDP1 parameter offload pins the flat parameter's shard on the host; the QuantState (1.087 GB for
    the 70B base's 68.45 B linear weights) stays on every GPU, and only there: the host holds the rest."""
    x, t, w = parts(models, dict(PEFT_70B, offload="all"), PEFT_70B)
    assert x.n_lin[0] == N_70B
    assert w.fixed[0] == pytest.approx(QS_70B, rel=1e-12) and w.shard[0] == 0.0
    # (offload 'all' puts the optimizer's states, temporaries and fp32 gradients there too, once: ZeRO)
    optimizer_side = t.states[0] + t.temps[0] + t.trainable[0] * 4.0
    assert host_bytes(x, t)[0] - optimizer_side == pytest.approx(t.weights[0] - QS_70B, rel=1e-12)
    # without offload: the packed weights and the 16-bit rest sharded over the 2 GPUs, the state whole
    assert w.fixed[1] == pytest.approx(QS_70B, rel=1e-12)
    assert w.shard[1] == pytest.approx(t.weights[1] - QS_70B, rel=1e-12)
    assert host_bytes(x, t)[1] == 0.0
    out = estimate(pd.DataFrame([dict(PEFT_70B, offload="all"), PEFT_70B]), models)
    assert out.weights_bytes[0] == pytest.approx(QS_70B, rel=1e-12)
    assert out.weights_bytes[1] == pytest.approx(QS_70B + (t.weights[1] - QS_70B) / 2, rel=1e-12)


def test_llama3_8b_zero3_two_gpus_holds_half_the_state_more_than_an_even_split(models):
    """Per GPU: (weights - state) / 2 + state, i.e. the even split's weights / 2 plus half the state,
    55,398,367.232 bytes (nf4); 218,103,808 bytes without double quantization (0.5 bits)."""
    x, t, w = parts(models, QLORA_8B, dict(QLORA_8B, bnb_double_quant="off"),
                    dict(QLORA_8B, method="lora", base_precision="nf4"))
    assert x.n_lin[0] == N_8B
    per_gpu = w.fixed + w.shard / 2
    assert per_gpu[0] - t.weights[0] / 2 == pytest.approx(QS_8B / 2, rel=1e-9)
    assert per_gpu[0] - t.weights[0] / 2 == pytest.approx(55_398_367.232, rel=1e-9)
    assert w.fixed[1] == QS_8B_NODQ
    assert per_gpu[1] - t.weights[1] / 2 == pytest.approx(218_103_808, rel=1e-9)
    assert w.fixed[2] == pytest.approx(QS_8B, rel=1e-12)  # LoRA over an nf4 base: the same Linear4bit
    # ZeRO-3's gathered unit (the root's parameters + a decoder layer) carries no state: it is whole already
    gathered = workspace(x, t)["forward"].fixed
    avg = (t.weights - x.n_lin * x.qstate_bits / 8) / x.N
    assert gathered[0] == pytest.approx(_fsdp_gathered_params(x)[0] * avg[0], rel=1e-12)


def test_torchtune_nf4_is_torchao_s_and_shards_its_scales(models):
    """recipe torchtune: torchao's NF4Tensor splits quantized_scalers and quantization_factor with its
    data, so the whole 4.127 bits are sharded as before."""
    x, t, w = parts(models, dict(QLORA_8B, recipe="torchtune", base_precision="nf4"))
    assert x.qstate_bits[0] == 0.0
    assert w.fixed[0] == 0.0 and w.shard[0] == t.weights[0]


# peak_bytes of scenarios the QuantState does not move, from main before the change (14b701d)
UNCHANGED = [
    (dict(model="llama-3.1-8b", task="train", method="full", precision="mixed_bf16", optimizer="adamw", zero=3,
          batch=2, seq=2048, grad_checkpointing=True, gpus=8), 26069363660.8),
    (dict(model="llama-3.1-405b", task="train", method="qlora", precision="bf16", base_precision="nf4",
          optimizer="adamw_fused", lora_rank=8, lora_targets="all", batch=2, seq=2048, grad_checkpointing=True,
          zero=3, gpus=8, recipe="torchtune"), 57229968769.96609),
    (dict(model="llama-3.1-8b", task="train", method="qlora", precision="bf16", base_precision="nf4",
          optimizer="adamw", batch=1, seq=2048, grad_checkpointing=True), 14301708219.1872),
    (dict(model="llama-3.1-8b", task="train", method="qlora", precision="bf16", optimizer="adamw", batch=1,
          seq=2048, grad_checkpointing=True, bnb_double_quant="off"), 14643389644.8),
]


@pytest.mark.parametrize("row, peak", UNCHANGED, ids=["full-bf16-zero3", "torchtune-qlora-zero3", "qlora-1gpu",
                                                       "qlora-1gpu-nodq"])
def test_where_the_state_does_not_move_nothing_changes(models, row, peak):
    assert estimate(pd.DataFrame([row]), models).peak_bytes[0] == pytest.approx(peak, rel=1e-15)
