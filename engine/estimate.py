"""The engine's one front door: `estimate(scenarios, models, gpus)`.

Whole-column numpy over the scenario frame; a single scenario is a one-row frame.

Computed at the coarsest level each term allows, with the same numbers: a sweep's rows share
few *configurations* (every column but batch and seq: model, GPU, method, precision, GPU
count, ...; engine.scenarios.Configs), and fewer *memory configurations* (the same without the
GPU and the headroom). Per memory configuration: parameter counts, weights, optimizer states,
each phase's fixed, sharded and per-token bytes. Per configuration: the GPU's capacity, the
largest token count that fits, rates and prices. Per configuration x seq: the training time
and cost, the largest batch. Per row: the terms in tokens = batch x seq, the peak, the GPUs
needed. A value computed once and gathered to its rows is the very value a per-row evaluation
of the same expression gives (the expressions keep their order of operations), so results do
not depend on how rows are grouped; tests/test_engine_properties.py checks one row against
many.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine import constants as C
from engine.buffers import Columns
from engine.memory import (
    COMPONENTS,
    PHASES,
    TRAIN_PHASES,
    Phase,
    layer_activation_bytes,
    layer_backward_transient_bytes,
    logits_bytes,
)
from engine.params import lora_module_dims, parse_lora_targets
from engine.scenarios import Configs, View, _normalize_columns, check_combinations
from engine.speed import (
    GPU_FIELDS,
    MODEL_SHAPE,
    OUTPUT_COLUMNS,
    SETTINGS,
    add_speed_cost,
    gather_gpu_fields,
    check_prompt,
    pick_rate,
    read_settings,
    speed_cost_columns,
)

MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "vocab_size", "tied_embeddings", "params")

# Default runtime-overhead settings (engine/constants.py gives the sources).
OVERHEAD_DEFAULTS = {
    "context_bytes": C.CUDA_CONTEXT_BYTES,
    "cublas_bytes": C.CUBLAS_WORKSPACE_BYTES,
    "fragmentation": C.FRAGMENTATION_FRACTION,
    "nccl_bytes": C.NCCL_BYTES,
}
PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
# Rows per block of the per-row memory terms: a block's temporaries (512 KiB each) stay in
# the CPU's cache and in memory malloc keeps. 2^14 to 2^17 rows ran equally fast on the
# development machine (benchmarks/bench_engine.py); one block of a million rows was 14% slower.
ROW_BLOCK = 1 << 16
# the fit columns, in the order every result lists them (with or without a GPU)
FIT_COLUMNS = ("usable_bytes", "capacity_bytes", "fits", "memory_used_fraction", "max_batch", "max_seq", "gpus_needed")
# Speed settings that enter per-configuration figures (rates, prices); tokens and
# prompt_tokens only enter per-row ones.
PER_CONFIG_SETTINGS = ("mfu", "bandwidth_efficiency", "usd_per_kwh", "utilization", "hours_per_month")
UNKNOWN_GPU = ("gpu {!r} is not in the catalog; accepted: a catalog GPU id (python -m engine catalog gpus), "
               "e.g. h100-sxm-80gb, rtx-4090")


def _lora_sums(cfg: View, dims: dict) -> tuple[dict, np.ndarray]:
    """Per (memory) configuration: which modules are adapted (0/1 arrays) and the sum of
    (in + out) over them."""
    cats = cfg.categories("lora_targets")
    codes = cfg.codes("lora_targets")
    flags = {}
    for m in C.LORA_MODULES:
        table = np.array([1.0 if m in parse_lora_targets(c) else 0.0 for c in cats] + [0.0])
        flags[m] = table[codes]
    in_out = sum(flags[m] * (dims[m][0] + dims[m][1]) for m in C.LORA_MODULES)
    return flags, in_out


def _is_zero(value) -> bool:
    return np.ndim(value) == 0 and value == 0


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

    out = Columns(len(scenarios)) if isinstance(scenarios, pd.DataFrame) else None  # the result's new columns
    sc, ranges = _normalize_columns(scenarios, models, out)
    cfg = Configs(sc, ranges=ranges, columns=out)
    check_combinations(sc, models, cfg, ranges)
    n = len(sc)
    take = cfg.take

    # ==== per memory configuration: every column but the GPU, the headroom, batch and seq ====
    mv, of_config = cfg.coarser(("gpu", "headroom"))
    midx = mv.index_in("model", models["id"]) if n else np.zeros(0, dtype=int)
    m = {k: models[k].to_numpy()[midx].astype(float) for k in MODEL_FIELDS}
    h, f, L = m["hidden_size"], m["intermediate_size"], m["num_layers"]
    a, kvh, d, V = m["num_heads"], m["num_kv_heads"], m["head_dim"], m["vocab_size"]
    tied = m["tied_embeddings"] > 0
    N = m["params"]
    qd, kvd = a * d, kvh * d
    layer_lin = h * qd + 2 * h * kvd + qd * h + 3 * h * f
    # Qwen2-style q/k/v biases (catalog column qkv_bias, absent or false for Llama)
    qkv_bias = models["qkv_bias"].fillna(False).to_numpy(dtype=bool)[midx] if "qkv_bias" in models else np.zeros(mv.size, dtype=bool)
    layer_all = layer_lin + 2 * h + np.where(qkv_bias, qd + 2 * kvd, 0.0)
    n_lin = L * layer_lin
    embed = V * h
    head = np.where(tied, 0.0, V * h)

    gpus_n = mv.values("gpus").astype(float)
    tp = mv.values("tp").astype(float)
    pp = mv.values("pp").astype(float)
    dp = gpus_n / (tp * pp)
    mp = tp * pp  # model-parallel split of the weights
    zero = mv.values("zero")
    gc = mv.values("grad_checkpointing")

    train = mv.mask("task", "train")
    infer = ~train
    full = train & mv.mask("method", "full")
    lora = train & mv.mask("method", "lora", "qlora")
    qlora = train & mv.mask("method", "qlora")
    freeze = train & mv.mask("method", "freeze")

    wb = mv.lookup("precision", C.WEIGHT_BYTES, 0.0)
    gb = mv.lookup("precision", C.GRAD_BYTES, 0.0)
    master = mv.lookup("precision", C.MASTER_BYTES, 0.0)
    sdb = mv.lookup("precision", C.STATE_DTYPE_BYTES, 0.0)
    acb = mv.lookup("precision", C.AUTOCAST_COPY_BYTES, 0.0)
    R = mv.lookup("precision", C.RESIDUAL_BYTES, 2.0)
    M = mv.lookup("precision", C.MATMUL_OUT_BYTES, 2.0)
    autocast = acb > 0

    # ---- trainable parameters ------------------------------------------------------
    dims = lora_module_dims(h, f, a, kvh, d)
    r = np.where(lora, mv.values("lora_rank").astype(float), 0.0)
    flags, in_out = _lora_sums(mv, dims)
    n_adapted = sum(flags.values())
    lora_params = L * r * in_out
    k_layers = np.minimum(mv.values("freeze_layers").astype(float), L)
    trainable = np.select([full, lora, freeze], [N, lora_params, k_layers * layer_all], 0.0)
    frozen = np.where(train & ~full, N - np.where(freeze, trainable, 0.0), 0.0)
    # LoRA adapters, their gradients and optimizer states are fp32 whatever the base (peft)
    wb_t = np.where(lora, C.LORA_ADAPTER_BYTES, wb)
    gb = np.where(lora, C.LORA_ADAPTER_BYTES, gb)
    sdb = np.where(lora, C.LORA_ADAPTER_BYTES, sdb)
    master = np.where(lora, 0.0, master)

    # ---- weights (whole model, before any sharding) ----------------------------------
    base_auto = mv.mask("base_precision", "auto")
    base_bits = mv.lookup("base_precision", {**C.LINEAR_BITS, **C.GGUF_BITS}, 16.0)
    base_bits = np.where(qlora & base_auto, C.LINEAR_BITS["nf4"], base_bits)
    quant_base = (lora & ~base_auto) | qlora
    # frozen base: in the training dtype, or quantized linear layers + 16-bit (or wider) rest
    frozen_quant = n_lin * base_bits / 8 + (N - n_lin) * np.minimum(wb, 2.0)
    frozen_bytes = np.where(quant_base, frozen_quant, frozen * wb)
    train_weights = trainable * wb_t + np.where(lora, frozen_bytes, np.where(freeze, frozen * wb, 0.0))

    lin_bits = mv.lookup("precision", C.LINEAR_BITS, np.nan)
    gguf_bits = mv.lookup("precision", C.GGUF_BITS, np.nan)
    act_b = mv.lookup("precision", C.INFER_ACT_BYTES, 2.0)
    rows_out = L * (qd + 2 * kvd + h + 2 * f + h)
    int8_scales = np.where(mv.mask("precision", "int8"), rows_out * C.INT8_ROW_SCALE_BYTES, 0.0)
    infer_weights = np.where(
        np.isnan(gguf_bits),
        n_lin * np.nan_to_num(lin_bits) / 8 + (N - n_lin) * act_b + int8_scales,
        N * np.nan_to_num(gguf_bits) / 8,
    )
    weights_total = np.where(train, train_weights, infer_weights)

    # ---- gradients and optimizer states (whole model) --------------------------------
    grads_total = np.where(train, trainable * gb, 0.0)
    state_count = mv.lookup("optimizer", C.STATE_COUNT, 0.0)
    temp_count = mv.lookup("optimizer", C.STEP_TEMP_COUNT, 0.0)
    is_8bit = mv.mask("optimizer", "adamw_8bit", "paged_adamw_8bit")
    paged = mv.mask("optimizer", "paged_adamw_8bit") & train
    adafactor = mv.mask("optimizer", "adafactor")
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
    off_opt = mv.mask("offload", "optimizer", "all") & train
    off_all = mv.mask("offload", "all") & train
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
    # The tied parameter's own .grad is not set yet, so it is left out of the gradients the GPU
    # holds, and only of those: with ZeRO >= 2 and optimizer offload the GPU holds none (they
    # go to the host, g_on_gpu_* is 0), and leaving it out there too gave negative gradients
    # (Llama 3.2, full, ZeRO-2, offload optimizer: -1,050,673,152 bytes).
    not_yet = np.where(off_opt & z2, 0.0, tied_grad)
    bwd_end = base_phase().add("gradients", fixed=g_on_gpu_fix - np.where(z2, 0.0, not_yet),
                               shard=g_on_gpu_sh - np.where(z2, not_yet, 0.0))
    bwd_end.add("workspace", fixed=3.0 * tied_grad)
    step = Phase().add("weights", fixed=w_fix, shard=w_sh)
    step.add("gradients", fixed=g_on_gpu_fix, shard=g_on_gpu_sh)
    step.add("optimizer", fixed=s_gpu_fix, shard=s_gpu_sh)
    step.add("optimizer_temp", fixed=t_gpu_fix, shard=t_gpu_sh)
    step.add("workspace", fixed=gathered)

    # inference: KV cache split by tensor parallel over KV heads (never below one head)
    kv_b = mv.lookup("kv_precision", C.KV_BYTES, np.nan)
    kv_b = np.where(np.isnan(kv_b), act_b, kv_b)
    # each pipeline stage keeps the KV cache of its own layers
    kv_split = np.minimum(tp, kvh) * pp
    kv_per_token = 2.0 * L * kvd * kv_b / kv_split
    # one layer's working set in prefill (the MLP: input, residual, gate/up/SiLU/product)
    # the layer's input (still referenced by the model's loop), the residual, the MLP input
    # and the attention output added to it (4 h-wide), gate/up/SiLU/product (3 f-wide alive)
    work = act_b * (4.0 * h + 3.0 * f / tp)
    last_only = mv.mask("prefill_logits", "last")
    infer_w = weights_total / mp
    prefill = Phase().add("weights", fixed=infer_w).add("kv_cache", per_token=kv_per_token)
    prefill.add("workspace", per_token=work)
    logits_phase = Phase().add("weights", fixed=infer_w).add("kv_cache", per_token=kv_per_token)
    # generate() keeps the last position's logits (16-bit, then fp32 for sampling): per token
    # without last_only, else b x V per sequence, a fixed part that grows with the batch, so it
    # is added per row (`logits_fixed` below)
    logits_phase.add("logits", per_token=np.where(last_only, 0.0, act_b * V / tp))

    phases = {"forward": forward, "loss_backward": loss_bwd, "backward": layer_bwd, "backward_end": bwd_end,
              "optimizer": step, "prefill": prefill, "logits": logits_phase}
    valid = {p: (train if p in TRAIN_PHASES else infer) for p in PHASES}
    fixed_tot, shard_tot, token_tot, base_tot = {}, {}, {}, {}
    for name in PHASES:
        fx, sh, tk = phases[name].totals()
        fixed_tot[name], shard_tot[name], token_tot[name] = fx, sh, tk
        base_tot[name] = fx + sh / dp  # a phase's bytes = fixed + shard / dp + per_token x tokens
    model_states = w_fix + w_sh / dp + g_on_gpu_fix + g_on_gpu_sh / dp + s_gpu_fix + s_gpu_sh / dp
    paged_states = np.where(paged, np.where(z1, s_mp / dp, s_mp), 0.0)
    # host memory: offloaded states (+ their fp32 gradient copy and the parameters for
    # offload 'all'), paged optimizer states that may spill; total over all GPUs' processes
    copies = np.where(z1, 1.0, dp)  # without ZeRO every data-parallel rank holds its own
    cpu = np.where(off_opt, states_total + temps_total + trainable * 4.0, 0.0) * copies
    cpu = cpu + np.where(off_all, weights_total, 0.0) + np.where(paged, states_total * copies, 0.0)
    multi = gpus_n > 1
    context = settings["context_bytes"] + settings["cublas_bytes"] + np.where(multi, settings["nccl_bytes"], 0.0)
    frag = settings["fragmentation"]

    # ==== per row (memory configurations gathered to rows), in blocks of rows ===============
    minv = cfg.inv if of_config is None else take(of_config)
    mtake = lambda x: np.take(x, minv, mode="clip") if np.ndim(x) else x  # noqa: E731 - a fresh array
    b = out.empty()
    np.copyto(b, sc["batch"].to_numpy(), casting="unsafe")  # as .astype(float)
    s = out.empty()
    np.copyto(s, sc["seq"].to_numpy(), casting="unsafe")
    tokens = np.multiply(b, s, out=out.empty())
    any_infer = bool(infer.any())
    # the logits phase's fixed part that grows with the batch (see the logits phase above)
    logits_fixed = np.where(mtake(last_only), b * mtake(V) * mtake(act_b + 4.0) / mtake(tp), 0.0) if any_infer else None

    result = {col: sc[col] for col in sc.columns}
    live = [name for name in PHASES if valid[name].any()]  # no row of another task: never the peak
    # the result's columns, written block by block below
    result["params"] = out.empty(np.int64)
    result["trainable_params"] = out.empty(np.int64)
    tables = _component_tables(phases, valid, dp, mv.size, logits_fixed is not None)
    for comp in COMPONENTS:
        result[f"{comp}_bytes"] = out.full(0.0) if tables[comp] is None else out.empty()
    result["model_states_bytes"] = out.empty()
    result["paged_optimizer_bytes"] = out.empty() if paged_states.any() else out.full(0.0)
    result["runtime_overhead_bytes"] = overhead_row = out.empty()
    result["peak_bytes"] = out.empty()  # the tensors' peak + runtime overhead
    peak_idx = out.empty(np.int8)
    result["peak_phase"] = None  # (set below, in this place)
    for name in PHASES:
        result[f"{name}_phase_bytes"] = out.empty() if name in live else out.full(np.nan)
    result["cpu_bytes"] = out.empty() if cpu.any() else out.full(0.0)
    # a phase's per-token bytes x tokens, per row (the fit reuses them)
    scaled = {name: out.empty() for name in live if not _is_zero(token_tot[name])}
    N64, trainable64 = N.astype(np.int64), np.rint(trainable).astype(np.int64)

    def memory_rows(rows: slice) -> None:
        """Every memory column of the rows `rows` (a block small enough to stay in cache)."""
        at = minv[rows]
        get = lambda x: np.take(x, at, mode="clip") if np.ndim(x) else x  # noqa: E731 - a fresh array
        put = lambda name, x: np.copyto(result[name][rows], x)  # noqa: E731
        tok = tokens[rows]
        totals = {}
        for name in live:
            t = _gather(base_tot[name], at, result[f"{name}_phase_bytes"][rows])
            if name == "logits":
                t += logits_fixed[rows]
            if name in scaled:
                by_tokens = _gather(token_tot[name], at, scaled[name][rows])
                by_tokens *= tok
                t += by_tokens
            if not valid[name].all():
                t = np.where(get(valid[name]), t, -np.inf)
            totals[name] = t
        peak, tensor_peak = _peak(totals, len(tok))
        np.take(N64, at, out=result["params"][rows], mode="clip")
        np.take(trainable64, at, out=result["trainable_params"][rows], mode="clip")
        _components(tables, peak, at, mv.size, tok, None if logits_fixed is None else logits_fixed[rows],
                    {comp: result[f"{comp}_bytes"][rows] for comp in COMPONENTS if tables[comp] is not None})
        np.take(model_states, at, out=result["model_states_bytes"][rows], mode="clip")
        if paged_states.any():
            np.take(paged_states, at, out=result["paged_optimizer_bytes"][rows], mode="clip")
        overhead = np.multiply(frag, tensor_peak, out=overhead_row[rows])
        overhead += get(context)  # context + fragmentation x the tensors' peak
        tensor_peak += overhead
        put("peak_bytes", tensor_peak)
        np.copyto(peak_idx[rows], peak)
        for name in live:
            if not valid[name].all():
                put(f"{name}_phase_bytes", np.where(get(valid[name]), totals[name], np.nan))
        if cpu.any():
            np.take(cpu, at, out=result["cpu_bytes"][rows], mode="clip")

    for lo in range(0, n, ROW_BLOCK):
        memory_rows(slice(lo, min(n, lo + ROW_BLOCK)))
    result["peak_phase"] = pd.Categorical.from_codes(peak_idx, categories=list(PHASES))

    # ==== per configuration (the GPU and headroom too) =======================================
    lift = (lambda x: x) if of_config is None else (lambda x: x[of_config] if np.ndim(x) else x)
    live = [p for p in PHASES if valid[p].any()]  # the phases of the tasks present
    fixed_tot, shard_tot, token_tot, valid = ({k: lift(d[k]) for k in live}
                                               for d in (fixed_tot, shard_tot, token_tot, valid))
    # what serving needs of its phases: weights, KV cache, working set, logits
    serving = {k: lift(v) for k, v in (("weights", phases["prefill"].fixed.get("weights", 0.0)),
                                       ("kv_cache", phases["prefill"].per_token.get("kv_cache", 0.0)),
                                       ("workspace", phases["prefill"].per_token.get("workspace", 0.0)),
                                       ("logits", phases["logits"].per_token.get("logits", 0.0)))} if infer.any() else None
    dp, tp, pp, gpus_n, context = lift(dp), lift(tp), lift(pp), lift(gpus_n), lift(context)
    train, infer, kvh, a, L = lift(train), lift(infer), lift(kvh), lift(a), lift(L)
    midx = lift(midx)

    # ---- fit against the chosen GPU ---------------------------------------------------
    chosen = ~cfg.mask("gpu", "")
    seq_level = None
    if gpus is None or n == 0 or not chosen.any():
        for c in FIT_COLUMNS:  # the order _fit writes them in
            result[c] = out.full(np.nan) if c != "fits" else None  # (fits: below, in this place)
        result["fits"] = pd.array([pd.NA] * n, dtype="boolean")
    else:
        gidx = cfg.index_in("gpu", gpus["id"])
        bad = chosen & (gidx < 0)
        if bad.any():
            raise ValueError(UNKNOWN_GPU.format(str(sc["gpu"].iloc[cfg.first_row(bad)])))
        usable = np.where(chosen, gpus["usable_memory_bytes"].to_numpy().astype(float)[np.maximum(gidx, 0)], np.nan)
        headroom = cfg.values("headroom")
        # the tensors may use what is left after headroom and the fixed runtime overhead, less the
        # allocator's fragmentation share
        capacity = (usable * (1 - headroom) - context) / (1 + frag)
        seq_level = cfg.split() if logits_fixed is None else None
        _fit(result, cfg, chosen, usable, capacity, serving, valid, fixed_tot, shard_tot, token_tot, dp, tp, pp,
             b, s, tokens, scaled, logits_fixed, train, infer, kvh, a, L, overhead_row, seq_level, out)
    # the longest context is bounded by the model's own, unless the scenario allows longer
    ctx = models["max_context"].to_numpy(dtype=float)[midx] if n else np.zeros(0)
    allow = cfg.values("allow_long_context")
    if allow.any():
        result["max_seq"] = out.where(take(allow), result["max_seq"], np.minimum(result["max_seq"], take(ctx)))
    else:
        np.minimum(result["max_seq"], take(ctx), out=result["max_seq"])

    if "_zero_asked" in ranges and "gpus_needed" in result:
        _gpus_needed_at_the_stage_asked(result, sc, ranges, models, gpus, overhead)

    # ---- speed and cost ---------------------------------------------------------------
    if n == 0:
        for c in (*OUTPUT_COLUMNS, *SETTINGS):  # as a non-empty result lists them
            result[c] = np.zeros(0)
        return pd.DataFrame(result, index=pd.RangeIndex(0), copy=False)
    if all(c in sc.columns for c in MODEL_SHAPE):  # the frame carries its own model shape
        return add_speed_cost(pd.DataFrame(result, index=pd.RangeIndex(n), copy=False), gpus, models)
    st = read_settings(sc, s)
    if st["prompt_tokens"] is not s:
        check_prompt(st["prompt_tokens"], s, take(infer))
    level = {k: models[k].to_numpy(dtype=float)[midx] for k in MODEL_SHAPE}
    level.update(N=lift(N.astype(np.int64).astype(float)), T=lift(np.rint(trainable).astype(np.int64).astype(float)),
                 n_gpus=gpus_n, tp=tp, pp=pp, full=cfg.mask("method", "full"),
                 lora=cfg.mask("method", "lora", "qlora"), freeze=cfg.mask("method", "freeze"),
                 checkpointing=lift(gc), freeze_layers=cfg.values("freeze_layers").astype(float), train=train)
    g = _gpu_fields(cfg, gpus)
    level["rate"] = pick_rate(cfg.categories("precision"), cfg.codes("precision"), train,
                              {c: g[c] for c in ("bf16_tflops", "fp16_tflops", "fp32_tflops")}) * 1e12
    level["act_bytes"] = np.where(cfg.mask("precision", "fp32"), 4.0, 2.0)
    level.update(g)
    inv = None if cfg.identity else cfg.inv
    if any(np.ndim(st[k]) for k in PER_CONFIG_SETTINGS):  # a setting given per row: everything per row
        level = {k: (take(v) if np.ndim(v) else v) for k, v in level.items()}
        inv, seq_level = None, None
    if seq_level is None and not cfg.identity and inv is not None:
        seq_level = cfg.split()
    result.update(speed_cost_columns(level, inv, b, s, result["weights_bytes"], result["kv_cache_bytes"], st, n,
                                     seq_level, out))
    return pd.DataFrame(result, index=pd.RangeIndex(n), copy=False)


def _gather(values, at: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """values[at] (a scalar: everywhere) written into dest, which is returned."""
    if np.ndim(values):
        return np.take(values, at, out=dest, mode="clip")
    dest.fill(values)
    return dest


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
        scaled = False
        for i, name in enumerate(PHASES):
            ph = phases[name]
            per_config[i] = ph.fixed.get(comp, 0.0) + ph.shard.get(comp, 0.0) / dp
            tk = ph.per_token.get(comp, 0.0)
            # a phase that is no row's peak (its task absent) adds nothing
            if not _is_zero(tk) and valid[name].any():
                per_token[i] = tk
                scaled = True
        fixed = per_config.any()
        if not (scaled or fixed or (comp == "logits" and logits_fixed)):
            tables[comp] = None
        else:
            tables[comp] = (per_config.ravel() if fixed else None, per_token.ravel() if scaled else None)
    return tables


def _components(tables: dict, peak: np.ndarray, at: np.ndarray, size: int, tokens, logits_fixed, dest: dict):
    """Each component's bytes in the row's peak phase (fixed + shard / dp + per_token x tokens of
    that phase and memory configuration), written into dest[component]."""
    where = peak.astype(np.intp)  # (phase, memory configuration) of each row, in the tables
    where *= size
    where += at
    for comp, value in dest.items():
        per_config, per_token = tables[comp]
        if per_token is not None:
            np.take(per_token, where, out=value, mode="clip")
            value *= tokens
            if per_config is not None:  # (fixed + shard / dp) + per_token x tokens
                value += np.take(per_config, where, mode="clip")
        elif per_config is not None:
            np.take(per_config, where, out=value, mode="clip")
        else:
            value.fill(0.0)
        if comp == "logits" and logits_fixed is not None:
            np.copyto(value, value + logits_fixed, where=peak == PHASE_INDEX["logits"])


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
         b, s, tokens, scaled, logits_fixed, train, infer, kvh, heads, layers, overhead_row, seq_level, out):
    """Fit against the chosen GPU: fits, GPUs needed, largest batch, longest context. What
    does not depend on the row first (per configuration, or configuration x seq), then the
    rows in blocks of ROW_BLOCK."""
    n = len(b)
    inv = cfg.inv
    all_chosen = bool(chosen.all())
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
            per_phase = np.where(tk > 0, room / tk, np.where(room >= 0, np.inf, -np.inf))
            max_tokens = np.minimum(max_tokens, np.where(valid[name], per_phase, np.inf))
        if seq_level is not None:  # per configuration and seq (the batch does not enter)
            by_seq, seq_rows = seq_level
            batch_of_group = out.empty(length=len(seq_rows))
            for lo in range(0, len(seq_rows), ROW_BLOCK):  # in blocks: temporaries stay small
                part = slice(lo, min(len(seq_rows), lo + ROW_BLOCK))
                config = inv[seq_rows[part]]
                at_seq = np.floor(max_tokens[config] / s[seq_rows[part]])
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
        infer_need = _infer_gpus_needed(cfg, serving, capacity, tokens, logits_fixed, kvh, heads, layers, tp, pp, infer)
    splits = [x for x in (tp, pp) if not np.all(x == 1)]  # ranks x tp x pp (a factor of one changes nothing)

    def fit_rows(rows: slice) -> None:
        at = inv[rows]
        take = lambda x: np.take(x, at, mode="clip") if np.ndim(x) else x  # noqa: E731 - a fresh array
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
                    per_phase = np.where(tk > 0, room / tk, np.where(room >= 0, np.inf, -np.inf))
                    np.minimum(mt, np.where(take(valid["logits"]), per_phase, np.inf), out=mt)
                most = np.floor(mt / s[rows])
                ok_batch = most >= 1 if all_chosen else chosen_r & (most >= 1)
                np.copyto(max_batch[rows], np.where(ok_batch, np.minimum(most, 1e12), 0.0))
            ms = np.divide(mt, b[rows], out=mt)  # the longest sequence at the row's batch
            np.floor(ms, out=ms)
        short = ms < 1 if all_chosen else ~(chosen_r & (ms >= 1))
        np.minimum(ms, 1e12, out=ms)
        np.copyto(ms, 0.0, where=short)

        # GPUs needed. Training: data-parallel ranks at the scenario's ZeRO stage (tp x pp kept);
        # inference: tensor parallel over powers of two (KV cache split over at most kv heads).
        nd = needed[rows]
        if train_any:
            _train_gpus_rows(nd, take, ranks, per_row, one_shard, {k: v[rows] for k, v in scaled.items()})
            for split in splits:
                nd *= take(split)
        if infer_need is not None:
            np.copyto(nd, np.where(take(infer), infer_need[rows], nd) if train_any else infer_need[rows])
        nd[nd > C.MAX_GPUS] = np.inf
        if not all_chosen:
            nd[~chosen_r] = np.nan
            # a row without a GPU has no largest batch or context either: NaN, as when no row of
            # the frame has a GPU (they read 0 when another row of the frame had one)
            max_batch[rows][~chosen_r] = np.nan
            ms[~chosen_r] = np.nan

    for lo in range(0, n, ROW_BLOCK):
        fit_rows(slice(lo, min(n, lo + ROW_BLOCK)))
    result["fits"] = pd.arrays.BooleanArray(fits, unknown)


def _gpus_needed_at_the_stage_asked(result, sc, ranges, models, gpus, overhead) -> None:
    """One GPU runs without ZeRO (engine/rules.py), but the stage asked applies from two GPUs
    on: a one-GPU row that does not fit gets the GPUs it needs at that stage, from the same
    scenario asked at two GPUs (the engine solves the count from there). Only such rows are
    estimated again."""
    rows, asked = ranges["_zero_dropped_rows"], ranges["_zero_asked"]
    fits = result["fits"].to_numpy(dtype=bool, na_value=True)[rows]
    rows, asked = rows[~fits], asked[~fits]
    if not len(rows):
        return
    probe = sc.iloc[rows].reset_index(drop=True).assign(gpus=2, zero=asked)
    needed = estimate(probe, models, gpus, **overhead)["gpus_needed"].to_numpy(dtype=float)
    result["gpus_needed"][rows] = needed


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
            if _is_zero(token_tot[name]):  # no per-token part: per configuration
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
            for room_fixed, sh, name in per_row:
                room = take(room_fixed) - scaled[name]
                need = np.ceil(take(sh) / room) if np.ndim(sh) else np.ceil(sh / room)
                positive = sh > 0
                if not np.all(positive):
                    need = np.where(take(positive), need, 1.0) if np.ndim(positive) else np.ones(n)
                np.maximum(needed, np.where(room <= 0, np.inf, need), out=needed)
        np.maximum(needed, 1.0, out=needed)


def _infer_gpus_needed(cfg, serving, capacity, tokens, logits_fixed, kvh, heads, layers, tp_now, pp_now, infer):
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
    work = pick(np.broadcast_to(serving["workspace"], (cfg.size,))) * tok
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
