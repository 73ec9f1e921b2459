"""`estimate ... --export TARGET` and `serve ... --export TARGET` (issue 26 item 3): the plan as
the configuration file or command line that launches it, in the target's own keys.

Each export carries the scenario as estimated (the decided row: ZeRO stage and offload,
micro-batch, sequence length, precision, checkpointing, LoRA rank and targets, optimizer,
packing, attention, ...), says in which version of the target its keys were read (SOURCES),
and lists what the target cannot express (`not_expressed`): as `#` comment lines where the
format has comments, and on stderr for JSON (planner/cli.py), so that the file itself loads.

Values the plan does not decide (learning rate, dataset, epochs, LoRA alpha) are left to the
target's defaults, or set to the one value the memory does not depend on (LoRA alpha = 2 x rank,
gradient accumulation 1), and said so. LoRA dropout is the plan's (its masks and copies are
memory: engine/memory.py layer_activation_bytes), written in each target's own key even at 0,
since TRL's default is 0.05 (trl/trainer/model_config.py ModelConfig.lora_dropout).

tests/test_exports.py checks every emitted key against the keys of the cited version.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engine.constants import (GALORE_8BIT, GALORE_LAYERWISE, GALORE_OPTIMIZERS, GALORE_RANK, GGUF_BITS,
                              PEFT_ALL_LINEAR_FAILS, REMOTE_CODE_MODEL_TYPES, TRAIN_PRECISIONS)
from engine.params import model_types
from engine.serving import (LLAMA_KV_TYPES, OLLAMA_CREATED_SUFFIX, OLLAMA_KV_TYPES, SGLANG_FP8_E4M3_FROM, SGLANG_KV_DTYPE, SPEC_TOKENS, TORCH_DTYPE,
                            VLLM_BNB_LOAD_FORMAT, VLLM_BNB_WEIGHTS, sglang_before,
                            VLLM_KV_DTYPE, long_context_env, vllm_has_bitsandbytes)

# Where each target's keys were read (file @ commit or version of the stored snapshot).
SOURCES = {
    "deepspeed": "DeepSpeed deepspeed/runtime/constants.py @088be89, runtime/zero/config.py @1b88ac3, "
                 "runtime/zero/offload_config.py @1978617 (docs: deepspeed.ai/docs/config-json)",
    "trl": "TRL 1.10.0.dev0 @f2cd577: trl/trainer/sft_config.py (SFTConfig), trl/trainer/model_config.py "
           "(ModelConfig), transformers TrainingArguments (OptimizerNames); `trl sft --config FILE`",
    "accelerate-fsdp": "Accelerate 1.15.0.dev0 @16cb6eb: src/accelerate/commands/config/cluster.py and "
                       "config_args.py (fsdp_config, FSDP2), utils/constants.py, examples/config_yaml_templates/fsdp.yaml",
    "llama-factory": "LLaMA-Factory 0.9.6.dev0 @ff6d4d1: src/llamafactory/hparams/{model,data,finetuning}_args.py, "
                     "extras/constants.py (AttentionFunction), examples/train_qlora/qwen3_lora_sft_otfq.yaml",
    "axolotl": "axolotl 0.18.0 @067b021: src/axolotl/utils/schemas/{config,model,training,peft}.py, "
               "integrations/liger/args.py, examples/llama-3/qlora.yml",
    "torchtune": "torchtune 0.7.0 @bd2a0fc: recipes/configs/llama3_1/8B_{lora,qlora}_single_device.yaml, "
                 "8B_full*.yaml, 8B_lora.yaml (the keys the recipes read)",
    "litgpt": "LitGPT 0.5.13 @2685705: config_hub/finetune/llama-3.2-1B/{lora,qlora,full}.yaml, litgpt/finetune/"
              "{lora,full}.py setup() arguments, litgpt/args.py TrainArgs",
    "vllm": "vLLM vllm/config/cache.py @002f10e (gpu_memory_utilization, cache_dtype -> --kv-cache-dtype; "
            "kv_cache_memory_bytes -> --kv-cache-memory-bytes in later releases' CacheConfig), "
            "engine args (docs.vllm.ai serving/engine_args: --max-model-len, --max-num-seqs, --tensor-parallel-size, "
            "--dtype, --quantization)",
    "sglang": "SGLang python/sglang/srt/server_args.py @001067f (ServerArgs fields -> flags): --model-path, --context-length, --mem-fraction-static, "
              "--max-running-requests, --tp-size, --kv-cache-dtype, --dtype",
    "llama-server": "llama.cpp common/arg.cpp @145b628 (tools/server/README.md): -m, -ngl, -c, -np, -ctk/-ctv, "
                    "-fa on|off|auto, --n-cpu-moe/--cpu-moe, -sm",
    "ollama": "Ollama docs/modelfile.md (FROM, PARAMETER num_ctx), api/types.go Runner options (num_gpu), "
              "envconfig/config.go (OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE)",
}
TRAIN_TARGETS = ("deepspeed", "accelerate-fsdp", "torchtune", "llama-factory", "axolotl", "trl", "litgpt")
SERVE_TARGETS = {"vllm": "vllm", "sglang": "sglang", "llama-server": "llama.cpp", "ollama": "ollama"}  # -> --engine
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Export:
    target: str
    text: str  # the file or command, as printed on stdout
    not_expressed: list[str] = field(default_factory=list)
    comments_inline: bool = True  # False (JSON): `about` and the notes go to stderr
    about: list[str] = field(default_factory=list)  # what it is, where its keys were read, how to run it


def hf_repo(source: str, model_id: str) -> tuple[str, bool]:
    """The Hugging Face repository of a catalog model (from its source URL), or its id."""
    found = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)", str(source or ""))
    return (found.group(1), True) if found else (model_id, False)


# --- training --------------------------------------------------------------------------------

def _targets(row) -> list[str]:
    text = str(row["lora_targets"])
    return list(ALL_LINEAR) if text == "all" else [t.strip() for t in text.split(",") if t.strip()]


def _peft_targets(row, model) -> list[str]:
    """The LoRA targets as peft finds them in the model's modules: the seven names, or, under multi-head latent
    attention (DeepSeek-V2/V3, Kimi K2: engine/components.py mla_lora_dims), q_a_proj and q_b_proj (q_proj where
    q_lora_rank is 0), kv_a_proj_with_mqa, kv_b_proj and o_proj for q, k, v and o: the seven names find no q, k or v
    there (peft raises "Target modules ... not found" where nothing else is named)."""
    names = _targets(row)
    if model is None or not float(pd.to_numeric(model.get("kv_lora_rank", 0), errors="coerce") or 0) > 0:
        return names
    q_lora = float(pd.to_numeric(model.get("q_lora_rank", 0), errors="coerce") or 0) > 0
    mla = {"q_proj": ["q_a_proj", "q_b_proj"] if q_lora else ["q_proj"], "k_proj": ["kv_a_proj_with_mqa"],
           "v_proj": ["kv_b_proj"]}
    return [n for t in names for n in mla.get(t, [t])]


def _model_type(model) -> str:
    """The model's transformers model_type where the engine keys a term on it (engine/params.py model_types), else ""."""
    family = "" if model is None else model.get("family", "")
    return model_types([family if isinstance(family, str) else ""])[0]


def _remote_code(model) -> bool:
    """Whether the model loads only with its checkpoint's own code (engine/constants.py REMOTE_CODE_MODEL_TYPES)."""
    return _model_type(model) in REMOTE_CODE_MODEL_TYPES


def _all_linear_fails(model) -> bool:
    """Whether peft's all-linear fails on this model (engine/constants.py PEFT_ALL_LINEAR_FAILS: Llama 4's router), so
    that a LoRA over 'all' names the seven projections instead."""
    return _model_type(model) in PEFT_ALL_LINEAR_FAILS


ALL_LINEAR_FAILS_NOTE = ("peft's all-linear shorthand (peft 0.21.2 would wrap Llama 4's router, an nn.Linear that "
                         "returns a tuple, and the first forward fails): the seven projections are named instead")


def _all_linear_shorthand(row, model, notes: list) -> bool:
    """Whether a LoRA over 'all' is written as the framework's all-linear shorthand (TRL's all-linear, axolotl's
    lora_target_linear); where peft's all-linear fails on the model (_all_linear_fails) the seven projections are
    named instead, and the notes say why."""
    if str(row["lora_targets"]) != "all":
        return False
    if _all_linear_fails(model):
        notes.append(ALL_LINEAR_FAILS_NOTE)
        return False
    return True


def _precision(row) -> dict:
    """The plan's training precision as (the load dtype, the autocast flag, whether fp32 master weights)."""
    p = str(row["precision"])
    half = "bf16" if "bf16" in p else "fp16" if "fp16" in p else None
    load = "float32" if p in ("fp32", "amp_bf16", "amp_fp16") else {"bf16": "bfloat16", "fp16": "float16"}[half]
    return {"half": half, "load": load, "master": p.startswith("mixed_"), "name": p}


# accelerate 1.15.0.dev0 (16cb6eb, 2026-07) src/accelerate/utils/fsdp_utils.py fsdp2_prepare_model, lines 803-815:
# "if accelerator.mixed_precision != 'no' ...: param.data = param.data.to(torch.float32)" for every parameter
# that requires grad ("Upcast to fp32 master weights; MixedPrecisionPolicy.param_dtype handles compute cast");
# FSDP1 the same in accelerator.py prepare_model (lines 1990-2044, "FSDP upcast of low precision parameters").
ACCELERATE_FSDP_UPCAST = "accelerate utils/fsdp_utils.py fsdp2_prepare_model: mixed_precision != 'no' upcasts them"


def _pure_trained(row, prec: dict) -> bool:
    """A plan that trains whole weights (full, freeze) in pure bf16 / fp16: no fp32 copy of them counted."""
    return prec["name"] in ("bf16", "fp16") and str(row["method"]) in ("full", "freeze")


# The recipe whose estimate is the DeepSpeed run a target launches at ZeRO-3 (engine/constants.py DS_ZERO3_RECIPES: their
# ZeRO-3 is DeepSpeed's, its fp32 master copy counted; under the hf recipe ZeRO-3 is FSDP's, and a pure 16-bit plan
# keeps no fp32 copy)
DEEPSPEED_RECIPE = {"deepspeed": "deepspeed", "llama-factory": "llama-factory", "axolotl": "axolotl"}


def _deepspeed_master_note(row, prec: dict, target: str) -> str:
    """What a pure 16-bit plan of whole weights (_pure_trained) becomes on DeepSpeed, which the target launches: its
    bf16 / fp16 mode keeps an fp32 master copy of the trained weights and fp32 optimizer states on it at every stage
    (runtime/engine.py _configure_optimizer: the ZeRO, BF16 or FP16 optimizer; ZeRO-3 clones an fp32 partition,
    stage3.py fp32_partitioned_groups_flat), the plan's mixed_bf16 / mixed_fp16, not its bf16 / fp16."""
    half, name, zero = prec["half"], prec["name"], int(row["zero"])
    plan = f"--precision mixed_{half}"
    if zero == 3 and str(row.get("recipe", "hf")) != DEEPSPEED_RECIPE[target]:
        plan = f"--recipe {DEEPSPEED_RECIPE[target]} (DeepSpeed's ZeRO-3 with its buffers), or {plan},"
    return (f"precision {name} (pure 16-bit weights) on DeepSpeed ZeRO-{zero}: DeepSpeed's {half} mode keeps an fp32 "
            f"master copy of the trained weights and fp32 optimizer states (mixed_{half}), which the plan's {name} "
            f"does not count: this run holds more than the plan; plan it with {plan} or launch the plan's pure {name} "
            "with llm-planner estimate ... --export accelerate-fsdp (mixed_precision no)")


def _quant(row) -> str | None:
    """The frozen base's quantization of lora/qlora: 'nf4', 'int8', 'int4' or None (nf4_nodq, NF4 without
    double quantization, exports as 'nf4' with double quantization off: _double_quant). Only the bases
    _check_base let through reach it: a qlora base is one of those or auto (NF4), never another one written as NF4."""
    base = str(row.get("base_precision", "auto"))
    base = "nf4" if base == "nf4_nodq" else base
    if row["method"] == "qlora" and base == "auto":
        return "nf4"
    if row["method"] in ("lora", "qlora") and base in ("int8", "int4", "nf4"):
        return base
    return None


# The quantized frozen bases (--base-precision of lora / qlora) each target loads in the bytes the plan counts:
# bitsandbytes' NF4 (nf4, nf4_nodq), its fp4 for int4 (the same 4-bit layout) and LLM.int8 (int8), as TRL's
# load_in_4bit / load_in_8bit, LLaMA-Factory's quantization_bit, axolotl's load_in_4bit / load_in_8bit, LitGPT's
# bnb.* quantize modes and, for DeepSpeed and accelerate, the training script's BitsAndBytesConfig. torchtune's only
# quantized base is torchao's NF4 (the lora_* builders' quantize_base: torchao/dtypes/nf4tensor.py to_nf4(block_size=64,
# scaler_block_size=256), its block scales quantized again: the engine's nf4, engine/stacks.py torchtune
# bnb_double_quant). No target keeps a GGUF base in its bits: transformers dequantizes a GGUF file at load
# (transformers v4.49.0 docs/source/en/gguf.md: "When loading a model, we first dequantize it to fp32"), and
# torchtune and LitGPT read none. A base outside a target's list is refused (bad input, exit 2) rather than written
# as another one, which would launch a run other than the one planned (a q8_0 base loaded as NF4 holds half its bytes).
BNB_BASES = ("nf4", "nf4_nodq", "int4", "int8")
TARGET_BASES = {**{target: BNB_BASES for target in TRAIN_TARGETS}, "torchtune": ("nf4",)}
UNQUANTIZED_BASES = ("fp32", "bf16", "fp16")


def _check_base(target: str, row) -> None:
    """ValueError (one line: the base, why, what the target accepts) where the plan's frozen base, as the engine
    counted it, is not one the target loads as planned (TARGET_BASES)."""
    if str(row["method"]) not in ("lora", "qlora"):
        return
    named, quant = str(row.get("base_precision", "auto")), _quant(row)
    accepted = TARGET_BASES[target]
    lora_16 = f", or {', '.join(UNQUANTIZED_BASES)} with --method lora" if str(row["method"]) == "lora" else ""
    if named in GGUF_BITS:
        why = (f"it is a llama.cpp GGUF type, and no {target} run keeps a frozen base in it (transformers dequantizes "
               "a GGUF file at load; writing it as another base would launch another run than the one planned)")
    else:
        if quant is None:  # auto for lora, or an unquantized base
            return
        base = "nf4_nodq" if quant == "nf4" and not _double_quant(row) else quant  # (engine/components.py)
        if base in accepted:
            return
        if base != named:  # the base the plan counted: NF4 without double quantization
            named += (" (nf4_nodq under --recipe litgpt)" if named == "auto" and str(row.get("recipe")) == "litgpt"
                      else " with --bnb-double-quant off")
        why = (f"{target}'s only quantized base is torchao's NF4 with its block scales quantized again "
               "(quantize_base), the engine's nf4")
    auto = "" if named.startswith("auto") else "auto, "  # (an auto base refused: the base to plan with instead)
    raise ValueError(f"base precision {named!r} cannot be exported to {target}: {why}; accepted for --export "
                     f"{target}: {auto}{', '.join(accepted)}{lora_16}")


# A pure fp16 plan of whole weights (full, freeze) on a transformers Trainer that DeepSpeed does not step: with fp16
# on, accelerate scales the loss with torch's GradScaler (accelerate 1.15.0.dev0 @16cb6eb accelerator.py lines
# 562-583: mixed_precision fp16 outside DeepSpeed and Megatron), whose unscale_ refuses fp16 weights' gradients
# (torch 2.13 torch/amp/grad_scaler.py _unscale_grads_, lines 274-275: `if (not allow_fp16) and param.grad.dtype ==
# torch.float16: raise ValueError("Attempting to unscale FP16 gradients.")`, called with allow_fp16=False by unscale_,
# line 358, and so by step and the Trainer's gradient clipping); with fp16 off the gradients and the optimizer's
# fp16 states go unscaled. TRL without DeepSpeed (ZeRO 0, and ZeRO 3, which it launches on FSDP) and axolotl without
# its ds_config.json (ZeRO 0, no offload: axolotl loads the model in float16 for fp16, utils/config/__init__.py, and
# its own check_fft_possible_bad_config names this error) have no setting that runs the plan: refused (exit 2).
# DeepSpeed's fp16 keeps an fp32 master copy and scales the loss itself (_deepspeed_master_note); LLaMA-Factory
# upcasts the trained weights (llama_factory).
def _check_precision(target: str, row) -> None:
    """ValueError (one line: the precision, why, what the target accepts) where a pure fp16 plan of whole weights
    would be launched on a transformers Trainer's GradScaler or with no loss scaling at all."""
    method, zero, offload = str(row["method"]), int(row["zero"]), str(row["offload"])
    if str(row["precision"]) != "fp16" or method not in ("full", "freeze") or target not in ("trl", "axolotl"):
        return
    on_deepspeed = (zero in (1, 2) or offload != "none") if target == "trl" else (zero > 0 or offload != "none")
    if on_deepspeed:
        return
    accepted = ", ".join(p for p in TRAIN_PRECISIONS if p != "fp16")
    raise ValueError(f"precision 'fp16' with method {method} at ZeRO {zero} cannot be exported to {target}: the "
                     "Trainer's fp16 loss scaling (torch GradScaler) refuses fp16 weights ('Attempting to unscale FP16 "
                     "gradients.') and without it fp16 gradients go unscaled; accepted: "
                     f"{accepted} (loss-scaled fp16: mixed_fp16 or amp_fp16), or --export accelerate-fsdp")


def _double_quant(row) -> bool:
    """Whether the plan's 4-bit bitsandbytes base is double-quantized (the engine's nf4, 4.127 bits a weight) or
    not (nf4_nodq or --bnb-double-quant off: 4.5 bits): written in every target's own key, since their defaults
    differ (TRL False, LLaMA-Factory and axolotl True) and a launch at the other setting holds other bytes."""
    base = str(row.get("base_precision", "auto"))
    if base == "auto" and str(row["method"]) == "qlora" and str(row.get("recipe", "hf")) == "litgpt":
        return False  # the litgpt recipe's QLoRA base: nf4_nodq (engine/components.py auto_bits), LitGPT's bnb.nf4
    return base != "nf4_nodq" and str(row.get("bnb_double_quant", "on")) != "off"


def _script_base(row) -> str:
    """Where the target's config holds no model (DeepSpeed, accelerate): the plan's quantized base, as the training
    script's transformers BitsAndBytesConfig keys."""
    quant = _quant(row)
    keys = ("load_in_8bit=True" if quant == "int8" else
            f"load_in_4bit=True, bnb_4bit_quant_type='{'nf4' if quant == 'nf4' else 'fp4'}', "
            f"bnb_4bit_use_double_quant={_double_quant(row)}")
    return f"frozen base {quant}: the training script loads it (BitsAndBytesConfig({keys}))"


def _degree(row, key: str) -> int:
    """The row's tp, pp, cp or ep (1 where the row has none)."""
    value = row.get(key, 1)
    return 1 if value is None or pd.isna(value) else max(int(value), 1)


def _data_parallel(row) -> int:
    """The plan's data-parallel ranks: gpus / (tp x pp x cp) (engine/scenarios.py check_combinations: gpus = tp x pp
    x cp x data-parallel ranks; ep spreads the experts over those ranks and takes none of its own)."""
    return max(int(row["gpus"]) // (_degree(row, "tp") * _degree(row, "pp") * _degree(row, "cp")), 1)


# Expert parallel (ep: 1/ep of the experts on each GPU, engine/components.py weights) and context parallel (cp: every
# per-token term over cp GPUs, engine/components.py context_parallel): written where the target's config has them
# (accelerate's parallelism_config cp_size under FSDP2, torchtune's context_parallel_dim, axolotl's
# context_parallel_size), else said, with what the run launched without them holds (_undivided_peak). Where each
# target keeps them, when its config cannot:
PARALLEL_LABEL = {"ep": "expert parallel", "cp": "context parallel"}
PARALLEL_ELSEWHERE = {
    ("deepspeed", "ep"): "DeepSpeed-MoE's expert parallel is the model code's (deepspeed.moe.layer.MoE ep_size)",
    ("deepspeed", "cp"): "DeepSpeed's sequence parallel (Ulysses) is the training script's",
    ("trl", "ep"): "no TRL or TrainingArguments key",
    ("trl", "cp"): "no TRL key; accelerate's parallelism_config has it (--export accelerate-fsdp)",
    # Accelerate 1.15.0.dev0 @16cb6eb src/accelerate/parallelism_config.py ParallelismConfig: dp_replicate_size,
    # dp_shard_size, tp_size, cp_size, sp_size
    ("accelerate-fsdp", "ep"): "accelerate's ParallelismConfig has no expert parallel",
    ("accelerate-fsdp", "cp"): "accelerate's context parallel runs under FSDP2 only (plan ZeRO 1 to 3)",
    # torchtune 0.7.0 recipes/full_finetune_distributed.py: training.ParallelDims(dp_replicate, dp_shard, tp, cp)
    ("torchtune", "ep"): "torchtune's recipes shard over data, tensor and context parallel only",
    ("llama-factory", "ep"): "no key of its Trainer path (its Megatron backends are other runs)",
    ("llama-factory", "cp"): "no key of its Trainer path (its Megatron backends are other runs)",
    ("axolotl", "ep"): "no axolotl key",
    ("litgpt", "ep"): "LitGPT's FSDPStrategy has none",
    ("litgpt", "cp"): "LitGPT's FSDPStrategy has none",
}


def _undivided_peak(row, model, dropped: list[str]) -> float | None:
    """The peak per GPU (bytes) of the run launched without the dropped degrees (set to 1): the row and that run
    estimated together, the difference added to the row's peak (so that overhead settings the row does not carry
    cancel out). None without the model's catalog row, or where the engine refuses the run."""
    if model is None or "peak_bytes" not in row.index:
        return None
    from engine import estimate  # (one two-row estimate, ~20 ms)
    from engine.columns import SCENARIO
    names = [c.name for c in SCENARIO if c.group in ("scenario", "stack") and c.name != "gpu" and c.name in row.index]
    asked = {k: row[k] for k in names}
    models = pd.DataFrame([model.to_dict()]).assign(id=str(row["model"])).infer_objects()
    try:
        planned, undivided = estimate(pd.DataFrame([asked, {**asked, **dict.fromkeys(dropped, 1)}]), models)["peak_bytes"]
    except (ValueError, KeyError):
        return None
    return float(row["peak_bytes"]) + float(undivided) - float(planned)


def _parallel_notes(row, model, target: str, written: tuple[str, ...] = (), why: dict | None = None) -> list[str]:
    """What the target's config does not say of the plan's ep and cp (those not in `written`; `why`: a reason of
    this row's, in place of PARALLEL_ELSEWHERE's), with the launched run's peak per GPU."""
    dropped = [k for k in ("ep", "cp") if _degree(row, k) > 1 and k not in written]
    if not dropped:
        return []
    why = why or {}
    said = "; ".join(f"{PARALLEL_LABEL[k]} {_degree(row, k)}: {why.get(k) or PARALLEL_ELSEWHERE[(target, k)]}"
                     for k in dropped)
    peak = _undivided_peak(row, model, dropped)
    holds = (f"about {peak / 2**30:.1f} GiB per GPU where the plan holds {float(row['peak_bytes']) / 2**30:.1f} GiB"
             if peak is not None else "more per GPU than the plan")
    return [f"{said}; launched without {'it' if len(dropped) == 1 else 'them'} (--{' 1 --'.join(dropped)} 1), "
            f"the run holds {holds}"]


def _checkpointing(row) -> bool:
    return bool(row["grad_checkpointing"]) or str(row.get("checkpointing", "none")) in ("full", "selective", "offload")


def _liger(row) -> bool:
    """The plan runs Liger's kernels (engine/stacks.py liger)."""
    return str(row.get("liger", "off")) == "on"


def _loads_liger(row) -> bool:
    """The target must load Liger: the plan's fused linear cross-entropy (TRL, LLaMA-Factory and axolotl have it
    through Liger) or its other kernels."""
    return str(row.get("loss", "unfused")) == "fused" or _liger(row)


def _dropout(row) -> float:
    """The plan's LoRA dropout (a row without the column: peft's default, 0)."""
    p = row.get("lora_dropout", 0.0)
    return 0.0 if p is None or pd.isna(p) else float(p)


# where the target's own config cannot switch Liger's kernels on (engine/stacks.py liger): what a plan with them asks
LIGER_ELSEWHERE = {
    "deepspeed": "Liger's kernels: the training script's (TrainingArguments(use_liger_kernel=True), or "
                 "liger_kernel.transformers.apply_liger_kernel_to_<model>()), not a DeepSpeed key",
    "accelerate-fsdp": "Liger's kernels: the training script's (TrainingArguments(use_liger_kernel=True), or "
                       "liger_kernel.transformers.apply_liger_kernel_to_<model>()), not accelerate's config",
    "torchtune": "Liger's kernels: torchtune's modules have none; this run holds more than the plan (plan with --liger off)",
    "litgpt": "Liger's kernels: LitGPT's model has none; this run holds more than the plan (plan with --liger off)",
}


def _common_notes(row, repo_known: bool, target: str = "") -> list[str]:
    # engine/stacks.py accum_sync: with more than one micro-batch a step the step's gradients are alive through the
    # next micro-batches' forward and backward (whole on each GPU under FSDP's no_sync: accelerate's and TRL's trainer,
    # LitGPT's Fabric); DeepSpeed ZeRO accumulates into its gradient partitions, which the plan counts from the start
    zero = int(row.get("zero", 0) or 0)
    if zero >= 1 and target in ("deepspeed", "llama-factory", "axolotl"):
        accum = ("gradient accumulation 1: the plan's memory does not depend on it (DeepSpeed accumulates into its "
                 "gradient partitions, counted from initialisation; raise it for a larger global batch)")
    elif str(row.get("accum_sync", "every")) == "last":
        accum = ("gradient accumulation: the plan counts the gradients kept between micro-batches (--accum-sync last); "
                 "with 1, as written here, the run holds less")
    else:
        accum = ("gradient accumulation 1 (one micro-batch a step, as planned): raising it keeps the step's gradients "
                 "alive through the next micro-batches" + (", unsharded under FSDP's no_sync" if zero >= 2 else "")
                 + ": plan that run with --accum-sync last" + (" (or sync each micro-batch: accelerate's sync_each_batch)"
                                                               if target in ("accelerate-fsdp", "trl") and zero >= 2 else ""))
    notes = ["learning rate, schedule, epochs and dataset: not part of the plan (the target's defaults)", accum]
    if not repo_known:
        notes.append(f"model {row['model']}: no Hugging Face repository in the catalog; replace it with the checkpoint's path")
    if int(row.get("tp", 1) or 1) > 1 or int(row.get("pp", 1) or 1) > 1:
        notes.append(f"tensor parallel {int(row['tp'])} / pipeline parallel {int(row['pp'])}: not expressed "
                     "(needs Megatron-style model code)")
    if str(row.get("checkpointing", "none")) == "selective":
        notes.append("selective activation checkpointing: written as full checkpointing")
    if _liger(row) and target in LIGER_ELSEWHERE:
        notes.append(LIGER_ELSEWHERE[target])
    if str(row.get("checkpointing", "none")) == "module":
        notes.append("per-module activation checkpointing (NeMo Automodel's): written as whole-layer checkpointing, "
                     "which keeps one input per layer where the plan counts four (the run holds less)")
    return notes


def _yaml(data: dict, header: list[str]) -> str:
    import yaml  # the catalog's YAML library (requirements.txt)
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
    return "".join(f"# {line}\n" for line in header) + body


# (objective dpo: the keys of TRL's DPO config, read at trl 1.16.0)
DPO_SOURCES = {"trl": "TRL 1.16.0: trl/trainer/dpo_config.py (DPOConfig), trl/trainer/model_config.py (ModelConfig), "
                      "transformers TrainingArguments (OptimizerNames); `trl dpo --config FILE`"}


def _header(target: str, row, notes: list[str], launch: str) -> list[str]:
    source = DPO_SOURCES.get(target, SOURCES[target]) if str(row.get("objective", "sft")) == "dpo" else SOURCES[target]
    lines = [f"{target} config for {row['model']} {row['method']} on {int(row['gpus'])} GPU(s), planned by llm-planner",
             f"keys: {source}", f"run: {launch}"]
    return lines + [f"not expressed: {n}" for n in notes]


# the plan's optimizers the DeepSpeed export names as DeepSpeed's own (its `optimizer` block); the others are the script's
DEEPSPEED_OPTIMIZER = {"adamw": "AdamW", "adamw_fused": "AdamW", "sgd": "SGD"}


def _placeholder_lr(row) -> float:
    """The learning rate written where a target needs one (DeepSpeed's optimizer params, axolotl's required key): not
    part of the plan, the same in the DeepSpeed file and the trainer config that names it."""
    return 1e-3 if str(row["optimizer"]) == "sgd" else 2e-5


def deepspeed(row, repo: str, repo_known: bool, model=None) -> Export:
    """A DeepSpeed config JSON (for deepspeed.initialize, or a Trainer's `--deepspeed FILE`)."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "deepspeed")
    # train_batch_size: micro-batch x accumulation x the data-parallel ranks, which DeepSpeed checks against the
    # data-parallel world of the script's model-parallel groups (runtime/config.py _batch_assertion: "train_batch ==
    # micro_batch * grad_acc * self.world_size", world_size = mpu.get_data_parallel_world_size(), or the world over
    # sequence_parallel_size), not against every GPU: gpus / (tp x pp x cp). Where those differ (tp, pp or cp) it is
    # left out, and DeepSpeed derives it from its own data-parallel world (runtime/config.py _set_batch_related_parameters:
    # micro_batch x grad_acc x world_size): a Trainer naming this file (LLaMA-Factory, axolotl, TRL) counts every
    # process (transformers 5.24.0 integrations/deepspeed.py trainer_config_process: args.world_size x
    # per_device_train_batch_size x accumulation) and refuses any other number ("ds train_batch_size=4 vs hf
    # train_batch_size (calculated)=8")
    dp = _data_parallel(row)
    cfg: dict = {"train_micro_batch_size_per_gpu": int(row["batch"]), "gradient_accumulation_steps": 1}
    if dp == int(row["gpus"]):
        cfg["train_batch_size"] = int(row["batch"]) * dp
    else:
        notes.append(f"train_batch_size: left to DeepSpeed (micro-batch x accumulation x its data-parallel world): "
                     f"micro-batch {int(row['batch'])} x the plan's {dp} data-parallel ranks ({int(row['gpus'])} GPUs "
                     "over tp x pp x cp) under the training script's model-parallel groups, every GPU under a Trainer")
    if prec["half"]:
        cfg[prec["half"]] = {"enabled": True}
        # DeepSpeed's bf16 / fp16 mode casts the model to that dtype (runtime/engine.py _configure_distributed_model)
        # and keeps fp32 master copies of what it trains: the plan's mixed_bf16 / mixed_fp16
        if _pure_trained(row, prec):
            notes.append(_deepspeed_master_note(row, prec, "deepspeed"))
        elif prec["name"].startswith("amp_"):
            notes.append(f"precision {prec['name']} (fp32 weights under {prec['half']} autocast): DeepSpeed's "
                         f"{prec['half']} mode casts the model to {prec['half']} and keeps fp32 master copies of the "
                         f"trained weights, as the planner's mixed_{prec['half']}: plan it with --precision mixed_{prec['half']}")
        elif not prec["master"]:
            notes.append(f"precision {prec['name']}: DeepSpeed's {prec['half']} mode keeps fp32 master copies of the "
                         f"trained parameters (here the {row['method']} adapters, a small part of the memory)")
    zero: dict = {"stage": int(row["zero"])}
    offload = str(row["offload"])
    if offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload == "all":  # (the engine accepts it only at ZeRO stage 3, as DeepSpeed's offload_param)
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if int(row["zero"]) == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg["zero_optimization"] = zero
    opt = str(row["optimizer"])
    if DEEPSPEED_OPTIMIZER.get(opt) == "AdamW":
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": _placeholder_lr(row)}}
        notes.append("optimizer learning rate 2e-5: a placeholder, not part of the plan")
    elif opt == "sgd":
        cfg["optimizer"] = {"type": "SGD", "params": {"lr": _placeholder_lr(row)}}
        notes.append("optimizer learning rate 1e-3: a placeholder, not part of the plan")
        if int(row["zero"]) > 0:
            # torch.optim.SGD is not in DeepSpeed's ZERO_SUPPORTED_OPTIMIZERS (0.19.8 runtime/zero/utils.py line 45):
            # _do_optimizer_sanity_check (runtime/engine.py line 2298) asserts "You are using an untested ZeRO
            # Optimizer" without zero_allow_untested_optimizer
            cfg["zero_allow_untested_optimizer"] = True
    else:
        cfg["zero_allow_untested_optimizer"] = True
        notes.append(f"optimizer {opt}: not a DeepSpeed optimizer; pass it from the training script "
                     "(a Trainer's optim=...), which zero_allow_untested_optimizer permits")
        if "offload_optimizer" in zero:
            # DeepSpeed 0.19.8 runtime/engine.py _configure_optimizer (lines 2342-2346): a client optimizer other than
            # its CPU Adam / Lion under offload_optimizer raises ZeRORuntimeException ("You are using ZeRO-Offload with
            # a client provided optimizer ...") unless zero_force_ds_cpu_optimizer is false (default true,
            # runtime/constants.py ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT)
            cfg["zero_force_ds_cpu_optimizer"] = False
            notes.append(f"optimizer {opt} with the optimizer offloaded: it steps the host's fp32 partition, so it "
                         "must run on the CPU (zero_force_ds_cpu_optimizer: false lets DeepSpeed take it)")
    if _checkpointing(row):
        notes.append("gradient checkpointing: a model setting (model.gradient_checkpointing_enable(), or the "
                     "Trainer's gradient_checkpointing=True), not a DeepSpeed key for Hugging Face models")
    if row["method"] in ("lora", "qlora", "freeze"):
        notes.append(f"method {row['method']}: the trainable parameters are the training script's (PEFT); "
                     "DeepSpeed trains what requires grad")
    if _quant(row):
        notes.append(_script_base(row))
    notes += _parallel_notes(row, model, "deepspeed")
    notes.append(f"sequence length {int(row['seq']):,}, attention {row.get('attention', 'sdpa')}, packing "
                 f"{row.get('packing', 'off')}: the data pipeline's and the model's, not DeepSpeed's")
    if _dpo(row):
        notes.append(_dpo_note(row) + "; launch TRL's DPOTrainer with this file (`trl dpo ... --deepspeed "
                     "ds_config.json`; --export trl gives its config): it prepares the reference copy with DeepSpeed "
                     "too, sharded under ZeRO-3 only (trl 1.16.0 dpo_trainer.py lines 984-986)")
    about = _header("deepspeed", row, [], "deepspeed train.py --deepspeed ds_config.json (or a Trainer's "
                    "deepspeed=ds_config.json)")
    return Export("deepspeed", json.dumps(cfg, indent=2) + "\n", notes, comments_inline=False, about=about)


TRL_OPTIM = {"adamw": "adamw_torch", "adamw_fused": "adamw_torch_fused", "adamw_8bit": "adamw_bnb_8bit",
             "paged_adamw_8bit": "paged_adamw_8bit", "sgd": "sgd", "adafactor": "adafactor",
             "paged_adamw_32bit": "paged_adamw_32bit", "adamw_8bit_torchao": "adamw_torch_8bit",
             # issue 27: transformers' own names (training_args.py OptimizerNames); Adam-mini and Muon have none
             **{name: name for name in ("lion_32bit", "lion_8bit", "galore_adamw", "galore_adamw_8bit",
                                        "galore_adamw_layerwise", "galore_adamw_8bit_layerwise")}}


# LLaMA-Factory's own optimizers, switched on in its finetuning arguments (LLaMA-Factory 0.9.6.dev0 @ff6d4d1
# src/llamafactory/hparams/finetuning_args.py FinetuningArguments.use_adam_mini, line 472, and .use_muon, line 522,
# both default False): train/trainer_utils.py create_custom_optimizer builds Adam_mini (_create_adam_mini_optimizer)
# or its third_party Muon (_create_muon_optimizer: Muon for the 2-D weights but embeddings and lm_head, AdamW for the
# rest) in place of TrainingArguments.optim, which they do not read
LF_OPTIMIZERS = {"adam_mini": "use_adam_mini", "muon": "use_muon"}


def _trl_optim(row) -> str:
    """transformers' optim name of the plan's optimizer; ValueError (one line) where it has none."""
    opt = str(row["optimizer"])
    if opt not in TRL_OPTIM:
        own = (f"; --export llama-factory writes it as {LF_OPTIMIZERS[opt]}: true" if opt in LF_OPTIMIZERS else "")
        raise ValueError(f"optimizer {opt!r} has no transformers Trainer name{own}; accepted for this export: "
                         f"{', '.join(TRL_OPTIM)}")
    return TRL_OPTIM[opt]
HF_ATTENTION = {"sdpa": "sdpa", "flash": "flash_attention_2", "eager": "eager"}


def _galore_rank(row) -> int:
    rank = row.get("galore_rank", GALORE_RANK)
    return int(rank) if rank is not None and not pd.isna(rank) and int(rank) > 0 else GALORE_RANK


def _galore_trainer_keys(cfg: dict, row) -> None:
    """transformers' GaLore (optim galore_*) needs the modules it projects and takes its rank from optim_args
    (transformers trainer.py get_optimizer_cls_and_kwargs: "You need to define `optim_target_modules`"; the
    engine models the decoder layers' attention and MLP linears, the docs' ["attn", "mlp"])."""
    if str(row["optimizer"]) not in GALORE_OPTIMIZERS:
        return
    cfg["optim_target_modules"] = ["attn", "mlp"]
    cfg["optim_args"] = f"rank={_galore_rank(row)}"  # update_proj_gap and scale stay transformers' (200, 0.25)


# ---- preference tuning (objective dpo, engine/components.py dpo_parts) ----------------------------------------
# Which targets run a DPO step, and the reference each can hold (engine/stacks.py dpo_reference): TRL's `trl dpo`
# (DPOConfig, trl 1.16.0: ref_model None for a PEFT policy, precompute_ref_log_probs), LLaMA-Factory's stage dpo
# (ref_model for an explicit copy; its CustomDPOTrainer sets `self.precompute_ref_log_probs = False`,
# src/llamafactory/train/dpo/trainer.py __init__), axolotl's rl: dpo (precompute_ref_log_probs; no copy beside an
# adapter: DPO_NO_ADAPTER_COPY_TARGETS), torchtune's lora_dpo_single_device / lora_dpo_distributed (the reference is
# the model under disable_adapter) and full_dpo_distributed (a second model: `self._ref_model`), no precomputed
# log-probs; DeepSpeed and accelerate's FSDP files launch TRL's trainer. LitGPT ships no DPO script
# (litgpt/finetune: full, lora, adapter, adapter_v2).
DPO_REFERENCES = {"trl": ("copy", "adapters_off", "precomputed"), "llama-factory": ("copy", "adapters_off"),
                  "axolotl": ("copy", "adapters_off", "precomputed"), "torchtune": ("copy", "adapters_off"),
                  "deepspeed": ("copy", "adapters_off", "precomputed"),
                  "accelerate-fsdp": ("copy", "adapters_off", "precomputed"), "litgpt": ()}
# the targets that cannot hold a copy beside LoRA adapters (engine/stacks.py DPO_NO_ADAPTER_COPY): torchtune's lora_dpo
# recipes (the reference is the model under disable_adapter); axolotl 0.18.0 @067b021 reads cfg.rl_adapter_ref_model in
# src/axolotl/train.py setup_reference_model, but the key is no field of utils/schemas/config.py AxolotlInputConfig,
# whose validation (utils/config/__init__.py validate_config: model_dump of the pydantic model, extra keys ignored)
# drops it: the reference of an adapter run is always the model with its adapters disabled
DPO_NO_ADAPTER_COPY_TARGETS = {
    "torchtune": "its lora_dpo recipes take the reference as the model with its adapters disabled",
    "axolotl": "axolotl's config validation drops rl_adapter_ref_model (no field of its schema, 0.18.0), so an adapter "
               "run's reference is the model with its adapters disabled"}
DPO_WHY = {"litgpt": "LitGPT ships no DPO script (litgpt/finetune: full, lora, adapter, adapter_v2)",
           "llama-factory": "LLaMA-Factory's DPO trainer computes the reference log-probs in every step "
                            "(CustomDPOTrainer sets precompute_ref_log_probs = False)",
           "torchtune": "torchtune's DPO recipes compute the reference log-probs in every step"}


def _dpo(row) -> bool:
    return str(row.get("objective", "sft")) == "dpo"


def _check_objective(target: str, row) -> None:
    """A DPO plan exports only where the target runs DPO with the plan's reference (ValueError otherwise)."""
    if not _dpo(row):
        return
    ref = str(row.get("dpo_reference", "copy"))
    accepted = DPO_REFERENCES[target]
    if not accepted:
        raise ValueError(f"objective 'dpo' cannot be exported to {target}: {DPO_WHY[target]}; accepted for --export "
                         "with --objective dpo: " + ", ".join(t for t, refs in DPO_REFERENCES.items() if refs))
    if ref not in accepted:
        ok = [t for t, refs in DPO_REFERENCES.items() if ref in refs]
        raise ValueError(f"dpo_reference {ref!r} cannot be exported to {target}: {DPO_WHY.get(target, target)}; "
                         f"accepted for {target}: --dpo-reference {' or '.join(accepted)}; targets that take "
                         f"{ref!r}: {', '.join(ok)}")
    if target in DPO_NO_ADAPTER_COPY_TARGETS and ref == "copy" and str(row["method"]) in ("lora", "qlora"):
        raise ValueError(f"dpo_reference 'copy' with LoRA cannot be exported to {target}: "
                         f"{DPO_NO_ADAPTER_COPY_TARGETS[target]}; accepted for {target}: --dpo-reference "
                         "adapters_off with LoRA, copy with --method full")


def _dpo_note(row) -> str:
    return ("objective dpo: --batch counts preference pairs (chosen and rejected in one forward: "
            f"{2 * int(row['batch'])} sequences of up to {int(row['seq']):,} tokens, prompt + completion); the "
            f"reference: {row.get('dpo_reference')} (docs/stacks.md \"DPO\"); beta 0.1 (DPO's default) is not part "
            "of the plan (memory does not depend on it)")


def trl(row, repo: str, repo_known: bool, model=None) -> Export:
    """A `trl sft --config FILE` YAML: SFTConfig (TrainingArguments) and ModelConfig keys."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "trl")
    cfg: dict = {"model_name_or_path": repo, "dtype": prec["load"],
                 "attn_implementation": HF_ATTENTION.get(str(row.get("attention", "sdpa")), "sdpa"),
                 "per_device_train_batch_size": int(row["batch"]), "gradient_accumulation_steps": 1,
                 "max_length": int(row["seq"]), "packing": str(row.get("packing", "off")) == "on",
                 "gradient_checkpointing": _checkpointing(row), "optim": _trl_optim(row)}
    if _remote_code(model):  # TRL ModelConfig.trust_remote_code (engine/constants.py REMOTE_CODE_MODEL_TYPES)
        cfg["trust_remote_code"] = True
    _galore_trainer_keys(cfg, row)
    sharded_pure = _pure_trained(row, prec) and int(row["zero"]) == 3
    # both written, false included: TRL turns bf16 on where it is unset and fp16 is off (TRL 1.16.0
    # trl/trainer/base_config.py __post_init__ line 108, `self.bf16 = not (self.fp16) if self.bf16 is None`), which
    # would run an fp32 plan, or a pure 16-bit one launched with both off, under bf16 autocast
    cfg["bf16"], cfg["fp16"] = (prec["half"] == half and not sharded_pure for half in ("bf16", "fp16"))
    if prec["master"]:
        notes.append(f"precision {prec['name']} (fp32 master weights): written as the model's dtype and autocast; "
                     "the fp32 master copy is DeepSpeed's or FSDP's (add --deepspeed)")
    loss = str(row.get("loss", "unfused"))
    if _loads_liger(row):
        # (TrainingArguments.use_liger_kernel: Liger's norms, SwiGLU and, with labels, its fused linear cross-entropy;
        # a plan with one of them and not the other holds more than this run)
        cfg["use_liger_kernel"] = True
    if _dpo(row):
        # trl 1.16.0 trl/trainer/dpo_config.py: loss_type ["sigmoid"], beta 0.1, precompute_ref_log_probs False; no
        # packing key (padding_free instead, disabled in 1.16.0: dpo_trainer.py lines 732-739); the SFT loss keys do
        # not apply (the fused log-prob head, engine/stacks.py DPO_TRL_HEAD)
        del cfg["packing"]
        cfg.update({"loss_type": ["sigmoid"], "beta": 0.1,
                    "precompute_ref_log_probs": str(row.get("dpo_reference")) == "precomputed"})
        notes.append(_dpo_note(row) + "; the dataset: a preference dataset (prompt, chosen, rejected)")
        if str(row.get("dpo_reference")) == "copy" and row["method"] in ("lora", "qlora"):
            notes.append("dpo_reference copy with LoRA: `trl dpo` builds no second model for a PEFT policy (dpo_trainer.py "
                         "lines 908-914); pass ref_model=AutoModelForCausalLM.from_pretrained(...) in a script"
                         # (the plan counts the copy quantized as the policy: engine/components.py dpo_parts)
                         + (", with the policy's quantization_config (the plan counts the copy quantized as the "
                            "policy)" if _quant(row) else ""))
    elif loss != "fused":
        cfg["loss_type"] = "nll" if loss in ("unfused", "parallel", "compiled") else "chunked_nll"
    if row["method"] in ("lora", "qlora"):
        rank = int(row["lora_rank"])
        # lora_dropout: TRL 1.10.0.dev0 trl/trainer/model_config.py ModelConfig.lora_dropout (default 0.05)
        cfg.update({"use_peft": True, "lora_r": rank, "lora_alpha": 2 * rank, "lora_dropout": _dropout(row),
                    "lora_target_modules": ["all-linear"] if _all_linear_shorthand(row, model, notes)
                    else _peft_targets(row, model)})
        notes.append(f"LoRA alpha {2 * rank} (2 x rank): not part of the plan (memory does not depend on it)")
    quant = _quant(row)
    if quant == "int8":
        cfg["load_in_8bit"] = True
    elif quant in ("nf4", "int4"):
        # use_bnb_nested_quant: TRL 1.10.0.dev0 trl/trainer/model_config.py ModelConfig (default False), passed
        # as BitsAndBytesConfig(bnb_4bit_use_double_quant=...) by trl/trainer/utils.py get_quantization_config
        cfg.update({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4" if quant == "nf4" else "fp4",
                    "use_bnb_nested_quant": _double_quant(row)})
    if row["method"] == "freeze":
        notes.append(f"method freeze (last {int(row['freeze_layers'])} layers trainable): not a TRL option; "
                     "freeze the other layers in a script")
    if sharded_pure:
        # DeepSpeed's ZeRO-3 would clone an fp32 partition and step it (stage3.py fp32_partitioned_groups_flat), and
        # accelerate's FSDP upcasts the trained weights under bf16/fp16 mixed precision: only FSDP without it runs
        # the plan's pure 16-bit
        notes.append(f"ZeRO stage 3 in pure {prec['name']}: launch with accelerate's FSDP config (llm-planner estimate "
                     f"... --export accelerate-fsdp, mixed_precision no), {prec['half']}: false here and the model "
                     f"loaded in {prec['load']}; DeepSpeed ZeRO-3, or {prec['half']}: true under FSDP "
                     f"({ACCELERATE_FSDP_UPCAST}), would hold an fp32 copy the plan does not count (plan "
                     f"mixed_{prec['half']} for those)")
    elif int(row["zero"]) > 0 or str(row["offload"]) != "none":
        notes.append(f"ZeRO stage {int(row['zero'])}, offload {row['offload']}: add deepspeed: ds_config.json "
                     "(llm-planner estimate ... --export deepspeed) and launch with accelerate or deepspeed")
        if str(row["optimizer"]) in DEEPSPEED_OPTIMIZER:  # the file's optimizer lr, which the Trainer checks (_deepspeed_file)
            cfg["learning_rate"] = _placeholder_lr(row)
    if str(row.get("activation_offload", "off")) == "on":
        cfg["activation_offloading"] = True
    notes += _parallel_notes(row, model, "trl")
    text = _yaml(cfg, _header("trl", row, notes, f"trl {'dpo' if _dpo(row) else 'sft'} --config FILE --dataset_name DATASET"))
    return Export("trl", text, notes)


def accelerate_fsdp(row, repo: str, repo_known: bool, model=None) -> Export:
    """An `accelerate launch --config_file FILE` YAML for FSDP2 (the training script is yours)."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "accelerate-fsdp")
    zero, offload = int(row["zero"]), str(row["offload"])
    # a pure 16-bit plan of the weights it trains is launched without mixed precision: with it, accelerate
    # upcasts every trainable parameter to fp32 before FSDP shards it (ACCELERATE_FSDP_UPCAST), an fp32 copy
    # and fp32 states the plan does not count
    pure_trained = _pure_trained(row, prec)
    cfg: dict = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP",
                 "mixed_precision": "no" if pure_trained else prec["half"] or "no", "num_machines": 1,
                 "num_processes": int(row["gpus"])}
    fsdp = {"fsdp_version": 2, "fsdp_reshard_after_forward": zero == 3, "fsdp_offload_params": offload != "none",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True, "fsdp_activation_checkpointing": _checkpointing(row)}
    if zero == 0:
        cfg["distributed_type"] = "MULTI_GPU" if int(row["gpus"]) > 1 else "NO"
        notes.append("ZeRO stage 0 (every GPU holds everything): plain data parallel, no FSDP")
        fsdp = None
    elif zero in (1, 2):
        notes.append(f"ZeRO stage {zero}: FSDP2 has no optimizer-{'only' if zero == 1 else 'and-gradient'} sharding; "
                     "written as fsdp_reshard_after_forward: false (parameters gathered once per step, ZeRO-2-like)")
    if fsdp is not None and offload == "optimizer":
        notes.append("offload of the optimizer states only: FSDP offloads parameters, gradients and optimizer states "
                     "together (fsdp_offload_params: true)")
    if fsdp is not None:
        cfg["fsdp_config"] = fsdp
    cp, cp_why = _degree(row, "cp"), {}
    if cp > 1 and fsdp is not None and str(row.get("attention", "sdpa")) != "sdpa":
        # accelerate docs/source/concept_guides/context_parallelism.md: "Context parallelism works only with SDPA"
        cp_why["cp"] = (f"accelerate's context parallel takes SDPA only, not the plan's {row.get('attention')} "
                        "attention (plan it with --attention sdpa)")
    elif cp > 1 and fsdp is not None:
        # parallelism_config: the keys of `accelerate config` (commands/config/cluster.py, parallelism_config_ prefix;
        # examples/torch_native_parallelism/configs/cp.yaml), read by `accelerate launch` into PARALLELISM_CONFIG_*
        # (utils/launch.py prepare_extend_env_parallelism_config); FSDP2 shards over dp_shard x cp (parallelism_config.py
        # fsdp_dim_names: dp_shard_cp), as the plan shards over the data x context ranks, and torch's context_parallel
        # rotates K/V by all-gather (TorchContextParallelConfig cp_comm_strategy default), as planned. Tensor and
        # pipeline parallel are not written (_common_notes): their GPUs shard with the data ranks
        cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": 1,
                                     "parallelism_config_dp_shard_size": int(row["gpus"]) // cp,
                                     "parallelism_config_tp_size": 1, "parallelism_config_cp_size": cp}
        notes.append(f"context parallel {cp}: the training script runs each step under accelerator.maybe_context_parallel"
                     "(buffers=[input_ids, labels, ...], buffer_seq_dims=[1, 1, ...]) (accelerate's context "
                     "parallelism guide), with SDPA and a causal mask")
    notes += _parallel_notes(row, model, "accelerate-fsdp", ("cp",) if "parallelism_config" in cfg else (), cp_why)
    flat = str(row.get("flat_params", "off"))
    if fsdp is not None and flat in ("on", "mixed"):
        # engine/stacks.py flat_params: FSDP1's flat parameters hold other memory than FSDP2's per-parameter shards
        notes.append(f"flat parameters {flat} (FSDP1's FlatParameter, --flat-params {flat}): this "
                     "config launches FSDP2 (fsdp_version 2), whose per-parameter sharding the plan counts with "
                     "--flat-params off: plan it so for this config")
    if pure_trained and fsdp is not None:
        notes.append(f"precision {prec['name']} (pure 16-bit): load the model in {prec['load']} in the script; "
                     f"mixed_precision no, since with {prec['half']} accelerate upcasts the trained parameters to fp32 "
                     f"under FSDP ({ACCELERATE_FSDP_UPCAST}): plan mixed_{prec['half']} for that run")
    elif prec["name"] in ("bf16", "fp16"):
        notes.append(f"precision {prec['name']} (pure 16-bit): load the model in {prec['load']} in the script; "
                     "mixed_precision sets the autocast")
    if prec["master"]:
        notes.append(f"precision {prec['name']}: FSDP's mixed precision keeps fp32 parameters and computes in "
                     f"{prec['half']} (the plan counts 16-bit weights and fp32 master copies)")
    notes.append(f"micro-batch {int(row['batch'])}, sequence length {int(row['seq']):,}, optimizer {row['optimizer']}, "
                 f"method {row['method']}, attention {row.get('attention', 'sdpa')}: the training script's, not "
                 "accelerate's config")
    if _quant(row):
        notes.append(_script_base(row))
    if _dpo(row):
        notes.append(_dpo_note(row) + "; the script: TRL's DPOTrainer (`accelerate launch --config_file FILE -m trl.cli "
                     "dpo ...`; --export trl gives its config), which shards the reference copy with prepare_fsdp "
                     "(trl 1.16.0 dpo_trainer.py lines 987-988)")
    text = _yaml(cfg, _header("accelerate-fsdp", row, notes, "accelerate launch --config_file FILE train.py"))
    return Export("accelerate-fsdp", text, notes)


LF_ATTENTION = {"sdpa": "sdpa", "flash": "fa2", "eager": "disabled"}


def llama_factory(row, repo: str, repo_known: bool, model=None) -> Export:
    """A `llamafactory-cli train FILE` YAML (model, method, dataset and train sections)."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "llama-factory")
    method = str(row["method"])
    cfg: dict = {"model_name_or_path": repo, "flash_attn": LF_ATTENTION.get(str(row.get("attention", "sdpa")), "auto"),
                 "stage": "dpo" if _dpo(row) else "sft", "do_train": True,
                 "finetuning_type": "lora" if method == "qlora" else method}
    if _remote_code(model):  # LLaMA-Factory ModelArguments.trust_remote_code
        cfg["trust_remote_code"] = True
    if _dpo(row):
        # LLaMA-Factory hparams/finetuning_args.py RLHFArguments: pref_beta 0.1, pref_loss sigmoid; ref_model None uses
        # the policy with its adapters disabled under LoRA, a second load_model otherwise (trainer_utils.py
        # create_ref_model); ref_model names a separate copy
        cfg.update({"pref_beta": 0.1, "pref_loss": "sigmoid"})
        if str(row.get("dpo_reference")) == "copy" and method in ("lora", "qlora"):
            cfg["ref_model"] = repo
        notes.append(_dpo_note(row) + "; the dataset: a preference dataset, `ranking: true` in dataset_info.json with "
                     "its chosen and rejected columns (LLaMA-Factory's data/README.md)")
    quant = _quant(row)
    if quant:
        cfg.update({"quantization_bit": 8 if quant == "int8" else 4, "quantization_method": "bnb"})
        if "ref_model" in cfg:
            # the copy quantized as the policy, as the plan counts it (engine/components.py dpo_parts): LLaMA-Factory
            # @ff6d4d1 src/llamafactory/train/trainer_utils.py create_ref_model loads ref_model with
            # `quantization_bit=finetuning_args.ref_model_quantization_bit` (default None: a 16-bit copy), the other
            # quantization arguments copied from the policy's (ModelArguments.copyfrom)
            cfg["ref_model_quantization_bit"] = cfg["quantization_bit"]
        if quant != "int8":
            # double_quantization: LLaMA-Factory 0.9.6.dev0 hparams/model_args.py QuantizationArguments (default True)
            cfg.update({"quantization_type": "nf4" if quant == "nf4" else "fp4", "double_quantization": _double_quant(row)})
    if method in ("lora", "qlora"):
        rank = int(row["lora_rank"])
        # lora_dropout: LLaMA-Factory 0.9.6.dev0 hparams/finetuning_args.py LoraArguments.lora_dropout (default 0.0)
        cfg.update({"lora_rank": rank, "lora_alpha": 2 * rank, "lora_dropout": _dropout(row),
                    "lora_target": "all" if str(row["lora_targets"]) == "all" else ",".join(_peft_targets(row, model))})
        notes.append(f"LoRA alpha {2 * rank} (2 x rank): not part of the plan")
    if method == "freeze":
        cfg["freeze_trainable_layers"] = int(row["freeze_layers"])
    cfg.update({"dataset": "DATASET", "template": "TEMPLATE", "cutoff_len": int(row["seq"]),
                "packing": str(row.get("packing", "off")) == "on", "output_dir": f"saves/{row['model']}-{method}",
                "per_device_train_batch_size": int(row["batch"]), "gradient_accumulation_steps": 1})
    opt = str(row["optimizer"])
    if opt in LF_OPTIMIZERS:  # its own Adam-mini / Muon switch, not a Trainer optim name
        cfg[LF_OPTIMIZERS[opt]] = True
        if opt == "muon" and str(row.get("recipe", "hf")) != "llama-factory":
            # (engine/optimizers.py muon: LLaMA-Factory's Newton-Schulz iteration keeps four bf16 copies of a
            # matrix where torch.optim.Muon's keeps two)
            notes.append(f"optimizer muon: LLaMA-Factory's own Muon (third_party/muon), whose step holds more "
                         f"temporaries than the torch.optim.Muon of the {row.get('recipe', 'hf')} recipe planned; "
                         "plan it with --recipe llama-factory")
    else:
        cfg["optim"] = _trl_optim(row)
    # LLaMA-Factory checkpoints by default: the plan's choice, said explicitly
    cfg["disable_gradient_checkpointing"] = not _checkpointing(row)
    if prec["name"] == "bf16" and method in ("full", "freeze") and int(row["zero"]) < 3:
        cfg["pure_bf16"] = True  # bf16 weights without AMP, the plan's pure bf16
    elif prec["half"]:
        cfg[prec["half"]] = True
        if prec["name"] == "bf16" and method in ("full", "freeze"):
            notes.append("pure bf16 at ZeRO-3: LLaMA-Factory refuses pure_bf16 with ZeRO-3; written as bf16 on DeepSpeed")
        elif _pure_trained(row, prec) and int(row["zero"]) == 0 and str(row["offload"]) == "none":
            # LLaMA-Factory 0.9.6.dev0 model/adapter.py init_adapter: cast_trainable_params_to_fp32 unless pure_bf16,
            # BAdam or ZeRO-3, and _setup_full_tuning / _setup_freeze_tuning `param.data = param.data.to(torch.float32)`
            # (fp16 has no pure mode there); the Trainer then scales the loss over fp32 gradients
            whole = ("the planner's amp_fp16: plan it with --precision amp_fp16" if method == "full" else
                     "the frozen layers stay fp16 (--precision amp_fp16 plans every layer in fp32)")
            notes.append(f"precision fp16 (pure fp16 weights): LLaMA-Factory upcasts the trained parameters to fp32 "
                         f"and trains them under fp16 autocast, so fp32 weights, gradients and optimizer states: this "
                         f"run holds more than the plan; {whole}")
    if _loads_liger(row):
        cfg["enable_liger_kernel"] = True
    if opt in GALORE_OPTIMIZERS:
        # what LLaMA-Factory refuses around its GaLore (0.9.6.dev0 @ff6d4d1): LoRA (hparams/finetuning_args.py line
        # 616 "Cannot use LoRA with GaLore, APOLLO or BAdam together."), DeepSpeed (hparams/parser.py line 519 "GaLore
        # and APOLLO are incompatible with DeepSpeed yet."); get_train_args stops there, so the export does first
        why = ("its LoRA" if method in ("lora", "qlora") else
               "DeepSpeed (ZeRO or offload)" if int(row["zero"]) > 0 or str(row["offload"]) != "none" else "")
        if why:
            raise ValueError(f"optimizer {opt!r} with {why} cannot be exported to llama-factory: LLaMA-Factory refuses "
                             f"GaLore with {'LoRA' if method in ('lora', 'qlora') else 'DeepSpeed'} (hparams "
                             f"{'finetuning_args.py' if method in ('lora', 'qlora') else 'parser.py'}); accepted for "
                             "--export llama-factory: GaLore on full or freeze tuning without ZeRO or offload")
        # LLaMA-Factory's own GaLore (trainer_utils.py _create_galore_optimizer at 002f58e): use_galore picks
        # GaLoreAdamW for optim adamw_torch, GaLoreAdamW8bit for adamw_8bit; galore_target all = every linear
        # layer but the output layer; galore_layerwise steps each parameter in its gradient hook
        cfg.update({"use_galore": True, "galore_rank": _galore_rank(row), "galore_target": "all",
                    "galore_layerwise": opt in GALORE_LAYERWISE,
                    "optim": "adamw_8bit" if opt in GALORE_8BIT else "adamw_torch"})
    notes.append("dataset and template: yours (DATASET, TEMPLATE are placeholders)")
    _deepspeed_file(cfg, row, notes, "llama-factory", prec)
    notes += _parallel_notes(row, model, "llama-factory")
    # one GPU on DeepSpeed: llamafactory-cli starts torchrun only for more than one device or FORCE_TORCHRUN
    # (LLaMA-Factory 0.9.6.dev0 @ff6d4d1 src/llamafactory/launcher.py line 61), and get_train_args refuses DeepSpeed
    # outside it (hparams/parser.py line 472: "Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.")
    launch = ("FORCE_TORCHRUN=1 " if "deepspeed" in cfg and int(row["gpus"]) == 1 else "") + "llamafactory-cli train FILE"
    text = _yaml(cfg, _header("llama-factory", row, notes, launch))
    return Export("llama-factory", text, notes)


def _deepspeed_file(cfg: dict, row, notes: list, target: str, prec: dict) -> None:
    """A ZeRO stage or offload: the trainer's `deepspeed` key names the DeepSpeed JSON of the same plan
    (LLaMA-Factory and axolotl both take a path there), and a pure 16-bit plan of whole weights is told what
    DeepSpeed keeps beside it (_deepspeed_master_note)."""
    if int(row["zero"]) > 0 or str(row["offload"]) != "none":
        cfg["deepspeed"] = "ds_config.json"
        notes.append(f"ZeRO stage {int(row['zero'])}, offload {row['offload']}: ds_config.json is "
                     "llm-planner estimate ... --export deepspeed")
        if str(row["optimizer"]) in DEEPSPEED_OPTIMIZER:
            # the file's optimizer lr must equal the Trainer's learning_rate: transformers 5.24.0
            # integrations/deepspeed.py trainer_config_process fill_match("optimizer.params.lr", args.learning_rate),
            # raised by trainer_config_finalize ("Please correct the following DeepSpeed config values that mismatch
            # TrainingArguments values: - ds optimizer.params.lr=2e-05 vs hf learning_rate=5e-05")
            cfg["learning_rate"] = _placeholder_lr(row)
        if _pure_trained(row, prec):
            notes.append(_deepspeed_master_note(row, prec, target))


def _freeze_patterns(row, model) -> list[str]:
    layers = int(model.get("num_layers", 0) or 0) if model is not None else 0
    keep = int(row["freeze_layers"])
    return [f"model.layers.{i}." for i in range(max(layers - keep, 0), layers)] + ["lm_head."]


def axolotl(row, repo: str, repo_known: bool, model=None) -> Export:
    """An `axolotl train FILE` YAML."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "axolotl")
    method = str(row["method"])
    cfg: dict = {"base_model": repo}
    if _remote_code(model):  # axolotl's trust_remote_code
        cfg["trust_remote_code"] = True
    if _dpo(row):
        # axolotl: rl dpo runs TRL's DPOTrainer; src/axolotl/train.py setup_reference_model: an adapter: model_ref None
        # (TRL disables the adapters; its rl_adapter_ref_model does not survive validation: DPO_NO_ADAPTER_COPY_TARGETS),
        # else the model loaded again
        cfg["rl"] = "dpo"
        if str(row.get("dpo_reference")) == "precomputed":
            cfg["precompute_ref_log_probs"] = True
        notes.append(_dpo_note(row) + "; the dataset: a DPO dataset with its prompt strategy (datasets: type: "
                     "chatml.intel for question / chosen / rejected columns, or chat_template.default)")
    quant = _quant(row)
    cfg["load_in_8bit"], cfg["load_in_4bit"] = quant == "int8", quant in ("nf4", "int4")
    if quant == "int4":
        notes.append("4-bit base int4: axolotl's load_in_4bit is NF4 (bitsandbytes)")
    if quant in ("nf4", "int4"):
        # axolotl 0.18.0 (067b021) src/axolotl/loaders/model.py line 718: bnb_4bit_use_double_quant True for
        # adapter qlora, updated from bnb_config_kwargs (utils/schemas/peft.py line 149)
        cfg["bnb_config_kwargs"] = {"bnb_4bit_use_double_quant": _double_quant(row)}
    if method in ("lora", "qlora"):
        rank = int(row["lora_rank"])
        cfg["adapter"] = "qlora" if quant in ("nf4", "int4") else "lora"
        # lora_dropout: axolotl 0.18.0 utils/schemas/peft.py LoraConfig.lora_dropout (default 0.0)
        cfg.update({"lora_r": rank, "lora_alpha": 2 * rank, "lora_dropout": _dropout(row)})
        if _all_linear_shorthand(row, model, notes):
            cfg["lora_target_linear"] = True
        else:
            cfg["lora_target_modules"] = _peft_targets(row, model)
        notes.append(f"LoRA alpha {2 * rank} (2 x rank): not part of the plan")
    if method == "freeze":
        cfg["unfrozen_parameters"] = [f"^{p.replace('.', '[.]')}.*" for p in _freeze_patterns(row, model)]
    # learning_rate: axolotl 0.18.0 utils/schemas/training.py HyperparametersConfig (line 116, `learning_rate: str |
    # float`, no default): a config without it fails validation ("learning_rate Field required"). A placeholder, the
    # DeepSpeed file's where the plan names one (_placeholder_lr: the Trainer refuses a DeepSpeed optimizer lr unlike
    # its own)
    # (rl dpo: a DPO prompt strategy, axolotl 0.18.0 @067b021 src/axolotl/prompt_strategies/dpo/chatml.py intel; its
    # prompt_strategies/base.py load finds no dpo/alpaca.py and returns None, so an SFT type loads no pairs)
    dataset_type = "chatml.intel" if _dpo(row) else "alpaca"
    cfg.update({"datasets": [{"path": "DATASET", "type": dataset_type}], "output_dir": f"./outputs/{row['model']}-{method}",
                "sequence_len": int(row["seq"]), "sample_packing": str(row.get("packing", "off")) == "on",
                "micro_batch_size": int(row["batch"]), "gradient_accumulation_steps": 1,
                "learning_rate": _placeholder_lr(row),
                "optimizer": _trl_optim(row), "gradient_checkpointing": _checkpointing(row),
                "attn_implementation": HF_ATTENTION.get(str(row.get("attention", "sdpa")), "sdpa")})
    _galore_trainer_keys(cfg, row)
    if prec["half"]:
        cfg[prec["half"]] = True
    else:
        # an fp32 plan says bf16: false, since axolotl's default bf16 'auto' turns it on wherever the GPU has bf16
        # (axolotl 0.18.0 utils/config/__init__.py resolve_dtype, lines 156-161)
        cfg["bf16"] = False
    loss = str(row.get("loss", "unfused"))
    if loss in ("chunked", "linear_chunked"):
        cfg["chunked_cross_entropy"] = True
    if _loads_liger(row):
        cfg["plugins"] = ["axolotl.integrations.liger.LigerPlugin"]
        if loss == "fused":
            cfg["liger_fused_linear_cross_entropy"] = True
        if _liger(row):  # (integrations/liger/args.py: LigerArgs)
            cfg.update({"liger_rope": True, "liger_rms_norm": True, "liger_glu_activation": True})
    if str(row.get("activation_offload", "off")) == "on":
        if not _checkpointing(row):
            # axolotl 0.18.0 @067b021 utils/schemas/validation.py line 1447 check_activation_offloading_wo_gc:
            # "activation_offloading requires gradient_checkpointing"
            raise ValueError("activation offload without checkpointing cannot be exported to axolotl: axolotl "
                             "refuses activation_offloading without gradient_checkpointing (utils/schemas/validation.py); "
                             "accepted for --export axolotl: --grad-checkpointing with --activation-offload on (plan "
                             "that)")
        cfg["activation_offloading"] = True
    notes.append(f"learning rate {_placeholder_lr(row):g}: a placeholder (axolotl requires one), not part of the plan")
    notes.append("datasets: yours (DATASET is a placeholder)")
    _deepspeed_file(cfg, row, notes, "axolotl", prec)
    # context_parallel_size: axolotl 0.18.0 utils/schemas/config.py (line 1107; sequence_parallel_degree before it),
    # ring-flash-attn's; validation.py check_context_parallel_size refuses it without flash attention, and with sample
    # packing at a micro-batch over 1
    cp, cp_why = _degree(row, "cp"), {}
    if cp > 1 and str(row.get("attention", "sdpa")) != "flash":
        cp_why["cp"] = ("axolotl's context_parallel_size needs flash attention (plan it with --attention flash)")
    elif cp > 1 and cfg["sample_packing"] and int(row["batch"]) > 1:
        cp_why["cp"] = "axolotl's context_parallel_size takes micro-batch 1 with sample packing (plan --batch 1)"
    elif cp > 1:
        cfg["context_parallel_size"] = cp
        notes.append(f"context parallel {cp}: axolotl's is ring-flash-attn's (pip install ring-flash-attn), where the "
                     "plan counts torch's context_parallel (K/V all-gathered each layer); the attention's exchange "
                     "buffers differ")
    notes += _parallel_notes(row, model, "axolotl", ("cp",) if "context_parallel_size" in cfg else (), cp_why)
    text = _yaml(cfg, _header("axolotl", row, notes, "axolotl train FILE"))
    return Export("axolotl", text, notes)


TORCHTUNE_OPTIMIZER = {"adamw": ("torch.optim.AdamW", False), "adamw_fused": ("torch.optim.AdamW", True),
                       "paged_adamw_8bit": ("bitsandbytes.optim.PagedAdamW8bit", None),
                       "adamw_8bit": ("bitsandbytes.optim.AdamW8bit", None),
                       "paged_adamw_32bit": ("bitsandbytes.optim.PagedAdamW", None),
                       "adamw_8bit_torchao": ("torchao.optim.AdamW8bit", None), "sgd": ("torch.optim.SGD", None)}
TORCHTUNE_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}


def torchtune(row, repo: str, repo_known: bool, model=None) -> Export:
    """The keys to set in a torchtune recipe config (`tune cp` the model's config, then these)."""
    prec, notes = _precision(row), _common_notes(row, repo_known, "torchtune")
    method, distributed = str(row["method"]), int(row["gpus"]) > 1
    recipe = ("lora" if method in ("lora", "qlora") else "full") + "_finetune_" + ("distributed" if distributed
                                                                                    else "single_device")
    if _dpo(row):
        # torchtune's DPO recipes: lora_dpo_single_device, lora_dpo_distributed, full_dpo_distributed (no single-device
        # full DPO recipe: run the distributed one on one process)
        recipe = ("lora_dpo_" + ("distributed" if distributed else "single_device") if method in ("lora", "qlora")
                  else ("" if distributed else "--nproc_per_node 1 ") + "full_dpo_distributed")
        notes.append(_dpo_note(row) + "; the dataset: a preference dataset builder (torchtune.datasets."
                     "stack_exchange_paired_dataset or preference_dataset)")
        if method not in ("lora", "qlora"):
            # torchtune 0.7.0 @bd2a0fc recipes/full_dpo_distributed.py reads cfg.ref_checkpointer (the reference copy's
            # checkpoint; recipes/configs/llama3_1/8B_full_dpo.yaml), which no SFT config carries
            notes.append("the reference copy: full_dpo_distributed reads ref_checkpointer (the reference's checkpoint): "
                         "tune cp the model's *_full_dpo config (llama3_1/8B_full_dpo), or copy its checkpointer "
                         "block as ref_checkpointer")
    cfg: dict = {"batch_size": int(row["batch"]), "gradient_accumulation_steps": 1,
                 "dtype": "bf16" if prec["half"] == "bf16" and prec["load"] != "float32" else "fp32",
                 "enable_activation_checkpointing": _checkpointing(row),
                 "enable_activation_offloading": str(row.get("activation_offload", "off")) == "on",
                 "compile": str(row.get("compile", "off")) == "on",
                 "dataset": {"packed": str(row.get("packing", "off")) == "on"},
                 "tokenizer": {"max_seq_len": int(row["seq"])}}
    if _dpo(row):
        # no dataset.packed: the DPO recipes instantiate the preference builders (torchtune 0.7.0 @bd2a0fc
        # recipes/lora_dpo_single_device.py _setup_data: config.instantiate(cfg_dataset, tokenizer=...)), whose
        # datasets/_preference.py preference_dataset and _stack_exchange_paired.py take no `packed` and hand every
        # other keyword to datasets.load_dataset (**load_dataset_kwargs), which refuses it
        del cfg["dataset"]
        if str(row.get("packing", "off")) == "on":
            notes.append("packing on: torchtune's preference datasets are not packed (padded_collate_dpo)")
    if prec["master"] or prec["name"].startswith("amp_") or prec["half"] == "fp16":
        notes.append(f"precision {prec['name']}: torchtune trains in one dtype, bf16 or fp32 (dtype: {cfg['dtype']}), "
                     "without autocast or an fp32 master copy")
    opt = str(row["optimizer"])
    if opt in TORCHTUNE_OPTIMIZER:
        component, fused = TORCHTUNE_OPTIMIZER[opt]
        cfg["optimizer"] = {"_component_": component, **({"fused": fused} if fused is not None else {})}
    else:
        notes.append(f"optimizer {opt}: not a torchtune recipe optimizer")
    if method == "full" and not distributed and not _dpo(row):
        cfg["optimizer_in_bwd"] = str(row.get("optimizer_in_backward", "off")) == "on"
    if _dpo(row):  # (the recipes' loss: torchtune/rlhf/loss/dpo.py DPOLoss, beta 0.1)
        cfg["loss"] = {"_component_": "torchtune.rlhf.loss.DPOLoss", "beta": 0.1}
    elif str(row.get("loss", "unfused")) in ("chunked", "linear_chunked", "fused"):
        cfg["loss"] = {"_component_": "torchtune.modules.loss.LinearCrossEntropyLoss"}
    else:
        notes.append("unfused loss: torchtune's recipes take LinearCrossEntropyLoss (chunked); the plan counts the "
                     "full logits")
    if method in ("lora", "qlora"):
        rank, targets = int(row["lora_rank"]), _targets(row)
        cfg["model"] = {"lora_attn_modules": [TORCHTUNE_MODULES[t] for t in targets if t in TORCHTUNE_MODULES],
                        "apply_lora_to_mlp": any(t in targets for t in ("gate_proj", "up_proj", "down_proj")),
                        "lora_rank": rank, "lora_alpha": 2 * rank,
                        # the lora_* builders' lora_dropout (torchtune 0.7.0 llama3_1/8B_lora_single_device.yaml
                        # model.lora_dropout: 0.0; torchtune/modules/peft/lora.py LoRALinear dropout)
                        "lora_dropout": _dropout(row)}
        notes.append(f"LoRA alpha {2 * rank} (2 x rank): not part of the plan; the MLP's three projections go "
                     "together (apply_lora_to_mlp)")
        if _quant(row) == "nf4":  # (qlora, or lora over an nf4 base; _check_base let no other base through)
            # quantize_base: the lora_* builders' argument (torchtune/models/llama3_1/_model_builders.py
            # lora_llama3_1_8b(..., quantize_base: bool = False); qlora_llama3_1_8b = partial(lora_llama3_1_8b,
            # quantize_base=True)): torchao's NF4 base whichever of the two builders the copied config names
            cfg["model"]["quantize_base"] = True
    if method == "freeze":
        notes.append("method freeze: not a torchtune recipe")
    if distributed and str(row["offload"]) != "none":
        cfg["fsdp_cpu_offload"] = True
    if distributed and int(row["zero"]) < 3:
        notes.append(f"ZeRO stage {int(row['zero'])}: torchtune's distributed recipes shard everything (FSDP2, ZeRO-3)")
    if distributed and _degree(row, "cp") > 1:
        # context_parallel_dim: torchtune 0.7.0 recipes/{full,lora}_finetune_distributed.py __init__
        # (cfg.get("context_parallel_dim", 1) into training.ParallelDims; rotate method allgather by default, as planned)
        cfg["context_parallel_dim"] = _degree(row, "cp")
    notes += _parallel_notes(row, model, "torchtune", ("cp",) if "context_parallel_dim" in cfg else ())
    # (the copied configs' optimizer blocks carry torch AdamW's own keys, e.g. `fused: True` in
    # llama3_1/8B_full_single_device.yaml, which bitsandbytes' and torchao's optimizers do not take: a block set
    # key by key keeps them, and instantiating it stops on an unexpected keyword)
    text = _yaml(cfg, _header("torchtune", row, notes, f"tune run {recipe} --config YOUR_MODEL_CONFIG.yaml "
                                                       "(tune cp one of the model's configs, then set these keys; "
                                                       "replace its optimizer block whole, not key by key)"))
    return Export("torchtune", text, notes)


# LitGPT's precision strings (litgpt/finetune/lora.py setup: "bf16-true", "bf16-mixed", "32-true", ...; Fabric's
# -mixed is autocast over fp32 weights, the plan's amp_*) and its quantize modes (Fabric BitsandbytesPrecision)
LITGPT_PRECISION = {"bf16": "bf16-true", "fp16": "16-true", "fp32": "32-true", "amp_bf16": "bf16-mixed",
                    "amp_fp16": "16-mixed"}
# (int4 as bitsandbytes' fp4, as TRL's bnb_4bit_quant_type and LLaMA-Factory's quantization_type write it: LitGPT
# 0.5.13 litgpt/finetune/lora.py setup(quantize: Literal["bnb.nf4", "bnb.nf4-dq", "bnb.fp4", "bnb.fp4-dq",
# "bnb.int8-training"]))
LITGPT_QUANTIZE = {"nf4_nodq": "bnb.nf4", "nf4": "bnb.nf4-dq", "int4_nodq": "bnb.fp4", "int4": "bnb.fp4-dq",
                   "int8": "bnb.int8-training"}
LITGPT_OPTIMIZER = {"adamw": ("torch.optim.AdamW", {}), "adamw_fused": ("torch.optim.AdamW", {"fused": True}),
                    "sgd": ("torch.optim.SGD", {"lr": 1e-3}), "adamw_8bit": ("bitsandbytes.optim.AdamW8bit", {}),
                    "paged_adamw_8bit": ("bitsandbytes.optim.PagedAdamW8bit", {}),
                    "paged_adamw_32bit": ("bitsandbytes.optim.PagedAdamW", {})}


def litgpt(row, repo: str, repo_known: bool, model=None) -> Export:
    """A LitGPT config in its config_hub/finetune keys (`litgpt finetune_lora|finetune_full --config FILE`)."""
    notes = _common_notes(row, repo_known, "litgpt")
    method, name, gpus = str(row["method"]), str(row["precision"]), int(row["gpus"])
    lora = method in ("lora", "qlora")
    cfg: dict = {"checkpoint_dir": f"checkpoints/{repo}", "out_dir": f"out/finetune/{method}-{row['model']}",
                 "precision": LITGPT_PRECISION.get(name, "bf16-true" if "bf16" in name else "16-true"),
                 "devices": gpus, "num_nodes": 1}
    if name not in LITGPT_PRECISION:
        notes.append(f"precision {name} (fp32 master weights): LitGPT trains in one dtype or under autocast "
                     f"(-mixed); written as {cfg['precision']}")
    if lora:
        base = str(row.get("base_precision", "auto"))
        if base == "auto" and method == "qlora":
            base = "nf4_nodq" if str(row.get("recipe", "hf")) == "litgpt" else "nf4"
        if base in ("nf4", "int4") and not _double_quant(row):  # --bnb-double-quant off: LitGPT's bnb.nf4 / bnb.fp4
            base += "_nodq"
        if base in LITGPT_QUANTIZE:
            cfg["quantize"] = LITGPT_QUANTIZE[base]
            if gpus > 1:
                notes.append("quantize on more than one GPU: LitGPT refuses it (NotImplementedError in setup())")
        rank, targets = int(row["lora_rank"]), _targets(row)
        cfg.update({"lora_r": rank, "lora_alpha": 2 * rank, "lora_dropout": _dropout(row),
                    "lora_query": "q_proj" in targets, "lora_key": "k_proj" in targets, "lora_value": "v_proj" in targets,
                    "lora_projection": "o_proj" in targets,
                    "lora_mlp": any(t in targets for t in ("gate_proj", "up_proj", "down_proj")), "lora_head": False})
        notes.append(f"LoRA alpha {2 * rank} (2 x rank): not part of the plan; the MLP's three projections go "
                     "together (lora_mlp)")
    elif method == "freeze":
        notes.append(f"method freeze (last {int(row['freeze_layers'])} layers): not a LitGPT method; written for finetune_full")
    # global_batch_size: micro-batch x every device, since LitGPT's devices are all data-parallel (its FSDPStrategy has
    # no tensor, pipeline or context parallel) and each takes global_batch_size // devices (LitGPT 0.5.13 litgpt/args.py
    # TrainArgs.batch_size, which asserts it > 0): the plan's data-parallel ranks alone (batch x dp) would stop it
    cfg["train"] = {"global_batch_size": int(row["batch"]) * gpus, "micro_batch_size": int(row["batch"]),
                    "max_seq_length": int(row["seq"])}
    dp = _data_parallel(row)
    if dp != gpus:
        notes.append(f"global_batch_size {int(row['batch']) * gpus}: LitGPT runs its {gpus} devices all data-parallel "
                     f"(global_batch_size // devices each); the plan's {dp} data-parallel ranks (tp x pp x cp over the "
                     f"rest) take {int(row['batch']) * dp} a step")
    opt = str(row["optimizer"])
    if "quantize" in cfg and opt != "paged_adamw_32bit":
        notes.append(f"optimizer {opt}: under quantize LitGPT steps bitsandbytes' PagedAdamW whatever the config "
                     "names (instantiate_bnb_optimizer); plan it with --optimizer paged_adamw_32bit")
    if opt in LITGPT_OPTIMIZER:
        cls, init = LITGPT_OPTIMIZER[opt]
        cfg["optimizer"] = {"class_path": cls, **({"init_args": init} if init else {})}
    else:
        notes.append(f"optimizer {opt}: not one LitGPT instantiates from a config")
    if gpus == 1 and _checkpointing(row):
        notes.append("activation checkpointing on one GPU: LitGPT checkpoints only under FSDP (devices > 1)")
    if gpus > 1:
        if not _checkpointing(row):
            notes.append("no activation checkpointing: LitGPT's FSDP checkpoints every block on more than one GPU")
        if int(row["zero"]) < 3:
            notes.append(f"ZeRO stage {int(row['zero'])}: LitGPT's FSDPStrategy shards everything (ZeRO-3)")
    if str(row["offload"]) != "none":
        notes.append(f"offload {row['offload']}: LitGPT's FSDPStrategy runs with cpu_offload=False")
    if str(row.get("loss", "litgpt")) not in ("litgpt", "litgpt_full"):
        notes.append(f"loss {row.get('loss')}: LitGPT computes its own (Fabric's fp32 logits, chunked cross-entropy); "
                     "plan it with --recipe litgpt")
    notes += _parallel_notes(row, model, "litgpt")
    script = "finetune_lora" if lora else "finetune_full"
    text = _yaml(cfg, _header("litgpt", row, notes, f"litgpt download {repo}; litgpt {script} --config litgpt.yaml"))
    return Export("litgpt", text, notes)


EXPORTERS = {"deepspeed": deepspeed, "accelerate-fsdp": accelerate_fsdp, "torchtune": torchtune,
             "llama-factory": llama_factory, "axolotl": axolotl, "trl": trl, "litgpt": litgpt}


def train_export(target: str, row: pd.Series, model: pd.Series) -> Export:
    """The export of one estimated training row; ValueError (bad input) for an inference row."""
    if row["task"] != "train":
        raise ValueError(f"export {target!r} is a training configuration; for --task infer use: serve ... --export "
                         f"{'|'.join(SERVE_TARGETS)}")
    _check_base(target, row)
    _check_precision(target, row)
    _check_objective(target, row)
    repo, known = hf_repo(model.get("source", ""), str(row["model"]))
    return EXPORTERS[target](row, repo, known, model)


# --- serving ---------------------------------------------------------------------------------

# the weights' and KV cache's names in each engine's command: engine/serving.py's tables, which serve's printed
# command reads too (TORCH_DTYPE, VLLM_BNB_WEIGHTS, VLLM_KV_DTYPE, SGLANG_KV_DTYPE, LLAMA_KV_TYPES, OLLAMA_KV_TYPES)


def _serve_header(target: str, row, notes: list[str]) -> list[str]:
    lines = [f"{target} for {row['model']} on {int(row['gpus'])}x {row['gpu']}, planned by llm-planner: "
             f"{int(row['max_model_len']):,} tokens per request, up to {int(row['max_num_seqs'])} running",
             f"keys: {SOURCES[target]}"]
    return lines + [f"not expressed: {n}" for n in notes]


def vllm(row, repo: str, repo_known: bool) -> Export:
    notes = [] if repo_known else [f"model {row['model']}: no Hugging Face repository in the catalog; use its path"]
    pinned = row.get("kv_cache_memory_bytes")
    share = (["--kv-cache-memory-bytes", str(int(pinned))] if pinned is not None and pd.notna(pinned)
             else ["--gpu-memory-utilization", f"{float(row['gpu_memory_utilization']):g}"])
    # serve without --max-model-len: left out, as its command leaves it (vLLM derives the model's context itself;
    # planner/serving.py command_without_context)
    length = [] if bool(row.get("max_model_len_default", False)) else ["--max-model-len", str(int(row["max_model_len"]))]
    args = ["vllm", "serve", repo, *length, *share,
            "--max-num-seqs", str(int(row["max_num_seqs"]))]
    if int(row["gpus"]) > 1:
        args += ["--tensor-parallel-size", str(int(row["gpus"]))]
    p = str(row["precision"])
    if p in TORCH_DTYPE:
        args += ["--dtype", TORCH_DTYPE[p]]
    elif p == "fp8":
        # vLLM's fp8 (features/quantization/fp8.md): a bf16 checkpoint quantized at load; an FP8
        # checkpoint's own quantization_config is read without it (the same weights' bytes)
        args += ["--quantization", "fp8"]
    elif p in VLLM_BNB_WEIGHTS and vllm_has_bitsandbytes([str(row.get("engine_version", "") or "")])[0]:
        args += ["--quantization", "bitsandbytes", *VLLM_BNB_LOAD_FORMAT.split()]  # (engine/serving.py's note)
        notes.append(f"weights {p}: written as in-flight bitsandbytes 4-bit; a pre-quantized AWQ/GPTQ checkpoint "
                     "of the model (vLLM reads its method from the checkpoint) is faster")
    else:
        notes.append(f"weights {p}: serve a checkpoint quantized to {p} (vLLM reads the method from its config)")
    kv = str(row["kv_precision"])
    if kv in VLLM_KV_DTYPE:
        args += ["--kv-cache-dtype", VLLM_KV_DTYPE[kv]]
    elif kv != "auto":
        notes.append(f"KV cache {kv}: no such --kv-cache-dtype in vLLM releases (auto, float16, bfloat16, fp8)")
    draft = _draft(row)
    if draft:  # the draft model the memory was planned with (engine/serving.py command_lines' flags)
        d_repo, d_tp1 = draft
        if str(row.get("engine_generation", "")) == "V0":
            args += ["--speculative-model", d_repo, "--num-speculative-tokens", str(SPEC_TOKENS)]
            args += ["--speculative-draft-tensor-parallel-size", "1"] if d_tp1 else []
        else:
            spec = {"model": d_repo, "num_speculative_tokens": SPEC_TOKENS, **({"draft_tensor_parallel_size": 1} if d_tp1 else {})}
            args += ["--speculative-config", "'" + json.dumps(spec) + "'"]
    if bool(row.get("remote_code", False)):  # (engine/constants.py REMOTE_CODE_MODEL_TYPES)
        args += ["--trust-remote-code"]
    text = "".join(f"# {line}\n" for line in _serve_header("vllm", row, notes)) + _env_prefix(row) + " ".join(args) + "\n"
    return Export("vllm", text, notes)


def sglang(row, repo: str, repo_known: bool) -> Export:
    notes = [] if repo_known else [f"model {row['model']}: no Hugging Face repository in the catalog; use its path"]
    length = [] if bool(row.get("max_model_len_default", False)) else ["--context-length", str(int(row["max_model_len"]))]
    args = ["python", "-m", "sglang.launch_server", "--model-path", repo, *length,
            "--mem-fraction-static", f"{float(row['gpu_memory_utilization']):g}",
            "--max-running-requests", str(int(row["max_num_seqs"]))]
    if int(row["gpus"]) > 1:
        args += ["--tp-size", str(int(row["gpus"]))]
    p = str(row["precision"])
    if p in TORCH_DTYPE:
        args += ["--dtype", TORCH_DTYPE[p]]
    elif p == "fp8":
        args += ["--quantization", "fp8"]  # SGLang server_args.py --quantization fp8
    else:
        notes.append(f"weights {p}: serve a checkpoint quantized to {p} (SGLang reads the method from its config)")
    draft = _draft(row)
    if draft:
        args += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft[0]]
    kv = str(row["kv_precision"])
    if kv in SGLANG_KV_DTYPE:
        old = bool(sglang_before([str(row.get("engine_version", "") or "")], SGLANG_FP8_E4M3_FROM)[0])
        args += ["--kv-cache-dtype", "fp8_e5m2" if old and SGLANG_KV_DTYPE[kv] == "fp8_e4m3" else SGLANG_KV_DTYPE[kv]]
    elif kv not in ("auto", "fp16", "bf16"):
        notes.append(f"KV cache {kv}: not an SGLang --kv-cache-dtype (auto, fp8_e5m2, fp8_e4m3)")
    if bool(row.get("remote_code", False)):  # (engine/constants.py REMOTE_CODE_MODEL_TYPES)
        args += ["--trust-remote-code"]
    text = "".join(f"# {line}\n" for line in _serve_header("sglang", row, notes)) + _env_prefix(row) + " ".join(args) + "\n"
    return Export("sglang", text, notes)


def _env_prefix(row) -> str:
    """The variable the engine needs to start beyond the model's context ('VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 '), where
    serve_export found the row's max_model_len longer than the model's (engine/serving.py LONG_CONTEXT_ENV), else ''."""
    env = row.get("long_context_env")
    return f"{env} " if isinstance(env, str) and env else ""


def _gguf(row) -> str:
    return f"{row['model']}-{str(row['precision']).upper()}.gguf"


def _gpu_layers(row) -> int:
    """-ngl / num_gpu: the planned layers, with the blocks llama.cpp counts but does not run where the user's GGUF holds
    them (serve_export's files: extra_blocks; planner/serving.py gpu_layers_flag)."""
    from planner.serving import gpu_layers_flag
    return gpu_layers_flag(int(row["gpu_layers"]), int(row.get("extra_blocks", 0) or 0))


def _own(row, key: str) -> str | None:
    """A file of the user's the export names (serve_export's files), or None."""
    value = row.get(key)
    return value if isinstance(value, str) and value else None


def llama_server(row, repo: str, repo_known: bool) -> Export:
    own, own_mmproj = _own(row, "model_file"), _own(row, "mmproj_file")
    notes = [] if own else [f"model file {_gguf(row)}: a GGUF of {repo} at {row['precision']} (convert or download it)"]
    slots = int(row["max_num_seqs"])
    args = ["llama-server", "-m", shlex.quote(own) if own else _gguf(row)]
    if own_mmproj:  # the projector read beside the model (--model-file given twice)
        args += ["--mmproj", shlex.quote(own_mmproj)]
    elif float(row.get("vision_params", 0) or 0) > 0:  # a vision-language model's projector (llama-server --mmproj)
        args += ["--mmproj", f"mmproj-{row['model']}-f16.gguf"]
        notes.append(f"projector file mmproj-{row['model']}-f16.gguf: the vision tower, counted in the weights")
    args += ["-ngl", str(_gpu_layers(row)),
            # one context shared by the slots: each request gets max_model_len
            "-c", str(int(row["max_model_len"]) * slots), "-np", str(slots)]
    n_cpu = int(row.get("cpu_moe_layers", 0) or 0)
    if n_cpu > 0:
        everything = float(row.get("expert_host_bytes", 0) or 0) >= float(row.get("expert_bytes", 0) or 0) > 0
        args += ["--cpu-moe"] if everything else ["--n-cpu-moe", str(n_cpu)]
    kv = str(row["kv_precision"])
    if kv in LLAMA_KV_TYPES:  # (auto and fp16: llama.cpp's default f16)
        args += ["-ctk", LLAMA_KV_TYPES[kv], "-ctv", LLAMA_KV_TYPES[kv]]
        if LLAMA_KV_TYPES[kv].startswith("q"):
            args += ["-fa", "on"]  # a quantized V cache needs flash attention (llama-context.cpp)
        if kv == "fp8":
            notes.append("KV cache fp8: llama.cpp has no fp8 cache; written as q8_0 (the same bytes)")
    if int(row["gpus"]) > 1:
        args += ["-sm", "layer"]
    ts = row.get("tensor_split")
    if ts is not None and pd.notna(ts) and str(ts):  # --fit's layout where it is not the default one (engine/serving.py)
        args += ["-ts", str(ts)]
    if _draft(row):  # the draft GGUF with every layer on the GPU (-md, -ngld; its context is the target's, no -cd)
        d_own = _own(row, "draft_file")
        d_file = shlex.quote(d_own) if d_own else f"{row['draft_model']}-{str(row['precision']).upper()}.gguf"
        args += ["-md", d_file, "-ngld", "99"]
        if not d_own:
            notes.append(f"draft file {d_file}: a GGUF of the draft model at {row['precision']}")
    text = "".join(f"# {line}\n" for line in _serve_header("llama-server", row, notes)) + " ".join(args) + "\n"
    return Export("llama-server", text, notes)


def ollama(row, repo: str, repo_known: bool) -> Export:
    """A Modelfile, with the server's environment in its comments (Ollama reads those at `ollama serve`)."""
    from planner.serving import ollama_from  # (the FROM path rule the printed command uses)
    own = ollama_from(_own(row, "model_file")) if _own(row, "model_file") else None
    notes = [] if own else [f"FROM {_gguf(row)}: a GGUF of {repo} at {row['precision']} (or an ollama library tag of it)"]
    env = [f"OLLAMA_NUM_PARALLEL={int(row['max_num_seqs'])}"]
    kv = str(row["kv_precision"])
    if kv in OLLAMA_KV_TYPES:
        env += ["OLLAMA_FLASH_ATTENTION=1", f"OLLAMA_KV_CACHE_TYPE={OLLAMA_KV_TYPES[kv]}"]
    if int(row.get("cpu_moe_layers", 0) or 0) > 0:
        notes.append("routed experts in host RAM (llama.cpp's --n-cpu-moe): no Ollama option")
    lines = _serve_header("ollama", row, notes)
    lines += [f"server: {' '.join(env)} ollama serve", f"then: ollama create {row['model']}{OLLAMA_CREATED_SUFFIX} -f Modelfile"]
    text = ("".join(f"# {line}\n" for line in lines) + f"FROM {own or './' + _gguf(row)}\n"
            f"PARAMETER num_ctx {int(row['max_model_len'])}\nPARAMETER num_gpu {_gpu_layers(row)}\n")
    return Export("ollama", text, notes)


SERVE_EXPORTERS = {"vllm": vllm, "sglang": sglang, "llama-server": llama_server, "ollama": ollama}


def _draft(row) -> tuple[str, bool] | None:
    """(the draft's repository, its tensor parallel is 1 on several GPUs) of a row planned with a draft
    model (serve --draft-model), else None."""
    draft = row.get("draft_model")
    if draft is None or (isinstance(draft, float) and np.isnan(draft)) or str(draft) in ("", "None"):
        return None
    d_tp = row.get("draft_tensor_parallel_size")
    tp1 = d_tp is not None and not (isinstance(d_tp, float) and np.isnan(d_tp)) and int(d_tp) == 1 and int(row["gpus"]) > 1
    repo = row.get("draft_repo")
    return (str(repo) if isinstance(repo, str) and repo else str(draft)), tp1


def serve_export(target: str, row: pd.Series, model: pd.Series, draft: pd.Series | None = None,
                 files: dict | None = None) -> Export:
    """The export of one serving row; ValueError when --engine is another engine. draft: the draft
    model's catalog row, where the row was planned with one (its repository goes in the flags). files: the user's own
    files it names (planner/serving.py files_named: model_file, mmproj_file, model_folder, draft_file) in place of a
    download's names."""
    engine = SERVE_TARGETS[target]
    if row["engine"] != engine:
        raise ValueError(f"export {target!r} launches --engine {engine}, not {row['engine']!r}: the memory settings "
                         f"are the engine's; accepted: --engine {engine} --export {target}")
    repo, known = hf_repo(model.get("source", ""), str(row["model"]))
    row = row.copy()  # what the builders read beside the serving row: the model's vision tower, the draft's repo
    row["vision_params"] = model.get("vision_params", 0)
    row["remote_code"] = _remote_code(model)
    # beyond the model's context (let through by --allow-long-context): vLLM and SGLang start only with their variable,
    # as the printed command writes it (engine/serving.py long_context_env)
    row["long_context_env"] = long_context_env([engine], [row["max_model_len"]], [model.get("max_context")])[0]
    if draft is not None:
        row["draft_repo"] = hf_repo(draft.get("source", ""), str(draft.name))[0]
    for key, path in (files or {}).items():
        row[key] = path
    if (files or {}).get("model_folder"):  # a safetensors folder of the user's: vLLM's and SGLang's model path
        repo, known = shlex.quote(files["model_folder"]), True
    return SERVE_EXPORTERS[target](row, repo, known)
