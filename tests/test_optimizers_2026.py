"""Optimizers people pick for memory (issue 27 item 3; engine/optimizers.py): bitsandbytes Lion, GaLore
(AdamW, 8-bit, layer-wise), Adam-mini and Muon. Every expected figure is worked out below by hand from
Llama 3.1 8B's config.json and each source's layout (engine/constants.py names the source lines).

Llama 3.1 8B: hidden 4096, MLP 14336, 32 layers, 32 heads of 128 (q, o: 4096 x 4096), 8 KV heads
(k, v: 1024 x 4096), vocabulary 128,256, untied, 8,030,261,248 parameters. A layer's linear weights:
2 x 4096^2 + 2 x 1024 x 4096 + 3 x 4096 x 14336 = 218,103,808; 32 layers: 6,979,321,856; the rest
(embedding, lm_head: 128,256 x 4096 = 525,336,576 each, norms): 1,050,939,392."""

import numpy as np
import pandas as pd
import pytest

from engine.components import COMPONENT_FUNCTIONS, scenario_inputs, totals

N = 8_030_261_248
LINEAR = 6_979_321_856
REST = N - LINEAR            # 1,050,939,392
EMB = 128_256 * 4096         # 525,336,576
GATE = 14336 * 4096          # 58,720,256 (gate, up, down: the largest matrices)
# LoRA r 16 on q_proj, v_proj (fp32 adapters, peft): per layer lora_A 16 x 4096 (q), 4096 x 16 (q's B),
# 16 x 4096 (v), 1024 x 16 (v's B): 16 x (4096 + 4096 + 4096 + 1024) = 212,992 values; 32 layers
LORA = 32 * 16 * 13_312      # 6,815,744

ROWS = {
    # (optimizer, method, precision, extra)
    "lion32": ("lion_32bit", "full", "bf16", {}),
    "lion8": ("lion_8bit", "full", "bf16", {}),
    "lion_lora": ("lion_32bit", "lora", "bf16", {}),
    "galore": ("galore_adamw", "full", "bf16", {}),
    "galore8": ("galore_adamw_8bit", "full", "bf16", {}),
    "galore_amp": ("galore_adamw_8bit", "full", "amp_bf16", {}),
    "galore_lw": ("galore_adamw_layerwise", "full", "bf16", {}),
    "galore_lora": ("galore_adamw", "lora", "bf16", {}),
    "adamw_lora": ("adamw", "lora", "bf16", {}),
    "adam_mini": ("adam_mini", "full", "bf16", {}),
    "adam_mini_lora": ("adam_mini", "lora", "bf16", {}),
    "muon": ("muon", "full", "bf16", {}),
    "muon_lf": ("muon", "full", "bf16", {"recipe": "llama-factory"}),
    "muon_lora": ("muon", "lora", "bf16", {}),
    "muon_lora_lf": ("muon", "lora", "bf16", {"recipe": "llama-factory"}),
    "adamw": ("adamw", "full", "bf16", {}),
}


@pytest.fixture(scope="module")
def parts(models):
    """Every row's states, temporaries and gradients (whole model, one GPU) from one call."""
    frame = pd.DataFrame([dict(model="llama-3.1-8b", task="train", method=meth, precision=p, optimizer=o, batch=1,
                               seq=512, lora_rank=16, lora_targets="q_proj,v_proj", **extra)
                          for o, meth, p, extra in ROWS.values()])
    x = scenario_inputs(frame, models)
    t = totals(x)
    grads = COMPONENT_FUNCTIONS["gradients"](x, t)["optimizer"]
    out = {}
    for i, key in enumerate(ROWS):
        out[key] = dict(states=float(t.states[i]), temps=float(t.temps[i]),
                        grads=float(np.asarray(grads.fixed)[i] + np.asarray(grads.shard)[i]))
    return out


def test_lion_keeps_one_state_fp32_or_8bit_blockwise(parts):
    # bitsandbytes Optimizer1State: one fp32 state1 whatever the parameter's dtype, or uint8 + an fp32
    # absmax per 256 values (every tensor of Llama 3.1 8B has >= 4096 values: hidden 4096); in-place kernel
    assert parts["lion32"]["states"] == N * 4 == 32_121_044_992
    assert parts["lion8"]["states"] == N + N * 4 / 256 == 8_155_734_080
    assert parts["lion32"]["temps"] == parts["lion8"]["temps"] == 0.0
    assert parts["lion_lora"]["states"] == LORA * 4 == 27_262_976


def test_galore_keeps_rank_128_states_and_a_projection_per_decoder_matrix(parts):
    # rank 128, proj_type std: q, o 4096 x 4096: states 2 x 128 x 4096, projection 128 x 4096;
    # k, v 1024 x 4096: 2 x 128 x 4096 + 128 x 1024; gate, up 14336 x 4096 and down 4096 x 14336:
    # 2 x 128 x 14336 + 128 x 4096. In values per layer:
    q = 2 * 128 * 4096 + 128 * 4096                  # 1,572,864 (o the same)
    kv = 2 * 128 * 4096 + 128 * 1024                 # 1,179,648
    mlp = 2 * 128 * 14336 + 128 * 4096               # 4,194,304
    layer = 2 * q + 2 * kv + 3 * mlp                 # 18,087,936
    # bf16: the states and the projection in the gradient's dtype; the rest AdamW's two bf16 states
    assert parts["galore"]["states"] == 32 * layer * 2 + REST * 2 * 2 == 5_361_385_472
    # 8-bit: bitsandbytes' 2 + 8/256 bytes per low-rank value, the projection bf16, the rest adamw_8bit
    low = {"q": 128 * 4096, "kv": 128 * 4096, "mlp": 128 * 14336}
    proj = {"q": 128 * 4096, "kv": 128 * 1024, "mlp": 128 * 4096}
    per_layer = sum(k * (low[m] * 2.03125 + proj[m] * 2) for m, k in (("q", 2), ("kv", 2), ("mlp", 3)))
    assert per_layer == 21_209_088
    assert parts["galore8"]["states"] == 32 * per_layer + REST * 2.03125 == 2_813_411_456


def test_galore_temporaries_are_one_tensors_at_a_time(parts):
    # GaLoreAdamW on the embedding (AdamW group): denom + norm_grad, 2 x 525,336,576 bf16 values, more than
    # the largest SVD (gate 14336 x 4096, bf16 gradient: .float() copy + the solver's copy + U 14336 x 4096
    # + Vh 4096 x 4096, fp32): 4 x (2 x 58,720,256 + 58,720,256 + 16,777,216) = 771,751,936
    assert parts["galore"]["temps"] == 2 * EMB * 2 == 2_101_346_304
    svd = 4 * (2 * GATE + GATE + 4096 * 4096)
    assert svd == 771_751_936
    # 8-bit: the AdamW part updates in place; the SVD beats the projection back (saved weight + two full
    # products: 3 x 58,720,256 x 2 + 2 x 128 x 14336 x 2 = 359,661,568)
    assert parts["galore8"]["temps"] == svd
    # fp32 weights and gradients (amp_bf16): the SVD has no .float() copy, 4 x (58,720,256 + 58,720,256 +
    # 16,777,216) = 536,870,912, and GaLoreAdamW8bit's projection back of gate, all fp32, is larger:
    # saved weight + project_back's product and its scaled copy + p.data and the low-rank gradient
    assert 4 * (2 * GATE + 4096 * 4096) == 536_870_912
    assert parts["galore_amp"]["temps"] == (3 * GATE + 2 * 128 * 14336) * 4 == 719_323_136


def test_galore_layerwise_holds_one_gradient_and_the_same_states(parts):
    # transformers' post-accumulate-grad hook steps and zeroes each parameter: the largest gradient alive
    # (the embedding's or lm_head's, 525,336,576 bf16 values), not the model's 16 GB
    assert parts["galore_lw"]["grads"] == EMB * 2 == 1_050_673_152
    assert parts["galore"]["grads"] == N * 2
    assert parts["galore_lw"]["states"] == parts["galore"]["states"]
    assert parts["galore_lw"]["temps"] == parts["galore"]["temps"]


def test_galore_of_lora_adapters_is_adamw_plus_an_r_by_r_projection(parts):
    # the adapters are nn.Linear under attn: rank min(128, 16) = 16 = AdamW's full states (fp32) plus a
    # 16 x 16 fp32 projection per adapter matrix: 4 matrices x 32 layers x 256 x 4 bytes = 131,072
    assert parts["adamw_lora"]["states"] == LORA * 2 * 4 == 54_525_952
    assert parts["galore_lora"]["states"] == 54_525_952 + 4 * 32 * 256 * 4 == 54_657_024


def test_adam_mini_keeps_a_full_first_moment_and_a_scalar_per_block(parts):
    # per layer: q 32 heads, k 4096 x 1024 / (4096 x 4096 / 32) = 8 blocks, v 1024 rows, o 4096, gate and up
    # 14336 each, down 4096, two norms 1 each: 37,930; embedding and lm_head one per token (128,256 each),
    # the final norm 1; all bf16 like the parameters
    rows = 32 * (32 + 8 + 1024 + 4096 + 2 * 14336 + 4096 + 2) + 2 * 128_256 + 1
    assert rows == 1_470_273
    assert parts["adam_mini"]["states"] == (N + rows) * 2 == 16_063_463_042
    # update and -update of the largest parameter (the embedding), one parameter at a time
    assert parts["adam_mini"]["temps"] == 2 * EMB * 2
    # LoRA: m of every adapter value, one vmean per adapter row (lora_A 16, lora_B out: q 4096, v 1024), fp32
    assert parts["adam_mini_lora"]["states"] == (LORA + 32 * (16 + 4096 + 16 + 1024)) * 4 == 27_922_432


def test_muon_keeps_one_buffer_on_decoder_matrices_and_adamw_on_the_rest(parts):
    assert parts["muon"]["states"] == LINEAR * 2 + REST * 2 * 2 == 18_162_401_280
    assert parts["adamw"]["states"] == N * 2 * 2
    # torch.optim.AdamW (foreach) on the rest: the sqrt of its every second moment, 1,050,939,392 bf16;
    # torch.optim.Muon's Newton-Schulz of gate (6 x 58,720,256 + 4 x 4096^2 = 419,430,400) is less
    assert parts["muon"]["temps"] == REST * 2 == 2_101_878_784
    # LLaMA-Factory's Muon steps AdamW per tensor: two of the embedding's size
    assert parts["muon_lf"]["temps"] == 2 * EMB * 2 == 2_101_346_304


def test_muon_newton_schulz_temporaries_of_the_largest_adapter(parts):
    # LoRA: every adapter is a 2-D matrix -> Muon, one fp32 momentum buffer each, no AdamW part.
    # The largest adapters are 16 x 4096 (s 16, l 4096). torch.optim.Muon (addmm): the fp32 Nesterov update
    # (4 bytes) + the previous and the new bf16 X (4 bytes) per value, + gram_matrix, gram_update (2 x 16^2
    # bf16); LLaMA-Factory's: X / norm, a*X, B @ X and their sum in bf16 (8 bytes) per value
    assert parts["muon_lora"]["states"] == parts["muon_lora_lf"]["states"] == LORA * 4
    assert parts["muon_lora"]["temps"] == 16 * 4096 * (4 + 4) + 4 * 16 * 16 == 525_312
    assert parts["muon_lora_lf"]["temps"] == 16 * 4096 * (4 + 8) + 4 * 16 * 16 == 787_456


def test_an_unknown_optimizer_names_the_value_and_the_accepted_ones(models):
    with pytest.raises(ValueError, match=r"optimizer 'galore' is not accepted; accepted: .*galore_adamw_layerwise.*muon"):
        scenario_inputs(pd.DataFrame([dict(model="llama-3.1-8b", task="train", method="full", precision="bf16",
                                           optimizer="galore", batch=1, seq=512)]), models)
