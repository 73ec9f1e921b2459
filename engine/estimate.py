"""The engine's one front door: `estimate(scenarios, models, gpus)`.

Whole-column numpy over the scenario frame; a single scenario is a one-row frame.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine import constants as C
from engine.memory import (
    COMPONENTS,
    INFER_PHASES,
    PHASES,
    TRAIN_PHASES,
    Phase,
    layer_activation_bytes,
    layer_backward_transient_bytes,
    logits_bytes,
)
from engine.params import lora_module_dims, parse_lora_targets
from engine.scenarios import normalize
from engine.speed import add_speed_cost

MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "vocab_size", "tied_embeddings", "params")

# Default runtime-overhead settings (engine/constants.py gives the sources).
OVERHEAD_DEFAULTS = {
    "context_bytes": C.CUDA_CONTEXT_BYTES,
    "cublas_bytes": C.CUBLAS_WORKSPACE_BYTES,
    "fragmentation": C.FRAGMENTATION_FRACTION,
    "nccl_bytes": C.NCCL_BYTES,
}


def _lookup(column: pd.Series, table: dict, fill=np.nan) -> np.ndarray:
    """Map a categorical column through a dict, by category codes (no per-row Python)."""
    cats = column.cat.categories
    values = np.array([table.get(c, fill) for c in cats] + [fill], dtype=float)
    return values[column.cat.codes.to_numpy()]


def _mask(column: pd.Series, *values) -> np.ndarray:
    cats = column.cat.categories
    hits = np.array([c in values for c in cats] + [False])
    return hits[column.cat.codes.to_numpy()]


def _lora_sums(column: pd.Series, dims_by_row: dict) -> tuple[dict, np.ndarray]:
    """Per row: which modules are adapted (0/1 arrays) and the sum of (in + out) over them."""
    cats = list(column.cat.categories)
    codes = column.cat.codes.to_numpy()
    flags = {}
    for m in C.LORA_MODULES:
        table = np.array([1.0 if m in parse_lora_targets(c) else 0.0 for c in cats] + [0.0])
        flags[m] = table[codes]
    in_out = sum(flags[m] * (dims_by_row[m][0] + dims_by_row[m][1]) for m in C.LORA_MODULES)
    return flags, in_out


def estimate(scenarios: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame | None = None,
             **overhead) -> pd.DataFrame:
    """Estimate memory per GPU for every scenario row.

    scenarios: one row per question (see engine.scenarios.DEFAULTS for the columns).
    models: the catalog's models table (id + config fields).
    gpus: the catalog's GPU table; rows whose `gpu` column names one get fit columns.
    overhead: context_bytes, cublas_bytes, fragmentation, nccl_bytes (runtime overhead).
    Raises ValueError with a clear message for a bad value.
    """
    unknown = set(overhead) - set(OVERHEAD_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown overhead setting {sorted(unknown)[0]!r}; accepted: {', '.join(OVERHEAD_DEFAULTS)}")
    settings = {**OVERHEAD_DEFAULTS, **overhead}
    for key, value in settings.items():
        try:
            value = settings[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key} {value!r} is not accepted; accepted: a finite number >= 0") from None
        if not np.isfinite(value) or value < 0 or (key == "fragmentation" and value >= 1):
            raise ValueError(f"{key} {value!r} is not accepted; accepted: a finite number >= 0" + (" and < 1" if key == "fragmentation" else ""))

    sc = normalize(scenarios, models)
    n = len(sc)
    midx = pd.Index(models["id"]).get_indexer(sc["model"].astype(str)) if n else np.zeros(0, dtype=int)
    m = {k: models[k].to_numpy()[midx].astype(float) for k in MODEL_FIELDS}
    h, f, L = m["hidden_size"], m["intermediate_size"], m["num_layers"]
    a, kvh, d, V = m["num_heads"], m["num_kv_heads"], m["head_dim"], m["vocab_size"]
    tied = m["tied_embeddings"] > 0
    N = m["params"]
    qd, kvd = a * d, kvh * d
    layer_lin = h * qd + 2 * h * kvd + qd * h + 3 * h * f
    # Qwen2-style q/k/v biases (catalog column qkv_bias, absent or false for Llama)
    qkv_bias = models["qkv_bias"].fillna(False).to_numpy(dtype=bool)[midx] if "qkv_bias" in models else np.zeros(n, dtype=bool)
    layer_all = layer_lin + 2 * h + np.where(qkv_bias, qd + 2 * kvd, 0.0)
    n_lin = L * layer_lin
    embed = V * h
    head = np.where(tied, 0.0, V * h)

    b = sc["batch"].to_numpy().astype(float)
    s = sc["seq"].to_numpy().astype(float)
    tokens = b * s
    gpus_n = sc["gpus"].to_numpy().astype(float)
    tp = sc["tp"].to_numpy().astype(float)
    pp = sc["pp"].to_numpy().astype(float)
    dp = gpus_n / (tp * pp)
    mp = tp * pp  # model-parallel split of the weights
    zero = sc["zero"].to_numpy()
    gc = sc["grad_checkpointing"].to_numpy()

    train = _mask(sc["task"], "train")
    infer = ~train
    full = train & _mask(sc["method"], "full")
    lora = train & _mask(sc["method"], "lora", "qlora")
    qlora = train & _mask(sc["method"], "qlora")
    freeze = train & _mask(sc["method"], "freeze")

    prec = sc["precision"]
    wb = _lookup(prec, C.WEIGHT_BYTES, 0.0)
    gb = _lookup(prec, C.GRAD_BYTES, 0.0)
    master = _lookup(prec, C.MASTER_BYTES, 0.0)
    sdb = _lookup(prec, C.STATE_DTYPE_BYTES, 0.0)
    acb = _lookup(prec, C.AUTOCAST_COPY_BYTES, 0.0)
    R = _lookup(prec, C.RESIDUAL_BYTES, 2.0)
    M = _lookup(prec, C.MATMUL_OUT_BYTES, 2.0)
    autocast = acb > 0

    # ---- trainable parameters ------------------------------------------------------
    dims = lora_module_dims(h, f, a, kvh, d)
    r = np.where(lora, sc["lora_rank"].to_numpy().astype(float), 0.0)
    flags, in_out = _lora_sums(sc["lora_targets"], dims)
    n_adapted = sum(flags.values())
    lora_params = L * r * in_out
    k_layers = np.minimum(sc["freeze_layers"].to_numpy().astype(float), L)
    trainable = np.select([full, lora, freeze], [N, lora_params, k_layers * layer_all], 0.0)
    frozen = np.where(train & ~full, N - np.where(freeze, trainable, 0.0), 0.0)
    # LoRA adapters, their gradients and optimizer states are fp32 whatever the base (peft)
    wb_t = np.where(lora, C.LORA_ADAPTER_BYTES, wb)
    gb = np.where(lora, C.LORA_ADAPTER_BYTES, gb)
    sdb = np.where(lora, C.LORA_ADAPTER_BYTES, sdb)
    master = np.where(lora, 0.0, master)

    # ---- weights (whole model, before any sharding) ----------------------------------
    base = sc["base_precision"]
    base_auto = _mask(base, "auto")
    base_bits = _lookup(base, {**C.LINEAR_BITS, **C.GGUF_BITS}, 16.0)
    base_bits = np.where(qlora & base_auto, C.LINEAR_BITS["nf4"], base_bits)
    quant_base = (lora & ~base_auto) | qlora
    # frozen base: in the training dtype, or quantized linear layers + 16-bit (or wider) rest
    frozen_quant = n_lin * base_bits / 8 + (N - n_lin) * np.minimum(wb, 2.0)
    frozen_bytes = np.where(quant_base, frozen_quant, frozen * wb)
    train_weights = trainable * wb_t + np.where(lora, frozen_bytes, np.where(freeze, frozen * wb, 0.0))

    ip = prec
    lin_bits = _lookup(ip, C.LINEAR_BITS, np.nan)
    gguf_bits = _lookup(ip, C.GGUF_BITS, np.nan)
    act_b = _lookup(ip, C.INFER_ACT_BYTES, 2.0)
    rows_out = L * (qd + 2 * kvd + h + 2 * f + h)
    int8_scales = np.where(_mask(ip, "int8"), rows_out * C.INT8_ROW_SCALE_BYTES, 0.0)
    infer_weights = np.where(
        np.isnan(gguf_bits),
        n_lin * np.nan_to_num(lin_bits) / 8 + (N - n_lin) * act_b + int8_scales,
        N * np.nan_to_num(gguf_bits) / 8,
    )
    weights_total = np.where(train, train_weights, infer_weights)

    # ---- gradients and optimizer states (whole model) --------------------------------
    grads_total = np.where(train, trainable * gb, 0.0)
    opt = sc["optimizer"]
    state_count = _lookup(opt, C.STATE_COUNT, 0.0)
    temp_count = _lookup(opt, C.STEP_TEMP_COUNT, 0.0)
    is_8bit = _mask(opt, "adamw_8bit", "paged_adamw_8bit")
    paged = _mask(opt, "paged_adamw_8bit") & train
    adafactor = _mask(opt, "adafactor")
    # small tensors (norm weights, fewer than 4096 values) keep fp32 Adam states in bnb
    small = np.where(full | freeze, np.where(h < C.ADAM8BIT_MIN_SIZE, 2 * h * np.where(freeze, k_layers, L) + h * full, 0.0), 0.0)
    adam8 = (trainable - small) * C.ADAM8BIT_BYTES + small * 8.0
    # Adafactor (transformers.optimization.Adafactor, beta1=None): a row and a column vector
    # per matrix, a full second moment for vectors; no first moment.
    per_layer_rc = (7 * h + 2 * qd + 2 * kvd + 3 * f) + 2 * h
    ada_full = L * per_layer_rc + (V + h) * np.where(tied, 1.0, 2.0) + h
    ada_states = np.select([full, freeze, lora], [ada_full, k_layers * per_layer_rc, L * (in_out + 2 * r * n_adapted)], 0.0) * sdb
    states_total = np.where(
        is_8bit, adam8, np.where(adafactor, ada_states, trainable * state_count * sdb)
    ) + trainable * master
    states_total = np.where(train, states_total, 0.0)
    # step temporaries: multi-tensor AdamW's sqrt of every second moment at once; Adafactor
    # squares one tensor at a time (twice the largest trainable tensor)
    largest = np.select([full, freeze, lora], [np.maximum(V * h, h * f), h * f, r * np.maximum(h, f)], 0.0)
    temps_total = np.where(adafactor, 2.0 * largest * gb, trainable * temp_count * sdb)
    temps_total = np.where(train, temps_total, 0.0)

    # ---- placement: model parallel, ZeRO sharding, offload ---------------------------
    offload = sc["offload"]
    off_opt = _mask(offload, "optimizer", "all") & train
    off_all = _mask(offload, "all") & train
    w_mp = weights_total / mp
    g_mp = grads_total / mp
    s_mp = states_total / mp
    t_mp = temps_total / mp
    z1, z2, z3 = zero >= 1, zero >= 2, zero >= 3
    # per GPU, as (unsharded, sharded-by-dp) pairs
    w_fix, w_sh = np.where(z3 & train, 0.0, w_mp), np.where(z3 & train, w_mp, 0.0)
    w_fix = np.where(off_all, 0.0, w_fix); w_sh = np.where(off_all, 0.0, w_sh)
    g_fix, g_sh = np.where(z2, 0.0, g_mp), np.where(z2, g_mp, 0.0)
    g_on_gpu_fix = np.where(off_opt & z2, 0.0, g_fix); g_on_gpu_sh = np.where(off_opt & z2, 0.0, g_sh)
    s_fix, s_sh = np.where(z1, 0.0, s_mp), np.where(z1, s_mp, 0.0)
    on_gpu_states = ~(off_opt | paged)
    s_gpu_fix, s_gpu_sh = np.where(on_gpu_states, s_fix, 0.0), np.where(on_gpu_states, s_sh, 0.0)
    t_gpu_fix, t_gpu_sh = np.where(off_opt, 0.0, np.where(z1, 0.0, t_mp)), np.where(off_opt, 0.0, np.where(z1, t_mp, 0.0))
    # ZeRO-3 / FSDP: the units in flight (a decoder layer, or the embedding / lm_head) are
    # gathered whole, at the weights' average bytes per parameter
    biggest_unit = np.maximum(layer_all, np.maximum(embed, head))
    gathered = np.where(z3 & train, C.ZERO3_LAYERS_IN_FLIGHT * biggest_unit * weights_total / N / mp, 0.0)

    # ---- activations ---------------------------------------------------------------
    saves = {mod: np.where(full | freeze, 1.0, 0.0) for mod in C.LORA_MODULES}
    adapted = {mod: np.where(lora, flags[mod], 0.0) for mod in C.LORA_MODULES}
    wgrad = np.where(full | freeze, 1.0, 0.0)
    per_layer = layer_activation_bytes(h, f, qd, kvd, a, R, M, autocast, saves, wgrad, adapted, r, tp)
    act_layers = np.where(freeze, k_layers, L)
    ckpt = R * h  # checkpointing keeps each layer's input
    head_trained = full  # lm_head (or the tied embedding) is trained only in full fine-tuning
    final_norm = 4.0 * h + 4.0 + R * h * head_trained + np.where(head_trained, np.where(autocast, 2.0, R) * h, 0.0)
    stack = np.where(gc, act_layers * ckpt, act_layers * per_layer) + final_norm
    logit_fwd, logit_bwd, logit_kept = logits_bytes(V, M, tp)
    transient = layer_backward_transient_bytes(h, f, R, M, tp)
    recompute = np.where(gc, per_layer, 0.0)
    # autocast's 16-bit weight copies: every linear weight whose matmul input needs grad
    lin_copies = np.where(freeze, k_layers * layer_lin, n_lin) + V * h
    # Autocast caches the casts of trained weights until it exits (all of them in forward);
    # casts of frozen weights are not cached: matmuls keep them only where their activations
    # are kept, so under checkpointing only lm_head's and one layer's exist at a time.
    copies_fwd = np.where(autocast & train, acb * lin_copies / mp, 0.0)
    one_layer = np.where(autocast & train, acb * (V * h + layer_lin) / mp, 0.0)
    copies_fwd = np.where(gc & ~(full | freeze), one_layer, copies_fwd)
    copies_bwd = np.where(gc, one_layer, copies_fwd)
    head_grad = np.where(full & ~tied, V * h * gb / mp, 0.0)

    # ---- phases ---------------------------------------------------------------------
    def base_phase():
        p = Phase()
        p.add("weights", fixed=w_fix, shard=w_sh)
        p.add("optimizer", fixed=s_gpu_fix, shard=s_gpu_sh)
        p.add("workspace", fixed=gathered)
        return p

    forward = base_phase().add("autocast_copies", fixed=copies_fwd)
    forward.add("activations", per_token=stack).add("logits", per_token=logit_fwd)
    loss_bwd = base_phase().add("autocast_copies", fixed=copies_bwd)
    loss_bwd.add("activations", per_token=stack).add("logits", per_token=logit_bwd)
    layer_bwd = base_phase().add("autocast_copies", fixed=copies_bwd).add("gradients", fixed=head_grad)
    layer_bwd.add("activations", per_token=stack + recompute).add("logits", per_token=logit_kept)
    layer_bwd.add("workspace", per_token=transient)
    # end of backward: all gradients; a tied embedding's two gradients summed in autograd's
    # input buffer (lm_head's, the embedding's, their sum) before .grad is set
    tied_grad = np.where(full & tied, V * h * gb / mp, 0.0)
    bwd_end = base_phase().add("gradients", fixed=g_on_gpu_fix - np.where(z2, 0.0, tied_grad),
                               shard=g_on_gpu_sh - np.where(z2, tied_grad, 0.0))
    bwd_end.add("workspace", fixed=3.0 * tied_grad)
    step = Phase().add("weights", fixed=w_fix, shard=w_sh)
    step.add("gradients", fixed=g_on_gpu_fix, shard=g_on_gpu_sh)
    step.add("optimizer", fixed=s_gpu_fix, shard=s_gpu_sh)
    step.add("optimizer_temp", fixed=t_gpu_fix, shard=t_gpu_sh)
    step.add("workspace", fixed=gathered)

    # inference: KV cache split by tensor parallel over KV heads (never below one head)
    kv_b = _lookup(sc["kv_precision"], C.KV_BYTES, np.nan)
    kv_b = np.where(np.isnan(kv_b), act_b, kv_b)
    # each pipeline stage keeps the KV cache of its own layers
    kv_split = np.minimum(tp, kvh) * pp
    kv_per_token = 2.0 * L * kvd * kv_b / kv_split
    # one layer's working set in prefill (the MLP: input, residual, gate/up/SiLU/product)
    # the layer's input (still referenced by the model's loop), the residual, the MLP input
    # and the attention output added to it (4 h-wide), gate/up/SiLU/product (3 f-wide alive)
    work = act_b * (4.0 * h + 3.0 * f / tp)
    last_only = _mask(sc["prefill_logits"], "last")
    infer_w = weights_total / mp
    prefill = Phase().add("weights", fixed=infer_w).add("kv_cache", per_token=kv_per_token)
    prefill.add("workspace", per_token=work)
    logits_phase = Phase().add("weights", fixed=infer_w).add("kv_cache", per_token=kv_per_token)
    # generate() keeps the last position's logits (16-bit, then fp32 for sampling)
    logits_phase.add("logits", fixed=np.where(last_only, b * V * (act_b + 4.0) / tp, 0.0),
                     per_token=np.where(last_only, 0.0, act_b * V / tp))

    phases = {"forward": forward, "loss_backward": loss_bwd, "backward": layer_bwd, "backward_end": bwd_end,
              "optimizer": step, "prefill": prefill, "logits": logits_phase}
    valid = {p: (train if p in TRAIN_PHASES else infer) for p in PHASES}

    # ---- totals and the peak ----------------------------------------------------------
    totals = np.empty((len(PHASES), n))
    fixed_tot = np.empty((len(PHASES), n))
    shard_tot = np.empty((len(PHASES), n))
    token_tot = np.empty((len(PHASES), n))
    for i, name in enumerate(PHASES):
        fx, sh, tk = phases[name].totals()
        fixed_tot[i] = fx
        shard_tot[i] = sh
        token_tot[i] = tk
        totals[i] = np.where(valid[name], fx + sh / dp + tk * tokens, -np.inf)
    peak_idx = np.argmax(totals, axis=0)
    tensor_peak = totals[peak_idx, np.arange(n)]

    result = sc.copy()
    result["params"] = N.astype(np.int64)
    result["trainable_params"] = np.rint(trainable).astype(np.int64)
    cols = {}
    for comp in COMPONENTS:
        stacked = np.vstack([np.broadcast_to(phases[p].component(comp, dp, tokens), (n,)) for p in PHASES])
        cols[comp] = stacked[peak_idx, np.arange(n)]
    for comp in COMPONENTS:
        result[f"{comp}_bytes"] = cols[comp]
    result["model_states_bytes"] = (w_fix + w_sh / dp + g_on_gpu_fix + g_on_gpu_sh / dp
                                    + s_gpu_fix + s_gpu_sh / dp)
    result["paged_optimizer_bytes"] = np.where(paged, np.where(z1, s_mp / dp, s_mp), 0.0)

    multi = gpus_n > 1
    context = settings["context_bytes"] + settings["cublas_bytes"] + np.where(multi, settings["nccl_bytes"], 0.0)
    overhead = context + settings["fragmentation"] * tensor_peak
    result["runtime_overhead_bytes"] = overhead
    result["peak_bytes"] = tensor_peak + overhead
    result["peak_phase"] = pd.Categorical.from_codes(peak_idx, categories=list(PHASES))
    for i, name in enumerate(PHASES):
        result[f"{name}_phase_bytes"] = np.where(valid[name], totals[i], np.nan)

    # host memory: offloaded states (+ their fp32 gradient copy and the parameters for
    # offload 'all'), paged optimizer states that may spill; total over all GPUs' processes
    copies = np.where(z1, 1.0, dp)  # without ZeRO every data-parallel rank holds its own
    cpu = np.where(off_opt, states_total + temps_total + trainable * 4.0, 0.0) * copies
    cpu = cpu + np.where(off_all, weights_total, 0.0) + np.where(paged, states_total * copies, 0.0)
    result["cpu_bytes"] = cpu

    result = _fit(result, sc, gpus, fixed_tot, shard_tot, token_tot, valid, dp, tp, pp, tokens,
                  kvh, a, L, context, settings["fragmentation"], phases, infer)
    # the longest context is bounded by the model's own, unless the scenario allows longer
    ctx = models["max_context"].to_numpy(dtype=float)[midx] if n else np.zeros(0)
    result["max_seq"] = np.where(sc["allow_long_context"].to_numpy(), result["max_seq"],
                                 np.minimum(result["max_seq"], ctx))
    return add_speed_cost(result, gpus, models)


def _fit(result, sc, gpus, fixed_tot, shard_tot, token_tot, valid, dp, tp, pp, tokens, kvh, heads, layers,
         context, frag, phases, infer):
    """Fit against the chosen GPU: fits, GPUs needed, largest batch, longest context."""
    n = len(result)
    fit_cols = ("usable_bytes", "capacity_bytes", "fits", "memory_used_fraction", "gpus_needed",
                "max_batch", "max_seq")
    if gpus is None or n == 0 or not (result["gpu"].astype(str) != "").any():
        for c in fit_cols:
            result[c] = np.nan
        result["fits"] = pd.array([pd.NA] * n, dtype="boolean")
        return result
    gidx = pd.Index(gpus["id"]).get_indexer(sc["gpu"].astype(str))
    chosen = sc["gpu"].astype(str).to_numpy() != ""
    bad = chosen & (gidx < 0)
    if bad.any():
        value = sc["gpu"].astype(str).to_numpy()[bad][0]
        raise ValueError(f"gpu {value!r} is not in the catalog; accepted: a catalog GPU id (python -m engine catalog gpus), e.g. h100-sxm-80gb, rtx-4090")
    usable = np.where(chosen, gpus["usable_memory_bytes"].to_numpy().astype(float)[np.maximum(gidx, 0)], np.nan)
    headroom = sc["headroom"].to_numpy()
    # the tensors may use what is left after headroom and the fixed runtime overhead, less the
    # allocator's fragmentation share
    capacity = (usable * (1 - headroom) - context) / (1 + frag)
    peak = result["peak_bytes"].to_numpy()
    tensor_peak = peak - result["runtime_overhead_bytes"].to_numpy()
    result["usable_bytes"] = usable
    result["capacity_bytes"] = capacity
    fits = tensor_peak <= capacity
    result["fits"] = pd.array(np.where(chosen, fits, False), dtype="boolean")
    result.loc[~chosen, "fits"] = pd.NA
    result["memory_used_fraction"] = peak / usable

    # largest token count per micro-batch that fits, over all phases
    with np.errstate(divide="ignore", invalid="ignore"):
        room = capacity[None, :] - fixed_tot - shard_tot / dp[None, :]
        per_phase = np.where(token_tot > 0, room / token_tot, np.where(room >= 0, np.inf, -np.inf))
        per_phase = np.where(np.vstack([valid[p] for p in phases]), per_phase, np.inf)
        max_tokens = per_phase.min(axis=0)
        b = sc["batch"].to_numpy().astype(float)
        s = sc["seq"].to_numpy().astype(float)
        max_batch = np.floor(max_tokens / s)
        max_seq = np.floor(max_tokens / b)
    result["max_batch"] = np.where(chosen & (max_batch >= 1), np.minimum(max_batch, 1e12), 0.0)
    result["max_seq"] = np.where(chosen & (max_seq >= 1), np.minimum(max_seq, 1e12), 0.0)

    # GPUs needed. Training: data-parallel ranks at the scenario's ZeRO stage (tp x pp kept);
    # inference: tensor parallel over powers of two (KV cache split over at most kv heads).
    with np.errstate(divide="ignore", invalid="ignore"):
        room_fixed = capacity[None, :] - fixed_tot - token_tot * tokens[None, :]
        need = np.where(shard_tot > 0, np.ceil(shard_tot / room_fixed), 1.0)
        need = np.where(room_fixed <= 0, np.inf, need)
        need = np.where(np.vstack([valid[p] for p in phases]), need, 1.0)
        ranks = np.maximum(need.max(axis=0), 1.0)
    train_need = ranks * tp * pp
    infer_need = _infer_gpus_needed(phases, capacity, tokens, kvh, heads, layers, tp, pp, infer)
    needed = np.where(infer, infer_need, train_need)
    needed = np.where(needed > C.MAX_GPUS, np.inf, needed)
    result["gpus_needed"] = np.where(chosen, needed, np.nan)
    return result


def _infer_gpus_needed(phases, capacity, tokens, kvh, heads, layers, tp_now, pp_now, infer):
    """Smallest power-of-two GPU count whose per-GPU memory fits, for serving.

    n GPUs are used as tensor parallel over the largest power of two dividing both n and the
    attention heads (vLLM requires heads divisible by tp), and pipeline parallel over the rest
    (n / tp stages, at most one layer each). Weights split over all n; the KV cache over
    min(tp, kv heads) x stages; the logits over tp.
    """
    pre, lg = phases["prefill"], phases["logits"]
    w = pre.fixed.get("weights", 0.0) * tp_now * pp_now
    kv = pre.per_token.get("kv_cache", 0.0) * tokens * np.minimum(tp_now, kvh) * pp_now
    work = pre.per_token.get("workspace", 0.0) * tokens
    logit = (lg.fixed.get("logits", 0.0) + lg.per_token.get("logits", 0.0) * tokens) * tp_now
    heads_i = heads.astype(np.int64)
    best = np.full(len(capacity), np.inf)
    for degree in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)[::-1]:
        tp_n = np.gcd(degree, heads_i).astype(float)
        pp_n = degree / tp_n
        per_gpu = w / degree + kv / (np.minimum(tp_n, kvh) * pp_n) + np.maximum(work, logit / tp_n)
        ok = (per_gpu <= capacity) & (pp_n <= layers)
        best = np.where(ok, degree, best)
    return np.where(infer, best, np.nan)
