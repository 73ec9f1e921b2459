"""--flat-params (FSDP1's FlatParameter, engine/stacks.py flat_params) and --use-cache on under checkpointing applied
outside transformers (issue 28). Every expected figure is worked out here from Llama 2 7B's config (32 layers, hidden
4,096, MLP 11,008, vocabulary 32,000, no GQA) and the dtypes:

- autocast caches no cast of a flat parameter's view (benchmarks/check_fsdp1_flat_params.py: 8 casts over two forwards
  where a plain module casts 4), so under checkpointing only the running layer's and lm_head's 16-bit casts exist;
- in a mixed flat parameter (use_orig_params=True, adapters inside the layer's unit) every frozen layer weight gets a
  gradient in the flat parameter's dtype (the same script: 8,448 of 8,448 elements), sharded like the others;
- a checkpointed layer saves nothing in the forward, so a cache kept under checkpointing holds every layer's K/V."""

import pandas as pd
import pytest

from catalog import default_catalog
from engine import estimate
from tests.clirun import run_cli

L, H, F, V = 32, 4096, 11008, 32000
LAYER_LINEAR = 4 * H * H + 3 * H * F          # q, k, v, o and gate, up, down
LAYER_ALL = LAYER_LINEAR + 2 * H              # and the two norms
GPUS, BATCH, SEQ = 8, 4, 4096


@pytest.fixture(scope="module")
def rows():
    cat = default_catalog()
    base = dict(model="llama-2-7b", task="train", precision="amp_bf16", batch=BATCH, seq=SEQ, zero=3, gpus=GPUS,
                gpu="a100-80gb-sxm", grad_checkpointing=True, attention="flash", loop="manual", lora_rank=16,
                lora_targets="q_proj,k_proj,v_proj,o_proj")
    lora = dict(base, method="lora", adapter_dtype="fp32", base_precision="fp32")
    asked = [dict(base, method="full", use_cache="off", flat_params=f) for f in ("off", "on")]
    asked += [dict(lora, use_cache="off", flat_params=f) for f in ("on", "mixed")]
    asked += [dict(base, method="full", use_cache=u) for u in ("on", "auto")]
    asked += [dict(base, method="full", use_cache="off")]  # flat_params left out: the recipe's (off)
    return estimate(pd.DataFrame(asked), cat.models(), cat.gpus())


def test_fsdp1_caches_no_cast_under_checkpointing(rows):
    off, on = rows.iloc[0], rows.iloc[1]
    assert off["flat_params"] == "off" and on["flat_params"] == "on"
    # FSDP2 / DeepSpeed (leaf parameters): every trained weight's bf16 cast, cached until autocast exits
    assert off["autocast_copies_bytes"] == pytest.approx(2 * (L * LAYER_LINEAR + V * H), rel=1e-12)
    # FSDP1: the running layer's and lm_head's only
    assert on["autocast_copies_bytes"] == pytest.approx(2 * (LAYER_LINEAR + V * H), rel=1e-12)


def test_a_mixed_flat_parameter_gives_the_frozen_layer_weights_gradients(rows):
    on, mixed = rows.iloc[2], rows.iloc[3]
    frozen_grad_shard = L * LAYER_ALL * 4 / GPUS  # fp32 flat parameter (an fp32 base), sharded over the GPUs
    assert mixed["model_states_bytes"] - on["model_states_bytes"] == pytest.approx(frozen_grad_shard, rel=1e-12)
    assert mixed["optimizer_phase_bytes"] - on["optimizer_phase_bytes"] == pytest.approx(frozen_grad_shard, rel=1e-12)
    # no optimizer state for them: the frozen originals' .grad stay None
    assert mixed["optimizer_bytes"] == on["optimizer_bytes"]
    # and the LoRA row is then close to full fine-tuning less its optimizer states (dlrover's measured relation)
    assert mixed["peak_bytes"] > on["peak_bytes"]


def test_use_cache_on_under_checkpointing_keeps_every_layers_kv(rows):
    on, auto = rows.iloc[4], rows.iloc[5]
    assert on["use_cache"] == "on" and on["kv_cache_bytes"] == pytest.approx(2 * L * H * BATCH * SEQ * 2, rel=1e-12)
    # auto: transformers' own gradient checkpointing turns the cache off, even for a hand-written loop
    assert auto["use_cache"] == "off" and auto["kv_cache_bytes"] == 0


def test_flat_params_off_is_the_default(rows):
    assert rows.iloc[6]["flat_params"] == "off"
    assert rows.iloc[6]["peak_bytes"] == rows.iloc[0]["peak_bytes"]


def test_a_manual_loop_without_checkpointing_still_builds_the_cache():
    cat = default_catalog()
    r = estimate(pd.DataFrame([dict(model="llama-3.2-1b", task="train", method="full", batch=1, seq=512,
                                    loop="manual", use_cache="auto", grad_checkpointing=False)]),
                 cat.models(), cat.gpus()).iloc[0]
    assert r["use_cache"] == "on"


def test_cli_takes_flat_params_and_says_what_is_accepted():
    code, out, err = run_cli("estimate", "--model", "llama-2-7b", "--method", "lora", "--zero", "3", "--gpus", "8",
                             "--flat-params", "mixed", "--json")
    assert code == 0, err
    assert '"flat_params": "mixed"' in out
    code, out, err = run_cli("estimate", "--model", "llama-2-7b", "--flat-params", "flat")
    assert code == 2
    assert "'flat'" in err and "auto, off, on, mixed" in err


# ---- --accum-sync: gradient accumulation under FSDP's no_sync (engine/stacks.py accum_sync) -------------------------

def _accum_pair(**scenario) -> tuple[pd.Series, pd.Series]:
    cat = default_catalog()
    rows = estimate(pd.DataFrame([dict(scenario, accum_sync=a) for a in ("every", "last")]), cat.models(), cat.gpus())
    return rows.iloc[0], rows.iloc[1]


def test_no_sync_keeps_the_whole_unsharded_gradient_through_later_micro_batches():
    """FSDP1 (--flat-params on), full fine-tuning in bf16: every weight's bf16 gradient whole on each GPU from the first
    micro-batch's backward on (torch _runtime_utils.py: '.grad remains the unsharded gradient from prior no_sync()
    iterations'), in the next micro-batches' forward: 8 GPUs hold the model's 2 bytes a weight each, not an 8th."""
    every, last = _accum_pair(model="llama-2-7b", task="train", method="full", precision="bf16", batch=1, seq=2048,
                              zero=3, gpus=8, grad_checkpointing=True, flat_params="on")
    assert last["forward_phase_bytes"] - every["forward_phase_bytes"] == pytest.approx(last["params"] * 2, rel=1e-12)
    # the last micro-batch's reduce-scatter leaves the step as without accumulation
    assert last["optimizer_phase_bytes"] == every["optimizer_phase_bytes"]


def test_no_sync_over_a_mixed_flat_parameter_keeps_the_frozen_weights_gradients_too():
    every, last = _accum_pair(model="llama-2-7b", task="train", method="lora", precision="bf16", lora_rank=8,
                              lora_targets="q_proj,v_proj", batch=1, seq=1024, zero=3, gpus=2, grad_checkpointing=True,
                              flat_params="mixed", recipe="hf", adapter_dtype="bf16")  # FSDP1 flattens one dtype
    adapters = L * 2 * 8 * (H + H)  # q and v: r x (in + out) each, 32 layers
    assert last["forward_phase_bytes"] - every["forward_phase_bytes"] == pytest.approx((L * LAYER_ALL + adapters) * 2,
                                                                                       rel=1e-12)


def test_fsdp2_accumulates_in_the_reduce_dtype():
    """FSDP2's set_requires_gradient_sync(False): the unsharded gradient in the reduce dtype, fp32 under mixed precision."""
    every, last = _accum_pair(model="llama-2-7b", task="train", method="full", precision="mixed_bf16", batch=1,
                              seq=1024, zero=3, gpus=8, grad_checkpointing=True, flat_params="off")
    assert last["forward_phase_bytes"] - every["forward_phase_bytes"] == pytest.approx(last["params"] * 4, rel=1e-12)


def test_only_the_litgpt_recipe_accumulates_under_no_sync_by_default():
    cat = default_catalog()
    rows = estimate(pd.DataFrame([dict(model="llama-2-7b", task="train", method="lora", recipe=r, zero=3, gpus=2)
                                  for r in ("hf", "litgpt", "torchtune", "deepspeed")]), cat.models(), cat.gpus())
    assert list(rows["accum_sync"]) == ["every", "last", "every", "every"]


def test_deepspeed_accumulates_into_its_partitions():
    """DeepSpeed's ZeRO-2 (the engine's ZeRO-1/2 are its stage-1/2 optimizer) reduces each micro-batch into this rank's
    partition (grads_in_partition): a dp-th of the gradients alive between micro-batches, not the whole; its ZeRO-3
    under the deepspeed recipe keeps the partitions it holds from initialisation: nothing more."""
    every, last = _accum_pair(model="llama-2-7b", task="train", method="full", precision="bf16", batch=1, seq=1024,
                              zero=2, gpus=8, grad_checkpointing=True)
    assert last["forward_phase_bytes"] - every["forward_phase_bytes"] == pytest.approx(last["params"] * 2 / 8, rel=1e-12)
    every, last = _accum_pair(model="llama-2-7b", task="train", method="full", precision="bf16", batch=1, seq=1024,
                              zero=3, gpus=8, grad_checkpointing=True, recipe="deepspeed")
    assert last["forward_phase_bytes"] == every["forward_phase_bytes"]


def test_flat_parameters_are_fsdps_only():
    """--flat-params changes nothing where the sharding is not FSDP: the engine's ZeRO-2 (DeepSpeed's) and ZeRO-3 under
    the DeepSpeed recipes."""
    cat = default_catalog()
    base = dict(model="llama-2-7b", task="train", method="lora", precision="amp_bf16", batch=1, seq=1024, gpus=4,
                grad_checkpointing=True)
    asked = [dict(base, zero=z, recipe=r, flat_params=f) for z, r in ((2, "hf"), (3, "deepspeed")) for f in ("off", "mixed")]
    peaks = estimate(pd.DataFrame(asked), cat.models(), cat.gpus())["peak_bytes"].to_numpy()
    assert peaks[0] == peaks[1] and peaks[2] == peaks[3]
