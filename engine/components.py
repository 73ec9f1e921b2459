"""The physics: what each memory component of a GPU holds, phase by phase.

Every function here works on whole columns, one value per *memory configuration* (a
scenario's every setting but the GPU, the headroom, batch and seq; engine/executor.py groups
the rows): `Inputs` holds the model's shape and the scenario's settings, `totals` the
whole-model parameter counts and bytes before any split, and one function per component
returns its bytes in each phase that holds it, as {phase: Part(fixed, shard, per_token)}
(engine/memory.py: bytes = fixed + shard / dp + per_token x tokens). `physics` runs them all
and assembles the phases; the executor evaluates them per row and solves the fit.

The expressions keep the order of operations of the engine before this split, term by term,
so the numbers are bit-identical to it. tests/test_engine_structure.py runs each component
alone against textbook bytes; tests/test_engine_properties.py compares one row against many.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

import engine.constants as C
import engine.optimizers as optimizers
from engine.memory import (
    INFER_PHASES,
    PHASE_COMPONENTS,
    TRAIN_PHASES,
    Part,
    assemble,
    dense_experts_prefill_values,
    is_zero,
    layer_activation_bytes,
    layer_backward_transient_bytes,
    rms_norm_saved_bytes,
    gemma_norm_bytes,
    moe_routing_bytes,
    qk_norm_bytes,
    softcap_logits_bytes,
    logits_bytes,
    stack_logits_bytes,
)
from engine.stacks import (
    DPO_FULL_LOGITS,
    DPO_TRL_HEAD,
    LOSS_CHUNKS,
    MODULE_CHECKPOINT_INPUTS,
    OFFLOAD_LAYERS_IN_FLIGHT,
    SELECTIVE_EVERY,
    TRL_TILE_TOKENS,
    TRL_TILE_VOCAB,
)
from engine.params import (
    ARCH_DEFAULTS,
    architecture_counts,
    block_lead,
    block_tail,
    LINEAR_ATTENTION_FIELDS,
    MAMBA_FIELDS,
    kv_elements_per_token,
    linear_attention_state,
    lora_module_dims,
    model_types,
    peft_moe_patterns,
    parse_lora_targets,
)
from engine.frames import column_array, column_index, column_numbers, frame_memo
from engine.scenarios import View, normalize

MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "vocab_size", "tied_embeddings", "params", "max_context")


@dataclass(frozen=True, eq=False)
class Inputs:
    """Per memory configuration (arrays of equal length): the model's shape and the scenario's
    settings, as the formulas read them. Built by `inputs()`."""

    # model shape (floats)
    h: np.ndarray        # hidden size
    f: np.ndarray        # intermediate (MLP) size
    L: np.ndarray        # decoder layers
    a: np.ndarray        # attention heads
    kvh: np.ndarray      # key/value heads
    d: np.ndarray        # head dim
    V: np.ndarray        # vocabulary
    tied: np.ndarray     # tied embeddings (bool)
    N: np.ndarray        # parameters
    qd: np.ndarray       # attention width a x d
    kvd: np.ndarray      # key/value width kvh x d
    layer_lin: np.ndarray  # a decoder layer's linear weights
    layer_all: np.ndarray  # a decoder layer's weights (norms, q/k/v biases too)
    n_lin: np.ndarray    # every decoder layer's linear weights
    model: np.ndarray    # the model's row in the catalog's models table
    active: np.ndarray   # parameters one token uses (= N for a dense model; MoE: the routed experts' share)
    kv_window: np.ndarray  # KV bytes per token per GPU of the sliding-window layers (0 unless kv_policy windowed)
    window: np.ndarray   # their window in tokens (0: none)
    # hybrid linear attention (Qwen3-Next, Qwen3.5): the linear-attention layers' state per sequence per GPU, bytes
    # (inference rows; 0 elsewhere): kept whatever the sequence's length (engine/executor.py RowTerms.kv_saving)
    kv_state: np.ndarray
    # ... and a Gated DeltaNet layer's prefill working set per token under transformers (0 for other models): the part
    # every tensor-parallel rank holds and the heads' part, which tp divides (linear_prefill_bytes)
    linear_work: np.ndarray
    linear_work_heads: np.ndarray
    ep: np.ndarray       # expert parallel (1: experts split like the rest)
    expert_params: np.ndarray  # the routed experts' parameters (0 for a dense model)
    # parallelism
    gpus: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray       # data-parallel ranks
    mp: np.ndarray       # model-parallel split of the weights, tp x pp
    zero: np.ndarray     # ZeRO stage
    off_opt: np.ndarray  # optimizer states (and gradients) offloaded to the host
    off_all: np.ndarray  # parameters offloaded too
    gc: np.ndarray       # gradient checkpointing
    # task and method (bool)
    train: np.ndarray
    infer: np.ndarray
    full: np.ndarray
    lora: np.ndarray     # LoRA or QLoRA
    qlora: np.ndarray
    freeze: np.ndarray
    k_layers: np.ndarray  # the layers freeze trains (at most L)
    # precision: bytes per value
    wb: np.ndarray       # stored weights of the precision
    wb_trained: np.ndarray  # trained weights (LoRA adapters: fp32)
    gb: np.ndarray       # gradients (LoRA adapters: fp32)
    master: np.ndarray   # fp32 master copy per trained weight (mixed_*; none for LoRA)
    sdb: np.ndarray      # optimizer states' dtype (LoRA adapters: fp32)
    acb: np.ndarray      # autocast's 16-bit weight copies (0 without autocast)
    autocast: np.ndarray  # (bool)
    R: np.ndarray        # residual stream
    M: np.ndarray        # matmul outputs
    act_b: np.ndarray    # inference activations and the 16-bit parts of quantized weights
    lin_bits: np.ndarray  # inference: bits per linear weight (NaN for GGUF)
    gguf_bits: np.ndarray  # inference: GGUF bits per weight (NaN otherwise)
    int8: np.ndarray     # bitsandbytes int8 inference weights (bool)
    base_quant: np.ndarray  # LoRA / QLoRA over a quantized frozen base (bool)
    base_bits: np.ndarray  # that base's bits per linear weight
    kv_b: np.ndarray     # KV cache
    kv_elems: np.ndarray  # values per token in the KV cache over all layers (full length; MLA per the policy)
    mla: np.ndarray      # the cache holds MLA's latent (one copy per tensor-parallel rank, not split by heads)
    last_only: np.ndarray  # generate() keeps the last position's logits only (bool)
    # LoRA
    r: np.ndarray        # rank (0 without adapters)
    flags: dict          # module -> 1.0 where adapted
    in_out: np.ndarray   # sum of (in + out) over the adapted modules
    # optimizer
    state_count: np.ndarray
    temp_count: np.ndarray
    adam8: np.ndarray    # bitsandbytes 8-bit AdamW (paged or not)
    paged: np.ndarray    # paged 8-bit AdamW, training
    adafactor: np.ndarray
    # the software stack (issue 13, engine/stacks.py; resolved by engine/rules.py). The defaults are
    # the stack the engine always modelled (recipe hf), so a caller that builds Inputs itself keeps it.
    adapter16: np.ndarray | bool = False  # LoRA adapters (and their gradients, states) in 16-bit
    loss_kind: dict | None = None         # {'chunked', 'linear_chunked', 'fused', 'parallel', 'compiled', 'litgpt',
                                          #  'litgpt_full'} -> mask (None: unfused)
    legacy_logits: np.ndarray | bool = False  # transformers' older in-model fp32 upcast of the logits
    compiled: np.ndarray | bool = False   # torch.compile (only its documented loss effect is modelled)
    ckpt_selective: np.ndarray | bool = False  # every SELECTIVE_EVERY-th layer checkpointed
    ckpt_op: np.ndarray | bool = False  # torchtitan's op-level selective checkpointing (every other matmul kept)
    ckpt_module: np.ndarray | bool = False  # NeMo Automodel's per-module checkpointing (four inputs kept per layer)
    liger: np.ndarray | bool = False  # Liger's RMSNorm and SwiGLU kernels (engine/stacks.py liger), training
    act_offload: np.ndarray | bool = False  # saved activations (or checkpointed inputs) in host RAM
    opt_bwd: np.ndarray | bool = False    # optimizer step in backward: no full set of gradients
    paged32: np.ndarray | bool = False    # bitsandbytes paged 32-bit AdamW, training
    paged_small: np.ndarray | float = 0.0  # trainable values in tensors bitsandbytes does not page (< 1e5)
    ao8: np.ndarray | bool = False        # torchao AdamW8bit (optimizer adamw_8bit_torchao), training
    # mixture of experts (issue 12): routed experts per MoE layer, experts per token, share of MoE layers
    n_experts: np.ndarray | float = 0.0
    k_experts: np.ndarray | float = 0.0
    moe_share: np.ndarray | float = 0.0
    shared_gate: np.ndarray | float = 0.0  # 1 where a MoE layer's shared expert is scaled by a sigmoid gate (Qwen2-MoE)
    # Gemma's RMSNorm (issue 12): (x * (1 + w)) in fp32 (1 where the model is a Gemma); norms per layer
    gemma_norm: np.ndarray | float = 0.0
    norms: np.ndarray | float = 2.0
    qk_norm: np.ndarray | float = 0.0  # 1 where q and k are RMS-normalized per head (Qwen3, Gemma 3)
    # hybrid models' training (hybrid_training_terms): the Gated DeltaNet and Mamba2 layers that replace attention,
    # what they save per token summed over them (trained and frozen weights), their input projections (summed) and the
    # widths their out_proj reads (summed)
    hyb_layers: np.ndarray | float = 0.0
    hyb_saved_full: np.ndarray | float = 0.0
    hyb_saved_frozen: np.ndarray | float = 0.0
    hyb_in_projs: np.ndarray | float = 0.0
    hyb_out_width: np.ndarray | float = 0.0
    # Nemotron-H's blocks (hybrid_training_terms): those with an MLP alone, those with a mixer alone, 1 where its MLPs
    # are up and down alone (relu2)
    blk_mixer_free: np.ndarray | float = 0.0
    blk_mlp_free: np.ndarray | float = 0.0
    blk_ungated: np.ndarray | float = 0.0
    # Falcon-H1's mixers beside attention (hybrid_training_terms): how many, what they save (trained and frozen)
    hyb_par_layers: np.ndarray | float = 0.0
    hyb_par_saved_full: np.ndarray | float = 0.0
    hyb_par_saved_frozen: np.ndarray | float = 0.0
    # and, for freeze tuning, how many of each kind the last k blocks hold (engine/params.py block_tail; NaN: unknown)
    blk_tail: dict | None = None
    # and, for LoRA without checkpointing on them, how many of each kind run before the first adapted block (block_lead)
    blk_lead: dict | None = None
    lora_every: np.ndarray | float = 0.0  # 1 where a LoRA row names every target (peft's all-linear)
    pw_gu: np.ndarray | float = 0.0  # 1 where those experts' gate_up_proj is adapted
    pw_dn: np.ndarray | float = 0.0  # 1 where their down_proj is
    pw_router: np.ndarray | float = 0.0  # 1 where the router's gate.weight is (all-linear)
    pw_fe: np.ndarray | float = 0.0  # an expert's width where peft's ParamWrapper adapts fused experts (fused_moe_lora_in_out)
    hyb_lora_in_out: np.ndarray | float = np.nan  # every layer's LoRA (in + out) where hybrid_lora_in_out covers it
    # the input width of down_proj's adapter where it is not the MLP's width f (None: f): a mixture of experts peft leaves
    # unconverted adapts its shared expert and dense MLPs, never the routed experts f counts (inputs(): down_f)
    down_f: np.ndarray | None = None
    # ZeRO-3 wraps only the decoder layers and the root (HF Trainer / accelerate FSDP2, as measured), so
    # the root unit holds the embedding and lm_head; torchtune shards them as units of their own
    # (github.com/pytorch/torchtune at 0031bfb, recipes/configs/llama3_1/70B_full.yaml:
    # `custom_sharded_layers: ['tok_embeddings', 'output']`), not measured: the previous expression
    fsdp_root: np.ndarray | bool = True
    # ZeRO-3 run by DeepSpeed's stage-3 optimizer (engine/constants.py DS_ZERO3_RECIPES): its own buffers
    # beside the sharding (`deepspeed_zero3`)
    ds_zero3: np.ndarray | bool = False
    # ZeRO-3 run as FSDP: training rows at stage 3 outside DS_ZERO3_RECIPES (the engine's ZeRO-1/2 are DeepSpeed's
    # stage-1/2 optimizer, `deepspeed_zero12`): where FSDP's flat parameters and no_sync accumulation apply
    fsdp: np.ndarray | bool = False
    softcap: np.ndarray | float = 0.0  # 1 where the logits are softcapped (Gemma 2: final_logit_softcapping)
    kbit_prep: np.ndarray | bool = False  # QLoRA under peft prepare_model_for_kbit_training + bf16 autocast
    # the attention's path (issue 12, engine/stacks.py padding / attention): a padded batch under SDPA
    # (transformers materializes the (batch, 1, seq, seq) mask and repeats K, V to every head), or
    # eager attention (the scores kept for backward; a prefill's scores as their own phase)
    masked: np.ndarray | bool = False
    eager: np.ndarray | bool = False
    # gpt-oss's eager attention (transformers 5.24 modeling_gpt_oss.py eager_attention_forward): the scores
    # with the sinks' column, softmax in their own 16-bit dtype, so backward keeps that softmax alone (traced:
    # `_softmax` [1, 64, 1024, 1025] bf16 per layer), not an fp32 softmax and its cast as Gemma 2's path does
    eager_bf16: np.ndarray | bool = False
    # gpt-oss's experts (transformers 5.24 modeling_gpt_oss.py GptOssExperts._apply_gate): a clamped SwiGLU,
    # gate.clamp, up.clamp, gate * sigmoid(gate * alpha), (up + 1) * glu, over the fused gate_up output
    clamped_glu: np.ndarray | bool = False
    dense_experts_fe: np.ndarray | float = 0.0  # the expert width where every expert runs every token (Llama 4), else 0
    fp32_router: np.ndarray | bool = False  # the router's weights reach the experts in fp32 (FP32_ROUTER_WEIGHTS_MODEL_TYPES)
    # the parameters of the layers freeze trains (k_layers): k x layer_all, or the last k layers as they are where a mixture of experts has
    # dense layers first or between (engine/params.py _last_layers)
    freeze_params: np.ndarray | float = 0.0
    # the masks transformers builds per forward: one per layer type (2 for a model with both
    # sliding-window and full-attention layers: Gemma 2/3, gpt-oss; traced on Gemma 2, two masks)
    mask_types: np.ndarray | float = 1.0
    # (issue 28) transformers' SDPA with sliding-window layers: their window in tokens, from which on a
    # prefill builds and holds a (1, 1, seq, seq) bool mask and a training step's sliding-window layers keep
    # the mask and K/V repeated to every head (0: none; `sliding_mask_window`); sw_share: the share of the
    # layers that slide
    mask_window: np.ndarray | float = 0.0
    sw_share: np.ndarray | float = 0.0
    # the training loop (issue 28, engine/stacks.py loop / use_cache): the step's outputs (the logits,
    # and the KV cache the forward built) kept through backward and the optimizer step (loop manual),
    # and a KV cache built in the training forward (use_cache on; under checkpointing only where it is
    # applied outside transformers, engine/stacks.py use_cache)
    kept_outputs: np.ndarray | bool = False
    train_cache: np.ndarray | bool = False
    # FSDP1's flat parameters (engine/stacks.py flat_params): the weights are views while a unit runs (autocast
    # caches no cast of them), and in a mixed flat parameter a LoRA row's frozen layer weights get gradients
    flat_views: np.ndarray | bool = False
    frozen_grads: np.ndarray | bool = False
    # gradient accumulation (engine/stacks.py accum_sync last): earlier micro-batches' gradients alive in the next
    # ones' forward and backward (unsharded under FSDP's no_sync, ZeRO-3 outside the DeepSpeed recipes)
    accum_last: np.ndarray | bool = False
    # the routed experts' matrices (gate, up, down: no biases), what mxfp4 checkpoints quantize (issue 27)
    expert_linear: np.ndarray | float = 0.0
    experts_only: np.ndarray | bool = False   # the precision quantizes only the routed experts (mxfp4)
    gguf_expert_bits: np.ndarray | float = np.nan  # GGUF mxfp4_moe: the experts' bits (the rest: gguf_bits)
    gguf_linear_bits: np.ndarray | float = np.nan  # GGUF nvfp4_gguf: the decoder linears' bits (the rest: gguf_bits)
    # beside the language model (issue 25): the vision tower + projector's parameters, loaded in 16-bit
    vision: np.ndarray | float = 0.0
    # the checkpoint's own bytes of the language model's weights, where the row's precision is the
    # checkpoint's (a GGUF's tensor table, safetensors headers); NaN: the arithmetic decides
    stored_bytes: np.ndarray | float = np.nan
    # issue 27: context parallel (the sequence split over cp GPUs, training) and sequence parallel
    # beside tensor parallel (seq_split: tp where it is on, else 1); torchao Float8 linears
    cp: np.ndarray | float = 1.0
    seq_split: np.ndarray | float = 1.0
    float8: np.ndarray | bool = False
    # issue 28: transformers < 4.36's tuple cache in generate(): two caches at the last decode step
    kv_copies: np.ndarray | float = 1.0
    # issue 27 item 4: a bitsandbytes base whose matmuls keep their inputs for backward (LLM.int8
    # always; NF4 before bitsandbytes 0.43.2, bnb_4bit_input kept), and one that dequantizes a whole
    # 16-bit weight per matmul (both bitsandbytes kinds)
    kbit_keeps_input: np.ndarray | bool = False
    bnb_base: np.ndarray | bool = False
    bnb_experts: np.ndarray | float = 0.0  # 1 where bitsandbytes leaves the fused experts unquantized (BNB_FUSED_EXPERTS)
    # the fused experts quantized at load and dequantized on access (engine/stacks.py quantize_experts on, axolotl's
    # quantize_moe_experts): a MoE layer's whole experts in 16 bits while it runs
    experts_dequant: np.ndarray | bool = False
    # a bitsandbytes 4-bit base's QuantState, bits per quantized weight (its bits less the packed 4:
    # 0.127 nf4, 0.5 nf4_nodq; 0 for every other base and for torchtune's torchao NF4), which ZeRO-3 / FSDP
    # neither shard nor offload (engine/components.py `_quant_state_bytes`)
    qstate_bits: np.ndarray | float = 0.0
    # issue 27 item 3: the optimizers of engine/optimizers.py (C.NEW_OPTIMIZERS), name -> mask (None: none
    # of them), and the llama-factory recipe, whose Muon (its third_party/muon) steps AdamW per tensor
    opt_kind: dict | None = None
    lf_muon: np.ndarray | bool = False
    galore_rank: np.ndarray | float = C.GALORE_RANK  # GaLore's projection rank (as engine/rules.py decided it)
    # LoRA dropout on (lora_dropout > 0 on a lora / qlora row): every adapted module keeps a dropout mask
    # and lora_A the dropout's output (engine/memory.py layer_activation_bytes `dropout`)
    lora_dropout: np.ndarray | bool = False
    # recipe litgpt (engine/stacks.py `recipe litgpt`): LitGPT's own GPT, whose attention repeats K and V to
    # every head before SDPA (and, with as many KV heads as heads, keeps the fused qkv output through V's
    # view); its lm_head among the linears Fabric's BitsandbytesPrecision quantizes; and the bytes per
    # weight a 4-bit matmul's dequantization holds at once (2: the 16-bit weight; 4 under Lightning's
    # _Linear4bit, quantized from fp16 and cast to the bf16 input: fp16 + bf16). Its untied head is in
    # `tied` and `N` (V x h more parameters where the catalog model ties them).
    litgpt_model: np.ndarray | bool = False
    head_quant: np.ndarray | bool = False
    dequant_b: np.ndarray | float = 2.0
    # inference libraries' buffers (engine/stacks.py int4_kernel, rope_cache; `int4_kernel_parts`): the
    # largest decoder linear's values (in x out), an int4 row under AutoAWQ's fused modules, an int4 row
    # under AutoGPTQ's exllama kernels, an nf4 inference row (bitsandbytes), transformers' logits.float()
    # in an inference forward (logits_upcast model), and the per-layer rotary caches' length (0: none)
    lin_max: np.ndarray | float = 0.0
    awq_fused: np.ndarray | bool = False
    exllama: np.ndarray | bool = False
    bnb_infer: np.ndarray | bool = False
    infer_upcast: np.ndarray | bool = False
    rope_len: np.ndarray | float = 0.0
    # DeepSpeed ZeRO-1/2 (engine/components.py `deepspeed_zero12`): the optimizer DeepSpeed steps has one
    # parameter group (its own, built from the config's optimizer section: engine/constants.py
    # DS_CONFIG_OPTIMIZERS; or LoRA's adapters, all in the Trainer's weight-decay group), not the Trainer's two
    ds_one_group: np.ndarray | bool = True
    # preference tuning (objective dpo, `dpo_parts`): the rows, those that hold a frozen copy of the weights, those
    # whose reference forward runs in the step (not precomputed), those whose per-token log-probs come from TRL's
    # fused LM head (engine/stacks.py DPO_TRL_HEAD), and those whose own DPO step holds the whole fp32 logits
    # (LLaMA-Factory's, torchtune's: DPO_FULL_LOGITS)
    dpo: np.ndarray | bool = False
    dpo_copy: np.ndarray | bool = False
    dpo_ref_forward: np.ndarray | bool = False
    dpo_trl_head: np.ndarray | bool = False
    dpo_logits: np.ndarray | bool = False


@dataclass(frozen=True, eq=False)
class Totals:
    """Per memory configuration, the whole model before any split: parameters and bytes."""

    trainable: np.ndarray  # trained parameters
    weights: np.ndarray    # bytes of every weight (trained and frozen)
    gradients: np.ndarray
    states: np.ndarray     # optimizer states (and master weights)
    temps: np.ndarray      # optimizer step temporaries
    experts: np.ndarray    # bytes of the routed experts' weights (their share of `weights`)


def _fp32_adapter_cast(x: "Inputs", adapters) -> np.ndarray:
    """Rows (of `adapters`, where adapters are on) whose fp32 peft adapters on a 16-bit base, outside autocast, cast
    each adapted projection's input to fp32 (4 bytes a value kept: peft's lora_A takes x.to(lora_A.weight.dtype))."""
    return adapters & (x.R == 2) & ~x.autocast & ~np.asarray(x.adapter16, dtype=bool)


def _every_target(flags: dict):
    """1 where every LoRA target module is flagged, else 0: the product of the flags. A list of the seven names is
    'all' (engine/rules.py canonical_targets), which the planner's configs write as peft's all-linear (planner/exports.py),
    so it is read as all-linear: also the projections of other names that all-linear reaches (a hybrid's mixers,
    Granite 4.0-H's shared_mlp, a router, Mixtral's experts), which peft adapts for the shorthand alone
    (peft 0.21.2 _resolve_string_target_modules; an explicit list of the seven on Mixtral 8x7B adapts no expert:
    tests/data/measured_moe_lora.csv, estimated +5.2%, on the safe side)."""
    every = 1.0
    for mod in C.LORA_MODULES:
        every = every * flags[mod]
    return every


def inputs(view: View, models: pd.DataFrame) -> Inputs:
    """The Inputs of every group of a normalized scenario frame (one value per group of `view`)."""
    mv = view
    midx = mv.index_in("model", column_index(models, "id")) if mv.size else np.zeros(0, dtype=int)
    m = {k: column_array(models, k)[midx].astype(float) for k in MODEL_FIELDS}
    h, f, L = m["hidden_size"], m["intermediate_size"], m["num_layers"]
    a, kvh, d, V = m["num_heads"], m["num_kv_heads"], m["head_dim"], m["vocab_size"]
    qd, kvd = a * d, kvh * d
    layer_lin = h * qd + 2 * h * kvd + qd * h + 3 * h * f
    # Qwen2-style q/k/v biases (catalog column qkv_bias, absent or false for Llama)
    qkv_bias = (column_array(models, "qkv_bias", False).astype(bool)[midx] if "qkv_bias" in models
                else np.zeros(mv.size, dtype=bool))
    layer_all = layer_lin + 2 * h + np.where(qkv_bias, qd + 2 * kvd, 0.0)
    n_lin = L * layer_lin
    # Beyond the dense Llama layout (engine/params.py architecture_counts): MoE, MLA, extra norms
    # and biases. A model without any of it keeps the expressions above (bit-identical).
    arch = {k: (column_array(models, k, v)[midx] if k in models else np.full(mv.size, v))
            for k, v in ARCH_DEFAULTS.items()}
    arch.update(m, qkv_bias=qkv_bias)
    freeze_k = np.minimum(mv.values("freeze_layers").astype(float), L)
    train = mv.mask("task", "train")
    freeze = train & mv.mask("method", "freeze")
    # a hybrid's layers in order (the catalog's block_pattern): which layers freeze tuning's last k are
    tail = None
    if "block_pattern" in models:
        patterns = frame_memo(models, ("text", "block_pattern"),
                              lambda: models["block_pattern"].fillna("").astype(str).to_numpy(object))[midx]
        tail = block_tail(np.where(freeze, patterns, ""), freeze_k) if (patterns != "").any() else None
    else:
        patterns = None
    counts = architecture_counts(arch, last_k=freeze_k, tail=tail)
    special = np.zeros(mv.size, dtype=bool)
    for k, v in ARCH_DEFAULTS.items():
        if k not in ("sliding_window", "sliding_window_layers", "vision_params"):
            special |= arch[k] != v
    active = m["params"]
    expert_params = np.where(special, counts["experts"], 0.0)
    # (gate, up and down; up and down alone for Nemotron 3 Nano's ungated experts: engine/params.py architecture_counts)
    expert_linear = np.where(special, counts["moe_layers"] * arch["num_experts"] * np.where(arch["mlp_ungated"], 2, 3)
                             * h * arch["expert_intermediate_size"], 0.0)
    mla = arch["kv_lora_rank"] > 0
    if special.any():
        # every layer's weights on average (what freeze trains per layer, ZeRO-3 gathers, ...);
        # MoE activations go through the experts a token uses: experts_per_token x their width
        # plus the shared experts' (an approximation for MoE training, stated in the README)
        n_lin = np.where(special, counts["linear"], n_lin)
        layer_lin = np.where(special, counts["linear"] / L, layer_lin)
        layer_all = np.where(special, counts["layer_mean"], layer_all)
        moe = arch["num_experts"] > 0
        f = np.where(moe, arch["experts_per_token"] * arch["expert_intermediate_size"]
                     + arch["shared_intermediate_size"], f)
        active = np.where(moe, counts["active"], active)
    # KV cache under the policy (engine/scenarios.py KV_POLICIES; default engine/rules.py)
    windowed = mv.mask("kv_policy", "windowed") if "kv_policy" in mv.frame else np.ones(mv.size, dtype=bool)
    full_policy = mv.mask("kv_policy", "full") if "kv_policy" in mv.frame else np.zeros(mv.size, dtype=bool)
    kv_elems = kv_elements_per_token(arch, full_policy)
    # (a model whose every layer slides keeps them all: llama.cpp converts Mistral's and Qwen2's to its llama / qwen2
    # archs, whose load_hparams read no sliding window (src/llama-model.cpp LLM_ARCH_LLAMA), and mlx-lm's llama.py
    # builds plain KVCaches; its SWA cache is the interleaved models' (llama-kv-cache-iswa.cpp): Gemma 2/3, gpt-oss, ...)
    sliding = arch["sliding_window_layers"].astype(float)
    win_layers = np.where(windowed & ~mla & (sliding < np.asarray(L, dtype=float)), sliding, 0.0)
    # the tokens a window layer keeps under "windowed": llama.cpp's SWA cache, the window + a micro-batch padded to 256
    # (engine/constants.py llama_swa_cells; MLX's RotatingKVCache holds its window plus a prefill step's tokens
    # while it prefills, and transformers' sliding layer window - 1 after it: the larger llama.cpp count stands for all)
    window = np.where(win_layers > 0, C.llama_swa_cells(arch["sliding_window"]), 0.0)

    gpus = mv.values("gpus").astype(float)
    tp = mv.values("tp").astype(float)
    pp = mv.values("pp").astype(float)
    full = train & mv.mask("method", "full")
    lora = train & mv.mask("method", "lora", "qlora")
    qlora = train & mv.mask("method", "qlora")

    wb = mv.lookup("precision", C.WEIGHT_BYTES, 0.0)
    acb = mv.lookup("precision", C.AUTOCAST_COPY_BYTES, 0.0)
    act_b = mv.lookup("precision", C.INFER_ACT_BYTES, 2.0)
    base_auto = mv.mask("base_precision", "auto")
    base_bits = mv.lookup("base_precision", {**C.LINEAR_BITS, **C.GGUF_BITS, **C.BASE_ONLY_BITS}, 16.0)
    kv_b = mv.lookup("kv_precision", C.KV_BYTES, np.nan)
    flags = _lora_flags(mv)
    every_target = _every_target(flags)  # (all-linear, before any name is taken out for a model's own layout below)
    if np.any(arch["mlp_ungated"]):  # (Nemotron-H's MLPs are up_proj and down_proj alone: no gate_proj to adapt)
        flags["gate_proj"] = np.where(np.asarray(arch["mlp_ungated"], dtype=bool), 0.0, flags["gate_proj"])
    # the models' families, read once per model (not per row): Gemma's norms, Gemma 2's softcapped logits, peft's
    # conversion of a mixture of experts (as their transformers model_type: a catalog model and the same model read
    # from its config.json alike)
    families = models["family"] if "family" in models else [""] * len(models)
    mtype = frame_memo(models, "model_types", lambda: model_types(families))
    # a mixture of experts whose LoRA config peft converts (fused_moe_lora_in_out): no gate/up/down nn.Linear adapter
    # is left (the experts' are ParamWrappers, Inputs.pw_*), so every term below reads its flags without them
    named = flags
    pattern = frame_memo(models, "peft_moe_patterns", lambda: peft_moe_patterns(
        families, mtype, models["num_experts"] if "num_experts" in models else np.zeros(len(models))))[midx]
    converted = (pattern != "") & lora
    # Nemotron-H's LoRA without checkpointing: the blocks before the first adapted one run outside autograd and keep
    # nothing (block_lead); its Mamba2 mixers are adapted under all-linear alone, which peft refuses there. Not under
    # peft's prepare_model_for_kbit_training (kbit_prep), whose enable_input_require_grads makes the embedding's output
    # require grad, so that every block keeps its tensors (peft 0.21.2 utils/other.py lines 221-233, under its default
    # use_gradient_checkpointing=True)
    lead = None
    if patterns is not None:
        lead_rows = ((patterns != "") & (mtype == "nemotron_h")[midx] & lora
                     & ~np.asarray(mv.values("grad_checkpointing"), dtype=bool)
                     & ~(_mask_if_present(mv, "kbit_prep", "on") & qlora))
        if lead_rows.any():
            on = np.flatnonzero(lead_rows)

            def at(v):  # a flag at the lead rows (a flag may be one value for every row)
                return np.broadcast_to(np.asarray(v, dtype=float), (mv.size,))[on] > 0
            # the block letters each row adapts: * attention (q, k, v, o), - and E an MLP or an expert block's shared
            # expert (up, down), M a Mamba2 mixer (all-linear)
            attn_on = at(sum(flags[mod] for mod in _ATTENTION))
            letters = np.full(mv.size, "", dtype=object)
            letters[on] = [("*" if a_ else "") + ("-E" if m_ else "") + ("M" if e_ else "")
                           for a_, m_, e_ in zip(attn_on, at(flags["up_proj"] + flags["down_proj"]), at(every_target))]
            lead = block_lead(np.where(lead_rows, patterns, ""), letters)
    # a mixture of experts peft does not convert (engine/constants.py PEFT_UNCONVERTED_MOE): its MLP names reach a
    # shared expert or a dense layer's MLP alone; where it has neither (gpt-oss), no MLP adapter at all
    per_expert = np.isin(mtype, C.PER_EXPERT_LINEAR_MOE)[midx] & (np.asarray(arch["num_experts"], float) > 0)
    unconverted = (np.isin(mtype, C.PEFT_UNCONVERTED_MOE + C.PER_EXPERT_LINEAR_MOE)[midx]
                   & (np.asarray(arch["num_experts"], float) > 0) & lora & ~converted)
    moe_count = _moe_layer_count(arch, L)
    no_mlp = unconverted & (np.asarray(arch["shared_intermediate_size"], float) <= 0) & (moe_count >= L)
    # their MLP adapters sit on a shared expert or a dense layer's MLP: the per-layer mean of those widths, so that every
    # term read from the flags and dims (the adapters' small tensors, their states) sums to the adapters peft makes
    # (a per-expert nn.Linear MoE, PER_EXPERT_LINEAR_MOE: the routed experts' adapters too, k of them a token: the
    # active width f, as before)
    # (the per-layer mean of the dense layers' and the shared experts' widths)
    shared_mean = ((L - moe_count) * m["intermediate_size"]
                   + moe_count * np.asarray(arch["shared_intermediate_size"], float)) / L
    mlp_width = np.where(unconverted & ~per_expert, shared_mean, f)
    dims = lora_module_dims(h, mlp_width, a, kvh, d)
    # what down_proj's adapter takes in, a token and a layer (layer_activation_bytes' down_f): the adapted MLPs' width
    # there, not f's routed experts; on Nemotron-H's expert blocks (the layers _block_layout counts an MLP on) the
    # shared expert's own width (peft adapts its NemotronHMLP alone: the 1 x 2,048 LoRA row with six names listed was
    # 3.75% over with the adapter's fp32 copy of down_proj's input at f, 14,848 values a token for 3,712)
    down_f = None
    moe_lora = lora & (np.asarray(arch["num_experts"], float) > 0) & ~converted & ~per_expert
    if moe_lora.any():
        nemotron_moe = moe_lora & (mtype == "nemotron_h")[midx]
        down_f = np.where(nemotron_moe, np.asarray(arch["shared_intermediate_size"], float),
                          np.where(moe_lora, shared_mean, f))
    if mla.any():
        dims = mla_lora_dims(dims, arch, h, a, mla)
    if converted.any() or no_mlp.any():
        gone = converted | no_mlp
        flags = {mod: np.where(gone, 0.0, v) if mod in ("gate_proj", "up_proj", "down_proj") else v
                 for mod, v in flags.items()}
    flags = _granite_mlp_flags(flags, (mtype == "granitemoehybrid")[midx] & lora, every_target)
    in_out = _in_out(flags, dims)
    ds_zero3 = _mask_if_present(mv, "recipe", *C.DS_ZERO3_RECIPES) & train
    fsdp = (np.asarray(mv.values("zero"), dtype=float) >= 3) & train & ~ds_zero3
    stack = _stack_inputs(mv, train, lora, full, freeze, flags, dims, h, L, mv.values("lora_rank").astype(float),
                          np.minimum(mv.values("freeze_layers").astype(float), L), fsdp)
    # peft prepare_model_for_kbit_training (engine/stacks.py kbit_prep): fp32 embeddings, lm_head and
    # norms, so an fp32 residual stream (R = 4) under the Trainer's bf16 autocast (each linear's input
    # cast to 16-bit, lm_head's fp32 weight cast to a 16-bit copy: acb = 2), as amp_bf16 holds them
    kbit = _mask_if_present(mv, "kbit_prep", "on") & qlora
    stack["kbit_prep"] = kbit
    # GaLore layer-wise (transformers' galore_*_layerwise): each parameter steps in its post-accumulate-grad
    # hook and its gradient is zeroed there, as optimizer_in_backward (engine/constants.py GALORE_LAYERWISE)
    stack["opt_bwd"] = stack["opt_bwd"] | (mv.mask("optimizer", *C.GALORE_LAYERWISE) & train)
    opt_kind = {k: mv.mask("optimizer", k) & train for k in C.NEW_OPTIMIZERS if k in mv.categories("optimizer")}
    acb = np.where(kbit, C.AUTOCAST_COPY_BYTES["amp_bf16"], acb)
    residual = np.where(kbit, C.RESIDUAL_BYTES["amp_bf16"], mv.lookup("precision", C.RESIDUAL_BYTES, 2.0))
    gemma, gemma2 = np.isin(mtype, C.GEMMA_MODEL_TYPES)[midx], (mtype == "gemma2")[midx]
    gpt_oss = (mtype == "gpt_oss")[midx]
    masked, eager = attention_path(mv, np.isin(mtype, C.TRANSFORMERS_EAGER_MODEL_TYPES)[midx])
    # the frozen base's quantization (lora over a quantized base, qlora: NF4 unless given; under litgpt
    # NF4 without double quantization, the `quantize: bnb.nf4` of every LitGPT config_hub qlora.yaml)
    base_quant = (lora & ~base_auto) | qlora
    litgpt = _mask_if_present(mv, "recipe", "litgpt")
    auto_bits = np.where(litgpt, C.BASE_ONLY_BITS["nf4_nodq"], C.LINEAR_BITS["nf4"]) if litgpt.any() else C.LINEAR_BITS["nf4"]
    frozen_bits = np.where(qlora & base_auto, auto_bits, base_bits)
    # LitGPT's GPT holds lm_head beside the embedding, never tied in finetuning (litgpt/model.py GPT.__init__
    # `self.lm_head = nn.Linear(...)`, `wte=nn.Embedding(...)`; only pretrain.py ties on train.tie_embeddings):
    # a catalog model that ties them has V x h parameters more there (engine/stacks.py `recipe litgpt`)
    tied, n_params = m["tied_embeddings"] > 0, m["params"]
    if litgpt.any():
        untie = litgpt & tied
        n_params = n_params + np.where(untie, V * h, 0.0)
        active = active + np.where(untie, V * h, 0.0)
        tied = tied & ~litgpt
    # bitsandbytes 4-bit without double quantization (engine/stacks.py bnb_double_quant off): an fp32
    # absmax per 64 weights, 4.5 bits, for an nf4 inference row and an nf4 frozen base alike
    no_dq = _mask_if_present(mv, "bnb_double_quant", "off")
    lin_bits = mv.lookup("precision", C.LINEAR_BITS, np.nan)
    stored_frozen = frozen_bits
    if no_dq.any():
        lin_bits = np.where(no_dq & (lin_bits == C.LINEAR_BITS["nf4"]), C.NF4_NO_DOUBLE_QUANT_BITS, lin_bits)
        stored_frozen = np.where(no_dq & base_quant & (frozen_bits == C.LINEAR_BITS["nf4"]),
                                 C.NF4_NO_DOUBLE_QUANT_BITS, frozen_bits)
    int4 = mv.mask("precision", "int4") & ~train
    # the largest decoder linear (in x out values): q / o (h x a d) or an MLP matrix (h x its width; a
    # mixture of experts: one expert's), what exllama's temp_dq and bitsandbytes' dequantized copy hold
    widths = np.maximum(m["intermediate_size"], np.asarray(arch["expert_intermediate_size"], dtype=float))
    lin_max = h * np.maximum(qd, np.maximum(widths, np.asarray(arch["shared_intermediate_size"], dtype=float)))
    if np.any(np.asarray(arch["linear_attention_layers"], dtype=float) > 0):  # the gated q_proj, in_proj_qkvz
        hk, hv, dk, dv = (np.asarray(arch[c], dtype=float) for c in LINEAR_ATTENTION_FIELDS[:4])
        lin_max = np.maximum(lin_max, h * np.maximum(np.where(np.asarray(arch["attention_output_gate"], dtype=bool),
                                                              2 * qd, qd), 2 * hk * dk + 2 * hv * dv))
    if np.any(np.asarray(arch["mamba_layers"], dtype=float) > 0):  # a Mamba2 mixer's in_proj (engine/params.py mamba_params)
        mh, mp, ms, mg = (np.asarray(arch[c], dtype=float) for c in MAMBA_FIELDS[:4])
        lin_max = np.maximum(lin_max, h * (2 * mh * mp + 2 * mg * ms + mh))
    lin_held, lin_split = linear_prefill_bytes(arch, h, act_b)
    hyb = hybrid_training_terms(arch, h, act_b, np.char.startswith(mtype.astype(str), "qwen3_5")[midx])
    hyb["hyb_lora_in_out"] = hybrid_lora_in_out(arch, m, named, h, qd, kvd, L, mtype[midx].astype(str))
    hyb["pw_fe"] = hyb["pw_gu"] = hyb["pw_dn"] = hyb["pw_router"] = np.zeros(len(h))
    if unconverted.any():
        counted = unconverted_moe_lora_in_out(arch, named, dims, h, L, m["intermediate_size"], per_expert)
        hyb["hyb_lora_in_out"] = np.where(unconverted & ~np.isfinite(hyb["hyb_lora_in_out"]), counted,
                                          hyb["hyb_lora_in_out"])
    if converted.any():
        fused, gu, dn, router = fused_moe_lora_in_out(arch, named, dims, h, L, pattern)
        hyb["hyb_lora_in_out"] = np.where(np.isfinite(hyb["hyb_lora_in_out"]), hyb["hyb_lora_in_out"], fused)
        hyb["pw_fe"] = np.where(converted, np.asarray(arch["expert_intermediate_size"], dtype=float), 0.0)
        hyb["pw_gu"], hyb["pw_dn"], hyb["pw_router"] = (np.where(converted, v, 0.0) for v in (gu, dn, router))
    # LoRA adapters, their gradients and optimizer states are fp32 whatever the base (peft)
    return Inputs(
        h=h, f=f, L=L, a=a, kvh=kvh, d=d, V=V, tied=tied, N=n_params, qd=qd, kvd=kvd,
        layer_lin=layer_lin, layer_all=layer_all, n_lin=n_lin, model=midx, active=active,
        # (serving only: a training row keeps no KV cache, whatever frame it shares with serving rows)
        kv_window=np.where(train, 0.0, win_layers * 2.0 * kvd * np.where(np.isnan(kv_b), act_b, kv_b) / (np.minimum(tp, kvh) * pp)),
        window=window, kv_state=np.where(train, 0.0, _linear_state_bytes(arch, act_b) / (np.minimum(tp, kvh) * pp)),
        linear_work=np.where(train, 0.0, lin_held), linear_work_heads=np.where(train, 0.0, lin_split),
        **{k: np.where(train, v, 0.0 if k != "hyb_lora_in_out" else np.nan) for k, v in hyb.items()},
        kv_elems=kv_elems, mla=mla & ~full_policy, expert_params=expert_params,
        expert_linear=expert_linear, experts_only=mv.mask("precision", *C.QUANT_EXPERTS_ONLY) & ~train,
        gguf_expert_bits=mv.lookup("precision", C.GGUF_EXPERT_BITS, np.nan),
        gguf_linear_bits=mv.lookup("precision", C.GGUF_LINEAR_BITS, np.nan),
        # (--vision-tower off: the language model alone, engine/stacks.py vision_tower)
        vision=np.where(_mask_if_present(mv, "vision_tower", "off"), 0.0, np.asarray(arch["vision_params"], dtype=float)),
        stored_bytes=_stored_bytes(mv, models, midx, train),
        cp=np.where(train, mv.values("cp").astype(float), 1.0) if "cp" in mv.frame else np.ones(mv.size),
        seq_split=np.where(_mask_if_present(mv, "sequence_parallel", "on") & train & (tp > 1), tp, 1.0),
        float8=_mask_if_present(mv, "float8", "on") & train,
        kv_copies=np.where(_mask_if_present(mv, "decode_cache", "tuple") & ~train, 2.0, 1.0),
        **_bnb_base(mv, base_quant, frozen_bits, stored_frozen, per_expert),
        ep=mv.values("ep").astype(float) if "ep" in mv.frame else np.ones(mv.size),
        gpus=gpus, tp=tp, pp=pp, dp=gpus / (tp * pp), mp=tp * pp, zero=mv.values("zero"),
        off_opt=mv.mask("offload", "optimizer", "all") & train, off_all=mv.mask("offload", "all") & train,
        gc=mv.values("grad_checkpointing"),
        train=train, infer=~train, full=full, lora=lora, qlora=qlora, freeze=freeze,
        k_layers=freeze_k, blk_tail=tail, blk_lead=lead, lora_every=np.where(lora, every_target, 0.0),
        # freeze trains the last k layers: a mixture of experts with dense layers first or between (DeepSeek-V3's 3,
        # Llama 4 Maverick's every other) trains k of its layers as they are, not k mean layers (the fifth loops
        # probe's DeepSeek-V3 freeze: 23.0B trained where k x the mean layer is 21.9B, -0.58%)
        freeze_params=np.where(np.isnan(counts["last_layers"]), freeze_k * layer_all, counts["last_layers"]),
        wb=wb, wb_trained=np.where(lora, np.where(stack["adapter16"], 2.0, C.LORA_ADAPTER_BYTES), wb),
        gb=np.where(lora, np.where(stack["adapter16"], 2.0, C.LORA_ADAPTER_BYTES), mv.lookup("precision", C.GRAD_BYTES, 0.0)),
        master=np.where(lora, 0.0, mv.lookup("precision", C.MASTER_BYTES, 0.0)),
        sdb=np.where(lora, np.where(stack["adapter16"], 2.0, C.LORA_ADAPTER_BYTES), mv.lookup("precision", C.STATE_DTYPE_BYTES, 0.0)),
        acb=acb, autocast=acb > 0,
        R=residual, M=mv.lookup("precision", C.MATMUL_OUT_BYTES, 2.0),
        act_b=act_b, lin_bits=lin_bits,
        gguf_bits=mv.lookup("precision", C.GGUF_BITS, np.nan), int8=mv.mask("precision", "int8"),
        base_quant=base_quant, base_bits=stored_frozen,
        kv_b=np.where(np.isnan(kv_b), act_b, kv_b), last_only=mv.mask("prefill_logits", "last"),
        r=np.where(lora, mv.values("lora_rank").astype(float), 0.0), flags=flags, in_out=in_out,
        down_f=down_f,
        state_count=mv.lookup("optimizer", C.STATE_COUNT, 0.0), temp_count=mv.lookup("optimizer", C.STEP_TEMP_COUNT, 0.0),
        adam8=mv.mask("optimizer", "adamw_8bit", "paged_adamw_8bit"), ao8=mv.mask("optimizer", "adamw_8bit_torchao"),
        paged=mv.mask("optimizer", "paged_adamw_8bit", "paged_adamw_32bit") & train, adafactor=mv.mask("optimizer", "adafactor"),
        opt_kind=opt_kind or None, lf_muon=_mask_if_present(mv, "recipe", "llama-factory") & train,
        galore_rank=_galore_rank(mv),
        lora_dropout=(lora & (mv.values("lora_dropout") > 0)) if "lora_dropout" in mv.frame else False,
        **_litgpt_inputs(mv, litgpt, train, base_quant, frozen_bits),
        n_experts=arch["num_experts"].astype(float), k_experts=arch["experts_per_token"].astype(float),
        gemma_norm=gemma.astype(float),
        norms=np.asarray(arch["norms_per_layer"], dtype=float),
        qk_norm=np.asarray(arch["qk_norm"], dtype=bool).astype(float),
        fsdp_root=~_mask_if_present(mv, "recipe", "torchtune"),
        ds_zero3=ds_zero3, fsdp=fsdp,
        softcap=gemma2.astype(float), masked=masked & train, eager=eager, eager_bf16=gpt_oss & eager,
        clamped_glu=gpt_oss & (arch["num_experts"] > 0),
        dense_experts_fe=np.where(np.isin(mtype, C.DENSE_EXPERTS_MODEL_TYPES)[midx] & (arch["num_experts"] > 0)
                                  & ~_mask_if_present(mv, "recipe", "torchtune", "litgpt", "torchtitan"),
                                  np.asarray(arch["expert_intermediate_size"], dtype=float), 0.0),
        fp32_router=np.isin(mtype, C.FP32_ROUTER_WEIGHTS_MODEL_TYPES)[midx] & (arch["num_experts"] > 0),
        mask_window=sliding_mask_window(mv, arch, np.where(
            train, ~masked & ~_mask_if_present(mv, "packing", "on")
            & ~_mask_if_present(mv, "recipe", "torchtune", "litgpt", "torchtitan"),
            ~(_mask_if_present(mv, "int4_kernel", "autoawq_fused") & int4)) & ~eager),
        sw_share=np.clip(np.asarray(arch["sliding_window_layers"], dtype=float) / L, 0.0, 1.0),
        mask_types=1.0 + ((arch["sliding_window_layers"].astype(float) > 0)
                          & (arch["sliding_window_layers"].astype(float) < L)),
        moe_share=np.where(arch["num_experts"] > 0, np.maximum(L - arch["first_dense_layers"].astype(float), 0.0)
                           / np.maximum(arch["moe_layer_step"].astype(float), 1.0) / L, 0.0),
        shared_gate=np.where((arch["num_experts"] > 0) & np.asarray(arch["shared_expert_gate"], dtype=bool)
                             & (np.asarray(arch["shared_intermediate_size"], dtype=float) > 0), 1.0, 0.0),
        lin_max=lin_max, awq_fused=_mask_if_present(mv, "int4_kernel", "autoawq_fused") & int4,
        exllama=_mask_if_present(mv, "int4_kernel", "exllama") & int4,
        bnb_infer=mv.mask("precision", "nf4") & ~train,
        infer_upcast=_mask_if_present(mv, "logits_upcast", "model") & ~train,
        rope_len=np.where(_mask_if_present(mv, "rope_cache", "layers"), np.nan_to_num(m["max_context"]), 0.0),
        ds_one_group=mv.mask("optimizer", *C.DS_CONFIG_OPTIMIZERS) | lora,
        **_dpo_inputs(mv, train),
        **stack,
    )


def _dpo_inputs(mv: View, train) -> dict:
    """The objective's Inputs fields (objective dpo; engine/stacks.py dpo_reference, DPO_TRL_HEAD)."""
    dpo = _mask_if_present(mv, "objective", "dpo") & train
    if not np.any(dpo):
        return {}
    return dict(dpo=dpo, dpo_copy=dpo & _mask_if_present(mv, "dpo_reference", "copy"),
                dpo_ref_forward=dpo & ~_mask_if_present(mv, "dpo_reference", "precomputed"),
                dpo_trl_head=dpo & _mask_if_present(mv, "recipe", *DPO_TRL_HEAD),
                dpo_logits=dpo & _mask_if_present(mv, "recipe", *DPO_FULL_LOGITS))


# A Gated DeltaNet layer's prefill under transformers 5.24 without flash-linear-attention (its torch fallback,
# modeling_qwen3_next.py torch_chunk_gated_delta_rule: q, k, v, beta and g cast to float32, q and k repeated to
# the value heads, k_beta / v_beta, the 64-token chunks' decay masks and attention, their products), measured:
# the peak of one layer's forward on fake tensors over 1,024 and 2,048 tokens of batch 2 (benchmarks/
# check_hybrid_counts.py, torch 2.13.0 CPU, MemTracker), less the recurrent state, per token, at 16-bit activations:
# 2 h + 8 Hk dk + 20 Hv dk + 28 Hv dv + 794 Hv bytes (fitted on six shapes; three other shapes within 0.05%). With
# flash-linear-attention's kernels (what a GPU install usually has) the layer holds less: this is the larger path.
LINEAR_PREFILL_COEF = {"h": 2.0, "key": 8.0, "v_dk": 20.0, "v_dv": 28.0, "v": 794.0}


# A Mamba2 mixer's prefill under transformers 5.24 without mamba_ssm / causal_conv1d (its torch path,
# modeling_granitemoehybrid.py torch_forward and mamba2_chunk_scan: x, B and C cast to float32, B and C repeated to the
# heads, the chunks' (chunk x chunk) decay and score tensors per head, the chunks' H x P x N states), measured: the peak
# of one GraniteMoeHybridMambaLayer's forward on fake tensors over 1,024 and 2,048 tokens of batch 2 (benchmarks/
# check_mamba2_counts.py --prefill, torch 2.13.0 CPU, MemTracker), less its weights, per token, at 16-bit activations:
# 2 h + 33.67 H P + 11.83 H N + 12.16 chunk H + 4.67 H P N / chunk + 8 G N bytes (least squares on seven shapes;
# Granite 4.0-H Small's, Nemotron Nano 2's, Falcon-H1 7B's and H-Tiny's shapes held out: -0.01%, +0.08%, +0.83%,
# -0.01%). With mamba_ssm's kernels the layer holds less: this is the larger path, as for Gated DeltaNet.
MAMBA_PREFILL_COEF = {"h": 2.0, "inner": 33.67, "heads_state": 11.83, "chunk_heads": 12.16, "state_chunk": 4.67,
                      "groups_state": 8.0}


def linear_prefill_bytes(arch: dict, h, act_b) -> tuple[np.ndarray, np.ndarray]:
    """Per token, the prefill's working set inside a Gated DeltaNet layer (LINEAR_PREFILL_COEF) or a Mamba2 mixer
    (MAMBA_PREFILL_COEF) beside the decoder layer's residual (h at the activations' bytes): (what every
    tensor-parallel rank holds, the heads' part that tp divides). 0 for a model without them."""
    Llin = np.asarray(arch["linear_attention_layers"], dtype=float)
    hk, hv, dk, dv = (np.asarray(arch[c], dtype=float) for c in LINEAR_ATTENTION_FIELDS[:4])
    c = LINEAR_PREFILL_COEF
    heads = c["key"] * hk * dk + c["v_dk"] * hv * dk + c["v_dv"] * hv * dv + c["v"] * hv
    on = Llin > 0
    held = np.where(on, c["h"] * h * act_b / 2.0 + act_b * h, 0.0)
    split = np.where(on, heads * act_b / 2.0, 0.0)
    Lm = np.asarray(arch.get("mamba_layers", 0.0), dtype=float)
    if np.any(Lm > 0):
        mh, mp, ms, mg = (np.asarray(arch[k], dtype=float) for k in MAMBA_FIELDS[:4])
        chunk = np.maximum(np.asarray(arch["mamba_chunk_size"], dtype=float), 1.0)
        m = MAMBA_PREFILL_COEF
        m_heads = (m["inner"] * mh * mp + m["heads_state"] * mh * ms + m["chunk_heads"] * chunk * mh
                   + m["state_chunk"] * mh * mp * ms / chunk + m["groups_state"] * mg * ms)
        mamba = Lm > 0
        held = np.where(mamba, m["h"] * h * act_b / 2.0 + act_b * h, held)
        split = np.where(mamba, m_heads * act_b / 2.0, split)
    return held, split


# What one Gated DeltaNet layer (transformers 5.24 Qwen3NextGatedDeltaNet, its torch chunked delta rule) and one Mamba2
# mixer (GraniteMoeHybridMambaLayer's torch_forward) keep for backward in a 16-bit training step, per token, least squares
# on single layers under MemTracker (benchmarks/check_hybrid_training.py docstring, `saved`: held out within 0.07%),
# with the weights trained (full) or frozen (a LoRA base); they include the layer's 2 h output.
# Gated DeltaNet terms: h, Hk dk, Hv dk, Hv dv, Hv, Hv dk dv / 64 (the torch rule's per-chunk state).
GDN_SAVED = {"full": (2.0, 8.0, 32.0, 34.0, 1318.0, 4.0), "frozen": (2.0, 8.0, 32.0, 30.0, 1314.0, 4.0)}
# Mamba2 terms: h, H P, H N, chunk H, H P N / chunk, G N.
MAMBA_SAVED = {"full": (2.0, 47.63, 19.82, 12.18, 8.73, 8.03), "frozen": (2.0, 37.70, 19.85, 12.15, 8.61, 8.03)}
# Falcon-H1's mixer (FalconH1Mixer with mamba_rms_norm false, as Falcon-H1 7B's config has it: the scan's output
# times silu(gate), no gated RMSNorm; its input times ssm_in_multiplier, a copy in_proj keeps, counted here), the same
# terms, least squares on the same single-layer shapes (benchmarks/check_hybrid_training.py falcon; held out on Falcon-H1
# 7B's shape +0.68% and a 1.5B-Deep-like one +0.23%).
FALCON_SAVED = {"full": (4.0, 33.63, 19.82, 12.18, 8.73, 8.0), "frozen": (2.0, 27.70, 19.85, 12.15, 8.61, 8.0)}


def hybrid_training_terms(arch: dict, h, act_b, split_in_proj) -> dict:
    """Per row (0 for a model without them): hyb_layers, the Gated DeltaNet and Mamba2 layers in place of attention
    (Falcon-H1's mamba_parallel mixers run beside it: hyb_par_*, below); hyb_saved_full / hyb_saved_frozen, what those
    layers' mixers save per token, summed (GDN_SAVED, MAMBA_SAVED at 16-bit activations, scaled by act_b / 2);
    hyb_in_projs, their input projections, summed (Qwen3.5's Qwen3_5GatedDeltaNet: in_proj_qkv, in_proj_z, in_proj_b,
    in_proj_a; Qwen3-Next's: in_proj_qkvz, in_proj_ba; Mamba2: in_proj); hyb_out_width, out_proj's input widths,
    summed (Hv dv; heads x head_dim); hyb_par_layers and hyb_par_saved_full / _frozen, Falcon-H1's mixers beside
    attention (without mamba_rms_norm: FALCON_SAVED) and what they save, summed; blk_*, Nemotron-H's blocks
    (_block_layout)."""
    Llin = np.asarray(arch["linear_attention_layers"], dtype=float)
    hk, hv, dk, dv = (np.asarray(arch[c], dtype=float) for c in LINEAR_ATTENTION_FIELDS[:4])
    Lm = np.where(np.asarray(arch.get("mamba_parallel", False), dtype=bool), 0.0,
                  np.asarray(arch.get("mamba_layers", 0.0), dtype=float))
    mh, mp, ms, mg = (np.asarray(arch.get(k, 0.0), dtype=float) for k in MAMBA_FIELDS[:4])
    chunk = np.maximum(np.asarray(arch.get("mamba_chunk_size", 256.0), dtype=float), 1.0)
    gdn_terms = (h, hk * dk, hv * dk, hv * dv, hv, hv * dk * dv / 64.0)
    mamba_terms = (h, mh * mp, mh * ms, chunk * mh, mh * mp * ms / chunk, mg * ms)
    scale = np.asarray(act_b, dtype=float) / 2.0
    out = {"hyb_layers": Llin + Lm,
           "hyb_in_projs": Llin * np.where(split_in_proj, 4.0, 2.0) + Lm,
           "hyb_out_width": Llin * hv * dv + Lm * mh * mp,
           "blk_mixer_free": np.asarray(arch.get("mixer_free_layers", 0.0), dtype=float),
           "blk_mlp_free": np.asarray(arch.get("mlp_free_layers", 0.0), dtype=float),
           "blk_ungated": np.asarray(arch.get("mlp_ungated", False), dtype=float)}
    # Falcon-H1: a Mamba2 mixer beside attention on every layer (mamba_parallel), without its gated norm
    Lp = np.where(np.asarray(arch.get("mamba_parallel", False), dtype=bool)
                  & ~np.asarray(arch.get("mamba_norm", True), dtype=bool),
                  np.asarray(arch.get("mamba_layers", 0.0), dtype=float), 0.0)
    out["hyb_par_layers"] = Lp
    for kind in ("full", "frozen"):
        gdn = sum(c * t for c, t in zip(GDN_SAVED[kind], gdn_terms))
        mamba = sum(c * t for c, t in zip(MAMBA_SAVED[kind], mamba_terms))
        out[f"hyb_saved_{kind}"] = scale * (Llin * gdn + Lm * mamba)
        out[f"hyb_par_saved_{kind}"] = scale * Lp * sum(c * t for c, t in zip(FALCON_SAVED[kind], mamba_terms))
    return out


def _granite_mlp_flags(flags: dict, granite, every_target) -> dict:
    """The LoRA flags of the MLP where the row's model is a Granite 4.0 (granite: per row): its MLP (the shared_mlp) is
    GraniteMoeHybridMLP, input_linear (h to 2 f, gate and up in one) and output_linear (transformers 5.24
    modeling_granitemoehybrid.py lines 747-769), two nn.Linear of other names than Llama's, which peft adapts under
    all-linear alone, as two modules (hybrid_lora_in_out counts them so), never under a list of gate/up/down. So the
    terms that read the flags (the adapters' inputs kept, their outputs, their states) see up for input_linear and down
    for output_linear where every target is asked, and no MLP adapter elsewhere. (Before: gate, up and down as named,
    one fp32 copy of the layer's input too many under all-linear.)"""
    if not np.any(granite):
        return flags
    every_mlp = np.where(granite, every_target, 0.0)
    return {mod: (np.where(granite, 0.0 if mod == "gate_proj" else every_mlp, v)
                  if mod in ("gate_proj", "up_proj", "down_proj") else v) for mod, v in flags.items()}


def hybrid_lora_in_out(arch: dict, m, flags: dict, h, qd, kvd, L, mtype) -> np.ndarray:
    """Per row, the sum of (in + out) over every LoRA adapter peft 0.21.2 puts on a hybrid model under transformers
    5.24, for the models it covers (NaN elsewhere: trainable_params counts L x in_out there): Qwen3.5 (dense and MoE),
    Qwen3-Next, Granite 4.0-H (dense and MoE) and Bamba, each checked against the trainable counts measured in
    tests/data/measured_hybrid_training.csv (exactly: 116,727,808, 3,443,233,536 and 28,823,552 at r 16, all-linear;
    the hybrid probe's Qwen3.5-35B-A3B 22,477,440, Granite 4.0-H Tiny 11,840,512, Bamba 9B 44,972,032).
      attention layers: q (2 x a d out with attention_output_gate), k, v, o as flagged;
      Gated DeltaNet layers, under every target (all-linear: their projections are nn.Linear of other names):
        Qwen3.5 in_proj_qkv (2 key + val), in_proj_z (val), in_proj_b and in_proj_a (Hv each), out_proj;
        Qwen3-Next in_proj_qkvz (2 key + 2 val), in_proj_ba (2 Hv), out_proj;
      Mamba2 layers, under every target: in_proj (h to 2 I + 2 G N + H), out_proj (I to h);
      MLP: Qwen3.5 gate/up/down as flagged; Granite 4.0-H's shared_mlp input_linear (h to 2 f) and output_linear
        under every target; Qwen3-Next's experts are fused parameters that peft's v4-to-v5 conversion targets when
        gate_proj and up_proj (gate_up_proj, rank doubled: peft utils/transformers_weight_conversion.py
        _convert_peft_config_moe, rank_pattern r x 2) or down_proj are named (all-linear names them), as
        ParamWrapper adapters of E x rank (tuners/lora/layer.py ParamWrapper.update_layer: lora_A in x r E, lora_B
        r E x out), the router's gate.weight (h to E) under every target; the shared expert's gate/up/down are mapped
        away with them (not adapted), its shared_expert_gate (h to 1) is adapted under every target;
      the MoE models peft 0.21.2 does not convert (qwen3_5_moe, granitemoehybrid are not in its conversion map): their
        experts are 3-D parameters (Qwen3.5) or GraniteMoeHybridParallelExperts (Granite), no nn.Linear, and their
        routers are not adapted either; the shared expert's gate/up/down as flagged and Qwen3.5's shared_expert_gate
        under every target (Qwen3.5), the shared_mlp under every target (Granite), at the shared expert's width;
      Bamba: attention layers as flagged, Mamba2 layers under every target, every layer's feed_forward gate/up/down
        (nn.Linear named as Llama's) as flagged. (Read from peft's own adapters on those models: benchmarks/
        measure_peaks.py --set hybrid, the hybrid probe's LoRA rows.)
      Nemotron-H without experts (Nano 9B v2), its projections named (peft refuses all-linear on it: the engine does,
        engine/params.py hybrid_training_unmodelled): q, k, v, o on its attention blocks and up, down on its MLP
        blocks as flagged, nothing on its Mamba2 blocks (their in_proj and out_proj are not Llama names).
      Falcon-H1 is not here: its layers all hold q, k, v, o and gate, up, down under Llama's names, L x in_out."""
    Llin = np.asarray(arch["linear_attention_layers"], dtype=float)
    Lm = np.asarray(arch.get("mamba_layers", 0.0), dtype=float)
    hk, hv, dk, dv = (np.asarray(arch[c], dtype=float) for c in LINEAR_ATTENTION_FIELDS[:4])
    mh, mp, ms, mg = (np.asarray(arch.get(k, 0.0), dtype=float) for k in MAMBA_FIELDS[:4])
    E, fe = (np.asarray(arch[c], dtype=float) for c in ("num_experts", "expert_intermediate_size"))
    # a mixture of experts' dense MLP is its shared expert (Qwen3.5's shared_expert, Granite 4.0-H's shared_mlp)
    fd = np.where(E > 0, np.asarray(arch["shared_intermediate_size"], dtype=float),
                  np.asarray(m["intermediate_size"], dtype=float))
    g = flags
    every = _every_target(g)
    gate = np.where(np.asarray(arch["attention_output_gate"], dtype=bool), 2.0, 1.0)
    attn = (g["q_proj"] * (h + gate * qd) + g["k_proj"] * (h + kvd) + g["v_proj"] * (h + kvd)
            + g["o_proj"] * (qd + h))
    key, val = hk * dk, hv * dv
    qwen35 = np.char.startswith(mtype, "qwen3_5")
    nxt = mtype == "qwen3_next"
    granite = mtype == "granitemoehybrid"
    bamba = mtype == "bamba"
    # Nemotron-H (dense: Nano 9B v2), with the projections named (peft refuses all-linear on it): q, k, v, o on its
    # attention blocks, up and down on its MLP blocks (NemotronHMLP), nothing on its Mamba2 blocks
    Lx, Ly = (np.asarray(arch[c], dtype=float) for c in ("mixer_free_layers", "mlp_free_layers"))
    nemotron = mtype == "nemotron_h"
    nemotron_total = (Ly - Lm) * attn + Lx * (g["up_proj"] * (h + fd) + g["down_proj"] * (fd + h))
    gdn = np.where(qwen35, (h + 2 * key + val) + (h + val) + 2 * (h + hv) + (val + h),
                   (h + 2 * key + 2 * val) + (h + 2 * hv) + (val + h))
    inner = mh * mp
    mamba = (h + 2 * inner + 2 * mg * ms + mh) + (inner + h)
    dense_mlp = (g["gate_proj"] + g["up_proj"]) * (h + fd) + g["down_proj"] * (fd + h)
    # Qwen3.5's MoE: its shared_expert_gate (h to 1), an nn.Linear all-linear reaches
    dense_mlp = dense_mlp + np.where(qwen35 & (E > 0) & np.asarray(arch["shared_expert_gate"], dtype=bool),
                                     every * (h + 1.0), 0.0)
    mlp = np.where(granite, every * ((h + 2 * fd) + (fd + h)), dense_mlp)
    experts = (g["gate_proj"] * g["up_proj"] * 2.0 * E * (2 * fe + h) + g["down_proj"] * E * (h + fe)
               + every * ((h + E) + (h + 1)))
    mlp = np.where(nxt, experts, mlp)
    total = (L - Llin - Lm) * attn + every * (Llin * gdn + Lm * mamba) + L * mlp
    total = np.where(nemotron, nemotron_total, total)
    return np.where(qwen35 | nxt | granite | bamba | nemotron, total, np.nan)


def fused_moe_lora_in_out(arch: dict, flags: dict, dims: dict, h, L, pattern) -> tuple[np.ndarray, ...]:
    """Per row, for a mixture of experts whose LoRA config peft 0.21.2 converts (pattern "qwen2_moe" or "mixtral",
    engine/constants.py PEFT_FUSED_MOE; NaN elsewhere): the sum of (in + out) over every adapter, as trainable_params
    counts r x it, and whether the experts' gate_up_proj, their down_proj and the router are adapted (1 / 0 each). Every layer: the attention modules as flagged (the engine's
    dims). Each MoE layer: gate_up_proj at twice the rank, E x 2 r x (h + 2 fe), and down_proj, E x r x (fe + h)
    (ParamWrapper.update_layer: lora_A E r x in, lora_B out x E r), where gate_proj and up_proj (down_proj) are named,
    or under all-linear alone for the "mixtral" pattern; the router's gate.weight (h + E) and a Qwen2-MoE-style
    shared_expert_gate (h + 1) under all-linear. The dense layers' MLPs and the shared experts are not adapted (their
    gate/up/down names are taken out of target_modules). Checked exactly against the trainable counts of
    tests/data/measured_moe_lora.csv (Qwen3-30B-A3B r 16 all-linear 996,507,648 and r 8 with the seven names
    497,418,240; Mixtral 8x7B r 16 all-linear 359,665,664; ERNIE 4.5 21B-A3B 433,146,880)."""
    E, fe = (np.asarray(arch[c], dtype=float) for c in ("num_experts", "expert_intermediate_size"))
    every = _every_target(flags)
    mixtral = pattern == "mixtral"
    gu = np.where(mixtral, every, flags["gate_proj"] * flags["up_proj"])
    dn = np.where(mixtral, every, flags["down_proj"])
    experts = gu * 2.0 * E * (2.0 * fe + h) + dn * E * (fe + h)
    router = every * ((h + E) + np.where(np.asarray(arch["shared_expert_gate"], dtype=bool), h + 1.0, 0.0))
    attn = _in_out(flags, dims, ("q_proj", "k_proj", "v_proj", "o_proj"))
    moe_layers = _moe_layer_count(arch, L)
    on = pattern != ""
    return (np.where(on, L * attn + moe_layers * (experts + router), np.nan), np.where(on, gu, 0.0),
            np.where(on, dn, 0.0), np.where(on, every, 0.0))


def mla_lora_dims(dims: dict, arch: dict, h, a, mla) -> dict:
    """The attention modules' (in, out) under multi-head latent attention (DeepSeek-V2/V3, Kimi K2, ...), whose
    projections have other names (transformers 5.24 DeepseekV3Attention): q_proj is q_a_proj (h -> q_lora_rank) and
    q_b_proj (-> heads x (nope + rope)), or one q_proj where q_lora_rank is 0; k_proj is kv_a_proj_with_mqa
    (h -> kv_lora_rank + rope); v_proj is kv_b_proj (kv_lora_rank -> heads x (nope + v_head_dim)); o_proj takes
    heads x v_head_dim. The configs the planner writes name them so (planner/exports.py _peft_targets); a pair counts as
    one module of in = the sum of the ins, out = the sum of the outs, exact for (in + out), trainable_params' sum.
    Checked against get_peft_model on DeepSeek-V3's config on the meta device in the measuring venv (2026-12-06):
    all-linear at r 16, 7,645,254,656 trainable."""
    rkv, rq, rope, nope, vd = (np.asarray(arch[c], dtype=float) for c in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                                                                          "qk_nope_head_dim", "v_head_dim"))
    qk = a * (nope + rope)
    mla_dims = {"q_proj": (np.where(rq > 0, h + rq, h), np.where(rq > 0, rq + qk, qk)),
                "k_proj": (h, rkv + rope), "v_proj": (rkv, a * (nope + vd)), "o_proj": (a * vd, h)}
    out = dict(dims)
    for mod, (i, o) in mla_dims.items():
        out[mod] = (np.where(mla, i, dims[mod][0]), np.where(mla, o, dims[mod][1]))
    return out


def _moe_layer_count(arch: dict, L) -> np.ndarray:
    """The layers with experts: those after the dense first ones, every moe_layer_step-th (0 without experts)."""
    moe = np.floor(np.maximum(L - np.asarray(arch["first_dense_layers"], dtype=float), 0.0)
                   / np.maximum(np.asarray(arch["moe_layer_step"], dtype=float), 1.0))
    return np.where(np.asarray(arch["num_experts"], dtype=float) > 0, moe, 0.0)


def unconverted_moe_lora_in_out(arch: dict, flags: dict, dims: dict, h, L, dense_width, per_expert=False) -> np.ndarray:
    """Per row, for a mixture of experts peft 0.21.2 leaves unconverted (engine/constants.py PEFT_UNCONVERTED_MOE): the
    sum of (in + out) over every adapter, as trainable_params counts r x it. Every layer: the attention modules as
    flagged (the engine's dims). Each MoE layer: its shared expert's gate/up/down as flagged, at the shared width, and
    under all-linear a shared_expert_gate (h + 1); never the fused experts or the router. Each dense layer: its MLP at
    the dense width (the config's intermediate_size). per_expert (PER_EXPERT_LINEAR_MOE): the routed experts are
    nn.Linear modules, each of the E adapted as a dense MLP of the expert width."""
    shared = np.asarray(arch["shared_intermediate_size"], dtype=float)

    def mlp(width):
        return (flags["gate_proj"] + flags["up_proj"]) * (h + width) + flags["down_proj"] * (width + h)

    moe_layers = _moe_layer_count(arch, L)
    gate = _every_target(flags) * np.where(np.asarray(arch["shared_expert_gate"], dtype=bool), h + 1.0, 0.0)
    attn = _in_out(flags, dims, ("q_proj", "k_proj", "v_proj", "o_proj"))
    routed = np.where(per_expert, np.asarray(arch["num_experts"], dtype=float)
                      * mlp(np.asarray(arch["expert_intermediate_size"], dtype=float)), 0.0)
    return (L * attn + (L - moe_layers) * mlp(np.asarray(dense_width, dtype=float))
            + moe_layers * (np.where(shared > 0, mlp(shared), 0.0) + gate + routed))


def _linear_state_bytes(arch: dict, act_b) -> np.ndarray:
    """Per sequence, the linear-attention and Mamba2 layers' state as transformers keeps it (0 for other models): the
    convolution's last `kernel` positions of its input in the activations' dtype (cache_utils.py
    LinearAttentionLayer `conv_states`, (batch, conv_dim, kernel)) and the delta rule's Hv x dk x dv state, or Mamba2's
    heads x head_dim x state, in fp32 (`recurrent_states`: modeling_qwen3_next.py's torch_chunk_gated_delta_rule builds
    it in float32; a bf16 Granite 4.0-H or Nemotron-H forward leaves a float32 one, benchmarks/check_mamba2_counts.py),
    per layer. vLLM and SGLang keep kernel - 1 positions (engine/serving.py)."""
    conv, recurrent = linear_attention_state(arch, conv_positions="kernel")
    return conv * act_b + recurrent * 4.0


def _bnb_base(mv: View, base_quant, base_bits, stored_bits, per_expert=False) -> dict:
    """The frozen base of lora/qlora that bitsandbytes quantizes (issue 27 item 4): NF4 (QLoRA's
    default base, Linear4bit / MatMul4Bit) and LLM.int8 (Linear8bitLt / MatMul8bitLt), and whether
    its matmuls keep their inputs for backward (engine/stacks.py bnb_4bit_input). base_quant: the
    Inputs field; base_bits: the frozen base's bits as named (nf4, nf4_nodq, int8); stored_bits: as
    stored (Inputs.base_bits: nf4 is 4.5 under bnb_double_quant off).
    qstate_bits: the QuantState's bits per weight of a bitsandbytes 4-bit base (`_quant_state_bytes`),
    not under recipe torchtune, whose NF4 is torchao's NF4Tensor: a tensor subclass whose scales are
    inner tensors sharded with it (pytorch/ao v0.8.0 torchao/dtypes/nf4tensor.py lines 23-27
    `_INNER_TENSOR_NAMES_FOR_SHARDING = ["quantized_scalers", "quantization_factor", "quantized_data"]`,
    split together by `nf4_split` (aten.split, lines 182-219) and all-gathered together by
    fsdp_pre_all_gather, lines 854-876), so FSDP2 shards and offloads its 0.127 bits like the rest."""
    nf4 = base_quant & ((base_bits == C.LINEAR_BITS["nf4"]) | (base_bits == C.BASE_ONLY_BITS["nf4_nodq"]))
    int8 = base_quant & (base_bits == C.LINEAR_BITS["int8"])
    kept4 = _mask_if_present(mv, "bnb_4bit_input", "kept")
    bnb4 = nf4 & ~_mask_if_present(mv, "recipe", "torchtune")
    qstate = np.where(bnb4, np.asarray(stored_bits, dtype=float) - C.BNB_PACKED_BITS, 0.0)
    # a mixture of experts under transformers: bitsandbytes leaves its fused experts in the load dtype (BNB_FUSED_EXPERTS);
    # an int4 base is bitsandbytes' FP4 for every training target (planner/exports.py BNB_BASES), so it does too
    fp4 = base_quant & (base_bits == C.LINEAR_BITS["int4"])
    fused = ((nf4 | int8 | fp4) & ~_mask_if_present(mv, "recipe", "litgpt")) | (mv.mask("precision", "nf4", "int8")
                                                                             & ~mv.mask("task", "train"))
    fused = fused & ~per_expert  # (PER_EXPERT_LINEAR_MOE: nn.Linear experts, which bitsandbytes quantizes)
    # engine/stacks.py quantize_experts on (axolotl's quantize_moe_experts): the fused experts quantized at load like
    # the linears, at the base's bits, and dequantized whole on access (experts_dequant)
    quantized = (nf4 | int8) & _mask_if_present(mv, "quantize_experts", "on") & mv.mask("task", "train")
    return {"kbit_keeps_input": int8 | (nf4 & kept4), "bnb_base": nf4 | int8, "qstate_bits": qstate,
            "bnb_experts": np.where(fused & ~quantized, 1.0, 0.0), "experts_dequant": quantized & fused}


def _litgpt_inputs(mv: View, litgpt, train, base_quant, base_bits) -> dict:
    """The LitGPT model's fields of Inputs (engine/stacks.py `recipe litgpt`). head_quant: under --quantize
    Fabric's BitsandbytesPrecision.module_init_context patches torch.nn.Linear for the whole GPT(config)
    (lightning fabric/plugins/precision/bitsandbytes.py `_ClassReplacementContextManager({"torch.nn.Linear":
    self._linear_cls})`, LitGPT passes no ignore_modules), so lm_head (LoRALinear.linear, a torch.nn.Linear)
    is quantized like every other linear. dequant_b: Lightning's _Linear4bit.quantize stores the 4-bit
    weight of `weight.contiguous().to(device=device, dtype=torch.half)`, so quant_state.dtype is fp16 and
    bitsandbytes' MatMul4Bit (0.42.0 autograd/_functions.py lines 516 and 546) computes
    `F.dequantize_4bit(B, quant_state).to(A.dtype)`: an fp16 copy of the weight and its bf16 cast alive
    together, 4 bytes per weight, in forward and in backward, where the input is bf16 (precision bf16); an
    fp16 input casts nothing (2). LLM.int8 (Linear8bitLt) keeps its one 16-bit copy (2)."""
    if not np.any(litgpt):
        return {}
    nf4 = base_quant & np.isin(base_bits, (C.LINEAR_BITS["nf4"], C.BASE_ONLY_BITS["nf4_nodq"]))
    return {"litgpt_model": litgpt & train, "head_quant": litgpt & base_quant & train,
            "dequant_b": np.where(litgpt & nf4 & train & mv.mask("precision", "bf16"), 4.0, 2.0)}


def _kbit_kept_inputs(x: Inputs, trains, adapted) -> np.ndarray:
    """Per token and layer: the inputs a bitsandbytes base's matmuls keep for backward beyond what
    the layer saves anyway (engine/stacks.py bnb_4bit_input; bitsandbytes autograd/_functions.py:
    MatMul8bitLt `ctx.tensors = (CAt, subA, A)`, MatMul4Bit before 0.43.2 `(A, B)`). Each Linear4bit /
    Linear8bitLt passes `x.to(compute_dtype)`: under autocast / kbit_prep its input is fp32, so each of
    q, k, v, gate and up keeps its own 16-bit copy (2 x h); in pure 16-bit the one input tensor of q/k/v
    (and of gate/up) is kept once unless the layer keeps it already (a trained or adapted module). The
    down projection keeps the SiLU product (f wide) unless it is kept already; o_proj's input is
    SDPA's output, which attention keeps anyway. 0 where no such base."""
    if not np.any(x.kbit_keeps_input):
        return 0.0
    fp32_cast = _fp32_adapter_cast(x, x.r > 0)
    # (with LoRA dropout lora_A keeps the dropout's output, not the module's input: engine/memory.py)
    shared = np.where(fp32_cast | np.asarray(x.lora_dropout, dtype=bool), 0.0, 1.0)

    def group(names):
        keeps = np.minimum(sum(trains for _m in names) + sum(adapted[m] for m in names) * shared, 1.0)
        return np.where(x.autocast, 2.0 * x.h * len(names), x.R * x.h * (1.0 - keeps))

    down_kept = np.maximum(trains, adapted["down_proj"] * shared)
    extra = (group(("q_proj", "k_proj", "v_proj")) + group(("gate_proj", "up_proj"))) / x.seq_split \
        + x.M * x.f * (1.0 - down_kept) / x.tp
    return np.where(x.kbit_keeps_input, extra, 0.0)


def kept_graph_bytes(x: Inputs) -> np.ndarray | float:
    """Per token: what a kept step's graph still holds when the next forward runs (loop manual with a
    bitsandbytes base whose matmuls keep their inputs: bnb_4bit_input kept, LLM.int8). MatMul4Bit (before
    bitsandbytes 0.43.2) and MatMul8bitLt keep their inputs as a plain ctx attribute, `ctx.tensors = (A, B)`
    (bitsandbytes 0.42.0 autograd/_functions.py line 523), not through save_for_backward: autograd's
    PyNode::release_variables frees only the saved variables after backward (torch
    csrc/autograd/python_function.cpp), so every such input lives as long as the graph's nodes, and a loop
    that keeps the output (`logits = model(...)` in LitGPT's fit(), `out = model(...)`) keeps the graph
    until the next forward returns. Per layer the matmuls' inputs: the attention's input (one tensor, R h;
    under autocast / kbit_prep q, k and v each cast their own 16-bit copy, 3 x 2 h), the attention output
    o_proj takes (M x q width), the MLP's input (R h; 2 x 2 h under autocast) and the product down_proj
    takes (M f); LitGPT's quantized lm_head keeps the final norm's output too (M h). (The first layer's
    attention input needs no grad without kbit_prep's enable_input_require_grads: one layer's input
    counted more.) Not under checkpointing: transformers' default reentrant checkpoint runs each layer's
    forward under torch.no_grad (MatMul4Bit then keeps `(None, None)`) and its recomputed graph is freed
    with the layer's backward; LitGPT refuses --quantize on more than one device, where it checkpoints.
    0 elsewhere."""
    on = np.asarray(x.kept_outputs, dtype=bool) & np.asarray(x.kbit_keeps_input, dtype=bool) \
        & ~np.asarray(x.gc, dtype=bool)
    if not np.any(on):
        return 0.0
    attn_in = np.where(x.autocast, 3.0 * 2.0 * x.h, x.R * x.h) / x.seq_split
    mlp_in = np.where(x.autocast, 2.0 * 2.0 * x.h, x.R * x.h) / x.seq_split
    per_layer = attn_in + x.M * x.qd / x.tp + mlp_in + x.M * x.f / x.tp
    head = np.where(x.head_quant, x.M * x.h, 0.0)
    return np.where(on, x.L * per_layer + head, 0.0)


def _stored_bytes(mv: View, models: pd.DataFrame, midx: np.ndarray, train: np.ndarray) -> np.ndarray:
    """The checkpoint's stored bytes of the language model's weights for an inference row whose
    precision is the checkpoint's own (catalog/checkpoints.py sets `stored_weights_bytes` and
    `stored_precision` from a GGUF's tensor table or safetensors headers); NaN elsewhere, where the
    arithmetic of weight_bytes decides (a catalog model, another precision, a training row)."""
    if "stored_weights_bytes" not in models or "stored_precision" not in models or not mv.size:
        return np.full(mv.size, np.nan)
    stored = column_numbers(models, "stored_weights_bytes")[midx]
    own = frame_memo(models, ("text", "stored_precision"),
                     lambda: models["stored_precision"].fillna("").astype(str).to_numpy())[midx]
    cats = np.asarray([str(c) for c in mv.categories("precision")] + [""], dtype=object)
    same = own == cats[mv.codes("precision")]
    return np.where(same & ~train & (stored > 0), stored, np.nan)


def attention_path(mv: View, eager_family: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(masked, eager) per group (engine/stacks.py padding and attention). eager: attention 'eager',
    or under 'sdpa' a model of engine/constants.py TRANSFORMERS_EAGER_MODEL_TYPES (`eager_family`: Gemma 2's
    softcapped scores, gpt-oss's attention sinks; transformers 5.24 Gemma2PreTrainedModel and
    GptOssPreTrainedModel have _supports_sdpa = False and run eager_attention_forward; torchtune's
    Gemma2Attention computes the scores itself).
    masked: a padded batch under SDPA without packing (transformers builds the padding mask and
    repeats K and V to every head); flash attention unpads, a packed batch has no padding."""
    sdpa = _mask_if_present(mv, "attention", "sdpa")
    eager = _mask_if_present(mv, "attention", "eager") | (sdpa & eager_family)
    masked = sdpa & ~eager & _mask_if_present(mv, "padding", "padded") & ~_mask_if_present(mv, "packing", "on")
    return masked, eager


def sliding_mask_window(mv: View, arch: dict, candidates: np.ndarray) -> np.ndarray:
    """(issue 28) Per group: the sliding window from which on transformers' SDPA path builds a sliding-window
    mask (0: none). transformers 5.24 masking_utils.py: `_ignore_causal_mask_sdpa` lets SDPA's `is_causal`
    stand in for the mask only while `kv_length < local_attention_size` (the window), so from the window on
    `sdpa_mask` materializes the (batch of 1 without padding, 1, seq, seq) bool mask; a model whose other
    layers attend fully keeps no mask for them (is_causal). candidates: the rows whose attention could take
    that path (not eager; inference: not AutoAWQ's fused attention; training: transformers' model, not
    torchtune's, LitGPT's or torchtitan's own, an unpadded batch (a padded one masks every layer already,
    `attention_path`) and no packing); sdpa asked (flash unpads and masks nothing), a window and
    sliding-window layers in the model."""
    sdpa = _mask_if_present(mv, "attention", "sdpa")
    layers = np.asarray(arch["sliding_window_layers"], dtype=float)
    window = np.nan_to_num(np.asarray(arch["sliding_window"], dtype=float))
    return np.where(candidates & sdpa & (layers > 0) & (window > 0), window, 0.0)


def _galore_rank(mv: View) -> np.ndarray | float:
    """GaLore's rank per configuration as engine/rules.py decided it (a frame without the column, or a
    0 the rules did not decide: transformers' default, C.GALORE_RANK)."""
    if "galore_rank" not in mv.frame:
        return float(C.GALORE_RANK)
    rank = mv.values("galore_rank").astype(float)
    return np.where(rank > 0, rank, float(C.GALORE_RANK))


def _mask_if_present(mv: View, col: str, *values) -> np.ndarray:
    """mv.mask(col, *values); all False for a frame without the column (an old caller: the defaults)."""
    return mv.mask(col, *values) if col in mv.frame else np.zeros(mv.size, dtype=bool)


def _stack_inputs(mv: View, train, lora, full, freeze, flags, dims, h, L, rank, k_layers, fsdp) -> dict:
    """The stack switches of each group as Inputs fields (engine/stacks.py). A frame without
    the columns (an old caller) gets the defaults: the hf stack."""
    def mask(col, *values):
        return _mask_if_present(mv, col, *values)

    paged32 = mv.mask("optimizer", "paged_adamw_32bit") & train
    small = 0.0
    if paged32.any():  # bitsandbytes get_state_buffer pages only tensors of >= 1e5 elements
        lim = C.PAGED_MIN_ELEMENTS
        def small(n):
            return np.where(n < lim, n, 0.0)

        lora_small = sum(flags[m] * (small(rank * i) + small(rank * o)) for m, (i, o) in dims.items()) * L
        litgpt = mask("recipe", "litgpt")
        if litgpt.any():  # LitGPT's LoRAQKVLinear: one lora_A (r x enabled, h) and one lora_B (enabled widths, r)
            qkv = ("q_proj", "k_proj", "v_proj")
            # (each enabled projection's input width: h for all three, where MLA's q and kv paths read h and their
            # ranks, engine/components.py mla_lora_dims; h x the count before, which made more small values than
            # an MLA model's adapters hold: paged bytes below zero, property search seed 4971602839768075449)
            a_qkv = rank * sum(flags[m] * dims[m][0] for m in qkv)
            b_qkv = rank * sum(flags[m] * dims[m][1] for m in qkv)
            rest = sum(flags[m] * (small(rank * i) + small(rank * o)) for m, (i, o) in dims.items() if m not in qkv)
            lora_small = np.where(litgpt, (small(a_qkv) + small(b_qkv) + rest) * L, lora_small)
        norms = np.where(h < lim, _trained_norm_values(h, L, k_layers, full, freeze), 0.0)
        small = np.where(paged32, np.where(lora, lora_small, norms), 0.0)
    return dict(
        adapter16=mask("adapter_dtype", "bf16") & lora,
        loss_kind={k: mask("loss", k) & train for k in ("chunked", "linear_chunked", "fused", "parallel", "compiled",
                                                          "litgpt", "litgpt_full")},
        legacy_logits=mask("logits_upcast", "model") & train, compiled=mask("compile", "on") & train,
        ckpt_selective=mask("checkpointing", "selective") & train,
        ckpt_op=mask("checkpointing", "op") & train,
        ckpt_module=mask("checkpointing", "module") & train,
        liger=mask("liger", "on") & train,
        act_offload=(mask("checkpointing", "offload") | mask("activation_offload", "on")) & train,
        opt_bwd=mask("optimizer_in_backward", "on") & train, paged32=paged32, paged_small=small,
        kept_outputs=mask("loop", "manual") & train,
        # use_cache on: the forward builds a cache, under checkpointing too where that is applied outside
        # transformers (its own turns the cache off; 'auto' resolves so, engine/rules.py)
        train_cache=mask("use_cache", "on") & train,
        # FSDP1's flat parameters exist only where the engine's sharding is FSDP (Inputs.fsdp)
        flat_views=mask("flat_params", "on", "mixed") & fsdp,
        frozen_grads=mask("flat_params", "mixed") & lora & ~mask("method", "qlora") & fsdp,
        accum_last=mask("accum_sync", "last") & train & ~mask("optimizer_in_backward", "on"),
    )


def scenario_inputs(scenarios: pd.DataFrame, models: pd.DataFrame) -> Inputs:
    """The Inputs of each row of a scenario frame (normalized and checked first): one
    configuration per row, e.g. to run one component function on one scenario."""
    sc = normalize(scenarios, models)
    return inputs(View(sc, np.arange(len(sc))), models)


def _in_out(flags: dict, dims: dict, modules=C.LORA_MODULES) -> np.ndarray:
    """The sum of (in + out) over the adapted modules among `modules`."""
    return sum(flags[m] * (dims[m][0] + dims[m][1]) for m in modules)


def _lora_flags(view: View) -> dict:
    """Per group: which modules are adapted (0/1 arrays)."""
    cats = view.categories("lora_targets")
    codes = view.codes("lora_targets")
    flags = {}
    for m in C.LORA_MODULES:
        table = np.array([1.0 if m in parse_lora_targets(c) else 0.0 for c in cats] + [0.0])
        flags[m] = table[codes]
    return flags


# ---- the whole model, before any split ------------------------------------------------------

def trainable_params(x: Inputs) -> np.ndarray:
    """Parameters that train: every one (full), the adapters' (LoRA: L x r x sum of in + out),
    or the last k layers' (freeze); none for inference."""
    lora_params = x.L * x.r * x.in_out
    if np.any(np.isfinite(x.hyb_lora_in_out)):  # the hybrid models hybrid_lora_in_out covers
        lora_params = np.where(np.isfinite(x.hyb_lora_in_out), x.r * x.hyb_lora_in_out, lora_params)
    return np.select([x.full, x.lora, x.freeze], [x.N, lora_params, x.freeze_params], 0.0)


def _frozen_rest_bytes(x: Inputs) -> np.ndarray:
    """Bytes per value of a quantized base's unquantized weights: 16-bit, fp32 under kbit_prep (peft's
    prepare_model_for_kbit_training casts embeddings, lm_head, norms, and a mixture of experts' fused experts that
    bitsandbytes left alone, to fp32: peft 0.21.2 utils/other.py lines 204-209; BNB_FUSED_EXPERTS)."""
    return np.where(x.kbit_prep, 4.0, np.minimum(x.wb, 2.0))


def _quantized_linear(x: Inputs) -> np.ndarray:
    """Linear-layer values a quantized base (or a bitsandbytes inference) stores at its bits: every one, less a
    mixture of experts' fused experts where bitsandbytes leaves them unquantized (Inputs.bnb_experts)."""
    return x.n_lin - x.bnb_experts * x.expert_linear


def weight_bytes(x: Inputs, trainable: np.ndarray) -> np.ndarray:
    """Every weight's bytes. Training: the trained weights in their dtype, and a frozen base in
    the training dtype, or quantized linear layers + a 16-bit (or wider) rest. Inference: the
    linear layers at the precision's bits + the rest at the activations' bytes (+ int8's row
    scales), or GGUF's average bits for every weight."""
    frozen = np.where(x.train & ~x.full, x.N - np.where(x.freeze, trainable, 0.0), 0.0)
    rest_b = _frozen_rest_bytes(x)
    q_lin = _quantized_linear(x)
    frozen_quant = q_lin * x.base_bits / 8 + (x.N - q_lin) * rest_b
    if np.any(x.head_quant):  # LitGPT under --quantize: lm_head among the quantized linears
        quant_lin = x.n_lin + x.V * x.h
        frozen_quant = np.where(x.head_quant, quant_lin * x.base_bits / 8 + (x.N - quant_lin) * rest_b, frozen_quant)
    frozen_bytes = np.where(x.base_quant, frozen_quant, frozen * x.wb)
    train_weights = trainable * x.wb_trained + np.where(x.lora, frozen_bytes, np.where(x.freeze, frozen * x.wb, 0.0))
    rows_out = x.L * (x.qd + 2 * x.kvd + x.h + 2 * x.f + x.h)
    int8_scales = np.where(x.int8, rows_out * C.INT8_ROW_SCALE_BYTES, 0.0)
    # mxfp4 on a mixture-of-experts model (gpt-oss's checkpoints, llama.cpp's MXFP4_MOE): only the
    # routed experts' matrices take the precision's bits, the rest stays 16-bit (GGUF: Q8_0);
    # engine/constants.py QUANT_EXPERTS_ONLY. A dense model quantizes every linear layer (GGUF: Q8_0).
    experts_only = x.experts_only & (x.expert_linear > 0)
    quantized = np.where(experts_only, x.expert_linear, _quantized_linear(x))
    gguf_experts = np.where(experts_only & ~np.isnan(x.gguf_expert_bits), x.expert_linear, 0.0)
    # a GGUF type with bits of its own for the decoder linears (nvfp4_gguf: NVFP4 linears, the rest BF16)
    gguf_lin = np.where(np.isnan(x.gguf_linear_bits), 0.0, _quantized_linear(x))
    infer_weights = np.where(
        np.isnan(x.gguf_bits),
        quantized * np.nan_to_num(x.lin_bits) / 8 + (x.N - quantized) * x.act_b + int8_scales,
        gguf_experts * np.nan_to_num(x.gguf_expert_bits) / 8 + gguf_lin * np.nan_to_num(x.gguf_linear_bits) / 8
        + (x.N - gguf_experts - gguf_lin) * np.nan_to_num(x.gguf_bits) / 8,
    )
    # the checkpoint's own bytes win where its header gave them for this precision (issue 25)
    infer_weights = np.where(np.isnan(x.stored_bytes), infer_weights, x.stored_bytes)
    # a vision tower / projector (a VL model's vision_params, a GGUF mmproj) is loaded in 16-bit
    # beside the language model (transformers keeps it in the load dtype; llama.cpp's mmproj is f16),
    # and frozen when training (LLaMA-Factory freeze_vision_tower: true by default), in the training dtype
    vision = x.vision * np.where(x.train, x.wb, x.act_b)
    return np.where(x.train, train_weights, infer_weights) + vision


def _trained_norm_values(h, L, k_layers, full, freeze):
    """The values of the RMSNorm weights that train (two per trained decoder layer, and the final
    norm when every layer trains), for full and freeze fine-tuning; 0 for the other methods. The
    8-bit and paged optimizers keep these small tensors apart from the large ones."""
    return np.where(full | freeze, 2 * h * np.where(freeze, k_layers, L) + h * full, 0.0)


def optimizer_state_bytes(x: Inputs, trainable: np.ndarray, newer: tuple | None) -> np.ndarray:
    """The optimizer's states and the fp32 master weights (mixed_*), for training. newer: the newer
    optimizers' engine/optimizers.py bytes_of(x, trainable), or None where no row has one."""
    # small tensors (norm weights, fewer than 4096 values) keep fp32 Adam states in bnb
    norms = _trained_norm_values(x.h, x.L, x.k_layers, x.full, x.freeze)
    small = np.where(x.h < C.ADAM8BIT_MIN_SIZE, norms, 0.0)
    adam8 = (trainable - small) * C.ADAM8BIT_BYTES + small * 8.0
    # Adafactor (transformers.optimization.Adafactor, beta1=None): a row and a column vector
    # per matrix, a full second moment for vectors; no first moment.
    per_layer_rc = (7 * x.h + 2 * x.qd + 2 * x.kvd + 3 * x.f) + 2 * x.h
    ada_full = x.L * per_layer_rc + (x.V + x.h) * np.where(x.tied, 1.0, 2.0) + x.h
    n_adapted = sum(x.flags.values())
    # the states follow the fp32 gradient copy (`state[...].to(grad)` after `grad = grad.float()`
    # in transformers 5.24 Adafactor.step): fp32 whatever the parameters' dtype
    ada_states = np.select([x.full, x.freeze, x.lora], [ada_full, x.k_layers * per_layer_rc,
                                                        x.L * (x.in_out + 2 * x.r * n_adapted)], 0.0) * 4.0
    states = np.where(x.adam8, adam8, np.where(x.adafactor, ada_states, trainable * x.state_count * x.sdb)) + trainable * x.master
    # torchao AdamW8bit: 8-bit codes + an fp32 scale per 256 values for tensors of >= 4096 values that
    # divide into blocks of 256; the others (here the norm weights) two states in the parameter's dtype
    # (torch.zeros_like(p): x.sdb). Matrices are taken as multiples of 256 values (the catalog's are: widths
    # that are multiples of 256, gpt-oss's 2880 only times multiples of 4); small tensors as for bitsandbytes.
    if np.any(x.ao8):
        ao_small = np.where((x.h < C.TORCHAO_8BIT_MIN_SIZE) | (x.h % C.TORCHAO_8BIT_BLOCK != 0), norms, 0.0)
        ao8 = (trainable - ao_small) * C.TORCHAO_8BIT_BYTES + ao_small * 2 * x.sdb + trainable * x.master
        states = np.where(x.ao8, ao8, states)
    # bitsandbytes 32-bit (paged) AdamW: two fp32 states whatever the parameter's dtype (constants)
    states = np.where(x.paged32, trainable * C.PAGED_32BIT_STATE_BYTES, states)
    if newer is not None:  # Lion, GaLore, Adam-mini, Muon (engine/optimizers.py bytes_of)
        hit, new_states, _temps = newer
        states = np.where(hit, new_states, states)
    return np.where(x.train, states, 0.0)


def step_temporary_bytes(x: Inputs, trainable: np.ndarray, newer: tuple | None) -> np.ndarray:
    """The optimizer step's temporaries: multi-tensor AdamW's sqrt of every second moment at
    once; Adafactor squares one tensor at a time (twice the largest trainable tensor)."""
    largest = np.select([x.full, x.freeze, x.lora], [np.maximum(x.V * x.h, x.h * x.f), x.h * x.f,
                                                     x.r * np.maximum(x.h, x.f)], 0.0)
    temps = np.where(x.adafactor, largest * adafactor_step_bytes_per_value(x), trainable * x.temp_count * x.sdb)
    # optimizer in backward: each parameter steps alone, so only the largest one's temporaries
    temps = np.where(x.opt_bwd, np.minimum(temps, largest * x.temp_count * x.sdb), temps)
    if newer is not None:  # Lion, GaLore, Adam-mini, Muon: their own largest tensors (engine/optimizers.py)
        hit, _states, new_temps = newer
        temps = np.where(hit, new_temps, temps)
    return np.where(x.train, temps, 0.0)


def _largest_gradient(x: Inputs) -> np.ndarray:
    """The largest trained tensor's gradient, per GPU (the one optimizer-in-backward holds)."""
    largest = np.select([x.full, x.freeze, x.lora], [np.maximum(np.where(x.tied, 0.0, x.V * x.h), x.h * x.f), x.h * x.f,
                                                     x.r * np.maximum(x.h, x.f)], 0.0)
    return largest * x.gb / x.mp


def adafactor_step_bytes_per_value(x: Inputs) -> np.ndarray:
    """Bytes per value of the largest trained tensor alive at once inside transformers'
    Adafactor.step (transformers 5.24 optimization.py Adafactor.step, one parameter at a time):
    `update = (grad**2) + eps` holds grad**2 and the sum (two fp32 tensors; the later
    `_approx_sq_grad` product and `p_data_fp32.add_(-update)` hold two as well), and a 16-bit
    parameter first gets fp32 copies of its gradient (`grad = grad.float()`) and of itself
    (`p_data_fp32 = p.float()`): 8 bytes per value for fp32 tensors, 16 for 16-bit ones.
    Measured: llama-2-7b bf16 full b1 x 2048 (calibration) holds 1.46 GiB more than 2 x largest x
    gradient bytes, 16 - 4 = 12 bytes x 131M embedding values."""
    return 8.0 + np.where(x.gb < 4, 8.0, 0.0)


def totals(x: Inputs) -> Totals:
    trainable = trainable_params(x)
    # the newer optimizers' (hit, states, temporaries), computed once for both (engine/optimizers.py)
    newer = optimizers.bytes_of(x, trainable) if x.opt_kind else None
    gradients = np.where(x.train, trainable * x.gb, 0.0)
    if np.any(x.frozen_grads):
        # FSDP1, a mixed flat parameter (engine/stacks.py flat_params mixed): the decoder layers' frozen weights get
        # gradients too, in the flat parameter's dtype (the base's; the adapters share it: FSDP1 flattens one dtype);
        # the root unit (embeddings, lm_head, final norm) holds no adapter, so its flat parameter stays frozen
        gradients = gradients + np.where(x.frozen_grads, x.L * x.layer_all * x.wb, 0.0)
    return Totals(trainable=trainable, weights=weight_bytes(x, trainable),
                  gradients=gradients,
                  states=optimizer_state_bytes(x, trainable, newer), temps=step_temporary_bytes(x, trainable, newer),
                  experts=expert_weight_bytes(x))


def expert_weight_bytes(x: Inputs) -> np.ndarray:
    """The routed experts' weight bytes: linear layers, at the linear bits of the precision
    (inference: int8/int4/nf4 bits or GGUF's average; a quantized frozen base: its bits; else
    the weights' bytes)."""
    infer_b = np.where(np.isnan(x.gguf_bits), np.nan_to_num(x.lin_bits) / 8, np.nan_to_num(x.gguf_bits) / 8)
    infer_b = np.where(x.experts_only & ~np.isnan(x.gguf_expert_bits), np.nan_to_num(x.gguf_expert_bits) / 8, infer_b)
    train_b = np.where(x.base_quant, x.base_bits / 8, x.wb)
    if np.any(x.bnb_experts):  # bitsandbytes leaves them in the load dtype (fp32 under kbit_prep): BNB_FUSED_EXPERTS
        train_b = np.where(x.bnb_experts > 0, _frozen_rest_bytes(x), train_b)
        infer_b = np.where(x.bnb_experts > 0, x.act_b, infer_b)
    return x.expert_params * np.where(x.train, train_b, infer_b)


def _ep_weights(x: Inputs, t: Totals) -> np.ndarray:
    """Weights per GPU: expert parallel ep > 1 keeps 1/ep of the experts whole on each GPU of a
    stage instead of 1/tp of each (vLLM --enable-expert-parallel: EP size = TP x DP; Megatron-Core
    expert-model-parallel), the other weights split by tp x pp as before."""
    return np.where(x.ep > 1, (t.weights - t.experts * (1 - x.tp / x.ep)) / x.mp, t.weights / x.mp)


def _ep_share(x: Inputs) -> np.ndarray:
    """Full fine-tuning with ep > 1: the share of gradients and optimizer states left on a GPU
    (the experts' part divided over ep instead of tp); 1.0 otherwise (bit-identical)."""
    share = x.expert_params / x.N
    return np.where((x.ep > 1) & x.full, 1 - share * (1 - x.tp / x.ep), 1.0)


# ---- placement: model parallel, ZeRO sharding, offload ---------------------------------------

def _split(value: np.ndarray, sharded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what every data-parallel rank holds whole, what ZeRO shards over them)."""
    return np.where(sharded, 0.0, value), np.where(sharded, value, 0.0)


def _on_gpu(pair: tuple, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.where(kept, pair[0], 0.0), np.where(kept, pair[1], 0.0)


def _tied_gradient(x: Inputs) -> np.ndarray:
    """One V x h gradient of a tied embedding (full fine-tuning), per GPU."""
    return np.where(x.full & x.tied, x.V * x.h * x.gb / x.mp, 0.0)


# ---- DeepSpeed ZeRO-1/2: the stage-1/2 optimizer's gradient buffers ------------------------------

def _where_part(mask, a: Part, b: Part) -> Part:
    """Part a where mask, else Part b, field by field (a scalar zero stays one where both are)."""
    return Part(*(v if (is_zero(v) and is_zero(w)) else np.where(mask, v, w) for v, w in zip(a, b)))


@dataclass(frozen=True, eq=False)
class DeepSpeed12:
    """What DeepSpeed's ZeRO-1/2 optimizer holds beside the weights and states (`deepspeed_zero12`):
    `gradients` replaces the gradients' parts of its rows, `workspace` is added to the workspace's."""

    on: np.ndarray                # training rows under ZeRO stage 1 or 2 (DeepSpeed's stage_1_and_2.py)
    gradients: dict               # {phase: Part}, where `on`
    workspace: dict               # {phase: Part} added, zero elsewhere


def deepspeed_zero12_rows(x: Inputs) -> np.ndarray:
    """The training rows under ZeRO stage 1 or 2 (DeepSpeed's stage-1/2 optimizer; not with torchtune's
    optimizer in backward, which DeepSpeed does not run): they have the phase `grad_reduce`."""
    return x.train & ((x.zero == 1) | (x.zero == 2)) & ~np.asarray(x.opt_bwd, dtype=bool)


def deepspeed_zero12(x: Inputs, t: Totals) -> DeepSpeed12 | None:
    """DeepSpeed's DeepSpeedZeroOptimizer (ZeRO-1 and ZeRO-2), per GPU and phase; None where no row has it.

    Read at DeepSpeed v0.16.4 (e2dc3ee, 2025-02; the same statements at v0.14.0 and v0.15.0),
    deepspeed/runtime/zero/stage_1_and_2.py, as transformers' Trainer runs it (accelerate's DeepSpeed
    engine; bf16 on: DeepSpeedEngine._do_optimizer_sanity_check, runtime/engine.py lines 1300-1319, takes
    the ZeRO optimizer for stages 1 and 2 alike: grad_accum_dtype is the model's dtype under ZeRO, line
    1021) with the configuration engine/constants.py DS_* describes (DeepSpeed's defaults: the planner's
    export). T = the trained values on a GPU (the flat groups), B = reduce_bucket_size, g = the trained
    parameters' bytes (`self.dtype`, the first parameter's: bf16 under DeepSpeed's bf16 mode):

    - __init__: the 16-bit parameters are copied into one flat buffer per group and the parameters
      become views of it (lines 354-367: the weights, no second copy); the fp32 partition is
      `.clone().float()` of this rank's slice (lines 398-409) and the optimizer's states are created on
      it at the first step (the optimizer states and master weights the engine counts, sharded).
      `initialize_optimizer_states` builds an fp32 gradient partition and drops it (lines 682-700).
    - backward (lines 2038-2067): `ipg_buffer = [torch.empty(reduce_bucket_size, dtype=self.dtype)]`
      (contiguous_gradients; two with overlap_comm) before `loss.backward()`: B g in the loss's
      backward, the layers' backward and at its end, freed by the epilogue (`_release_ipg_buffers`,
      lines 676-680, 802).
    - ZeRO-2 (hooks on every parameter's gradient accumulator, lines 527-528, 904-919): each gradient is
      copied into the bucket as autograd produces it (its own tensor freed: `grad_reduc.data =
      new_grad_tensor.data`, lines 939-966), or kept whole where it is larger than B (lm_head, the
      embedding: `extra_large_param_to_reduce`). When the bucket is full it is reduced, all-reduced in
      place (average_tensor, lines 1051-1147: the bucket split into one slice per rank's partition, a
      rank's consecutive ranges merged): `allreduce_bucket` flattens the slices (line 1491), which copies
      them into a new tensor only where there are two or more (torch's flatten_dense_tensors returns
      `t.contiguous().view(-1)` for one tensor, `at::cat` otherwise: aten TensorShape.cpp), i.e. a bucket
      straddling two ranks' partitions (all-reduced in bf16: communication_data_type = the model's,
      engine.py lines 939-950, no conversion copy). The first reduction that holds one of this rank's
      parameters allocates `grads_in_partition = torch.empty(numel of the parameters in this rank's
      partition)` (copy_grads_in_partition, lines 1343-1356), whole, kept to the step. The rank owning
      the flat buffer's end (lm_head, the last layers: backward's first gradients) allocates it at the
      first bucket, beside every layer's activations: a contiguous-gradients ZeRO-2 holds T g / dp more
      than ZeRO-1 at the start of backward (DeepSpeedExamples issue #336, a DeepSpeed maintainer:
      "DeepSpeed allocates the gradient buffer at the beginning of a backward pass. This increases the
      peak memory typically when the dominant memory usage is activation"); an lm_head reduced alone
      keeps its own gradient until it is copied into it. Where T <= B no bucket fills before the
      epilogue: every gradient sits in the bucket itself.
    - ZeRO-1 (no hooks without overlap_comm): autograd accumulates every full gradient; after backward
      (DeepSpeedEngine.backward -> allreduce_gradients, engine.py lines 2048-2062, 2150-2152)
      `reduce_gradients` walks the parameters in the flat order (the embedding first), copying each into
      the bucket (its own tensor freed) and reducing it when full; the rank owning the embedding
      allocates `grads_in_partition` at the first reduction, beside every other gradient (the first
      bucket's already moved into the bucket: between B minus one tensor and B values, taken as B minus
      the largest decoder matrix; where the embedding alone is larger than B it is reduced whole first,
      its flat copy before the partition buffer exists).
    - epilogue (independent_gradient_partition_epilogue, lines 764-808): the last bucket's reduction,
      `averaged_gradients` = views of `grads_in_partition`, the bucket freed, every parameter's `.grad`
      set to None.
    - step (lines 1826-1945): `scaled_global_norm` (a float64 copy of one gradient at a time, lines
      1696-1700), then per group `single_grad_partition = self.flatten(averaged_gradients).to(fp32)`
      (line 1896: a 16-bit flat copy and its fp32 conversion beside `grads_in_partition`), the 16-bit
      views dropped (lines 1904-1906; `grads_in_partition` is freed once no group's views hold it: with
      the Trainer's two parameter groups it lives through the first group's step), the optimizer's step
      on the fp32 partition with that fp32 gradient (4 T / dp), which is then dropped (lines 1915-1917);
      the updated 16-bit weights are all-gathered into the flat buffer itself (no bucket).
    - optimizer offload (cpu_offload): contiguous gradients whatever the config (line 206); a
      `temp_grad_buffer_for_gpu_offload` of the largest trained tensor, 16-bit, on the GPU from __init__
      (lines 483-485); each of this rank's gradients is copied to the host fp32 partition after a
      float64 copy for its norm (`accumulated_grad.data.double().norm(2)`, line 1266) and an fp32 copy
      (`src_tensor.float()`, line 1281): 8 bytes a value of one tensor at a time; at the step the
      updated fp32 partition is copied back to the GPU (`fp32_partition.to(device)`, line 1882: 4 T / dp)
      before its 16-bit copy. No `grads_in_partition` on the GPU.

    Bounds where the moment depends on dp (the phases are closed forms in 1 / dp): a straddling bucket's
    flat copy (B g) is counted beside every layer's activations in ZeRO-2's backward, exact where the
    rank's partition is at most a bucket or so (T / dp <= B: the first buckets straddle), above by up to
    B g where it comes later, beside fewer activations; the embedding reduced alone is counted with its
    flat copy (ZeRO-1's end of backward, ZeRO-2's reduction after it), exact where it spans two ranks'
    partitions (V h > T / dp), above by V h g where one rank holds it whole; the last bucket is counted
    full (B values); the offload path's float64 copy is taken of the whole tensor (the rank's slice of
    it is at most T / dp). Not modelled: a rank's partition buffer counts the parameters straddling its
    edges whole (up to one tensor more); the gradient norm's float64 copy of the largest gradient beside
    `grads_in_partition` (8 bytes a value) exceeds the step's conversion only above dp = 0.75 T /
    (largest tensor) (Llama 3 8B: 12 ranks); overlap_comm's second bucket; ZeRO-1 with overlap_comm
    (hooks, gradients reduced in backward); transformers 5's fused expert tensors (one parameter for a
    layer's experts) as the largest trained tensor (taken as one expert's matrix, `lin_max`)."""
    on = deepspeed_zero12_rows(x)
    if not np.any(on):
        return None
    z2 = on & (x.zero == 2)
    z1 = on & ~z2
    off = on & x.off_opt
    dev = on & ~x.off_opt
    g = x.gb
    B = float(C.DS_REDUCE_BUCKET_SIZE)
    T = t.trainable / x.mp * _ep_share(x)              # values in this GPU's flat groups
    grads = T * g                                      # grads_in_partition (/ dp): t.gradients' share
    big = T > B                                        # a bucket fills before the epilogue
    vh = x.V * x.h / x.mp                              # the embedding's (and an untied lm_head's) values
    embed_xl = x.full & (vh > B)                       # reduced alone (extra_large_param_to_reduce)
    head_xl = embed_xl & ~x.tied
    layer = np.where(x.lora, x.r * np.maximum(x.h, x.f), x.lin_max) / x.mp  # the largest decoder tensor
    p0 = np.where(x.full, np.maximum(vh, layer), layer)  # the largest trained tensor (the embedding's rank)
    p_bw = np.where(x.full & ~x.tied, p0, layer)          # ... among backward's first gradients
    tied = _tied_gradient(x)
    ipg = np.where(on, C.DS_IPG_BUFFERS * B * g, 0.0)
    temp = np.where(off, p0 * g, 0.0)
    gip = np.where(big, grads, 0.0)
    # ZeRO-2: the partition buffer from the first bucket on (lm_head's own gradient is in it, or in the bucket,
    # by the layers' backward); under optimizer offload no gradient on the GPU but the bucket's
    head_part = Part(shard=np.where(dev, gip, 0.0))
    # the step: the fp32 gradient partition (+ the 16-bit partition buffer under the Trainer's two groups)
    retained = np.where(np.asarray(x.ds_one_group, dtype=bool), 0.0, grads)
    step_grad = Part(shard=np.where(dev, T * 4.0 + retained, 0.0))
    full_grads = t.gradients / x.mp * _ep_share(x)
    reduce_grad = Part(np.where(z1, full_grads, 0.0), np.where(z2 & dev, gip, 0.0))
    gradients = {
        "backward": head_part, "backward_end": head_part, "grad_reduce": reduce_grad, "optimizer": step_grad}
    masks = {"backward": z2, "backward_end": z2 & dev, "grad_reduce": on, "optimizer": on}
    # the workspace: the bucket, the reductions' flat copies and the offload path's copies. ZeRO-2's backward:
    # a straddling bucket's flat copy (B g, a bound) or lm_head's own gradient while it is copied into the
    # partition buffer (V h g, reduced alone)
    flat_bw = np.where(big, np.maximum(B, np.where(head_xl, vh, 0.0)), 0.0) * g
    # (offload: a tensor's float64 copy after its reduction, lm_head's beside its own gradient where it is
    # reduced alone; taken whole: the rank's slice of it is at most T / dp)
    double_bw = np.where(big, np.maximum(8.0 * p_bw, np.where(head_xl, vh * g + 8.0 * vh, 0.0)), 0.0)
    bw = np.where(z2 & dev, flat_bw, np.where(z2 & off, np.maximum(flat_bw, double_bw), 0.0))
    # ZeRO-1's end: every gradient (the engine's tied moment: 3 V h in autograd's buffer) or, the
    # embedding reduced alone first, every gradient and its flat copy (V h g), before the partition buffer
    end = np.where(z1, np.maximum(np.where(embed_xl, tied + vh * g, 0.0) - 3.0 * tied, 0.0), 0.0)
    # the reduction after backward: ZeRO-1, the partition buffer beside every gradient but the first
    # bucket's (moved into the bucket); ZeRO-2, the last bucket's flat copy (the embedding whole: its own
    # gradient and its copy) beside the partition buffer; offloaded, a float64 copy of the largest
    moved = np.where(embed_xl, 0.0, np.where(big, np.maximum(B - layer, 0.0), T)) * g
    last = np.where(embed_xl, 2.0 * vh, np.minimum(B, T)) * g
    own = np.where(embed_xl, vh * g, 0.0)
    red_fixed = np.where(z1, -moved + np.where(off, 8.0 * p0, 0.0),
                         np.where(off, np.maximum(last, own + 8.0 * p0), last))
    red_shard = np.where(z1 & dev, grads, 0.0)
    # the step's conversion: the 16-bit partition buffer, its flat copy and the fp32 gradient at once,
    # against the optimizer's own temporaries (optimizer_temp) beside the fp32 gradient
    temps = t.temps / x.mp * _ep_share(x)
    convert = grads + np.where(g < 4, grads, 0.0) - retained
    opt_shard = np.where(dev, np.maximum(convert - temps, 0.0), np.where(off, T * 4.0, 0.0))
    workspace = {
        "forward": Part(temp),
        "loss_backward": Part(ipg + temp),
        "backward": Part(ipg + temp + bw),
        "backward_end": Part(ipg + temp + end),
        "grad_reduce": Part(ipg + temp + red_fixed, red_shard),
        "optimizer": Part(temp, opt_shard),
    }
    return DeepSpeed12(on=on, gradients={k: (masks[k], p) for k, p in gradients.items()}, workspace=workspace)


def deepspeed_zero3_step(x: Inputs, t: Totals) -> tuple | None:
    """DeepSpeed stage 3's fp32 gradient at the step, min(T / dp, sub_group_size) x 4 per GPU (see
    deepspeed_zero3), for the GPUs-needed solver, to which it is not fixed + shard / dp: (T x 4, the sub
    group x 4, whether the row's own dp holds more than a sub group (then deepspeed_zero3 counts the sub
    group as fixed bytes, else T x 4 as the shard)), per memory configuration; None where no row has it."""
    on = x.ds_zero3 & (x.zero == 3) & ~np.asarray(x.opt_bwd, dtype=bool) & ~x.off_opt
    if not np.any(on):
        return None
    T = t.trainable / x.mp * _ep_share(x)
    sub = float(C.DS_SUB_GROUP_SIZE)
    return np.where(on, T * 4.0, 0.0), np.where(on, sub * 4.0, 0.0), on & (T / x.dp > sub)


def deepspeed_zero3(x: Inputs, t: Totals) -> dict[str, Part] | None:
    """What DeepSpeed's stage-3 optimizer holds on every GPU beside the sharded weights, gradients and states
    the engine counts (ZeRO-3 under DS_ZERO3_RECIPES; None where no row has it), read at DeepSpeed 38327e0
    (2025-02-21, v0.16.4) deepspeed/runtime/zero/stage3.py with DeepSpeed's defaults (the planner's export
    writes the stage only; config.py: contiguous_gradients True line 98, reduce_bucket_size 5e8 line 109,
    sub_group_size 1e9 line 168):

    - the reduction bucket `__ipg_bucket_flat_buffer = torch.empty(self.reduce_bucket_size, dtype=self.dtype)`,
      allocated once the optimizer is built (lines 537-540) and kept: B values in the trained parameters'
      dtype (`self.dtype`, line 189: the module's after DeepSpeed's bf16 / fp16 cast, so 2 bytes for peft's
      fp32 adapters too) in every training phase;
    - the gradient partitions `grad_partitions_flat_buffer = torch.zeros(sum of partition_numel)` (lines
      545-548), kept from initialisation: T / dp gradient values through the forward and the loss too,
      where the engine's FSDP rows hold none (from the backward on they are the gradients it counts);
    - at the step, each sub group's gradient copied to fp32 (`_prepare_fp32_grad_for_sub_group`, lines
      1895-1905: `self.flatten(self.averaged_gradients[i]).to(fp32)`, kept as the fp32 partition's .grad
      through its step): min(T / dp, sub_group_size) x 4 (not with the optimizer offloaded: on the host).

    Not modelled: the 16-bit flat copy made while converting (freed at once), the parameters' prefetch
    (stage3_prefetch_bucket_size 5e7) and live limit (1e9) in place of FSDP2's two layers in flight, and
    fp32 training's own fp32 clone of the partitions (`fp32_partitioned_groups_flat`, a second copy there)."""
    on = x.ds_zero3 & (x.zero == 3) & ~np.asarray(x.opt_bwd, dtype=bool)  # (ds_zero3: training rows only)
    if not np.any(on):
        return None
    g = x.wb  # the trained parameters' dtype under DeepSpeed's bf16 / fp16 mode (its module cast)
    T = t.trainable / x.mp * _ep_share(x)
    bucket = np.where(on, float(C.DS_REDUCE_BUCKET_SIZE) * g, 0.0)
    # the partitions as a shard (bytes / dp), so that the GPUs-needed solver, which varies dp, sees them
    # shrink (kept as fixed bytes at the row's own dp, they made it ask for a rank more); min(T / dp, sub
    # group) is the shard where the row's partition is at most a sub group, else the sub group (fixed):
    # exact at the row's dp, never below it at another
    grads = np.where(on, T * g, 0.0)
    step = deepspeed_zero3_step(x, t)  # (T x 4, the sub group x 4, where the row's dp holds more than a sub group)
    if step is None:  # (the optimizer offloaded on every row: the fp32 gradient is the host's)
        fp32_shard = fp32_fixed = np.zeros_like(bucket)
    else:
        t4, sg4, as_fixed = step
        fp32_shard, fp32_fixed = np.where(as_fixed, 0.0, t4), np.where(as_fixed, sg4, 0.0)
    return {"forward": Part(bucket, grads), "loss_backward": Part(bucket, grads), "backward": Part(bucket),
            "backward_end": Part(bucket), "optimizer": Part(bucket + fp32_fixed, fp32_shard)}


# ---- the components ---------------------------------------------------------------------------

def _quant_state_bytes(x: Inputs, per_gpu: bool = True) -> np.ndarray | float:
    """A bitsandbytes 4-bit base's QuantState (Inputs.qstate_bits per quantized weight: the linears,
    and lm_head where LitGPT quantizes it), per GPU (split by tensor x pipeline parallel, the routed
    experts by ep as the weights are) or, per_gpu False, the whole model's; 0.0 where no row has one.

    Not a parameter: bitsandbytes' Params4bit._quantize stores it on the parameter and on its module
    (`self.quant_state = quant_state`; `self.module.quant_state = quant_state`: bitsandbytes 0.43.0
    nn/modules.py lines 288-290, 0.45.5 lines 304-306), Linear4bit.__init__ makes it a plain attribute
    (`self.quant_state = None`, 0.43.0 line 375), and Linear4bit.forward puts it back on a weight that
    lost it, "when the parameter got converted. This happens for example for fsdp" (0.43.0 lines
    410-418; 0.44+ fix_4bit_weight_quant_state_from_module, 0.45.5 lines 349-363). It is computed on
    the GPU and stays there: transformers >= 4.39 (PR #29587, modeling_utils.py
    _load_state_dict_into_meta_model) quantizes each layer on the GPU under FSDP or DeepSpeed ZeRO-3
    and moves only `value.data` to the CPU (or meta), rebuilding the Params4bit with `**value.__dict__`,
    the same QuantState; from_pretrained skips zero.Init for a quantized model. So it is whole on
    every GPU and never offloaded:
    - FSDP1: the FlatParameter is the torch.cat of the parameters' flattened data
      (torch/distributed/fsdp/_flat_param.py FlatParamHandle.flatten_tensors,
      `torch.flatten(_detach_if_needed(tensor))`); shard() keeps a chunk of it, parameter CPU offload
      pins that chunk on the host (init_flat_param_attributes, `flat_param._local_shard.pin_memory()`),
      and forward sets plain-tensor views as the module's weight (_use_unsharded_views(as_params=False)),
      so Linear4bit takes the state from the module.
    - FSDP2: FSDPParam._init_sharded_param copies a dim-0 chunk of the data into `new_zeros` and,
      offloaded, `.cpu()`s it (torch/distributed/fsdp/_fully_shard/_fsdp_param.py); bitsandbytes
      >= 0.47.0 even hands every chunk the whole state (Params4bit.__torch_function__ for
      torch.chunk / torch.split, `quant_state=tensor.quant_state`, 0.47.0 lines 359-397).
    - DeepSpeed ZeRO-3: _convert_to_deepspeed_param adds ds_* attributes to the same parameter object,
      _partition_param copies its slice into `ds_tensor` (on the offload device under offload_param)
      and free_param sets `param.data = torch.empty(0, ...)` (DeepSpeed v0.14.0
      runtime/zero/partition_parameters.py lines 1064-1085, 1483-1592, 277-287): quant_state stays.
    torchtune's torchao NF4 shards its scales with its data (`_bnb_base`): qstate_bits 0 there."""
    if not np.any(np.asarray(x.qstate_bits) > 0):
        return 0.0
    quantized = _quantized_linear(x) + np.where(x.head_quant, x.V * x.h, 0.0)
    whole = quantized * x.qstate_bits / 8
    if not per_gpu:
        return whole
    experts = x.expert_params * (1.0 - x.bnb_experts) * x.qstate_bits / 8
    return np.where(x.ep > 1, (whole - experts * (1 - x.tp / x.ep)) / x.mp, whole / x.mp)


def weights(x: Inputs, t: Totals) -> dict[str, Part]:
    """The weights: split by tensor x pipeline parallel; ZeRO-3 shards them when training,
    offload 'all' keeps them on the host, except a bitsandbytes 4-bit base's QuantState, which
    neither touches (`_quant_state_bytes`): whole on every GPU."""
    on_gpu = _ep_weights(x, t)
    zero3 = (x.zero >= 3) & x.train
    fixed, shard = _on_gpu(_split(on_gpu, zero3), ~x.off_all)
    qstate = _quant_state_bytes(x)
    if not is_zero(qstate):
        fixed = fixed + np.where(zero3 | x.off_all, qstate, 0.0)
        shard = shard - np.where(zero3 & ~x.off_all, qstate, 0.0)
    return {**dict.fromkeys(TRAIN_PHASES, Part(fixed, shard)), **dict.fromkeys(INFER_PHASES, Part(on_gpu))}


def gradients(x: Inputs, t: Totals) -> dict[str, Part]:
    """The gradients: ZeRO-2 shards them; with optimizer offload and ZeRO-2 they go to the host
    as they are reduced. lm_head's gradient exists from the first layer's backward on. DeepSpeed's
    ZeRO-1/2 optimizer holds its own (`deepspeed_zero12`): its partition buffer, at the step the fp32
    gradient partition."""
    out = _gradient_parts(x, t)
    ds = deepspeed_zero12(x, t)
    if ds is not None:  # DeepSpeed ZeRO-1/2: its partition buffer and the step's fp32 gradient
        for name, (mask, part) in ds.gradients.items():
            out[name] = _where_part(mask, part, out.get(name, Part()))
    if np.any(x.accum_last):
        # gradient accumulation (accum_sync last): from the first micro-batch's backward to the last one's, the step's
        # gradients so far are alive through every later forward and backward. Under ZeRO-3 as FSDP they are whole on
        # each GPU: FSDP1's no_sync keeps flat_param.grad unsharded in the parameters' dtype (a mixed flat parameter's
        # frozen weights too: t.gradients), FSDP2's set_requires_gradient_sync(False) in the reduce dtype (fp32 under
        # mixed precision, as the pipeline-parallel accumulation in `workspace`); on one GPU / ZeRO-0-1 the usual ones.
        # The last micro-batch's backward reduce-scatters them (backward_end and the step as without accumulation);
        # lm_head's own gradient in `backward` is counted twice (one V x h tensor).
        # DeepSpeed (ZeRO-1/2, and ZeRO-3 under its recipes) reduces each micro-batch into its gradient partitions: at
        # ZeRO-1 every gradient is kept whole until the boundary, at ZeRO-2 this rank's partition (grads_in_partition,
        # stage_1_and_2.py), at its ZeRO-3 the partitions it holds from initialisation (`deepspeed_zero3`): nothing more
        whole = np.select([np.asarray(x.fsdp, dtype=bool), x.zero >= 2],
                          [np.where(x.flat_views, t.gradients, _fsdp2_accumulated_gradients(x, t)), 0.0], t.gradients)
        alive = np.where(x.accum_last, whole / x.mp * _ep_share(x), 0.0)
        partition = np.where(x.accum_last & (x.zero == 2), t.gradients / x.mp * _ep_share(x), 0.0)  # over the ranks
        for phase in ("forward", "loss_backward", "backward"):
            part = out.get(phase, Part())
            out[phase] = part._replace(fixed=part.fixed + alive, shard=part.shard + partition)
    return out


def _gradient_parts(x: Inputs, t: Totals) -> dict[str, Part]:
    """The gradients in their dtype (`gradients` without DeepSpeed ZeRO-1/2's own buffers): what the
    model states count (`model_state_bytes`)."""
    z2 = x.zero >= 2
    fix, sh = _on_gpu(_split(t.gradients / x.mp * _ep_share(x), z2), ~(x.off_opt & z2))
    head = np.where(x.full & ~x.tied, x.V * x.h * x.gb / x.mp, 0.0)
    # end of backward: a tied embedding's own .grad is not set yet (its two gradients are
    # summed in autograd's input buffer first: `workspace`), so it is left out of the gradients
    # the GPU holds, and only of those: with ZeRO >= 2 and optimizer offload the GPU holds none,
    # and leaving it out there too gave negative gradients (Llama 3.2, full, ZeRO-2, offload
    # optimizer: -1,050,673,152 bytes).
    not_yet = np.where(x.off_opt & z2, 0.0, _tied_gradient(x))
    end = Part(fix - np.where(z2, 0.0, not_yet), sh - np.where(z2, not_yet, 0.0))
    if np.any(x.opt_bwd):  # optimizer in backward (torchtune): each gradient is applied and freed at once
        one = _largest_gradient(x)
        head = np.where(x.opt_bwd, one, head)
        end = Part(np.where(x.opt_bwd, one, end.fixed), np.where(x.opt_bwd, 0.0, end.shard))
        fix, sh = np.where(x.opt_bwd, one, fix), np.where(x.opt_bwd, 0.0, sh)
    # ZeRO-3 / FSDP2: each layer's gradients are reduce-scattered to their shard as its backward ends,
    # so the decoder layers' shards accumulate through backward while the checkpointed inputs (or saved
    # activations) are freed: the `backward` phase is its start (no shard yet, every layer's activations),
    # `backward_end` its last layer (every layer's shard, lm_head's unsharded gradient, one layer's
    # activations: workspace), the larger of the two ends (measured: 26 of qwen2.5-7b's 28 layers'
    # shards at its peak). The root's own gradients are reduce-scattered after its parameters are
    # resharded (_fsdp_param_group.py post_backward: reshard, then foreach_reduce), which holds less.
    z3 = (x.zero >= 3) & x.train & x.fsdp_root & ~np.asarray(x.opt_bwd, dtype=bool)  # opt_bwd: freed at once
    if np.any(z3):
        layers_share = np.where(x.full, 1.0 - _root_params(x) / np.maximum(t.trainable, 1.0), 1.0)
        end = Part(np.where(z3, head, end.fixed), np.where(z3, sh * layers_share, end.shard))
    return {"backward": Part(head), "backward_end": end, "optimizer": Part(fix, sh)}


def optimizer_states(x: Inputs, t: Totals) -> dict[str, Part]:
    """The optimizer states (with the master weights): ZeRO-1 shards them; offloaded or paged
    (paged AdamW: unified memory that may spill) they are not counted on the GPU."""
    kept = _on_gpu(_split(t.states / x.mp * _ep_share(x), x.zero >= 1), ~(x.off_opt | x.paged))
    if np.any(x.paged32):  # bitsandbytes keeps the states of tensors under 1e5 elements on the device
        resident = _on_gpu(_split(x.paged_small * C.PAGED_32BIT_STATE_BYTES / x.mp, x.zero >= 1), x.paged32 & ~x.off_opt)
        kept = (kept[0] + resident[0], kept[1] + resident[1])
    return dict.fromkeys(TRAIN_PHASES, Part(*kept))


def optimizer_temporaries(x: Inputs, t: Totals) -> dict[str, Part]:
    """The optimizer step's temporaries, in the optimizer phase (on the host with offload)."""
    kept = _on_gpu(_split(t.temps / x.mp * _ep_share(x), x.zero >= 1), ~x.off_opt)
    return {"optimizer": Part(*kept)}


def autocast_copies(x: Inputs, t: Totals) -> dict[str, Part]:
    """autocast's 16-bit copies of every linear weight whose matmul input needs grad.

    Autocast caches the casts of trained weights until it exits (all of them in forward);
    casts of frozen weights are not cached: matmuls keep them only where their activations are
    kept, so under checkpointing only lm_head's and one layer's exist at a time."""
    lin_copies = np.where(x.freeze, x.k_layers * x.layer_lin, x.n_lin) + x.V * x.h
    cast = x.autocast & x.train
    forward = np.where(cast, x.acb * lin_copies / x.mp, 0.0)
    one_layer = np.where(cast, x.acb * (x.V * x.h + x.layer_lin) / x.mp, 0.0)
    # FSDP1's flat parameters (flat_params on / mixed): a unit's weights are views, whose casts autocast does not
    # cache (aten/src/ATen/autocast_mode.cpp cached_cast: `arg.is_leaf() && !arg.is_view()`; traced:
    # benchmarks/check_fsdp1_flat_params.py), so trained weights' casts are kept as frozen ones' are
    forward = np.where(x.gc & (~(x.full | x.freeze) | x.flat_views), one_layer, forward)
    # kbit_prep (QLoRA): only lm_head's fp32 weight is cast; bitsandbytes dequantizes the 4-bit
    # linears inside each call (bnb MatMul4Bit), so no 16-bit copy of them is kept; lm_head's copy is
    # saved for its backward, which runs before the decoder layers' (freed by the `backward` phase)
    backward = np.where(x.gc, one_layer, forward)
    head = np.where(cast, x.acb * x.V * x.h / x.mp, 0.0)
    forward = np.where(x.kbit_prep, head, forward)
    loss_backward = np.where(x.kbit_prep, head, backward)
    backward = np.where(x.kbit_prep, 0.0, backward)
    return {"forward": Part(forward), "loss_backward": Part(loss_backward), "backward": Part(backward)}


def _layer_activations(x: Inputs) -> np.ndarray:
    """Bytes per token one decoder layer saves for backward (engine/memory.py)."""
    trains = np.where(x.full | x.freeze, 1.0, 0.0)
    # a mixed flat parameter (flat_params mixed): the frozen linears' weights require grad, so each keeps its input
    saves = {mod: np.where(x.frozen_grads, 1.0, trains) for mod in C.LORA_MODULES}
    adapted = {mod: np.where(x.lora, x.flags[mod], 0.0) for mod in C.LORA_MODULES}
    dense = layer_activation_bytes(x.h, x.f, x.qd, x.kvd, x.a, x.R, x.M, x.autocast, saves, trains, adapted, x.r, x.tp,
                                   adapter16=x.adapter16, seq_split=x.seq_split, dropout=x.lora_dropout,
                                   uncast=np.asarray(x.adapter16, dtype=bool) | x.bnb_base | x.litgpt_model,
                                   fused_qkv=x.litgpt_model, liger=x.liger, down_f=x.down_f)
    if np.any(x.gemma_norm > 0):  # (Liger's RMSNorm keeps the same for Gemma's norm: no extra)
        gemma = gemma_norm_bytes(x.h, x.R, trains, x.norms, x.gemma_norm) / x.seq_split
        dense = dense + (np.where(x.liger, 0.0, gemma) if np.any(x.liger) else gemma)
    if np.any(x.qk_norm > 0):  # issue 12: Qwen3's / Gemma 3's per-head q and k norms
        dense = dense + x.qk_norm * qk_norm_bytes(x.qd, x.kvd, x.a, x.kvh, x.M, trains, x.gemma_norm, x.tp)
    repeated = x.masked | x.eager | x.litgpt_model
    if np.any(repeated):  # issue 12: K and V repeated to every head (repeat_kv; LitGPT's own attention) and kept
        dense = dense + np.where(repeated, 2.0 * (x.a - x.kvh) * x.d * x.M / x.tp, 0.0)
    if np.any(x.litgpt_model):
        dense = dense + _litgpt_qkv_kept(x) + _litgpt_lora_kept(x, trains, adapted)
    if np.any(x.kbit_keeps_input):  # issue 27 item 4: a bitsandbytes base's matmuls keep their inputs
        dense = dense + _kbit_kept_inputs(x, trains, adapted)
    if not np.any(x.moe_share > 0):
        return dense
    dense = dense + x.moe_share * moe_routing_bytes(x.h, x.n_experts, x.k_experts, np.where(x.autocast, 2.0, x.M), trains, x.tp)
    if np.any(x.shared_gate > 0):
        # Qwen2-MoE's shared expert is scaled by its gate (transformers 5.24 modeling_qwen2_moe.py
        # Qwen2MoeSparseMoeBlock.forward: `F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output`;
        # Qwen3-Next's and Qwen3.5's MoE blocks alike): the product keeps the shared expert's h-wide output (M h) for
        # the sigmoid's gradient; and where LoRA adapts the gate (an nn.Linear(h, 1) all-linear reaches), its lora_A
        # keeps an fp32 copy of the layer's normed input (4 h) under peft's fp32 adapters. Traced on the moe_lora set's
        # Qwen1.5-MoE-A2.7B all-linear row (benchmarks/trace_peak.py: shared_expert.down_proj `_to_copy` [2048, 2048]
        # bf16, shared_expert_gate `_to_copy` [2048, 2048] fp32, in each of the 24 layers)
        gate_in = np.where(_fp32_adapter_cast(x, x.lora), 4.0 * x.h * x.lora_every, 0.0)
        dense = dense + x.moe_share * x.shared_gate * (x.M * x.h + gate_in)
    if np.any(x.clamped_glu):
        # gpt-oss's clamped SwiGLU keeps six f-wide tensors per routed slot where SiLU's product keeps three (the
        # dense formula's 3 M f): the fused gate_up output (2 f: both clamps keep their input), the clamped gate,
        # the sigmoid, (up + 1) and the glu (traced on the loops harness, gpt-oss-20b LoRA 1 x 1,024: `_grouped_mm`
        # [4096, 5760], `clamp`, `sigmoid`, `add`, `mul` [4096, 2880] bf16 in each layer): 3 M f more
        dense = dense + np.where(x.clamped_glu, x.moe_share * 3.0 * x.M * x.f / x.tp, 0.0)
    if np.any(x.dense_experts_fe > 0):
        # Llama 4 (DENSE_EXPERTS_MODEL_TYPES): each of the E experts runs every token, so the layer keeps E x (the
        # repeated input, kept by its product with the router scores; gate_up, 2 fe; SiLU's output, fe), and where the
        # experts train the two bmm inputs (h, fe) too, in place of the k experts' rows the terms above count
        E, fe, k = x.n_experts, x.dense_experts_fe, x.k_experts
        every = E * x.M * (x.h + 3.0 * fe + trains * (x.h + fe))
        counted = x.M * (3.0 * k * fe + trains * k * fe + k * x.h + trains * k * x.h)
        dense = dense + np.where(fe > 0, x.moe_share * (every - counted) / x.tp, 0.0)
    return dense


def _hybrid_layers_delta(x: Inputs) -> tuple[np.ndarray, dict | None, np.ndarray | None]:
    """Per token, what the Gated DeltaNet and Mamba2 layers (Inputs.hyb_*) keep for backward beyond what counting them
    as attention layers (_layer_activations) gives, summed over them: 0 for other models. Such a layer keeps its MLP
    part and its norms as an attention layer does; in place of the attention's part (what layer_activation_bytes
    counts for q, k, v and o beyond the norms and the MLP, and the per-head terms _layer_activations adds) it keeps
    its mixer's saved tensors (GDN_SAVED / MAMBA_SAVED, less the 2 h output the next layer's residual holds), the
    normed input where its input projections train (R h, once), and under peft's fp32 adapters on a 16-bit base the
    fp32 copy each adapted projection's lora_A keeps (4 x its input width, as layer_activation_bytes counts for q, k,
    v, o) and lora_A's fp32 output (4 r)."""
    trains = np.where(x.full | x.freeze, 1.0, 0.0)
    # Falcon-H1's mixers run beside attention: each layer keeps its mixer's tensors on top of the engine's layer (its
    # attention keeps the attention_in_multiplier copy of the normed input as the engine's layer keeps the normed
    # input; nothing keeps the mixer's output, scaled by ssm_out_multiplier: less its 2 h)
    par = (np.where(trains > 0, x.hyb_par_saved_full, x.hyb_par_saved_frozen) - x.hyb_par_layers * x.M * x.h) / x.tp
    if not np.any(np.asarray(x.hyb_layers) > 0):
        return np.zeros(len(x.h)) + par, None, None
    attn = _ATTENTION
    saves = {mod: trains for mod in C.LORA_MODULES}
    adapted = {mod: np.where(x.lora, x.flags[mod], 0.0) for mod in C.LORA_MODULES}
    args = dict(adapter16=x.adapter16, seq_split=x.seq_split, dropout=x.lora_dropout,
                uncast=np.asarray(x.adapter16, dtype=bool) | x.bnb_base | x.litgpt_model, fused_qkv=x.litgpt_model,
                liger=x.liger, down_f=x.down_f)
    whole = layer_activation_bytes(x.h, x.f, x.qd, x.kvd, x.a, x.R, x.M, x.autocast, saves, trains, adapted, x.r,
                                   x.tp, **args)
    no_attn = layer_activation_bytes(x.h, x.f, 0.0 * x.qd, 0.0 * x.kvd, 0.0 * x.a, x.R, x.M, x.autocast,
                                     {m: (0.0 if m in attn else v) for m, v in saves.items()}, trains,
                                     {m: (0.0 if m in attn else v) for m, v in adapted.items()}, x.r, x.tp, **args)
    attn_part = whole - no_attn
    if np.any(x.qk_norm > 0):
        attn_part = attn_part + x.qk_norm * qk_norm_bytes(x.qd, x.kvd, x.a, x.kvh, x.M, trains, x.gemma_norm, x.tp)
    repeated = x.masked | x.eager | x.litgpt_model
    if np.any(repeated):
        attn_part = attn_part + np.where(repeated, 2.0 * (x.a - x.kvh) * x.d * x.M / x.tp, 0.0)
    saved = np.where(trains > 0, x.hyb_saved_full, x.hyb_saved_frozen) - x.hyb_layers * x.M * x.h
    normed_in = x.hyb_layers * trains * x.R * x.h
    fp32_cast = _fp32_adapter_cast(x, x.lora)
    in_ad, out_ad = _mixer_adapters(x, adapted)
    copies = np.where(fp32_cast, 4.0 * (in_ad * x.hyb_in_projs * x.h + out_ad * x.hyb_out_width), 0.0)
    lora_out = 4.0 * x.r * (in_ad * x.hyb_in_projs + out_ad * x.hyb_layers)
    mixers = (saved + normed_in + copies + lora_out) / x.tp
    delta = mixers - x.hyb_layers * attn_part + par
    blocks = (np.asarray(x.blk_mixer_free, dtype=float) + np.asarray(x.blk_mlp_free, dtype=float)) > 0
    # the layers of the hybrids whose every layer holds a mixer and an MLP (Qwen3.5, Qwen3-Next, Granite 4.0-H, Bamba),
    # by kind, for freeze tuning's last k (_blocks_per_layer): a Gated DeltaNet or Mamba2 layer keeps the engine's layer
    # less its attention part plus its mixer's own; an attention layer the engine's layer
    n_mix = np.asarray(x.hyb_layers, dtype=float)
    layered = ~blocks & (n_mix > 0)
    kinds = {"mamba": whole - attn_part + mixers / np.maximum(n_mix, 1.0), "attention": whole,
             "mlp": np.zeros(len(x.h)), "mamba_n": n_mix, "attention_n": x.L - n_mix, "mlp_n": np.zeros(len(x.h))}
    kinds = {k: np.where(layered, v, np.nan) for k, v in kinds.items()}
    if not np.any(blocks):
        return delta, kinds, blocks
    layout, block_kinds = _block_layout(x, saves, trains, adapted, args, whole, attn_part, mixers)
    kinds = {k: np.where(blocks, block_kinds[k], kinds[k]) for k in kinds}
    if x.blk_lead is not None:
        # LoRA's leading blocks before the first adapted one (Inputs.blk_lead, no checkpointing): nothing kept. (The first
        # adapted block is counted whole, where an expert block keeps its adapted shared expert alone: a little over)
        lead = x.blk_lead
        unkept = (np.nan_to_num(lead["mamba"]) * block_kinds["mamba"] + np.nan_to_num(lead["attention"])
                  * block_kinds["attention"] + np.nan_to_num(lead["mlp"] + lead["moe"]) * block_kinds["mlp"])
        layout = layout - unkept
    return delta + np.where(blocks, layout, 0.0), kinds, blocks


_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def _mixer_adapters(x: Inputs, adapted: dict):
    """(1 where a Gated DeltaNet or Mamba2 mixer's input projections are adapted, 1 where its out_proj is): only under
    all-linear, as hybrid_lora_in_out counts them (their names are not Llama's); a list of named projections leaves
    them frozen. (Read as q_proj's and o_proj's flags before the LoRA rows on Nemotron-H with six names listed were
    traced: that row measured 6.86% below the engine's count, 2.96% after.)"""
    return x.lora_every, x.lora_every


def _block_layout(x: Inputs, saves, trains, adapted, args, whole, attn_part, mixers):
    """Nemotron-H's blocks (transformers 5.24 modeling_nemotron_h.py NemotronHBlock.forward, lines 960-992): each block
    is one norm and one mixer, a Mamba2 mixer (M), attention (*) or an MLP (-, or E: the relu2 experts), where the
    engine's layer (layer_activation_bytes) holds two norms, attention and a gated MLP. Returned, per token: (what the
    L blocks keep beyond L engine layers and the Mamba2 terms of _hybrid_layers_delta, summed over them; the largest
    block's own, which checkpointing recomputes in backward). Per block:
      the norm, NemotronHRMSNorm (lines 617-633): `.to(float32)`, pow and the product with rsqrt keep x in fp32 (4 h) and
        rsqrt one fp32 value, as Llama's; then `(self.weight.to(torch.float32) * hidden_states).to(input_dtype)`
        multiplies the weight in fp32, so where the weight trains its product keeps the fp32 normalized copy (4 h, where
        Llama's keeps the 16-bit one, R h); its 16-bit output is the mixer's input, counted as each mixer's
      the MLP blocks keep no attention tensors (attn_part), the Mamba2 and attention blocks no MLP tensors (mlp_part:
        its input and gated SwiGLU's f-wide tensors);
      NemotronHMLP (lines 639-650) and NemotronHExperts are up_proj and down_proj with relu2 between
        (activations.py ReLUSquaredActivation: relu keeps its output, square keeps the same tensor, down_proj keeps
        the square where it trains): two f-wide tensors where SwiGLU's product keeps four, 2 M f less.
    Found by tracing the hybrid probe's Nano 9B v2 full step (benchmarks/trace_peak.py; its row is the calibration of
    this term, docs/accuracy.md); checked on the held-out rows committed before it (tests/data/
    measured_hybrid_training.csv)."""
    h, f, M, tp = x.h, x.f, x.M, x.tp
    no_mlp = layer_activation_bytes(h, 0.0 * f, x.qd, x.kvd, x.a, x.R, M, x.autocast,
                                    {m: (v if m in _ATTENTION else 0.0) for m, v in saves.items()}, trains,
                                    {m: (v if m in _ATTENTION else 0.0) for m, v in adapted.items()}, x.r, tp,
                                    **args)
    mlp_part = whole - no_mlp
    llama_norm = rms_norm_saved_bytes(h, x.R, trains) / x.seq_split
    norm = rms_norm_saved_bytes(h, 4.0, trains) / x.seq_split
    relu2 = np.where(np.asarray(x.blk_ungated, dtype=float) > 0, -2.0 * M * f / tp, 0.0)
    Lx, Ly = np.asarray(x.blk_mixer_free, dtype=float), np.asarray(x.blk_mlp_free, dtype=float)
    layout = x.L * (norm - 2.0 * llama_norm) - Lx * attn_part - Ly * mlp_part + Lx * relu2
    Lm = np.asarray(x.hyb_layers, dtype=float)
    return layout, {"mamba": norm + mixers / np.maximum(Lm, 1.0), "attention": norm + attn_part,
                    "mlp": norm + mlp_part + relu2, "mamba_n": Lm, "attention_n": Ly - Lm, "mlp_n": Lx}


def _blocks_per_layer(x: Inputs, per_layer, mean, kinds, blocks):
    """What a layer keeps where a hybrid's layers differ by kind (_hybrid_layers_delta's kinds: Nemotron-H's one-kind
    blocks, `blocks`, and the mixer and attention layers of the others; NaN on other rows). Freeze tuning keeps the
    last k layers as they are (Inputs.blk_tail, from the catalog's block_pattern): their mean, where the order is
    known. On Nemotron-H checkpointing recomputes one block at a time in backward: the largest of the kinds that train
    (all of them, or those among freeze's last k); the others keep the engine's layer there, as measured. What the
    engine's layer counts beyond the kinds (a MoE's routing, q/k norms, ...) stays spread evenly over the layers."""
    names = ("mamba", "attention", "mlp")
    rest = mean - sum(kinds[k] * kinds[f"{k}_n"] for k in names) / x.L
    # freeze's last k by kind: E blocks count as the MLP kind (the experts' active width), Gated DeltaNet layers as
    # the mixer kind of their model (block_tail: NaN where the order is not known, then all kinds are)
    none = np.full(len(x.h), np.nan)
    tail = x.blk_tail if x.blk_tail is not None else dict.fromkeys(("mamba", "linear", "attention", "mlp", "moe"), none)
    tail_n = {"mamba": tail["mamba"] + tail["linear"], "attention": tail["attention"], "mlp": tail["mlp"] + tail["moe"]}
    tail_n = {k: np.where(x.freeze, v, np.nan) for k, v in tail_n.items()}
    known = np.isfinite(tail_n["mamba"])
    k = np.maximum(sum(np.nan_to_num(tail_n[n]) for n in names), 1.0)
    frozen_tail = sum(np.nan_to_num(tail_n[n]) * kinds[n] for n in names) / k + rest
    present = {n: np.where(known, np.nan_to_num(tail_n[n]), kinds[f"{n}_n"]) > 0 for n in names}
    largest = np.max(np.stack([np.where(present[n], kinds[n], -np.inf) for n in names]), axis=0) + rest
    kind = np.isfinite(kinds["mamba"])
    out = np.where(kind & known & ~x.gc, frozen_tail, per_layer)
    return np.where(kind & blocks & x.gc, largest, out)


def _expert_wrapper_kept(x: Inputs) -> tuple[np.ndarray, np.ndarray]:
    """(per token, per row) kept for backward by the MoE layers whose fused experts peft 0.21.2 adapts with ParamWrapper
    (Inputs.pw_fe > 0: LoRA on a mixture of experts peft converts, Qwen3-Next first), beyond what the engine's MoE layer counts, summed
    over those layers. On a bf16 base ParamWrapper._activate_lora (tuners/lora/layer.py) registers W + scaling B A as
    a parametrization (get_delta_weight, cast to the weight's dtype) cached for the forward, so the expert stack is a
    new M-byte tensor that requires grad: transformers 5.24 Qwen3NextExperts.forward (modeling_qwen3_next.py lines
    801-826) calls `nn.functional.linear(current_state, self.gate_up_proj[expert_idx])` and the down_proj likewise, and
    each linear keeps its weight (a view of the whole stack: E x 2 fe x h and E x h x fe kept) and, the weight needing
    grad, its input (the gathered tokens, h, and the product, fe, per routed slot: k per token); the router's
    gate.weight (E x h, adapted under every target) likewise keeps its rebuilt weight and its input (h). The expert
    MLP adapters layer_activation_bytes would count (fp32 input copies of gate, up, down and lora_A's outputs) do not
    exist: ParamWrapper takes no input of its own, and no layer's gate/up/down is an nn.Linear adapter (inputs() reads
    the flags without them). The same
    holds for every mixture of experts peft converts (engine/constants.py PEFT_FUSED_MOE; Inputs.pw_gu, pw_dn: which
    expert stacks are adapted), measured under transformers' default grouped_mm experts (tests/data/
    measured_moe_lora.csv: Qwen3-30B-A3B, Mixtral 8x7B, ERNIE 4.5 21B-A3B, the six held-out all-linear rows -1.7% .. -0.04%)."""
    on = x.pw_fe > 0
    if not np.any(on):
        return np.zeros(len(x.h)), np.zeros(len(x.h))
    gu, dn, every = x.pw_gu, x.pw_dn, x.pw_router
    layers = x.moe_share * x.L
    E, fe, k = x.n_experts, x.pw_fe, x.k_experts
    fixed = layers * x.M * E * (2.0 * fe * x.h * gu + x.h * fe * dn + x.h * every)
    per_token = layers * (x.M * k * (x.h * gu + fe * dn) + x.M * x.h * every)
    return np.where(on, per_token, 0.0) / x.tp, np.where(on, fixed, 0.0) / x.tp


def _litgpt_qkv_kept(x: Inputs) -> np.ndarray:
    """Per token and layer, what LitGPT's attention keeps beyond K and V repeated to every head (recipe
    litgpt): with as many KV heads as heads (Llama 2 7B) no K/V is repeated, and V goes to SDPA as a view
    of the fused qkv linear's output (litgpt/model.py CausalSelfAttention.forward: at 00af8b0d
    `qkv.view(B, T, G, q_per_kv + 2, hs).permute(0, 2, 3, 1, 4).split(...)` then `v.reshape(B, -1, T, hs)`,
    a view when q_per_kv is 1; at HEAD `qkv.split(...)`, `.view(...)`, `.transpose(1, 2)`), so the V that
    SDPA saves for backward keeps the whole (q + 2 kv)-wide output alive: its q and k parts (2 x q width)
    on top of the V counted; q and k themselves are new tensors after the rotary embedding. With fewer KV
    heads, K and V are new repeated tensors and the qkv output is freed."""
    return np.where(x.litgpt_model & (x.kvh == x.a), 2.0 * x.qd * x.M / x.tp, 0.0)


def _litgpt_lora_kept(x: Inputs, trains, adapted) -> np.ndarray:
    """Per token and layer, two tensors LitGPT's own model keeps for backward where transformers + peft keep
    none (recipe litgpt), read in Lightning-AI/litgpt at 5895df10, 00af8b0d and 2685705 and traced with its
    own lora.py and model.py on real tensors (benchmarks/check_litgpt_lora_saved.py: the engine's per-layer
    bytes equal the traced block's, tests/test_litgpt_dropout.py):
      zero_pad: LoRAQKVLinear adapts q, k, v in one module; where some but not all of them are adapted,
        `zero_pad(after_B)` scatters lora_B's output (the conv1d output, the enabled widths: q width for q,
        kv width for k and for v) into a zero tensor of the fused width with index_copy (litgpt/lora.py
        zero_pad: `result.index_copy(1, ...)` at 5895df10 line 337, `result.index_copy_(dim=-1, ...)` at
        00af8b0d line 347 and 2685705 line 326), and index_copy's backward keeps its source (torch
        tools/autograd/derivatives.yaml index_copy: `source: grad.index_select(dim, index).expand_as(source)`,
        IndexCopyBackward0's SavedVariable source_): the 16-bit lora_B output, kept whole. With all of q,
        k, v adapted zero_pad returns its input (nothing kept).
      the attention output's copy: q leaves apply_rope through `torch.cat((q_roped, q[..., rope_n_elem:]),
        dim=-1)`, a contiguous (B, heads, T, hs) tensor (model.py CausalSelfAttention.forward: line 239 at
        5895df10, 266 at 00af8b0d, 512 at 2685705; the reshape lines 249, 294, 571), so flash
        attention's output is laid out the same (`out = at::empty_like(q_padded)` on q.transpose(1, 2)) and
        `y.transpose(1, 2)` then `y.reshape(B, T, head_size * n_head)` copies it (transformers' rotary
        output keeps the projection's (B, T, heads, hs) layout: no copy there). SDPA keeps its own output;
        the copy is kept by whatever saves proj's input: its trained weight (full.py), its lora_A at p = 0
        (with dropout the dropout's output is kept instead, engine/memory.py `dropout`), or bitsandbytes
        before 0.43.2 (MatMul4Bit's ctx.tensors, bnb_4bit_input kept: `_kbit_kept_inputs` counts SDPA's
        output, which is not this tensor here).
    Both in the attention's 16-bit dtype (M; 2 under autocast)."""
    b = np.where(x.autocast, 2.0, x.M)
    n_qkv = adapted["q_proj"] + adapted["k_proj"] + adapted["v_proj"]
    lora_b = b * (x.qd * adapted["q_proj"] + x.kvd * (adapted["k_proj"] + adapted["v_proj"]))
    pad = np.where((n_qkv > 0) & (n_qkv < 3), lora_b, 0.0)
    no_drop = 1.0 - np.asarray(x.lora_dropout, dtype=float)
    copy_kept = np.maximum(np.maximum(trains, adapted["o_proj"] * no_drop), np.asarray(x.kbit_keeps_input, dtype=float))
    return np.where(x.litgpt_model, (pad + b * x.qd * copy_kept) / x.tp, 0.0)


def attention_seq_bytes(x: Inputs) -> np.ndarray | float:
    """Bytes per token per sequence position that one training layer saves for backward on the
    attention's own path (issue 12; engine/stacks.py padding and attention), 0.0 on the fused path
    (SDPA without a mask, flash: no s x s tensor kept).

    masked (a padded batch under SDPA): transformers 5.24 builds one (batch, 1, seq, seq) mask and
    torch's SDPA converts it to the query's dtype (M bytes) in every layer's call and keeps it for
    backward (masking_utils.py `_ignore_causal_mask_sdpa`; integrations/sdpa_attention.py lines
    118-127); traced op by op on a 3-layer Llama with real and fake tensors (docs/accuracy.md). The
    mask is not split by heads, so every tensor-parallel rank keeps all of it.
    eager: `eager_attention_forward` keeps the fp32 softmax output (4 bytes) for softmax's backward
    and its cast to the query's dtype (M) for the product with V, per head and score; Gemma 2's
    softcapping keeps tanh's output too (M; modeling_gemma2.py). Dropout is p = 0 (no mask kept)."""
    if not np.any(x.masked | x.eager):
        return 0.0
    eager = x.a * (np.where(x.eager_bf16, x.M, 4.0 + x.M) + x.softcap * x.M) / x.tp
    return np.where(x.eager, eager, np.where(x.masked, x.M, 0.0))


def eager_prefill_terms(act_b, h, d, heads, kv_heads, tp, softcap):
    """A transformers eager prefill's attention working set (`_attention_phase_bytes`, traced on Gemma 2;
    gpt-oss's eager path matches it within 0.2% on the loops harness): (bytes per token, bytes per token
    per sequence position), over `tp` ranks that each hold heads / tp. Also read by engine/serving.py for
    `serve --engine transformers`, so that both count the same scores."""
    per_tok = act_b * (3.0 * h + d * (heads + 2.0 * heads * (kv_heads < heads)) / tp)
    per_seq = (2.0 * act_b + 4.0) * heads / tp + act_b * (1.0 + softcap)
    return per_tok, per_seq


def _attention_phase_bytes(x: Inputs) -> tuple[np.ndarray, np.ndarray]:
    """A prefill's eager attention, the `attention` phase's working set (issue 12, traced with
    benchmarks/trace_peak.py on the held-out gemma-2-9b prefill 2 x 8,192: the peak is the
    `.to(query.dtype)` after the fp32 softmax in the last layer, transformers 5.24
    models/gemma2/modeling_gemma2.py line 203): per batch x seq x seq, the masked 16-bit scores
    still bound to `attn_weights`, the fp32 softmax and its 16-bit cast (2 act + 4 bytes per head)
    and the (batch, 1, seq, seq) masks built once per forward (full and, Gemma 2, sliding-window
    layers); per token, the embedding output the model's loop keeps, the layer input, the normed
    input, q and K, V repeated to every head (repeat_kv, a copy where kv heads < heads). Returned:
    (per token, per token per sequence position), zero where the row is not eager."""
    awq = np.asarray(x.awq_fused, dtype=bool)
    on = (x.eager | awq) & x.infer
    per_tok, per_seq = eager_prefill_terms(x.act_b, x.h, x.d, x.a, x.kvh, x.tp, x.softcap)
    if awq.any():
        # AutoAWQ 0.1.6's fused attention (awq/modules/fused/attn.py QuantAttentionFused.forward at 5c7e368):
        # `scores = F.softmax(scores.float(), dim=-1).type_as(xq)` holds the masked 16-bit scores, their
        # fp32 copy and the fp32 softmax at once (act + 4 + 4 bytes per head and position; the mask, one
        # (1, 1, seq, seq) 16-bit tensor, counted per sequence as above). Per token: the block's input and
        # its norm's output (2 h), xqkv (q + 2 kv wide), the rotated xq and xk (q + kv: new tensors from
        # RoPE.forward), keys_store (kv: the cache's layout, `.contiguous()`), and the keys and values
        # `torch.repeat_interleave` copies to every head (2 q wide, a copy even with one group)
        awq_tok = x.act_b * (2.0 * x.h + 4.0 * x.qd / x.tp + 4.0 * x.kvd / x.tp)
        awq_seq = (x.act_b + 8.0) * x.a / x.tp + x.act_b
        per_tok, per_seq = np.where(awq, awq_tok, per_tok), np.where(awq, awq_seq, per_seq)
    return np.where(on, per_tok, 0.0), np.where(on, per_seq, 0.0)


def activations(x: Inputs, t: Totals) -> dict[str, Part]:
    """The activations saved for backward (per token): every trained layer's, or with
    checkpointing each layer's input, and the final norm's; a layer's backward under
    checkpointing recomputes its own."""
    per_layer = _layer_activations(x)
    if np.any((np.asarray(x.hyb_layers) > 0) | (np.asarray(x.hyb_par_layers) > 0)):  # hybrid models: their layers'
        delta, kinds, blocks = _hybrid_layers_delta(x)                               # own terms, a mean per layer
        mean = per_layer + delta / x.L
        # (Falcon-H1's layers are all alike: the one checkpointing recomputes holds its mixer too)
        per_layer = np.where(x.gc & ~(np.asarray(x.hyb_par_layers) > 0), per_layer, mean)
        if kinds is not None:
            per_layer = _blocks_per_layer(x, per_layer, mean, kinds, blocks)
    pw_token, pw_fixed = _expert_wrapper_kept(x)
    if np.any(x.pw_fe > 0):  # (the recomputed layer's own under checkpointing: one layer's share)
        per_layer = per_layer + np.where(x.gc, 0.0, pw_token / x.L)
        parts = activations_parts(x, t, per_layer)
        one = np.where(x.gc, pw_fixed / np.maximum(x.moe_share * x.L, 1.0), 0.0)
        kept = np.where(x.gc, 0.0, pw_fixed)
        return {k: v._replace(fixed=v.fixed + kept + (one if k == "backward" else 0.0)) for k, v in parts.items()}
    return activations_parts(x, t, per_layer)


def activations_parts(x: Inputs, t: Totals, per_layer) -> dict[str, Part]:
    """activations() from one layer's saved bytes per token."""
    layers = np.where(x.freeze, x.k_layers, x.L)
    # checkpointing keeps each layer's input (sequence parallel: its seq / tp share, Megatron-LM and
    # torchtitan keep the residual stream sharded on the sequence between layers)
    ckpt = x.R * x.h / x.seq_split
    saved_ckpt = _checkpoint_inputs(x) * ckpt
    head_trained = x.full  # lm_head (or the tied embedding) is trained only in full fine-tuning
    # the final norm's tensors are sequence-sharded under sequence parallel; lm_head's input is not:
    # torchtitan's plan (pytorch/torchtitan 9dec370 parallelize_llama.py apply_tp) makes the output layer
    # ColwiseParallel(input_layouts=Shard(1)), whose _prepare_input_fn all-gathers the normed hidden
    # states to Replicate (torch 2.6 distributed/tensor/parallel/style.py ColwiseParallel._prepare_input_fn,
    # `input_tensor.redistribute(placements=desired_input_layouts)`), and the matmul keeps that whole
    # sequence for the weight's gradient (for seq_split 1 the same sum as before, in the same order)
    head_in = np.where(head_trained, np.where(x.autocast, 2.0, x.R) * x.h, 0.0)
    final_norm = rms_norm_saved_bytes(x.h, x.R, head_trained, x.liger) / x.seq_split + head_in
    if np.any(x.head_quant):  # LitGPT's 4-bit lm_head: MatMul4Bit before bitsandbytes 0.43.2 keeps its input,
        # the final norm's 16-bit output (the 128-token chunks are views of it), which a frozen lm_head would not
        final_norm = final_norm + np.where(x.head_quant & x.kbit_keeps_input, x.M * x.h, 0.0)
    # checkpointing keeps every layer's input, the frozen layers' under freeze too (issue 12, traced
    # with benchmarks/trace_peak.py: llama-3.2-1b freeze k=4 with checkpointing holds all 16 layers'
    # inputs through backward; each checkpoint frame saves its inputs, torch 2.13
    # utils/checkpoint.py `_CheckpointFrame.save_inputs`, lines 842-847, whether they need grad or not)
    stack = _saved_stack(x, layers, saved_ckpt, per_layer) + final_norm
    if np.any(x.lora_dropout):
        stack = stack - first_layer_unsaved_masks(x)
    recompute = np.where(x.gc, per_layer, 0.0)
    if np.any(x.ckpt_op):  # torchtitan's op-level selective checkpointing (engine/stacks.py)
        op_layer = _op_saved_bytes(x)
        stack = np.where(x.ckpt_op, layers * op_layer + (x.L - layers) * ckpt + final_norm, stack)
        recompute = np.where(x.ckpt_op, np.maximum(per_layer - op_layer, 0.0), recompute)
    # pipeline parallel: the `backward` phase is the first stage's (pp micro-batches of its layers in
    # flight), which has no output layer (pytorch/torchtitan 9dec370 parallelisms/pipeline_llama.py
    # _build_stage: `if not is_last: model.norm = None; model.output = None`), so no gathered lm_head
    # input there: it keeps the sharded count it had before
    back = stack
    first_stage = (np.asarray(x.pp) > 1) & (np.asarray(x.seq_split) > 1)
    if np.any(first_stage):
        back = np.where(first_stage, stack - head_in * (1.0 - 1.0 / x.seq_split), stack)
    seq = attention_seq_bytes(x)
    if is_zero(seq):
        return sliding_window_training(x, layers, {"forward": Part(per_token=stack), "loss_backward": Part(per_token=stack),
                                                   "backward": Part(per_token=back + recompute)})
    # the mask / scores each saving layer keeps (per token per position), as the stack keeps layers
    # (a checkpointed layer's input holds none of them)
    seq_stack = _saved_stack(x, layers, 0.0, seq)
    # with checkpointing the model's own mask is an input of every checkpointed layer, which each
    # checkpoint frame keeps until its backward (torch 2.13 utils/checkpoint.py save_inputs): traced
    # with benchmarks/trace_peak.py on the long-sequence probe (issue 12, third round): SDPA's padded
    # path keeps transformers' bool (batch, 1, seq, seq) mask (`bitwise_and`, 1 byte; llama-3.2-1b
    # LoRA 1 x 16,384: 0.25 GiB alive at the start of backward), Gemma 2's eager path its two masks
    # (full and sliding window, `where`, in the query's dtype): one mask per layer type the model has
    kept = x.gc | x.ckpt_selective
    ckpt_mask = x.mask_types * np.where(kept & x.masked, 1.0, np.where(kept & x.eager, x.M, 0.0))
    seq_stack = seq_stack + ckpt_mask
    seq_back = seq_stack + np.where(x.gc, seq, 0.0)  # the recomputed layer's own
    return sliding_window_training(x, layers, {"forward": Part(per_token=stack, per_token_seq=seq_stack),
                                               "loss_backward": Part(per_token=stack, per_token_seq=seq_stack),
                                               "backward": Part(per_token=back + recompute, per_token_seq=seq_back)})


def sliding_window_training(x: Inputs, layers, parts: dict[str, Part]) -> dict[str, Part]:
    """(issue 28) A training step of a model with sliding-window layers under transformers' SDPA, unpadded
    (`sliding_mask_window`): from the window on transformers passes those layers a (1, 1, seq, seq) bool mask
    (masking_utils.py sdpa_mask), so, as for a padded batch (`attention_seq_bytes`, the trace of issue 12),
    torch's SDPA converts it to the query's dtype, expanded to the batch (M bytes per position pair), and keeps
    it for backward, and integrations/sdpa_attention.py `use_gqa_in_sdpa` is False with a mask, so K and V
    are repeated to every head (repeat_kv) and kept: per sliding layer that saves, 2 (heads - kv heads) x
    head_dim x M per token and M per token per position. The stack's layers keep them in the sliding share
    of its layers; with checkpointing the recomputed layer does, and every checkpoint frame keeps the bool
    mask, its input (1 byte per position pair, once: seq_sq). Counted only where seq reaches the window
    (executor RowTerms.gate). Measured on the loops harness (tests/data/measured_loops.csv): Gemma 3 1B full
    1 x 8,192 without checkpointing -4.7% before; Gemma 3 4B LoRA 1 x 8,192 -5.4%; Mistral 7B LoRA
    1 x 16,384 with checkpointing -4.3%."""
    on = x.train & (np.asarray(x.mask_window) > 0)
    if not np.any(on):
        return parts
    rep_kv = np.where(on, 2.0 * (x.a - x.kvh) * x.d * x.M / x.tp, 0.0)
    conv = np.where(on, x.M, 0.0)
    share = np.where(on, x.sw_share, 0.0)
    stack_tok = _saved_stack(x, layers * share, 0.0, rep_kv)
    stack_seq = _saved_stack(x, layers * share, 0.0, conv)
    kept = np.where(on & np.asarray(x.gc, dtype=bool), 1.0, 0.0)
    out = dict(parts)
    for name in ("forward", "loss_backward", "backward"):
        p = out.get(name, Part())
        tok, pos = stack_tok, stack_seq
        if name == "backward":  # the recomputed layer's own (a sliding one: the most a layer holds)
            tok, pos = tok + kept * rep_kv, pos + kept * conv
        out[name] = p._replace(per_token_w=p.per_token_w + tok, per_token_seq_w=p.per_token_seq_w + pos,
                               seq_sq=p.seq_sq + kept)
    return out


def first_layer_unsaved_masks(x: Inputs) -> np.ndarray:
    """Per token: the LoRA dropout masks the first decoder layer does not keep where the stack holds
    every layer's activations. native_dropout's mask is saved only when its input needs a gradient
    (autograd records no node otherwise); the frozen embedding's output needs none unless
    enable_input_require_grads() hooks it, which transformers' gradient_checkpointing_enable
    (transformers 5.24 modeling_utils.py lines 3190-3198), peft's PeftModel when the model is
    checkpointing (peft 0.21.2 peft_model.py line 184, `_prepare_model_for_gradient_checkpointing`)
    and prepare_model_for_kbit_training (peft utils/other.py lines 232-233) do, torchtune never. So
    without checkpointing the first layer's modules that no adapted module precedes keep no mask:
    q, k, v always; o_proj unless q, k or v is adapted; gate and up unless one of q, k, v, o is;
    down unless one before it is (measured: benchmarks/measure_peaks.py --set dropout, and
    benchmarks/check_lora_dropout_saved.py's layer 0). 0 elsewhere (checkpointing of any kind keeps
    layer inputs, activation offload the last layers; kbit_prep enables the input's gradient)."""
    a = {mod: np.where(x.lora, x.flags[mod], 0.0) for mod in C.LORA_MODULES}
    before_o = np.minimum(a["q_proj"] + a["k_proj"] + a["v_proj"], 1.0)
    before_mlp = np.minimum(before_o + a["o_proj"], 1.0)
    before_down = np.minimum(before_mlp + a["gate_proj"] + a["up_proj"], 1.0)
    # LitGPT's LoRAQKVLinear: one dropout for q, k and v (engine/memory.py layer_activation_bytes `fused_qkv`)
    qkv = np.where(np.asarray(x.litgpt_model, dtype=bool), before_o, a["q_proj"] + a["k_proj"] + a["v_proj"])
    masks = ((qkv + (a["gate_proj"] + a["up_proj"]) * (1.0 - before_mlp))
             * x.h / x.seq_split
             + (a["o_proj"] * (1.0 - before_o) * x.qd + a["down_proj"] * (1.0 - before_down) * x.f) / x.tp)
    every_layer = ~np.asarray(x.gc, dtype=bool) & ~np.asarray(x.ckpt_selective | x.ckpt_op | x.act_offload, dtype=bool)
    return np.where(np.asarray(x.lora_dropout, dtype=bool) & every_layer & ~np.asarray(x.kbit_prep, dtype=bool),
                    masks, 0.0)


def _op_saved_bytes(x: Inputs) -> np.ndarray:
    """Per token: what one decoder layer keeps under torchtitan's op-level selective checkpointing
    (engine/stacks.py checkpointing op): its input (the checkpoint's), the outputs of the 1st, 3rd, 5th
    and 7th matmul in call order (wq: a x d, wv: kv width, w1: f, all split by tp; w2: h, each rank's
    local partial sum before it is reduced, so not split), SDPA's output (a x d) and its fp32 log-sum-exp
    (one per head), and under sequence parallel the two reduce-scatter outputs (h / tp each)."""
    inp = x.R * x.h / x.seq_split
    mms = x.M * ((x.qd + x.kvd + x.f) / x.tp + x.h)
    sdpa = (x.M * x.qd + 4.0 * x.a) / x.tp
    scatter = np.where(x.seq_split > 1, 2.0 * x.M * x.h / x.tp, 0.0)
    return inp + mms + sdpa + scatter


def _checkpoint_inputs(x: Inputs):
    """The residual-wide inputs a checkpointed layer keeps: one, or under per-module checkpointing (engine/stacks.py
    checkpointing module) one per wrapped module, MODULE_CHECKPOINT_INPUTS."""
    return np.where(x.ckpt_module, MODULE_CHECKPOINT_INPUTS, 1.0) if np.any(x.ckpt_module) else 1.0


def _saved_stack(x: Inputs, layers, ckpt, per_layer):
    """What the decoder layers keep for backward under the scenario's checkpointing, from what a
    checkpointed layer keeps (`ckpt`, its input) and what a layer that is not keeps (`per_layer`):
    full checkpointing every layer's input, selective every SELECTIVE_EVERY-th layer's, activation
    offload the layers in flight on the GPU (engine/stacks.py)."""
    stack = np.where(x.gc, x.L * ckpt, layers * per_layer)
    if np.any(x.ckpt_selective | x.act_offload):  # the stack's checkpointing variants
        stack = np.where(x.ckpt_selective, _selective_stack(layers, ckpt, per_layer), stack)
        kept = np.where(x.gc, ckpt, per_layer)  # what each layer saves
        stack = np.where(x.act_offload, np.minimum(layers, OFFLOAD_LAYERS_IN_FLIGHT) * kept, stack)
    return stack


def _selective_stack(layers, ckpt, per_layer):
    """Selective checkpointing (every SELECTIVE_EVERY-th layer): those keep their input, the
    others all their activations."""
    checkpointed = np.floor(layers / SELECTIVE_EVERY)
    return checkpointed * ckpt + (layers - checkpointed) * per_layer


def offloaded_activation_bytes(x: Inputs) -> np.ndarray:
    """Per token: the activations (or checkpointed layer inputs) held in host RAM under
    activation offload / offloaded checkpointing (0 elsewhere), for cpu_bytes."""
    if not np.any(x.act_offload):
        return np.zeros(len(x.h))
    layers = np.where(x.freeze, x.k_layers, x.L)
    kept = np.where(x.gc, _checkpoint_inputs(x) * x.R * x.h, _layer_activations(x))
    return np.where(x.act_offload, layers * kept, 0.0)


def logits(x: Inputs, t: Totals) -> dict[str, Part]:
    """The loss buffers of training (per token, engine/memory.py logits_bytes) and the logits
    generate() keeps: per token when every position's are kept, else the last position's,
    which grow with the batch (`last_logits_bytes`, added per row)."""
    tp = loss_tp(x)
    forward, backward = logits_bytes(x.V, x.M, tp)
    if x.loss_kind is not None and (any(np.any(m) for m in x.loss_kind.values()) or np.any(x.legacy_logits)):
        forward, backward = stack_logits_bytes(x.V, x.M, x.h, tp, (forward, backward), x.loss_kind, x.compiled,
                                               x.legacy_logits, LOSS_CHUNKS)
    if np.any(x.softcap > 0):  # Gemma 2 (issue 12): tanh's output of the softcapped logits is kept for backward
        cap = x.softcap * softcap_logits_bytes(x.V, x.M, tp)
        forward, backward = forward + cap, backward + cap
    if np.any(x.kept_outputs):
        # the previous step's kept output is alive until the new forward returns (`out = model(...)` binds
        # only then; LitGPT's fit() `logits = model(...)`): at the forward's end it sits beside the new
        # output (kept_logits_bytes + the model's output then, `_output_at_forward_end`)
        # (with a bitsandbytes base that keeps its inputs, the previous step's graph holds them too: kept_graph_bytes)
        previous = kept_logits_bytes(x) + _output_at_forward_end(x) + kept_graph_bytes(x)
        forward = np.where(x.kept_outputs, np.maximum(forward, previous), forward)
    # an inference forward of transformers before 4.46 (logits_upcast model): LlamaForCausalLM.forward's
    # `logits = logits.float()` (4.32.0 line 828, 4.35.0 line 1053) holds every position's 16-bit logits
    # and their fp32 copy at once (the last position's only: last_logits_bytes counts act + 4 already)
    kept = x.act_b + np.where(x.infer_upcast, 4.0, 0.0) if np.any(x.infer_upcast) else x.act_b
    parts = {"forward": Part(per_token=forward), "loss_backward": Part(per_token=backward),
             "logits": Part(per_token=np.where(x.last_only, 0.0, kept * x.V / x.tp))}
    if np.any(x.kept_outputs):
        kept = kept_logits_bytes(x)
        # (the compiled loss saves the logits for its backward already: the same tensor until then)
        saved = x.loss_kind.get("compiled", False) if x.loss_kind is not None else False
        parts["loss_backward"] = Part(per_token=backward + np.where(saved, 0.0, kept))
        for name in ("backward", "backward_end", "optimizer"):
            parts[name] = Part(per_token=kept)
    return parts


def loss_tp(x: Inputs) -> np.ndarray | float:
    """The tensor-parallel degree a training row's logits are split over: only torch's loss_parallel
    (loss 'parallel', torchtitan's TP plan: the output layer's ColwiseParallel keeps them sharded,
    output_layouts Shard(-1)) keeps V / tp per GPU. transformers' tp_plan gathers lm_head's output
    (models/llama/modeling_llama.py LlamaForCausalLM `_tp_plan = {"lm_head": "colwise_rep"}`, as every
    causal LM there) and torchtune's tensor_parallel_plan replicates it (`"output": ColwiseParallel(
    output_layouts=Replicate())`), so the loss runs on the whole vocabulary on every GPU: 1."""
    if x.loss_kind is None or "parallel" not in x.loss_kind:
        return 1.0
    return np.where(x.loss_kind["parallel"] & (np.asarray(x.tp) > 1), x.tp, 1.0)


def _output_at_forward_end(x: Inputs) -> np.ndarray:
    """Per token: the model's output as the forward returns it, the new logits beside a kept previous
    step's (loop manual): M V (the 16-bit or fp32 logits; torchtune's chunks); transformers before 4.46
    (logits_upcast model) the 16-bit logits and their fp32 upcast, (M + 4) V; LitGPT's (Fabric converts
    every 16-bit chunk to fp32 while the 16-bit list is alive) (M + F) V, F = 4 (M in fp32: no copy);
    none for the linear-chunked and fused losses."""
    out = np.where(x.legacy_logits, x.M + 4.0, x.M) * x.V / loss_tp(x)
    if x.loss_kind is not None:
        lit = x.loss_kind.get("litgpt", False) | x.loss_kind.get("litgpt_full", False)
        out = np.where(lit & (x.M < 4), (x.M + 4.0) * x.V / loss_tp(x), out)
        out = np.where(x.loss_kind["linear_chunked"] | x.loss_kind["fused"], 0.0, out)
    return out


def kept_logits_bytes(x: Inputs) -> np.ndarray:
    """Per token: the logits a hand-written loop keeps in `out` through backward and the optimizer
    step (issue 28, loop manual; tests/data/measured_loops.csv): the model's output, batch x seq x V in
    the lm_head's output dtype (M: 16-bit, also under autocast; 4 bytes in fp32, where the loss's
    `logits.float()` returns the same tensor). transformers before 4.46 (logits_upcast model) returns
    the fp32 upcast (4 bytes); torchtune's chunked loss the list of 16-bit chunks (M); the
    linear-chunked and fused losses return no whole logits. 0 outside loop manual."""
    out = np.where(x.legacy_logits, 4.0, x.M) * x.V / loss_tp(x)
    if x.loss_kind is not None:
        # LitGPT's loop keeps Fabric's fp32 conversion of the output (F = 4 bytes; M in fp32)
        lit = x.loss_kind.get("litgpt", False) | x.loss_kind.get("litgpt_full", False)
        out = np.where(lit, np.where(x.M < 4, 4.0, x.M) * x.V / loss_tp(x), out)
        out = np.where(x.loss_kind["linear_chunked"] | x.loss_kind["fused"], 0.0, out)
    return np.where(x.kept_outputs, out, 0.0)


def cached_logits_bytes(x: Inputs) -> np.ndarray:
    """Per token: the freed 16-bit logits' block that PyTorch's caching allocator keeps reserved, free
    and unusable, through the loss's backward (training rows under the unfused loss, 16-bit logits, a
    loop that drops the outputs before backward: the Trainer, torchtitan's `del pred`).
    The allocator (c10/cuda/CUDACachingAllocator.cpp, its header comment) serves a request from the
    smallest cached block that fits, else cudaMalloc's a new segment; a freed block stays reserved,
    and only an OOM frees it ("free all cached blocks that are not split and retry"). The loss's V-wide
    tensors per token: forward, the 16-bit logits (M V), their fp32 upcast (4 V, freed when
    cross_entropy returns: log_softmax saves its output, not its input) and log_softmax's fp32 output
    (4 V, saved); the loop frees the logits. Backward: nll_loss's fp32 gradient (4 V) takes the
    upcast's freed block (the same size); log_softmax's fp32 gradient (4 V) fits no cached block
    (the logits' is M V < 4 V) and gets a segment of its own, so the logits' block is reserved and
    idle at the loss-backward peak: max_memory_reserved and nvidia-smi count it, the verdict does not
    (the allocator gives it back before an OOM). Under loop manual the logits are alive instead
    (kept_logits_bytes); fp32 logits have no upcast to reuse; chunked, linear-chunked, fused, legacy
    and softcapped losses allocate otherwise: 0 there. Over tp (loss_parallel only: loss_tp) and cp as
    the logits are. Against torchtitan's published max_reserved_gib (catalog/references.yaml)."""
    unfused = ~(np.asarray(x.legacy_logits, dtype=bool) | np.asarray(x.kept_outputs, dtype=bool)
                | (np.asarray(x.softcap) > 0))
    if x.loss_kind is not None:
        unfused = unfused & ~(x.loss_kind["chunked"] | x.loss_kind["linear_chunked"] | x.loss_kind["fused"]
                              | x.loss_kind.get("compiled", False) | x.loss_kind.get("litgpt", False)
                              | x.loss_kind.get("litgpt_full", False))
    on = x.train & unfused & (x.M < 4)
    return np.where(on, x.M * x.V / loss_tp(x) / np.asarray(x.cp, dtype=float), 0.0)


def kv_window_saving(x: Inputs, batch: np.ndarray, seq: np.ndarray, take) -> np.ndarray:
    """Per row (<= 0): what the sliding-window layers do not keep under kv_policy windowed, the
    tokens beyond what they keep (llama.cpp's SWA cache: the window + -ub 512, padded to 256 cells:
    Inputs.window, engine/constants.py llama_swa_cells): -bytes per token x batch x max(seq - kept, 0).
    take: per memory configuration -> the rows."""
    return -take(x.kv_window) * batch * np.maximum(seq - take(x.window), 0.0)


def kv_state_bytes(x: Inputs, batch: np.ndarray, take) -> np.ndarray:
    """Per row (>= 0): the linear-attention layers' state of each sequence (hybrid models; Inputs.kv_state), held by
    every phase that holds the KV cache whatever the sequence's length: state bytes x batch. take: per memory
    configuration -> the rows."""
    return take(x.kv_state) * batch


def last_logits_bytes(x: Inputs, batch: np.ndarray, take) -> np.ndarray:
    """Per row: the last position's logits that generate() keeps, 16-bit then fp32 for sampling
    (b x V x (act + 4) / tp), where only the last position's are kept. take: per memory
    configuration -> the rows of `batch`."""
    return np.where(take(x.last_only), batch * take(x.V) * take(x.act_b + 4.0) / take(x.tp), 0.0)


def kv_cache(x: Inputs, t: Totals) -> dict[str, Part]:
    """The KV cache (per token): split by tensor parallel over the KV heads (never below one
    head), and each pipeline stage keeps its own layers'."""
    per_token = 2.0 * x.L * x.kvd * x.kv_b / (np.minimum(x.tp, x.kvh) * x.pp)
    # MLA: the latent (kv_lora_rank + qk_rope_head_dim per layer) is not split by heads: every
    # tensor-parallel rank keeps the whole of it (vLLM's MLA backends; DeepSeek-V3 report, 3.4)
    per_token = np.where(x.kv_elems == 2.0 * x.L * x.kvd, per_token,
                         x.kv_elems * x.kv_b / (np.where(x.mla, 1.0, np.minimum(x.tp, x.kvh)) * x.pp))
    # transformers < 4.36 (decode_cache tuple): the last decode step holds the old and the new cache
    # (engine/stacks.py); every inference phase counts both (the eager `attention` phase too: the
    # solvers of gpus_needed take one KV term for all of a row's phases, engine/executor.py)
    held = per_token * x.kv_copies if np.any(np.asarray(x.kv_copies) != 1.0) else per_token
    parts = {"prefill": Part(per_token=held), "logits": Part(per_token=held),
             "attention": Part(per_token=held), "load": Part(per_token=held)}
    if np.any(x.train_cache):
        parts.update(training_cache_parts(x))
    return parts


def training_cache_parts(x: Inputs) -> dict[str, Part]:
    """The KV cache a training forward builds (issue 28, use_cache on; traced without checkpointing on
    transformers 5.24 and measured: tests/data/measured_loops.csv). Each layer's attention passes its
    keys and values to `cache.update` (cache_utils.py DynamicLayer / DynamicSlidingWindowLayer) and
    attends over what it returns, so where attention's backward saves those K/V the cache adds
    nothing; it alone holds (per token, the model's 16-bit or fp32 K/V dtype M):
      - the frozen layers' K/V (freeze: the L - k lower layers save nothing for backward);
      - the un-repeated K/V of every trained layer where attention repeats them to every head
        before saving (repeat_kv: a padded batch under SDPA, eager attention; kv heads < heads).
    Under loop trainer the outputs (and the cache) are dropped when the loss is returned: the
    forward phase only. Under loop manual `out` holds the cache to the end of the step: the same
    cache-only part through the layers' backward, then every layer's K/V once their saved tensors
    are freed (backward_end, optimizer)."""
    per_layer = 2.0 * x.kvd * x.M / (np.minimum(x.tp, x.kvh) * x.pp)
    trained = np.where(x.freeze, x.k_layers, x.L)
    repeated = (x.masked | x.eager) & (x.kvh < x.a)
    only = np.where(x.train_cache, per_layer * ((x.L - trained) + np.where(repeated, trained, 0.0)), 0.0)
    whole = np.where(x.train_cache, per_layer * x.L, 0.0)
    # under checkpointing applied outside transformers (use_cache on, engine/stacks.py) a checkpointed layer saves
    # nothing in the forward, so the cache alone holds every layer's K/V (a recomputed layer's K/V in backward are
    # the activations' own)
    only = np.where(x.gc, whole, only)
    kept = np.asarray(x.kept_outputs, dtype=bool)
    parts = {"forward": Part(per_token=only)}
    if np.any(kept):
        parts.update(loss_backward=Part(per_token=np.where(kept, only, 0.0)),
                     backward=Part(per_token=np.where(kept, only, 0.0)),
                     backward_end=Part(per_token=np.where(kept, whole, 0.0)),
                     optimizer=Part(per_token=np.where(kept, whole, 0.0)))
    return parts


def workspace(x: Inputs, t: Totals) -> dict[str, Part]:
    """Working memory beside the tensors that persist.

    ZeRO-3 / FSDP: the units in flight (a decoder layer, or the embedding / lm_head) gathered
    whole, at the weights' average bytes per parameter. A layer's backward: the gradients it
    computes (per token). End of backward: a tied embedding's two gradients and their sum in
    autograd's input buffer. Prefill: one layer's working set (per token): the layer's input
    (still referenced by the model's loop), the residual, the MLP input and the attention
    output added to it (4 h-wide), gate/up/SiLU/product (3 f-wide alive)."""
    zero3 = (x.zero >= 3) & x.train
    biggest_unit = np.maximum(x.layer_all, np.maximum(x.V * x.h, np.where(x.tied, 0.0, x.V * x.h)))
    units = np.where(x.fsdp_root, _fsdp_gathered_params(x), C.ZERO3_LAYERS_IN_FLIGHT * biggest_unit)
    # (a bitsandbytes 4-bit base's QuantState is not gathered: it is whole already, `_quant_state_bytes`)
    unsharded = t.weights - _quant_state_bytes(x, per_gpu=False)
    gathered = np.where(zero3, units * unsharded / x.N / x.mp, 0.0)
    step_end = gathered  # after the last backward: FSDP has resharded
    # FSDP2 under pipeline parallelism (issue 27; torch.distributed.pipelining + fully_shard, the only
    # ZeRO-3 with pp > 1: DeepSpeed refuses ZeRO-3 with its pipeline engine): torchtitan
    # distributed/fsdp.py get_fsdp_reshard_after_forward_policy "default": `return not pp_enabled`
    # ("For PP, by default do not reshard after forward to avoid per-microbatch all-gathers"), so the
    # stage's parameters stay gathered from its first forward to its last backward; the schedule turns
    # gradient sync off for every micro-batch but the last (set_requires_gradient_sync(False)), so FSDP2
    # accumulates the stage's unsharded gradients, in the reduce dtype (_fsdp_param.py
    # to_accumulated_grad_if_needed: `unsharded_grad.to(self.reduce_dtype)`; fp32 under mixed precision,
    # torchtitan's mixed_precision_reduce "float32"), until the last micro-batch's reduce-scatter
    pp_fsdp = zero3 & (x.pp > 1)
    accumulated = 0.0
    if np.any(pp_fsdp):
        gathered = np.where(pp_fsdp, unsharded / x.mp, gathered)
        accumulated = np.where(pp_fsdp, _fsdp2_accumulated_gradients(x, t) / x.mp, 0.0)
    zero3 = zero3 & x.fsdp_root  # the measured FSDP2 working set below (torchtune: not measured)
    transient = layer_backward_transient_bytes(x.h, x.f, x.R, x.M, x.tp, x.liger)
    # a bitsandbytes base dequantizes one whole weight to 16-bit per matmul (issue 27 item 4): MatMul4Bit's
    # backward `torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype))`, MatMul8bitLt's
    # `state.CB.to(ctx.dtype_A).mul_(state.SCB.unsqueeze(1) / 127)` (bitsandbytes autograd/_functions.py at
    # 95f9af3): the largest, gate / up / down (h x f), alive while its input gradient is computed
    dequant = np.where(x.bnb_base & x.train, x.dequant_b * x.h * x.f / x.tp, 0.0) if np.any(x.bnb_base) else 0.0
    # quantize_experts on (axolotl 0.20 src/axolotl/monkeypatch/moe_quant.py patch_moe_quantization_on_load): each fused
    # expert parameter becomes bitsandbytes' replace_parameter_4bit (or an int8 Bnb8bitParametrization) whose
    # parametrization dequantizes the whole 3-D tensor, all of a layer's experts, in the 16-bit load dtype on access,
    # cached for the module's forward; F.linear over a view of it keeps it for backward (the input needs a gradient).
    # Under checkpointing one layer's (its forward, then its recomputation in backward); without, every MoE layer's
    # until its backward: at the loss, all of them.
    experts_dq = 0.0
    if np.any(x.experts_dequant):
        moe_layers = np.maximum(x.moe_share * x.L, 1.0)
        all_layers = np.where(x.experts_dequant, 2.0 * x.expert_params / (x.tp * np.maximum(x.ep, 1.0)), 0.0)
        experts_dq = np.where(x.gc, all_layers / moe_layers, all_layers)
    head_moment = transient  # a layer's backward transients (LitGPT: or lm_head's backward, below)
    if np.any(x.litgpt_model):
        # LitGPT (engine/stacks.py `recipe litgpt`): lm_head's backward runs once every logits chunk has its
        # 16-bit gradient (M V per token, the loss's nodes come later in the graph, so autograd runs them
        # first), beside the kept fp32 logits; with the head quantized, its dequantized V x h weight (fp16
        # and its bf16 cast, dequant_b) is the largest a 4-bit matmul holds. The layer's moment or this one.
        lit = x.litgpt_model & (x.loss_kind.get("litgpt", False) | x.loss_kind.get("litgpt_full", False)) \
            if x.loss_kind is not None else np.zeros(len(x.h), dtype=bool)
        # (the same 4-bit dequantization runs in lm_head's forward, the last chunk's while the previous
        # step's graph still holds its matmuls' inputs, kept_graph_bytes, beside the new 16-bit chunks: the
        # larger of the two head moments)
        head_moment = np.where(lit, np.maximum(transient, x.M * x.V / x.tp + kept_graph_bytes(x)), transient)
        if np.any(x.head_quant):
            dequant = np.where(x.head_quant & x.bnb_base, np.maximum(dequant, x.dequant_b * x.V * x.h / x.tp), dequant)
    # FSDP2 keeps the previous layer's reduce-scatter input alive while the next one is copied in
    # (torch 2.13 distributed/fsdp/_fully_shard/_fsdp_param_group.py lines 107-113, 640-660:
    # reduce_scatter_max_input_buffers = 1; _fsdp_collectives.py line 597 allocates each input at
    # the size of the layer's unsharded gradients): two layers' gradients, unsharded
    rs_buffers = np.where(zero3, 2.0 * _layer_trained_params(x, t) * x.gb / x.mp, 0.0)
    work = x.act_b * (4.0 * x.h + 3.0 * x.f / x.tp)
    if np.any(x.moe_share > 0):
        # a MoE layer's prefill (issue 12, traced with benchmarks/trace_peak.py on the held-out
        # qwen3-30b-a3b prefill 4 x 4,096, -2.4% before): transformers 5.24 integrations/moe.py
        # grouped_mm_experts_forward keeps the hidden states gathered into expert order (line 441,
        # k x h per token) through the experts, and at `weighted_out[inv_perm]` (line 528) four k x h
        # tensors are alive: that gathered input, the down projection's output (line 511), the
        # weighted output (line 524) and its copy back in token order; before, the gathered input
        # beside gate/up/activation (k x h + 3 f, f = k x expert width). The larger of the two. Where the router's
        # weights are fp32 (FP32_ROUTER_WEIGHTS_MODEL_TYPES), the weighted output and its copy are fp32 (4 bytes each).
        k = x.k_experts
        weighted = 2.0 * k * x.h * (1.0 + np.where(x.fp32_router, 4.0 / x.act_b, 1.0))
        moe_work = x.act_b * (4.0 * x.h + np.maximum(k * x.h + 3.0 * x.f, weighted) / x.tp)
        if np.any(x.dense_experts_fe > 0):
            # Llama 4 (DENSE_EXPERTS_MODEL_TYPES): every expert runs every token (engine/memory.py)
            llama4 = x.act_b * (4.0 * x.h + dense_experts_prefill_values(x.h, x.n_experts, x.dense_experts_fe) / x.tp)
            moe_work = np.where(x.dense_experts_fe > 0, llama4, moe_work)
        work = np.where(x.moe_share > 0, moe_work, work)
    if np.any(x.linear_work > 0):
        # a Gated DeltaNet layer's prefill (LINEAR_PREFILL_COEF) beside the other layers' (4 h every rank holds, the
        # rest split by tp): each part the larger of the two, an upper bound that stays rank-held + split / tp, the
        # form the GPUs-needed solver divides over each tensor-parallel degree (serving_replicated)
        rank_held = x.act_b * 4.0 * x.h
        split = work - rank_held
        envelope = np.maximum(rank_held, x.linear_work) + np.maximum(split, x.linear_work_heads / x.tp)
        work = np.where(x.linear_work > 0, envelope, work)
    # ZeRO-3's backward_end is its last layer's backward (engine/components.py gradients): that layer's
    # activations (recomputed under checkpointing) and the backward transients beside the buffers
    last_layer = np.where(zero3, transient + _layer_activations(x), 0.0) if np.any(zero3) else 0.0
    end = np.where(zero3, gathered + rs_buffers, gathered + 3.0 * _tied_gradient(x))
    seq = attention_seq_bytes(x)
    last_seq = np.where(zero3, seq, 0.0) if not is_zero(seq) and np.any(zero3) else 0.0
    attn_tok, attn_seq = _attention_phase_bytes(x) if np.any((x.eager | x.awq_fused) & x.infer) else (0.0, 0.0)
    parts = {"forward": Part(gathered + experts_dq), "loss_backward": Part(gathered + np.where(x.gc, 0.0, experts_dq)),
             "backward": Part(gathered + rs_buffers + dequant + experts_dq + accumulated, per_token=head_moment),
             "backward_end": Part(end + accumulated, per_token=last_layer, per_token_seq=last_seq),
             "optimizer": Part(step_end),
             "prefill": Part(per_token=work), "attention": Part(per_token=attn_tok, per_token_seq=attn_seq)}
    if np.any(x.mask_window > 0):
        # (issue 28) an SDPA prefill's sliding-window mask (`sliding_mask_window`): one (1, 1, seq, seq) bool
        # tensor, built before the first layer and held through every layer (traced with
        # benchmarks/trace_peak.py, transformers 5.24: Gemma 3 1B 1 x 16,384 keeps one `__and__` [1, 1,
        # 16384, 16384] beside the last layer's MLP, Mistral 7B 2 x 16,384 the same [1, 1, 16384, 16384];
        # gone when the model's forward returns, before the logits). While it is built (masking_utils.py
        # `and_masks`: the causal and window comparisons and their conjunction) three such tensors are
        # alive beside the weights and the embeddings' output, no KV cache yet: the `mask` phase (Gemma 3
        # 1B 1 x 65,536 peaks there, 2 `__and__` + 1 `le` of 4 GiB each). Every tensor-parallel rank
        # holds both whole.
        on = np.where(x.mask_window > 0, 1.0, 0.0)
        parts["prefill"] = parts["prefill"]._replace(seq_sq=on)
        parts["mask"] = Part(per_token=on * x.act_b * x.h, seq_sq=3.0 * on)
    if np.any(x.awq_fused | x.exllama | x.bnb_infer) or np.any(np.asarray(x.rope_len) > 0):
        parts = int4_kernel_parts(x, parts)
    # DeepSpeed's own buffers: ZeRO-1/2's bucket and the reductions' copies (`deepspeed_zero12`); ZeRO-3's
    # bucket, gradient buffer and the step's fp32 gradient (`deepspeed_zero3`)
    ds = deepspeed_zero12(x, t)
    for extra in (ds.workspace if ds is not None else None, deepspeed_zero3(x, t)):
        for name, part in (extra or {}).items():
            p = parts.get(name, Part())
            parts[name] = p._replace(fixed=p.fixed + part.fixed, shard=p.shard + part.shard)
    return parts


def rope_cache_bytes(x: Inputs) -> np.ndarray | float:
    """transformers' per-layer rotary caches (engine/stacks.py rope_cache layers): each attention layer's
    LlamaRotaryEmbedding registers cos_cached and sin_cached of max_position_embeddings x head_dim in the
    dtype the model is loaded in (transformers 4.32.0 / 4.35.0 models/llama/modeling_llama.py
    `_set_cos_sin_cache(seq_len=max_position_embeddings, ..., dtype=torch.get_default_dtype())`, which
    from_pretrained sets to torch_dtype, modeling_utils.py `_set_default_torch_dtype`): 2 x max_context x
    head_dim x the load dtype's bytes per layer, each pipeline stage its own layers', every tensor-parallel
    rank the whole table. Llama 2 13B in fp16: 40 x 2 x 4,096 x 128 x 2 = 83,886,080 bytes."""
    load_b = np.where(x.train, x.wb, x.act_b)
    return 2.0 * x.L * x.rope_len * x.d * load_b / x.pp


def int4_kernel_parts(x: Inputs, parts: dict[str, Part]) -> dict[str, Part]:
    """What inference libraries allocate beside the weights (engine/stacks.py int4_kernel, rope_cache),
    added to the workspace parts of `workspace`:

    * exllama (AutoGPTQ's exllama kernels under transformers / optimum, auto_gptq/modeling/_utils.py
      autogptq_post_init at v0.4.2 and v0.5.0): `temp_dq = torch.zeros((1, max_dq_buffer_size),
      dtype=torch.float16)` with max_dq_buffer_size = the largest `qweight.numel() * 8` = in x out of the
      largest quantized linear, kept by the model (`model.device_to_buffers`) in every phase; without
      act-order `temp_state` is 1 x 1. Llama 2 13B: 5,120 x 13,824 x 2 = 141,557,760 bytes.
    * bitsandbytes 4-bit inference (nf4): a prefill (more than one token) goes through MatMul4Bit, whose
      forward dequantizes the whole weight to 16 bits for one F.linear (bitsandbytes 0.41.1
      autograd/_functions.py matmul_4bit: `gemv_4bit` only when `A.numel() == A.shape[-1]`, else
      `torch.nn.functional.linear(A, F.dequantize_4bit(B, state).to(A.dtype).t(), bias)`; functional.py
      dequantize_4bit: `out = torch.empty(shape, dtype=dtype)`): one 16-bit copy of the largest linear,
      counted over the whole prefill phase (at the MLP's own peak one f-wide tensor less is alive, so this
      is an upper bound by at most that tensor).
    * autoawq_fused (AutoAWQ 0.1.6 from_quantized(fuse_layers=True), casper-hansen/AutoAWQ at 5c7e368):
      - load: awq/models/llama.py LlamaFuser.fuse_transformer builds every layer's fused QKV
        (awq/utils/fused_utils.py fuse_qkv: a WQLinear_GEMM of out q + k + v whose qweight, qzeros and
        scales are torch.cat of the originals) while the old decoder layers, with their q/k/v, stay in
        `self.model.model` until the loop ends: L x the q, k, v weights twice, at the int4 bytes. Each
        LlamaLikeBlock's QuantAttentionFused allocates its WindowedCache (fused/cache.py: K and V of
        batch x kv heads x max_new_tokens x head_dim in fp16, the KV cache) and its RoPE table
        (fused/attn.py RoPE: `precompute_freqs_cis(head_dim, max_seq_len * 2)`, complex64: 2 x
        max_new_tokens x head_dim / 2 x 8 bytes) in the same loop. The largest transient is the last
        layer's fused WQLinear_GEMM: its __init__ zero-fills qweight, qzeros and scales on the GPU and
        `qkv_layer.qweight = torch.cat(...)` then builds the real qweight beside the zeros (in x out / 2
        bytes: int32 words of eight 4-bit values). Peak: weights + L x (fused QKV + cache + RoPE table) +
        one layer's fused qweight.
      - every phase after: the RoPE tables (per token of a sequence: 8 x L x head_dim; a table is sized
        by max_new_tokens, not by the batch, so this is exact at batch 1 and counts it batch times above).
      - prefill: QuantLlamaMLP.forward keeps gate_output and up_output beside SiLU's output and their
        product (4 f-wide, one more than transformers' LlamaMLP).
      - attention (`_attention_phase_bytes`): the fused eager path.
    * rope_cache layers: `rope_cache_bytes` in every phase, training ones too."""
    out = dict(parts)

    def add(name, fixed=0.0, per_token=0.0):
        p = out.get(name, Part())
        out[name] = p._replace(fixed=p.fixed + fixed, per_token=p.per_token + per_token)

    rope = rope_cache_bytes(x) if np.any(np.asarray(x.rope_len) > 0) else 0.0
    temp_dq = np.where(x.exllama, 2.0 * x.lin_max / x.tp, 0.0) if np.any(x.exllama) else 0.0
    kept = rope + temp_dq  # in every phase of the row's task
    awq = np.asarray(x.awq_fused, dtype=bool)
    awq_rope = np.where(awq, 8.0 * x.L * x.d / x.pp, 0.0) if awq.any() else 0.0
    for name in TRAIN_PHASES:
        if np.any(np.asarray(rope) > 0):
            add(name, fixed=np.where(x.train, rope, 0.0))
    on = np.where(x.infer, kept, 0.0) if not (np.isscalar(kept) and kept == 0) else 0.0
    dequant = np.where(x.bnb_infer, 2.0 * x.lin_max / x.tp, 0.0) if np.any(x.bnb_infer) else 0.0
    mlp_extra = np.where(awq, x.act_b * x.f / x.tp, 0.0) if awq.any() else 0.0
    add("prefill", fixed=on + dequant, per_token=awq_rope + mlp_extra)
    add("attention", fixed=on, per_token=awq_rope)
    out["logits"] = Part(on, 0.0, awq_rope)
    if awq.any():
        qkv = x.h * (x.qd + 2.0 * x.kvd)  # one layer's q, k, v values (the fused QKV's in x out)
        fused = x.L * qkv * np.nan_to_num(x.lin_bits) / 8 / x.mp
        zero_filled = qkv / 2.0 / x.tp  # int32 words of eight 4-bit values: in x out / 2 bytes
        out["load"] = Part(np.where(awq, fused + zero_filled, 0.0), 0.0, awq_rope)
    return out


def _root_params(x: Inputs) -> np.ndarray:
    """Parameters outside the decoder layers: the embedding, lm_head (unless tied) and the final norm."""
    return x.V * x.h * np.where(x.tied, 1.0, 2.0) + x.h


def _fsdp_gathered_params(x: Inputs) -> np.ndarray:
    """ZeRO-3 / FSDP2 (issue 12, measured with fully_shard on every decoder layer and the root on a
    fake process group, traced with benchmarks/trace_peak.py): the root unit's parameters (embedding,
    lm_head, final norm) stay unsharded from the forward through the whole backward (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_state.py lines 203-207: the root is not resharded after
    forward) and one decoder layer's are gathered at a time (its all-gather output is freed,
    `resize_(0)`, when it reshards; under the fake process group the collectives complete at once, so
    no prefetched layer overlaps: real runs may hold the prefetched next layer too, the band's ZeRO-3
    allowance). Replaces two of the largest unit (ZERO3_LAYERS_IN_FLIGHT), which double-counted a tied
    embedding (llama-3.2-1b x 8: +8.2%) and left out the root or the layer (llama-2-7b x 4: -9.7%)."""
    return _root_params(x) + x.layer_all


def _fsdp2_accumulated_gradients(x: Inputs, t: Totals) -> np.ndarray:
    """The trained parameters' gradients as FSDP2 accumulates them unsharded with gradient sync off
    (_fsdp_param.py to_accumulated_grad_if_needed: `unsharded_grad.to(self.reduce_dtype)`): the reduce dtype, fp32
    under mixed precision (a master copy), else the gradients' own, before tensor parallelism's split."""
    return t.trainable * np.where(x.master > 0, 4.0, x.gb)


def _layer_trained_params(x: Inputs, t: Totals) -> np.ndarray:
    """A decoder layer's trained parameters: all of them in full fine-tuning and in freeze's trained
    layers, else the adapters' mean share per layer."""
    # (a mixed flat parameter, flat_params mixed: every weight of the layer gets its gradient)
    return np.where(x.full | x.frozen_grads, x.layer_all,
                    np.where(x.freeze, x.freeze_params / np.maximum(x.k_layers, 1.0), t.trainable / np.maximum(x.L, 1.0)))


COMPONENT_FUNCTIONS = {
    "weights": weights, "gradients": gradients, "optimizer": optimizer_states,
    "optimizer_temp": optimizer_temporaries, "autocast_copies": autocast_copies, "activations": activations,
    "logits": logits, "kv_cache": kv_cache, "workspace": workspace,
}


# ---- beside the phases ----------------------------------------------------------------------

def runtime_contexts(settings: dict) -> tuple[float, float]:
    """The fixed runtime overhead per GPU (CUDA context + cuBLAS workspace) on one GPU, and on each of
    several (+ NCCL's buffers)."""
    one = settings["context_bytes"] + settings["cublas_bytes"]
    return one, one + settings["nccl_bytes"]


def runtime_overhead(x: Inputs, settings: dict) -> tuple[np.ndarray, float]:
    """(the fixed runtime overhead per GPU at the row's own GPU count (runtime_contexts), the fraction
    of the tensors' peak lost to fragmentation)."""
    one, several = runtime_contexts(settings)
    return np.where(x.gpus > 1, several, one), settings["fragmentation"]


def model_state_bytes(x: Inputs, parts: dict, t: Totals) -> np.ndarray:
    """Weights + gradients + optimizer states on each GPU (at the optimizer step), the ZeRO paper's model
    states: the gradients in their dtype, sharded from stage 2 (DeepSpeed's ZeRO-1/2 step holds an fp32
    gradient partition instead, `deepspeed_zero12`: in the optimizer phase, not here)."""
    w, s = (parts[comp]["optimizer"] for comp in ("weights", "optimizer"))
    g = _gradient_parts(x, t)["optimizer"] if deepspeed_zero12(x, t) is not None else parts["gradients"]["optimizer"]
    return w.fixed + w.shard / x.dp + g.fixed + g.shard / x.dp + s.fixed + s.shard / x.dp


def paged_optimizer_bytes(x: Inputs, t: Totals) -> np.ndarray:
    """Paged AdamW's states per GPU, in unified memory that may spill to the host."""
    s_mp = np.where(x.paged32, t.states - x.paged_small * C.PAGED_32BIT_STATE_BYTES, t.states) / x.mp
    return np.where(x.paged, np.where(x.zero >= 1, s_mp / x.dp, s_mp), 0.0)


def host_bytes(x: Inputs, t: Totals) -> np.ndarray:
    """Host memory over all GPUs' processes: offloaded states (+ their temporaries and an fp32
    copy of the gradients; + the parameters for offload 'all') and paged states that may
    spill. Without ZeRO every data-parallel rank holds its own copy. A bitsandbytes 4-bit base's
    QuantState stays on the GPUs (`_quant_state_bytes`)."""
    copies = np.where(x.zero >= 1, 1.0, x.dp)
    cpu = np.where(x.off_opt, t.states + t.temps + t.trainable * 4.0, 0.0) * copies
    paged_states = np.where(x.paged32, t.states - x.paged_small * C.PAGED_32BIT_STATE_BYTES, t.states)
    offloaded = t.weights - _quant_state_bytes(x, per_gpu=False)
    return cpu + np.where(x.off_all, offloaded, 0.0) + np.where(x.paged, paged_states * copies, 0.0)


@dataclass(frozen=True, eq=False)
class Physics:
    """Everything the executor evaluates per row, per memory configuration."""

    inputs: Inputs
    totals: Totals
    parts: dict             # {component: {phase: Part}}
    phases: dict            # {phase: Phase}
    model_states: np.ndarray
    paged: np.ndarray
    cpu: np.ndarray
    context: np.ndarray     # runtime overhead: the fixed part
    fragmentation: float    # runtime overhead: the fraction of the tensors' peak
    cpu_per_token: np.ndarray | float = 0.0  # host RAM per token: offloaded activations (issue 13)
    # reserved, free and reclaimable at the loss backward, per token (cached_logits_bytes)
    cached_per_token: np.ndarray | float = 0.0
    # serving rows (serving_replicated): the per-token working sets tensor parallelism does not divide
    serving_rep: dict | None = None
    # DeepSpeed stage 3's capped fp32 gradient at the step (deepspeed_zero3_step), None without one
    ds_step: tuple | None = None
    # the fixed runtime overhead on one GPU and on each of several (NCCL's buffers): the GPUs-needed
    # solver's capacity at each candidate count
    context_one: float = 0.0
    context_several: float = 0.0


def context_parallel(x: Inputs, parts: dict[str, dict[str, Part]]) -> dict[str, dict[str, Part]]:
    """Context parallel (issue 27, training rows with cp > 1): each of the cp GPUs of a sequence
    holds seq / cp of its tokens, so every per-token term (activations, logits, a layer's
    transients) and every per-token-seq term (its queries against all keys) is divided by cp; the
    weights, gradients and states are the data-parallel ranks' (ZeRO / FSDP shard over data x cp:
    torchtitan's dp_shard_cp mesh, Megatron's distributed optimizer over the data x context group,
    so `dp` = gpus / (tp x pp) stays the sharding group).
    Beside that, a layer's attention gathers the whole sequence's K and V: torch's context_parallel
    rotates them by all-gather by default (torch/distributed/tensor/experimental/_attention.py
    `_ContextParallelOptions.rotate_method = _RotateMethod.ALL_GATHER`) and accumulates in fp32
    (`convert_to_f32 = True`): forward, K and V of every token (2 x kv width x M, over tp); backward,
    those again and their gradients in fp32 (2 x kv width x 4), one layer at a time, per token of
    the whole sequence (not divided by cp)."""
    cp = np.asarray(x.cp, dtype=float)
    out = {}
    for comp, by_phase in parts.items():
        out[comp] = {name: p._replace(per_token=p.per_token / cp, per_token_seq=p.per_token_seq / cp)
                     for name, p in by_phase.items()}
    on = cp > 1
    kv_fwd = np.where(on, 2.0 * x.kvd * x.M / x.tp, 0.0)
    kv_bwd = np.where(on, 2.0 * x.kvd * (x.M + 4.0) / x.tp, 0.0)
    work = out["workspace"]
    for name, extra in (("forward", kv_fwd), ("backward", kv_bwd)):
        p = work.get(name, Part())
        work[name] = p._replace(per_token=p.per_token + extra)
    return out


def grad_reduce_parts(x: Inputs, parts: dict[str, dict[str, Part]]) -> dict[str, dict[str, Part]]:
    """The phase `grad_reduce` (DeepSpeed ZeRO-1/2's reduction after backward, `deepspeed_zero12`) of its
    rows; every other row's is its backward_end, part by part, so that it never adds a figure (the
    executor reports it for those rows only, engine/executor.py phase_validity, and the GPUs needed,
    which read every training phase, see backward_end twice). A component's parts in `grad_reduce` are
    its backward_end's unless it gives its own (gradients, workspace)."""
    on = deepspeed_zero12_rows(x)
    for comp in PHASE_COMPONENTS["grad_reduce"]:
        by_phase = parts.get(comp)
        if by_phase is None:
            continue
        end = by_phase.get("backward_end")
        own = by_phase.get("grad_reduce")
        if own is None:
            if end is not None:
                by_phase["grad_reduce"] = end
        else:
            by_phase["grad_reduce"] = _where_part(on, own, Part() if end is None else end)
    return parts


def serving_replicated(x: Inputs, t: Totals) -> dict | None:
    """Serving rows: the per-token working sets of the prefill and of eager attention that tensor
    parallelism does not divide (the hidden-size buffers every rank holds), per memory configuration:
    `workspace` over infinitely many tensor-parallel ranks, where each of its `/ x.tp` terms (the heads',
    the feed-forward's and a library's split buffers) vanishes. engine/executor.py _infer_gpus_needed
    divides the rest over each candidate degree; the row's own tp gives back the row's own terms."""
    if not np.any(x.infer):
        return None
    parts = workspace(replace(x, tp=np.full(np.shape(x.tp), 1e30)), t)
    return {"workspace": parts["prefill"].per_token, "attention": parts["attention"].per_token,
            "attention_seq": parts["attention"].per_token_seq}


def dpo_parts(x: Inputs, t: Totals, parts: dict[str, dict[str, Part]]) -> dict[str, dict[str, Part]]:
    """Preference tuning (objective dpo, docs/stacks.md "DPO"), as the recipes' DPO trainers run a step; `batch`
    counts pairs. Read in trl 1.16.0 trl/trainer/dpo_trainer.py (tests/data/measured_dpo.csv measures it):

    * chosen and rejected are one batch (`logps.chunk(2, dim=0)  # batch is [chosen, rejected]`, _compute_loss
      line 1316; LLaMA-Factory's concatenated_forward `batch["input_ids"].size(0) // 2`, torchtune's
      concatenated_forward): every per-token term is twice a sequence's, per pair;
    * the reference (dpo_reference): `copy`, a second model from the policy's checkpoint in its dtype (dpo_trainer.py
      lines 916-927, `ref_model_init_kwargs.setdefault("dtype", self.model.dtype)`; quantized as the policy where it
      is, line 918), frozen: the policy's weights less its adapters, on every GPU as the weights are (prepare_deepspeed
      lines 984-986 shards it under ZeRO-3 only; FSDP's prepare_fsdp likewise), in every training phase;
      `adapters_off`, the policy with its adapters disabled (lines 1328-1336): no second copy; `precomputed`
      (precompute_ref_log_probs, lines 1013-1019): the log-probs read from the dataset, no reference forward;
    * the reference forward runs under torch.no_grad() after the policy's (lines 1318-1347), the policy's graph
      alive: its layers' transients are a layer's working set (the workspace, already counted); its head's below.
      The peak is not there: TRL's head holds more in its backward (measured: every row peaks in backward);
    * TRL's fused LM head (trl/trainer/utils.py add_fused_lm_head, _fused_forward lines 1599-1701; trl/kernels/
      chunked_logprob.py ChunkedLogProbFunction lines 299-465) replaces the logits and the cross-entropy: it saves
      (hidden, weight, bias, targets, log_z, entropy) (line 386) where `hidden` is a new (tokens, h) copy of the
      final norm's output (`hidden_states[mask]`, utils.py line 1645), which replaces lm_head's saved input where the
      head trains (full: the activations' head_in) and is M h more per token where it does not; per token the saved
      log_z and entropy (fp32, 8 bytes) and targets (int64, 8) and the returned log_probs, entropy and mean_logits
      (fp32, 12): 28 bytes. Every call projects tiles of TRL_TILE_TOKENS x TRL_TILE_VOCAB values into one buffer in
      the compute dtype (`mm_buf`, lines 347 and 413: counted whole, the upper bound below 4,096 scored tokens).
      Its backward (lines 393-465) holds, when it returns, the fp32 gradient of `hidden` and its 16-bit copy
      ((4 + M) h per token), the buffer and, where lm_head trains, its fp32 gradient and that gradient in the
      weight's dtype ((4 + M) V h): the loss_backward phase. The reference's head, under no_grad, holds its own
      final-norm output and copy (2 M h per token) and a buffer beside the policy's graph: the forward phase.
    * LLaMA-Factory and torchtune compute the log-probs from the whole logits, in fp32: LLaMA-Factory
      (src/llamafactory/train/dpo/trainer.py concatenated_forward: `model(**batch).logits.to(torch.float32)`,
      trainer_utils.py get_batch_logps `torch.gather(logits.log_softmax(-1), ...)`) keeps the policy's fp32 logits
      (the `chosen_logits` / `rejected_logits` views it returns for the metrics) and the fp32 log-softmax output
      while its reference forward, after the policy's (get_batch_loss_metrics), makes its own fp32 logits and
      log-softmax: 8 V + 8 V per token; torchtune (recipes/lora_dpo_single_device.py concatenated_forward:
      `all_logits = model(...)`, its TransformerDecoder.unembed `self.output(h).float()`; torchtune/rlhf
      logits_to_logprobs `F.log_softmax(logits / temperature, dim=-1)`) keeps the policy's fp32 log-softmax output
      once it deletes the logits' views, and the reference's fp32 logits, their division by the temperature and
      its log-softmax exist together: 4 V + 12 V per token. Both: 16 V per token in the forward, and at the loss's
      backward the unfused cross-entropy's buffers (saved output, gather's zero-filled gradient, log-softmax's
      gradient: 12 V), whatever loss the recipe's SFT runs (not measured: derived from the code).
    Every term is 0 on an sft row (the figures as before)."""
    if not np.any(x.dpo):
        return parts
    dpo = np.asarray(x.dpo, dtype=bool)
    pairs = np.where(dpo, 2.0, 1.0)
    def doubled(v):
        return v if is_zero(v) else v * pairs

    out = {}
    for comp, by_phase in parts.items():
        out[comp] = {name: (p._replace(per_token=doubled(p.per_token), per_token_seq=doubled(p.per_token_seq),
                                       per_token_w=doubled(p.per_token_w), per_token_seq_w=doubled(p.per_token_seq_w))
                            if name in TRAIN_PHASES else p) for name, p in by_phase.items()}
    # the reference copy: the policy's weights less its adapters, split as the weights are
    ref = np.where(np.asarray(x.dpo_copy, dtype=bool),
                   t.weights - np.where(x.lora, trainable_params(x) * x.wb_trained, 0.0), 0.0)
    if np.any(ref > 0):
        share = np.divide(ref, t.weights, out=np.zeros_like(ref), where=t.weights > 0)
        on_gpu = _ep_weights(x, t) * share
        zero3 = (x.zero >= 3) & x.train
        fixed, shard = _on_gpu(_split(on_gpu, zero3), ~x.off_all)
        w = out["weights"]
        for name in TRAIN_PHASES:
            p = w.get(name, Part())
            w[name] = p._replace(fixed=p.fixed + fixed, shard=p.shard + shard)
    lg = out["logits"]
    trl = np.asarray(x.dpo_trl_head, dtype=bool)
    if np.any(trl):
        ref_fwd = np.asarray(x.dpo_ref_forward, dtype=bool)
        tile = TRL_TILE_TOKENS * TRL_TILE_VOCAB * x.M
        head_trains = np.asarray(x.full, dtype=bool)
        kept = np.where(head_trains, 0.0, x.M * x.h) * 2.0 + 2.0 * 28.0   # (per pair: two sequences)
        fwd_tok = kept + np.where(ref_fwd, 2.0 * 2.0 * x.M * x.h, 0.0)
        bwd_tok = kept + 2.0 * (4.0 + x.M) * x.h
        bwd_fixed = tile + np.where(head_trains, (4.0 + x.M) * x.V * x.h, 0.0)
        for name, tok, fixed in (("forward", fwd_tok, tile), ("loss_backward", bwd_tok, bwd_fixed)):
            p = lg.get(name, Part())
            lg[name] = _where_part(trl, Part(fixed=fixed, per_token=tok), p)
        for name in ("backward", "backward_end", "grad_reduce", "optimizer"):
            if name in lg:  # (a loop that keeps its outputs keeps no logits: the head returns none)
                lg[name] = _where_part(trl, Part(), lg[name])
    whole = np.asarray(x.dpo_logits, dtype=bool)
    if np.any(whole):
        ref_fwd = np.asarray(x.dpo_ref_forward, dtype=bool)
        forward_sft, backward_sft = logits_bytes(x.V, x.M, loss_tp(x))
        forward = np.where(ref_fwd, 16.0 * x.V / loss_tp(x), np.maximum(forward_sft, 12.0 * x.V / loss_tp(x)))
        for name, tok in (("forward", 2.0 * forward), ("loss_backward", 2.0 * backward_sft)):
            p = lg.get(name, Part())
            lg[name] = _where_part(whole, Part(per_token=tok), p)
    return out


def physics(x: Inputs, settings: dict) -> Physics:
    t = totals(x)
    parts = {comp: fn(x, t) for comp, fn in COMPONENT_FUNCTIONS.items()}
    parts = dpo_parts(x, t, parts)
    if np.any(np.asarray(x.cp) > 1):
        parts = context_parallel(x, parts)
    parts = grad_reduce_parts(x, parts)
    context, frag = runtime_overhead(x, settings)
    context_one, context_several = runtime_contexts(settings)
    cpu_per_token, cached_per_token = offloaded_activation_bytes(x), cached_logits_bytes(x)
    if np.any(x.dpo):  # (dpo_parts) two sequences per pair; TRL's fused head makes no logits for the allocator to keep
        pairs = np.where(x.dpo, 2.0, 1.0)
        cpu_per_token = cpu_per_token * pairs
        cached_per_token = np.where(x.dpo_trl_head, 0.0, cached_per_token * pairs)
    return Physics(inputs=x, totals=t, parts=parts, phases=assemble(parts), model_states=model_state_bytes(x, parts, t),
                   paged=paged_optimizer_bytes(x, t), cpu=host_bytes(x, t), context=context, fragmentation=frag,
                   cpu_per_token=cpu_per_token, cached_per_token=cached_per_token,
                   serving_rep=serving_replicated(x, t), ds_step=deepspeed_zero3_step(x, t), context_one=context_one,
                   context_several=context_several)


__all__ = ["Inputs", "Totals", "Physics", "inputs", "scenario_inputs", "totals", "physics", "COMPONENT_FUNCTIONS",
           "last_logits_bytes", "kv_window_saving", "kv_state_bytes", "eager_prefill_terms", "runtime_overhead", "int4_kernel_parts", "rope_cache_bytes"]
