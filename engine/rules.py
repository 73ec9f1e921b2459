"""The one place where a request becomes a scenario: every default that depends on other
columns, decided once.

`engine.scenarios.normalize_columns` (and so every `estimate` call: the library, the CLI's
estimate and sweep, the dashboard, the planner, the evidence) applies `apply()` after each
column has been typed and checked on its own, and before the combinations are checked. Nothing
downstream re-decides any of these; the result frame holds the decided values, and `notes()`
says in words what changed from a request (the CLI prints it, the dashboard shows it).

The rules (README "How a request becomes a scenario" lists the same, from `RULES`):
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.constants as C
import engine.categories as categories
from engine.frames import column_array, column_index, frame_memo
from engine.constants import FP16_ACTIVATION_WEIGHTS, GALORE_OPTIMIZERS, GALORE_RANK, GALORE_RANK_BY_RECIPE, LORA_MODULES
from engine.params import model_types, parse_lora_targets
from engine.stacks import LIGER_MODEL_TYPES, LIGER_RECIPES, LIGER_UNPATCHED_FAMILIES, LOSS_FROM_LOGITS, NO_TRAINING_CACHE, RECIPES, SWITCHES, recipe_value

# 0 in these columns means "decide for me" (the column's default).
AUTO = 0
# The sequence a scenario gets when none is asked: 2,048 tokens, the context of LLaMA-1 and the
# sequence length of the source articles' tables; shorter when the model's context is shorter.
DEFAULT_SEQ = 2048

RULES: tuple[tuple[str, str], ...] = (
    ("zero", "ZeRO stage on one GPU without offload: none (stage 0). Sharding over a single rank "
             "only adds gathered-layer buffers; with CPU offload the stage is kept (DeepSpeed's "
             "ZeRO-Offload runs on one GPU). The optimizer offloaded (--offload optimizer) at stage 0, "
             "on any GPU count: stage 1, the least that offloads it (DeepSpeed's offload_optimizer is \"Valid "
             "for ZeRO stage 1, 2, 3\", runtime/zero/config.py; at stage 0 no ZeRO optimizer is built, "
             "runtime/engine.py _configure_optimizer); offload all needs stage 3 (refused otherwise). "
             "Inference: stage 0 (ZeRO shards training state)."),
    ("method", "Inference: method full (LoRA, QLoRA and freeze describe training)."),
    ("precision", "Full and freeze fine-tuning in pure bf16 or fp16 under DeepSpeed's ZeRO optimizers (stage 1 "
                  "or 2 under the hf, llama-factory, axolotl and deepspeed recipes, whose ZeRO-1/2 is DeepSpeed's; "
                  "stage 3 too under deepspeed, llama-factory and axolotl, whose exports launch DeepSpeed at every "
                  "stage): mixed_bf16 / mixed_fp16. DeepSpeed keeps an fp32 "
                  "master copy of the trained weights, and the optimizer's states on it are fp32, whatever the "
                  "model's dtype (engine/constants.py DS_FP32_MASTER_RECIPES)."),
    ("seq", f"Sequence not given (or 0): {DEFAULT_SEQ:,} tokens, or the model's context if shorter."),
    ("seq beyond context", "A sequence longer than the model's context is refused unless long "
                           "context is allowed explicitly (--allow-long-context, the sidebar's "
                           "checkbox); tables over many models show such rows as '✗ context' "
                           "without figures (the sweep leaves them out and names them), never "
                           "cut to a shorter sequence."),
    ("tp, pp", "Tensor and pipeline parallel not given (or 0): training 1 and 1 (data parallel "
               "over the GPUs); inference splits the model over its GPUs: tensor parallel over "
               "the largest count that divides both the GPUs (per pipeline stage) and the "
               "attention heads, pipeline stages for the rest; when the stages would outnumber "
               "the layers, every GPU holds a whole copy (tp 1, pp 1)."),
    ("lora_targets", "LoRA targets: written once each, in the model's order (q, k, v, o, gate, "
                     "up, down); every module is 'all'."),
    ("kv_precision", "KV cache 'auto' (inference): the activations' type, as the stack keeps it: fp32 for "
                     "fp32 weights; fp16 for fp16 weights, for int8 / int4 / nf4 (bitsandbytes loads them "
                     "in fp16, GPTQ and AWQ kernels run in fp16) and for GGUF files (llama.cpp's cache is "
                     "f16); bf16 otherwise (bf16, fp8, mxfp4, nvfp4 checkpoints). The same bytes either "
                     "way; fp16 runs on a T4 or V100 where bf16 does not."),
    ("kv_policy", "KV policy 'auto': what the stack running the row keeps. An estimate's inference "
                  "row is a transformers prefill, which holds every layer's keys and values at full "
                  "length (its sliding-window cache keeps a view of the whole prefill's K/V): full; an MLA "
                  "model's latent, which transformers 5 caches and expands per layer: latent (the 4.x "
                  "releases cached the per-head K/V: --kv-policy full). A GGUF precision runs on llama.cpp, whose SWA cache keeps "
                  "the window plus a micro-batch, padded to 256 cells (a model whose every layer slides "
                  "keeps all): windowed. serve uses each engine's own (vLLM, SGLang: latent; "
                  "llama.cpp, Ollama: windowed; transformers: full). --kv-policy windowed, full "
                  "or latent asks one explicitly."),
    ("ep", "Expert parallel (--ep) applies to mixture-of-experts models: a dense model's ep is 1. "
           "ep 1 splits the experts like every other weight (by tensor parallel); ep > 1 (a multiple "
           "of tp dividing gpus / pp) places whole experts on ep GPUs of each pipeline stage, and "
           "the GPUs needed are at least ep x pp and a count that takes the ep: for training a whole "
           "number of pp x lcm(tp x cp, ep), for serving a split whose tensor parallel is the ep."),
    ("galore_rank", f"GaLore rank not given (or 0): the recipe's, {GALORE_RANK} (transformers' Trainer: "
                    f"optim_args rank) or, under llama-factory, {GALORE_RANK_BY_RECIPE['llama-factory']} (LLaMA-Factory's "
                    "galore_rank). Only GaLore optimizers read it."),
    ("lora_dropout", "LoRA dropout (--lora-dropout, default 0 as peft's LoraConfig) applies to lora and qlora "
                     "rows only. Under the unsloth recipe a dropout above 0 turns its fast LoRA kernels off (unsloth "
                     "2026.8.19 models/llama.py patch_peft_model patches them in only `if lora_dropout == 0 and bias "
                     "== \"none\"`; get_peft_model warns \"Unsloth will patch all other layers, except LoRA "
                     "matrices\"): peft's own LoRA forward runs on unsloth's fp32 adapters, so adapter_dtype 'auto' "
                     "is fp32 there, not bf16."),
    ("stack", "Recipe (--recipe, default hf) and its switches (engine/stacks.py): every switch left at "
              "'auto' takes the recipe's value (hf: fp32 adapters, the unfused loss, SDPA, checkpointing as "
              "--grad-checkpointing asks; torchtune: bf16 adapters, its chunked loss, checkpointing, the "
              "optimizer step in backward for full fine-tuning; unsloth: fused loss, checkpoints offloaded to "
              "host RAM; ...); a switch given explicitly wins. grad_checkpointing is then true exactly when "
              "the checkpointing decided is not 'none'. Loop (--loop) 'auto': trainer under every recipe (the "
              "step keeps only the loss) but litgpt (its fit() keeps the logits: manual); --use-cache 'auto': "
              "off under the recipe's trainer, on for --loop manual (the model config's default) except under "
              "litgpt, whose model builds no training cache; the cache is never built under checkpointing. "
              "--liger on: a loss left 'auto' is Liger's fused linear cross-entropy (fused), which its patched "
              "forward runs when the model is called with labels; on an architecture Liger-Kernel 0.6.2 does not "
              "patch (DeepSeek-V3, gpt-oss, Mistral Small 3.x, or a model file's model_type it does not list), or "
              "under a recipe that builds its own modules (torchtune, unsloth, torchtitan, litgpt), liger is off and "
              "the loss the recipe's."),
)


def _codes(column) -> tuple[np.ndarray, list]:
    values = column.array if isinstance(column, pd.Series) else column
    return np.asarray(values.codes), list(values.categories)


def _category_mask(column, *values) -> np.ndarray:
    codes, cats = _codes(column)
    hits = [c in values for c in cats]
    if not any(hits):  # no category is one of them (nor is a missing code): no row, one pass fewer
        return np.zeros(len(codes), dtype=bool)
    return np.array(hits + [False])[codes]


def _every_row(column, *values) -> bool:
    """Every row of the (categorical) column is one of `values`, as its categories alone show
    (each category one of them and no missing code; False where that does not decide it)."""
    codes, cats = _codes(column)
    return bool(cats) and all(c in values for c in cats) and (not len(codes) or codes.min() >= 0)


def _with_values(column, mapping: dict) -> pd.Categorical:
    """A categorical column with some categories renamed (several may merge into one)."""
    codes, cats = _codes(column)
    new = [mapping.get(c, c) for c in cats]
    uniq = list(dict.fromkeys(new))
    where = {v: i for i, v in enumerate(uniq)}
    table = np.array([where[v] for v in new] + [-1], dtype=np.int32)
    return categories.from_codes(table[codes], uniq)


def _set_rows(column, rows: np.ndarray, value: str) -> pd.Categorical:
    """A categorical column with `value` in the flagged rows."""
    codes, cats = _codes(column)
    if value not in cats:
        cats = cats + [value]
    codes = codes.astype(np.int32, copy=True)
    codes[rows] = cats.index(value)
    return categories.from_codes(codes, cats)


def liger_unpatched(families) -> np.ndarray:
    """Per model family: Liger-Kernel patches nothing of it (engine/stacks.py LIGER_MODEL_TYPES, read by a
    model's own model_type where it came from a file or the Hub, LIGER_UNPATCHED_FAMILIES for the catalog's)."""
    fam = [v if isinstance(v, str) else "" for v in families]
    custom = np.array([f.startswith(C.CUSTOM_FAMILY_PREFIX) for f in fam], dtype=bool)
    return np.where(custom, ~np.isin(model_types(fam), LIGER_MODEL_TYPES), np.isin(fam, LIGER_UNPATCHED_FAMILIES))


def canonical_targets(text: str) -> str:
    """'v_proj,q_proj,q_proj' -> 'q_proj,v_proj'; every module -> 'all'."""
    chosen = set(parse_lora_targets(text))
    ordered = [m for m in LORA_MODULES if m in chosen]
    return "all" if len(ordered) == len(LORA_MODULES) else ",".join(ordered)


def deepspeed_precision(out: dict, train=None) -> None:
    """The precision rule, in place on `out` (column -> typed column): full and freeze rows in pure bf16 /
    fp16 whose ZeRO stage is DeepSpeed's (1 or 2 under DS_FP32_MASTER_RECIPES, 3 under DS_ZERO3_RECIPES)
    run as mixed_bf16 / mixed_fp16, DeepSpeed's fp32 master copy and fp32 states
    (engine/constants.py DS_FP32_MASTER_RECIPES). train: the training rows (None: every row). Also
    applied by engine/estimate.py to a one-GPU row's probe at the ZeRO stage it asked."""
    if "recipe" not in out:
        return
    r_codes, r_cats = _codes(out["recipe"])
    zero12 = np.array([c in C.DS_FP32_MASTER_RECIPES for c in r_cats] + [False])  # per recipe code (last: missing)
    zero3 = np.array([c in C.DS_ZERO3_RECIPES for c in r_cats] + [False])
    if not (zero12.any() or zero3.any()):
        return
    # the candidate rows first, from the categories (pure 16-bit, full or freeze, training), then the ZeRO stage and
    # the recipe on those rows only: a sweep's 1M rows cost one pass where four row-wide compares cost ~9 ms
    candidates = _category_mask(out["precision"], "bf16", "fp16")
    if not candidates.any():
        return
    candidates &= _category_mask(out["method"], "full", "freeze")
    if train is not None:
        candidates &= train
    rows = np.flatnonzero(candidates)
    if not len(rows):
        return
    zero, recipe = np.asarray(out["zero"])[rows], r_codes[rows]
    rows = rows[(zero12[recipe] & ((zero == 1) | (zero == 2))) | (zero3[recipe] & (zero == 3))]
    if not len(rows):
        return
    p_codes, p_cats = _codes(out["precision"])
    for pure in ("bf16", "fp16"):
        if pure not in p_cats:
            continue
        hit = rows[p_codes[rows] == p_cats.index(pure)]
        if len(hit):
            mask = np.zeros(len(p_codes), dtype=bool)
            mask[hit] = True
            out["precision"] = _set_rows(out["precision"], mask, f"mixed_{pure}")
            p_codes, p_cats = _codes(out["precision"])


def apply(out: dict, models: pd.DataFrame, ranges: dict, columns=None, filled=frozenset()) -> None:
    """Decide every rule in place on `out` (column -> typed column, as normalize_columns builds
    it) and keep `ranges` ({column: (min, max)} of the integer columns) up to date. columns: an
    engine.buffers.Columns for the new integer columns (None: plain arrays); filled: the columns
    normalize_columns filled with their default (arrays of its own, which may be written).

    Vectorized: per row only integer arithmetic; text columns change through their categories."""
    model_codes, model_cats = _codes(out["model"])
    n = len(model_codes)
    if n == 0:
        return
    at = column_index(models, "id").get_indexer(pd.Index(model_cats, dtype=object))
    at = np.append(np.maximum(at, 0), 0)

    def per_row(field, rows=None):  # a model figure for every row (or `rows`), through the model's code
        codes = model_codes if rows is None else model_codes[rows]
        return column_array(models, field)[at][codes].astype(np.int64)

    infer = _category_mask(out["task"], "infer")
    any_infer = bool(infer.any())

    # method: inference rows are "full"
    if any_infer:
        wrong = infer & ~_category_mask(out["method"], "full")
        if wrong.any():
            out["method"] = _set_rows(out["method"], wrong, "full")

    # zero: stage 0 on one GPU without offload, and for inference
    zero_range = ranges.get("zero")
    if zero_range is None or zero_range[1] > 0:
        zero = np.asarray(out["zero"])
        drop = np.asarray(out["gpus"]) == 1  # (single, then drop, in place: the same flags, fewer passes)
        if not _every_row(out["offload"], "none"):
            drop &= _category_mask(out["offload"], "none")
        if any_infer:
            drop |= infer
        drop &= zero > 0
        if drop.any():
            # the stage asked still decides how many GPUs a training row needs (estimate.py)
            asked = np.flatnonzero(drop & ~infer if any_infer else drop)
            if len(asked):
                ranges["_zero_dropped_rows"], ranges["_zero_asked"] = asked, zero[asked].astype(np.int64)
            decided = columns.empty(np.int64) if columns is not None else np.empty(n, dtype=np.int64)
            np.multiply(zero, ~drop, out=decided)  # as np.where(drop, 0, zero).astype(np.int64): whole numbers
            out["zero"] = decided
            # (the least is 0: some row was dropped, and every stage is 0 to 3, checked before)
            ranges["zero"] = (0, int(decided.max()))
    # zero: an optimizer offloaded at stage 0 runs at stage 1 (RULES "zero"). DeepSpeed's offload is its ZeRO
    # optimizer's (runtime/zero/config.py @1b88ac3 DeepSpeedZeroConfig.offload_optimizer: "Valid for ZeRO stage
    # 1, 2, 3"); at stage 0 (config.py zero_enabled = stage > 0) engine.py _do_optimizer_sanity_check picks no
    # ZERO_OPTIMIZATION wrapper, so _configure_optimizer never reaches the offload config (DeepSpeed @edaa722)
    # and the states stay on the GPU, where a row planned at stage 0 would not count them
    zero_range = ranges.get("zero")
    if (zero_range is None or zero_range[0] == 0) and not _every_row(out["offload"], "none"):
        zero = np.asarray(out["zero"])
        lift = _category_mask(out["offload"], "optimizer") & (zero == 0)
        if any_infer:
            lift &= ~infer  # (inference refuses an offload: check_combinations)
        if lift.any():
            out["zero"] = np.where(lift, 1, zero).astype(np.int64)
            ranges["zero"] = (int(out["zero"].min()), int(out["zero"].max()))

    # seq: 0 = the default, cut to the model's context
    seq_range = ranges.get("seq")
    if seq_range is None or seq_range[0] == AUTO:
        seq = np.asarray(out["seq"])
        auto = seq == AUTO
        if auto.any():
            out["seq"] = np.where(auto, np.minimum(DEFAULT_SEQ, per_row("max_context")), seq).astype(np.int64)
            ranges["seq"] = (int(out["seq"].min()), int(out["seq"].max()))

    # precision: DeepSpeed's ZeRO optimizers keep an fp32 master copy and fp32 states (pure 16-bit -> mixed_*)
    deepspeed_precision(out, ~infer if any_infer else None)

    # galore_rank: 0 = the recipe's (transformers' 128; LLaMA-Factory's 16), read by the GaLore optimizers only
    rank_range = ranges.get("galore_rank")
    if "galore_rank" in out and (rank_range is None or rank_range[0] == AUTO):
        r_codes, r_cats = _codes(out["recipe"])
        by_recipe = np.array([GALORE_RANK_BY_RECIPE.get(str(r), GALORE_RANK) for r in r_cats] + [GALORE_RANK],
                             dtype=np.int64)
        one = set(by_recipe.tolist())
        if rank_range == (AUTO, AUTO) and "galore_rank" in filled and len(one) == 1:
            # the default filled in for every row, one rank for every recipe present: written in place
            out["galore_rank"].fill(by_recipe[0])
            ranges["galore_rank"] = (int(by_recipe[0]), int(by_recipe[0]))
        else:
            rank = np.asarray(out["galore_rank"])
            auto = rank == AUTO
            if auto.any():
                out["galore_rank"] = np.where(auto, by_recipe[r_codes], rank).astype(np.int64)
                ranges["galore_rank"] = (int(out["galore_rank"].min()), int(out["galore_rank"].max()))

    # tp, pp: 0 = decided from the task, the GPU count and the model's heads and layers
    tp_range, pp_range = ranges.get("tp"), ranges.get("pp")
    if tp_range == (AUTO, AUTO) and pp_range == (AUTO, AUTO) and not any_infer:
        # the usual training sweep: both left out, data parallel (no per-row arithmetic)
        for col in ("tp", "pp"):
            if col in filled and isinstance(out[col], np.ndarray) and out[col].dtype == np.int64:
                out[col].fill(1)  # (the default's own array: written in place, no new one)
            else:
                out[col] = np.ones(n, dtype=np.int64)
        ranges["tp"] = ranges["pp"] = (1, 1)
    elif tp_range is None or pp_range is None or tp_range[0] == AUTO or pp_range[0] == AUTO:
        tp = np.array(out["tp"], dtype=np.int64)  # copies: the caller's columns stay as they were
        pp = np.array(out["pp"], dtype=np.int64)
        tp_auto, pp_auto = tp == AUTO, pp == AUTO
        rows = np.flatnonzero(infer & (tp_auto | pp_auto)) if any_infer else np.zeros(0, dtype=np.intp)
        if len(rows):  # inference splits the model over its GPUs (only these rows are computed)
            gpus = np.asarray(out["gpus"])[rows].astype(np.int64)
            heads, layers = per_row("num_heads", rows), per_row("num_layers", rows)
            t_auto, p_auto = tp_auto[rows], pp_auto[rows]
            t, p = tp[rows], pp[rows]
            # neither given: tp over gcd(gpus, heads), stages for the rest; a whole copy per GPU
            # when the stages would outnumber the layers
            both = t_auto & p_auto
            auto_tp = np.gcd(gpus, heads)
            auto_pp = gpus // auto_tp
            too_deep = auto_pp > layers
            t = np.where(both, np.where(too_deep, 1, auto_tp), t)
            p = np.where(both, np.where(too_deep, 1, auto_pp), p)
            # pp given: tp over what each stage holds
            only_tp = t_auto & ~p_auto
            if only_tp.any():
                stages = np.maximum(p, 1)
                per_stage = np.where(gpus % stages == 0, gpus // stages, 1)
                t = np.where(only_tp, np.gcd(per_stage, heads), t)
            tp[rows], pp[rows] = t, p
        # everything else left open: 1 (training is data parallel; inference with tp given keeps
        # the other GPUs as replicas)
        tp[tp == AUTO] = 1
        pp[pp == AUTO] = 1
        out["tp"], out["pp"] = tp, pp
        ranges["tp"] = (int(tp.min()), int(tp.max()))
        ranges["pp"] = (int(pp.min()), int(pp.max()))

    # lora_targets: one canonical spelling (a query string full of duplicates is one scenario)
    _, target_cats = _codes(out["lora_targets"])
    mapping = {c: canonical_targets(c) for c in target_cats}
    if any(k != v for k, v in mapping.items()):
        out["lora_targets"] = _with_values(out["lora_targets"], mapping)

    # kv_precision: "auto" for inference is the activations' type
    if any_infer:
        auto_kv = infer & _category_mask(out["kv_precision"], "auto")
        if auto_kv.any():
            kv = out["kv_precision"]
            for precisions, kv_type in ((("fp32",), "fp32"), (("fp16",) + FP16_ACTIVATION_WEIGHTS, "fp16")):
                rows = auto_kv & _category_mask(out["precision"], *precisions)
                if rows.any():
                    kv = _set_rows(kv, rows, kv_type)
            rows = auto_kv & ~_category_mask(out["precision"], "fp32", "fp16", *FP16_ACTIVATION_WEIGHTS)
            if rows.any():
                kv = _set_rows(kv, rows, "bf16")
            out["kv_precision"] = kv

    # ep: 1 for a dense model (RULES)
    if "ep" in out and ranges.get("ep", (1, 1))[1] > 1:
        experts = column_array(models, "num_experts", 0)[at][model_codes] if "num_experts" in models else np.zeros(n)
        ep = np.asarray(out["ep"], dtype=np.int64)
        if ((ep > 1) & (experts == 0)).any():
            out["ep"] = np.where(experts == 0, 1, ep).astype(np.int64)
            ranges["ep"] = (int(out["ep"].min()), int(out["ep"].max()))

    # the software stack: every 'auto' switch as the recipe sets it (RULES "stack")
    if "recipe" in out:
        # unsloth's bf16 adapter path is its fast LoRA kernels, which it patches in only for
        # lora_dropout 0 (RULES "lora_dropout"): the rows that ask for dropout, read before 'auto' resolves
        unsloth_drop = None
        if "lora_dropout" in out and "lora_dropout" not in filled and "adapter_dtype" in out:
            unsloth_drop = (np.asarray(out["lora_dropout"]) > 0) & _category_mask(out["recipe"], "unsloth")
            unsloth_drop &= _category_mask(out["adapter_dtype"], "auto")
        # Liger's fused linear cross-entropy (engine/stacks.py liger): a loss left 'auto' on a row that asks Liger
        # is `fused` (its lce_forward skips the logits where the model is called with labels in training),
        # read before 'auto' resolves
        # An architecture Liger does not patch runs transformers' modules, and a recipe that builds its own never meets
        # the patches: those rows' Liger is off (stacks.py LIGER_MODEL_TYPES, LIGER_RECIPES), asked or a recipe's
        # default, and their loss stays the recipe's
        liger_loss, no_liger = None, None  # no_liger: per row, Liger's patches never reach it (None: no such row)
        if "liger" in out and not _every_row(out["liger"], "off"):
            per_model = frame_memo(models, "liger_unpatched", lambda: liger_unpatched(
                models["family"] if "family" in models else [""] * len(models)))
            if per_model.any():
                no_liger = per_model[at][model_codes]  # (at: per model code, the last a missing code)
            if not _every_row(out["recipe"], *LIGER_RECIPES):  # a recipe whose own modules Liger never reaches
                own_modules = ~_category_mask(out["recipe"], *LIGER_RECIPES)
                no_liger = own_modules if no_liger is None else no_liger | own_modules
        if "liger" in out and "loss" in out and not _every_row(out["liger"], "auto", "off"):
            liger_loss = _category_mask(out["liger"], "on") & _category_mask(out["loss"], "auto")
            if "recipe" in out:  # (a loop that computes the loss from the logits itself keeps its recipe's loss)
                liger_loss &= ~_category_mask(out["recipe"], *LOSS_FROM_LOGITS)
            if no_liger is not None:
                liger_loss &= ~no_liger
        _resolve_stack(out, n)
        if liger_loss is not None and liger_loss.any():
            out["loss"] = _set_rows(out["loss"], liger_loss, "fused")
        if no_liger is not None and not _every_row(out["liger"], "off"):
            off = _category_mask(out["liger"], "on") & no_liger
            if off.any():
                out["liger"] = _set_rows(out["liger"], off, "off")
        if unsloth_drop is not None and unsloth_drop.any():
            out["adapter_dtype"] = _set_rows(out["adapter_dtype"], unsloth_drop, "fp32")

    # kv_policy "auto" (RULES, issue 28): what the stack that runs the row keeps. An estimate's
    # inference row is a transformers prefill (generate()), whose DynamicCache keeps the whole prefill's
    # K/V of sliding-window layers (cache_utils.py DynamicSlidingWindowLayer.update slices the full
    # torch.cat output: its storage stays whole): 'full'. MLA models keep their latent there: transformers
    # 5 caches the compressed kv_nope and k_rot and expands them per layer after the cache
    # (models/deepseek_v3/modeling_deepseek_v3.py in 5.24: "Cache read / write is performed while latent
    # KV is still compressed", then expand_kv; the 4.x releases cached the expanded per-head K/V, which
    # --kv-policy full asks): 'latent', measured by the loops harness's DeepSeek-V3 prefill
    # (tests/data/measured_loops.csv). A GGUF precision runs on llama.cpp, whose SWA cache keeps the
    # window: 'windowed'. (serve passes each engine's own.)
    if "kv_policy" in out:
        auto_policy = _category_mask(out["kv_policy"], "auto")
        if auto_policy.any():
            gguf = _category_mask(out["precision"], *C.GGUF_BITS) if "precision" in out else np.zeros(n, bool)
            mla = (column_array(models, "kv_lora_rank", 0)[at][model_codes] > 0) if "kv_lora_rank" in models \
                else np.zeros(n, bool)
            policy = out["kv_policy"]
            if (auto_policy & gguf).any():
                policy = _set_rows(policy, auto_policy & gguf, "windowed")
            if (auto_policy & ~gguf & ~mla).any():
                policy = _set_rows(policy, auto_policy & ~gguf & ~mla, "full")
            if (auto_policy & ~gguf & mla).any():
                policy = _set_rows(policy, auto_policy & ~gguf & mla, "latent")
            out["kv_policy"] = policy


def _resolve_stack(out: dict, n: int) -> None:
    """Each switch's 'auto' rows take the value of their recipe (for their method and checkpointing
    flag), through the categories: per row only a table look-up where the value differs by row."""
    r_codes, r_cats = _codes(out["recipe"])
    m_codes, m_cats = _codes(out["method"])
    gc = np.asarray(out["grad_checkpointing"], dtype=bool)
    flags = (False, True) if gc.any() and not gc.all() else (bool(gc[0]),)  # the flags present
    # use_cache 'auto' (issue 28): the recipe's framework decides (every recipe: off), but a loop
    # written by hand keeps the model config's default (on): read before the switches resolve
    cache_auto = _category_mask(out["use_cache"], "auto") if "use_cache" in out else None
    key = None
    for switch in SWITCHES:
        if switch not in out:
            continue
        codes, cats = _codes(out[switch])
        if "auto" not in cats:
            continue
        distinct = list(dict.fromkeys(recipe_value(r, switch, m, g) for r in r_cats for m in m_cats for g in flags))
        if len(distinct) == 1:  # one value for every auto row: rename the category
            mapping = {"auto": distinct[0]}
            renamed = [mapping.get(c, c) for c in cats]
            if len(set(renamed)) == len(renamed):
                out[switch] = categories.from_codes(codes, renamed, validate=False)
            else:
                out[switch] = _with_values(out[switch], mapping)
            continue
        table = np.array([[[recipe_value(r, switch, m, g) for g in (False, True)] for m in m_cats] for r in r_cats],
                         dtype=object).reshape(-1)
        if key is None:
            # (recipe, method, checkpointing) of each row: normalized columns hold no missing
            # code, so the key is in [0, len(table)) and fits a narrow integer, built in place
            exact = r_codes.min() >= 0 and m_codes.min() >= 0
            if exact:
                key = r_codes.astype(np.int16 if len(table) < 1 << 15 else np.int64)
                key *= len(m_cats)
                key += m_codes
                key *= 2
                key += gc
            else:
                key = (r_codes.astype(np.int64) * len(m_cats) + m_codes) * 2 + gc
        new_cats = list(dict.fromkeys([c for c in cats if c != "auto"] + list(dict.fromkeys(table))))
        where = {v: i for i, v in enumerate(new_cats)}
        # codes as narrow as pandas keeps them (from_codes would otherwise copy them to that width)
        width_type = np.int8 if len(new_cats) < 127 else np.int32
        keep = np.array([where.get(c, -1) for c in cats] + [-1], dtype=width_type)
        by_key = np.array([where[v] for v in table], dtype=width_type)
        if exact and cats == ["auto"]:  # every row 'auto' (the switch left out): by_key[key], as below
            new_codes = np.take(by_key, key, mode="clip")
        elif exact:
            # each row's new code (by_key[key] on an 'auto' row, else keep[code]) read once from
            # a table of every (key, code + 1) pair; column 0 is a missing code (-1 stays -1)
            width = len(cats) + 1
            pairs = np.empty((len(by_key), width), dtype=width_type)
            pairs[:, 0] = -1
            pairs[:, 1:] = keep[None, :-1]
            pairs[:, 1 + cats.index("auto")] = by_key
            at = np.multiply(key, width, dtype=np.intp)
            at += codes
            at += 1
            new_codes = np.take(pairs.ravel(), at, mode="clip")  # (every position is in the table)
        else:
            new_codes = np.where(codes == cats.index("auto"), by_key[key], keep[codes]).astype(np.int32)
        out[switch] = categories.from_codes(new_codes, new_cats, validate=False)
    if "checkpointing" in out:  # grad_checkpointing: true exactly when some checkpointing is decided
        codes, cats = _codes(out["checkpointing"])
        on = np.array([c != "none" for c in cats] + [False])
        if on[:-1].all() or not on[:-1].any():  # one answer for every row
            if bool(on[0]) != (flags == (True,)) or len(flags) > 1:
                out["grad_checkpointing"] = np.full(n, bool(on[0]))
        else:
            decided = on[codes]
            if not np.array_equal(decided, gc):
                out["grad_checkpointing"] = decided
    if cache_auto is not None and cache_auto.any() and "loop" in out:
        # (a recipe whose model builds no training cache keeps its own 'off': LitGPT, engine/stacks.py)
        # and transformers' own gradient checkpointing (the flag as decided above) turns it off (engine/stacks.py use_cache)
        manual = cache_auto & _category_mask(out["loop"], "manual") & ~_category_mask(out["recipe"], *NO_TRAINING_CACHE)
        manual &= ~np.asarray(out["grad_checkpointing"], dtype=bool)
        if manual.any():
            out["use_cache"] = _set_rows(out["use_cache"], manual, "on")


_NAMES = {"zero": "ZeRO stage", "method": "method", "precision": "precision", "seq": "sequence", "tp": "tensor parallel",
          "pp": "pipeline parallel", "ep": "expert parallel", "lora_targets": "LoRA targets", "kv_precision": "KV cache",
          "kv_policy": "KV policy", "galore_rank": "GaLore rank", "liger": "Liger kernels"}
_WHY = {
    "zero": lambda r: ("DeepSpeed offloads the optimizer from ZeRO stage 1 on" if int(r["zero"]) > 0
                       else "inference" if r["task"] == "infer" else "one GPU without offload"),
    "method": lambda r: "inference",
    "precision": lambda r: "DeepSpeed's ZeRO optimizer keeps an fp32 master copy of the weights and fp32 states",
    "seq": lambda r: f"default {DEFAULT_SEQ:,}, or the model's context if shorter",
    "tp": lambda r: "inference splits the model over its GPUs" if r["task"] == "infer" else "data parallel",
    "pp": lambda r: "inference splits the model over its GPUs" if r["task"] == "infer" else "data parallel",
    "ep": lambda r: f"{r['model']} is a dense model: no experts to place",
    "lora_targets": lambda r: "each module once, in the model's order",
    "kv_precision": lambda r: "as the activations",
    "kv_policy": lambda r: "the smallest cache engines keep",
    "galore_rank": lambda r: f"the {r.get('recipe', 'hf')} recipe's",
    "liger": lambda r: (f"the {r.get('recipe')} recipe runs its own modules, which Liger's patches do not reach"
                        if r.get("recipe") not in LIGER_RECIPES
                        else "Liger-Kernel has no kernels for this architecture: transformers' own modules run"),
}


def notes(request: dict, row) -> list[str]:
    """What the rules changed, in words: one line per column whose decided value differs from
    the request ("ZeRO stage 3 → 0 (one GPU without offload)"). `row`: the normalized row
    (a mapping with the same columns)."""
    lines = []
    for column, name in _NAMES.items():
        if column not in row:
            continue
        asked = request.get(column)
        decided = row[column]
        if column == "lora_targets" and (str(row.get("method", "")) not in ("lora", "qlora")
                                         or row.get("task") != "train"):
            continue
        if column in ("kv_precision", "kv_policy") and row.get("task") != "infer":
            continue
        if column == "galore_rank" and (row.get("task") != "train" or str(row.get("optimizer", "")) not in GALORE_OPTIMIZERS):
            continue
        if column == "liger" and (asked is None or asked == "auto") and str(row.get("recipe", "hf")) in RECIPES \
                and str(decided) == recipe_value(str(row.get("recipe", "hf")), "liger", str(row.get("method", "")),
                                                 bool(row.get("grad_checkpointing", False))):
            continue  # 'auto' took the recipe's own value, as every other stack switch does silently: no decision to
            # explain (_WHY's reasons are why Liger was turned off against the recipe or the request)
        if column in ("tp", "pp") and int(row.get("gpus", 1)) == 1:
            continue  # one GPU: nothing to split
        if column in ("seq", "tp", "pp", "galore_rank"):
            shown_asked = "auto" if asked is None or (not isinstance(asked, str) and asked == AUTO) else asked
        elif asked is None and column == "zero":
            shown_asked = 0  # not asked: stage 0, the default, which the optimizer offloaded still raises
        elif asked is None:
            continue  # not asked: its default is no decision to report
        else:
            shown_asked = asked
        if isinstance(decided, (np.integer, int)) and not isinstance(decided, bool):
            decided = f"{int(decided):,}"
            if isinstance(shown_asked, (int, np.integer)):
                shown_asked = f"{int(shown_asked):,}"
        if str(shown_asked) == str(decided):
            continue
        lines.append(f"{name} {shown_asked} → {decided} ({_WHY[column](row)})")
    return lines


__all__ = ["AUTO", "DEFAULT_SEQ", "RULES", "apply", "canonical_targets", "deepspeed_precision", "notes"]
