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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.constants as C
from engine.components import Physics, kv_window_saving, last_logits_bytes
from engine.memory import COMPONENTS, PHASES, TRAIN_PHASES, is_zero
from engine.scenarios import Configs, View
from engine.speed import (
    GPU_FIELDS,
    MODEL_SHAPE,
    OUTPUT_COLUMNS,
    SETTINGS,
    add_speed_cost,
    check_prompt,
    gather_gpu_fields,
    pick_rate,
    read_settings,
    speed_cost_columns,
)

PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
# the inference phases that hold the KV cache (a windowed cache's saving applies to each)
INFER_CACHE_PHASES = ("prefill", "logits", "attention")
# Rows per block of the per-row memory terms: a block's temporaries (512 KiB each) stay in
# the CPU's cache and in memory malloc keeps. 2^14 to 2^17 rows ran equally fast on the
# development machine (benchmarks/bench_engine.py); one block of a million rows was 14% slower.
ROW_BLOCK = 1 << 16
# the fit columns, in the order every result lists them (with or without a GPU)
FIT_COLUMNS = ("usable_bytes", "capacity_bytes", "fits", "memory_used_fraction", "max_batch", "max_seq", "gpus_needed")
# Speed settings that enter per-configuration figures (rates, prices, power): all but tokens and
# prompt_tokens, which only enter per-row ones. A frame that gives one of them per row is
# evaluated per row.
PER_CONFIG_SETTINGS = tuple(k for k in SETTINGS if k not in ("tokens", "prompt_tokens"))
UNKNOWN_GPU = ("gpu {!r} is not in the catalog; accepted: a catalog GPU id (python -m engine catalog gpus), "
               "e.g. h100-sxm-80gb, rtx-4090")


class Sweep:
    """One estimate() call: a normalized scenario frame grouped into configurations, and the
    result's columns, filled in stages: `memory`, `fit`, then `frame` (speed and cost)."""

    def __init__(self, sc: pd.DataFrame, ranges: dict, out, lean: bool = False):
        # lean: only the GPUs needed are wanted (the one-GPU probe, engine/estimate.py): the
        # memory stage keeps the phases' per-token bytes x tokens, the fit writes gpus_needed
        self.sc, self.n, self.out, self.lean = sc, len(sc), out, lean
        self.cfg = Configs(sc, ranges=ranges, columns=out)
        self.result = {col: sc[col] for col in sc.columns}

    def memory_configurations(self) -> View:
        """The memory configurations (configurations that differ only in the GPU or the
        headroom, merged): the groups the physics runs on."""
        self.mv, self.of_config = self.cfg.coarser(("gpu", "headroom"))
        return self.mv

    def _lift(self, x):
        """Per memory configuration -> per configuration."""
        return x if self.of_config is None or not np.ndim(x) else x[self.of_config]

    # ==== per row: the memory columns ==========================================================
    def memory(self, ph: Physics) -> None:
        """Every memory column, the rows in blocks of ROW_BLOCK."""
        self.ph = ph
        x, phases, out, sc, result, n = ph.inputs, ph.phases, self.out, self.sc, self.result, self.n
        valid = {p: (x.train if p in TRAIN_PHASES else x.infer) for p in PHASES}
        # a prefill's eager attention scores: a phase of the eagerly-attending inference rows only
        valid["attention"] = x.infer & np.broadcast_to(np.asarray(x.eager, dtype=bool), np.shape(x.infer))
        fixed_tot, shard_tot, token_tot, base_tot = {}, {}, {}, {}
        for name in PHASES:
            fx, sh, tk = phases[name].totals()
            fixed_tot[name], shard_tot[name], token_tot[name] = fx, sh, tk
            base_tot[name] = fx + sh / x.dp  # a phase's bytes = fixed + shard / dp + per_token x tokens
        # (issue 12) + per_token_seq x tokens x seq: an attention mask or eager scores, batch x seq x seq
        quad = {name: q for name in PHASES if not is_zero(q := phases[name].seq_total()) and valid[name].any()}
        frag, paged, cpu = ph.fragmentation, ph.paged, ph.cpu
        cpu_tok = getattr(ph, "cpu_per_token", 0.0)  # offloaded activations (issue 13): host bytes per token
        host_rows = bool(cpu.any()) or bool(np.any(cpu_tok))

        minv = self.cfg.inv if self.of_config is None else out.take(self.of_config, self.cfg.inv)
        mtake = lambda v: np.take(v, minv, mode="clip") if np.ndim(v) else v  # noqa: E731 - a fresh array
        b = out.empty()
        np.copyto(b, sc["batch"].to_numpy(), casting="unsafe")  # as .astype(float)
        s = out.empty()
        np.copyto(s, sc["seq"].to_numpy(), casting="unsafe")
        tokens = np.multiply(b, s, out=out.empty())
        # the logits phase's fixed part that grows with the batch (components.last_logits_bytes)
        logits_fixed = last_logits_bytes(x, b, mtake) if x.infer.any() else None
        # the sliding-window layers' tokens beyond their window (kv_policy windowed), per row
        kv_saving = kv_window_saving(x, b, s, mtake) if x.infer.any() and np.any(x.kv_window > 0) else None

        live = [name for name in PHASES if valid[name].any()]  # no row of another task: never the peak
        seq_tokens = np.multiply(tokens, s) if quad else None  # tokens x seq, for the per_token_seq terms
        if self.lean:  # what the GPUs needed are solved from: each phase's per-token bytes x tokens
            scaled = {name: out.empty() for name in live if not is_zero(token_tot[name]) or name in quad}
            for lo in range(0, n, ROW_BLOCK):
                rows = slice(lo, min(n, lo + ROW_BLOCK))
                for name in scaled:  # (as memory_rows below computes them)
                    _scaled_bytes(token_tot[name], minv[rows], tokens[rows], scaled[name][rows], quad.get(name),
                                  None if seq_tokens is None else seq_tokens[rows])
            self.b, self.s, self.tokens, self.logits_fixed, self.scaled = b, s, tokens, logits_fixed, scaled
            self.kv_saving, self.quad = kv_saving, quad
            self.valid, self.fixed_tot, self.shard_tot, self.token_tot = valid, fixed_tot, shard_tot, token_tot
            self.overhead_row = None
            return
        # the result's columns, written block by block below
        result["params"] = out.empty(np.int64)
        result["trainable_params"] = out.empty(np.int64)
        result["active_params"] = out.empty(np.int64)
        tables = _component_tables(phases, valid, x.dp, self.mv.size, logits_fixed is not None)
        for comp in COMPONENTS:
            result[f"{comp}_bytes"] = out.full(0.0) if tables[comp] is None else out.empty()
        result["model_states_bytes"] = out.empty()
        result["paged_optimizer_bytes"] = out.empty() if paged.any() else out.full(0.0)
        result["runtime_overhead_bytes"] = overhead_row = out.empty()
        result["peak_bytes"] = out.empty()  # the tensors' peak + runtime overhead
        peak_idx = out.empty(np.int8)
        result["peak_phase"] = None  # (set below, in this place)
        for name in PHASES:
            result[f"{name}_phase_bytes"] = out.empty() if name in live else out.full(np.nan)
        result["cpu_bytes"] = out.empty() if host_rows else out.full(0.0)
        # a phase's per-token bytes x tokens, per row (the fit reuses them)
        scaled = {name: out.empty() for name in live if not is_zero(token_tot[name]) or name in quad}
        N64, trainable64 = x.N.astype(np.int64), np.rint(ph.totals.trainable).astype(np.int64)
        active64 = np.asarray(x.active).astype(np.int64)
        comp_cols = {comp: result[f"{comp}_bytes"] for comp in COMPONENTS if tables[comp] is not None}

        def memory_rows(rows: slice) -> None:
            """Every memory column of the rows `rows` (a block small enough to stay in cache)."""
            at = minv[rows]
            get = lambda v: np.take(v, at, mode="clip") if np.ndim(v) else v  # noqa: E731 - a fresh array
            tok = tokens[rows]
            totals = {}
            for name in live:
                t = _gather(base_tot[name], at, result[f"{name}_phase_bytes"][rows])
                if name == "logits":
                    t += logits_fixed[rows]
                if kv_saving is not None and name in INFER_CACHE_PHASES:
                    t += kv_saving[rows]
                if name in scaled:
                    t += _scaled_bytes(token_tot[name], at, tok, scaled[name][rows], quad.get(name),
                                       None if seq_tokens is None else seq_tokens[rows])
                if not valid[name].all():
                    t = np.where(get(valid[name]), t, -np.inf)
                totals[name] = t
            peak, tensor_peak = _peak(totals, len(tok))
            np.take(N64, at, out=result["params"][rows], mode="clip")
            np.take(trainable64, at, out=result["trainable_params"][rows], mode="clip")
            np.take(active64, at, out=result["active_params"][rows], mode="clip")
            _components(tables, peak, at, self.mv.size, tok, None if logits_fixed is None else logits_fixed[rows],
                        {comp: col[rows] for comp, col in comp_cols.items()},
                        None if seq_tokens is None else seq_tokens[rows])
            if kv_saving is not None:  # an inference row's peak is prefill or logits: both hold the cache
                result["kv_cache_bytes"][rows] += kv_saving[rows]
            np.take(ph.model_states, at, out=result["model_states_bytes"][rows], mode="clip")
            if paged.any():
                np.take(paged, at, out=result["paged_optimizer_bytes"][rows], mode="clip")
            overhead = np.multiply(frag, tensor_peak, out=overhead_row[rows])
            overhead += get(ph.context)  # context + fragmentation x the tensors' peak
            tensor_peak += overhead
            np.copyto(result["peak_bytes"][rows], tensor_peak)
            np.copyto(peak_idx[rows], peak)
            for name in live:
                if not valid[name].all():
                    np.copyto(result[f"{name}_phase_bytes"][rows], np.where(get(valid[name]), totals[name], np.nan))
            if host_rows:
                np.take(cpu, at, out=result["cpu_bytes"][rows], mode="clip")
                if np.any(cpu_tok):
                    result["cpu_bytes"][rows] += get(cpu_tok) * tok

        for lo in range(0, n, ROW_BLOCK):
            memory_rows(slice(lo, min(n, lo + ROW_BLOCK)))
        result["peak_phase"] = pd.Categorical.from_codes(peak_idx, categories=list(PHASES))
        self.b, self.s, self.tokens, self.logits_fixed, self.scaled = b, s, tokens, logits_fixed, scaled
        self.kv_saving, self.quad = kv_saving, quad
        self.valid, self.fixed_tot, self.shard_tot, self.token_tot = valid, fixed_tot, shard_tot, token_tot
        self.overhead_row = overhead_row

    # ==== per configuration (the GPU and headroom too): the fit ===============================
    def fit(self, gpus: pd.DataFrame | None, models: pd.DataFrame) -> None:
        """The fit columns against each row's GPU (none without one)."""
        cfg, lift, result, out, n, x = self.cfg, self._lift, self.result, self.out, self.n, self.ph.inputs
        live = [p for p in PHASES if self.valid[p].any()]  # the phases of the tasks present
        fixed_tot, shard_tot, token_tot, valid = ({k: lift(d[k]) for k in live}
                                                   for d in (self.fixed_tot, self.shard_tot, self.token_tot, self.valid))
        phases = self.ph.phases
        # what serving needs of its phases: weights, KV cache, working set, logits
        serving = ({k: lift(v) for k, v in (("weights", phases["prefill"].fixed.get("weights", 0.0)),
                                           ("kv_cache", phases["prefill"].per_token.get("kv_cache", 0.0)),
                                           ("workspace", phases["prefill"].per_token.get("workspace", 0.0)),
                                           ("logits", phases["logits"].per_token.get("logits", 0.0)),
                                           ("attention", phases["attention"].per_token.get("workspace", 0.0)),
                                           ("attention_seq", phases["attention"].per_token_seq.get("workspace", 0.0)))}
                   if x.infer.any() else None)
        self.seq_level = None
        chosen = ~cfg.mask("gpu", "")
        if gpus is None or n == 0 or not chosen.any():
            for c in FIT_COLUMNS:  # the order _fit writes them in
                result[c] = out.full(np.nan) if c != "fits" else None  # (fits: below, in this place)
            result["fits"] = pd.array([pd.NA] * n, dtype="boolean")
            return
        gidx = cfg.index_in("gpu", gpus["id"])
        bad = chosen & (gidx < 0)
        if bad.any():
            raise ValueError(UNKNOWN_GPU.format(str(self.sc["gpu"].iloc[cfg.first_row(bad)])))
        usable = np.where(chosen, gpus["usable_memory_bytes"].to_numpy().astype(float)[np.maximum(gidx, 0)], np.nan)
        headroom = cfg.values("headroom")
        # the tensors may use what is left after headroom and the fixed runtime overhead, less
        # the allocator's fragmentation share
        capacity = (usable * (1 - headroom) - lift(self.ph.context)) / (1 + self.ph.fragmentation)
        # the longest context is bounded by the model's own, unless the scenario allows longer
        ctx = models["max_context"].to_numpy(dtype=float)[lift(x.model)]
        longest = np.where(cfg.values("allow_long_context"), np.inf, ctx)
        quad = {k: lift(v) for k, v in self.quad.items()}
        self.seq_level = cfg.split() if self.logits_fixed is None else None
        _fit(result, cfg, chosen, usable, capacity, serving, valid, fixed_tot, shard_tot, token_tot, lift(x.dp),
             lift(x.tp), lift(x.pp), self.b, self.s, self.tokens, self.scaled, self.logits_fixed, lift(x.train),
             lift(x.infer), lift(np.where(x.mla, 1.0, x.kvh)), lift(x.a), lift(x.L), self.overhead_row, self.seq_level,
             longest, out, self.kv_saving,
             lift(np.where(x.ep > 1, x.ep * x.pp, 1.0)) if np.any(x.ep > 1) else None, self.lean, quad)

    # ==== speed and cost; the frame ===========================================================
    def frame(self, gpus: pd.DataFrame | None, models: pd.DataFrame) -> pd.DataFrame:
        """The speed and cost columns, and the result as a frame."""
        cfg, lift, result, n, x, take, s = self.cfg, self._lift, self.result, self.n, self.ph.inputs, self.cfg.take, self.s
        if n == 0:
            for c in (*OUTPUT_COLUMNS, *SETTINGS):  # as a non-empty result lists them
                result[c] = np.zeros(0)
            return pd.DataFrame(result, index=pd.RangeIndex(0), copy=False)
        if all(c in self.sc.columns for c in MODEL_SHAPE):  # the frame carries its own model shape
            return add_speed_cost(pd.DataFrame(result, index=pd.RangeIndex(n), copy=False), gpus, models)
        st = read_settings(self.sc, s)
        train = lift(x.train)
        if st["prompt_tokens"] is not s:
            check_prompt(st["prompt_tokens"], s, take(lift(x.infer)))
        midx = lift(x.model)
        level = {k: models[k].to_numpy(dtype=float)[midx] for k in MODEL_SHAPE}
        # MoE: a token's FLOPs go through its active parameters (2 x active per token forward)
        level.update(N=lift(np.asarray(x.active).astype(np.int64).astype(float)),
                     T=lift(np.rint(self.ph.totals.trainable).astype(np.int64).astype(float)),
                     n_gpus=lift(x.gpus), tp=lift(x.tp), pp=lift(x.pp), full=cfg.mask("method", "full"),
                     lora=cfg.mask("method", "lora", "qlora"), freeze=cfg.mask("method", "freeze"),
                     checkpointing=lift(x.gc), freeze_layers=cfg.values("freeze_layers").astype(float), train=train,
                     N_total=lift(np.asarray(x.N, dtype=float)), zero=lift(np.asarray(x.zero, dtype=float)),
                     weight_bytes=lift(np.asarray(x.wb, dtype=float)), grad_bytes=lift(np.asarray(x.wb_trained, dtype=float)))
        g = _gpu_fields(cfg, gpus)
        level["rate"] = pick_rate(cfg.categories("precision"), cfg.codes("precision"), train,
                                  {c: g[c] for c in ("bf16_tflops", "fp16_tflops", "fp32_tflops")}) * 1e12
        level["act_bytes"] = np.where(cfg.mask("precision", "fp32"), 4.0, 2.0)
        level.update(g)
        inv, seq_level = (None if cfg.identity else cfg.inv), self.seq_level
        if any(np.ndim(st[k]) for k in PER_CONFIG_SETTINGS):  # a setting given per row: everything per row
            level = {k: (take(v) if np.ndim(v) else v) for k, v in level.items()}
            inv, seq_level = None, None
        if seq_level is None and not cfg.identity and inv is not None:
            seq_level = cfg.split()
        weights_read = result["weights_bytes"]
        if np.any(x.active != x.N):  # MoE decode reads the active experts' weights (+ shared), all else once
            weights_read = weights_read * take(lift(np.asarray(x.active, dtype=float) / x.N))
        result.update(speed_cost_columns(level, inv, self.b, s, weights_read, result["kv_cache_bytes"], st, n,
                                         seq_level, self.out))
        return pd.DataFrame(result, index=pd.RangeIndex(n), copy=False)


# ---- the memory columns, per row ----------------------------------------------------------------

def _gather(values, at: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """values[at] (a scalar: everywhere) written into dest, which is returned."""
    if np.ndim(values):
        return np.take(values, at, out=dest, mode="clip")
    dest.fill(values)
    return dest


def _scaled_bytes(per_token, at, tok, dest, per_seq=None, seq_tok=None) -> np.ndarray:
    """A phase's per-token bytes x tokens (+ its per-token-seq bytes x tokens x seq, issue 12) for
    the rows whose memory configurations are `at`, written into dest, which is returned."""
    by_tokens = _gather(per_token, at, dest)
    by_tokens *= tok
    if per_seq is not None:
        by_tokens += (np.take(per_seq, at, mode="clip") if np.ndim(per_seq) else per_seq) * seq_tok
    return by_tokens


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
        fixed = per_config.any()
        if not (scaled or fixed or quadratic or (comp == "logits" and logits_fixed)):
            tables[comp] = None
        else:
            tables[comp] = (per_config.ravel() if fixed else None, per_token.ravel() if scaled else None,
                            per_seq.ravel() if quadratic else None)
    return tables


def _components(tables: dict, peak: np.ndarray, at: np.ndarray, size: int, tokens, logits_fixed, dest: dict,
                seq_tokens=None):
    """Each component's bytes in the row's peak phase (fixed + shard / dp + per_token x tokens of
    that phase and memory configuration), written into dest[component]."""
    where = peak.astype(np.intp)  # (phase, memory configuration) of each row, in the tables
    where *= size
    where += at
    for comp, value in dest.items():
        per_config, per_token, per_seq = tables[comp]
        if per_token is not None:
            np.take(per_token, where, out=value, mode="clip")
            value *= tokens
            if per_config is not None:  # (fixed + shard / dp) + per_token x tokens
                value += np.take(per_config, where, mode="clip")
        elif per_config is not None:
            np.take(per_config, where, out=value, mode="clip")
        else:
            value.fill(0.0)
        if per_seq is not None:  # + per_token_seq x tokens x seq (issue 12)
            value += np.take(per_seq, where, mode="clip") * seq_tokens
        if comp == "logits" and logits_fixed is not None:
            np.copyto(value, value + logits_fixed, where=peak == PHASE_INDEX["logits"])


# ---- the fit, per configuration and per row -------------------------------------------------------

def _gpu_fields(cfg: Configs, gpus: pd.DataFrame | None) -> dict:
    """Per configuration: the chosen GPU's catalog figures for the speed and cost model."""
    fields = {k: np.full(cfg.size, np.nan) for k in GPU_FIELDS}
    if gpus is None or cfg.size == 0:
        return fields
    gidx = cfg.index_in("gpu", gpus["id"].astype(str))
    bad = ~cfg.mask("gpu", "") & (gidx < 0)
    if bad.any():
        raise ValueError(UNKNOWN_GPU.format(str(cfg.frame["gpu"].iloc[cfg.first_row(bad)])))
    return gather_gpu_fields(gpus, gidx, fields)


def _fit(result, cfg, chosen, usable, capacity, serving, valid, fixed_tot, shard_tot, token_tot, dp, tp, pp,
         b, s, tokens, scaled, logits_fixed, train, infer, kvh, heads, layers, overhead_row, seq_level, longest, out,
         kv_saving=None, ep_floor=None, lean=False, quad=None):
    """Fit against the chosen GPU: fits, GPUs needed, largest batch, longest context (at most
    `longest`, per configuration). What does not depend on the row first (per configuration,
    or configuration x seq), then the rows in blocks of ROW_BLOCK."""
    n = len(b)
    inv = cfg.inv
    all_chosen = bool(chosen.all())
    # (issue 12) the configurations with a per_token_seq term, and per phase what each one solves from
    quad = quad or {}
    quad_any = np.zeros(cfg.size, dtype=bool)
    for q in quad.values():
        quad_any |= np.broadcast_to(q, (cfg.size,)) > 0
    if quad and not lean:  # (the GPUs needed take the seq term through the phases' scaled bytes)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = {name: (capacity - fixed_tot[name] - shard_tot[name] / dp,
                            np.broadcast_to(token_tot[name], (cfg.size,)).astype(float),
                            np.broadcast_to(quad.get(name, 0.0), (cfg.size,)).astype(float),
                            np.broadcast_to(valid[name], (cfg.size,))) for name in valid}
            # without per-row rooms (the logits of a batch, a windowed cache: inference) the phases
            # without a seq term solve per configuration: the most tokens they leave room for
            if logits_fixed is None and kv_saving is None:
                linear = [name for name in terms if not np.any(terms[name][2] > 0)]
                lin_limit = np.full(cfg.size, np.inf)
                for name in linear:
                    room, lin, _, ok = terms.pop(name)
                    lin_limit = np.minimum(lin_limit, np.where(ok, _tokens_within(room, lin), np.inf))
                terms[None] = lin_limit
    if lean:  # gpus_needed only (Sweep)
        result["gpus_needed"] = needed = out.empty()
    else:
        peak = result["peak_bytes"]
        result["usable_bytes"] = usable_r = out.empty()
        result["capacity_bytes"] = cap = out.empty()
        fits, unknown = out.empty(bool), (out.full(False, bool) if all_chosen else out.empty(bool))
        result["fits"] = None  # (below, in this place)
        result["memory_used_fraction"] = used = out.empty()
        result["max_batch"] = max_batch = out.empty()
        result["max_seq"] = max_seq = out.empty()
        result["gpus_needed"] = needed = out.empty()

    with np.errstate(divide="ignore", invalid="ignore"):
        # largest token count per micro-batch that fits, over all phases (per configuration,
        # but for the logits phase, whose fixed part grows with the batch)
        max_tokens = np.full(cfg.size, np.inf)
        for name in valid:
            if name == "logits" and logits_fixed is not None:
                continue
            room = capacity - fixed_tot[name] - shard_tot[name] / dp
            tk = token_tot[name]
            max_tokens = np.minimum(max_tokens, np.where(valid[name], _tokens_within(room, tk), np.inf))
        if seq_level is not None and not lean:  # per configuration and seq (the batch does not enter)
            by_seq, seq_rows = seq_level
            batch_of_group = out.empty(length=len(seq_rows))
            for lo in range(0, len(seq_rows), ROW_BLOCK):  # in blocks: temporaries stay small
                part = slice(lo, min(len(seq_rows), lo + ROW_BLOCK))
                config = inv[seq_rows[part]]
                at_seq = np.floor(max_tokens[config] / s[seq_rows[part]])
                if quad and quad_any[config].any():  # at the group's seq each token costs lin + q x seq
                    sg = s[seq_rows[part]]
                    most, _ = _quad_limits(lambda v, config=config: v[config], terms, None, sg)
                    at_seq = np.where(quad_any[config], np.floor(most / sg), at_seq)
                ok = at_seq >= 1 if all_chosen else chosen[config] & (at_seq >= 1)
                batch_of_group[part] = np.where(ok, np.minimum(at_seq, 1e12), 0.0)
        logits_room = logits_fixed is not None and "logits" in valid
        if logits_room:
            logits_shard = shard_tot["logits"] / dp
            logits_token = np.broadcast_to(token_tot["logits"], (cfg.size,))
    train_any = bool(train.any())
    if train_any:
        ranks, per_row, one_shard = _train_ranks(capacity, fixed_tot, shard_tot, token_tot)
    infer_need = None
    if infer.any():
        infer_need = _infer_gpus_needed(cfg, serving, capacity, tokens, logits_fixed, kvh, heads, layers, tp, pp, infer,
                                        kv_saving, s)
    splits = [x for x in (tp, pp) if not np.all(x == 1)]  # ranks x tp x pp (a factor of one changes nothing)

    def needed_rows(rows: slice, take, chosen_r) -> None:
        """GPUs needed. Training: data-parallel ranks at the scenario's ZeRO stage (tp x pp kept);
        inference: tensor parallel over powers of two (KV cache split over at most kv heads)."""
        nd = needed[rows]
        if train_any:
            _train_gpus_rows(nd, take, ranks, per_row, one_shard, {k: v[rows] for k, v in scaled.items()})
            for split in splits:
                nd *= take(split)
        if infer_need is not None:
            np.copyto(nd, np.where(take(infer), infer_need[rows], nd) if train_any else infer_need[rows])
        if ep_floor is not None:  # expert parallel as given: at least ep x pp GPUs (engine/rules.py)
            np.maximum(nd, take(ep_floor), out=nd)
        nd[nd > C.MAX_GPUS] = np.inf
        if not all_chosen:
            nd[~chosen_r] = np.nan

    def fit_rows(rows: slice) -> None:
        at = inv[rows]
        take = lambda x: np.take(x, at, mode="clip") if np.ndim(x) else x  # noqa: E731 - a fresh array
        if lean:
            needed_rows(rows, take, None if all_chosen else take(chosen))
            return
        c = np.take(capacity, at, out=cap[rows], mode="clip")
        u = np.take(usable, at, out=usable_r[rows], mode="clip")
        pk = peak[rows]
        f = np.less_equal(pk - overhead_row[rows], c, out=fits[rows])  # the tensors' peak against what they may use
        chosen_r = None
        if not all_chosen:
            chosen_r = take(chosen)
            np.logical_and(f, chosen_r, out=f)
            np.logical_not(chosen_r, out=unknown[rows])
        np.divide(pk, u, out=used[rows])
        with np.errstate(divide="ignore", invalid="ignore"):
            mt = np.take(max_tokens, at, out=max_seq[rows], mode="clip")
            if seq_level is not None:
                np.take(batch_of_group, by_seq[rows], out=max_batch[rows], mode="clip")
            else:
                if logits_room:
                    room = c - (take(fixed_tot["logits"]) + logits_fixed[rows]) - take(logits_shard)
                    tk = take(logits_token)
                    np.minimum(mt, np.where(take(valid["logits"]), _tokens_within(room, tk), np.inf), out=mt)
                if kv_saving is not None:
                    # windowed sliding-window layers: at the row's seq each token costs less KV
                    # (kv_saving / tokens, <= 0), so the largest batch at that seq is solved with it
                    corr = kv_saving[rows] / tokens[rows]
                    lim = np.full(len(corr), np.inf)
                    for name in INFER_CACHE_PHASES:
                        if name not in valid:
                            continue
                        room = c - take(fixed_tot[name]) - take(shard_tot[name] / dp)
                        if name == "logits" and logits_fixed is not None:
                            room = room - logits_fixed[rows]
                        tk = take(np.broadcast_to(token_tot[name], (cfg.size,))) + corr
                        lim = np.minimum(lim, _tokens_within(room, tk))
                    np.copyto(mt, lim, where=take(infer) & (corr < 0))
                most = np.floor(mt / s[rows])
                ok_batch = most >= 1 if all_chosen else chosen_r & (most >= 1)
                np.copyto(max_batch[rows], np.where(ok_batch, np.minimum(most, 1e12), 0.0))
            ms = np.divide(mt, b[rows], out=mt)  # the longest sequence at the row's batch
            np.floor(ms, out=ms)
            if quad:  # rows with a batch x seq x seq term: their longest context (and largest batch)
                q_rows = take(quad_any)
                if q_rows.any():
                    per_b, per_s = _quad_limits(
                        take, terms, b[rows], s[rows], None if logits_fixed is None else logits_fixed[rows],
                        None if kv_saving is None else kv_saving[rows] / tokens[rows], by_batch=seq_level is None)
                    if per_b is not None:  # (per configuration and seq above otherwise)
                        most = np.floor(per_b / s[rows])
                        ok_batch = most >= 1 if all_chosen else chosen_r & (most >= 1)
                        np.copyto(max_batch[rows], np.where(ok_batch, np.minimum(most, 1e12), 0.0), where=q_rows)
                    np.copyto(ms, np.floor(per_s), where=q_rows)
        short = ms < 1 if all_chosen else ~(chosen_r & (ms >= 1))
        np.minimum(ms, 1e12, out=ms)
        np.copyto(ms, 0.0, where=short)

        needed_rows(rows, take, chosen_r)
        if not all_chosen:
            # a row without a GPU has no largest batch or context either: NaN, as when no row of
            # the frame has a GPU (they read 0 when another row of the frame had one)
            max_batch[rows][~chosen_r] = np.nan
            ms[~chosen_r] = np.nan
        np.minimum(ms, take(longest), out=ms)  # (NaN stays NaN)

    for lo in range(0, n, ROW_BLOCK):
        fit_rows(slice(lo, min(n, lo + ROW_BLOCK)))
    if not lean:
        result["fits"] = pd.arrays.BooleanArray(fits, unknown)


def _tokens_within(room, per_token):
    """The most tokens `room` bytes hold at `per_token` bytes each: inf where a token costs nothing
    and the room is not negative, -inf where it is."""
    return np.where(per_token > 0, room / per_token, np.where(room >= 0, np.inf, -np.inf))


def _quad_limits(pick, terms, b, s, logits_room=None, corr=None, by_batch=True):
    """Per row (or group) of a block whose configuration has a per_token_seq term (issue 12: an
    attention mask or eager scores): (the most tokens at the row's seq, or None unless by_batch; the
    longest sequence at the row's batch, or None where b is None), over every phase. pick: per
    configuration -> the block's rows. A phase's terms per configuration: (room = capacity - fixed -
    shard / dp, lin, q, valid) for lin x tokens + q x tokens x seq: at a given seq that is linear in
    the batch (tokens <= room / (lin + q seq)); at a given batch b it is q b s^2 + lin b s <= room,
    whose positive root is 2 room / (lin b + sqrt((lin b)^2 + 4 q b room)) (the form without
    cancellation; q = 0 gives room / (lin b)). logits_room: the logits phase's room less its per-row
    fixed part (the last position's logits of a batch); corr: the windowed cache's per-token
    saving at the row's seq, for the phases that hold the cache."""
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
        room_c, lin_c, q_c, ok_c = term
        room = pick(room_c)
        if name == "logits" and logits_room is not None:
            room = room - logits_room
        lin = pick(lin_c)
        if corr is not None and name in INFER_CACHE_PHASES:
            lin = lin + corr
        q = pick(q_c)
        ok = None if ok_c.all() else pick(ok_c)
        if by_batch:
            per_b = _tokens_within(room, lin + q * s)
            most_tokens = np.minimum(most_tokens, per_b if ok is None else np.where(ok, per_b, np.inf))
        if longest is None:
            continue
        qb, lb = q * b, lin * b
        disc = lb * lb
        disc += 4.0 * qb * room
        root = 2.0 * room / (lb + np.sqrt(np.maximum(disc, 0.0, out=disc), out=disc))
        if not (qb > 0).all():  # q = 0 in some rows' configurations: room / (lin b) there
            root = np.where(qb > 0, root, _tokens_within(room, lb))
        per_s = np.where(room >= 0, root, -np.inf)
        longest = np.minimum(longest, per_s if ok is None else np.where(ok, per_s, np.inf))
    return most_tokens, longest


def _train_ranks(capacity, fixed_tot, shard_tot, token_tot):
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
                ranks = np.maximum(ranks, np.where(room_fixed <= 0, np.inf, need))
            else:
                per_row.append((room_fixed, sh, name))
    shards = [sh for _, sh, _ in per_row]
    one_shard = bool(shards) and all(np.ndim(x) and np.array_equal(x, shards[0]) for x in shards)
    return ranks, per_row, one_shard


def _train_gpus_rows(needed, take, ranks, per_row, one_shard, scaled):
    """Data-parallel ranks a training row needs, for a block of rows, written into `needed`:
    over the training phases, ceil(sharded bytes / room left by the unsharded ones), inf where
    nothing is left. (A training row's inference phases count one rank, which the final max
    with 1 covers.) take: per configuration -> the block's rows; scaled: each phase's
    per-token bytes x tokens of those rows."""
    n = len(needed)
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
                if np.ndim(sh):
                    need = take(sh)
                    need /= room
                else:
                    need = sh / room
                np.ceil(need, out=need)
                positive = sh > 0
                if not np.all(positive):
                    if np.ndim(positive):
                        np.copyto(need, 1.0, where=~take(positive))
                    else:
                        need = np.ones(n)
                np.copyto(need, np.inf, where=room <= 0)
                np.maximum(needed, need, out=needed)
        np.maximum(needed, 1.0, out=needed)


def _infer_gpus_needed(cfg, serving, capacity, tokens, logits_fixed, kvh, heads, layers, tp_now, pp_now, infer,
                       kv_saving=None, seq=None):
    """Smallest power-of-two GPU count whose per-GPU memory fits, for serving (NaN for training
    rows).

    n GPUs are used as tensor parallel over the largest power of two dividing both n and the
    attention heads (vLLM requires heads divisible by tp), and pipeline parallel over the rest
    (n / tp stages, at most one layer each). Weights split over all n; the KV cache over
    min(tp, kv heads) x stages; the logits over tp.
    """
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
    work = pick(np.broadcast_to(serving["workspace"], (cfg.size,))) * tok
    if seq is not None and np.any(serving["attention_seq"]):  # eager attention's scores (the attention phase)
        attn = (pick(np.broadcast_to(serving["attention"], (cfg.size,)))
                + pick(np.broadcast_to(serving["attention_seq"], (cfg.size,))) * own(seq)) * tok
        work = np.maximum(work, attn)
    logit = (own(logits_fixed) + pick(np.broadcast_to(serving["logits"], (cfg.size,))) * tok) * pick(tp_now)
    cap = pick(capacity)
    heads_i = heads.astype(np.int64)
    best = np.full(len(tok), np.inf)
    for degree in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)[::-1]:
        tp_n = np.gcd(degree, heads_i).astype(float)
        pp_n = degree / tp_n
        per_gpu = pick(w / degree) + kv / pick(np.minimum(tp_n, kvh) * pp_n) + np.maximum(work, logit / pick(tp_n))
        ok = (per_gpu <= cap) & pick(pp_n <= layers)
        best = np.where(ok, degree, best)
    if rows is None:
        return best
    out = np.full(n, np.nan)
    out[rows] = best
    return out
