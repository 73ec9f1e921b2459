"""Speed and cost: decode and prefill rates, training time, $ per job, $ per million tokens,
buy versus rent. Whole-column numpy over estimate()'s result; no loop over scenario rows.

`add_speed_cost(result, gpus, models)` takes the frame `estimate()` builds (scenario columns +
per-GPU bytes) and adds:

inference  decode_tokens_per_s (one sequence), aggregate_tokens_per_s (the batch, every
           data-parallel replica), bound ("memory" | "compute"), prefill_s (time to first token
           for the batch's prompts), usd_per_million_tokens (cloud price / generated tokens)
training   train_flops, train_hours (wall clock on the scenario's GPUs), gpu_hours,
           cloud_cost_usd, power_cost_usd, comm_hours (the part of train_hours spent in
           data-parallel communication)
every row  purchase_usd, power_usd_per_hour, power_usd_per_month, rent_usd_per_month,
           breakeven_months, usd_per_gb_vram
and the settings it used (tokens, mfu, bandwidth_efficiency, prompt_tokens, usd_per_kwh,
utilization, hours_per_month), so a CSV export records them.

Rows without a GPU (empty `gpu`, or no GPU table) get NaN for everything that needs one.

The model (derivations in full in README "Speed and cost"):

Decode (one step = one new token for each sequence of the batch) is the slower of
  memory   bytes read / (bandwidth x bandwidth_efficiency), bytes read = the weights of the
           tensor-parallel shard of every pipeline stage ((weights + KV per GPU) x pp): the batch's KV
           cache at the scenario's context (kv_cache_bytes, every layer of the shard);
  compute  batch x (2·N + 4·L·seq·a·d) FLOPs / (tp x dense TFLOPS x mfu): 2 FLOPs per weight
           (multiply + add), and per layer q·kᵀ and p·v over seq cached keys, 2·seq·a·d each;
plus, with tensor parallelism, two all-reduces per layer (Megatron-LM: after attention and
after the MLP) of batch x hidden activations, ring algorithm: each GPU sends and receives
2(tp-1)/tp of the message over one direction of its link (interconnect_gbps / 2, the catalog
records both directions), plus a fixed latency per all-reduce.
Prefill of prompt_tokens p per sequence: compute b·(2·N·p + 2·L·p²·a·d) (causal attention:
token i attends i keys, sum ≈ p²/2, times 4·a·d per key) over tp x TFLOPS x mfu, or the
weights + written KV over bandwidth if that is slower, plus the all-reduces of b·p·hidden.
Training FLOPs per token (N parameters, T trainable, L layers, s = seq, a·d = attention width):
  full         6N + 6·L·s·a·d   (forward 2N; backward 2N for activation gradients + 2N for
                                 weight gradients; causal attention 2·L·s·a·d forward, x3)
  lora, qlora  4N + 6T + 6·L·s·a·d   (the frozen base needs no weight gradients; the adapters
                                 cost 2T forward + 2T backward + 2T weight gradients)
  freeze       2N + 2·V·h + 4T + 2·L·s·a·d + 4·k·s·a·d   (backward stops at the lowest trainable
                                 layer: only the lm_head and the k trainable layers)
  + gradient checkpointing: one more forward of what backward passes through
                 (full 2N + 2·L·s·a·d; lora 2N + 2T + 2·L·s·a·d; freeze 2T + 2·k·s·a·d).
train_hours = tokens x FLOPs per token / (gpus x dense TFLOPS x mfu) + comm_hours. `mfu` is the
fraction of peak reached on the FLOPs actually executed (PaLM's "hardware FLOPs utilisation" when
checkpointing recomputes; the same as MFU without recomputation).
comm_hours (training, only with dp = gpus / (tp x pp) > 1 data-parallel ranks): the gradient and
parameter traffic of data parallelism over the GPU's intra-node link (one direction,
interconnect_gbps / 2, as for inference), ring algorithms (NCCL docs, "Collective operations";
Patarasuk & Yuan 2009): per step each rank moves
  ZeRO 0-2  all-reduce of the gradients          2(dp-1)/dp x T_shard x gradient bytes
  ZeRO-3    all-gather of the weights, forward and backward  2 x (dp-1)/dp x N_shard x weight bytes
            + reduce-scatter of the gradients                  (dp-1)/dp x T_shard x gradient bytes
(shard = / (tp x pp)) plus ALLREDUCE_LATENCY_S per collective (one per DDP_BUCKET_BYTES bucket;
ZERO3_COLLECTIVES_PER_LAYER per layer). Steps per job = tokens / (batch x seq x dp). Assumed: no
overlap with compute (an upper bound: DDP and FSDP overlap part of it with backward; we found no
published overlap fraction to use), and every GPU in one node (the network between nodes is slower
and is not modelled: comm_hours is empty, and nothing is added, when the GPUs outnumber the card's
max_per_node). gpu_hours, cloud_cost_usd and power_cost_usd include comm_hours.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.categories as categories
from engine.buffers import Columns
from engine.components import inputs
from engine.frames import column_floats, column_numbers, column_text_index, revalidate
from engine.scenarios import Configs, did_you_mean, normalize_columns

# ---- Defaults of the user settings (each can be overridden by a scenario column) -------------
# Training-token budget: a round placeholder (one billion tokens), not a recommendation; set
# `tokens` (CLI --tokens) to the job's real budget.
DEFAULT_TOKENS = 1e9
# MFU 0.49: the LLaMA paper (Touvron et al. 2023, section 2.4) reports that training the 65B
# model "processes around 380 tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM":
# (6 x 65.29e9 + 6 x 80 x 2048 x 8192) FLOPs/token x 380 / 312e12 = 0.487. The paper's
# GPU-hours for 7B/13B/33B (Table 15) imply 0.45/0.53/0.47 by the same formula (see
# tests/test_speed.py). For comparison, PaLM (Chowdhery et al. 2022, Table 3) lists MFU of
# 21.3% (GPT-3), 32.5% (Gopher), 29.7% (Megatron-Turing NLG) and 46.2% (PaLM 540B): small
# single-node fine-tuning jobs often reach less than 0.49, so lower `mfu` for those.
DEFAULT_MFU = 0.49
# Bandwidth efficiency 0.65: measured decode rate x bytes read per token / bandwidth in the
# llama.cpp Apple Silicon table (ggml-org/llama.cpp discussion #4167, LLaMA 7B, tg128):
#   F16 (13.48 GB)   M1 Max 400 GB/s 23.03 t/s -> 0.78; M2 Ultra 800 GB/s 41.02 -> 0.69;
#                    M3 Max 400 GB/s 25.09 -> 0.85;   M4 Max 546 GB/s 31.64 -> 0.78
#   Q4_0 (3.83 GB)   M1 Max 61.19 -> 0.59; M2 Ultra 94.27 -> 0.45; M3 Max 66.31 -> 0.63;
#                    M4 Max 83.06 -> 0.58
# median 0.66; quantized weights reach less (dequantization work), 16-bit weights more.
# Out of sample: llmfit (AlexsJones/llmfit PR #137) quotes ~40 tok/s measured for a 27B Q4_K_M
# model on an RTX 4090 (1,008 GB/s, ~16.5 GB of weights): 0.65.
DEFAULT_BANDWIDTH_EFFICIENCY = 0.65
# Electricity: the U.S. commercial-sector average retail price was about 12.7 cents/kWh in
# 2023 (EIA, Electric Power Annual, average revenue per kWh by sector); rounded to 0.13.
# Residential is higher (about 16 cents), large industrial sites lower (about 8 cents).
DEFAULT_USD_PER_KWH = 0.13
# Utilisation 1.0: the GPUs are busy (at their TDP, and rented) every hour of the month: the
# assumption under which buying is usually weighed. An assumption, not a measurement: lower it
# for part-time use (breakeven_months grows as 1 / utilization).
DEFAULT_UTILIZATION = 1.0
# 730 hours per month = 8,760 hours per year / 12.
DEFAULT_HOURS_PER_MONTH = 730.0
# Power usage effectiveness (facility power / IT power): 1.0 by default, a machine at a desk or in
# an office with no cooling of its own counted. A data-centre room: the Uptime Institute's Global
# Data Center Survey 2023 reports an average PUE of 1.58; pass --pue 1.58 for that. Every
# electricity figure (power_cost_usd, power_usd_per_*) is multiplied by it.
DEFAULT_PUE = 1.0
# Resale: the share of the purchase price the cards fetch when sold at the end (depreciation =
# purchase x (1 - resale_fraction)). 0 by default (nothing assumed back). For scale, the catalog's
# used RTX 3090 quote ($850, Feb 2026) is 57% of its $1,499 launch price 5.4 years earlier.
# The buy-vs-rent break-even weighs the depreciation, not the whole price, against renting.
DEFAULT_RESALE_FRACTION = 0.0
# prompt_tokens: by default the whole context (seq) is the prompt, so prefill_s is the longest
# first-token wait at the scenario's context (and decode is timed at the full context too).

# ---- Constants with sources ------------------------------------------------------------------
# One all-reduce of a small message: about 6 microseconds between H100s over NVLink with NCCL
# 2.20 (NVIDIA/nccl issue #1259, all_reduce_perf, 128 B - 64 KiB). PCIe-only cards take longer;
# this is the optimistic end.
ALLREDUCE_LATENCY_S = 6e-6
# Two all-reduces per decoder layer in each forward pass with Megatron-style tensor parallelism
# (Shoeybi et al. 2019, Figure 3: one after self-attention, one after the MLP).
ALLREDUCES_PER_LAYER = 2
# Data-parallel gradient all-reduce: PyTorch DistributedDataParallel groups gradients into
# buckets of bucket_cap_mb = 25 MiB (torch.nn.parallel.DistributedDataParallel docs) and launches
# one all-reduce per bucket; each pays ALLREDUCE_LATENCY_S.
DDP_BUCKET_BYTES = 25 * 2**20
# ZeRO-3 / FSDP collectives per decoder layer per step (Rajbhandari et al. 2020, "ZeRO", section
# 7.2.2 / FSDP docs): an all-gather of the layer's parameters in forward, another in backward, and a
# reduce-scatter of its gradients.
ZERO3_COLLECTIVES_PER_LAYER = 3

SETTINGS = {
    "tokens": DEFAULT_TOKENS,
    "mfu": DEFAULT_MFU,
    "bandwidth_efficiency": DEFAULT_BANDWIDTH_EFFICIENCY,
    "prompt_tokens": None,  # None = the row's seq
    "usd_per_kwh": DEFAULT_USD_PER_KWH,
    "utilization": DEFAULT_UTILIZATION,
    "hours_per_month": DEFAULT_HOURS_PER_MONTH,
    "pue": DEFAULT_PUE,
    "resale_fraction": DEFAULT_RESALE_FRACTION,
}
# (low, low inclusive, high, high inclusive, what is accepted): the one range of each setting, for
# the engine, the command line and the dashboard alike (engine/columns.py). The fractions start at
# 0.001 and the hours at 1: below them the times and costs would be 300-digit numbers, not a system.
_RANGES = {
    "tokens": (1.0, True, 1e18, True, "a number of tokens >= 1 and <= 1e18, e.g. 1e9"),
    "mfu": (0.001, True, 1.0, True, "a fraction >= 0.001 and <= 1, e.g. 0.4"),
    "bandwidth_efficiency": (0.001, True, 1.0, True, "a fraction >= 0.001 and <= 1, e.g. 0.65"),
    "prompt_tokens": (1.0, True, 1e8, True, "a whole number of tokens >= 1 and <= seq"),
    "usd_per_kwh": (0.0, True, 100.0, True, "a price in $/kWh >= 0 and <= 100, e.g. 0.13"),
    "utilization": (0.001, True, 1.0, True, "a fraction >= 0.001 and <= 1, e.g. 0.5 for half the hours"),
    "hours_per_month": (1.0, True, 744.0, True, "hours >= 1 and <= 744, e.g. 730"),
    "pue": (1.0, True, 5.0, True, "a power usage effectiveness >= 1 and <= 5, e.g. 1.58"),
    "resale_fraction": (0.0, True, 1.0, False, "a fraction >= 0 and < 1, e.g. 0.5 if half the price comes back"),
}

MODEL_SHAPE = ("hidden_size", "num_layers", "num_heads", "head_dim", "vocab_size")
# dense TFLOPS column by compute dtype; quantized weights (int8, int4, nf4, GGUF) are
# dequantized into 16-bit matmuls, so they run at the 16-bit rate (fp16 unless bf16 is chosen)
_TRAIN_RATE = {"fp32": "fp32_tflops", "amp_bf16": "bf16_tflops", "bf16": "bf16_tflops",
               "mixed_bf16": "bf16_tflops", "amp_fp16": "fp16_tflops", "fp16": "fp16_tflops",
               "mixed_fp16": "fp16_tflops"}
_INFER_RATE = {"fp32": "fp32_tflops", "bf16": "bf16_tflops"}  # everything else: fp16_tflops
GPU_FIELDS = ("bandwidth_gbps", "bf16_tflops", "fp16_tflops", "fp32_tflops", "tdp_w",
              "interconnect_gbps", "price_usd", "cloud_usd_per_hour", "memory_gb", "max_per_node")

UNKNOWN_GPU_ID = "gpu {!r} is not in the catalog; accepted: a catalog GPU id (python -m engine catalog gpus)"
UNKNOWN_GPU = UNKNOWN_GPU_ID + ", e.g. h100-sxm-80gb, rtx-4090"  # (examples where no id is close to the one given)
# Speed settings that enter per-configuration figures (rates, prices, power): all but tokens and
# prompt_tokens, which only enter per-row ones. A frame that gives one of them per row is
# evaluated per row.
PER_CONFIG_SETTINGS = tuple(k for k in SETTINGS if k not in ("tokens", "prompt_tokens"))

OUTPUT_COLUMNS = (
    "decode_tokens_per_s", "aggregate_tokens_per_s", "bound", "prefill_s", "usd_per_million_tokens",
    "train_flops", "train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd", "comm_hours",
    "purchase_usd", "power_usd_per_hour", "power_usd_per_month", "rent_usd_per_month",
    "breakeven_months", "usd_per_gb_vram",
)


def _bad(column: str, value, accepted: str) -> ValueError:
    if isinstance(value, np.generic):
        value = value.item()
    return ValueError(f"{column} {value!r} is not accepted; accepted: {accepted}")


def _setting(result: pd.DataFrame, name: str, fallback) -> np.ndarray:
    """The column `name` as floats, its missing cells filled with the default; checked."""
    n = len(result)
    if name not in result.columns:
        return np.broadcast_to(np.asarray(fallback, dtype=float), (n,)).astype(float)
    raw = result[name]
    if isinstance(raw.dtype, pd.CategoricalDtype):
        raw = raw.astype(object)
    missing = np.asarray(raw.isna(), dtype=bool)
    # true/false or complex numbers are not amounts (pandas would read True as 1.0)
    kind = pd.api.types.infer_dtype(raw, skipna=True)
    if kind in ("boolean", "complex", "mixed"):
        wrong = raw.map(lambda v: isinstance(v, (bool, np.bool_, complex, np.complexfloating))).to_numpy(dtype=bool)
        if wrong.any():
            raise _bad(name, raw[wrong].iloc[0], _RANGES[name][4])
    if raw.dtype == object or isinstance(raw.dtype, pd.StringDtype):
        # text such as "1e9" is accepted, as the CLI would parse it; "" counts as missing
        missing = missing | (raw.astype("string").str.strip() == "").fillna(False).to_numpy(dtype=bool)
    values = pd.to_numeric(raw.where(~missing, np.nan), errors="coerce").to_numpy(dtype=float)
    unparsed = np.isnan(values) & ~missing
    if unparsed.any():
        raise _bad(name, raw[unparsed].iloc[0], _RANGES[name][4])
    low, low_in, high, high_in, accepted = _RANGES[name]
    out_of_range = ~missing & (~np.isfinite(values) | (values < low) | ((values == low) & (not low_in))
                               | (values > high) | ((values == high) & (not high_in)))
    if name == "prompt_tokens":
        out_of_range |= ~missing & np.isfinite(values) & (values != np.floor(values))
    if out_of_range.any():
        value = float(values[out_of_range][0])
        raise _bad(name, int(value) if value.is_integer() and abs(value) < 1e15 else value, accepted)
    return np.where(missing, fallback, values)


def pick_rate(uniques: list, codes: np.ndarray, train: np.ndarray, rates: dict) -> np.ndarray:
    """Dense TFLOPS for each precision (given as codes into `uniques`) and task."""
    out = np.full(len(codes), np.nan)
    for column, values in rates.items():
        for table, which in ((_TRAIN_RATE, train), (_INFER_RATE, ~train)):
            pick = np.array([table.get(u, "fp16_tflops") == column for u in uniques] + [False])
            rows = pick[codes] & which
            out = np.where(rows, values, out)
    return out


def gather_gpu_fields(gpus: pd.DataFrame, gidx: np.ndarray, fields: dict) -> dict:
    """Fill `fields` with the catalog figures of the GPU at each row's index in `gpus`
    (-1: no GPU chosen, NaN)."""
    found = gidx >= 0
    for k in GPU_FIELDS:
        if k in gpus.columns:
            col = column_numbers(gpus, k)
            fields[k] = np.where(found, col[np.maximum(gidx, 0)], np.nan)
    return fields


def gpu_index(cfg, gpus: pd.DataFrame) -> np.ndarray:
    """Per configuration (cfg: an engine.scenarios.Configs): the position of its GPU in `gpus`
    (-1: none chosen); a GPU id not in the table raises ValueError naming it."""
    gidx = cfg.index_in("gpu", column_text_index(gpus, "id"))
    bad = ~cfg.mask("gpu", "") & (gidx < 0)
    if bad.any():
        value = str(cfg.frame["gpu"].iloc[cfg.first_row(bad)])
        hint = did_you_mean(value, gpus["id"])
        raise ValueError(UNKNOWN_GPU_ID.format(value) + hint if hint else UNKNOWN_GPU.format(value))
    return gidx


def config_gpu_fields(cfg, gpus: pd.DataFrame | None) -> dict:
    """Per configuration (cfg: an engine.scenarios.Configs): the chosen GPU's catalog figures."""
    fields = {k: np.full(cfg.size, np.nan) for k in GPU_FIELDS}
    if gpus is None or cfg.size == 0:
        return fields
    return gather_gpu_fields(gpus, gpu_index(cfg, gpus), fields)


def frame_shape(frame: pd.DataFrame) -> dict | None:
    """The model shape (MODEL_SHAPE) per row where the frame carries it as columns, else None."""
    if not all(c in frame.columns for c in MODEL_SHAPE):
        return None
    return {k: pd.to_numeric(frame[k]).to_numpy(dtype=float) for k in MODEL_SHAPE}


def read_settings(frame: pd.DataFrame, seq) -> dict:
    """The speed / cost settings: a column of the frame where there is one (each value checked,
    missing cells the default), else the default as a plain number (prompt_tokens: seq)."""
    out = {}
    for name, default in SETTINGS.items():
        fallback = seq if name == "prompt_tokens" else default
        out[name] = _setting(frame, name, fallback) if name in frame.columns else fallback
    return out


def speed_level(cfg, x, lift, trainable, gpus: pd.DataFrame | None, models: pd.DataFrame) -> dict:
    """The one builder of the speed model's inputs (`level` of speed_cost_columns), per
    configuration. cfg: the rows' configurations (an engine.scenarios.Configs); x: the physics
    inputs (engine.components.Inputs) per memory configuration, `lift` taking them to
    configurations; trainable: the trained parameters per configuration (int64, as the result's
    trainable_params column holds them). Every key speed_cost_columns and _add_comm read is set
    here, for estimate() and add_speed_cost alike."""
    train = lift(x.train)
    midx = lift(x.model)
    level = {k: column_floats(models, k)[midx] for k in MODEL_SHAPE}
    # MoE: a token's FLOPs go through its active parameters (2 x active per token forward)
    level.update(N=lift(np.asarray(x.active).astype(np.int64).astype(float)),
                 T=np.asarray(trainable).astype(float),
                 n_gpus=lift(x.gpus), tp=lift(x.tp), pp=lift(x.pp), full=cfg.mask("method", "full"),
                 lora=cfg.mask("method", "lora", "qlora"), freeze=cfg.mask("method", "freeze"),
                 checkpointing=lift(x.gc), freeze_layers=cfg.values("freeze_layers").astype(float), train=train,
                 N_total=lift(np.asarray(x.N, dtype=float)), zero=lift(np.asarray(x.zero, dtype=float)),
                 weight_bytes=lift(np.asarray(x.wb, dtype=float)), grad_bytes=lift(np.asarray(x.wb_trained, dtype=float)))
    g = config_gpu_fields(cfg, gpus)
    level["rate"] = pick_rate(cfg.categories("precision"), cfg.codes("precision"), train,
                              {c: g[c] for c in ("bf16_tflops", "fp16_tflops", "fp32_tflops")}) * 1e12
    level["act_bytes"] = np.where(cfg.mask("precision", "fp32"), 4.0, 2.0)
    # preference tuning (objective dpo) whose reference forward runs in the step (engine/components.py dpo_parts)
    if np.any(x.dpo_ref_forward):
        level["dpo_ref"] = lift(np.broadcast_to(np.asarray(x.dpo_ref_forward, dtype=bool), np.shape(x.gc)))
    level.update(g)
    return level


def speed_columns(cfg, x, lift, trainable, frame: pd.DataFrame, b, s, weights, kv, gpus: pd.DataFrame | None,
                  models: pd.DataFrame, seq_level=None, out=None, shape: dict | None = None) -> dict:
    """The speed and cost columns (OUTPUT_COLUMNS, then the settings used) of a normalized frame's
    rows, from speed_level: estimate() (engine/executor.py) and add_speed_cost both come here.
    frame: where the settings are read (read_settings); b, s: batch and seq per row (floats);
    weights, kv: the result's weights_bytes and kv_cache_bytes per row; seq_level: the
    configuration x seq groups (cfg.split(), made here when None); shape: the model shape per
    row where the frame carries its own (frame_shape), else the models table's per configuration."""
    take, n = cfg.take, len(b)
    st = read_settings(frame, s)
    if st["prompt_tokens"] is not s:
        check_prompt(st["prompt_tokens"], s, take(lift(x.infer)))
    level = speed_level(cfg, x, lift, trainable, gpus, models)
    inv = None if cfg.identity else cfg.inv
    if shape is not None or any(np.ndim(st[k]) for k in PER_CONFIG_SETTINGS):
        # a setting (or the model shape) given per row: everything per row
        level = {k: (take(v) if np.ndim(v) else v) for k, v in level.items()}
        if shape is not None:
            level.update(shape)
        inv, seq_level = None, None
    elif seq_level is None and inv is not None:
        seq_level = cfg.split()
    if np.any(x.active != x.N):  # MoE decode reads the active experts' weights (+ shared), all else once
        weights = weights * take(lift(np.asarray(x.active, dtype=float) / x.N))
    return speed_cost_columns(level, inv, b, s, weights, kv, st, n, seq_level, out)


def add_speed_cost(result: pd.DataFrame, gpus: pd.DataFrame | None, models: pd.DataFrame | None = None) -> pd.DataFrame:
    """Add the speed and cost columns to estimate()'s result (see the module docstring), e.g.
    again with other settings (mfu, tokens, ...) without estimating the memory again.

    result: estimate()'s output (its scenario columns, trainable_params, weights_bytes and
    kv_cache_bytes per GPU). gpus: the catalog's GPU table, joined on `gpu`; None means no GPU is
    known (GPU-dependent columns NaN). models: the models table (the scenario's model: its
    parameters, layers, hidden size, heads, head dim, vocab); where `result` carries the shape
    columns (MODEL_SHAPE) those are used for the FLOPs. The speed model's inputs come from the
    one builder estimate() uses (speed_level): the same figures for the same frame.
    Raises ValueError naming the value for a bad setting (mfu, tokens, ...).
    """
    revalidate(gpus)
    revalidate(models)
    out = result.copy()
    n = len(out)
    if n == 0:
        for c in (*OUTPUT_COLUMNS, *SETTINGS):  # as a non-empty result lists them
            out[c] = pd.Series(dtype=float)
        return out
    if models is None:
        raise ValueError("add_speed_cost needs the models table (the scenarios' models: parameters, layers, "
                         "heads, ...) for the FLOPs and the traffic")
    sc = normalize_columns(out, models)
    cfg = Configs(sc)
    mv, of_config = cfg.coarser(("gpu", "headroom"))
    lift = (lambda v: v) if of_config is None else (lambda v: v if not np.ndim(v) else v[of_config])
    x = inputs(mv, models)
    trainable = pd.to_numeric(out["trainable_params"]).to_numpy()[cfg.rep].astype(np.int64)
    b = sc["batch"].to_numpy().astype(float)
    s = sc["seq"].to_numpy().astype(float)
    weights = pd.to_numeric(out["weights_bytes"]).to_numpy(dtype=float)
    # (the KV cache at the context: the decode reads it, also where the peak phase holds none yet)
    kv = pd.to_numeric(out["kv_cache_context_bytes" if "kv_cache_context_bytes" in out else "kv_cache_bytes"]).to_numpy(dtype=float)
    for name, values in speed_columns(cfg, x, lift, trainable, out, b, s, weights, kv, gpus, models,
                                      shape=frame_shape(out)).items():
        out[name] = values
    return out


def check_prompt(prompt, seq, infer) -> None:
    """A prompt longer than the context the memory is sized for is refused."""
    if np.ndim(prompt) == 0 or prompt is seq:
        return
    too_long = infer & (prompt > seq)
    if too_long.any():
        i = int(np.flatnonzero(too_long)[0])
        raise ValueError(f"prompt_tokens {int(prompt[i]):,} is longer than seq {int(seq[i]):,}; accepted: 1 to seq (the context the memory is sized for)")


def _rows(values, inv, idx):
    """Per-configuration values (or a scalar) at the rows `idx` (None: every row)."""
    if np.ndim(values) == 0:
        return values
    if inv is not None:
        return values[inv] if idx is None else values[inv[idx]]
    return values if idx is None else values[idx]


def _subset(values, idx):
    """Per-row values (or a scalar) at the rows `idx` (None: every row)."""
    return values if idx is None or np.ndim(values) == 0 else values[idx]


def _which(mask: np.ndarray, inv, n: int):
    """(any row, row indices or None for all rows) of a per-configuration mask."""
    if not mask.any():
        return False, None
    if mask.all():
        return True, None
    rows = _rows(mask, inv, None)
    return True, np.flatnonzero(rows)


# Configuration x seq groups per block of the training figures (as engine.executor.ROW_BLOCK).
GROUP_BLOCK = 1 << 16


def _scatter(n: int, idx, values, fill=np.nan, out=None) -> np.ndarray:
    if idx is None:
        return values
    dtype = np.result_type(values, np.asarray(fill))
    column = out.full(fill, dtype) if out is not None else np.full(n, fill, dtype=dtype)
    column[idx] = values
    return column


def speed_cost_columns(level: dict, inv, b, seq, weights, kv, settings: dict, n: int, by_seq=None, out=None) -> dict:
    """The speed and cost columns (OUTPUT_COLUMNS, then the settings used) for n rows.

    level: per-configuration arrays (the model's shape h, L, num_heads x head_dim, V; N, T,
    GPU counts, method masks, checkpointing, freeze_layers, train mask, the dense FLOP/s rate,
    activation bytes and the GPU fields), taken to rows by `inv` (None: one per row already).
    b, seq, weights, kv: per row. settings: read_settings(); each a number, or an array per
    row (then `level` must be per row too). Rows only compute what applies to their task.
    by_seq: optional (group of each row, a row of each group) for configuration x seq: the
    training figures, which do not depend on the batch, are then computed once per group.
    out: an engine.buffers.Columns for the new columns (None: one of its own).
    """
    out = out if out is not None else Columns(n)
    st = settings
    tokens, mfu, bw_eff, prompt = st["tokens"], st["mfu"], st["bandwidth_efficiency"], st["prompt_tokens"]
    usd_kwh, util, hours_month = st["usd_per_kwh"], st["utilization"], st["hours_per_month"]
    usd_kwh = usd_kwh * st["pue"]  # electricity at the wall, cooling included (DEFAULT_PUE)
    g = level
    N, T, L, h, V = level["N"], level["T"], level["num_layers"], level["hidden_size"], level["vocab_size"]
    attn_width = level["num_heads"] * level["head_dim"]
    n_gpus, tp, pp = level["n_gpus"], level["tp"], level["pp"]
    replicas = n_gpus / (tp * pp)
    train = level["train"]
    achieved = level["rate"] * mfu                # FLOP/s per GPU
    bandwidth = g["bandwidth_gbps"] * 1e9 * bw_eff  # bytes/s per GPU
    link = g["interconnect_gbps"] * 1e9 / 2     # one direction of the GPU's link, bytes/s
    act_bytes = level["act_bytes"]
    cols = {}

    # ---- inference: decode --------------------------------------------------------------
    # estimate() gives weights and KV cache per GPU, both split by tp x pp (each pipeline
    # stage holds its own layers): a token passes every stage in turn
    any_infer, idx = _which(~train, inv, n)
    if any_infer:
        r = lambda x: _rows(x, inv, idx)  # noqa: E731
        s = lambda x: _subset(x, idx)  # noqa: E731
        b_, seq_, prompt_ = s(b), s(seq), s(prompt)
        tp_, L_, h_, act_, link_, N_, aw_ = r(tp), r(L), r(h), r(act_bytes), r(link), r(N), r(attn_width)
        pp_, bw_, ach_ = r(pp), r(bandwidth), r(achieved)
        weights_, kv_ = s(weights), s(kv)
        read = (weights_ + kv_) * pp_
        with np.errstate(divide="ignore", invalid="ignore"):
            t_mem = read / bw_
            t_compute = b_ * (2 * N_ + 4 * L_ * seq_ * aw_) / (tp_ * ach_)
            ring = 2 * (tp_ - 1) / tp_
            t_comm = np.where(tp_ > 1, L_ * ALLREDUCES_PER_LAYER * (ALLREDUCE_LATENCY_S + ring * b_ * h_ * act_ / link_), 0.0)
            t_step = np.maximum(t_mem, t_compute) + t_comm
            decode = 1.0 / t_step
            aggregate = r(replicas) * b_ / t_step
            usd_per_hour = r(n_gpus * g["cloud_usd_per_hour"])
            per_million = usd_per_hour / (aggregate * 3600.0) * 1e6
        known = np.isfinite(t_step)
        cols["decode_tokens_per_s"] = _scatter(n, idx, np.where(known, decode, np.nan), out=out)
        cols["aggregate_tokens_per_s"] = _scatter(n, idx, np.where(known, aggregate, np.nan), out=out)
        codes = _scatter(n, idx, np.where(known, np.where(t_compute > t_mem, 1, 0), -1).astype(np.int8), np.int8(-1), out)
        cols["bound"] = categories.from_codes(codes, ("memory", "compute"))

        # ---- inference: prefill ---------------------------------------------------------
        with np.errstate(divide="ignore", invalid="ignore"):
            p_compute = b_ * (2 * N_ * prompt_ + 2 * L_ * prompt_**2 * aw_) / (tp_ * ach_)
            p_mem = (weights_ + kv_ * prompt_ / seq_) * pp_ / bw_
            p_comm = np.where(tp_ > 1, L_ * ALLREDUCES_PER_LAYER * (ALLREDUCE_LATENCY_S + ring * b_ * prompt_ * h_ * act_ / link_), 0.0)
            prefill = np.maximum(p_compute, p_mem) + p_comm
        cols["prefill_s"] = _scatter(n, idx, prefill, out=out)
        cols["usd_per_million_tokens"] = _scatter(n, idx, np.where(known, per_million, np.nan), out=out)
    else:
        for c in ("decode_tokens_per_s", "aggregate_tokens_per_s"):
            cols[c] = out.full(np.nan)
        cols["bound"] = categories.from_codes(out.full(-1, np.int8), ("memory", "compute"))
        cols["prefill_s"] = out.full(np.nan)
        cols["usd_per_million_tokens"] = out.full(np.nan)

    # ---- training -------------------------------------------------------------------------
    any_train, idx = _which(train, inv, n)
    if any_train and by_seq is not None and inv is not None and np.ndim(tokens) == 0 and np.ndim(usd_kwh) == 0:
        group, rows = by_seq
        k_layers = np.minimum(level["freeze_layers"], L) if level.get("freeze_layers") is not None else np.zeros(len(L))
        rate, cloud, tdp = n_gpus * achieved, g["cloud_usd_per_hour"], g["tdp_w"]
        figures = [out.empty(length=len(rows)) for _ in range(5)]  # per configuration x seq
        for lo in range(0, len(rows), GROUP_BLOCK):  # in blocks: temporaries stay small
            part = slice(lo, min(len(rows), lo + GROUP_BLOCK))
            config = inv[rows[part]]
            r = lambda x: x[config] if np.ndim(x) else x  # noqa: E731
            per_token = _flops_per_token(level["full"], level["lora"], level["freeze"], N, T, L, V, h,
                                         seq[rows[part]], attn_width, k_layers, level["checkpointing"], r,
                                         level.get("dpo_ref"))
            flops = np.where(r(train), tokens * per_token, np.nan)
            with np.errstate(divide="ignore", invalid="ignore"):
                hours = flops / r(rate) / 3600.0
            gpu_hours = hours * r(n_gpus)
            for figure, value in zip(figures, (flops, hours, gpu_hours, gpu_hours * r(cloud),
                                               gpu_hours * r(tdp) / 1000.0 * usd_kwh)):
                figure[part] = value
        for name, figure in zip(("train_flops", "train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd"), figures):
            cols[name] = out.take(figure, group)
    elif any_train:
        r = lambda x: _rows(x, inv, idx)  # noqa: E731
        s_ = _subset(seq, idx)
        k_layers = np.minimum(level["freeze_layers"], L) if level.get("freeze_layers") is not None else np.zeros(len(L))
        per_token = _flops_per_token(level["full"], level["lora"], level["freeze"], N, T, L, V, h, s_, attn_width,
                                     k_layers, level["checkpointing"], r, level.get("dpo_ref"))
        flops = _subset(tokens, idx) * per_token
        with np.errstate(divide="ignore", invalid="ignore"):
            hours = flops / r(n_gpus * achieved) / 3600.0
        gpu_hours = hours * r(n_gpus)
        cols["train_flops"] = _scatter(n, idx, flops, out=out)
        cols["train_hours"] = _scatter(n, idx, hours, out=out)
        cols["gpu_hours"] = _scatter(n, idx, gpu_hours, out=out)
        cols["cloud_cost_usd"] = _scatter(n, idx, gpu_hours * r(g["cloud_usd_per_hour"]), out=out)
        cols["power_cost_usd"] = _scatter(n, idx, gpu_hours * r(g["tdp_w"]) / 1000.0 * _subset(usd_kwh, idx), out=out)
    else:
        for c in ("train_flops", "train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd"):
            cols[c] = out.full(np.nan)
    if any_train:
        _add_comm(cols, level, inv, b, seq, tokens, usd_kwh, n, out)
    else:
        cols["comm_hours"] = out.full(np.nan)

    # ---- buy versus rent --------------------------------------------------------------------
    purchase = g["price_usd"] * n_gpus
    power_hour = g["tdp_w"] / 1000.0 * n_gpus * util * usd_kwh       # averaged over wall-clock hours
    power_month = power_hour * hours_month
    rent_month = g["cloud_usd_per_hour"] * n_gpus * util * hours_month  # rent only the hours used
    breakeven = breakeven_months(purchase, rent_month, power_month, st["resale_fraction"])
    full = lambda x: out.take(x, inv) if inv is not None and np.ndim(x) else _rows(x, inv, None)  # noqa: E731
    cols["purchase_usd"] = full(purchase)
    cols["power_usd_per_hour"] = full(power_hour)
    cols["power_usd_per_month"] = full(power_month)
    cols["rent_usd_per_month"] = full(rent_month)
    cols["breakeven_months"] = full(breakeven)
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["usd_per_gb_vram"] = full(g["price_usd"] / g["memory_gb"])

    # the settings used, recorded beside the figures
    for name in SETTINGS:
        value = st[name]
        if np.ndim(value) == 0:
            cols[name] = out.full(float(value))
        else:
            cols[name] = out.empty()
            np.copyto(cols[name], value, casting="unsafe")  # as np.array(value, dtype=float)
    return cols


def breakeven_months(purchase, rent_month, power_month, resale_fraction):
    """Months after which owning costs less than renting: the depreciation (purchase x (1 -
    resale_fraction), what owning costs besides power) over the monthly saving (rent of the
    hours used - electricity for them, PUE included). inf when renting is never dearer; NaN
    when a price is unknown. The planner's whole systems (planner/systems.py) use it too."""
    purchase = np.asarray(purchase, dtype=float)
    saving = np.asarray(rent_month, dtype=float) - np.asarray(power_month, dtype=float)
    depreciation = purchase * (1.0 - np.asarray(resale_fraction, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        months = np.where(saving > 0, depreciation / saving, np.inf)
    return np.where(np.isnan(purchase) | np.isnan(saving), np.nan, months)


def _add_comm(cols: dict, level: dict, inv, b, seq, tokens, usd_kwh, n: int, out) -> None:
    """comm_hours (module docstring) per row, added to train_hours, gpu_hours and the costs."""
    n_gpus, tp, pp, L = level["n_gpus"], level["tp"], level["pp"], level["num_layers"]
    dp = n_gpus / (tp * pp)
    mp = tp * pp
    N = level.get("N_total", level["N"])
    T = level["T"]
    act = level["act_bytes"]
    weight_b = level.get("weight_bytes", act)
    grad_b = level.get("grad_bytes", act)
    zero = level.get("zero", 0.0)
    link = level["interconnect_gbps"] * 1e9 / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = (dp - 1) / dp
        grad_bytes = T / mp * grad_b
        buckets = np.maximum(1.0, np.ceil(grad_bytes / DDP_BUCKET_BYTES))
        allreduce = 2 * frac * grad_bytes / link + buckets * ALLREDUCE_LATENCY_S
        zero3 = (2 * frac * N / mp * weight_b + frac * grad_bytes) / link \
            + ZERO3_COLLECTIVES_PER_LAYER * L / pp * ALLREDUCE_LATENCY_S
        per_step = np.where(dp > 1, np.where(np.asarray(zero) >= 3, zero3, allreduce), 0.0)
    per_step = np.where(level["train"], per_step, np.nan)
    # GPUs over several nodes (more than the card's max_per_node) talk over the network between
    # nodes, which the catalog does not describe: not modelled there (empty, nothing added), never
    # the intra-node link's figure (the LLaMA paper's 2,048 A100s would read 30% too slow)
    per_node = level.get("max_per_node")
    if per_node is not None:
        per_step = np.where(np.asarray(n_gpus) > np.asarray(per_node, dtype=float), np.nan, per_step)
    # per row (comm_hours depends on the batch), in blocks of GROUP_BLOCK rows: the temporaries
    # stay small (no fresh pages per call), the costs are added in place; each row's value is
    # the very expression it was on whole columns
    cloud, tdp = level["cloud_usd_per_hour"], level["tdp_w"]
    comm = out.empty()
    train_h, gpu_h, cloud_c, power_c = (cols[c] for c in ("train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd"))
    for lo in range(0, n, GROUP_BLOCK):
        part = slice(lo, min(n, lo + GROUP_BLOCK))
        at = inv[part] if inv is not None else None
        # per configuration (or per row when inv is None) -> the block's rows; scalars stay scalars
        row = (lambda x: x if not np.ndim(x) else np.take(x, at, mode="clip")) if at is not None else \
            (lambda x: x if not np.ndim(x) else x[part])  # noqa: E731
        sub = lambda x: x if not np.ndim(x) else x[part]  # noqa: E731 - per-row values of the block
        dp_r, step_r, gpus_r = row(dp), row(per_step), row(n_gpus)
        with np.errstate(divide="ignore", invalid="ignore"):
            steps = sub(tokens) / (b[part] * seq[part] * dp_r)
            c = np.where(step_r > 0, steps * step_r / 3600.0, step_r)  # 0 (one rank) or NaN stay
        comm[part] = c
        added = _nan_to_num(c)
        extra_gpu_h = added * gpus_r
        train_h[part] += added
        gpu_h[part] += extra_gpu_h
        cloud_c[part] += extra_gpu_h * row(cloud)
        power_c[part] += extra_gpu_h * row(tdp) / 1000.0 * sub(usd_kwh)
    cols["comm_hours"] = comm


def _nan_to_num(x: np.ndarray) -> np.ndarray:
    """np.nan_to_num(x) (a new array; NaN -> 0, +-inf -> the largest finite +-float) in fewer
    passes when, as usual, x holds no infinity."""
    out = np.where(np.isnan(x), 0.0, x)
    return np.nan_to_num(out, copy=False) if np.isinf(out).any() else out


def _flops_per_token(full, lora, freeze, N, T, L, V, h, s, attn_width, k_layers, checkpointing, rows, dpo_ref=None):
    """FLOPs per training token (module docstring) from per-configuration inputs (method masks, N, T, L, V, h,
    attn_width, k_layers, checkpointing) and per-row seq `s`: the parts without seq are summed
    once per configuration, in the same order, so every row gets the same number. dpo_ref (objective dpo, its
    reference forward in the step: trl 1.16.0 dpo_trainer.py lines 1318-1347): every token (chosen and rejected
    alike) also goes through the frozen reference's forward, 2 x N + 2 x attention FLOPs (None: no such row)."""
    full_r, lora_r, freeze_r = rows(full), rows(lora), rows(freeze)
    attn = rows(L) * s * rows(attn_width)
    per_token = np.full(len(s), np.nan)
    recompute = np.zeros(len(s))
    ckpt = np.asarray(checkpointing).any()
    if freeze.any():
        frozen_attn = rows(k_layers) * s * rows(attn_width)
        per_token = np.where(freeze_r, rows(2 * N + 2 * V * h + 4 * T) + 2 * attn + 4 * frozen_attn, per_token)
        if ckpt:
            recompute = np.where(freeze_r, rows(2 * T) + 2 * frozen_attn, recompute)
    if lora.any():
        per_token = np.where(lora_r, rows(4 * N + 6 * T) + 6 * attn, per_token)
        if ckpt:
            recompute = np.where(lora_r, rows(2 * N + 2 * T) + 2 * attn, recompute)
    if full.any():
        per_token = np.where(full_r, rows(6 * N) + 6 * attn, per_token)
        if ckpt:
            recompute = np.where(full_r, rows(2 * N) + 2 * attn, recompute)
    if ckpt:
        per_token = per_token + np.where(rows(checkpointing), recompute, 0.0)
    if dpo_ref is not None:
        per_token = per_token + np.where(rows(dpo_ref), rows(2 * N) + 2 * attn, 0.0)
    return per_token


def _num(x, fmt="{:,.1f}") -> str:
    return fmt.format(x) if np.isfinite(x) else "—"


def _known(row: pd.Series, *columns) -> bool:
    """Every one of the row's figures is a finite number."""
    return all(np.isfinite(float(row[c])) if pd.notna(row.get(c)) else False for c in columns)


def _no_rate(row: pd.Series) -> str:
    """Why a row on a GPU has no speed: the catalog lacks the GPU's dense rate for the row's
    compute dtype (e.g. bf16 on a V100, or a user GPU entered without it)."""
    train = row.get("task") == "train"
    column = (_TRAIN_RATE if train else _INFER_RATE).get(str(row.get("precision")), "fp16_tflops")
    dtype = column.removesuffix("_tflops")
    return f"no {dtype} TFLOPS figure for {row['gpu']} in the catalog, so no speed estimate"


def format_speed_cost(row: pd.Series) -> str:
    """A few lines of text for one result row (the CLI's text output). A figure the catalog
    cannot give (no TFLOPS for the compute dtype, no purchase or cloud price) is named in words,
    never printed as nan or n/a."""
    lines = []
    if not (isinstance(row.get("gpu"), str) and row["gpu"]):
        if row.get("task") == "train":
            lines.append(f"training: {row['train_flops']:.3e} FLOPs for {row['tokens']:,.0f} tokens (give --gpu for time and cost)")
        return "\n".join(lines)
    no_cloud = not _known(row, "rent_usd_per_month")
    if row.get("task") == "infer":
        if _known(row, "decode_tokens_per_s"):
            bound = f"{row['bound']}-bound, " if str(row.get("bound")) in ("memory", "compute") else ""
            lines.append(
                f"decode: {_num(row['decode_tokens_per_s'])} tokens/s per sequence, "
                f"{_num(row['aggregate_tokens_per_s'])} tokens/s for the batch ({bound}"
                f"bandwidth efficiency {row['bandwidth_efficiency']:.2f}, MFU {row['mfu']:.2f})"
            )
            # the roofline at llama.cpp's measured share of the bandwidth (the column's default), not one engine's
            # delivered speed: transformers' generate() runs slower at batch 1 (per-token launch overheads), which
            # `serve --engine transformers` models (engine/serving.py), as it does vLLM's, SGLang's, ...
            lines.append("  (the card's bandwidth at that share, as llama.cpp reaches it; `serve --engine ENGINE` "
                         "gives each engine's own speed)")
        else:
            lines.append(f"decode: {_no_rate(row)}")
        if _known(row, "prefill_s"):
            lines.append(f"prefill of {int(row['prompt_tokens']):,} prompt tokens per sequence: {_num(row['prefill_s'], '{:,.3f}')} s")
        if _known(row, "usd_per_million_tokens"):
            lines.append(f"cloud: ${_num(row['usd_per_million_tokens'], '{:,.2f}')} per million generated tokens")
        elif no_cloud:
            lines.append(f"cloud: no cloud price for {row['gpu']} in the catalog")
    else:
        flops = f"training: {row['train_flops']:.3e} FLOPs for {row['tokens']:,.0f} tokens"
        if _known(row, "train_hours"):
            lines.append(
                f"{flops} at MFU {row['mfu']:.2f}: "
                f"{_num(row['train_hours'], '{:,.2f}')} h on {int(row['gpus'])} GPU(s) = {_num(row['gpu_hours'], '{:,.1f}')} GPU-hours"
            )
            cloud = (f"cloud cost ${_num(row['cloud_cost_usd'], '{:,.0f}')}" if _known(row, "cloud_cost_usd")
                     else f"no cloud price for {row['gpu']} in the catalog")
            power = (f"; electricity if owned ${_num(row['power_cost_usd'], '{:,.0f}')}" if _known(row, "power_cost_usd")
                     else "")
            lines.append(cloud + power)
        else:
            lines.append(f"{flops}: {_no_rate(row)}")
    months = row["breakeven_months"]
    use = f"at {row['utilization']:.0%} use and ${row['usd_per_kwh']:.2f}/kWh"
    power = (f"power ${_num(row['power_usd_per_month'], '{:,.0f}')}/month" if _known(row, "power_usd_per_month")
             else "no power figure (TDP)")
    rent = "" if no_cloud else f" vs rent ${_num(row['rent_usd_per_month'], '{:,.0f}')}/month"
    if _known(row, "purchase_usd"):
        buy = f"buy: ${_num(row['purchase_usd'], '{:,.0f}')}"
        if _known(row, "usd_per_gb_vram"):
            buy += f" (${_num(row['usd_per_gb_vram'], '{:,.0f}')} per GB of memory)"
    else:
        buy = f"buy: no purchase price for {row['gpu']} in the catalog"
    if np.isfinite(months):
        verdict = "buying breaks even after " + _num(months) + " months"
    elif months == np.inf:
        verdict = "renting never costs more than the power"
    elif no_cloud:
        verdict = "no cloud price to compare"
    else:
        verdict = "no purchase price to compare"
    lines.append(f"{buy}; {power}{rent} {use}: {verdict}")
    return "\n".join(lines)


__all__ = ["add_speed_cost", "format_speed_cost", "read_settings", "check_prompt",
           "speed_cost_columns", "speed_columns", "speed_level", "SETTINGS", "OUTPUT_COLUMNS"]
