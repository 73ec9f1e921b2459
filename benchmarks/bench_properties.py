"""Nightly-sized property search: random scenarios over the whole input space, checked at once.

    make bench            # runs this first: 50,000 scenarios, then 200 hypothesis examples per property
    .venv/bin/python benchmarks/bench_properties.py [--n 50000] [--seed S] [--chunk 10000]
                                                    [--hypothesis N] [--catalog-only]

The suite's property tests (tests/test_engine_properties.py) draw the same examples on every
run (the "ci" hypothesis profile in tests/conftest.py), so that a submission never fails CI by
luck; this searches far wider. It draws --n scenarios with numpy's random generator (the seed
is printed: rerun with --seed to reproduce) over every catalog model (and a few odd shapes,
SYNTHETIC, unless --catalog-only), task, method, precision, optimizer, ZeRO stage, offload, GPU
count, tensor / pipeline split, LoRA rank and targets, frozen layers, base and KV precision,
batch 1..64 (and some far larger), seq 1..the model's context (tiny ones often, and beyond the
context with allow_long_context), headroom, the training objective (dpo for half the training rows under a
recipe with a DPO trainer, each dpo_reference the recipe runs), each with a catalog GPU or none, and per
estimate() call the default or random runtime-overhead settings. Companion rows (changed
copies) go in the same frames, so a few `estimate()` calls check everything:

  * every byte column and phase total finite and >= 0 (NaN for the other task's phases); each
    component >= 0 in every phase of the scenario's task, not only the peak one (white box: the
    engine's per-phase component tables; the offending row is then found by bisection);
  * peak = the sum of the components + runtime overhead = the peak phase's total + overhead;
    the peak phase is the largest of the scenario's task;
  * fit columns: NaN (fits NA) without a GPU; with one max_batch, max_seq >= 0, gpus_needed >= 1
    (or inf), fits = the tensors' peak <= capacity = batch <= max_batch, fits => seq <= max_seq
    and gpus_needed <= gpus;
  * a row's result does not depend on its frame: a sample re-estimated in frames of 1..8 rows;
  * more batch, a longer seq or LoRA dropout never uses less; one more ZeRO stage, offloading the optimizer
    (and the parameters), twice the data-parallel ranks, pure bf16 instead of fp32 never use
    more per GPU (each where it holds physically: see `companions`).

--hypothesis N then runs tests/test_engine_properties.py and tests/test_regressions_memory.py
under the "nightly" profile: N fresh random examples per property (a failure prints its blob).

Prints the seed, per broken check its count and first offending scenario as a dict (ready for
tests/test_regressions_memory.py), and last one line
  property_search seed=<S> scenarios=<N> rows=<rows estimated> violations=<V> seconds=<s>
Exit status 1 when anything was found (or the hypothesis run failed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import default_catalog  # noqa: E402
from engine import estimate  # noqa: E402
from engine.components import scenario_inputs, totals  # noqa: E402
from engine.constants import (  # noqa: E402
    DS_FP32_MASTER_RECIPES, DS_REDUCE_BUCKET_SIZE, DS_SUB_GROUP_SIZE, DS_ZERO3_RECIPES, GALORE_LAYERWISE, INFER_PRECISIONS, KV_BYTES, LORA_MODULES, MAX_GPUS, OPTIMIZERS, TRAIN_PRECISIONS,
    TRANSFORMERS_EAGER_MODEL_TYPES,
)
from engine.params import model_types  # noqa: E402
from engine.memory import COMPONENTS, INFER_PHASES, PHASES, TRAIN_PHASES  # noqa: E402
from engine.scenarios import BASE_PRECISIONS  # noqa: E402
from engine.stacks import DEFAULT_RECIPE, DPO_NO_ADAPTER_COPY, DPO_NO_PRECOMPUTED, DPO_RECIPES, RECIPE_NAMES, recipe_value  # noqa: E402
from engine.params import total_params  # noqa: E402

engine_estimate = importlib.import_module("engine.executor")  # where _component_tables lives (engine/executor.py)

METHODS = ("full", "lora", "qlora", "freeze")
# the frozen bases the engine takes (engine/scenarios.py BASE_PRECISIONS: not the 2026 inference formats)
LORA_BASES = tuple(b for b in BASE_PRECISIONS)
QLORA_BASES = tuple(b for b in BASE_PRECISIONS if b not in ("fp32", "bf16", "fp16"))
TARGETS = ("q_proj,v_proj", "all", "q_proj,k_proj,v_proj,o_proj", "gate_proj,up_proj,down_proj") + LORA_MODULES
DP = np.array([1, 1, 1, 2, 3, 4, 8, 64, 1000])
PART_COLUMNS = [f"{c}_bytes" for c in COMPONENTS] + ["runtime_overhead_bytes"]
REL = 1e-9  # float tolerance of the sums (bytes up to ~1e15: a few bytes of rounding)


# Odd shapes beside the catalog's Llamas (a user catalog may hold any config.json): tiny, tied,
# q/k/v biases (Qwen2), the intermediate narrower than hidden, a vocabulary far wider, h not a
# power of two (>= bitsandbytes' 4096-value threshold), one layer, one head.
SYNTHETIC = (
    # id, hidden, intermediate, layers, heads, kv heads, head_dim, vocab, tied, qkv_bias, context
    ("synthetic-tiny-tied", 8, 16, 1, 2, 1, 4, 10, True, False, 64),
    ("synthetic-tiny-bias", 16, 8, 2, 4, 4, 4, 3, False, True, 128),
    ("synthetic-qwen2-0.5b", 896, 4864, 24, 14, 2, 64, 151936, True, True, 32768),
    ("synthetic-wide-vocab", 4096, 1024, 2, 32, 8, 128, 256000, True, False, 8192),
    ("synthetic-one-head", 5000, 3, 1, 1, 1, 7, 1, False, False, 4096),
)


def with_synthetic(models: pd.DataFrame) -> pd.DataFrame:
    """The catalog's models and the SYNTHETIC shapes (parameter counts from engine.params)."""
    rows = []
    for mid, h, f, layers, heads, kv, d, vocab, tied, bias, ctx in SYNTHETIC:
        rows.append({"id": mid, "name": mid, "family": "synthetic", "hidden_size": h, "intermediate_size": f,
                     "num_layers": layers, "num_heads": heads, "num_kv_heads": kv, "head_dim": d, "vocab_size": vocab,
                     "max_context": ctx, "tied_embeddings": tied, "qkv_bias": bias,
                     "params": total_params(h, f, layers, heads, kv, d, vocab, tied, bias)})
    extra = pd.DataFrame(rows)
    return pd.concat([models, extra[[c for c in extra.columns if c in models.columns]]], ignore_index=True)


def pick(rng, values, n):
    values = np.asarray(values, dtype=object)
    return values[rng.integers(0, len(values), n)]


def divisors(k: int, most: int) -> list[int]:
    return [d for d in range(1, min(k, most) + 1) if k % d == 0]


def random_scenarios(rng: np.random.Generator, n: int, models: pd.DataFrame, gpus: pd.DataFrame,
                     recipes: tuple[str, ...] = (), objectives: bool = False) -> pd.DataFrame:
    """n valid scenarios (no combination the engine refuses), drawn independently per column; with
    `recipes`, each row's recipe drawn from them too (the default search keeps the engine's default, hf); with
    `objectives`, each row's objective (dpo for half the training rows under a recipe with a DPO trainer) and
    dpo_reference too, without changing any other column's draw."""
    mi = rng.integers(0, len(models), n)
    m = models.iloc[mi].reset_index(drop=True)
    heads, layers, ctx = (m[c].to_numpy(dtype=np.int64) for c in ("num_heads", "num_layers", "max_context"))
    train = rng.random(n) < 0.7
    # (a hybrid linear-attention model trains in no scenario the engine accepts: engine/scenarios.py check_combinations)
    if "linear_attention_layers" in m:
        train &= ~(m["linear_attention_layers"].fillna(0).to_numpy(dtype=float) > 0)
    method = pick(rng, METHODS, n)
    precision = np.where(train, pick(rng, TRAIN_PRECISIONS, n), pick(rng, INFER_PRECISIONS, n))
    zero = rng.integers(0, 4, n)
    offload = np.where(zero == 3, pick(rng, ("none", "optimizer", "all"), n), pick(rng, ("none", "optimizer"), n))
    offload = np.where(train, offload, "none")
    base = np.where(method == "lora", pick(rng, LORA_BASES, n), np.where(method == "qlora", pick(rng, QLORA_BASES, n), "auto"))
    # tensor parallel: a divisor of the heads (up to 128); pipeline: up to the layers
    tp = np.array([rng.choice(divisors(int(h), 128)) for h in heads]) * (rng.random(n) < 0.5) if n else np.zeros(0, int)
    tp = np.maximum(tp, 1)
    pp = np.where(rng.random(n) < 0.7, 1, np.minimum(rng.choice([2, 3, 4, 8, 10_000], n), layers))
    # context parallel (issue 27): training rows only, a whole group of cp GPUs per sequence
    cp = np.where(train & (rng.random(n) < 0.15), pick(rng, (2, 4), n), 1).astype(np.int64)
    gpus_n = tp * pp * cp * DP[rng.integers(0, len(DP), n)]
    gpus_n = np.where(gpus_n > 1_000_000, tp * pp * cp, gpus_n)  # the engine accepts up to 1,000,000
    # batch: mostly 1..64, some far larger; seq: log-uniform up to the context, some beyond it
    batch = np.where(rng.random(n) < 0.9, rng.integers(1, 65, n), rng.integers(65, 100_000, n))
    allow = rng.random(n) < 0.05
    top = np.where(allow, ctx * 4, ctx)
    seq = np.floor(np.exp(rng.random(n) * np.log(top + 1.0))).clip(1, top).astype(np.int64)
    seq = np.where(rng.random(n) < 0.1, rng.integers(1, 9, n), seq)  # tiny sequences, often
    gpu_ids = np.append(gpus["id"].astype(str).to_numpy(), "")
    frame = pd.DataFrame({
        "model": m["id"].to_numpy(), "task": np.where(train, "train", "infer"), "method": method,
        "precision": precision, "optimizer": pick(rng, OPTIMIZERS, n), "batch": batch, "seq": seq,
        "grad_checkpointing": rng.random(n) < 0.5, "lora_rank": pick(rng, (1, 2, 8, 16, 64, 256, 4096), n),
        "lora_targets": pick(rng, TARGETS, n),
        # trainable last layers: 1 up to the model's layers (more is refused: engine/scenarios.py)
        "freeze_layers": np.minimum(rng.integers(1, 140, n), layers),
        "zero": zero, "offload": offload, "gpus": gpus_n, "tp": tp, "pp": pp, "base_precision": base,
        "kv_precision": pick(rng, ("auto",) + tuple(KV_BYTES), n),
        "prefill_logits": pick(rng, ("last", "all"), n), "headroom": np.where(rng.random(n) < 0.2, rng.random(n) * 0.5, 0.0),
        "allow_long_context": allow, "gpu": pick(rng, gpu_ids, n), "cp": cp,
        # issue 27/28's switches, each value (auto: the recipe's)
        "checkpointing": pick(rng, ("auto", "none", "full", "selective", "offload", "op"), n),
        "sequence_parallel": pick(rng, ("auto", "off", "on"), n), "float8": pick(rng, ("auto", "off", "on"), n),
        "decode_cache": pick(rng, ("auto", "dynamic", "tuple"), n),
        "bnb_4bit_input": pick(rng, ("auto", "freed", "kept"), n),
        # inference libraries' buffers (engine/stacks.py int4_kernel, bnb_double_quant, rope_cache)
        "int4_kernel": pick(rng, ("auto", "none", "exllama", "autoawq_fused"), n),
        "bnb_double_quant": pick(rng, ("auto", "on", "off"), n),
        "rope_cache": pick(rng, ("auto", "none", "layers"), n),
        # GaLore's rank (0: the recipe's). Not the loss: with a small loss (chunked, fused, compiled) FSDP2's
        # end of backward (every shard + the last layer's activations, measured) can exceed ZeRO-2's at dp 2,
        # which the ZeRO relation below does not yet tell apart (seed 2638450126658629195 with the loss drawn)
        "galore_rank": pick(rng, (0, 1, 16, 128, 1024), n),
        # peft's lora_dropout (0: its default; read by lora / qlora rows only)
        "lora_dropout": np.where(rng.random(n) < 0.3, pick(rng, (0.05, 0.1, 0.5), n), 0.0),
        # the batch's padding (auto: the recipe's): unpadded rows of sliding-window models take the mask's
        # terms from the window on (issue 28, engine/components.py sliding_window_training)
        "padding": pick(rng, ("auto", "padded", "unpadded"), n),
        # FSDP1's flat parameters, gradient accumulation under no_sync, the training cache (auto: the recipe's)
        "flat_params": pick(rng, ("auto", "off", "on", "mixed"), n),
        "accum_sync": pick(rng, ("auto", "every", "last"), n),
        "use_cache": pick(rng, ("auto", "on", "off"), n),
    })
    if recipes:
        frame["recipe"] = pick(rng, recipes, n)
    if objectives:
        # the training objective and DPO's reference (engine/components.py dpo_parts), from a generator spawned off
        # rng: spawning reads rng's seed sequence, not its stream, so every column above (and every later draw from
        # rng: companions, overheads) is what it was without them (benchmarks/result_hash.py's seeds keep their rows)
        sub = rng.spawn(1)[0]
        recipe = frame["recipe"].astype(str).to_numpy() if "recipe" in frame else np.full(n, DEFAULT_RECIPE)
        dpo = train & np.isin(recipe, DPO_RECIPES) & (sub.random(n) < 0.5)
        frame["objective"] = np.where(dpo, "dpo", "sft")
        # only the references the row's recipe runs (engine/scenarios.py refuses the others): adapters_off where there
        # are adapters to disable, precomputed not under DPO_NO_PRECOMPUTED, a copy beside adapters not under
        # DPO_NO_ADAPTER_COPY (an sft row takes any value and reads none: drawn there too)
        adapters = np.isin(method, ("lora", "qlora"))
        ref = np.where(adapters, pick(sub, ("auto", "copy", "adapters_off", "precomputed"), n),
                       pick(sub, ("auto", "copy", "precomputed"), n))
        ref = np.where(dpo & (ref == "precomputed") & np.isin(recipe, DPO_NO_PRECOMPUTED), "auto", ref)
        ref = np.where(dpo & (ref == "copy") & adapters & np.isin(recipe, DPO_NO_ADAPTER_COPY), "auto", ref)
        frame["dpo_reference"] = ref
    return frame


def decided_switch(frame: pd.DataFrame, switch: str) -> np.ndarray:
    """Each row's stack switch as engine/rules.py decides it: 'auto' takes its recipe's (engine/stacks.py)."""
    n = len(frame)
    # (object arrays: a fixed-width "<U4" array of "auto" would cut "linear_chunked" to "line")
    value = frame[switch].astype(str).to_numpy(dtype=object) if switch in frame else np.full(n, "auto", dtype=object)
    recipe = frame["recipe"].astype(str).to_numpy() if "recipe" in frame else np.full(n, DEFAULT_RECIPE)
    method = frame["method"].astype(str).to_numpy()
    gc = frame["grad_checkpointing"].to_numpy(dtype=bool)
    auto = value == "auto"
    value = value.copy()
    value[auto] = [recipe_value(r, switch, m, g) for r, m, g in zip(recipe[auto], method[auto], gc[auto])]
    return value


def decided_loss(frame: pd.DataFrame) -> np.ndarray:
    """Each row's loss as engine/rules.py decides it: 'auto' takes its recipe's (engine/stacks.py)."""
    return decided_switch(frame, "loss")


def deepspeed_stage_holds(frame: pd.DataFrame, models: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row (training, no offload): where a relation over ZeRO stages must hold for DeepSpeed's ZeRO-1 and
    ZeRO-2, the stage-1/2 optimizer (engine/components.py deepspeed_zero12, DeepSpeed v0.16.4
    stage_1_and_2.py), whose own buffers can rightly outweigh what a stage or an offload saves:

    - "0 -> 1": its reduction bucket (reduce_bucket_size values, whatever the trained count: backward() lines
      2048-2060), the rank's gradient partition beside every full gradient after backward
      (copy_grads_in_partition), the embedding's flat copy where it is reduced alone, and at the step the fp32
      gradient partition beside the 16-bit one and its flat copy (line 1896) against the plain data-parallel
      step's 16-bit gradients: at most max(B g + V h g, B g + T g / dp, (4 + 2 g) T / dp) more in any phase,
      while sharding the states saves S (1 - 1/dp). Held where that saving covers it (not LoRA's few
      adapters, whose 5e8-value bucket alone is 2 GB in fp32), or on one GPU (both run as stage 0);
    - "1 -> 2": ZeRO-2 allocates its gradient partition at its first bucket's reduction, early in backward beside
      every layer's activations, where ZeRO-1 holds lm_head's gradient alone (DeepSpeedExamples issue #336, a
      DeepSpeed maintainer: "the peak memory usage of stage 2 can be larger than that of stage 1 ... when the
      dominant memory usage is activation"). Held where no bucket fills before backward ends (T <= B per GPU:
      ZeRO-2's partition is allocated in the epilogue), or on one GPU;
    - "offload" (a ZeRO-1/2 row's optimizer offloaded): the offload path keeps a copy buffer of the largest
      trained tensor on the GPU (temp_grad_buffer_for_gpu_offload, lines 483-485) and copies each of the rank's
      gradients to the host after a float64 copy for its norm (line 1266; the engine takes the tensor whole,
      p0, beside lm_head's or the embedding's own gradient where reduced alone): at most p0 g + 8 p0 + V h g
      more than on the GPU, while the GPU no longer holds the states, S / dp. Held where that covers it (on one
      GPU the row without offload runs as stage 0, engine/rules.py, without DeepSpeed's bucket, B g, and
      with its 16-bit gradients at the step where the offload path copies the fp32 partition back, 4 T: those too).

    T: trained values per GPU, g: their bytes, S: the optimizer states (and master weights) per GPU, B:
    reduce_bucket_size (engine/constants.py DS_REDUCE_BUCKET_SIZE), p0: the largest trained tensor."""
    x = scenario_inputs(frame, models)
    t = totals(x)
    T = np.asarray(t.trainable / x.mp, dtype=float)
    g, dp = np.asarray(x.gb, dtype=float), np.asarray(x.dp, dtype=float)
    B = float(DS_REDUCE_BUCKET_SIZE)
    # (paged states are not counted on the GPU: nothing saved there)
    states = np.where(np.asarray(x.paged, dtype=bool), 0.0, t.states / x.mp)
    full = np.asarray(x.full, dtype=bool)
    vh = np.where(full, x.V * x.h / x.mp, 0.0)
    layer = np.where(np.asarray(x.lora, dtype=bool), x.r * np.maximum(x.h, x.f), x.lin_max) / x.mp
    p0 = np.where(full, np.maximum(vh, layer), layer)
    added = np.maximum(np.maximum(B * g + vh * g, B * g + T * g / dp), (4 + 2 * g) * T / dp)
    one_gpu = (frame["gpus"] == 1).to_numpy()
    return {"0 -> 1": (states * (1 - 1 / dp) >= added) | one_gpu, "1 -> 2": (T <= B) | one_gpu,
            "offload": states / dp >= p0 * g + 8 * p0 + vh * g + np.where(one_gpu, B * g + 4 * T, 0.0)}


def deepspeed_fp32_master(frame: pd.DataFrame, zero: np.ndarray | None = None,
                          precision: np.ndarray | None = None) -> np.ndarray:
    """Per row (optionally at another ZeRO stage or precision): pure 16-bit full or freeze training whose
    ZeRO stage is DeepSpeed's, which keeps an fp32 master copy and fp32 states whatever the model's dtype
    (engine/constants.py DS_FP32_MASTER_RECIPES: stage_1_and_2.py single_partition_of_fp32_groups; the
    engine runs such a row as mixed_*, engine/rules.py): ZeRO 1 or 2 under the hf, llama-factory, axolotl
    and deepspeed recipes, 3 under deepspeed, llama-factory and axolotl (DS_ZERO3_RECIPES), where the stage is kept (more than one GPU, or an
    offload). A relation that changes the stage or the precision across that line compares two
    precisions, not the one change it names."""
    zero = frame["zero"].to_numpy() if zero is None else zero
    precision = frame["precision"].astype(str).to_numpy() if precision is None else precision
    recipe = frame["recipe"].astype(str).to_numpy() if "recipe" in frame else np.full(len(frame), "hf")
    kept = (frame["gpus"] > 1).to_numpy() | (frame["offload"] != "none").to_numpy()
    stage = (np.isin(recipe, DS_FP32_MASTER_RECIPES) & np.isin(zero, (1, 2))) | (np.isin(recipe, DS_ZERO3_RECIPES) & (zero == 3))
    return ((frame["task"] == "train").to_numpy() & frame["method"].isin(("full", "freeze")).to_numpy()
            & np.isin(precision, ("bf16", "fp16")) & stage & kept)


def deepspeed_zero3_covered(frame: pd.DataFrame, models: pd.DataFrame, dp: np.ndarray) -> np.ndarray:
    """Per row: True unless its ZeRO-3 would be DeepSpeed's (engine/constants.py DS_ZERO3_RECIPES) and the
    weights it shards, (1 - 1/dp) of a GPU's N / (tp x pp) parameters, do not cover what DeepSpeed's stage-3
    optimizer keeps beside them (engine/components.py `deepspeed_zero3`, bounded from above with every
    parameter trained): the reduction bucket B g from the start, the gradient partitions N / (tp pp dp) g
    through the forward, the fp32 gradient of a sub group at the step. At few ranks a stage-3 row rightly
    needs more than its stage-2 one (dp 2 under tp 32: 70B's shard of weights saved is smaller than those)."""
    recipe = frame["recipe"].astype(str).to_numpy() if "recipe" in frame else np.full(len(frame), "hf")
    ds3 = np.isin(recipe, DS_ZERO3_RECIPES)
    if not ds3.any():
        return np.ones(len(frame), dtype=bool)
    n = models.set_index("id").loc[frame["model"], "params"].to_numpy(float)
    per_gpu = n / (frame["tp"] * frame["pp"]).to_numpy(float)
    g = np.where(frame["precision"].isin(("fp32", "amp_bf16", "amp_fp16")).to_numpy(), 4.0, 2.0)
    dp = np.maximum(dp.astype(float), 1.0)
    added = DS_REDUCE_BUCKET_SIZE * g + per_gpu / dp * g + np.minimum(per_gpu / dp, DS_SUB_GROUP_SIZE) * 4.0
    return ~ds3 | ((1.0 - 1.0 / dp) * per_gpu * g >= added)


def companions(base: pd.DataFrame, rng: np.random.Generator, models: pd.DataFrame) -> list[tuple[str, np.ndarray, pd.DataFrame]]:
    """(relation, rows of base it applies to, changed copies of those rows): each changed row
    must not use more memory per GPU than its base row (or, for 'more', not less)."""
    out = []
    more_batch = base.copy()
    more_batch["batch"] += rng.integers(1, 65, len(base))
    out.append(("more batch never uses less memory", np.arange(len(base)), more_batch))
    longer = base.copy()
    longer["seq"] += rng.integers(1, 2049, len(base))
    longer["allow_long_context"] = True
    out.append(("a longer seq never uses less memory", np.arange(len(base)), longer))
    # LoRA dropout keeps a mask per adapted module and, where the adapters kept their input itself, a copy
    # of their own (engine/memory.py layer_activation_bytes): never less than without it
    # (not under the unsloth recipe: a dropout above 0 turns its fast LoRA kernels off and its adapters from bf16 to
    # fp32 (engine/rules.py lora_dropout), a change of dtype as well; under Adafactor, whose step copies a 16-bit
    # parameter to fp32, the bf16 adapters rightly need more at the step: `--recipes all`, seed 3019500688206321294)
    unsloth = (base["recipe"].astype(str) == "unsloth").to_numpy() if "recipe" in base else np.zeros(len(base), bool)
    rows = np.flatnonzero((base["lora_dropout"] == 0).to_numpy() & ~unsloth)
    dropped = base.iloc[rows].copy()
    dropped["lora_dropout"] = 0.1
    out.append(("LoRA dropout never uses less memory", rows, dropped))
    train = (base["task"] == "train").to_numpy()
    zero, off = base["zero"].to_numpy(), base["offload"].to_numpy()
    dp = (base["gpus"] // (base["tp"] * base["pp"])).to_numpy()
    # ZeRO-3 (FSDP2, engine/components.py workspace) holds the root unit (embedding, lm_head, final
    # norm) and one decoder layer gathered whole, and two layers' gradients in its reduce-scatter
    # buffers: it saves memory only where those (at most root + 3 layers of parameters) are less than
    # what sharding the weights saves (every catalog model at dp >= 2, not a two-layer model)
    m = models.set_index("id").loc[base["model"]]
    h, V, N = m["hidden_size"].to_numpy(float), m["vocab_size"].to_numpy(float), m["params"].to_numpy(float)
    root = V * h * np.where(m["tied_embeddings"].to_numpy(bool), 1, 2) + h
    layer = (N - root) / m["num_layers"].to_numpy(float)
    units_less = np.maximum(root + 3 * layer, 2 * np.maximum(layer, V * h)) <= (1 - 1 / dp) * N
    # ZeRO-3's end of backward also holds its last layer's activations (recomputed under checkpointing)
    # and that layer's backward transients beside every gradient shard (FSDP2 measured: engine/components.py
    # gradients), where ZeRO-2's end holds the full weights and its shard without them: at dp 2 the weights
    # it shards (1/2 of them) can weigh less than one layer's activations of a long micro-batch in fp32 (seed
    # 692118919241752913: mistral-7b full fp32, 19 x 1,902 tokens, checkpointing offload, 0.17% more). So
    # only where one layer's activations, bounded from above (every tensor engine/memory.py
    # layer_activation_bytes names, in 4 bytes, eager attention's scores and the padded mask), are at
    # most half of what sharding the weights saves
    a = m["num_heads"].to_numpy(float)
    hd = np.where(m["head_dim"].to_numpy(float) > 0, m["head_dim"].to_numpy(float), h / np.maximum(a, 1))
    kvh = m["num_kv_heads"].to_numpy(float)
    ffn = np.maximum(m["intermediate_size"].to_numpy(float),
                     m["experts_per_token"].to_numpy(float) * m["expert_intermediate_size"].to_numpy(float))
    seq_b = base["seq"].to_numpy(float)
    per_token = 4 * (16 * h + 4 * a * hd + 4 * kvh * hd + 4 * a + 8 * ffn + 8) + a * seq_b * 12 + seq_b * 4
    weight_b = np.where((base["precision"] == "fp32").to_numpy(), 4.0, 2.0)
    act_small = per_token * base["batch"].to_numpy(float) * seq_b <= 0.5 * (1 - 1 / np.maximum(dp, 1)) * N * weight_b
    # (not to ZeRO-3 under pipeline parallel: FSDP2 there keeps its stage gathered and accumulates its
    # unsharded gradients through the step, engine/components.py workspace, which rightly costs more)
    pp_rows = (base["pp"] > 1).to_numpy()
    # (nor over a quantized frozen base: the comparison above counts parameters, but a QLoRA base's
    # 4-bit weights are what ZeRO-3 shards while its gathered root unit, the embedding and lm_head, stays
    # 16-bit: where the loss is small (a chunked or fused loss) that unit rightly costs more than the
    # sharding saves, e.g. qwen2.5-vl-7b's untied 152k-entry head at dp 2)
    quantized = (base["method"] == "qlora").to_numpy() | ~base["base_precision"].isin(
        ("auto", "bf16", "fp16", "fp32")).to_numpy()
    # ZeRO-1 and ZeRO-2 are DeepSpeed's, whose buffers can rightly cost more than the stage shards
    # (`deepspeed_stage_holds`: 0 -> 1 where sharding the states covers them, 1 -> 2 where no bucket fills in backward)
    holds = deepspeed_stage_holds(base, models)
    # (nor pure 16-bit where the next stage is DeepSpeed's and this one is not: its fp32 master copy and
    # states, `deepspeed_fp32_master`, rightly cost more than the stage shards at few ranks)
    to_fp32_master = deepspeed_fp32_master(base, zero=zero + 1) & ~deepspeed_fp32_master(base)
    # (nor 2 -> 3 where ZeRO-3 is DeepSpeed's and what it shards of the weights does not cover the stage-3
    # optimizer's own buffers, `deepspeed_zero3_covered`)
    ds3_ok = deepspeed_zero3_covered(base, models, dp)
    # (nor 2 -> 3 where ZeRO-3 is FSDP's and the run accumulates under no_sync, accum_sync last, or holds FSDP1's mixed
    # flat parameters, flat_params mixed: FSDP keeps every gradient unsharded between micro-batches, FSDP2 in fp32
    # under mixed precision, and a mixed flat parameter gives the frozen weights gradients, where DeepSpeed's ZeRO-2
    # keeps its partition: the FSDP stage rightly holds more, engine/components.py gradients)
    fsdp_only = np.zeros(len(base), dtype=bool)
    if "accum_sync" in base:
        recipe = base["recipe"].astype(str).to_numpy() if "recipe" in base else np.full(len(base), "hf")
        accum = base["accum_sync"].eq("last").to_numpy() | (base["accum_sync"].eq("auto").to_numpy() & (recipe == "litgpt"))
        mixed = base["flat_params"].eq("mixed").to_numpy() if "flat_params" in base else np.zeros(len(base), dtype=bool)
        fsdp_only = (accum | mixed) & ~np.isin(recipe, DS_ZERO3_RECIPES)
    rows = np.flatnonzero(train & (off == "none") & ~to_fp32_master & ((zero != 2) | (ds3_ok & ~fsdp_only))
                          & (((zero == 0) & holds["0 -> 1"]) | ((zero == 1) & holds["1 -> 2"])
                                                     | ((zero == 2) & (dp >= 2) & units_less & act_small
                                                        & ~pp_rows & ~quantized)))
    sharded = base.iloc[rows].copy()
    sharded["zero"] += 1
    out.append(("one more ZeRO stage (no offload) never uses more per GPU", rows, sharded))
    # (not ZeRO-3 on one GPU: the engine may run a stage without offload there as stage 0, and
    # keep it with offload (engine/rules.py), when ZeRO-3 rightly adds its gathered layers)
    # (nor ZeRO-1/2 where DeepSpeed's offload path adds more than the states it moves off the GPU:
    # `deepspeed_stage_holds`, "offload"; stage 0 too, whose optimizer offloaded runs at stage 1 (engine/rules.py
    # "zero": DeepSpeed offloads it from stage 1 on), so there only where one more stage holds as well, "0 -> 1",
    # and not across DeepSpeed's fp32 master copy, `to_fp32_master`)
    rows = np.flatnonzero(train & (off == "none") & ~((base["gpus"] == 1).to_numpy() & (zero == 3))
                          & (~np.isin(zero, (0, 1, 2)) | holds["offload"])
                          & ((zero != 0) | (holds["0 -> 1"] & ~to_fp32_master)))
    offloaded = base.iloc[rows].copy()
    offloaded["offload"] = "optimizer"
    out.append(("offloading the optimizer never uses more per GPU", rows, offloaded))
    rows = np.flatnonzero(train & (base["gpus"] >= 2).to_numpy() & (base["gpus"] * 2 <= 1_000_000).to_numpy())
    more_ranks = base.iloc[rows].copy()
    more_ranks["gpus"] *= 2  # twice the data-parallel ranks (NCCL's buffers already counted)
    out.append(("more data-parallel ranks never use more per GPU", rows, more_ranks))
    rows = np.flatnonzero(train & (zero == 3) & (off == "optimizer"))
    all_off = base.iloc[rows].copy()
    all_off["offload"] = "all"
    out.append(("offloading the parameters too never uses more per GPU", rows, all_off))
    # (the catalog's shapes without tensor parallel: each LoRA adapter of a pure 16-bit base keeps
    # its own h-wide fp32 copy of its input, which fp32 training shares, so where h outweighs
    # the f-wide activations fp32 doubles (a large tp splits those, not h; an odd shape with
    # f << h) pure bf16 LoRA rightly needs more)
    catalog = ~base["model"].astype(str).str.startswith("synthetic-").to_numpy()
    # (nor the chunked and fused losses: a 16-bit chunk is upcast to fp32 beside its 16-bit logits, 6 bytes a
    # logit of the chunk against fp32's 4 (torchtune's chunks, Liger's / Unsloth's fused chunk), so where the
    # loss outweighs the model's own bytes (a QLoRA base, gemma-3-270m's 262k entries) pure bf16 rightly needs more)
    chunked = np.isin(decided_loss(base), ("chunked", "linear_chunked", "fused"))
    # (nor LoRA over a quantized base: LLM.int8's and NF4's matmuls keep their input in the training dtype
    # (MatMul8bitLt's A, engine/components.py) beside the adapters' own fp32 copy, which fp32 training
    # shares, so bf16 keeps 2 + 4 bytes a value where fp32 keeps 4: seed 7210109787353868327, llama-1-65b
    # LoRA r256 on every module over an int8 base)
    # (nor Adafactor: transformers' Adafactor.step copies a 16-bit parameter and its gradient to fp32 before
    # its update (engine/components.py adafactor_step_bytes_per_value: 16 bytes a value of the largest tensor
    # against fp32's 8), so where one tensor holds more than half the trained values (gemma-3-270m's
    # 262,144 x 640 embedding, 63% of its parameters) pure bf16 rightly needs more at the step: seed
    # 1511800570530616253, tests/test_regressions_memory.py)
    adafactor = (base["optimizer"] == "adafactor").to_numpy()
    # (nor where bf16 is DeepSpeed's mixed_bf16, `deepspeed_fp32_master`: 2 + 2 + 4 bytes a value beside the
    # states, against fp32's 4 + 4, more where the states are small or unsharded: seed 6917398136018264070,
    # qwen3-14b freeze under ZeRO-2 with torchao's 8-bit AdamW, pp 4, dp 1)
    ds_mixed = deepspeed_fp32_master(base, precision=np.full(len(base), "bf16"))
    # (nor the litgpt recipe: Fabric converts LitGPT's 16-bit logits to fp32 and its fit() keeps both through
    # backward (engine/stacks.py `recipe litgpt`), 6 bytes a logit against fp32's 4, the same as a chunked loss's
    # upcast: with a small model and a large vocabulary (qwen2.5-3b LoRA, 3 x 10 tokens, +26 MiB of logits)
    # pure bf16 rightly needs more; `--recipes all`, seeds 5, 11, 12, 14)
    litgpt = (base["recipe"].astype(str) == "litgpt").to_numpy() if "recipe" in base else np.zeros(len(base), bool)
    # (nor LoRA whose fp32 adapters take the down projection without checkpointing: peft casts each adapted module's
    # input to the adapter's dtype (engine/components.py), so a 16-bit base keeps a 4-byte, f-wide copy of the down
    # projection's input beside its own 2-byte activations, which fp32 training shares: with every module adapted and
    # nothing recomputed, pure bf16 rightly holds about as much or more; seed 4971602839768075449, qwen3-8b under
    # torchtitan's switches (packing, its flat parameters), all modules, r 64: +3.3%)
    targets = base["lora_targets"].astype(str) if "lora_targets" in base else pd.Series("", index=base.index)
    fp32_down = ((base["method"].isin(("lora", "qlora"))).to_numpy() & (decided_switch(base, "adapter_dtype") == "fp32")
                 & (targets.str.contains("down_proj") | (targets == "all")).to_numpy()
                 & (decided_switch(base, "checkpointing") == "none"))
    rows = np.flatnonzero(train & (base["precision"] == "fp32").to_numpy() & (base["tp"] == 1).to_numpy() & catalog
                          & ~chunked & ~quantized & ~adafactor & ~ds_mixed & ~litgpt & ~fp32_down)
    half = base.iloc[rows].copy()
    half["precision"] = "bf16"
    out.append(("pure bf16 training never uses more than fp32", rows, half))
    return out


class CaptureTables:
    """Wraps engine.executor._component_tables to keep, per call, each component's (fixed +
    shard / dp) and per-token bytes in every phase, and which phases each memory configuration
    has (its task's). White box: skipped (with a note) when the engine no longer has it."""

    def __init__(self):
        self.calls = []
        self.original = getattr(engine_estimate, "_component_tables", None)

    def __enter__(self):
        if self.original is not None:
            def wrapped(phases, valid, dp, size, *args, **kwargs):
                tables = self.original(phases, valid, dp, size, *args, **kwargs)
                self.calls.append((tables, {k: np.broadcast_to(v, (size,)).copy() for k, v in valid.items()}, size))
                return tables
            engine_estimate._component_tables = wrapped
        return self

    def __exit__(self, *exc):
        if self.original is not None:
            engine_estimate._component_tables = self.original

    def negative_components(self) -> list[str]:
        """'component in phase' for every (component, phase) negative or not finite in some
        memory configuration whose task has that phase."""
        bad = []
        for tables, valid, size in self.calls:
            for comp, parts in tables.items():
                if parts is None:
                    continue
                # (a table is a flat (phase x configuration) array, or a tuple of them: the terms counted from
                # the sliding window on, engine/executor.py _component_tables)
                flat = [p for part in parts if part is not None for p in (part if isinstance(part, tuple) else (part,))]
                for part in flat:
                    part = part.reshape(len(PHASES), size)
                    for i, phase in enumerate(PHASES):
                        v = part[i][valid[phase]]
                        if len(v) and not (np.all(np.isfinite(v)) and np.all(v >= 0)):
                            bad.append(f"{comp} in {phase}")
        return sorted(set(bad))


def invariant_violations(frame: pd.DataFrame, out: pd.DataFrame, models: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per invariant, a boolean mask of the rows that break it."""
    bad = {}
    family = models.set_index("id")["family"].astype(str).reindex(frame["model"].astype(str)).to_numpy()
    train = (frame["task"] == "train").to_numpy()
    chosen = (frame["gpu"].astype(str) != "").to_numpy()
    for col in [c for c in out.columns if c.endswith("_bytes") and not c.endswith("phase_bytes")]:
        v = out[col].to_numpy(dtype=float)
        wrong = ~(np.isfinite(v) & (v >= 0))
        if col == "capacity_bytes":  # below zero when headroom and context leave nothing
            wrong = ~np.isfinite(v)
        # the GPU's figures are NaN without a GPU
        bad[f"{col} finite and >= 0"] = wrong & chosen if col in ("usable_bytes", "capacity_bytes", "safe_peak_bytes") else wrong
    own = {p: np.where(train, p in TRAIN_PHASES, p in INFER_PHASES) for p in PHASES}  # the row's task has p
    # the attention phase (a prefill's eager scores) is a phase of eagerly-attending serving rows only:
    # NaN for SDPA / flash serving rows, as for training rows (tests/test_attention_path.py, the contract);
    # Gemma 2 under 'sdpa' runs eagerly (transformers 5.24: _supports_sdpa = False; engine attention_path)
    attn = out["attention"].astype(str).to_numpy()
    # AutoAWQ's fused modules (int4_kernel autoawq_fused on an int4 inference row) attend eagerly and have a
    # load phase (the fused QKV built beside the originals); NaN elsewhere
    fused = (out["int4_kernel"].astype(str).to_numpy() == "autoawq_fused") if "int4_kernel" in out else np.zeros(len(out), bool)
    fused = fused & (out["precision"].astype(str).to_numpy() == "int4")
    # (engine/constants.py TRANSFORMERS_EAGER_MODEL_TYPES: Gemma 2's softcapping, gpt-oss's attention sinks)
    sdpa_eager = np.isin(model_types(family), TRANSFORMERS_EAGER_MODEL_TYPES)
    own["attention"] = own["attention"] & ((attn == "eager") | ((attn == "sdpa") & sdpa_eager) | fused)
    own["load"] = own["load"] & fused
    # an SDPA prefill building its sliding-window mask (issue 28): inference rows attending through SDPA
    # (not eagerly, as Gemma 2 does under 'sdpa'; not AutoAWQ's fused attention; not flash) of a model with
    # sliding-window layers; NaN elsewhere (transformers 5.24 masking_utils.py sdpa_mask)
    arch = models.set_index("id").reindex(frame["model"].astype(str))
    sliding = (pd.to_numeric(arch["sliding_window_layers"], errors="coerce").fillna(0).to_numpy() > 0) \
        & (pd.to_numeric(arch["sliding_window"], errors="coerce").fillna(0).to_numpy() > 0)
    own["mask"] = own["mask"] & (attn == "sdpa") & ~sdpa_eager & ~fused & sliding
    # DeepSpeed ZeRO-1/2's reduction after backward: a phase of those training rows only (not with an optimizer
    # stepping in backward: torchtune's optimizer_in_bwd, layer-wise GaLore; engine/components.py deepspeed_zero12_rows)
    zero = out["zero"].to_numpy(dtype=float)
    in_bwd = (out["optimizer_in_backward"].astype(str) == "on").to_numpy() \
        | out["optimizer"].astype(str).isin(GALORE_LAYERWISE).to_numpy()
    own["grad_reduce"] = own["grad_reduce"] & ((zero == 1) | (zero == 2)) & ~in_bwd
    for p in PHASES:
        v = out[f"{p}_phase_bytes"].to_numpy(dtype=float)
        bad[f"{p}_phase_bytes finite and >= 0 (NaN for the other task)"] = np.where(
            own[p], ~(np.isfinite(v) & (v >= 0)), ~np.isnan(v))
    peak = out["peak_bytes"].to_numpy(dtype=float)
    parts = sum(out[c].to_numpy(dtype=float) for c in PART_COLUMNS)
    bad["peak = components + runtime overhead"] = ~(np.abs(parts - peak) <= REL * np.abs(peak) + 1e-3)
    phase = out["peak_phase"].astype(str).to_numpy()
    table = np.stack([out[f"{p}_phase_bytes"].to_numpy(dtype=float) for p in PHASES])
    at = np.array([PHASES.index(p) if p in PHASES else 0 for p in phase])
    at_peak = table[at, np.arange(len(out))]
    over = out["runtime_overhead_bytes"].to_numpy(dtype=float)
    bad["peak = peak phase + runtime overhead"] = ~(np.abs(at_peak + over - peak) <= REL * np.abs(peak) + 1e-3)
    bad["peak phase is one of the task's phases"] = ~np.array([own[p][i] if p in own else False for i, p in enumerate(phase)])
    bad["peak phase is the largest"] = ~(at_peak >= np.nanmax(np.where(np.stack([own[p] for p in PHASES]), table, -np.inf), axis=0))
    mb, ms, nd = (out[c].to_numpy(dtype=float) for c in ("max_batch", "max_seq", "gpus_needed"))
    bad["max_batch, max_seq >= 0"] = chosen & ~((mb >= 0) & (ms >= 0))
    bad["gpus_needed >= 1 or inf"] = chosen & ~((nd >= 1) | np.isinf(nd))
    fit_cols = ("usable_bytes", "capacity_bytes", "memory_used_fraction", "max_batch", "max_seq", "gpus_needed",
                "safe_peak_bytes", "verdict_margin_pct")
    bad["no GPU: fit columns NaN, fits NA"] = ~chosen & ~(
        np.all([np.isnan(out[c].to_numpy(dtype=float)) for c in fit_cols], axis=0) & out["fits"].isna().to_numpy())
    bad["a GPU: fits is True or False"] = chosen & out["fits"].isna().to_numpy()
    fits = out["fits"].to_numpy(dtype=bool, na_value=False)
    cap = out["capacity_bytes"].to_numpy(dtype=float)
    expect = (peak - over) <= cap
    bad["fits = the tensors' peak <= capacity"] = chosen & (fits != expect)
    # issue 28: the verdict is decided on the safe peak (the estimate + the margin): never more generous
    # than the estimate alone, and the safe peak is never below the estimate
    at_estimate = out["fits_at_estimate"].to_numpy(dtype=bool, na_value=False)
    bad["fits => fits_at_estimate"] = chosen & fits & ~at_estimate
    bad["safe peak >= peak"] = chosen & ~(out["safe_peak_bytes"].to_numpy(dtype=float) >= peak)
    batch, seq = frame["batch"].to_numpy(dtype=float), frame["seq"].to_numpy(dtype=float)
    bad["fits = batch <= max_batch"] = chosen & (fits != (batch <= mb))
    bad["fits => seq <= max_seq"] = chosen & fits & ~(seq <= ms)
    gpus_n = frame["gpus"].to_numpy(dtype=float)
    # training: data-parallel ranks at the row's own ZeRO stage; serving: tensor parallel over
    # powers of two, the row's own layout when tp = gpus is one
    tp, pp = frame["tp"].to_numpy(), frame["pp"].to_numpy()
    same_layout = train | ((tp == gpus_n) & (pp == 1) & ((tp & (tp - 1)) == 0))
    # (more than MAX_GPUS needed reads inf by design)
    bad["fits => gpus_needed <= gpus"] = chosen & fits & same_layout & (gpus_n <= MAX_GPUS) & ~(nd <= gpus_n)
    return bad


def same_in_small_frames(frame: pd.DataFrame, out: pd.DataFrame, rng, models, gpus, overhead, count: int) -> list:
    """(row, column, grouped value, small-frame value, small frame's size) for the rows (of a
    random sample of `count`) whose result differs when estimated in frames of 1 to 8 rows
    (the engine's per-row path) from the big frame's (its grouped path)."""
    sample = rng.choice(len(frame), min(count, len(frame)), replace=False)
    wrong = []
    lo = 0
    while lo < len(sample):
        take = sample[lo:lo + int(rng.integers(1, 9))]
        lo += len(take)
        small = estimate(frame.iloc[take].reset_index(drop=True), models, gpus, **overhead)
        for j, i in enumerate(take):
            for col in out.columns:
                a, b = out[col].iloc[i], small[col].iloc[j]
                if not ((pd.isna(a) and pd.isna(b)) or (not pd.isna(a) and not pd.isna(b) and a == b)):
                    wrong.append((int(i), col, a, b, len(take)))
                    break
    return wrong


def first_negative_row(frame: pd.DataFrame, models, gpus, overhead) -> int | None:
    """A row of `frame` whose own estimate has a negative (or non-finite) component in some
    phase of its task, found by bisection (None when there is none)."""
    with CaptureTables() as capture:
        estimate(frame, models, gpus, **overhead)
        if not capture.negative_components():
            return None
    if len(frame) == 1:
        return 0
    half = len(frame) // 2
    for lo, part in ((0, frame.iloc[:half]), (half, frame.iloc[half:])):
        at = first_negative_row(part.reset_index(drop=True), models, gpus, overhead)
        if at is not None:
            return lo + at
    return None  # only together (a grouping defect): the frame-dependence check reports it


def random_overhead(rng) -> dict:
    """The runtime-overhead settings: the defaults, or random ones."""
    if rng.random() < 0.5:
        return {}
    return {"context_bytes": float(rng.integers(0, 2 << 30)), "cublas_bytes": float(rng.integers(0, 64 << 20)),
            "fragmentation": float(rng.random() * 0.5), "nccl_bytes": float(rng.integers(0, 1 << 30))}


def scenario_dict(frame: pd.DataFrame, i: int) -> dict:
    row = frame.iloc[i].to_dict()
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def search(n: int, seed: int, chunk: int, models, gpus, report, check_small: int = 100,
           budget_s: float | None = None, recipes: tuple[str, ...] = ()) -> tuple[int, int, int]:
    """Returns (scenarios, rows estimated, violations). budget_s: stop after the chunk that
    passes that many seconds (the test suite's fixed budget; n is then the most drawn). recipes: draw
    each row's recipe from these (default: none drawn, the engine's hf)."""
    rng = np.random.default_rng(seed)
    found = {}
    rows_done = 0
    drawn = 0
    began = time.perf_counter()
    with CaptureTables() as capture:
        if capture.original is None:
            report("note: engine.executor._component_tables is gone; per-phase component signs not checked")
        for lo in range(0, n, chunk):
            if budget_s is not None and lo and time.perf_counter() - began > budget_s:
                break
            base = random_scenarios(rng, min(chunk, n - lo), models, gpus, recipes, objectives=True)
            drawn += len(base)
            pairs = companions(base, rng, models)
            frame = pd.concat([base] + [c for _, _, c in pairs], ignore_index=True)
            overhead = random_overhead(rng) if lo else {}
            capture.calls.clear()
            out = estimate(frame, models, gpus, **overhead)
            rows_done += len(frame)
            differ = same_in_small_frames(frame, out, rng, models, gpus, overhead, check_small)
            if len(differ):
                name = "a row's result does not depend on its frame (grouped = small frames)"
                count, example = found.get(name, (0, None))
                i, col, a, b, size = differ[0]
                found[name] = (count + len(differ), example or {**scenario_dict(frame, i), "overhead": overhead,
                                                                 "column": col, "grouped": a, f"in {size} rows": b})
            for name, mask in invariant_violations(frame, out, models).items():
                if mask.any():
                    i = int(np.argmax(mask))
                    count, example = found.get(name, (0, None))
                    found[name] = (count + int(mask.sum()), example or {**scenario_dict(frame, i), "overhead": overhead})
            negative = capture.negative_components()
            if negative:
                name = f"components >= 0 in every phase (here: {', '.join(negative)})"
                count, example = found.get(name, (0, None))
                if example is None:
                    i = first_negative_row(frame, models, gpus, overhead)
                    example = {**scenario_dict(frame, i), "overhead": overhead} if i is not None else "(not alone)"
                found[name] = (count + 1, example)  # counted per estimate() call
            peak = out["peak_bytes"].to_numpy(dtype=float)
            start = len(base)
            for name, rows, changed in pairs:
                other = peak[start:start + len(changed)]
                start += len(changed)
                this = peak[:len(base)][rows]
                if name.startswith(("more batch", "a longer seq", "LoRA dropout")):
                    broken = other < this
                else:
                    broken = other > this * (1 + 1e-6)
                if broken.any():
                    i = int(np.flatnonzero(broken)[0])
                    count, example = found.get(name, (0, None))
                    found[name] = (count + int(broken.sum()), example or {"base": scenario_dict(base, int(rows[i])),
                                                                          "changed": scenario_dict(changed, i)})
    for name, (count, example) in sorted(found.items()):
        unit = "estimate() calls" if name.startswith("components") else "rows"
        report(f"VIOLATION {name}: {count} {unit}; first: {json.dumps(example, default=str)}")
    return drawn, rows_done, sum(c for c, _ in found.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="random scenarios (default 50,000)")
    ap.add_argument("--seed", type=int, default=None, help="numpy seed (default: a fresh one, printed)")
    ap.add_argument("--chunk", type=int, default=10_000, help="scenarios per estimate() call")
    ap.add_argument("--hypothesis", type=int, default=0, metavar="N",
                    help="also run tests/test_engine_properties.py with N random examples per property")
    ap.add_argument("--catalog-only", action="store_true", help="only the catalog's models (no SYNTHETIC shapes)")
    ap.add_argument("--recipes", default="", metavar="LIST",
                    help="also draw each row's recipe from this comma list, or 'all' (engine/stacks.py RECIPE_NAMES); "
                         "default: none drawn (hf). Not part of make bench: see docs/performance.md")
    args = ap.parse_args(argv)
    recipes = tuple(RECIPE_NAMES) if args.recipes == "all" else tuple(r for r in args.recipes.split(",") if r)
    unknown = sorted(set(recipes) - set(RECIPE_NAMES))
    if unknown:
        ap.error(f"--recipes {','.join(unknown)} is not accepted; accepted: 'all' or a comma list of {', '.join(RECIPE_NAMES)}")
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 63))
    print(f"property search: seed={seed} (rerun: {Path(__file__).name} --n {args.n} --seed {seed}"
          + (f" --recipes {args.recipes}" if args.recipes else "") + ")", flush=True)
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    if not args.catalog_only:
        models = with_synthetic(models)
    t0 = time.perf_counter()
    scenarios, rows, violations = search(args.n, seed, args.chunk, models, gpus, lambda s: print(s, flush=True),
                                         recipes=recipes)
    failed = violations > 0
    rc = 0
    if args.hypothesis > 0:
        env = {**os.environ, "HYPOTHESIS_PROFILE": "nightly", "HYPOTHESIS_MAX_EXAMPLES": str(args.hypothesis)}
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              str(ROOT / "tests" / "test_engine_properties.py"),
                              str(ROOT / "tests" / "test_regressions_memory.py")], cwd=ROOT, env=env)
        print(f"hypothesis nightly run ({args.hypothesis} examples per property): {'failed' if rc else 'passed'}")
        failed = failed or rc != 0
    print(f"{'FAIL' if failed else 'PASS'} property search finds nothing (violations={violations}, seed={seed}"
          + (", hypothesis nightly run failed" if args.hypothesis > 0 and rc else "") + ")", flush=True)
    print(f"property_search seed={seed} scenarios={scenarios} rows={rows} violations={violations} "
          f"seconds={time.perf_counter() - t0:.1f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
