"""Every constant the estimation model uses, with where it comes from.

Nothing here is fitted to a measurement: each figure is a storage size fixed by a data type
or a file format, or a documented default of a library. Where a figure is an assumption
(the runtime overhead), it says so and is a setting the caller can change.
"""

from __future__ import annotations

import numpy as np

GIB = 2**30
MIB = 2**20
GB = 10**9

# --- Training precision modes -----------------------------------------------------------
# Bytes per parameter of the weights kept in memory, of their gradients, and of the bytes
# per element of the activations saved for backward, for each training precision mode.
#   fp32       plain fp32 training (torch default dtype).
#   amp_*      torch.autocast: fp32 weights/gradients/optimizer states, matmuls in 16-bit;
#              autocast caches a 16-bit copy of every weight it casts (torch.amp docs,
#              "autocast ... caches casted weights") and the backward of each matmul keeps it.
#   bf16/fp16  "pure" 16-bit: model.to(bfloat16), gradients and optimizer states in 16-bit.
#   mixed_*    DeepSpeed / Megatron mixed precision: 16-bit weights and gradients, an fp32
#              master copy of the weights kept with the optimizer states (ZeRO paper,
#              Rajbhandari et al. 2020, section 3.1: K = 12 for Adam = 4 master + 4 + 4).
TRAIN_PRECISIONS = ("fp32", "amp_bf16", "amp_fp16", "bf16", "fp16", "mixed_bf16", "mixed_fp16")

WEIGHT_BYTES = {  # bytes per stored weight (the dtype's size)
    "fp32": 4, "amp_bf16": 4, "amp_fp16": 4, "bf16": 2, "fp16": 2, "mixed_bf16": 2, "mixed_fp16": 2,
}
GRAD_BYTES = {  # gradients have the dtype of their parameter
    "fp32": 4, "amp_bf16": 4, "amp_fp16": 4, "bf16": 2, "fp16": 2, "mixed_bf16": 2, "mixed_fp16": 2,
}
# Extra optimizer-held bytes per trainable parameter that do not depend on the optimizer:
# the fp32 master copy of DeepSpeed-style mixed precision.
MASTER_BYTES = {
    "fp32": 0, "amp_bf16": 0, "amp_fp16": 0, "bf16": 0, "fp16": 0, "mixed_bf16": 4, "mixed_fp16": 4,
}
# Bytes of the optimizer states' dtype: torch optimizers create states like the parameter
# (torch.zeros_like(p)), so pure 16-bit training keeps 16-bit states; mixed_* keeps fp32.
STATE_DTYPE_BYTES = {
    "fp32": 4, "amp_bf16": 4, "amp_fp16": 4, "bf16": 2, "fp16": 2, "mixed_bf16": 4, "mixed_fp16": 4,
}
# 16-bit copies of the weights made during forward under autocast (see above).
AUTOCAST_COPY_BYTES = {
    "fp32": 0, "amp_bf16": 2, "amp_fp16": 2, "bf16": 0, "fp16": 0, "mixed_bf16": 0, "mixed_fp16": 0,
}
# Bytes per element of the activations flowing between layers (the residual stream) and of
# the 16-bit matmul outputs. Under autocast the residual stream stays fp32 (the embedding
# and the additions are not autocast ops) while matmul outputs are 16-bit.
RESIDUAL_BYTES = {
    "fp32": 4, "amp_bf16": 4, "amp_fp16": 4, "bf16": 2, "fp16": 2, "mixed_bf16": 2, "mixed_fp16": 2,
}
MATMUL_OUT_BYTES = {
    "fp32": 4, "amp_bf16": 2, "amp_fp16": 2, "bf16": 2, "fp16": 2, "mixed_bf16": 2, "mixed_fp16": 2,
}

# --- Weight storage for inference and frozen bases (bits per weight) ----------------------
# fp32/bf16/fp16: the dtype. int8: bitsandbytes LLM.int8 (1 byte + one fp32 scale per output
# row, bitsandbytes Int8Params.SCB). int4: GPTQ/AWQ with group size 128, 4 bits + a 16-bit
# scale and a 16-bit zero per group = 4 + 32/128 = 4.25 bits. nf4: bitsandbytes NF4 with double
# quantization, 4 + 8/64 + 32/(64*256) = 4.127 bits (QLoRA paper, Dettmers et al. 2023, sec. 3).
# Those quantize the linear layers only; embeddings, lm_head and norms stay 16-bit.
# GGUF: llama.cpp quantizes every tensor; the average bits per weight of a whole file are the
# ones llama.cpp's quantize tool prints (tools/quantize/README.md, Llama 3.1 8B table):
# Q4_K_M 4.89 bpw, Q8_0 8.50, Q6_K 6.56, Q5_K_M 5.70, Q4_0 4.55 (4.5 + 16-bit scale per 32),
# Q3_K_M 3.91, Q2_K 3.35 (ENGINE.md's table of the same README).
# Checkpoints stored in low-precision floats (issue 27), the layouts their sources give:
# fp8: e4m3 weights (1 byte) with fp32 scales; block-wise 128 x 128 (Qwen3-*-FP8 and DeepSeek-V3's
#   quantization_config weight_block_size [128, 128]) adds 32 / 16384 bits per weight; a per-tensor
#   scale (vLLM's dynamic fp8, Neural Magic's FP8 checkpoints) adds nothing measurable, a per-row one
#   32 / in_features (0.008 bits at 4096). The linear layers only: embeddings, lm_head and norms stay
#   16-bit (compressed-tensors' ignore: ["lm_head"]). vLLM docs (features/quantization/fp8.md, v0.32):
#   W8A8 on compute capability >= 8.9, weight-only W8A16 (FP8 Marlin) from 7.5.
# nvfp4: e2m1 values (4 bits) with one e4m3 scale per 16 values (8 bits / 16) and one fp32 scale per
#   tensor = 4.5 bits (Intel Neural Compressor's NVFP4 table: block 16, UE4M3 scale, FP32 global scale;
#   NeMo Automodel's nvfp4 module: the ModelOpt checkpoint layout, group_size 16, weight_scale e4m3,
#   weight_scale_2 fp32). Linear layers; lm_head stays 16-bit.
# mxfp4: OCP Microscaling FP4, e2m1 values with one e8m0 (8-bit) scale per 32 = 4.25 bits. gpt-oss's
#   checkpoints quantize only the routed experts: quantization_config modules_to_not_convert =
#   model.layers.*.self_attn, model.layers.*.mlp.router, model.embed_tokens, lm_head (transformers'
#   convert_gpt_oss_weights_to_hf.py); the experts' biases stay bf16 (only *_blocks and *_scales are
#   packed). So `mxfp4` quantizes the routed experts' matrices of a model that has them
#   (QUANT_EXPERTS_ONLY), every linear layer of a dense one.
LINEAR_BITS = {
    "fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "int8": 8.0, "int4": 4.25, "nf4": 4.127,
    "fp8": 8.0 + 32.0 / (128 * 128), "nvfp4": 4.0 + 8.0 / 16, "mxfp4": 4.0 + 8.0 / 32,
}
# bitsandbytes 4-bit without double quantization (engine/stacks.py bnb_double_quant off; transformers'
# BitsAndBytesConfig default bnb_4bit_use_double_quant=False): an fp32 absmax per block of 64 weights
# (bitsandbytes 0.41.1 nn/modules.py Params4bit blocksize=64; functional.py quantize_4bit), 4 + 32/64.
NF4_NO_DOUBLE_QUANT_BITS = 4.0 + 32.0 / 64
QUANT_EXPERTS_ONLY = ("mxfp4", "mxfp4_moe")
# Frozen-base types that are not inference precisions (a QLoRA base only). nf4_nodq: bitsandbytes NF4
# without double quantization, an fp32 absmax per 64-value block = 4 + 32/64 = 4.5 bits
# (bitsandbytes 0.42.0 functional.py quantize_4bit(blocksize=64, compress_statistics=False): `absmax =
# torch.zeros((blocks,), dtype=torch.float32)` kept as is; with compress_statistics=True the absmax is
# quantized again to 8 bits per 256, our `nf4`). LitGPT's `--quantize bnb.nf4` (every config_hub
# qlora.yaml) is Lightning Fabric's BitsandbytesPrecision('nf4'): _NF4Linear(compress_statistics=False)
# (lightning fabric/plugins/precision/bitsandbytes.py, 2.3.0.dev-2.4.0.dev and master); `bnb.nf4-dq` is
# our `nf4`.
BASE_ONLY_BITS = {"nf4_nodq": 4.0 + 32.0 / 64}
# Of a bitsandbytes 4-bit weight's bits (nf4 4.127, nf4_nodq 4.5), the packed 4-bit values: the Params4bit's
# own data, `out = torch.zeros(((n+1)//mod, 1), dtype=quant_storage)` with mod = 2 x the storage's bytes
# (bitsandbytes 0.43.0 functional.py quantize_4bit, line 985), what FSDP / ZeRO-3 shard and offload. The
# rest (0.127 and 0.5 bits) is the QuantState: the absmax of every 64 weights (fp32, line 981; with
# compress_statistics `quantize_blockwise(absmax, blocksize=256)`, lines 1014-1019: 8-bit codes + an fp32
# absmax per 256 of them), an attribute of the parameter and of its module, never a parameter or buffer
# (engine/components.py `_quant_state_bytes`). Its per-tensor constants (the 16-value 4-bit code, the
# shared 256-value dynamic map, the fp32 offset: under 1.2 KB a linear, 0.6 MB for Llama 2 70B's 560
# linears) are left out.
BNB_PACKED_BITS = 4.0
# GGUF mxfp4_moe: llama.cpp's MXFP4_MOE file type (LLAMA_FTYPE_MOSTLY_MXFP4_MOE = 38; gpt-oss's GGUFs).
# src/llama-quant.cpp: "MoE tensors -> MXFP4, other tensors -> Q8_0" (tensor->ne[2] > 1, the experts'
# 3-D tensors), and the output tensor Q8_0 too; GGML_TYPE_MXFP4 is 32 values in 17 bytes (one e8m0
# scale + 16 bytes of e2m1) = 4.25 bits. Its GGUF_BITS entry is the rest's (Q8_0, 8.5 bits);
# GGUF_EXPERT_BITS is the experts'.
# llama.cpp's sliding-window (SWA) KV cache (src/llama-kv-cache-iswa.cpp at 02c28f53): each sequence stream keeps
# GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256) cells of its sliding-window layers ("the SWA cache is always padded to 256
# for performance", ggml-org/llama.cpp#17037), n_ubatch the default -ub 512 (common/common.h); with --kv-unified (or
# -np auto) one stream of n_swa x n_seq + n_ubatch, which the per-sequence count never falls below. Public load logs
# agree: Gemma's 1,024-token window at -c 8192 prints "creating SWA KV cache, size = 1536 cells" (1/1 and 2/2 seqs).
# kv_policy "windowed" (engine/components.py) keeps that many tokens of those layers.
LLAMA_UBATCH = 512
LLAMA_SWA_PAD = 256


def llama_swa_cells(window):
    """The tokens llama.cpp's SWA cache keeps of a sliding-window layer per sequence (before the context caps it):
    the window plus one micro-batch, rounded up to 256 (0 where there is no window)."""
    w = np.asarray(window, dtype=float)
    return np.where(w > 0, np.ceil((w + LLAMA_UBATCH) / LLAMA_SWA_PAD) * LLAMA_SWA_PAD, 0.0)


GGUF_BITS = {
    "q8_0": 8.5, "q6_k": 6.5625, "q5_k_m": 5.69, "q4_k_m": 4.8944, "q4_0": 4.55, "q3_k_m": 3.91, "q2_k": 3.35,
    "mxfp4_moe": 8.5,
    # llama.cpp's NVFP4 file type (LLAMA_FTYPE_MOSTLY_NVFP4 = 39, include/llama.h; GGML_TYPE_NVFP4 = 40) as the
    # published files have it: convert_hf_to_gguf.py (ggml-org/llama.cpp at 0024aa74) repacks a ModelOpt /
    # compressed-tensors NVFP4 checkpoint's linears as GGML NVFP4 (block_nvfp4 = 64 values in 4 UE4M3 scales + 32
    # bytes of e2m1 = 36 bytes, 4.5 bits: GGUF_LINEAR_BITS below; two F32 scalars a weight, `.scale` and
    # `.input_scale`, left out) and writes every other tensor -- token_embd, output (lm_head, which ModelOpt leaves
    # unquantized), norms -- in its --outtype, BF16 by default ("auto"), relabelling the file NVFP4 only for a
    # 16/32-bit outtype. This entry is that rest: 16 bits. (llama-quant.cpp's own NVFP4 mapping at 007dbbf3 -- every
    # matrix NVFP4, the output Q6_K -- is smaller, and upstream llama-quantize's CLI lists no NVFP4 type: the
    # converted layout is the one planned, never the smaller.) Checked: llama-bench's size of a Llama 3.1 8B NVFP4
    # file, 5.61 GiB (Thireus/GGUF-Tool-Suite#77, 2026-04-24), is this layout's 5.62 GiB. Named nvfp4_gguf: vLLM's
    # and SGLang's `nvfp4` is the checkpoint itself; under llama.cpp `--precision nvfp4` reads as this type
    # (engine/serving.py GGUF_PRECISION_ALIASES).
    "nvfp4_gguf": 16.0,
}
# GGUF types whose decoder linears (experts included) take bits of their own, the rest GGUF_BITS's
GGUF_LINEAR_BITS = {"nvfp4_gguf": 4.0 + 32.0 / 64}
GGUF_EXPERT_BITS = {"mxfp4_moe": 4.0 + 8.0 / 32}
# 16-bit GGUF files: convert_hf_to_gguf.py's --outtype f16 / bf16 (its own default output) and llama-quantize's F16 / BF16
# file types (LLAMA_FTYPE_MOSTLY_F16 = 1, LLAMA_FTYPE_MOSTLY_BF16 = 32): every weight matrix, the output one too, in 16
# bits. llama.cpp and Ollama take them as bf16 / fp16 beside the quantized GGUF_BITS types (engine/serving.py).
GGUF_16BIT = ("bf16", "fp16")
GGUF_FILE_PRECISIONS = tuple(GGUF_BITS) + GGUF_16BIT  # what llama.cpp / Ollama load
INFER_PRECISIONS = tuple(LINEAR_BITS) + tuple(GGUF_BITS)
# Quantized weights whose runs keep their activations, and so their KV cache, in fp16 (the KV 'auto'
# rule, engine/rules.py): transformers' bitsandbytes quantizers set a missing torch_dtype to float16
# (quantizers/quantizer_bnb_4bit.py update_torch_dtype: "Overriding torch_dtype=None with
# `torch_dtype=torch.float16` due to requirements of `bitsandbytes`"); GPTQ and AWQ kernels take fp16
# activations (vLLM GPTQConfig / AWQConfig get_supported_act_dtypes: [torch.half]); llama.cpp's KV cache
# is f16 unless -ctk/-ctv say otherwise (common/arg.cpp "--cache-type-k ... (default: f16)"). fp16 and
# bf16 take the same bytes; the type decides only whether a Volta or Turing card (no bf16) runs it.
FP16_ACTIVATION_WEIGHTS = ("int8", "int4", "nf4") + tuple(GGUF_BITS)
# Bytes per element of the 16-bit (or fp32) parts and of the activations at inference.
INFER_ACT_BYTES = {p: (4 if p == "fp32" else 2) for p in INFER_PRECISIONS}
# The transformers model_type of the catalog families whose terms the engine keys on the architecture
# (Gemma's norms, Gemma 2's softcapped scores, gpt-oss's eager bf16 scores and clamped GLU). A model read
# from a config.json, a checkpoint or the Hub has the family "custom-<its model_type>" (catalog/user.py),
# so a family is read as its model_type through this table or that prefix (engine/params.py model_types): the same
# architecture gets the same terms whichever way it came in.
FAMILY_MODEL_TYPE = {"gemma": "gemma", "gemma-2": "gemma2", "gemma-3": "gemma3_text", "gpt-oss": "gpt_oss", "llama-4": "llama4",
                     "qwen3-next": "qwen3_next", "mixtral": "mixtral", "deepseek-v3": "deepseek_v3"}
# a family whose dense and mixture-of-experts members have two model_types: the MoE members' (Qwen3-30B-A3B and
# Qwen3-235B-A22B are qwen3_moe), read where the model has experts (engine/params.py peft_moe_patterns)
FAMILY_MOE_MODEL_TYPE = {"qwen3": "qwen3_moe"}
# LoRA on a mixture of experts whose experts transformers 5.x fuses into 3-D parameters: peft 0.21.2 re-targets the
# config when the model is built (peft/tuners/tuners_utils.py line 845 convert_peft_config_for_transformers ->
# peft/utils/transformers_weight_conversion.py _convert_peft_config_moe, lines 402-482) for the model_types of its
# _MODEL_TO_CONVERSION_PATTERN (transformers 5.24 conversion_mapping.py's table plus "mixtral", line 45) whose
# pattern has a _MOE_TARGET_MODULE_MAPPING and a _MOE_FUSED_TARGETS entry and that have a checkpoint conversion
# mapping: this list is those checks run in the measuring venv (2026-12-06). The value is the pattern:
#   "qwen2_moe": gate_proj and up_proj (both, else peft raises) become target_parameters gate_up_proj at twice the
#     rank (rank_pattern r x 2), down_proj becomes down_proj, each adapted by a ParamWrapper (lora_A E r x in,
#     lora_B out x E r); `gate` (the router's gate.weight) is added under all-linear only; the names are removed
#     from target_modules, so a dense layer's MLP and the shared experts (nn.Linear gate/up/down) are not adapted;
#   "mixtral": the v4 names w1, w3, w2: only all-linear (which adds every mapping key) reaches the experts.
# Qwen2-MoE (qwen2_moe itself), gpt-oss and Llama 4 are not in it: their experts are not adapted by all-linear.
# Measured: tests/data/measured_moe_lora.csv (benchmarks/measure_peaks.py --set moe_lora).
# bitsandbytes quantizes the nn.Linear modules alone (transformers 5.24 integrations/bitsandbytes.py
# replace_with_bnb_linear line 189: `isinstance(module, Conv1D) or type(module) is nn.Linear`;
# quantizers/quantizer_bnb_4bit.py param_needs_quantization line 87: `isinstance(module, bnb.nn.Linear4bit)`), and
# every mixture of experts of transformers 5.24 keeps its routed experts as 3-D parameters of one module
# (@use_experts_implementation: MixtralExperts, Qwen3MoeExperts, DeepseekV3NaiveMoe, GptOssExperts, Llama4TextExperts,
# ...), so a 4-bit or 8-bit bitsandbytes model (a QLoRA base, an nf4 / int8 inference) holds its experts in the load
# dtype (an int4 LoRA base too: bitsandbytes' FP4 in every config the planner writes): checked in the measuring venv
# (bitsandbytes 0.50.2) on Mixtral and Qwen3-MoE, where only q/k/v/o became
# Linear4bit / Linear8bitLt (2026-12-06). LitGPT's own MoE (per-expert nn.Linear, quantized by Fabric) is the exception,
# and so is a Llama 4 checkpoint saved already quantized (quantizers/base.py MODULES_TO_PATCH_FOR_QUANTIZATION patches
# its experts back to per-expert nn.Linear when pre_quantized: the estimate is then above it). Serving engines:
# engine/serving.py HF_FUSED_EXPERTS_16BIT.
# engine/components.py Inputs.bnb_experts.
# The mixtures of experts transformers 5.24 fuses and peft 0.21.2 does not convert (not in PEFT_FUSED_MOE): LoRA reaches
# only their nn.Linear modules, never the experts. Each layer's attention; each MoE layer's shared expert (gate/up/down
# at its own width) and, under all-linear, Qwen2-MoE's shared_expert_gate (nn.Linear(h, 1)); each dense layer's MLP.
# The routers are not adapted: gpt-oss's GptOssTopKRouter and Qwen2-MoE's Qwen2MoeTopKRouter hold a bare weight, and
# Llama 4's Llama4Router, an nn.Linear subclass that returns a tuple, makes an all-linear model fail at its first
# forward ("'tuple' object has no attribute 'dtype'", peft/tuners/lora/layer.py line 1089, run on a small Llama 4 in the
# measuring venv), so the configs the planner writes name the seven projections for Llama 4 (planner/exports.py
# _all_linear_fails), which leave the router alone. Read by building each on the meta device in the measuring venv and
# listing what get_peft_model adapts (2026-12-06): gpt-oss-20b 7,962,624 trainable at r 16 (q/k/v/o alone),
# Qwen1.5-MoE-A2.7B 15,925,632, Llama 4 Scout 55,836,672 with the seven names, Maverick 67,289,088 under all-linear
# (less its routers' 24 x 16 x (5,120 + 128)); measured: tests/data/measured_moe_lora.csv
# (engine/components.py unconverted_moe_lora_in_out).
PEFT_UNCONVERTED_MOE = ("gpt_oss", "llama4", "llama4_text", "qwen2_moe")
# transformers 5.24 models/llama4/modeling_llama4.py Llama4TextMoe.forward: `routed_in = hidden_states.repeat(
# router_scores.shape[1], 1)`, multiplied by the (mostly zero) router scores, and Llama4TextExperts.forward runs
# `torch.bmm` over all E experts for every token: the layer computes, and keeps for backward, E x a dense MLP of the
# expert width (measured: tests/data/measured_moe_lora.csv, Llama 4 Scout; engine/components.py _layer_activations).
# torchtune's own Llama 4 (GroupedExperts over the routed tokens) is not among them.
DENSE_EXPERTS_MODEL_TYPES = ("llama4", "llama4_text")
# Mixtures of experts whose router hands fp32 weights to the experts (transformers 5.24): MixtralTopKRouter returns the
# normalized top-k of softmax(router_logits.float()); DeepseekV2TopkRouter, DeepseekV3TopkRouter and Glm4MoeTopkRouter
# take them from fp32 scores (F.linear of hidden_states.type(torch.float32)) times routed_scaling_factor;
# MiniMaxM2's from sigmoid(router_logits.float()). The Qwen MoE, OLMoE, ERNIE, GraniteMoE and gpt-oss routers cast to the
# hidden states' dtype first. integrations/moe.py grouped_mm_experts_forward then multiplies the experts' 16-bit output
# rows by them (`weighted_out = proj_out * sample_weights_g`, k x h per token) and copies that back to token order:
# two fp32 k x h tensors beside the gathered input and the down projection's output at that moment (traced on the
# sixth loops probe's DeepSeek-V2-Lite prefill, benchmarks/trace_peak.py: `mul` and `index` [98304, 2048] float32).
FP32_ROUTER_WEIGHTS_MODEL_TYPES = ("mixtral", "deepseek_v2", "deepseek_v3", "glm4_moe", "minimax_m2")
# Mixtures of experts that transformers 5.x runs from the checkpoint's own code (trust_remote_code), whose experts are
# per-expert nn.Linear modules: Kimi K2 (model_type kimi_k2) ships DeepSeek-V3's modeling_deepseek.py
# (DeepseekV3MoE: `self.experts = nn.ModuleList([DeepseekV3MLP(config, intermediate_size=config.moe_intermediate_size)
# for i in range(config.n_routed_experts)])`, a MoEGate holding a bare weight; moonshotai/Kimi-K2-Instruct via the
# public code index), and transformers skips its weight conversions for custom code (conversion_mapping.py
# get_model_conversion_mapping, `submodule.is_custom_code()`). So peft adapts every routed expert's gate/up/down under
# all-linear or the MLP names, and bitsandbytes quantizes them (nn.Linear) (engine/components.py
# unconverted_moe_lora_in_out, _bnb_base).
PER_EXPERT_LINEAR_MOE = ("kimi_k2",)
# The model types whose checkpoints load only with their own code: transformers 5.24 registers no kimi_k2 config
# (AutoConfig raises "does not recognize this architecture" without trust_remote_code), and Kimi K2's tokenizer is its
# own tiktoken code, so its deploy guidance (moonshotai/Kimi-K2-Instruct docs/deploy_guidance.md, via the public code
# index) starts vLLM and SGLang with --trust-remote-code; the training configs set trust_remote_code (planner/exports.py).
REMOTE_CODE_MODEL_TYPES = ("kimi_k2",)
# the model_types whose all-linear LoRA fails in peft 0.21.2 (above): the seven projections are written instead
PEFT_ALL_LINEAR_FAILS = ("llama4", "llama4_text")
PEFT_FUSED_MOE = {
    **dict.fromkeys(("mixtral", "minimax", "minimax_m2"), "mixtral"),
    **dict.fromkeys(("Dots3NoteTextModel", "UnlimitedOcrTextModel", "afmoe", "beam", "cohere2_moe", "deepseek_v2",
                     "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe", "exaone_moe", "flex_olmo", "glm4_moe",
                     "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe", "longcat_flash", "mellum", "olmoe",
                     "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker",
                     "sarvam_mla", "solar_open"), "qwen2_moe"),
}
CUSTOM_FAMILY_PREFIX = "custom-"
GEMMA_MODEL_TYPES = ("gemma", "gemma2", "gemma3_text", "gemma3")  # (gemma3: a multimodal checkpoint's own type)
# The architectures transformers runs with eager attention whatever SDPA is asked: transformers 5.24
# Gemma2PreTrainedModel and GptOssPreTrainedModel have _supports_sdpa = False (softcapped scores; attention
# sinks), so they run eager_attention_forward (engine/components.py attention_path, engine/serving.py)
TRANSFORMERS_EAGER_MODEL_TYPES = ("gemma2", "gpt_oss")

# bitsandbytes int8 keeps one fp32 scale per output row (Int8Params.SCB).
INT8_ROW_SCALE_BYTES = 4

# --- KV cache precision ---------------------------------------------------------------
KV_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

# --- Optimizers ------------------------------------------------------------------------
OPTIMIZERS = ("adamw", "adamw_fused", "adamw_8bit", "paged_adamw_8bit", "sgd", "adafactor", "paged_adamw_32bit",
              "adamw_8bit_torchao", "lion_32bit", "lion_8bit", "galore_adamw", "galore_adamw_8bit",
              "galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "adam_mini", "muon")
# paged_adamw_32bit (issue 13): bitsandbytes PagedAdamW32bit, transformers' optim="paged_adamw_32bit"
# (the QLoRA paper's optimizer). bitsandbytes 0.50 bitsandbytes/optim/optimizer.py
# Optimizer2State.init_state: optim_bits 32 -> state1, state2 fp32 (4 bytes each, whatever the
# parameter's dtype); get_state_buffer pages (cudaMallocManaged, F.get_paged) every state of a
# tensor with at least 1e5 elements, which the driver evicts to host RAM under memory pressure,
# and keeps smaller ones as ordinary device tensors. bitsandbytes' "adamw_bnb_8bit" is the same
# optimizer as adamw_8bit (transformers maps both to bnb AdamW with optim_bits=8): not repeated.
PAGED_32BIT_STATE_BYTES = 8
PAGED_MIN_ELEMENTS = 100_000
# States per trainable parameter, in units of the state dtype (STATE_DTYPE_BYTES).
# AdamW: exp_avg and exp_avg_sq (torch.optim.AdamW). SGD with momentum: momentum_buffer.
STATE_COUNT = {"adamw": 2, "adamw_fused": 2, "sgd": 1}
# Step temporaries, in units of one state: torch's multi-tensor (foreach) AdamW computes
# exp_avg_sq.sqrt() for every parameter at once (torch/optim/adamw.py, _multi_tensor_adamw:
# torch._foreach_sqrt) before the update; the fused kernel and SGD's foreach path work in place.
STEP_TEMP_COUNT = {"adamw": 1, "adamw_fused": 0, "sgd": 0, "adamw_8bit_torchao": 0}
# bitsandbytes 8-bit Adam: two uint8 states per parameter plus one fp32 absmax per 256-value
# block per state (bitsandbytes/optim/optimizer.py Optimizer2State.init_state, lines 518-529 at
# 95f9af3 / 0.50.2.dev0: `blocksize = 256`, absmax1/absmax2 fp32; 256 since bitsandbytes 0.44.0,
# commit aa57bd89 "Change 8bit optimizer blocksize 2048->256", 2024-09-20; 2048 before);
# tensors with fewer than 4096 elements keep fp32 states (min_8bit_size=4096, line 502).
ADAM8BIT_BYTES = 2 + 2 * 4 / 256
ADAM8BIT_MIN_SIZE = 4096
# adamw_8bit_torchao (issue 13): torchao's AdamW8bit (torchao.prototype.low_bit_optim; the one torchtune's
# docs of Nov 2024 name first, docs/source/tutorials/memory_optimizations.rst at 32e265d; transformers'
# optim="adamw_torch_8bit"). Read at torchao b714026 (2024-11-19) and v0.6.1 (2024-10-21), the same layout:
# adam.py AdamW8bit `block_size=256`; _AdamBase._new_buffer: `if p.numel() >= 4096 and p.numel() %
# self.block_size == 0:` an OptimState8bit, else `torch.zeros_like(p)` (the parameter's own dtype: 16-bit
# states for a bf16 model, where bitsandbytes keeps fp32 ones); subclass_8bit.py OptimState8bit.zeros:
# `codes = torch.zeros(shape, dtype=torch.uint8)`, `scale = torch.zeros(codes.numel() // block_size)`
# (fp32), and a 256-entry fp32 qmap per state tensor (1 KiB each, left out). Two states (exp_avg,
# exp_avg_sq): 2 x (1 + 4/256) bytes per value, the same as bitsandbytes' 8-bit blockwise states.
TORCHAO_8BIT_BLOCK = 256
TORCHAO_8BIT_BYTES = 2 * (1 + 4 / TORCHAO_8BIT_BLOCK)
TORCHAO_8BIT_MIN_SIZE = 4096
# Its step has no whole-model temporaries: _AdamBase.step runs one parameter at a time, always through
# `torch.compile(single_param_adam, fullgraph=True, dynamic=False)` (no eager path). Eager, the same
# function would hold about 14 fp32 copies of the parameter (57-58 bytes per value, measured on the CPU with
# the torchao b714026 code and torch 2.13: benchmarks/check_torchao_8bit_step.py); compiled, inductor
# fuses it into one kernel whose only full-size buffers are the new exp_avg and exp_avg_sq in fp32, viewed
# (-1, 256) for the per-block absmax. The CPU (C++) backend keeps both (2 x 4 bytes per value: generated
# code and 8.03 bytes per value measured); on CUDA a 256-wide reduction is a Triton persistent reduction,
# and Kernel.remove_kernel_local_buffers drops a buffer written and read inside one kernel unless it is in
# must_keep_buffers, which only a looped reduction sets (torch 2.13 torch/_inductor/codegen/common.py
# CSEProxy.load: a load from cse.invalidated_stores; triton.py codegen_body invalidates them at the end of a
# reduction loop, a persistent reduction has none); torchao's README (b714026,
# Llama2-7B torchtune full bf16 on an A100) measured 39.1 GB peak against bitsandbytes 8-bit's 39.3, whose
# CUDA kernel updates in place, and 51.6 with fused AdamW: the saving is the states' (pytorch/ao PR #746:
# "going from 16-bit to 8-bit -> 52 - 39 = 13GB reduction"; 6.7 B values x (4 - 2.03) bytes = 13.3 GB).
# So none is modelled on GPUs (not measured on CUDA in this project).
#
# Optimizers people pick for memory (issue 27 item 3; the formulas: engine/optimizers.py). Names are
# transformers' where its Trainer offers them (transformers 5.24.0 training_args.py OptimizerNames, lines
# 132-148: LION_8BIT "lion_8bit", LION "lion_32bit", GALORE_ADAMW ... GALORE_ADAMW_8BIT_LAYERWISE); Adam-mini
# and Muon are not there: LLaMA-Factory ships them (src/llamafactory/train/trainer_utils.py at 908cd68,
# _create_adam_mini_optimizer / _create_muon_optimizer, switches use_adam_mini / use_muon).
# lion_32bit / lion_8bit: bitsandbytes Lion (transformers trainer_optimizer.py _get_bitsandbytes_optimizer:
# "lion" in the name -> bnb.optim.Lion with optim_bits 8 if "8bit" in it else 32). One state: bitsandbytes
# 0.50.2.dev0 (95f9af3) bitsandbytes/optim/optimizer.py Optimizer1State.init_state, lines 664-695:
# optim_bits 32 -> state1 fp32 whatever the parameter's dtype (line 681); 8 -> uint8 state1 + an fp32 absmax
# per 256 values (`blocksize = 256`, lines 688-695); tensors under min_8bit_size = 4096 elements keep fp32
# (line 674; bitsandbytes/optim/lion.py Lion8bit min_8bit_size=4096). The update is one CUDA kernel in
# place: no temporaries.
LION_32BIT_STATE_BYTES = 4
LION_8BIT_BYTES = 1 + 4 / 256
# GaLore (jiaweizzhao/GaLore at 2cc66f8, galore-torch 1.0): transformers 5.24.0 trainer_optimizer.py
# _get_galore_optimizer (lines 351-381; line 370) passes rank 128, update_proj_gap 200, scale 0.25, proj_type "std"
# (optim_args defaults) to the parameter group of optim_target_modules' nn.Linear weights
# (_setup_low_rank_optimizer, lines 101-187); every other parameter is a plain group of the same optimizer.
# Targets modelled: the decoder layers' attention and MLP linears, optim_target_modules=["attn", "mlp"]
# (a substring match, trainer_utils.py check_target_module_exists; transformers' GaLore docs' example);
# "all-linear" (line 133) would add lm_head, the largest matrix of most models (not modelled).
# That rank is the default of the scenario column galore_rank (0: the recipe's, engine/rules.py); LLaMA-Factory's
# own GaLore (use_galore, trainer_utils.py _create_galore_optimizer) defaults to rank 16 (hiyouga/LLaMA-Factory
# at 00577a8, src/llamafactory/hparams/finetuning_args.py GaloreArguments: galore_rank default=16, galore_target
# "all" = every linear layer but the output layer). galore_projector.py
# GaLoreProjector.project, proj_type std: a weight of m x n keeps ortho_matrix = Vh[:r] (r x n) if m >= n,
# else U[:, :r] (m x r): the smaller side x r, in the gradient's dtype (get_orthogonal_matrix casts back);
# the low-rank gradient, and so exp_avg / exp_avg_sq (adamw.py lines 105-109, zeros_like(grad)), is
# r x the larger side. GALORE_LAYERWISE: a per-parameter optimizer stepped and zeroed in a
# post-accumulate-grad hook (_setup_low_rank_optimizer lines 164-184), modelled as optimizer_in_backward.
GALORE_RANK = 128
GALORE_RANK_BY_RECIPE = {"llama-factory": 16}  # every other recipe: GALORE_RANK (transformers' Trainer)
GALORE_8BIT = ("galore_adamw_8bit", "galore_adamw_8bit_layerwise")
GALORE_LAYERWISE = ("galore_adamw_layerwise", "galore_adamw_8bit_layerwise")
GALORE_OPTIMIZERS = ("galore_adamw", "galore_adamw_layerwise") + GALORE_8BIT
# Muon's Newton-Schulz iteration runs in bfloat16 whatever the gradient's dtype (torch 2.9+
# torch 2.14.1 torch/optim/_muon.py line 55, _zeropower_via_newtonschulz: `ortho_grad = grad.bfloat16()`; LLaMA-Factory's
# third_party/muon/muon.py at 85b0f31, zeropower_via_newtonschulz5: `X = G.bfloat16()`).
MUON_NS_BYTES = 2
# the torch.linalg.svd GaLore's projector calls runs on an fp32 matrix (get_orthogonal_matrix: `.float()`)
SVD_BYTES = 4
NEW_OPTIMIZERS = ("lion_32bit", "lion_8bit") + GALORE_OPTIMIZERS + ("adam_mini", "muon")

# --- LoRA ------------------------------------------------------------------------------
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# peft creates lora_A/lora_B in fp32 and, with its default autocast_adapter_dtype=True,
# upcasts adapters of a 16-bit base to fp32 (peft.tuners.tuners_utils, cast_adapter_dtype).
LORA_ADAPTER_BYTES = 4
LORA_DEFAULT_TARGETS = "q_proj,v_proj"  # peft's default for Llama (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)

# --- Runtime overhead (what a real GPU adds on top of the tensors) ---------------------------
# These are assumptions, stated and adjustable, never hidden in another term.
# CUDA context + the kernels loaded: before CUDA 11.7 every kernel was loaded at start
# (over 1 GB; Hugging Face's "model memory anatomy" measured 1,343 MB on a V100). With lazy
# module loading, PyTorch's default since 1.13 (pytorch/pytorch PR #86509: 287 MB lazy vs
# 667 MB eager, measured with cudaMemGetInfo), a context is about 300-400 MB (ptrblck in
# pytorch/pytorch #107667, #109888), and 426 MiB was measured with PyTorch 2.10 + CUDA 13 on
# an RTX 6000 Ada (unslothai/unsloth-zoo PR #1053). We assume 430 MiB.
CUDA_CONTEXT_BYTES = 430 * MIB
# cuBLAS workspace: PyTorch's default CUBLAS_WORKSPACE_CONFIG is ":4096:8" = 8 x 4 MiB.
CUBLAS_WORKSPACE_BYTES = 32 * MIB
# PyTorch's caching allocator keeps freed blocks reserved and splits large segments; what is
# reserved but unallocated at an OOM was 1.83 GiB beside 75.31 GiB allocated (2.4%) for a
# Llama 70B job (vllm-project/compressed-tensors PR #587, which then reserves 5% of model
# memory for it). We assume 5% of the tensors' peak; set 0 to compare with
# torch.cuda.max_memory_allocated().
FRAGMENTATION_FRACTION = 0.05
# NCCL communication buffers when more than one GPU: NCCL_BUFFSIZE defaults to 4 MiB per
# channel and peer; with the default channel counts this is of the order of a few hundred MiB.
NCCL_BYTES = 256 * MIB
# Apple GPUs share memory and run no CUDA; the context term is replaced by nothing.

# --- Gradient checkpointing, ZeRO-3 --------------------------------------------------------
# ZeRO-3 / FSDP gather a layer's full weights before using it and prefetch the next one
# (FSDP backward_prefetch=BACKWARD_PRE): two layers of 16-bit (or fp32) weights in flight.
# Since issue 12 only for the torchtune recipe (embedding and output sharded as units of their own,
# not measured); the HF/accelerate wrapping uses the measured FSDP2 working set
# (engine/components.py `_fsdp_gathered_params`).
ZERO3_LAYERS_IN_FLIGHT = 2

# --- DeepSpeed ZeRO-1/2 (read at v0.16.4, e2dc3ee, 2025-02; the same lines in v0.14.0 and v0.15.0) --
# The engine's ZeRO stages 1 and 2 are DeepSpeed's DeepSpeedZeroOptimizer
# (deepspeed/runtime/zero/stage_1_and_2.py; engine/components.py `deepspeed_zero12` traces its buffers).
# Its configuration as the planner's own export writes it (planner/exports.py `deepspeed`:
# zero_optimization {"stage": N} and nothing else), i.e. DeepSpeed's defaults
# (deepspeed/runtime/zero/config.py): reduce_bucket_size 5e8 values (line 109), contiguous_gradients
# true (line 98), overlap_comm false for stages 1 and 2 (lines 134, 351-354: true for stage 3 only):
# one reduction bucket (`ipg_buffer`) of reduce_bucket_size values in the trained parameters' dtype,
# allocated at every backward (stage_1_and_2.py backward, lines 2048-2060; a second one with
# overlap_comm). allgather_bucket_size is read only where torch has no all_gather_into_tensor
# (runtime/utils.py all_gather_dp_groups, lines 965-968): the step's all-gather writes into the
# flat 16-bit buffer itself, no bucket. transformers' Trainer replaces reduce_bucket_size only where a
# config says "auto" (hidden_size^2: integrations/deepspeed.py trainer_config_finalize); its docs'
# ZeRO-2 example writes 5e8 and overlap_comm true (two buckets): not modelled.
DS_REDUCE_BUCKET_SIZE = 500_000_000
# DeepSpeed's ZeRO optimizers hold an fp32 master partition of every trained weight whatever the
# model's 16-bit dtype, and the optimizer (torch's, or DeepSpeed's own built from the config) steps it,
# so its states are fp32 too: stage 1/2 `self.single_partition_of_fp32_groups.append(
# self.parallel_partitioned_bit16_groups[i][partition_id].to(self.device).clone().float().detach())`
# then `param_group['params'] = [self.single_partition_of_fp32_groups[i]]` (stage_1_and_2.py, v0.16.4
# lines 398-409; fp16_master_weights_and_gradients, the one exception, requires fp16 with CPU offload
# and is not in the planner's export); stage 3 likewise (stage3.py `fp32_partitioned_groups_flat`,
# `.clone().float()` of the 16-bit partition). The engine's pure bf16 / fp16 (16-bit states, no
# master) cannot run there: those rows run as mixed_* (engine/rules.py, the precision rule). The
# recipes whose ZeRO-1/2 is DeepSpeed's: transformers' Trainer / accelerate (hf), LLaMA-Factory and
# axolotl (both launch DeepSpeed JSON configs for ZeRO), the deepspeed recipe; at stage 3,
# DS_ZERO3_RECIPES. The others (torchtune, torchtitan, litgpt: FSDP; unsloth: one GPU) keep the request.
DS_FP32_MASTER_RECIPES = ("hf", "llama-factory", "axolotl", "deepspeed")
# The recipes whose ZeRO-3 is DeepSpeed's too: the deepspeed recipe, and LLaMA-Factory and axolotl, whose
# planner exports name a DeepSpeed JSON at every ZeRO stage (planner/exports.py `_deepspeed_file`: their
# `deepspeed:` key; LLaMA-Factory's full fine-tuning examples run examples/deepspeed/ds_z3_config.json).
# hf's ZeRO-3 is the engine's FSDP full shard (engine/columns.py zero), which can keep pure 16-bit states.
DS_ZERO3_RECIPES = ("deepspeed", "llama-factory", "axolotl")
DS_IPG_BUFFERS = 1
# ZeRO-3's optimizer steps its fp32 partitions in sub groups of at most this many values (config.py
# sub_group_size, default 1e9, line 168), each sub group's gradient converted to fp32 for its step.
DS_SUB_GROUP_SIZE = 1_000_000_000
# The optimizers the planner's DeepSpeed export writes into the config's "optimizer" section
# (planner/exports.py `deepspeed`: AdamW, SGD), which DeepSpeed builds itself from one list of
# parameters (transformers integrations/deepspeed.py deepspeed_optim_sched: DummyOptim(params=
# model_parameters)): one parameter group. Any other is the Trainer's own (create_optimizer), whose
# two groups (weight decay and not: the norms and biases) DeepSpeed flattens separately.
DS_CONFIG_OPTIMIZERS = ("adamw", "adamw_fused", "sgd")

# --- Candidate GPU counts for "GPUs needed" ------------------------------------------------
MAX_GPUS = 1024
