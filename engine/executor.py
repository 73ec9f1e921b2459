"""The executor: evaluates the physics (engine/components.py) over a sweep's rows.

A sweep's rows share few *configurations* (every column but batch and seq: model, GPU, method,
precision, GPU count, ...; engine.scenarios.Configs), and fewer *memory configurations* (the
same without the GPU and the headroom). The physics runs once per memory configuration. Per
configuration: the GPU's capacity, the largest token count that fits, rates and prices. Per
configuration x seq: the training time and cost, the largest batch. Per row, in blocks of
ROW_BLOCK rows: the terms in tokens = batch x seq, the peak, the components at the peak, the
runtime overhead, the fit and the GPUs needed. A value computed once and gathered to its rows
is the very value a per-row evaluation of the same expression gives (the expressions keep
their order of operations), so results do not depend on how rows are grouped.

The stages are functions of small frozen records, each returned by one stage and taken by the
next, so that no stage depends on another having run before it:

  PhaseParts  a configuration's memory parts per phase: fixed, shard (/ dp), per token, per
              token x seq (issue 12), and which configurations have the phase
  RowTerms    per row: its memory configuration, batch, seq, tokens and the per-row terms
              (tokens x seq, the last position's logits, a windowed cache's saving)
  GpuLimits   per configuration: the chosen GPU's usable memory, the tensors' capacity, the
              longest context allowed, what serving needs of its phases
  Layout      per configuration: the parallel split (dp, tp, pp, kv heads, heads, layers,
              the expert-parallel floor) and the task
  MemoryRows  the memory columns, each phase's per-token bytes x tokens per row, the overhead
  FitRows     the fit columns and the configuration x seq grouping the speed model reuses

`Sweep(sc, cfg, mv, of_config, physics, out, lean)` holds only what it is built with;
`memory()` -> MemoryRows, `fit(memory, gpus, models)` -> FitRows, `frame(memory, fit, gpus,
models)` -> the result. The fit's solvers (`largest_tokens`, `seq_terms`,
`largest_batch_per_seq`, the row blocks' `_largest_batch_rows`, `_longest_context_rows`,
`_gpus_needed_rows`) are pure functions of those records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

import engine.constants as C
import engine.categories as categories
import engine.margins as margins
from engine.components import Physics, deepspeed_zero12_rows, kv_state_bytes, kv_window_saving, last_logits_bytes
from engine.memory import COMPONENTS, PHASES, TRAIN_PHASES, is_zero
from engine.frames import came_as_series, column, column_array, column_floats, column_values
from engine.scenarios import Configs, View, ep_accepted, gpus_step
from engine.speed import OUTPUT_COLUMNS, SETTINGS, frame_shape, gpu_index, speed_columns

PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
# the inference phases that hold the KV cache (a windowed cache's saving applies to each)
INFER_CACHE_PHASES = ("prefill", "logits", "attention", "load")
# Rows per block of the per-row memory terms: a block's temporaries (512 KiB each) stay in
# the CPU's cache and in memory malloc keeps. 2^14 to 2^17 rows ran equally fast on the
# development machine (benchmarks/bench_engine.py); one block of a million rows was 14% slower.
ROW_BLOCK = 1 << 16
# the fit columns, in the order every result lists them (with or without a GPU)
FIT_COLUMNS = ("usable_bytes", "capacity_bytes", "fits", "memory_used_fraction", "max_batch", "max_seq", "gpus_needed",
               "safe_peak_bytes", "verdict_margin_pct", "fits_at_estimate")
# what serving needs of its phases (GpuLimits.serving): (name, phase, part, component)
SERVING_PARTS = (("weights", "prefill", "fixed", "weights"), ("kv_cache", "prefill", "per_token", "kv_cache"),
                 ("workspace", "prefill", "per_token", "workspace"), ("logits", "logits", "per_token", "logits"),
                 ("attention", "attention", "per_token", "workspace"),
                 ("attention_seq", "attention", "per_token_seq", "workspace"),
                 # the buffers an inference library keeps beside the weights (engine/components.py
                 # int4_kernel_parts: exllama's temp_dq, bitsandbytes' dequantized weight, rotary caches) and
                 # AutoAWQ's fused load (its fused QKV beside the originals, per-token RoPE tables)
                 ("workspace_fixed", "prefill", "fixed", "workspace"),
                 ("attention_fixed", "attention", "fixed", "workspace"),
                 ("logits_fixed", "logits", "fixed", "workspace"),
                 ("logits_work", "logits", "per_token", "workspace"),
                 ("load_fixed", "load", "fixed", "workspace"), ("load", "load", "per_token", "workspace"),
                 # (issue 28) an SDPA prefill's sliding-window mask: held through the prefill, and the mask
                 # phase (three being built, beside the embeddings' output); every rank holds them whole
                 ("prefill_sq", "prefill", "seq_sq", "workspace"), ("mask", "mask", "per_token", "workspace"),
                 ("mask_sq", "mask", "seq_sq", "workspace"))


# ==== the records ================================================================================

@dataclass(frozen=True, eq=False)
class PhaseParts:
    """A configuration's memory parts in each phase some row of the sweep has (the phases of
    the tasks present), per memory configuration or, lifted, per configuration: a phase's bytes
    = fixed + shard / dp + per_token x tokens + per_token_seq x tokens x seq."""

    fixed: dict   # {phase: bytes}
    shard: dict   # {phase: bytes split over the data-parallel ranks}
    token: dict   # {phase: bytes per token}
    seq: dict     # {phase: bytes per token per position}, only the phases that have any (issue 12)
    valid: dict   # {phase: the configurations whose task has the phase}
    dp: object    # the data-parallel ranks
    ds_step: tuple | None = None  # DeepSpeed stage 3's capped fp32 gradient at the step (components.deepspeed_zero3_step)
    # (issue 28) {phase: bytes per seq^2, whatever the batch}, only the phases that have any, and the window
    # from which on the rows hold them (an SDPA prefill's sliding-window mask: components.sliding_mask_window)
    sq: dict = field(default_factory=dict)
    sq_window: object = 0.0
    # (issue 28) {phase: bytes per token, and per token per position}, counted only from the window on (a
    # training layer's sliding-window mask and repeated K/V: components.sliding_window_training)
    token_w: dict = field(default_factory=dict)
    seq_w: dict = field(default_factory=dict)

    def lift(self, of_config) -> PhaseParts:
        """Per memory configuration -> per configuration (of_config: the memory configuration
        of each configuration; None: the same groups)."""
        lift = _lifter(of_config)
        return PhaseParts(*({k: lift(v) for k, v in d.items()} for d in (self.fixed, self.shard, self.token,
                                                                           self.seq, self.valid)), lift(self.dp),
                          None if self.ds_step is None else tuple(lift(v) for v in self.ds_step),
                          {k: lift(v) for k, v in self.sq.items()}, lift(self.sq_window),
                          {k: lift(v) for k, v in self.token_w.items()}, {k: lift(v) for k, v in self.seq_w.items()})


@dataclass(frozen=True, eq=False)
class RowTerms:
    """Per row: what the memory and the fit need of the row itself."""

    at: np.ndarray                    # the row's memory configuration
    b: np.ndarray                     # batch, seq and tokens = batch x seq, as floats
    s: np.ndarray
    tokens: np.ndarray
    seq_tokens: np.ndarray | None     # tokens x seq, where some phase has a per-token-seq term
    logits_fixed: np.ndarray | None   # the logits phase's fixed part that grows with the batch
    # the cache phases' per-row KV bytes beyond per-token x tokens: the sliding-window layers' tokens beyond their
    # window (<= 0, kv_policy windowed) plus the linear-attention layers' state per sequence (>= 0, hybrid models)
    kv_saving: np.ndarray | None
    seq_sq: np.ndarray | None = None  # seq^2 from the row's sliding window on (else 0), where some phase has a
                                      # seq^2 term (issue 28: an SDPA prefill's sliding-window mask)
    gate: np.ndarray | None = None    # 1 where seq reaches the row's sliding window, else 0 (the window terms)


@dataclass(frozen=True, eq=False)
class GpuLimits:
    """Per configuration: what the chosen GPU leaves the tensors."""

    chosen: np.ndarray     # the configuration names a GPU
    usable: np.ndarray     # the GPU's usable memory (NaN without one)
    capacity: np.ndarray   # what the tensors' estimate may reach: after headroom, the runtime overhead and the margin
    margin: np.ndarray     # the verdicts' margin over the estimate, a fraction of the tensors' peak (engine/margins.py)
    grow: np.ndarray | float  # 1 + the allocator's fragmentation share: a tensor byte's cost in the peak
    longest: np.ndarray    # the longest context allowed (the model's, or inf)
    serving: dict | None   # what serving needs of its phases (SERVING_PARTS), None without serving rows
    capacity_several: np.ndarray | None = None  # the capacity at two or more GPUs (NCCL's buffers on each)


@dataclass(frozen=True, eq=False)
class Layout:
    """Per configuration: the parallel split and the task."""

    dp: object
    tp: object
    pp: object
    kvh: object                 # the KV heads a tensor-parallel split spreads (1 for MLA's latent)
    heads: object
    layers: object
    train: np.ndarray
    infer: np.ndarray
    ep_floor: object | None     # expert parallel as given: at least ep x pp GPUs (None: no such row)
    # expert parallel as given (None: no row with ep > 1): ep, and a training row's GPU-count step at its own tp, pp,
    # cp and ep (engine/scenarios.py gpus_step; 1 for the other rows), so that the count needed is one it takes
    ep: object | None = None
    ep_step: object | None = None
    cp: object | None = None    # context parallel (issue 27): the ranks come in groups of cp (None: no such row)
    # training on one GPU with its ZeRO stage kept (offload): its GPUs needed are solved from its own parts,
    # against the capacity of several GPUs (NCCL's buffers), unless it fits alone (None: no such row)
    one_kept: object | None = None
    # kv_policy windowed (components.kv_window_saving): the sliding-window layers' KV bytes per token and their
    # window, for the longest context (None: no such row)
    kv_window: object | None = None
    window: object | None = None
    # hybrid linear attention (components.kv_state_bytes): the state per sequence per GPU, for the longest context
    # (None: no such row)
    kv_state: object | None = None


@dataclass(frozen=True, eq=False)
class MemoryRows:
    """The memory stage's output."""

    columns: dict             # the memory columns in the result's order ({} for a lean sweep)
    scaled: dict              # {phase: its per-token bytes x tokens (+ the seq term), per row}
    overhead: np.ndarray | None  # the runtime overhead per row (None for a lean sweep)


@dataclass(frozen=True, eq=False)
class FitRows:
    """The fit stage's output."""

    columns: dict              # FIT_COLUMNS (a lean sweep: gpus_needed alone, when a GPU is named)
    seq_level: tuple | None    # configuration x seq groups the largest batch used (speed reuses them)


def _lifter(of_config):
    """Per memory configuration -> per configuration."""
    return lambda x: x if of_config is None or not np.ndim(x) else x[of_config]


# ==== the sweep =================================================================================

class Sweep:
    """One estimate() call: a normalized scenario frame, its configurations (cfg), its memory
    configurations (mv; of_config: the memory configuration of each configuration, None when
    they are the same groups) and their physics. Built complete; its stages return records."""

    def __init__(self, sc: pd.DataFrame, cfg: Configs, mv: View, of_config, ph: Physics, out, lean: bool = False):
        # lean: only the GPUs needed are wanted (the one-GPU probe, engine/estimate.py): the
        # memory stage keeps the phases' per-token bytes x tokens, the fit writes gpus_needed
        self.sc, self.n, self.cfg, self.mv, self.of_config, self.ph, self.out, self.lean = (
            sc, len(sc), cfg, mv, of_config, ph, out, lean)
        self.valid = phase_validity(ph)
        self.parts = phase_parts(ph, self.valid)
        self.rows = row_terms(sc, cfg, of_config, ph, bool(self.parts.seq or self.parts.seq_w), out)

    def _lift(self, x):
        return _lifter(self.of_config)(x)

    def memory(self) -> MemoryRows:
        """Every memory column, the rows in blocks of ROW_BLOCK (lean: the scaled bytes only)."""
        if self.lean:
            return MemoryRows({}, lean_scaled(self.parts, self.rows, self.n, self.out), None)
        return memory_columns(self.ph, self.valid, self.parts, self.rows, self.mv.size, self.out)

    def fit(self, memory: MemoryRows, gpus: pd.DataFrame | None, models: pd.DataFrame) -> FitRows:
        """The fit columns against each row's GPU (NaN, fits NA, without one)."""
        cfg, n, out = self.cfg, self.n, self.out
        limits = gpu_limits(cfg, gpus, models, self.ph, self.of_config, self.sc)
        if limits is None:
            columns = {c: out.full(np.nan) if c not in ("fits", "fits_at_estimate") else None
                       for c in FIT_COLUMNS}  # (fits: in this place)
            columns["fits"] = pd.array([pd.NA] * n, dtype="boolean")
            columns["fits_at_estimate"] = pd.array([pd.NA] * n, dtype="boolean")
            return FitRows(columns, None)
        seq_level = cfg.split() if self.rows.logits_fixed is None else None
        columns = fit_columns(cfg, limits, self.parts.lift(self.of_config), layout(self.ph.inputs, self.of_config),
                              self.rows, memory, seq_level, out, self.lean)
        return FitRows(columns, seq_level)

    def frame(self, memory: MemoryRows, fit: FitRows, gpus: pd.DataFrame | None, models: pd.DataFrame) -> pd.DataFrame:
        """The speed and cost columns, and the result as a frame."""
        cfg, lift, n = self.cfg, self._lift, self.n
        # the scenario's columns: the engine's own arrays as they are; a column the caller gave as a Series, whose
        # copy-on-write lets a caller write into the result (its bare array is read-only, and a result column made of
        # it refused `result.loc[0, "batch"] = 8`)
        result = {col: _result_column(self.sc, col) for col in self.sc.columns}
        result.update(memory.columns)
        result.update(fit.columns)
        if n == 0:
            for c in (*OUTPUT_COLUMNS, *SETTINGS):  # as a non-empty result lists them
                result[c] = np.zeros(0)
            return pd.DataFrame(result, index=pd.RangeIndex(0), copy=False)
        # the speed model's inputs from its one builder (engine/speed.py speed_level), per configuration
        trainable = lift(np.rint(self.ph.totals.trainable).astype(np.int64))
        result.update(speed_columns(cfg, self.ph.inputs, lift, trainable, self.sc, self.rows.b, self.rows.s,
                                    result["weights_bytes"], result["kv_cache_context_bytes"], gpus, models, fit.seq_level,
                                    self.out, frame_shape(self.sc)))
        return pd.DataFrame(result, index=pd.RangeIndex(n), copy=False)


def _result_column(sc: pd.DataFrame, col: str):
    """A normalized frame's column as the result holds it: the array where the engine made it, else the Series
    (see Sweep.frame)."""
    return column(sc, col) if came_as_series(sc, col) else column_values(sc, col)


# ==== per memory configuration and per row: the memory columns ====================================

def phase_validity(ph: Physics) -> dict:
    """Per phase (all of PHASES): the memory configurations whose task has it."""
    x = ph.inputs
    valid = {p: (x.train if p in TRAIN_PHASES else x.infer) for p in PHASES}
    # a prefill's eager attention scores: a phase of the eagerly-attending inference rows only
    valid["attention"] = x.infer & np.broadcast_to(np.asarray(x.eager | x.awq_fused, dtype=bool), np.shape(x.infer))
    # the load of AutoAWQ's fused modules (--int4-kernel autoawq_fused): a phase of those rows only
    valid["load"] = x.infer & np.broadcast_to(np.asarray(x.awq_fused, dtype=bool), np.shape(x.infer))
    # an SDPA prefill building its sliding-window mask (components.sliding_mask_window): those rows only
    valid["mask"] = x.infer & np.broadcast_to(np.asarray(x.mask_window) > 0, np.shape(x.infer))
    # DeepSpeed ZeRO-1/2's reduction after backward: a phase of those training rows only (the others'
    # is their backward_end, engine/components.py grad_reduce_parts)
    valid["grad_reduce"] = deepspeed_zero12_rows(x)
    return valid


def phase_parts(ph: Physics, valid: dict) -> PhaseParts:
    """The phases' parts per memory configuration, for the phases some row has (no row of
    another task: never the peak)."""
    fixed, shard, token, seq, sq, token_w, seq_w = {}, {}, {}, {}, {}, {}, {}
    for name in PHASES:
        if not valid[name].any():
            continue
        fixed[name], shard[name], token[name] = ph.phases[name].totals()
        # (issue 12) + per_token_seq x tokens x seq: an attention mask or eager scores, batch x seq x seq
        if not is_zero(q := ph.phases[name].seq_total()):
            seq[name] = q
        # (issue 28) + seq_sq x seq^2 from the window on: an SDPA prefill's sliding-window mask
        if not is_zero(m := ph.phases[name].seq_sq_total()):
            sq[name] = m
        # (issue 28) + per-token and per-token-seq bytes from the window on: a training sliding-window mask
        tw, qw = ph.phases[name].window_totals()
        if not (is_zero(tw) and is_zero(qw)):
            token_w[name], seq_w[name] = tw, qw
    windowed = bool(sq or token_w)
    return PhaseParts(fixed, shard, token, seq, {k: valid[k] for k in fixed}, ph.inputs.dp, ph.ds_step,
                      sq, ph.inputs.mask_window if windowed else 0.0, token_w, seq_w)


def row_terms(sc: pd.DataFrame, cfg: Configs, of_config, ph: Physics, seq_term: bool, out) -> RowTerms:
    """Each row's memory configuration, batch, seq, tokens and per-row terms."""
    x = ph.inputs
    minv = cfg.inv if of_config is None else out.take(of_config, cfg.inv)
    mtake = lambda v: np.take(v, minv, mode="clip") if np.ndim(v) else v  # noqa: E731
    b = out.empty()
    np.copyto(b, sc["batch"].to_numpy(), casting="unsafe")  # as .astype(float)
    s = out.empty()
    np.copyto(s, sc["seq"].to_numpy(), casting="unsafe")
    tokens = np.multiply(b, s, out=out.empty())
    # the logits phase's fixed part that grows with the batch (components.last_logits_bytes)
    logits_fixed = last_logits_bytes(x, b, mtake) if x.infer.any() else None
    # the sliding-window layers' tokens beyond their window (kv_policy windowed), per row
    kv_saving = kv_window_saving(x, b, s, mtake) if x.infer.any() and np.any(x.kv_window > 0) else None
    # the linear-attention layers' state, per sequence whatever its length (hybrid models)
    if x.infer.any() and np.any(x.kv_state > 0):
        state = kv_state_bytes(x, b, mtake)
        kv_saving = state if kv_saving is None else kv_saving + state
    seq_tokens = np.multiply(tokens, s, out=out.empty()) if seq_term else None  # tokens x seq, for the per_token_seq terms
    # seq^2 from the row's sliding window on, for the seq_sq terms (issue 28; below the window SDPA's is_causal
    # stands in for the mask)
    gate = seq_sq = None
    if np.any(np.asarray(x.mask_window) > 0):
        gate = np.where(s >= mtake(x.mask_window), 1.0, 0.0)
        seq_sq = gate * (s * s)
    return RowTerms(minv, b, s, tokens, seq_tokens, logits_fixed, kv_saving, seq_sq, gate)


def _scaled_phases(parts: PhaseParts) -> list:
    """The phases with a per-token (or per-token-seq, or seq^2) part: their bytes x tokens per row."""
    return [name for name in parts.fixed
            if not is_zero(parts.token[name]) or name in parts.seq or name in parts.sq or name in parts.token_w]


def _block(rows: RowTerms, lo: int, hi: int):
    """(the block's slice, its rows' tokens x seq or None)"""
    block = slice(lo, hi)
    return block, None if rows.seq_tokens is None else rows.seq_tokens[block]


def lean_scaled(parts: PhaseParts, rows: RowTerms, n: int, out) -> dict:
    """What the GPUs needed are solved from: each phase's per-token bytes x tokens (as
    memory_columns computes them)."""
    scaled = {name: out.empty() for name in _scaled_phases(parts)}
    for lo in range(0, n, ROW_BLOCK):
        block, seq_tok = _block(rows, lo, min(n, lo + ROW_BLOCK))
        for name in scaled:
            _scaled_bytes(parts.token[name], rows.at[block], rows.tokens[block], scaled[name][block],
                          parts.seq.get(name), seq_tok, parts.sq.get(name), _rows_of(rows.seq_sq, block),
                          _window_terms(parts, name, rows, block))
    return scaled


def memory_columns(ph: Physics, valid: dict, parts: PhaseParts, rows: RowTerms, size: int, out) -> MemoryRows:
    """Every memory column of every row (size: the memory configurations), in blocks of ROW_BLOCK."""
    x, n = ph.inputs, len(rows.b)
    frag, paged, cpu = ph.fragmentation, ph.paged, ph.cpu
    cpu_tok = getattr(ph, "cpu_per_token", 0.0)  # offloaded activations (issue 13): host bytes per token
    host_rows = bool(cpu.any()) or bool(np.any(cpu_tok))
    # the freed logits' block the caching allocator keeps reserved at the loss backward, per token
    # (components.cached_logits_bytes); the column is what it adds above the tensors' peak
    cached_tok = ph.cached_per_token
    cached_rows = bool(np.any(cached_tok)) and "loss_backward" in parts.fixed
    live = list(parts.fixed)
    base = {name: parts.fixed[name] + parts.shard[name] / parts.dp for name in live}  # fixed + shard / dp
    logits_fixed, kv_saving = rows.logits_fixed, rows.kv_saving
    # the result's columns, written block by block below
    col = {"params": out.empty(np.int64), "trainable_params": out.empty(np.int64), "active_params": out.empty(np.int64)}
    vision = np.asarray(x.vision)
    col["vision_params"] = out.empty(np.int64) if np.any(vision) else out.full(0, np.int64)
    tables = _component_tables(ph.phases, valid, x.dp, size, logits_fixed is not None)
    for comp in COMPONENTS:
        col[f"{comp}_bytes"] = out.full(0.0) if tables[comp] is None else out.empty()
    col["kv_cache_context_bytes"] = None  # (set below, in this place)
    col["model_states_bytes"] = out.empty()
    col["paged_optimizer_bytes"] = out.empty() if paged.any() else out.full(0.0)
    col["runtime_overhead_bytes"] = overhead_row = out.empty()
    col["peak_bytes"] = out.empty()  # the tensors' peak + runtime overhead
    peak_idx = out.empty(np.int8)
    col["peak_phase"] = None  # (set below, in this place)
    for name in PHASES:
        col[f"{name}_phase_bytes"] = out.empty() if name in base else out.full(np.nan)
    col["cpu_bytes"] = out.empty() if host_rows else out.full(0.0)
    col["allocator_cached_bytes"] = out.empty() if cached_rows else out.full(0.0)
    # a phase's per-token bytes x tokens, per row (the fit reuses them)
    scaled = {name: out.empty() for name in _scaled_phases(parts)}
    N64, trainable64 = x.N.astype(np.int64), np.rint(ph.totals.trainable).astype(np.int64)
    active64 = np.asarray(x.active).astype(np.int64)
    comp_cols = {comp: col[f"{comp}_bytes"] for comp in COMPONENTS if tables[comp] is not None}
    partial = {name: not parts.valid[name].all() for name in live}  # a phase some rows do not have

    for lo in range(0, n, ROW_BLOCK):  # a block small enough to stay in cache
        block, seq_tok = _block(rows, lo, min(n, lo + ROW_BLOCK))
        at = rows.at[block]
        get = lambda v, at=at: np.take(v, at, mode="clip") if np.ndim(v) else v  # noqa: E731
        tok = rows.tokens[block]
        totals = {}
        for name in live:
            t = _gather(base[name], at, col[f"{name}_phase_bytes"][block])
            if name == "logits":
                t += logits_fixed[block]
            if kv_saving is not None and name in INFER_CACHE_PHASES:
                t += kv_saving[block]
            if name in scaled:
                t += _scaled_bytes(parts.token[name], at, tok, scaled[name][block], parts.seq.get(name), seq_tok,
                                   parts.sq.get(name), _rows_of(rows.seq_sq, block), _window_terms(parts, name, rows, block))
            if partial[name]:
                t = np.where(get(parts.valid[name]), t, -np.inf)
            totals[name] = t
        peak, tensor_peak = _peak(totals, len(tok))
        if cached_rows:  # reserved at the loss backward beyond the tensors' peak of every phase
            idle = col["allocator_cached_bytes"][block]
            np.multiply(get(cached_tok), tok, out=idle)
            idle += totals["loss_backward"]
            idle -= tensor_peak
            np.maximum(idle, 0.0, out=idle)
        np.take(N64, at, out=col["params"][block], mode="clip")
        np.take(trainable64, at, out=col["trainable_params"][block], mode="clip")
        np.take(active64, at, out=col["active_params"][block], mode="clip")
        if np.any(vision):
            np.take(vision.astype(np.int64), at, out=col["vision_params"][block], mode="clip")
        _components(tables, peak, at, size, tok, None if logits_fixed is None else logits_fixed[block],
                    {comp: c[block] for comp, c in comp_cols.items()}, seq_tok, _rows_of(rows.seq_sq, block),
                    _rows_of(rows.gate, block))
        if kv_saving is not None:  # an inference row's peak holds the cache, but the mask phase (built before it)
            np.add(col["kv_cache_bytes"][block], kv_saving[block], out=col["kv_cache_bytes"][block],
                   where=peak != PHASE_INDEX["mask"])
        np.take(ph.model_states, at, out=col["model_states_bytes"][block], mode="clip")
        if paged.any():
            np.take(paged, at, out=col["paged_optimizer_bytes"][block], mode="clip")
        overhead = np.multiply(frag, tensor_peak, out=overhead_row[block])
        overhead += get(ph.context)  # context + fragmentation x the tensors' peak
        tensor_peak += overhead
        np.copyto(col["peak_bytes"][block], tensor_peak)
        np.copyto(peak_idx[block], peak)
        for name in live:
            if partial[name]:
                np.copyto(col[f"{name}_phase_bytes"][block], np.where(get(parts.valid[name]), totals[name], np.nan))
        if host_rows:
            np.take(cpu, at, out=col["cpu_bytes"][block], mode="clip")
            if np.any(cpu_tok):
                col["cpu_bytes"][block] += get(cpu_tok) * tok
    col["peak_phase"] = categories.from_codes(peak_idx, PHASES)
    kv_held = _kv_held(tables, peak_idx, rows, size, kv_saving, col["kv_cache_bytes"])
    # (the same array as kv_cache_bytes where no row peaks at the mask phase: pandas' copy-on-write keeps them apart)
    col["kv_cache_context_bytes"] = col["kv_cache_bytes"] if kv_held is None else kv_held
    return MemoryRows(col, scaled, overhead_row)


def _kv_held(tables: dict, peak_idx: np.ndarray, rows: RowTerms, size: int, kv_saving, kv_col) -> np.ndarray | None:
    """The KV cache of the rows whose peak is the mask phase (no KV yet) as the prefill holds it, the
    kv_cache_bytes column elsewhere; None where no row peaks at the mask phase."""
    at_mask = np.flatnonzero(peak_idx == PHASE_INDEX["mask"])
    if not len(at_mask) or tables["kv_cache"] is None:
        return None
    held = kv_col.copy()
    prefill = {"kv_cache": np.zeros(len(at_mask))}
    _components({"kv_cache": tables["kv_cache"]}, np.full(len(at_mask), PHASE_INDEX["prefill"], dtype=np.int8),
                rows.at[at_mask], size, rows.tokens[at_mask], None, prefill,
                None if rows.seq_tokens is None else rows.seq_tokens[at_mask],
                None if rows.seq_sq is None else rows.seq_sq[at_mask], None if rows.gate is None else rows.gate[at_mask])
    held[at_mask] = prefill["kv_cache"] + (0.0 if kv_saving is None else kv_saving[at_mask])
    return held


# ---- the memory columns: helpers ---------------------------------------------------------------

def _gather(values, at: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """values[at] (a scalar: everywhere) written into dest, which is returned."""
    if np.ndim(values):
        return np.take(values, at, out=dest, mode="clip")
    dest.fill(values)
    return dest


def _window_terms(parts: PhaseParts, name: str, rows: RowTerms, block: slice):
    """(per token, per token per position, the rows' gate) counted from the window on, for a phase that has
    them (None otherwise)."""
    if name not in parts.token_w:
        return None
    return parts.token_w[name], parts.seq_w[name], rows.gate[block]


def _scaled_bytes(per_token, at, tok, dest, per_seq=None, seq_tok=None, per_sq=None, seq_sq=None, window=None) -> np.ndarray:
    """A phase's per-token bytes x tokens (+ its per-token-seq bytes x tokens x seq, issue 12; + its
    bytes per seq^2 x the rows' seq^2 from their window on, issue 28) for the rows whose memory
    configurations are `at`, written into dest, which is returned."""
    by_tokens = _gather(per_token, at, dest)
    by_tokens *= tok
    gate = None
    if window is not None:
        *window, gate = window
    return _add_seq_terms(by_tokens, _taker(at), tok, seq_tok, per_seq, per_sq, seq_sq, window, gate)


def _add_seq_terms(value, get, tok, seq_tok, per_seq=None, per_sq=None, seq_sq=None, window=None, gate=None):
    """value += per_seq x tokens x seq (issue 12) + per_sq x seq^2 (issue 28: from the rows' window on) +
    (tok_w x tokens + seq_w x tokens x seq) x gate (issue 28: window = (tok_w, seq_w)), each term where it is
    given; get: a per-configuration (or per-phase-and-configuration) table -> the rows' values. The one
    place both the phases' totals (_scaled_bytes) and the components at the peak (_components) add them."""
    if per_seq is not None:
        value += get(per_seq) * seq_tok
    if per_sq is not None:
        value += get(per_sq) * seq_sq
    if window is not None:
        tw, qw = window
        extra = get(tw) * tok
        if not is_zero(qw):
            extra += get(qw) * seq_tok
        value += extra * gate
    return value


def _rows_of(values, block: slice):
    """values[block], None stays None."""
    return None if values is None else values[block]


def _peak(totals: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the phase with the largest total (the first on ties, as np.argmax) and that total."""
    names = list(totals)
    if not names:
        return np.zeros(n, dtype=np.int8), np.zeros(n)
    best = totals[names[0]].copy()
    peak = np.full(n, PHASE_INDEX[names[0]], dtype=np.int8)
    gt = np.empty(n, dtype=bool)
    for name in names[1:]:
        t = totals[name]
        np.greater(t, best, out=gt)
        np.copyto(peak, np.int8(PHASE_INDEX[name]), where=gt)
        np.maximum(best, t, out=best)
    if np.isnan(best).any():  # np.argmax takes the first NaN; the running maximum would not
        stacked = np.full((len(PHASES), n), -np.inf)
        for name in names:
            stacked[PHASE_INDEX[name]] = totals[name]
        peak = np.argmax(stacked, axis=0).astype(np.int8)
        best = stacked[peak, np.arange(n)]
    return peak, best


def _component_tables(phases: dict, valid: dict, dp, size: int, logits_fixed: bool) -> dict:
    """Per component: its (fixed + shard / dp, per-token) bytes in each (phase, memory
    configuration), as flat tables (None where no phase has any), or None for a component
    that is nothing in every phase (e.g. the KV cache when training)."""
    tables = {}
    for comp in COMPONENTS:
        per_config = np.empty((len(PHASES), size))
        per_token = np.zeros((len(PHASES), size))
        per_seq = np.zeros((len(PHASES), size))
        per_sq = None  # (issue 28) bytes per seq^2 from the window on, where a phase has any
        tok_w = seq_w = None  # (issue 28) per token / per token per position from the window on
        scaled = quadratic = False
        for i, name in enumerate(PHASES):
            ph = phases[name]
            per_config[i] = ph.fixed.get(comp, 0.0) + ph.shard.get(comp, 0.0) / dp
            tk = ph.per_token.get(comp, 0.0)
            # a phase that is no row's peak (its task absent) adds nothing
            if not is_zero(tk) and valid[name].any():
                per_token[i] = tk
                scaled = True
            q = ph.per_token_seq.get(comp, 0.0)
            if not is_zero(q) and valid[name].any():
                per_seq[i] = q
                quadratic = True
            m = ph.seq_sq.get(comp, 0.0)
            if not is_zero(m) and valid[name].any():
                if per_sq is None:
                    per_sq = np.zeros((len(PHASES), size))
                per_sq[i] = m
            tw, qw = ph.per_token_w.get(comp, 0.0), ph.per_token_seq_w.get(comp, 0.0)
            if not (is_zero(tw) and is_zero(qw)) and valid[name].any():
                if tok_w is None:
                    tok_w, seq_w = np.zeros((len(PHASES), size)), np.zeros((len(PHASES), size))
                tok_w[i], seq_w[i] = tw, qw
        fixed = per_config.any()
        if not (scaled or fixed or quadratic or per_sq is not None or tok_w is not None
                or (comp == "logits" and logits_fixed)):
            tables[comp] = None
        else:
            tables[comp] = (per_config.ravel() if fixed else None, per_token.ravel() if scaled else None,
                            per_seq.ravel() if quadratic else None, None if per_sq is None else per_sq.ravel(),
                            None if tok_w is None else (tok_w.ravel(), seq_w.ravel()))
    return tables


def _components(tables: dict, peak: np.ndarray, at: np.ndarray, size: int, tokens, logits_fixed, dest: dict,
                seq_tokens=None, seq_sq=None, gate=None):
    """Each component's bytes in the row's peak phase (fixed + shard / dp + per_token x tokens of
    that phase and memory configuration), written into dest[component]."""
    where = peak.astype(np.intp)  # (phase, memory configuration) of each row, in the tables
    where *= size
    where += at
    get = _taker(where)
    for comp, value in dest.items():
        per_config, per_token, per_seq, per_sq, window = tables[comp]
        if per_token is not None:
            np.take(per_token, where, out=value, mode="clip")
            value *= tokens
            if per_config is not None:  # (fixed + shard / dp) + per_token x tokens
                value += np.take(per_config, where, mode="clip")
        elif per_config is not None:
            np.take(per_config, where, out=value, mode="clip")
        else:
            value.fill(0.0)
        _add_seq_terms(value, get, tokens, seq_tokens, per_seq, per_sq, seq_sq, window, gate)
        if comp == "logits" and logits_fixed is not None:
            np.copyto(value, value + logits_fixed, where=peak == PHASE_INDEX["logits"])


# ==== per configuration: the GPU's limits and the fit ===========================================

def gpu_limits(cfg: Configs, gpus: pd.DataFrame | None, models: pd.DataFrame, ph: Physics, of_config,
               sc: pd.DataFrame) -> GpuLimits | None:
    """Per configuration: the chosen GPU's usable memory and the tensors' capacity, the longest
    context allowed, what serving needs (None when no row names a GPU)."""
    chosen = ~cfg.mask("gpu", "")
    if gpus is None or len(sc) == 0 or not chosen.any():
        return None
    x, lift = ph.inputs, _lifter(of_config)
    gidx = gpu_index(cfg, gpus)
    usable = np.where(chosen, column_array(gpus, "usable_memory_bytes").astype(float)[np.maximum(gidx, 0)], np.nan)
    headroom = cfg.values("headroom")
    # issue 28: a verdict never under-promises. fits, max_batch, max_seq and gpus_needed are decided on
    # the band's high side (the held-out error of both measuring harnesses and the allowances of the
    # paths nobody measured, engine/margins.py): the tensors' estimate x (1 + margin) must fit, i.e. the
    # estimate must fit capacity / (1 + margin); every solver reads this capacity
    margin = verdict_margin(cfg, models, lift(x.model))

    def capacity_at(context):  # what the tensors may use after headroom and a fixed runtime overhead, less
        return (usable * (1 - headroom) - context) / (1 + ph.fragmentation) / (1.0 + margin)  # fragmentation

    capacity = capacity_at(lift(ph.context))  # (the row's own GPU count)
    # the longest context is bounded by the model's own, unless the scenario allows longer
    ctx = column_floats(models, "max_context")[lift(x.model)]
    longest = np.where(cfg.values("allow_long_context"), np.inf, ctx)
    # what serving needs of its phases: weights, KV cache, working set, logits
    serving = ({name: lift(getattr(ph.phases[phase], part).get(comp, 0.0)) for name, phase, part, comp in SERVING_PARTS}
               if x.infer.any() else None)
    # the GPUs-needed solvers': the capacity at two or more GPUs (NCCL's buffers), and for serving at one
    if serving is not None:  # (_infer_gpus_needed: also the undivided per-token working sets)
        serving.update({f"{k}_rep": lift(v) for k, v in ph.serving_rep.items()})
        serving["capacity_one"] = capacity_at(ph.context_one)
    return GpuLimits(chosen, usable, capacity, margin, 1.0 + ph.fragmentation, longest, serving,
                     capacity_at(ph.context_several))


def verdict_margin(cfg: Configs, models: pd.DataFrame, model_rows: np.ndarray) -> np.ndarray:
    """Per configuration, the band's high side as a fraction (engine/margins.py: the measured part
    plus the largest allowance that applies), read from the configuration's own columns and its
    model's architecture."""
    n = cfg.size

    def mask(name, default, *values):  # through the categories: no column of strings is built
        return cfg.mask(name, *values) if name in cfg.frame else np.full(n, default in values)

    def num(name, default):
        return cfg.values(name).astype(float) if name in cfg.frame else np.full(n, float(default))

    def model_col(name, default):
        if name not in models:
            return np.full(n, default)
        return column_array(models, name, default)[model_rows]

    return margins.high_pct(margins.reasons(mask, num, model_col, layout=False), n) / 100.0


def layout(x, of_config) -> Layout:
    """Per configuration: the parallel split and the task."""
    lift = _lifter(of_config)
    return Layout(dp=lift(x.dp), tp=lift(x.tp), pp=lift(x.pp), kvh=lift(np.where(x.mla, 1.0, x.kvh)), heads=lift(x.a),
                  layers=lift(x.L), train=lift(x.train), infer=lift(x.infer),
                  ep_floor=lift(np.where(x.ep > 1, x.ep * x.pp, 1.0)) if np.any(x.ep > 1) else None,
                  ep=lift(x.ep) if np.any(x.ep > 1) else None,
                  ep_step=lift(np.where(x.train & (x.ep > 1), gpus_step(x.tp, x.pp, x.cp, x.ep), 1).astype(float))
                  if np.any(x.ep > 1) else None,
                  cp=lift(np.asarray(x.cp, dtype=float)) if np.any(np.asarray(x.cp) > 1) else None,
                  one_kept=lift(kept) if np.any(kept := x.train & (x.gpus == 1) & (x.zero > 0)) else None,
                  kv_window=lift(x.kv_window) if (win := np.any(x.infer) and np.any(x.kv_window > 0)) else None,
                  window=lift(x.window) if win else None,
                  kv_state=lift(x.kv_state) if np.any(x.infer) and np.any(x.kv_state > 0) else None)


def largest_tokens(capacity: np.ndarray, parts: PhaseParts, size: int, logits_per_row: bool) -> np.ndarray:
    """Per configuration: the largest token count per micro-batch that fits, over all phases
    (but the logits phase where its fixed part grows with the batch: per row)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        max_tokens = np.full(size, np.inf)
        for name in parts.valid:
            if name == "logits" and logits_per_row:
                continue
            room = capacity - parts.fixed[name] - parts.shard[name] / parts.dp
            tk = parts.token[name]
            max_tokens = np.minimum(max_tokens, np.where(parts.valid[name], _tokens_within(room, tk), np.inf))
    return max_tokens


def seq_terms(capacity: np.ndarray, parts: PhaseParts, size: int, per_row_rooms: bool) -> dict:
    """(issue 12) Per phase, per configuration, what a row with a per_token_seq term solves
    from: (room, lin, q, valid), see _quad_limits; without per-row rooms (the logits of a batch,
    a windowed cache: inference) the phases without a seq term solve per configuration, as
    terms[None]: the most tokens they leave room for."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # (+ issue 28: the phase's bytes per seq^2 from the window on, and that window, where it has any)
        terms = {name: (capacity - parts.fixed[name] - parts.shard[name] / parts.dp,
                        np.broadcast_to(parts.token[name], (size,)).astype(float),
                        np.broadcast_to(parts.seq.get(name, 0.0), (size,)).astype(float),
                        np.broadcast_to(parts.valid[name], (size,)),
                        None if name not in parts.sq else np.broadcast_to(parts.sq[name], (size,)).astype(float),
                        None if name not in parts.sq and name not in parts.token_w
                        else np.broadcast_to(parts.sq_window, (size,)).astype(float),
                        # (the per-token and per-token-seq bytes from the window on)
                        None if name not in parts.token_w else (np.broadcast_to(parts.token_w[name], (size,)).astype(float),
                                                                np.broadcast_to(parts.seq_w[name], (size,)).astype(float)))
                 for name in parts.valid}
        if not per_row_rooms:
            linear = [name for name in terms if not np.any(terms[name][2] > 0) and terms[name][5] is None]
            lin_limit = np.full(size, np.inf)
            for name in linear:
                room, lin, _, ok, _, _, _ = terms.pop(name)
                lin_limit = np.minimum(lin_limit, np.where(ok, _tokens_within(room, lin), np.inf))
            terms[None] = lin_limit
    return terms


def largest_batch_per_seq(inv: np.ndarray, seq_level: tuple, s: np.ndarray, max_tokens: np.ndarray, terms: dict,
                          quad_any: np.ndarray, chosen: np.ndarray, out) -> np.ndarray:
    """Per configuration x seq group (the batch does not enter): the largest batch that fits."""
    _, seq_rows = seq_level
    all_chosen = bool(chosen.all())
    batch_of_group = out.empty(length=len(seq_rows))
    with np.errstate(divide="ignore", invalid="ignore"):
        for lo in range(0, len(seq_rows), ROW_BLOCK):  # in blocks: temporaries stay small
            part = slice(lo, min(len(seq_rows), lo + ROW_BLOCK))
            config = inv[seq_rows[part]]
            at_seq = np.floor(max_tokens[config] / s[seq_rows[part]])
            if terms and quad_any[config].any():  # at the group's seq each token costs lin + q x seq
                sg = s[seq_rows[part]]
                most, _ = _quad_limits(lambda v, config=config: v[config], terms, None, sg)
                at_seq = np.where(quad_any[config], np.floor(most / sg), at_seq)
            ok = at_seq >= 1 if all_chosen else chosen[config] & (at_seq >= 1)
            batch_of_group[part] = np.where(ok, np.minimum(at_seq, 1e12), 0.0)
    return batch_of_group


@dataclass(frozen=True, eq=False)
class FitPlan:
    """What the fit's row blocks solve from: per configuration (and configuration x seq), and
    the serving rows' GPUs needed (solved for all rows at once)."""

    limits: GpuLimits
    parts: PhaseParts
    layout: Layout
    all_chosen: bool
    max_tokens: np.ndarray
    quad_any: np.ndarray              # the configurations with a per_token_seq term
    terms: dict                       # seq_terms (empty without such a term, or for a lean sweep)
    seq_level: tuple | None           # (group of each row, a row of each group): configuration x seq
    batch_of_group: np.ndarray | None  # largest_batch_per_seq
    batch_level: tuple | None         # (group of each row, a row of each group): configuration x batch
    longest_of_group: np.ndarray | None  # longest_context_per_batch
    ranks: tuple | None               # _train_ranks, where a row trains
    infer_need: np.ndarray | None     # per row: _infer_gpus_needed, where a row serves
    splits: list                      # tp, pp where not all one


def fit_plan(cfg: Configs, limits: GpuLimits, parts: PhaseParts, lay: Layout, rows: RowTerms, seq_level, out,
             lean: bool) -> FitPlan:
    """The per-configuration half of the fit."""
    quad_any = np.zeros(cfg.size, dtype=bool)
    # (issue 28: a seq^2 term, and the terms counted from the window on, are solved the same way)
    for q in (*parts.seq.values(), *parts.sq.values(), *parts.token_w.values(), *parts.seq_w.values()):
        quad_any |= np.broadcast_to(q, (cfg.size,)) > 0
    terms = {}
    # (the GPUs needed take the seq term through the phases' scaled bytes; a windowed cache's longest context is
    # solved from the same terms, _windowed_longest)
    if (parts.seq or parts.sq or parts.token_w or lay.kv_window is not None or lay.kv_state is not None) and not lean:
        terms = seq_terms(limits.capacity, parts, cfg.size, rows.logits_fixed is not None or rows.kv_saving is not None)
    max_tokens = largest_tokens(limits.capacity, parts, cfg.size, rows.logits_fixed is not None)
    batch_of_group = batch_level = longest_of_group = None
    if seq_level is not None and not lean:
        batch_of_group = largest_batch_per_seq(cfg.inv, seq_level, rows.s, max_tokens, terms, quad_any,
                                               limits.chosen, out)
        # without per-row rooms (seq_level) the longest context depends on the batch alone
        batch_level = cfg.split_batch()
        longest_of_group = longest_context_per_batch(cfg.inv, batch_level, rows.b, max_tokens, terms, quad_any,
                                                     limits, out)
    # (a one-GPU row with its ZeRO stage kept needs the capacity of several GPUs from its second rank on)
    train_capacity = limits.capacity if lay.one_kept is None else np.where(lay.one_kept, limits.capacity_several,
                                                                            limits.capacity)
    ranks = (_train_ranks(train_capacity, parts.fixed, parts.shard, parts.token, parts.ds_step)
             if lay.train.any() else None)
    infer_need = _infer_gpus_needed(cfg, limits, lay, rows) if lay.infer.any() else None
    splits = [v for v in (lay.tp, lay.pp) if not np.all(v == 1)]  # ranks x tp x pp (a factor of one changes nothing)
    return FitPlan(limits, parts, lay, bool(limits.chosen.all()), max_tokens, quad_any, terms, seq_level,
                   batch_of_group, batch_level, longest_of_group, ranks, infer_need, splits)


def longest_context_per_batch(inv: np.ndarray, batch_level: tuple, b: np.ndarray, max_tokens: np.ndarray,
                              terms: dict, quad_any: np.ndarray, limits: GpuLimits, out) -> np.ndarray:
    """Per configuration x batch group, where no row's own terms enter (no logits of a batch,
    no windowed cache): the longest context at that batch, bounded by limits.longest (NaN
    without a GPU). The very operations _fit_rows and fit_columns apply per row otherwise."""
    _, batch_rows = batch_level
    chosen = limits.chosen
    all_chosen = bool(chosen.all())
    longest = out.empty(length=len(batch_rows))
    for lo in range(0, len(batch_rows), ROW_BLOCK):  # in blocks: temporaries stay small
        part = slice(lo, min(len(batch_rows), lo + ROW_BLOCK))
        config = inv[batch_rows[part]]
        bg = b[batch_rows[part]]
        with np.errstate(divide="ignore", invalid="ignore"):
            ms = np.divide(max_tokens[config], bg, out=longest[part])  # the longest sequence at the batch
            np.floor(ms, out=ms)
            if terms:  # a batch x seq x seq term: the quadratic's root (_quad_limits)
                q_rows = quad_any[config]
                if q_rows.any():
                    _, per_s = _quad_limits(lambda v, config=config: v[config], terms, bg, bg, by_batch=False)
                    np.copyto(ms, np.floor(per_s), where=q_rows)
        chosen_g = None if all_chosen else chosen[config]
        short = ms < 1 if all_chosen else ~(chosen_g & (ms >= 1))
        np.minimum(ms, 1e12, out=ms)
        np.copyto(ms, 0.0, where=short)
        if not all_chosen:
            ms[~chosen_g] = np.nan
        np.minimum(ms, limits.longest[config], out=ms)  # (NaN stays NaN)
    return longest


def fit_columns(cfg: Configs, limits: GpuLimits, parts: PhaseParts, lay: Layout, rows: RowTerms, memory: MemoryRows,
                seq_level, out, lean: bool) -> dict:
    """Fit against the chosen GPU: fits, GPUs needed, largest batch, longest context (at most
    limits.longest). What does not depend on the row first (fit_plan: per configuration, or
    configuration x seq), then the rows in blocks of ROW_BLOCK."""
    n = len(rows.b)
    plan = fit_plan(cfg, limits, parts, lay, rows, seq_level, out, lean)
    if lean:  # gpus_needed only (Sweep)
        cols = {"gpus_needed": out.empty()}
    else:
        cols = {"usable_bytes": out.empty(), "capacity_bytes": out.empty(), "fits": out.empty(bool),
                "memory_used_fraction": out.empty(), "max_batch": out.empty(), "max_seq": out.empty(),
                "gpus_needed": out.empty(), "safe_peak_bytes": out.empty(), "verdict_margin_pct": out.empty(),
                "fits_at_estimate": out.empty(bool)}
        unknown = out.full(False, bool) if plan.all_chosen else out.empty(bool)
    for lo in range(0, n, ROW_BLOCK):
        block = slice(lo, min(n, lo + ROW_BLOCK))
        at = cfg.inv[block]
        take = _taker(at)
        scaled = {k: v[block] for k, v in memory.scaled.items()}
        if lean:
            _gpus_needed_rows(cols["gpus_needed"][block], block, take, None if plan.all_chosen else take(limits.chosen),
                              plan, scaled)
            continue
        chosen_r = _fit_rows(block, at, plan, rows, memory, cols, unknown)
        _gpus_needed_rows(cols["gpus_needed"][block], block, take, chosen_r, plan, scaled, cols["fits"][block])
        if chosen_r is not None:
            # a row without a GPU has no largest batch or context either: NaN, as when no row of
            # the frame has a GPU (they read 0 when another row of the frame had one)
            cols["max_batch"][block][~chosen_r] = np.nan
            cols["safe_peak_bytes"][block][~chosen_r] = np.nan
            cols["verdict_margin_pct"][block][~chosen_r] = np.nan
        if plan.longest_of_group is None:  # (longest_context_per_batch does the same per group)
            ms = cols["max_seq"][block]
            if chosen_r is not None:
                ms[~chosen_r] = np.nan
            np.minimum(ms, take(limits.longest), out=ms)  # (NaN stays NaN)
    if not lean:
        cols["fits"] = pd.arrays.BooleanArray(cols["fits"], unknown)
        cols["fits_at_estimate"] = pd.arrays.BooleanArray(cols["fits_at_estimate"], unknown.copy())
    return cols


def _taker(at: np.ndarray):
    """Per configuration -> the block's rows `at` (a fresh array; scalars stay scalars)."""
    return lambda v: np.take(v, at, mode="clip") if np.ndim(v) else v


def _fit_rows(block: slice, at: np.ndarray, plan: FitPlan, rows: RowTerms, memory: MemoryRows, cols: dict, unknown):
    """A block's capacity, fits, memory used, largest batch and longest context (before the
    context bound); returns the rows' chosen flags (None: every row has a GPU)."""
    limits, take = plan.limits, _taker(at)
    c = np.take(limits.capacity, at, out=cols["capacity_bytes"][block], mode="clip")
    u = np.take(limits.usable, at, out=cols["usable_bytes"][block], mode="clip")
    pk = memory.columns["peak_bytes"][block]
    tensors = pk - memory.overhead[block]
    f = np.less_equal(tensors, c, out=cols["fits"][block])  # the tensors' peak against what they may use
    # the figure the verdict is decided on (issue 28): the tensors x (1 + margin), with their overhead
    m = take(limits.margin)
    np.multiply(m, 100.0, out=cols["verdict_margin_pct"][block])
    np.add(pk, tensors * m * take(limits.grow), out=cols["safe_peak_bytes"][block])
    np.less_equal(tensors, c * (1.0 + m), out=cols["fits_at_estimate"][block])  # the estimate alone
    chosen_r = None
    if not plan.all_chosen:
        chosen_r = take(limits.chosen)
        np.logical_and(f, chosen_r, out=f)
        np.logical_and(cols["fits_at_estimate"][block], chosen_r, out=cols["fits_at_estimate"][block])
        np.logical_not(chosen_r, out=unknown[block])
    np.divide(pk, u, out=cols["memory_used_fraction"][block])
    if plan.longest_of_group is not None:  # per configuration x seq and configuration x batch groups
        np.take(plan.batch_of_group, plan.seq_level[0][block], out=cols["max_batch"][block], mode="clip")
        np.take(plan.longest_of_group, plan.batch_level[0][block], out=cols["max_seq"][block], mode="clip")
        return chosen_r
    with np.errstate(divide="ignore", invalid="ignore"):
        mt = np.take(plan.max_tokens, at, out=cols["max_seq"][block], mode="clip")
        _largest_batch_rows(block, take, plan, rows, c, mt, chosen_r, cols["max_batch"][block])
        ms = np.divide(mt, rows.b[block], out=mt)  # the longest sequence at the row's batch
        np.floor(ms, out=ms)
        if (plan.layout.kv_window is not None or plan.layout.kv_state is not None) and rows.kv_saving is not None:
            _windowed_longest(block, at, plan, rows, ms)
        if plan.terms:  # rows with a batch x seq x seq term: their longest context (and largest batch)
            _seq_term_rows(block, at, plan, rows, chosen_r, cols["max_batch"][block], ms)
    short = ms < 1 if chosen_r is None else ~(chosen_r & (ms >= 1))
    np.minimum(ms, 1e12, out=ms)
    np.copyto(ms, 0.0, where=short)
    return chosen_r


def _largest_batch_rows(block, take, plan: FitPlan, rows: RowTerms, c, mt, chosen_r, max_batch) -> None:
    """The block's largest batch into max_batch: the configuration x seq group's, or solved per
    row where a row's own terms enter (the logits of a batch, a windowed cache: mt, the most
    tokens, is lowered to what they leave)."""
    if plan.seq_level is not None:
        np.take(plan.batch_of_group, plan.seq_level[0][block], out=max_batch, mode="clip")
        return
    parts, logits_fixed, kv_saving, size = plan.parts, rows.logits_fixed, rows.kv_saving, len(plan.max_tokens)
    if logits_fixed is not None and "logits" in parts.valid:
        room = c - (take(parts.fixed["logits"]) + logits_fixed[block]) - take(parts.shard["logits"] / parts.dp)
        tk = take(np.broadcast_to(parts.token["logits"], (size,)))
        np.minimum(mt, np.where(take(parts.valid["logits"]), _tokens_within(room, tk), np.inf), out=mt)
    if kv_saving is not None:
        # windowed sliding-window layers: at the row's seq each token costs less KV (kv_saving / tokens < 0); a
        # linear-attention state costs more (> 0): the largest batch at that seq is solved with it
        corr = kv_saving[block] / rows.tokens[block]
        lim = np.full(len(corr), np.inf)
        for name in INFER_CACHE_PHASES:
            if name not in parts.valid:
                continue
            room = c - take(parts.fixed[name]) - take(parts.shard[name] / parts.dp)
            if name == "logits" and logits_fixed is not None:
                room = room - logits_fixed[block]
            tk = take(np.broadcast_to(parts.token[name], (size,))) + corr
            lim = np.minimum(lim, _tokens_within(room, tk))
        np.copyto(mt, lim, where=take(plan.layout.infer) & (corr != 0))
    most = np.floor(mt / rows.s[block])
    ok_batch = most >= 1 if chosen_r is None else chosen_r & (most >= 1)
    np.copyto(max_batch, np.where(ok_batch, np.minimum(most, 1e12), 0.0))


def _row_subset(block: slice, at: np.ndarray, rows: RowTerms, on: np.ndarray):
    """The rows of a block where `on`, for a solver that reads them alone: (their positions in the block, a taker of
    their configurations' values, a reader of their row-level arrays). Each solver's arithmetic is per row, so the
    figures are the ones it gives over the whole block; it runs over these rows only (a few: the windowed or
    seq-term rows of a sweep)."""
    idx = np.flatnonzero(on)
    return idx, _taker(at[idx]), (lambda a: None if a is None else a[block][idx])


def _windowed_longest(block, at, plan: FitPlan, rows: RowTerms, ms) -> None:
    """kv_policy windowed: beyond its window a sliding-window layer keeps window tokens of K/V, so past the
    window each cache phase grows by its per-token bytes less those layers' (components.kv_window_saving:
    bytes = fixed + kw b W + (per_token - kw) b s for s > W). The longest sequence at the row's batch, solved
    in both regimes by _quad_limits (kv_win), into ms for the rows without a batch x seq x seq term
    (_seq_term_rows solves those the same way). A linear-attention state (kv_state, hybrid models) is solved here
    too: a constant per sequence, whatever the length."""
    lay, take = plan.layout, _taker(at)
    windowed = np.zeros(len(rows.s[block]), dtype=bool) if lay.kv_window is None else take(lay.kv_window) > 0
    stateful = None if lay.kv_state is None else take(lay.kv_state)
    on = (windowed | (False if stateful is None else stateful > 0)) & take(lay.infer) & ~take(plan.quad_any)
    if not on.any():
        return
    idx, pick, row = _row_subset(block, at, rows, on)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, per_s = _quad_limits(pick, plan.terms, row(rows.b), row(rows.s), row(rows.logits_fixed), by_batch=False,
                                kv_win=None if lay.kv_window is None else (pick(lay.kv_window), pick(lay.window)),
                                kv_state=None if stateful is None else stateful[idx])
    ms[idx] = np.floor(per_s)


def _seq_term_rows(block, at, plan: FitPlan, rows: RowTerms, chosen_r, max_batch, ms) -> None:
    """(issue 12) The block's rows whose configuration has a per_token_seq term: the longest
    context at the row's batch into ms (and, without configuration x seq groups, the largest
    batch at the row's seq into max_batch)."""
    q_rows = _taker(at)(plan.quad_any)
    if not q_rows.any():
        return
    idx, pick, row = _row_subset(block, at, rows, q_rows)
    kv_saving = rows.kv_saving
    lay = plan.layout
    per_b, per_s = _quad_limits(
        pick, plan.terms, row(rows.b), row(rows.s), row(rows.logits_fixed),
        None if kv_saving is None else row(kv_saving) / row(rows.tokens), by_batch=plan.seq_level is None,
        kv_win=None if lay.kv_window is None or kv_saving is None else (pick(lay.kv_window), pick(lay.window)),
        kv_state=None if lay.kv_state is None or kv_saving is None else pick(lay.kv_state))
    if per_b is not None:  # (per configuration and seq above otherwise)
        most = np.floor(per_b / row(rows.s))
        ok_batch = most >= 1 if chosen_r is None else chosen_r[idx] & (most >= 1)
        max_batch[idx] = np.where(ok_batch, np.minimum(most, 1e12), 0.0)
    ms[idx] = np.floor(per_s)


def _gpus_needed_rows(nd: np.ndarray, block: slice, take, chosen_r, plan: FitPlan, scaled: dict, fits=None) -> None:
    """GPUs needed, for a block of rows, into nd. Training: data-parallel ranks at the scenario's
    ZeRO stage (tp x pp kept); inference: tensor parallel over powers of two (KV cache split
    over at most kv heads). scaled: each phase's per-token bytes x tokens of those rows."""
    lay = plan.layout
    if plan.ranks is not None:
        ranks, per_row, one_shard, ds_step = plan.ranks
        _train_gpus_rows(nd, take, ranks, per_row, one_shard, scaled, ds_step)
        if lay.cp is not None:  # context parallel: whole groups of cp ranks share each sequence
            cp = take(lay.cp)
            np.multiply(np.ceil(nd / cp), cp, out=nd)
        for split in plan.splits:
            nd *= take(split)
        if lay.one_kept is not None and fits is not None:  # solved at several GPUs' capacity: one, where it fits alone
            np.copyto(nd, 1.0, where=take(lay.one_kept) & fits)
    if plan.infer_need is not None:
        need = plan.infer_need[block]
        np.copyto(nd, np.where(take(lay.infer), need, nd) if plan.ranks is not None else need)
    if lay.ep_floor is not None:  # expert parallel as given: at least ep x pp GPUs (engine/rules.py)
        np.maximum(nd, take(lay.ep_floor), out=nd)
        # and a count the engine takes with that ep (engine/scenarios.py check_combinations: ep divides gpus / pp):
        # a training row keeps its tp, pp and cp, so its ranks round up to the step gpus_step gives (ep 2 on 3 GPUs
        # is refused: 4); more data-parallel ranks never hold more per GPU. A serving row's count was searched among
        # the splits that take its ep (_infer_gpus_needed)
        step = take(lay.ep_step)
        np.multiply(np.ceil(nd / step), step, out=nd, where=step > 1)
    nd[nd > C.MAX_GPUS] = np.inf
    if not plan.all_chosen:
        nd[~chosen_r] = np.nan


def _tokens_within(room, per_token):
    """The most tokens `room` bytes hold at `per_token` bytes each: inf where a token costs nothing
    and the room is not negative, -inf where it is."""
    return np.where(per_token > 0, room / per_token, np.where(room >= 0, np.inf, -np.inf))


def _quad_limits(pick, terms, b, s, logits_room=None, corr=None, by_batch=True, kv_win=None, kv_state=None):
    """Per row (or group) of a block whose configuration has a per_token_seq term (issue 12: an
    attention mask or eager scores): (the most tokens at the row's seq, or None unless by_batch; the
    longest sequence at the row's batch, or None where b is None), over every phase. pick: per
    configuration -> the block's rows. A phase's terms per configuration: (room = capacity - fixed -
    shard / dp, lin, q, valid) for lin x tokens + q x tokens x seq: at a given seq that is linear in
    the batch (tokens <= room / (lin + q seq)); at a given batch b it is q b s^2 + lin b s <= room,
    whose positive root is 2 room / (lin b + sqrt((lin b)^2 + 4 q b room)) (the form without
    cancellation; q = 0 gives room / (lin b)). logits_room: the logits phase's room less its per-row
    fixed part (the last position's logits of a batch); corr: the windowed cache's per-token
    saving at the row's seq, for the phases that hold the cache.
    (issue 28) A phase with bytes per seq^2 (m, whatever the batch) from a window W on: at a given seq
    they leave room - m s^2 where s >= W; at a given batch the quadratic is (q b + m) s^2 + lin b s, whose
    root r holds if r >= W; below, no seq from W on fits and the longest is the root without m, at most
    W - 1. kv_win: (kw, W) per row, a windowed cache (kv_policy windowed): from its window W on each token
    of the phases that hold the cache costs kw less and kw b W is kept (engine/components.py
    kv_window_saving), so the longest context is solved in both regimes as above (corr, the saving at the
    row's own seq, is the batch's alone); the mask's window and the cache's may differ (_windowed_root).
    kv_state: per row, a linear-attention state's bytes per sequence (hybrid models), which the phases that hold the
    cache keep whatever the length: their room at batch b is kv_state x b less for the longest context (corr has
    it, per token at the row's seq, for the most tokens)."""
    n = len(s)
    most_tokens = np.full(n, np.inf) if by_batch else None
    longest = np.full(n, np.inf) if b is not None else None
    for name, term in terms.items():
        if name is None:  # the phases without a seq term: the most tokens, per configuration
            lim = pick(term)
            if by_batch:
                most_tokens = np.minimum(most_tokens, lim)
            if longest is not None:
                longest = np.minimum(longest, lim / b)
            continue
        room_c, lin_c, q_c, ok_c, m_c, w_c, win_c = term
        room = pick(room_c)
        if name == "logits" and logits_room is not None:
            room = room - logits_room
        lin_plain = lin = pick(lin_c)
        if corr is not None and name in INFER_CACHE_PHASES:
            lin = lin + corr
        q = pick(q_c)
        ok = None if ok_c.all() else pick(ok_c)
        m = w = lw = qw = None
        if w_c is not None:  # a window's terms (issue 28): a seq^2 term, and per-token ones, from it on
            w = pick(w_c)
            m = pick(m_c) if m_c is not None else None
            if win_c is not None:
                lw, qw = pick(win_c[0]), pick(win_c[1])
        if by_batch:
            if w is None:
                room_s, lin_s, q_s = room, lin, q
            else:
                past = s >= w
                room_s = room if m is None else room - m * np.where(past, s * s, 0.0)
                lin_s = lin if lw is None else lin + np.where(past, lw, 0.0)
                q_s = q if qw is None else q + np.where(past, qw, 0.0)
            per_b = _tokens_within(room_s, lin_s + q_s * s)
            most_tokens = np.minimum(most_tokens, per_b if ok is None else np.where(ok, per_b, np.inf))
        if longest is None:
            continue
        if kv_state is not None and name in INFER_CACHE_PHASES:
            room = room - kv_state * b
        kw = kv_win[0] if kv_win is not None and name in INFER_CACHE_PHASES else None
        if w is None and kw is None:
            # (a state's bytes are in the room already: corr, its share per token at the row's own seq, is the batch's)
            per_s = _quad_root(room, (lin if kv_state is None else lin_plain) * b, q * b)
        else:  # from each window on its terms: the mask's from w, the windowed cache's saving from its window
            per_s = _windowed_root(room, lin_plain, q, b, w, m, lw, qw, kw, None if kw is None else kv_win[1])
        longest = np.minimum(longest, per_s if ok is None else np.where(ok, per_s, np.inf))
    return most_tokens, longest


def _windowed_root(room, lin, q, b, w, m, lw, qw, kw, kw_window):
    """The longest seq at batch b of a phase whose cost is q b s^2 + lin b s <= room below its windows, plus from the
    mask's window w on (issue 28) m s^2 + lw b s + qw b s^2 (None: no such term), and from the windowed cache's window
    on a saving of kw per token past it (kw b (s - window): engine/components.py kv_window_saving). The two windows
    differ where the cache keeps more than the mask's window (llama.cpp's SWA cells: the window + -ub 512, padded to
    256), so the cost has up to three pieces: below both windows, from the lower one on (its terms only), and from the
    higher one on (both); it grows with s in each, so the longest s is the root of the highest piece where that root
    reaches the piece, else of the next piece down, at most one token below the piece above. (Solving the piece
    between the windows as if neither applied had Llama 4 Scout, bf16 on a B300 with SDPA and kv_policy windowed,
    at max_seq 8,703 where 8,600 did not fit: property search seed 4491125714197518905.)"""
    zero = np.zeros(np.shape(room))
    m, lw, qw = (zero if t is None else t for t in (m, lw, qw))
    wm = zero if w is None else w
    kw, wk = (zero, zero) if kw is None else (kw, kw_window)
    mask = (wm > 0) & ((m + lw + qw) > 0)  # rows with a mask term from wm on
    cache = (wk > 0) & (kw > 0)            # rows with a windowed cache's saving from wk on

    def root(mask_on, cache_on):
        r_room = room - np.where(cache_on, kw * b * wk, 0.0)
        r_lin = lin - np.where(cache_on, kw, 0.0) + np.where(mask_on, lw, 0.0)
        r_q = (q + np.where(mask_on, qw, 0.0)) * b + np.where(mask_on, m, 0.0)
        return _quad_root(r_room, r_lin * b, r_q)

    both = mask & cache
    lo = np.where(both, np.minimum(wm, wk), np.where(mask, wm, wk))
    hi = np.where(both, np.maximum(wm, wk), lo)
    top = root(mask, cache)  # every term on: from the higher window on
    mid = root(mask & (~cache | (wm < wk)), cache & (~mask | (wk < wm)))  # the lower window's terms only
    plain = _quad_root(room, lin * b, q * b)
    per_s = np.where(top >= hi, top, np.where(both & (mid >= lo), np.minimum(mid, hi - 1.0), np.minimum(plain, lo - 1.0)))
    return np.where(mask | cache, per_s, plain)


def _quad_root(room, lb, qb):
    """The longest seq s with qb s^2 + lb s <= room: 2 room / (lb + sqrt(lb^2 + 4 qb room)) (no cancellation),
    room / lb where qb = 0, -inf where the room is negative."""
    disc = lb * lb
    disc += 4.0 * qb * room
    root = 2.0 * room / (lb + np.sqrt(np.maximum(disc, 0.0, out=disc), out=disc))
    if not (qb > 0).all():  # q = 0 in some rows' configurations: room / (lin b) there
        root = np.where(qb > 0, root, _tokens_within(room, lb))
    return np.where(room >= 0, root, -np.inf)


def _train_ranks(capacity, fixed_tot, shard_tot, token_tot, ds_step=None):
    """Per configuration, what the data-parallel ranks a training row needs are made of: the
    ranks of the phases without a per-token part, and (room left by the unsharded bytes,
    sharded bytes, phase) of the others; one_shard: those share one sharded total."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ranks = np.full(len(capacity), -np.inf)
        per_row = []
        for name in TRAIN_PHASES:
            if name not in fixed_tot:
                continue
            room_fixed = capacity - fixed_tot[name]
            sh = shard_tot[name]
            if is_zero(token_tot[name]):  # no per-token part: per configuration
                need = np.where(sh > 0, np.ceil(sh / room_fixed), 1.0)
                need = np.where(room_fixed <= 0, np.inf, need)
                if name == "optimizer" and ds_step is not None:
                    need = _capped_step_ranks(room_fixed, sh, ds_step, need)
                ranks = np.maximum(ranks, need)
            else:
                per_row.append((room_fixed, sh, name))
    shards = [sh for _, sh, _ in per_row]
    one_shard = bool(shards) and all(np.ndim(x) and np.array_equal(x, shards[0]) for x in shards)
    capped = ds_step is not None and any(name == "optimizer" for _, _, name in per_row)
    # (the step's capped fp32 gradient is solved per row, not through the shared shard total)
    return ranks, per_row, one_shard and not capped, ds_step if capped else None


def _capped_step_ranks(room, shard, ds_step, need):
    """The optimizer phase's ranks where DeepSpeed stage 3's fp32 gradient at the step is min(T / dp, sub
    group) x 4 (components.deepspeed_zero3_step), not fixed + shard / dp: the fewest ranks of either
    regime. Below T / sub group ranks a rank holds more than a sub group (its fp32 gradient is the sub
    group's, fixed bytes); from there on T x 4 / dp (a shard). room: the capacity less the phase's
    unsharded bytes (per configuration, or per row with its per-token bytes); `need`: the ranks as the
    phase's parts give them (exact at the row's own dp, kept where no row has the capped gradient)."""
    t4, sg4, as_fixed = ds_step
    on = t4 > 0
    base_room = room + np.where(as_fixed, sg4, 0.0)  # the room without the fp32 gradient
    base_shard = shard - np.where(as_fixed, 0.0, t4)
    room_sub = base_room - sg4  # more than a sub group per rank: the sub group, fixed
    d_sub = np.where(room_sub <= 0, np.inf, np.where(base_shard > 0, np.ceil(base_shard / room_sub), 1.0))
    room_all = base_room  # at most a sub group per rank: T x 4 over the ranks
    d_all = np.where(room_all <= 0, np.inf, np.ceil((base_shard + t4) / room_all))
    d_all = np.maximum(d_all, np.ceil(t4 / np.where(on, sg4, 1.0)))  # (dp >= T / sub group there)
    capped = np.where(d_sub * sg4 < t4, d_sub, d_all)  # (the first regime holds at d_sub: the fewest)
    return np.where(on, capped, need)


def _train_gpus_rows(needed, take, ranks, per_row, one_shard, scaled, ds_step=None):
    """Data-parallel ranks a training row needs, for a block of rows, written into `needed`:
    over the training phases, ceil(sharded bytes / room left by the unsharded ones), inf where
    nothing is left. (A training row's inference phases count one rank, which the final max
    with 1 covers.) take: per configuration -> the block's rows; scaled: each phase's
    per-token bytes x tokens of those rows."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.copyto(needed, take(ranks))
        if one_shard:
            # one sharded total for these phases: ceil(sh / room) is largest at the least room
            # (division and ceil are monotone), so one division serves them all
            least = None
            for room_fixed, _, name in per_row:
                room = take(room_fixed)
                room -= scaled[name]
                least = room if least is None else np.minimum(least, room, out=least)
            sh = per_row[0][1]
            need = take(sh)
            need /= least
            np.ceil(need, out=need)
            if not np.all(sh > 0):
                need = np.where(take(sh > 0), need, 1.0)
            np.copyto(need, np.inf, where=least <= 0)
            np.maximum(needed, need, out=needed)
        else:
            for room_fixed, sh, name in per_row:  # (in place: the same operations, fewer temporaries)
                room = take(room_fixed)
                room -= scaled[name]
                # a configuration without sharded bytes needs one rank where there is room: its sharded bytes
                # are taken as 0 (0 / room = 0, which the final max with 1 makes one rank, as the 1 it stands for;
                # one pass fewer than writing 1 there), inf where there is none (below)
                positive = sh > 0
                if np.ndim(sh):
                    need = take(sh if np.all(positive) else np.where(positive, sh, 0.0))
                    need /= room
                else:
                    need = (sh if positive else 0.0) / room
                np.ceil(need, out=need)
                np.copyto(need, np.inf, where=room <= 0)
                if name == "optimizer" and ds_step is not None:  # DeepSpeed stage 3's capped fp32 gradient
                    need = _capped_step_ranks(room, take(sh) if np.ndim(sh) else sh, tuple(take(v) for v in ds_step),
                                              need)
                np.maximum(needed, need, out=needed)
        np.maximum(needed, 1.0, out=needed)


def _infer_gpus_needed(cfg: Configs, limits: GpuLimits, lay: Layout, rt: RowTerms) -> np.ndarray:
    """Smallest power-of-two GPU count whose per-GPU memory fits, for serving (NaN for training
    rows); with expert parallel (ep > 1), the smallest count that takes it, ep x m (tp = ep, m stages).

    n GPUs are used as tensor parallel over the largest power of two dividing both n and the
    attention heads (vLLM requires heads divisible by tp), and pipeline parallel over the rest
    (n / tp stages, at most one layer each). Weights split over all n; the KV cache over
    min(tp, kv heads) x stages; the logits over tp.
    """
    serving, tokens, logits_fixed, kv_saving, seq = (limits.serving, rt.tokens, rt.logits_fixed, rt.kv_saving, rt.s)
    kvh, heads, layers, tp_now, pp_now, infer = lay.kvh, lay.heads, lay.layers, lay.tp, lay.pp, lay.infer
    n = len(tokens)
    rows = np.flatnonzero(cfg.take(infer)) if not infer.all() else None
    at = cfg.inv if rows is None else cfg.inv[rows]
    pick = (lambda x: x[at]) if not cfg.identity or rows is not None else (lambda x: x)
    own = (lambda x: x) if rows is None else (lambda x: x[rows])
    tok = own(tokens)
    w = serving["weights"] * tp_now * pp_now
    kv = pick(np.broadcast_to(serving["kv_cache"], (cfg.size,))) * tok * pick(np.minimum(tp_now, kvh)) * pick(pp_now)
    if kv_saving is not None:  # sliding-window layers beyond their window (kv_policy windowed)
        kv = kv + own(kv_saving) * pick(np.minimum(tp_now, kvh)) * pick(pp_now)
    # the prefill's and eager attention's working sets (computed at the row's own tp): the part tensor
    # parallelism divides is split over each candidate degree's tp, the rest every rank holds
    # (engine/components.py serving_replicated); at the row's own tp, the row's own figure
    per_cfg = lambda k: pick(np.broadcast_to(serving[k], (cfg.size,)))  # noqa: E731
    tp_row = pick(np.broadcast_to(tp_now, (cfg.size,)))
    work_row, work_rep = per_cfg("workspace") * tok, per_cfg("workspace_rep") * tok
    eager = seq is not None and np.any(serving["attention_seq"])  # eager attention's scores (the attention phase)
    if eager:
        attn_row = (per_cfg("attention") + per_cfg("attention_seq") * own(seq)) * tok
        attn_rep = (per_cfg("attention_rep") + per_cfg("attention_seq_rep") * own(seq)) * tok

    def at_tp(row_value, rep_value, tp_d):  # a working set at tensor parallel tp_d
        return np.where(tp_d == tp_row, row_value, rep_value + (row_value - rep_value) * tp_row / tp_d)

    # (issue 28) an SDPA prefill's sliding-window mask, whole on every rank: held through the prefill, and
    # the mask phase (three being built beside the embeddings' output, before any KV cache)
    sq = own(rt.seq_sq) if rt.seq_sq is not None else None
    if sq is not None:
        held_sq = per_cfg("prefill_sq") * sq
        build = per_cfg("mask") * tok + per_cfg("mask_sq") * sq

    logit = (own(logits_fixed) + pick(np.broadcast_to(serving["logits"], (cfg.size,))) * tok) * pick(tp_now)
    # an inference library's buffers (engine/components.py int4_kernel_parts), split like the weights
    # (they were computed for the row's own tp x pp), and AutoAWQ's fused load phase
    lib = {k: np.broadcast_to(serving[k], (cfg.size,)) for k in ("workspace_fixed", "attention_fixed", "logits_fixed",
                                                                 "logits_work", "load_fixed", "load")}
    extra = any(np.any(v) for v in lib.values())
    if extra:
        whole = lambda k: pick(lib[k] * tp_now * pp_now)  # noqa: E731
        logit_work = pick(lib["logits_work"]) * tok
        load_tok = pick(lib["load"]) * tok
    # the capacity at one GPU, and at several (NCCL's buffers on each)
    cap_one, cap_several = pick(serving["capacity_one"]), pick(limits.capacity_several)
    heads_i = heads.astype(np.int64)
    ep_c = None if lay.ep is None else np.broadcast_to(lay.ep, heads_i.shape).astype(np.int64)

    def fits_at(degree):
        """Per row: the row fits on `degree` GPUs (a whole number, or one per configuration) split as the engine
        splits them (engine/rules.py: tp over gcd(degree, heads), the rest as stages), and that split is one the
        engine takes; and the working arrays, which the caller keeps until the next call has made its own (freed
        all at once on return, glibc hands the heap's top back and the next call faults it in again: a 120,000-row
        serving sweep took a quarter longer)."""
        deg = degree if np.ndim(degree) == 0 else pick(degree)  # (per row)
        tp_n = np.gcd(degree, heads_i).astype(float)
        pp_n = degree / tp_n
        tp_d = pick(tp_n)
        work = at_tp(work_row, work_rep, tp_d)
        if sq is not None:
            work = work + held_sq
        attn = at_tp(attn_row, attn_rep, tp_d) if eager else None
        if extra:
            # each phase with its own library buffers: the workspace's fixed bytes beside the prefill's working set,
            # the attention's beside eager attention's scores (not the workspace's on top of the scores: a row that
            # fit at its peak phase was then sent to more GPUs; property search, seed 583491386)
            phase_peak = np.maximum(np.maximum(work + whole("workspace_fixed") / deg,
                                               logit / tp_d + whole("logits_fixed") / deg + logit_work),
                                    whole("load_fixed") / deg + load_tok)
            if eager:
                phase_peak = np.maximum(phase_peak, attn + whole("attention_fixed") / deg)
        else:
            phase_peak = np.maximum(work if attn is None else np.maximum(work, attn), logit / tp_d)
        per_gpu = pick(w / degree) + kv / pick(np.minimum(tp_n, kvh) * pp_n) + phase_peak
        if sq is not None:
            per_gpu = np.maximum(per_gpu, pick(w / degree) + build)
        cap = (cap_one if degree == 1 else cap_several) if np.ndim(degree) == 0 else np.where(deg == 1, cap_one,
                                                                                               cap_several)
        ok = (per_gpu <= cap) & pick(pp_n <= layers)
        if ep_c is not None:
            # expert parallel as given: only the counts whose split takes it (engine/scenarios.py ep_accepted: ep a
            # multiple of tp dividing gpus / pp, here tp = ep), else a count the engine refuses would be proposed
            ok &= pick(ep_accepted(degree, tp_n, pp_n, ep_c))
        return ok, (tp_d, work, attn, phase_peak, per_gpu)

    best = np.full(len(tok), np.inf)
    for degree in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)[::-1]:
        ok, held = fits_at(degree)  # (held: kept to the next call, fits_at)
        best = np.where(ok, degree, best)
    if ep_c is not None and np.any(ep_c > 1):
        # expert parallel: the counts that take it are ep x m (tp = ep, m stages), few of them powers of two (ep 2
        # with 32 heads: only 2; 4 is tp 4): every m up to the layers, smallest last (6 = ep 2 x 3 stages)
        moe = pick(ep_c > 1)
        most = int(min(np.max(np.where(ep_c > 1, layers, 1)), C.MAX_GPUS // max(int(ep_c[ep_c > 1].min()), 1)))
        for m in range(most, 0, -1):
            degree = ep_c * m
            ok, held = fits_at(degree)
            best = np.where(moe & ok & pick(degree <= C.MAX_GPUS), pick(degree), best)
    if rows is None:
        return best
    out = np.full(n, np.nan)
    out[rows] = best
    return out
