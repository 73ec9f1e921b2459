r"""Serving capacity and speed the way serving engines allocate memory (issue 16).

Whole-column numpy over a frame of serving questions (one row per model x GPU x engine x
setting); a single question is a one-row frame. `serve(requests, models, gpus)` returns, per
row, the memory each engine sets aside (weights, activation/profiling peak, non-torch memory,
the KV cache budget and how many max-model-len requests it holds), the llama.cpp layer split,
host RAM, and a decode/prefill speed model fitted per engine on published runs (llama.cpp by
backend, transformers `generate` with bitsandbytes' dequantization, vLLM, ExLlamaV2, MLC-LLM;
benchmarks/serving_accuracy.py fits on the records marked `fit` in
catalog/serving_measurements.yaml and reports the error on the held-out rest). vLLM's KV budget
follows its version (V0's profile over a whole max_model_len prompt, see VLLM_V1_FROM), a
draft model for speculative decoding is loaded beside the target (DRAFT_ENGINES), and ExLlamaV2
and MLC-LLM have their own layouts (read from their source, see their constants).

Sources read for the memory models (cite these when changing a formula):
- vLLM V1, vllm-project/vllm at commit 0012cf691b7e69423244d2b1405f4b6832156e19,
  vllm/v1/worker/gpu_worker.py `Worker.determine_available_memory`:
      available_kv_cache_memory = total_gpu_memory * gpu_memory_utilization - peak_memory
  where peak_memory = torch's allocated peak during `profile_run()` (weights + the activation
  peak of a dummy forward over max_num_batched_tokens + the sampler over max_num_seqs)
  plus every non-torch allocation (CUDA context, cuBLAS/NCCL buffers): total - free - torch.
  CUDA graphs are captured in `compile_or_warm_up_model()`, after the KV cache is allocated,
  so they come out of the (1 - utilization) headroom, not the KV budget.
  Its start-up log (vllm-project/vllm PR #10511, 2024-12): Meta-Llama-3-8B on an 80 GB H100,
  0.90: can use 71.29 GiB, weights 14.96 GiB, non_torch 1.79 GiB, activation peak 1.26 GiB,
  available_kv_cache_memory 53.29 GiB (catalog/serving_measurements.yaml keeps it).
- llama.cpp (ggml-org/llama.cpp, src/llama-model.cpp `load_tensors`, 2025 versions read via
  the public code index): `-ngl N` puts the last N of the n_layer + 1 layer slots on the GPU,
  the output layer being the last slot (i_gpu_start = max(n_layer + 1 - N, 0)); the input
  (token embedding) stays in host memory ("very little benefit to offloading the input
  layer"); each layer's K/V cache lives with its layer (offload_kqv, the default); llama-server's
  -c is shared by its -np slots. `--fit` /
  `llama-fit-params` (tools/fit-params/README.md) lowers -ngl until the projected device
  memory leaves a margin of 1024 MiB ("cannot fulfill margin of 1024 MiB" in its log).
- Ollama (ollama/ollama at commit 000ce02098f6bfea486601b5cae35ba38f8824fc, llm/memory.go
  `EstimateGPULayers`): its own layer count, see OLLAMA_MINIMUM_MEMORY below; it runs
  llama.cpp, so the rest (KV with its layer, host layers) is llama.cpp's. From 9db4bda (2026-05-29, "runner: Remove
  CGO engines, use llama-server exclusively for GGML models"; llm/llama_server.go at fb307609) that is llama-server
  itself, given -c num_ctx x slots, -np and, where num_gpu is set (the plan's command sets it), -ngl: on several GPUs
  llama.cpp's default layout, whose most loaded GPU the plan is checked against.
- llama.cpp MoE expert offload (ggml-org/llama.cpp common/arg.cpp at commit
  0017d6fb63f9590e791a7562b276148f7bd5b7fc, read via the public code index): `-cmoe/--cpu-moe`
  ("keep all Mixture of Experts (MoE) weights in the CPU") pushes `llm_ffn_exps_cpu_override()`
  and `-ncmoe/--n-cpu-moe N` ("keep the Mixture of Experts (MoE) weights of the first N layers in
  the CPU") pushes `llm_ffn_exps_block_regex(i)` for i = 0..N-1, each bound to
  ggml_backend_cpu_buffer_type(); the regex (common/common.h LLM_FFN_EXPS_REGEX,
  `\.ffn_(up|down|gate|gate_up)_(ch|)exps`, prefixed `blk\.<i>`) matches the routed experts'
  tensors only, so attention, the router (ffn_gate_inp), the shared experts (ffn_*_shexp) and
  the layer's K/V stay with the layer's device. N counts layer indices, dense layers included
  (DeepSeek's first 3 layers have no experts). `-ot ".ffn_.*_exps.=CPU"` is the same by hand.
- SGLang: KV pool = total x mem_fraction_static - weights - non-torch (its default by version:
  by the tensor-parallel size before 0.5.3, by the card's memory after, sglang_mem_fraction); transformers: an
  approximation, not read from source.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.constants as C
from engine.components import eager_prefill_terms, linear_prefill_bytes
from engine.memory import dense_experts_prefill_values
from engine.estimate import REQUIRED_MODEL_COLUMNS, check_tables, estimate  # weights and KV per token, as every surface counts them
from engine.params import (
    ARCH_DEFAULTS,
    LINEAR_ATTENTION_FIELDS,
    MAMBA_FIELDS,
    architecture_counts,
    model_types,
    recurrent_state,
)
from engine.scenarios import did_you_mean
from engine.speed import ALLREDUCE_LATENCY_S, ALLREDUCES_PER_LAYER

LLAMA4_MODEL_TYPES = ("llama4", "llama4_text")  # chunked local attention (attention_chunk_size) in place of a window

ENGINES = ("vllm", "sglang", "llama.cpp", "ollama", "transformers", "exllamav2", "exllamav3", "mlc-llm", "mlx-lm")
GGUF_ENGINES = ("llama.cpp", "ollama")

# --- vLLM ------------------------------------------------------------------------------
# CacheConfig defaults (vllm/config.py): gpu_memory_utilization 0.9, block_size 16 on CUDA.
VLLM_UTILIZATION = 0.9
# Memory other processes already hold on a GPU (`serve --gpu-memory-in-use GIB`): vLLM asks for
# gpu_memory_utilization x the card's total and refuses to start where less is free ("Free memory on device
# (13.91/79.33 GiB) on startup is less than desired GPU memory utilization (0.95, 75.36 GiB). Decrease GPU memory
# utilization or reduce GPU memory used by other processes.", vllm/v1/worker/gpu_worker.py init_device, later
# v1/worker/utils.py request_memory); its KV budget is counted from its own process's memory, so what it gets is
# unchanged. MLC-LLM likewise sizes from the total (config.cc, gpu_memory_utilization of the total). SGLang measures
# the free memory at start (model_runner init_torch_distributed, get_available_gpu_memory) and takes its fraction of
# that; llama.cpp's --fit, Ollama and ExLlamaV2's autosplit place layers in the free memory; transformers runs out
# where the free memory ends.
VLLM_BLOCK_SIZE = 16
# OpenAI-server defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, read via
# the public index): cards with >= 70 GiB that are not A100s get max_num_batched_tokens 8192
# and max_num_seqs 1024; every other card 2048 and 256 ("Setting large
# max_num_batched_tokens for A100 reduces throughput, see PR #17885"). The profile run
# forwards max_num_batched_tokens tokens, so it sets the activation peak.
VLLM_BATCHED_TOKENS_LARGE, VLLM_MAX_NUM_SEQS_LARGE = 8192, 1024
VLLM_BATCHED_TOKENS_SMALL, VLLM_MAX_NUM_SEQS = 2048, 256
VLLM_LARGE_GPU_BYTES = 70 * C.GIB
# The profile run's sampler warm-up over max_num_seqs rows of the vocabulary (gpu_model_runner.py
# _dummy_sampler_run: temperature 0.5, top_p 0.9, top_k = vocab - 1, so top-k/top-p sorts the
# logits; V0's profile_run samples with top_p 0.99 and top_k vocab - 1 too). Its peak is inside
# that sort (vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p: logits.sort(dim=-1), the
# PyTorch-native path): the model's 16-bit logits (2 B, still held by the caller), their fp32 copy
# (4 B), the sort's values (4 B) and int64 indices (8 B), and inside PyTorch's sort for more than 128
# rows of fewer than 10^6 (aten/src/ATen/native/cuda/SortStable.cu segmented_sort_pairs) an int64
# index input (8 B) and CUB's alternate key and value buffers (DeviceSegmentedRadixSort::SortPairs
# without DoubleBuffer: 4 + 8 B): 38 bytes per max_num_seqs x vocab entry. FlashInfer's fused
# sampler (VLLM_USE_FLASHINFER_SAMPLER) holds less: this is the larger of the two paths. Against the
# H100 logs with 1,024 sequences (catalog/serving_measurements.yaml, held out): activation peaks of
# 4.76, 5.56 and 7.38 GiB for vocabularies of 128,256, 151,936 and 201,088 (37.5-38.9 B an entry
# with the forward's leftovers); before this trace the model counted 8 B (two fp32 copies).
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 8 + 4 + 8
# From 0.17.0 (2026-03-07) the same warm-up takes vLLM's Triton top-k/top-p kernel (PR #33538, "[Kernel]
# Triton-based Top-k and Top-p sampler kernels"; vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p:
# `if HAS_TRITON and logits.shape[0] >= 8: return apply_top_k_top_p_triton(logits, k, p)`, read in the 0.17.0 to
# 0.19.x packages), which masks the logits in place without a sort. What is alive at the peak, per max_num_seqs x
# vocab entry: the model's 16-bit logits (2 B, still held by _dummy_sampler_run), their fp32 copy (4 B,
# sampler.py `logits.to(torch.float32)`; temperature divides in place), the softmax's fp32 probs (4 B) and
# random_sample's exponential noise (4 B, `q = torch.empty_like(probs)`): 14 B; and the kernel's cached
# [min(next_pow2(programs), SMs), vocab] fp32 buffer (topk_topp_triton.py `logits.new_empty((size,
# vocab_size))`), taken at an H100's 132 SMs (a card with other SM counts differs by tens of MB). Fewer than 8
# sequences keep the sort. The FlashInfer sampler (opt-in until 0.21, then the default: PR #40376) holds no
# more than this path (its probs beside the two logits copies). Not fitted: vLLM 0.19.0 start-up logs on an
# H100 with 1,024 sequences (catalog/serving_measurements.yaml, held out) print 3.62-3.99 GiB for Gemma's
# 256,000-262,208 vocabularies, 2.21 GiB for Qwen2.5's 152,064 and 1.89 GiB for Llama 3.1's 128,256, and a
# version sweep of Qwen3-14B 5.64 GiB on 0.15 and 0.16 against 2.23 GiB on 0.17 and 0.18.
VLLM_TRITON_SAMPLER_FROM = (0, 17)
SAMPLER_BYTES_PER_LOGIT_TRITON = 2 + 4 + 4 + 4
VLLM_TRITON_SAMPLER_MIN_ROWS = 8
VLLM_TRITON_SAMPLER_BUFFER_ROWS = 132
# vLLM 0.19 at tensor parallel > 1: the profile's non-torch memory grows by ~1.8 GiB per GPU over one GPU's. Its
# gpu_worker.py takes the init snapshot after init_worker_distributed_environment ("NCCL buffers are allocated before
# we measure"), and the TP device group's NCCL communicator is created lazily by its first collective, the logits'
# all-gather inside the profile's sampler warm-up (LogitsProcessor._gather_logits -> all_gather_into_tensor on the
# device group): so its buffers land in "non-torch forward increase memory" and come out of the KV budget (read in
# the 0.19.0 package; the communicator as the cause is an inference from that code, not measured). The figure is
# measured, not derived: 1.82 GiB = the 2.07 GiB the Llama-3.1-8B TP 2 log of the llm-d-planner v0.19.0 sweep prints
# less its TP 1 twin's 0.25 (catalog/serving_measurements.yaml, role fit); the sweep's other TP 2 and TP 4 logs are
# held out (2.07-2.21 GiB). Taken from 0.19 (the first release with such a log here; 0.10's logs print 0.54-0.55
# GiB at TP 2 against 0.13 at TP 1) in place of NCCL_BYTES, on SXM, OAM and superchip cards (NVLink or Infinity Fabric).
VLLM_TP_NON_TORCH_FROM = (0, 19)
# Hybrid linear-attention models (Qwen3-Next, Qwen3.5: Gated DeltaNet layers with a fixed state per request). vLLM
# (from 0.10.2, Qwen3NextForCausalLM) keeps each layer's state in a "mamba" page per request:
# vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.gated_delta_net_state_shape, a conv state
# (kernel - 1, conv_dim / tp) in the model's dtype (conv_dim = 2 x key heads x dk + value heads x dv) and a temporal
# state (value heads / tp, dv, dk) in mamba_ssm_cache_dtype ("auto": the conv's dtype; Qwen3.5's config asks float32
# through mamba_ssm_dtype, which Qwen3_5ForConditionalGenerationConfig.verify_and_update_config copies). The
# attention block size is raised so that an attention page holds a mamba page (HybridAttentionMambaModelConfig
# .verify_and_update_config: B = 16 x ceil(mamba page / (16 x attention bytes a token)), the mamba page padded to B
# tokens' bytes); the layers split into groups of G (the fewer of the two kinds, as for sliding windows), every group
# drawing pages of G layers from one pool; a request takes ceil(max_model_len / B) pages per full-attention group and
# one per linear group (mamba_cache_mode "none": prefix caching off for these models), max concurrency = pages /
# that (kv_cache_utils.py get_max_concurrency_for_kv_cache_config). Checked against a v0.10.2 log of Qwen3-Next
# 80B-A3B at TP 2 ("Setting attention block size to 544 tokens", "GPU KV cache size: 973,760 tokens", "Maximum
# concurrency for 262,144 tokens per request: 14.77x" from "Available KV cache memory: 44.59 GiB") and a v0.19.0 log of
# Qwen3.5-27B (vllm-project/vllm issue #40691: 290,864 tokens, 33.04x at 32,768): tests/test_hybrid_models.py.
# SGLang (python/sglang/srt/configs/mamba_utils.py mamba_cache_per_req, model_runner's handle_max_mamba_cache):
# states of (kernel - 1) x conv_dim / tp in bf16 and value heads / tp x dv x dk in float32 (mamba_ssm_dtype's default)
# per linear layer; of the KV budget, r / (1 + r) goes to the Mamba pool (r = mamba_full_memory_ratio, 0.9), its
# requests = that / a request's states; the rest to the full-attention layers' tokens; running requests at most the
# pool's requests / 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO). transformers keeps one state per sequence beside
# the full layers' K/V (engine/components.py); llama.cpp and Ollama keep a recurrent state per sequence (counted as
# transformers' here, in its share of each layer). ExLlamaV2, ExLlamaV3 and MLC-LLM are refused for these models
# (ExLlamaV3 runs them, cache/recurrent.py, but its recurrent state per request is not modelled here).
# Mamba2 hybrids (Granite 4.0-H, Nemotron-H, Bamba) the same way, their state per layer from
# MambaStateShapeCalculator.mamba2_state_shape (a (kernel - 1) x conv_dim / tp conv state, conv_dim = heads x head_dim +
# 2 x groups x state with the groups raised to tp where tp does not divide them, and a heads / tp x head_dim x state
# temporal state; SGLang's Mamba2StateShape.create alike): engine/params.py recurrent_state.
VLLM_LINEAR_ATTENTION_FROM = (0, 10)
VLLM_MAMBA_ALIGN_TOKENS = 16
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
SGLANG_MAMBA_RUNNING_RATIO = 3
HYBRID_LINEAR_ENGINES = ("vllm", "sglang", "transformers", "llama.cpp", "ollama")
# vLLM keeps these models' temporal state in float32: Qwen3.5's config's mamba_ssm_dtype; Nemotron-H's
# NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (vllm model_executor/models/config.py,
# DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32": "Only `float32` is known to have no accuracy issues by default"). The other
# Mamba2 hybrids (Granite 4.0-H, Bamba) keep "auto", the model's dtype (mamba_utils.py
# MambaStateDtypeCalculator._mamba_state_dtype, commit 02d7108)
LINEAR_SSM_FP32_MODEL_TYPES = ("qwen3_5", "qwen3_5_moe", "nemotron_h")
VLLM_TP_NON_TORCH_BYTES = 1.82 * C.GIB
# vLLM by version (`serve --engine-version X.Y`; default: the current V1 defaults above).
# - V1 became the default engine in v0.8.0 (release notes: "We have now enabled V1 engine by
#   default (#13726)"; VLLM_USE_V1=0 brought V0 back until v0.11.0 removed it). Before 0.8 the V0
#   worker (vllm/worker/worker.py `Worker.determine_num_available_blocks`) profiled the same way:
#   num_gpu_blocks = (total x gpu_memory_utilization - peak) // block bytes, peak = the profile
#   run's forward over max_num_batched_tokens (V0's model_runner.profile_run: max_num_seqs dummy
#   sequences sharing max_num_batched_tokens tokens) + weights + non-torch.
# - V0 without chunked prefill: vllm/config.py `SchedulerConfig.__post_init__` (v0.6.x, read via
#   the public code index): max_num_batched_tokens = max(max_model_len, 2048) ("If max_model_len is
#   too short, use 2048 as the default value"), so the profile forwards a whole max_model_len
#   prompt: 32,768 tokens at --max-model-len 32768.
# - V0 turned chunked prefill on by itself only above 32K tokens of max_model_len
#   (vllm/engine/arg_utils.py: "Chunked prefill is enabled by default for models with
#   max_model_len > 32K", skipped with a draft model, LoRA, prefix caching or sliding window), and
#   then logged "Chunked prefill is enabled with max_num_batched_tokens=512" (start-up logs of
#   v0.6.4.dev26 (2024-10) and of 0.6.x/0.7.x builds (2024-12, 2025-02) in the public index).
# - V1 always chunks prefills. 0.8.x: 8192 tokens / 1024 sequences on H100/H200 by device name,
#   2048 / 256 elsewhere (arg_utils.py `_set_default_args_v1`, PR #12369 "[V1] Increase default
#   batch size for H100/H200", 2025-01-23); then by memory (>= 70 GiB, PR #17073, 2025-04-23) less
#   the A100 (PR #17885, 2025-05-09): the VLLM_LARGE_GPU_BYTES rule above, taken from 0.9 on.
VLLM_V1_FROM = (0, 8)
VLLM_MEMORY_DEFAULTS_FROM = (0, 9)
VLLM_OLDEST_MODELLED = (0, 6)  # before 0.6 the defaults and the profiler differ again (not read)
# From 0.21 on, vLLM also takes its CUDA graphs' estimated memory out of the KV budget (start-up logs of
# 2026: "CUDA graph memory profiling is enabled (default since v0.21.0) ... To disable, set
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0", vllm-project/vllm issue #50722 and LMCache/LMCache issue
# #3430; before 0.21 the flag was an opt-in). The estimate comes from capturing the graphs during the
# profile; published logs give 0.07 to 2.35 GiB ("Estimated CUDA graph memory: ... GiB total": 0.07 and
# 2.35 GiB for one small model without and with an FP8 KV cache, 0.52 GiB for Qwen3-8B on a 24 GB card,
# 2.22 GiB for Qwen3.5-35B-A3B at TP 4 on H100s), with no relation to the model's size that these logs
# show, so the engine does not subtract it: the serve output says the KV cache can be that much smaller.
# vLLM's hybrid KV cache manager (V1, PR #17996 of 2025-06, on by default; taken from 0.10, the first release
# after it that is certain to hold it): a sliding-window layer keeps only its window, a Llama 4 chunked-local
# layer its chunk. vllm/v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`: the layers of each
# attention type are split into groups of G layers (G = the fewer layers of a type, or the more where
# more < 1.5 x fewer; the last group of a type padded), every group's block is 16 tokens x G layers, and all
# groups draw blocks from one pool (num_blocks = memory // (page x G)); a request at max_model_len takes
# cdiv(max_model_len, 16) blocks per full-attention group and, per sliding-window group,
# cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), 16) + 1 (kv_cache_interface.py
# SlidingWindowSpec.max_admission_blocks_per_request: "+1 ... the sliding window may not start from the
# beginning of the block"), per chunked-local group cdiv(min(chunk + max_num_batched_tokens, max_model_len), 16)
# (ChunkedLocalAttentionSpec); max concurrency = num_blocks / those blocks (get_max_concurrency_for_kv_cache_config).
# Not with a draft model here (its layers join the groups; the target's layers are then counted at full length).
VLLM_HYBRID_KV_FROM = (0, 10)
# `--kv-cache-memory-bytes N` (vLLM's CacheConfig.kv_cache_memory_bytes): the KV cache is N bytes per GPU and the
# profile's accounting is skipped (gpu_worker.py determine_available_memory: "reserved N GiB memory for KV Cache as
# specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the
# gpu_memory_utilization config"); the profile forward still runs, so the plan fits where the weights, that
# activation peak, the non-torch memory and the N bytes fit in what is free, and one request's KV fits in N.
# SGLang's hybrid SWA pool (gpt-oss; Gemma 2/3 have it off, server_args.py "Disable hybrid SWA memory for
# {model_arch} as it is not yet supported"): the full-attention layers get F tokens and the sliding-window layers
# swa_full_tokens_ratio x F (default 0.8), F = available / (full bytes a token x full layers + 0.8 x window bytes a
# token x window layers) (mem_cache SWA pool sizing, calculate_pool_sizes); a request of max_model_len takes that
# many of the F, its window layers far fewer of theirs: max concurrency = F / max_model_len. Taken with the memory
# fraction of 0.5.3 on (SGLANG_HEURISTIC_FROM); earlier versions count every layer at full length.
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
SGLANG_HYBRID_SWA_MODEL_TYPES = ("gpt_oss",)
VLLM_CUDAGRAPH_PROFILE_FROM = (0, 21)
VLLM_CUDAGRAPH_LOGGED_GIB = (0.07, 2.35)
VLLM_V0_MIN_BATCHED_TOKENS = 2048
VLLM_V0_CHUNKED_ABOVE = 32768
VLLM_V0_CHUNKED_TOKENS = 512
VLLM_V0_MAX_NUM_SEQS = 256  # V0's EngineArgs.max_num_seqs default
# A --max-model-len beyond the model's own context (the catalog's max_context: max_position_embeddings): vLLM refuses
# to start ("User-specified max_model_len (N) is greater than the derived max_model_len (max_position_embeddings=M or
# model_max_length=None in model's config.json). ... To allow overriding this maximum, set the env var
# VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", ModelConfig's _get_and_verify_max_len, vllm/config.py, later vllm/config/model.py;
# the message as published start-up logs print it), and so does SGLang ("User-specified context_length (N) is greater
# than the derived context_length (M) ... set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
# python/sglang/srt/configs/model_config.py). `serve` refuses such a length unless --allow-long-context (as `check` and
# `estimate` refuse such a --seq, planner/cli.py), and then writes the variable before the engine's command.
LONG_CONTEXT_ENV = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}


def long_context_env(engine, max_model_len, max_context) -> np.ndarray:
    """Per row, the variable its engine needs to start at a max_model_len beyond the model's context
    (LONG_CONTEXT_ENV), else '': the printed command (command_lines) and `serve --export` (planner/exports.py)
    both write it before the engine's command."""
    length = pd.to_numeric(pd.Series(max_model_len), errors="coerce").to_numpy(float)
    context = pd.to_numeric(pd.Series(max_context), errors="coerce").to_numpy(float)
    beyond = (context > 0) & (length > context)  # (an unknown context, NaN, is never beyond)
    env = pd.Series(engine, dtype=object).map(LONG_CONTEXT_ENV).fillna("").to_numpy(object)
    return np.where(beyond, env, "")
# --- SGLang ----------------------------------------------------------------------------
# mem_fraction_static: the share of the card for weights + KV pool; activations and CUDA
# graphs live in the rest. The KV pool is what the fraction leaves after the weights
# (model_runner.py profile_max_num_token: rest = free after loading - total x (1 - fraction)).
# Its default, by version:
# - before 0.5.3, by the tensor-parallel size (python/sglang/srt/server_args.py
#   `ServerArgs.__post_init__` of the 0.4 series, read via the public index; a 2025-03 start-up log
#   of QwQ-32B at TP 4 on L4s prints mem_fraction_static=0.85): tp >= 16: 0.79, >= 8: 0.81,
#   >= 4: 0.85, >= 2: 0.87, else 0.88. (0.4.7-0.5.2 ran an intermediate heuristic, PR #7054 of
#   2025-06-10, not read: treated as this table.)
# - from 0.5.3, by the card's memory (PR #10975, 2025-09-27, and #11076, 2025-09-30: v0.5.2 was
#   released before both, so 0.5.3 is the first release with them): `handle_gpu_memory_settings`
#   (server_args.py, later python/sglang/srt/arg_groups) picks the chunked-prefill size and the
#   decode CUDA graphs' largest batch from nvidia-smi's memory.total in MiB, then
#   reserved = 512 + max(chunk, 2048) x 1.5 + tp x pp / 8 x 1024 + decode graphs' max_bs x 2
#          + 8 per prefill CUDA graph size captured (MLA models: 1.5 GiB instead)   [MiB]
#   at least 10 GiB on cards over 60 GiB, + 6 GiB for a STANDALONE draft model, and
#   fraction = round((memory - reserved) / memory, 3), times the multimodal factor below.
#   The tiers and the prefill graphs are the newest source read (arg_groups, 2026: prefill graphs
#   captured by default, 20-35 GiB cards at a 4,096-token chunk and 48 / 160 decode graphs);
#   releases between kept a smaller reserve (2,048-token chunk and 24 / 80 graphs on 20-35 GiB
#   cards; prefill graphs only when asked: a 2026-02 SGLang docs build on an H100 prints
#   mem_fraction_static=0.835 with enable_piecewise_cuda_graph=False, tests/test_serving_engines.py),
#   so this reserve is the larger one: a KV pool no larger than those releases give.
SGLANG_MEM_FRACTION = 0.88
SGLANG_MEM_FRACTION_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87))
SGLANG_HEURISTIC_FROM = (0, 5, 3)
SGLANG_OLDEST_MODELLED = (0, 4, 0)
# (below this many MiB: chunked-prefill tokens, decode graphs' max batch at tp < 4 and at tp >= 4)
SGLANG_TIERS_MIB = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                    (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (np.inf, 16384, 512, 512))
SGLANG_RESERVED_BASE_MIB = 512          # "constant meta data (e.g., from attention backend)"
SGLANG_RESERVED_PER_CHUNK_TOKEN_MIB = 1.5
SGLANG_RESERVED_PER_DECODE_GRAPH_BS_MIB = 2
SGLANG_RESERVED_PER_PREFILL_GRAPH_MIB = 8
SGLANG_RESERVED_MLA_PREFILL_GRAPHS_MIB = 1536
SGLANG_RESERVED_FLOOR_MIB = 10 * 1024   # on cards over 60 GiB
SGLANG_RESERVED_STANDALONE_DRAFT_MIB = 6 * 1024
SGLANG_MLA_PREFILL_GRAPH_MAX = 2048     # MLA: prefill graphs up to 2,048 tokens
SGLANG_LLAMA2_PREFILL_GRAPH_MAX = 4096  # "For Llama2 series models, max_bs is limited to 4096"
# generate_prefill_cuda_graph_batch_sizes: the token counts captured, up to the prefill graphs' max
SGLANG_PREFILL_GRAPH_SIZES = np.array(list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                                      + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
                                      + list(range(4608, 1 << 20, 512)))
# adjust_mem_fraction_for_vlm: x 0.95 x clamp(1 - 0.1 x (ratio - 1), 0.8, 1.05), ratio = the vision
# tower's layers x width^2 over ViT-L/14's 24 x 1024^2. The catalog keeps the tower's parameters,
# not its layers and width: layers x width^2 ~ parameters / 12 (a transformer layer with a 4x MLP has
# 12 width^2 weights; SigLIP-so400m's 27 x 1152^2 is 0.85 of its count / 12).
SGLANG_VLM_BASE = 0.95
# before 0.5.3: a multimodal model's fraction x 0.95 (model_runner.py of the 0.4 series, "Automatically reduce
# --mem-fraction-static to ... because this is a multimodal model"; a Gemma 3 4B log of 2025-03 on an H200 gives
# 0.88 x 0.95, catalog/serving_measurements.yaml; some later 0.4 builds used 0.90)
SGLANG_VLM_OLD = 0.95
SGLANG_VLM_BASELINE = 24 * 1024 ** 2 * 12  # ViT-L/14 in parameters, by the same 12 width^2 a layer


def sglang_version(text) -> np.ndarray:
    """(major, minor, patch) of each SGLang `engine_version` as one comparable number ("0.5.3",
    "v0.4.9.post2" -> 0.5.3, 0.4.9; "0.5" -> 0.5.0); NaN where the text is empty or not a version."""
    parts = pd.Series(text, dtype=object).fillna("").astype(str).str.strip().str.extract(
        r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+\w-]*)$")
    major, minor = (pd.to_numeric(parts[i], errors="coerce").to_numpy(float) for i in (0, 1))
    patch = pd.to_numeric(parts[2], errors="coerce").fillna(0).to_numpy(float)
    return _sglang_key(major, minor, patch)


def _sglang_key(major, minor, patch=0) -> np.ndarray:
    return np.asarray(major, float) * 1e6 + np.asarray(minor, float) * 1e3 + np.asarray(patch, float)


def sglang_reserved_mib(memory_mib, tp, mla=False, llama2=False, standalone_draft=False,
                        prefill_graphs=True) -> np.ndarray:
    """What SGLang (0.5.3 on) keeps outside mem_fraction_static, in MiB: activations, CUDA graphs and
    slack (see the SGLang block above). prefill_graphs=False is the releases that captured none."""
    memory_mib, tp = np.asarray(memory_mib, float), np.asarray(tp, float)
    bounds = np.array([t[0] for t in SGLANG_TIERS_MIB])
    tier = np.minimum(np.searchsorted(bounds, memory_mib, side="right"), len(bounds) - 1)
    chunk = np.array([t[1] for t in SGLANG_TIERS_MIB], float)[tier]
    decode_bs = np.where(tp < 4, np.array([t[2] for t in SGLANG_TIERS_MIB], float)[tier],
                         np.array([t[3] for t in SGLANG_TIERS_MIB], float)[tier])
    mla = np.asarray(mla, bool)
    prefill_max = np.where(mla, SGLANG_MLA_PREFILL_GRAPH_MAX, chunk)
    prefill_max = np.where(np.asarray(llama2, bool), np.minimum(prefill_max, SGLANG_LLAMA2_PREFILL_GRAPH_MAX), prefill_max)
    n_prefill = np.searchsorted(SGLANG_PREFILL_GRAPH_SIZES, prefill_max, side="right")
    prefill = np.where(mla, SGLANG_RESERVED_MLA_PREFILL_GRAPHS_MIB, n_prefill * SGLANG_RESERVED_PER_PREFILL_GRAPH_MIB)
    reserved = (SGLANG_RESERVED_BASE_MIB + np.maximum(chunk, 2048) * SGLANG_RESERVED_PER_CHUNK_TOKEN_MIB + tp / 8 * 1024
                + decode_bs * SGLANG_RESERVED_PER_DECODE_GRAPH_BS_MIB + np.where(prefill_graphs, prefill, 0.0))
    reserved = np.where(memory_mib > 60 * 1024, np.maximum(reserved, SGLANG_RESERVED_FLOOR_MIB), reserved)
    return reserved + np.where(np.asarray(standalone_draft, bool), SGLANG_RESERVED_STANDALONE_DRAFT_MIB, 0.0)


def sglang_vlm_factor(vision_params) -> np.ndarray:
    """adjust_mem_fraction_for_vlm's factor (1 where the model has no vision tower)."""
    vision_params = np.asarray(vision_params, float)
    ratio = vision_params / SGLANG_VLM_BASELINE
    factor = SGLANG_VLM_BASE * np.clip(1.0 - 0.1 * (ratio - 1.0), 0.8, 1.05)
    return np.where(vision_params > 0, factor, 1.0)


def sglang_by_memory(version) -> np.ndarray:
    """Whether each SGLang version sets its default fraction by the card's memory (0.5.3 on, and the current
    release where none is given) rather than by the tensor-parallel size."""
    return ~sglang_before(version, SGLANG_HEURISTIC_FROM)


def sglang_mem_fraction(memory_mib, tp, version=None, mla=False, llama2=False, standalone_draft=False,
                        vision_params=0.0, reserved_mib=None) -> np.ndarray:
    """SGLang's default mem_fraction_static for each row: by the tensor-parallel size before 0.5.3,
    else (memory - reserved) / memory rounded to 3 places, times the multimodal factor. reserved_mib: the
    reserve where the caller has it (sglang_reserved_mib of the same rows), else computed here."""
    tp = np.asarray(tp, float)
    by_memory = np.broadcast_to(sglang_by_memory([""] if version is None else version), tp.shape)
    by_tp = np.select([tp >= k for k, _ in SGLANG_MEM_FRACTION_BY_TP], [f for _, f in SGLANG_MEM_FRACTION_BY_TP],
                      SGLANG_MEM_FRACTION)
    by_tp = by_tp * np.where(np.asarray(vision_params, float) > 0, SGLANG_VLM_OLD, 1.0)
    memory_mib = np.asarray(memory_mib, float)
    if reserved_mib is None:
        reserved_mib = sglang_reserved_mib(memory_mib, tp, mla, llama2, standalone_draft)
    # (a reserve larger than the card, e.g. a STANDALONE draft's 6 GiB on an 8 GiB card, gives SGLang a negative
    # fraction, and it stops at start: model_runner.py profile_max_num_token finds no room, "Not enough memory". At
    # most 0 here: the same verdict, nothing for the weights and the KV pool, and no negative bytes.)
    from_memory = np.maximum(np.round((memory_mib - reserved_mib) / memory_mib, 3), 0.0) * sglang_vlm_factor(vision_params)
    return np.where(by_memory, from_memory, by_tp)


# --- llama.cpp / Ollama ----------------------------------------------------------------
# llama-fit-params' default margin (tools/fit-params README log), kept free on EACH device: common/common.h
# `std::vector<size_t> fit_params_target = std::vector<size_t>(llama_max_devices(), 1024 * 1024*1024)` ("margin per
# device in bytes for fitting parameters to free memory", ggml-org/llama.cpp @001d906, via the public code index), read
# by common/fit.cpp common_params_fit_impl as margins[id], one per device (LLAMA_FIT_MIN_CTX's note): on N GPUs, N GiB
FIT_MARGIN_BYTES = 1024 * C.MIB
LLAMA_UBATCH = C.LLAMA_UBATCH  # llama.cpp's default -ub (n_ubatch), common/common.h
# llama.cpp's KV cache types (-ctk / -ctv, common/arg.cpp "--cache-type-k TYPE ... (default: f16)"; f32, f16, bf16,
# q8_0, q4_0, ...) for each kv_precision: llama.cpp has no fp8 cache, so fp8 is its 8-bit one, q8_0; auto and fp16 are
# its default f16. A quantized type is stored in ggml blocks of 32 values with one fp16 scale each
# (ggml/src/ggml-common.h: block_q8_0 = ggml_half d + int8_t qs[QK8_0], static_assert(sizeof(block_q8_0) ==
# sizeof(ggml_half) + QK8_0); block_q4_0 = ggml_half d + uint8_t qs[QK4_0 / 2]; QK8_0 = QK4_0 = 32; ggml/src/ggml.c
# type_traits: blck_size QK8_0 / QK4_0, type_size sizeof(block_q8_0) / sizeof(block_q4_0)), and
# src/llama-kv-cache.cpp makes each layer's K and V tensors of that type (ggml_row_size: values / 32 x the block's
# bytes), so a value takes 34/32 or 18/32 bytes, not 1 or 0.5 (ExLlamaV2's Q8/Q4 cache likewise, EXL_CACHE_BYTES).
# Ollama runs llama.cpp's cache: OLLAMA_KV_CACHE_TYPE (envconfig/config.go KvCacheType: f16, q8_0, q4_0), which it
# applies only with OLLAMA_FLASH_ATTENTION=1, as llama.cpp quantizes its V cache only with flash attention (-fa on;
# src/llama-context.cpp: "V cache quantization requires flash_attn").
LLAMA_KV_TYPES = {"fp8": "q8_0", "int8": "q8_0", "int4": "q4_0", "bf16": "bf16", "fp32": "f32"}
GGML_KV_BLOCK_BYTES = {"q8_0": (2 + 32) / 32, "q4_0": (2 + 32 / 2) / 32}  # bytes per K or V value
OLLAMA_KV_TYPES = {"fp8": "q8_0", "int8": "q8_0", "int4": "q4_0"}
# the name `serve` gives the plan's GGUF in Ollama (`ollama create <model>-planned`, the command and the export alike)
OLLAMA_CREATED_SUFFIX = "-planned"
# Ollama's estimate (ollama/ollama llm/memory.go `EstimateGPULayers`, commit 000ce020 as read
# via the public index): a layer = blk.0's bytes + its share of the fp16 KV cache; the GPU is
# charged its minimum memory (gpu/gpu.go: cudaMinimumMemory = rocmMinimumMemory = 457 MiB)
# plus one extra layer as a buffer; layers are placed while free > allocated + graph + layer;
# the output layer goes last, if it fits.
OLLAMA_MINIMUM_MEMORY = 457 * C.MIB
# host memory bandwidth reached by llama.cpp's CPU matmuls for the layers (and, with
# --n-cpu-moe/--cpu-moe, the routed experts) left in RAM: dual-channel DDR5-5600 is 89.6 GB/s
# theoretical (2 channels x 8 B x 5,600 MT/s); about 60% is reached in decode (assumption, not
# fitted). A setting: `serve --host-bandwidth-gbps` (a server with 8-12 DDR5 channels reaches
# several times more).
HOST_BANDWIDTH_GBPS = 55.0
# --cpu-moe-layers special values (llama.cpp counts layers from 0; "all" is its --cpu-moe)
CPU_MOE_AUTO, CPU_MOE_ALL = -1, -2
# PCIe: llama.cpp copies host-resident weights to the GPU for large prompt batches; half the
# catalog's bidirectional figure, one direction, at 80% (assumption).
PCIE_EFFICIENCY = 0.8

# --- Speculative decoding with a draft model (`serve --draft-model ID`) -------------------
# vLLM: the draft's weights are loaded beside the target's on each GPU; SpeculativeConfig's
# draft_tensor_parallel_size "Can only be 1 or the same as the target" (default: the target's).
# Its KV cache comes out of the same budget: V0's spec_decode_worker.py
# `split_num_cache_blocks_evenly` gives both models the same number of blocks, num_gpu_blocks x
# target block bytes / (target + draft block bytes), so a token costs the target's KV plus the
# draft's; its `_vocab_size` asserts both vocabularies are the same size.
# SGLang (--speculative-algorithm STANDALONE --speculative-draft-model-path, server_args.py): the
# draft runs with the target's TP and keeps a KV pool of as many tokens as the target's
# (python/sglang/srt/model_executor/model_runner.py: draft_runner_cache_size = the target's
# max_total_num_tokens + max_num_reqs x (speculative_num_steps x eagle_topk + num_draft_tokens)
# + 100, read via the public code index); modelled as vLLM's shared budget, the draft's weights and
# per-token KV both inside mem_fraction_static (the headroom terms are left out: an approximation).
# llama.cpp (llama-server -md/--model-draft, -ngld, -cd): tools/server/server.cpp loads the
# draft with n_ctx = -cd, or when 0 (the default) the target's context per slot
# (n_ctx / n_parallel), n_parallel = 1, one draft context per slot, its K/V in f16 ("force F16 KV
# cache for the draft model", later -ctkd/-ctvd defaulting to f16); common/speculative.cpp
# refuses a draft whose vocabulary type differs or whose size differs by more than
# SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128 tokens (and compares the token texts from id 5 on).
DRAFT_ENGINES = ("vllm", "sglang", "llama.cpp")
# llama.cpp's draft context: -cd / --ctx-size-draft is gone from common/arg.cpp (llama.cpp @0c1e57098, vendored in
# llama-cpp-python 0.3.36: the draft options are --spec-draft-*, -md, -ngld, no context size), and the draft's context
# is the target's (common/speculative.cpp: cparams.n_ctx = llama_n_ctx(ctx_tgt)); llama-server stops at an unknown
# argument, so the command carries no -cd and a --draft-context other than the target's per-slot length is refused.
DRAFT_CONTEXT_NOTE = ("current llama.cpp sizes the draft's context as the target's (common/speculative.cpp "
                      "cparams.n_ctx = llama_n_ctx(ctx_tgt); -cd / --ctx-size-draft removed from common/arg.cpp)")
LLAMA_DRAFT_VOCAB_DIFFERENCE = 128
# Tokenizer families of the catalog's model families (a draft of another family cannot share
# the target's tokens): Llama 3/3.1/3.2/3.3 share one 128,256-token tokenizer; Llama 1 and 2
# one 32,000-token SentencePiece model; Qwen2/2.5/3 one BPE (151,643 tokens, padded to 151,936
# or 152,064); Gemma and Gemma 2 one 256,000-token SentencePiece model (Hugging Face model cards
# and tokenizer files of each family); the catalog's other families are their own group. A family
# not listed (a model from a file or the Hub) is checked by its vocabulary size only.
TOKENIZER_GROUP = {
    "llama-3": "llama-3", "llama-3.1": "llama-3", "llama-3.2": "llama-3", "llama-3.3": "llama-3",
    "llama-1": "llama-2", "llama-2": "llama-2", "qwen2": "qwen2", "qwen2.5": "qwen2", "qwen3": "qwen2",
    "gemma": "gemma", "gemma-2": "gemma", "mistral": "mistral", "mixtral": "mistral",
    "gemma-3": "gemma-3", "gpt-oss": "gpt-oss", "deepseek-v3": "deepseek-v3", "llama-4": "llama-4",
}

# --- The 2026 checkpoint formats by engine (issue 27; engine/constants.py LINEAR_BITS) -------
# fp8 (e4m3 weights, per-tensor or 128 x 128 block scales): vLLM runs it natively (W8A8) on
# compute capability >= 8.9 and weight-only (W8A16, FP8 Marlin, PR #5975) from 7.5 on (vLLM docs
# features/quantization/fp8.md, v0.32.0, as quoted in catalog/gpus.yaml fp8-weights-need-turing);
# SGLang (--quantization fp8) and transformers (FineGrainedFP8) load the same checkpoints.
# mxfp4 (gpt-oss's experts): vLLM and SGLang; vLLM's Marlin MXFP4 MoE kernel from Ampere
# (vllm-project/recipes OpenAI/GPT-OSS.md: "GPT-OSS works on Ampere devices by default").
# nvfp4: vLLM, natively on Blackwell's FP4 tensor cores and weight-only through Marlin from
# Ampere ("Weight-only FP4 compression will be used leveraging the Marlin kernel", vLLM 0.13 log
# quoted in catalog/gpus.yaml fp4-weight-only-before-blackwell). Architectures each format cannot
# run on (catalog/gpus.yaml's compatibility rules fp8-weights-need-turing, fp4-needs-ampere);
# Apple GPUs run none of these engines' CUDA/ROCm kernels.
# transformers loads gpt-oss's mxfp4 checkpoints too (quantizers/quantizer_mxfp4.py Mxfp4HfQuantizer: the routed
# experts stay MXFP4 in Mxfp4GptOssExperts, as `mxfp4` counts them) from compute capability 7.5 on, Turing
# included, with Triton >= 3.4 and the `kernels` package (docs/source/en/quantization/mxfp4.md: "NVIDIA GPU
# Compute Capability >= 7.5"); below that, or without them, it dequantizes the checkpoint to bf16 instead,
# which is `--precision bf16` here (the refusal says so).
FORMAT_ENGINES = {"fp8": ("vllm", "sglang", "transformers"), "mxfp4": ("vllm", "sglang", "transformers"),
                  "nvfp4": ("vllm",)}
FORMAT_REFUSED_ARCHITECTURES = {"fp8": ("volta",), "mxfp4": ("volta", "turing"), "nvfp4": ("volta", "turing")}
# transformers' FP8 (quantizers/quantizer_finegrained_fp8.py validate_environment) keeps an FP8 checkpoint in 8 bits only
# from compute capability 8.9 (Ada, Hopper, Blackwell): below it, transformers' main of 2026 warns "FP8 quantized models
# is only supported on GPUs with compute capability >= 8.9 (e.g 4090/H100) ... We will default to dequantizing the model
# to bf16" and sets quantization_config.dequantize (twice the weights planned at fp8), and releases before it raised
# ValueError with the same sentence (huggingface/transformers 0095b97); so an A100, RTX 3090 or A10 is refused for it,
# as Volta and Turing (vLLM and SGLang keep 8 bits there, weight-only through FP8 Marlin).
FORMAT_REFUSED_BY_ENGINE = {("mxfp4", "transformers"): ("volta",),  # (format, engine): its own, where it differs
                            ("fp8", "transformers"): ("volta", "turing", "ampere")}
FORMAT_INSTEAD = {("mxfp4", "transformers"): "; transformers dequantizes mxfp4 to bf16 there: ask --precision bf16",
                  ("fp8", "transformers"): " (compute capability 8.9); below it transformers dequantizes FP8 to bf16 "
                  "(quantizer_finegrained_fp8.py): ask --precision bf16, or --engine vllm, which keeps 8 bits"}
FORMAT_OWN_SOURCE = {("fp8", "transformers")}  # refusals whose FORMAT_INSTEAD names their source, not the catalog's rules
# bf16 weights under vLLM need compute capability 8.0: its CUDA platform refuses them below (vllm/platforms/cuda.py
# CudaPlatform.check_if_supports_dtype: "Bfloat16 is only supported on GPUs with compute capability of at least 8.0 ...
# You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half"), and the plan's
# command names its dtype (--dtype bfloat16, TORCH_DTYPE). Its 'auto' on such a card picks float16 (vllm/config/model.py
# _resolve_auto_dtype), which is --precision fp16 here: the same bytes.
NO_BF16_ARCHITECTURES = ("volta", "turing")  # catalog/gpus.yaml rule bf16-needs-ampere
BF16_REFUSING_ENGINES = ("vllm",)

# --- ExLlamaV2 (turboderp-org/exllamav2 at commit da07fac, read via fetch) -------------------
# Weights: EXL2 files at their average bits per weight (`--precision exl2-4.0`; convert.md "-b: target
# average number of bits per weight") with the lm_head at 6 bits ("-hb ... Default is 6"), or GPTQ
# 4-bit (`--precision int4`) with a 16-bit head. model.py `load_autosplit_gen`: "Embedding layer on
# CPU" (the embedding stays in host RAM, fp16); the rest is placed module by module while forwarding
# a max_input_len-token state (config.py: max_input_len 2048), holding reserve_vram (default 192 MiB
# on the first device) and a minimum_reserve_vram of 256 MiB free while it loads. Cache (cache.py):
# K and V of batch x max_seq_len x kv_heads x head_dim per layer, fp16 (ExLlamaV2Cache), or Q8/Q6/Q4
# with an fp16 scale per 32 values (ExLlamaV2Cache_Q4: 4 bits + 16/32). Scratch (the largest module's
# scratch_space_fixed): the MLP's state, two intermediate buffers of max_input_len x max(h, ffn) at 2
# bytes and a dequantization buffer of min(in x out, max_dq_size = 512 Mi) values at 2 bytes; the head
# forwards max_input_len tokens at load (logits at 2 bytes a vocabulary entry, an approximation).
EXL2_HEAD_BITS = 6.0
EXL_MAX_INPUT_LEN = 2048
EXL_MAX_DQ_SIZE = 512 * 2**20
EXL_RESERVE_BYTES = 192 * C.MIB + 256 * C.MIB
EXL_CACHE_BYTES = {"auto": 2.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0 + 2 / 32, "int8": 1.0 + 2 / 32,
                   "int4": 0.5 + 2 / 32}  # per K or V element: fp16, Q8 (8 bits + fp16/32), Q4
# the runner's flag for a quantized cache (examples/chat.py -cq8 / -cq4: ExLlamaV2Cache_Q8 / _Q4)
EXL_CACHE_FLAGS = {"fp8": "-cq8", "int8": "-cq8", "int4": "-cq4"}
EXL_BITS_RANGE = (2.0, 8.0)  # convert.md's targets run from 2 to 8 bits per weight
# The GPUs it runs on: its kernels are a CUDA extension (setup.py: `cpp_extension.CUDAExtension("exllamav2_ext", ...)`
# over exllamav2_ext/cuda/*.cu, with `-DHIPBLAS_USE_HIP_HALF` where torch is a ROCm build, `torch_version.hip`;
# exllamav2/ext.py builds the same sources at first use; README "How to": "you'll need the CUDA Toolkit"), so NVIDIA
# (CUDA) and AMD (ROCm, HIP) GPUs; an Apple GPU (Metal) or an Intel Gaudi has neither, and serve() refuses them.
EXL_VENDORS = ("nvidia", "amd")


def exl2_bits(precision) -> np.ndarray:
    """Bits per weight of `exl2-B` precisions (NaN for any other)."""
    p = pd.Series(precision, dtype=object).astype(str).str.extract(r"^exl2-(\d+(?:\.\d+)?)$", expand=False)
    return pd.to_numeric(p, errors="coerce").to_numpy(float)


# --- ExLlamaV3 (turboderp-org/exllamav3 at commit 4f8ad01, v1.4.1 of 2026-08-08, read via fetch) ------------------
# Weights: EXL3 files (QTIP-based trellis codes, doc/exl3.md) at their average bits per weight (`--precision exl3-4.0`;
# doc/convert.md "-b / --bits: Target average number of bits per weight"; exllamav3/conversion/convert_model.py:138
# refuses `args.bits > 8 or args.bits < 1`: 1 to 8, fractional) with the lm_head at 6 bits (doc/convert.md "-hb /
# --head_bits ... default is 6"; convert_model.py:176 ("head_bits", False, 6)). No GPTQ: its linear layers are EXL3
# or unquantized (exllamav3/modules/quant/exl3.py, fp16.py). The embedding stays in host RAM in 16 bits
# (modules/embedding.py: caps "prefer_cpu": True, get_tensor(..., float2half=True); model/model_ls.py
# _load_autosplit loads a prefer_cpu module on torch.device("cpu"); doc/exl3.md: "the embedding layer which for most
# inference tasks can be relegated to system RAM").
EXL3_HEAD_BITS = 6.0
EXL3_BITS_RANGE = (1.0, 8.0)
# Autosplit (model/model.py load_gen, the loader examples/chat.py's model_init.init calls with no -gs): every device
# keeps reserve_per_device free, default `[0.5] * num_devices` GB taken as `int(x * 1024**3)` bytes (512 MiB on each
# GPU, where ExLlamaV2 held 192 + 256 MiB on the first); modules are placed in turn while a max_chunk_size-token state
# (default 2048, as generator/generator.py:30's Generator max_chunk_size) is forwarded through them, the output layer
# over max_output_size = 32 tokens only ("Narrow state to max_output_size for logit output layer").
EXL3_RESERVE_BYTES = 512 * C.MIB
EXL3_MAX_CHUNK = 2048
EXL3_MAX_OUTPUT = 32
# Scratch: a prefill chunk of more than AUTO_RECONSTRUCT_THRESHOLD = 144 rows (modules/quant/exl3.py:10, forward)
# reconstructs each EXL3 linear layer to an fp16 weight of in_features x min(out_features, MAX_RECONSTRUCT_SLICE_N =
# 32768) (exl3.py:11, reconstruct_hgemm) before its GEMM; batch-1 decode runs the trellis GEMM without one. The MLP's
# state over a chunk in fp32: architecture/llama.py builds GatedMLP with `out_dtype = torch.float, interm_dtype =
# torch.float` (the hidden state and the gate/up intermediates, 4 bytes: chunk x (h + 2 max(h, ffn)) x 4); the logits
# of the 32 output tokens at 4 bytes (an upper bound; fp16 logits take half). A tied model's head is its own quantized
# Linear at head_bits, read from model.embed_tokens (llama.py `alt_key`), beside the embedding in host RAM.
EXL3_RECONSTRUCT_ROWS = 144
EXL3_RECONSTRUCT_SLICE = 32768
# Cache (exllamav3/cache/): a pool of max_num_tokens tokens shared by every running sequence (cache.py Cache:
# "Max number of total tokens in the cache. Must be a multiple of the page size (256) ... seq_len * batch_size <=
# max_num_tokens"; constants.py PAGE_SIZE = 256), set by examples/chat.py's -cs / --cache_size (model_init.py
# add_args). fp16 (cache/fp16.py CacheLayer_fp16: K and V of pages x 256 x kv_heads x head_dim, torch.half) or
# quantized (cache/quant.py CacheLayer_quant, -cq "k_bits,v_bits", each 2 to 8: `assert (2 <= k_bits <= 8) and (2 <=
# v_bits <= 8)`): token_dim // 32 * bits int32 words and token_dim // 32 fp16 scales a token, bits / 8 + 2 / 32 bytes
# a value. The plan's types: fp8 / int8 its 8-bit cache (-cq 8,8), int4 its 4-bit one (-cq 4,4); bf16 runs as its fp16.
EXL3_PAGE_TOKENS = 256
EXL3_CACHE_BITS = {"fp8": 8, "int8": 8, "int4": 4}
EXL3_CACHE_BYTES = {"auto": 2.0, "fp16": 2.0, "bf16": 2.0,
                    **{k: b / 8 + 2 / 32 for k, b in EXL3_CACHE_BITS.items()}}  # per K or V element
# The GPUs it runs on: NVIDIA only. Its kernels are a CUDA extension (setup.py cpp_extension.CUDAExtension) and its
# README lists "ROCm support" under "What's missing?"; they use cp.async and mma.m16n8k16, which need compute
# capability 8.0 (turboderp-org/exllamav3 issue #14, 2025-04-13, a T4 build: "Feature 'cp.async' requires .target
# sm_80 or higher"; TabbyAPI's common/hardware.py rejects below 8.0, theroyallab/tabbyAPI PR #463, 2026-09): so Ampere
# or newer, not Volta or Turing.
EXL3_VENDORS = ("nvidia",)
EXL3_REFUSED_ARCHITECTURES = ("volta", "turing")
EXL_ENGINES = ("exllamav2", "exllamav3")


def exl3_bits(precision) -> np.ndarray:
    """Bits per weight of `exl3-B` precisions (NaN for any other)."""
    p = pd.Series(precision, dtype=object).astype(str).str.extract(r"^exl3-(\d+(?:\.\d+)?)$", expand=False)
    return pd.to_numeric(p, errors="coerce").to_numpy(float)


# --- MLC-LLM (mlc-ai/mlc-llm at commit 79d603f0, read via fetch) ------------------------------
# `mlc_llm serve --mode server`: cpp/serve/config.cc `EstimateMemoryUsageOnMode` sizes the KV cache
# as max_total_sequence_length = (total x gpu_memory_utilization - params - temp buffer - KV aux
# workspace - model workspace - logit-processor workspace) / KV bytes per token, with
#   KV bytes per token = head_dim x kv_heads x layers x 4 + 1.25 (fp16 K and V),
#   KV aux = (max_num_sequence + 1) x 88 + chunk x (q_heads + 1) x 8 + chunk x head_dim x (q + kv heads) x 4 + 48 MiB,
#   model workspace = chunk x 4 + max_num_sequence x 4 + (2 chunk + max_num_sequence) x hidden x 2,
#   logit workspace = max_num_sequence x 20 + max_num_sequence x vocab x 16.125;
# in server mode max_num_sequence = the compiled max_batch_size (gen_config --max-batch-size default
# 128); gpu_memory_utilization defaults to 0.85 (serve/config.py); the prefill chunk defaults to
# min(context window, 8192) (model/llama/llama_model.py). The temp buffer is the compiled library's
# planned activation memory (not in the source): approximated as vLLM's profile activation over one
# chunk. Weights (quantization/quantization.py): q4f16_1 / q4f16_0 4-bit groups of 32 with an fp16
# scale (4.5 bits), q4f32_1 an fp32 scale (5), q3f16_1 3-bit groups of 40 (3.4), q0f16/q0f32
# unquantized; quantize_embedding and quantize_final_fc are on: every weight at those bits.
MLC_BITS = {"q4f16_1": 4.5, "q4f16_0": 4.5, "q4f32_1": 5.0, "q3f16_1": 3.0 + 16 / 40, "q0f16": 16.0, "q0f32": 32.0}
MLC_UTILIZATION = 0.85
MLC_MAX_BATCH = 128
MLC_MAX_CHUNK = 8192


# --- MLX (ml-explore/mlx-lm at d78bf58e, mlx-lm 0.32.0, and ml-explore/mlx at 846d1762, read via fetch) ------------
# Apple silicon only (Metal). `mlx_lm.server --model M` (mlx_lm/server.py) or `mlx_lm.generate` (mlx_lm/generate.py).
# Weights (mlx_lm/utils.py quantize_model, `mlx_lm.convert -q`): defaults_for_mode {"affine": (64, 4), "mxfp4": (32, 4),
# "nvfp4": (16, 4), "mxfp8": (32, 8)} (group size, bits); every module with `to_quantized` whose input size divides by
# the group is quantized: the linear layers, the token embedding (nn.Embedding.to_quantized, QuantizedEmbedding) and
# the head (a Linear, or the tied embedding's as_linear); norms stay in the model's dtype (not counted apart: a few
# thousand values a layer). Affine groups keep a scale and a bias in the weights' dtype (mlx/ops.cpp affine_quantize:
# `scales = astype(scales, w.dtype())`, `biases = astype(biases, w.dtype())`): bits + 2 x 16 / 64 bits a weight, 4-bit
# 4.5, 8-bit 8.5; mxfp4 one uint8 (e8m0) scale per 32 (ops.cpp fp_quantize: `astype(..., uint8)`), no bias: 4.25.
# mlx-community names its conversions <Name>-4bit / -5bit / -6bit / -8bit (mlx-lm README: mlx-community/
# Mistral-7B-Instruct-v0.3-4bit; mlx_lm/BENCHMARKS.md: mlx-community/Qwen3-4B-Instruct-2507-{4,5,6,8}bit and the 16-bit
# row served from the Qwen/ repo itself); other formats are the user's own `mlx_lm.convert` output.
MLX_GROUP = 64  # affine group size (quantize_model defaults_for_mode)
MLX_BITS = {"mlx-4bit": 4 + 32 / MLX_GROUP, "mlx-8bit": 8 + 32 / MLX_GROUP, "mlx-6bit": 6 + 32 / MLX_GROUP,
            "mlx-5bit": 5 + 32 / MLX_GROUP, "mlx-3bit": 3 + 32 / MLX_GROUP, "mlx-mxfp4": 4 + 8 / 32,
            "bf16": 16.0, "fp16": 16.0}
MLX_QUANTIZED = tuple(p for p in MLX_BITS if p.startswith("mlx-"))  # (names no other engine takes)
MLX_COMMUNITY_BITS = {"mlx-4bit": "4bit", "mlx-5bit": "5bit", "mlx-6bit": "6bit", "mlx-8bit": "8bit"}
MLX_CONVERT_FLAGS = {"mlx-3bit": " -q --q-bits 3", "mlx-mxfp4": " -q --q-mode mxfp4", "fp16": " --dtype float16"}
# The KV cache (mlx_lm/models/cache.py): KVCache (one per layer, make_prompt_cache) grows in steps of 256 tokens
# (`step = 256`; n_steps = (step + new) // step), K and V in the activations' dtype (16-bit); models with
# sliding-window layers build RotatingKVCache(max_size=window) for them (their make_cache), as llama.cpp's SWA cache
# keeps the window (kv_policy "windowed"). QuantizedKVCache (`mlx_lm.generate --kv-bits B`, --kv-group-size 64):
# B-bit values packed in uint32 plus a scale and a bias per 64 in the keys' dtype: B / 8 + 4 / 64 bytes a value.
# mlx_lm.server has no --kv-bits: a quantized cache is mlx_lm.generate's, one sequence.
MLX_KV_STEP = 256
MLX_KV_GROUP = 64
MLX_KV_BITS = {"int8": 8, "int4": 4}
# The server (mlx_lm/server.py argparse): --decode-concurrency 32 (BatchGenerator completion_batch_size),
# --prompt-concurrency 8 (prefill_batch_size), --prefill-step-size 2048; at start it wires
# mx.device_info()["max_recommended_working_set_size"] (mx.set_wired_limit), macOS's recommendedMaxWorkingSetSize, the
# share apple_gpu_share models (raised with `sudo sysctl iogpu.wired_limit_mb=N`, mlx-lm README "Large Models").
# BatchGenerator's prefill runs up to 8 prompts x 2,048 tokens a forward (generate.py `n_to_process =
# min(self.prefill_step_size, tokens.shape[1])` over the batch's tokens) and evaluates only the caches' state, so no
# prompt logits are made; that forward's working set is approximated as vLLM's per-token activation (as MLC-LLM's
# temp buffer), the fused attention's scores not counted. Its LRU prompt cache (--prompt-cache-size 10) keeps
# finished requests' caches, bounded in bytes only by --prompt-cache-bytes: not counted.
MLX_DECODE_CONCURRENCY = 32
MLX_PROMPT_CONCURRENCY = 8
MLX_PREFILL_STEP = 2048
# max_num_seqs of the engines without a scheduler of their own: llama-server's -np (parallel slots), Ollama's
# OLLAMA_NUM_PARALLEL, the sequences ExLlamaV2's cache holds and transformers' generate() batches
OTHER_MAX_NUM_SEQS = 1


# --- Apple unified memory ---------------------------------------------------------------
# macOS lets the GPU wire about 3/4 of unified memory on large machines and about 2/3 on
# small ones (recommendedMaxWorkingSetSize; the catalog's Apple entries use 75%). It can be
# raised with `sudo sysctl iogpu.wired_limit_mb=<MiB>`.
APPLE_SHARE_LARGE = 0.75
APPLE_SHARE_SMALL = 2 / 3
APPLE_SMALL_GB = 36
# A Mac is one device: no NCCL or other multi-device backend on Apple silicon (catalog/gpus.yaml compatibility rule
# no-multi-device-on-apple, which refuses several Apple devices for training and `estimate`), and its GPU already
# addresses the whole unified memory. serve() refuses more than one per replica (--gpus) for every engine: llama.cpp's
# --split-mode layer and ExLlamaV2's autosplit split over the GPUs of one machine, vLLM / SGLang / MLC-LLM tensor
# parallelism over NCCL.
ONE_DEVICE_VENDORS = ("apple",)
# mlx-lm: Apple GPUs (Metal). mlx also builds a CUDA backend; its memory there (no wired limit) is not modelled.
MLX_VENDORS = ("apple",)
MLX_ENGINES = ("mlx-lm",)

# --- Speed (calibrated; see benchmarks/serving_accuracy.py) -------------------------------
# Decode time per step = bytes read / effective bandwidth + layers x per-layer fixed cost
# (kernel launches, synchronisation, dequantization set-up: what does not scale with bytes).
# Effective bandwidth = min(efficiency x bandwidth, kernel cap): llama.cpp's batch-1 matvec
# kernels do not reach HBM bandwidth on large GPUs. Fitted in closed form on the `fit` rows of
# catalog/serving_measurements.yaml (`benchmarks/serving_accuracy.py --fit`): the efficiency
# and per-layer cost on the RTX 4090 (190 tok/s) and RTX PRO 6000 (278.95) Llama 2 7B Q4_0
# runs, the cap on the H100 run (280), ROCm's efficiency on the W7900 run (99.42), Metal's on
# the M1 Max run (61.19, llama.cpp discussion #4167); the
# efficiency is on the file size llama-bench prints, so it absorbs the token embedding that is
# never read. tests/test_serving.py refits and compares.
DECODE_EFFICIENCY = {  # by engine family x GPU family
    ("gguf", "nvidia"): 0.989,  # fitted (llama.cpp CUDA)
    ("gguf", "amd"): 0.513,  # fitted (llama.cpp ROCm)
    ("gguf", "apple"): 0.641,  # fitted (llama.cpp Metal, M1 Max Q4_0 of discussion #4167)
    # llama.cpp's Vulkan backend (`serve --backend vulkan`), one fit row per family: the RTX 3090
    # Llama 3 8B Q4_0 run of PR #21024 (2026-05, 146.73 tok/s), the RX 5700 XT Llama 2 7B Q4_0 run
    # of PR #13324 (2025-05, 65.19), at llama.cpp CUDA's per-layer cost
    ("gguf-vulkan", "nvidia"): 0.922,  # fitted
    ("gguf-vulkan", "amd"): 0.613,  # fitted
    # issue 27, batch 1 by engine on NVIDIA (benchmarks/serving_accuracy.py fit_torch_engines),
    # each with its per-layer cost below: transformers' eager `generate` on the bitsandbytes benchmark's
    # RTX 4090 Llama 3.1 8B bf16 run (transformers 4.46.3, 47.46 tok/s: a GPU-bound step, see
    # CPU_BOUND_ENGINES); vLLM's on the 2026 Llama 3.1 8B bf16 runs at one request, H100 SXM (vLLM 0.21,
    # 6.48 ms per token) and A100 40GB (0.23, ~75 tok/s)
    ("transformers", "nvidia"): 0.757,  # fitted
    ("vllm", "nvidia"): 0.808,  # fitted
    ("sglang", "nvidia"): 0.808,  # assumption: vLLM's (held out on SGLang runs: docs/serving.md)
    # ExLlamaV2 on the two RTX 4090 rows of its README (Llama 2 7B EXL2 4.0 bpw 211 tok/s, Llama 2 70B
    # EXL2 2.5 bpw 38 tok/s), with its per-layer cost below
    ("exllamav2", "nvidia"): 0.907,  # fitted
    # ExLlamaV3: assumption, ExLlamaV2's (no published ExLlamaV3 batch-1 run with its setup, version and date was found;
    # its README: the EXL3 GEMM "achieves roughly memory-bound latency under optimal conditions (4bpw, RTX 4090)")
    ("exllamav3", "nvidia"): 0.907,
    # MLC-LLM on the two RTX 4090 rows of mlc-ai/llm-perf-bench (Llama 2 7B / 13B q4f16_1: 204.8 and
    # 113.5 tok/s), with its per-layer cost below
    ("mlc-llm", "nvidia"): 0.947,  # fitted
    # mlx-lm on Apple silicon (Metal): mlx_lm/BENCHMARKS.md's 64 GB M4 Max rows of Qwen3-4B-Instruct-2507 (mlx-lm 0.28.2,
    # `mlx_lm.benchmark -p 2048 -g 128`): bf16 52.47 and 4-bit 134.52 tok/s, with its per-layer cost below
    ("mlx-lm", "apple"): 0.911,  # fitted
    ("torch", "nvidia"): 0.80,  # assumption (unused on NVIDIA since issue 27: every torch engine has its own)
    ("torch", "amd"): 0.60,  # assumption: vLLM/SGLang/HF on ROCm, not calibrated
    ("torch", "apple"): 0.50,  # assumption (MPS)
}
GGUF_BANDWIDTH_CAP = 1.78e12  # B/s, fitted on the H100 SXM llama.cpp run
LAYER_OVERHEAD_S = {"llama.cpp": 44.6e-6, "ollama": 44.6e-6,  # fitted (llama.cpp CUDA)
                    "vllm": 17.0e-6,  # fitted (2026 H100 and A100 runs): CUDA graphs leave ~0.5 ms a step
                    "sglang": 17.0e-6,  # assumption: vLLM's
                    "transformers": 762e-6,  # fitted: the host's Python and launches (CPU_BOUND_ENGINES)
                    "exllamav2": 34.0e-6,  # fitted (ExLlamaV2 README, RTX 4090 rows)
                    "exllamav3": 34.0e-6,  # assumption: ExLlamaV2's (no ExLlamaV3 run to fit)
                    "mlc-llm": 28.5e-6,  # fitted (llm-perf-bench, RTX 4090 rows)
                    "mlx-lm": 62.8e-6}  # fitted (mlx-lm BENCHMARKS.md, M4 Max rows)
# Engines whose host launches every kernel from Python at batch 1 (transformers' eager `generate`): the GPU runs the
# kernels as they are queued, so a step takes the longer of the GPU's work (the bytes at the engine's efficiency) and the
# host's (layers x the per-layer cost above, plus the format's below), not their sum. The bitsandbytes benchmark's
# December 2024 runs show both sides (transformers 4.46.3, Llama 3.1 8B): bf16 on an RTX 4090 21.1 ms a token, where the
# same host runs the NF4 step in 14.8 ms (so the bf16 step is the GPU's); bf16 on an H100 24.4 ms, slower than the RTX
# 4090 though its GPU work is 8.4 ms (so the step is the host's: 0.76 ms a layer). The other engines replay CUDA graphs
# (vLLM, SGLang) or launch from C++: their per-layer cost is GPU-side and adds to the bytes' time.
CPU_BOUND_ENGINES = ("transformers",)
# Per-layer cost of the weights' format beside the bytes it reads. transformers + bitsandbytes (fitted on the
# bitsandbytes benchmark's H100 Llama 3.1 8B rows, bitsandbytes 0.45.0.dev: NF4 30.14 tok/s, LLM.int8 with outlier
# decomposition 12.24 tok/s): the host's extra launches of the 4-bit path (quant state, gemv_4bit) and of LLM.int8's
# outlier split in every matmul. int4 under transformers is bitsandbytes FP4 (serve's command), the same gemv_4bit
# path as NF4 with another code book: NF4's cost. vLLM and SGLang FP8 (W8A8 on Ada / Hopper / Blackwell: the
# activations quantized per token before each linear layer's GEMM, one more kernel each; fitted on the silybench H100
# Qwen3-8B --quantization fp8 row, vLLM 0.30.0, 4.62 ms a token; SGLang: vLLM's). Formats not listed (AWQ/GPTQ int4
# in vLLM/SGLang, GGUF types in llama.cpp) have none: their kernels' cost is in the engine's efficiency.
DEQUANT_LAYER_S = {("transformers", "nf4"): 274e-6, ("transformers", "int4"): 274e-6, ("transformers", "int8"): 1.791e-3,
                   ("vllm", "fp8"): 14.1e-6, ("sglang", "fp8"): 14.1e-6}
# Tensor parallel decode (vLLM, SGLang, MLC-LLM): two all-reduces of the hidden state a layer (Megatron-style TP, as
# engine/speed.py ALLREDUCES_PER_LAYER). Over a GPU link (NVLink, NVSwitch, Infinity Fabric) each takes
# ALLREDUCE_LATENCY_S at batch-1 sizes (NCCL between H100s over NVLink, engine/speed.py; not fitted). Without one (the
# catalog's interconnect is PCIe, or unknown) NCCL goes over PCIe or the host: TP_ALLREDUCE_PCIE_S, fitted on one rig's
# TP 1 / TP 2 pair (two RTX 4090s, peer-to-peer off, vLLM 0.25.1, Qwen2-7B bf16: 15.87 and 9.26 ms a token;
# benchmarks/serving_accuracy.py, fit_term allreduce): (t2 - t1 / 2 - layers x per-layer cost / 2) / (2 x layers).
TP_ALLREDUCE_STEP_S = ALLREDUCES_PER_LAYER * ALLREDUCE_LATENCY_S
TP_ALLREDUCE_PCIE_S = 19.5e-6
TP_ALLREDUCE_PCIE_STEP_S = ALLREDUCES_PER_LAYER * TP_ALLREDUCE_PCIE_S
GPU_LINKS = ("NVLink", "NVSwitch", "Infinity Fabric")  # catalog interconnect texts that name a GPU-to-GPU link

# vLLM V0 (before 0.8, `serve --engine-version`): its engine step ran the scheduler, the model inputs' preparation, the
# sampler and the output processing in Python between two forwards, on the GPU's critical path (vLLM's V1 blog,
# 2025-01-27, 'Optimized Execution Loop & API Server': "the CPU overhead for tasks like ... scheduling work, preparing
# inputs, de-tokenizing outputs ... becomes increasingly pronounced ... with smaller models"); V1 moves them to other
# processes and overlaps them. A fixed cost a step, fitted on Qwen's Qwen2.5-0.5B run with vLLM 0.6.3 on an A100
# (311.55 tok/s, 1 GB read a step; benchmarks/serving_accuracy.py, fit_term step_cost).
VLLM_V0_STEP_S = 2.19e-3


def _speed_basis(basis, tp, pcie, v0) -> np.ndarray:
    """speed_basis with what a row's step adds beside its engine's fitted constants: tensor parallel's all-reduces (over
    PCIe: fitted on one rig's pair; over a GPU link: not fitted) and vLLM V0's step."""
    tp = np.asarray(tp, dtype=float)
    link = np.where(np.asarray(pcie, dtype=bool),
                    f"over PCIe (no GPU link in the catalog), {TP_ALLREDUCE_PCIE_S * 1e6:.1f} us each, fitted on one 2-GPU rig",
                    f"over the GPU link, {ALLREDUCE_LATENCY_S * 1e6:.0f} us each, not fitted")
    tp_text = np.where(tp > 1, "; tensor parallel " + pd.Series(tp).astype(int).astype(str).to_numpy(object)
                       + ": two all-reduces a layer " + link, "")
    v0_text = np.where(np.asarray(v0, dtype=bool), f"; vLLM V0: {VLLM_V0_STEP_S * 1e3:.2f} ms a step for its Python loop", "")
    return (pd.Series(basis, dtype=object).fillna("").to_numpy(object) + tp_text + v0_text).astype(object)


def pcie_only(interconnect) -> np.ndarray:
    """True where a card's catalog `interconnect` names no GPU-to-GPU link (PCIe, or not given: the slower case)."""
    text = pd.Series(interconnect, dtype=object).fillna("").astype(str)
    return ~text.str.contains("|".join(GPU_LINKS), regex=True).to_numpy(bool)


# Mixture of experts under llama.cpp: the routed experts a step reads go through `mul_mat_id`
# (ggml's MUL_MAT_ID: src/llama-graph.cpp build_moe_ffn, `build_lora_mm_id` for the up, gate and
# down experts), which gathers the selected experts' slices after the router's softmax, top-k,
# get_rows and weight normalization, and sums the k outputs with k - 1 adds. Published batch-1 runs
# read those bytes well below the dense matrix-vector kernels' bandwidth: the share of the dense
# efficiency each backend reaches on them, fitted on one llama-bench tg128 row each
# (benchmarks/serving_accuracy.py fit(), catalog/serving_measurements.yaml `moe` rows): CUDA on the
# RTX 5090 gpt-oss-20b MXFP4 run (build 7100, 2026-02, 362.59 tok/s), Metal on the M1 Max
# gpt-oss-20b MXFP4 run (build 9100, 2026, 59.67 tok/s). Backends with no fit row (ROCm, Vulkan)
# and the other engines read experts at their dense efficiency (no published run to fit).
MOE_EXPERT_EFFICIENCY = {("gguf", "nvidia"): 0.760,  # fitted (llama.cpp CUDA)
                         ("gguf", "apple"): 0.470,  # fitted (llama.cpp Metal)
                         # fitted (mlx-lm: BENCHMARKS.md's M4 Max Qwen3-30B-A3B 4-bit row, 113.33 tok/s; its gather_qmm)
                         ("mlx-lm", "apple"): 0.512}
# Prefill: tokens/s = dense 16-bit TFLOPS x MFU / FLOPs per token (2 N + attention).
# llama.cpp: fitted on the RTX 4090 pp512 run of llama.cpp PR #4766 (7,980 tok/s, Q4_0 7B) and,
# for ROCm, on the W7900 pp512 run (2,875 tok/s, counting RDNA 3 dual issue in its TFLOPS).
# vLLM/SGLang/transformers: assumptions (no held-out row), near the LLaMA paper's training MFU.
PREFILL_MFU = {"llama.cpp": 0.658, "ollama": 0.658, "vllm": 0.55, "sglang": 0.55, "transformers": 0.40,
               "exllamav2": 0.55, "exllamav3": 0.55, "mlc-llm": 0.55,
               "mlx-lm": 0.871}  # mlx-lm: fitted on BENCHMARKS.md's M4 Max Qwen3-4B bf16 prompt (2048) row, 1,780.63 tok/s  # ExLlamaV2/V3, MLC-LLM: assumptions (no prefill run in the set)
PREFILL_MFU_BY_FAMILY = {("llama.cpp", "amd"): 0.319, ("ollama", "amd"): 0.319}  # fitted (ROCm)
DECODE_MFU = 0.5  # compute ceiling of large decode batches (assumption)
# What a row's batch-1 speed rests on (`speed_basis` in serve --json): the engine x GPU family
# pairs whose constants were fitted on published runs (benchmarks/serving_accuracy.py), the rest
# assumptions. docs/serving.md lists the rows behind each.
FITTED_SPEED = {("llama.cpp", "nvidia"): "fitted: llama.cpp CUDA runs", ("llama.cpp", "amd"): "fitted: llama.cpp ROCm runs",
                ("llama.cpp", "apple"): "fitted: llama.cpp Metal runs", ("ollama", "nvidia"): "fitted: llama.cpp CUDA runs",
                ("ollama", "amd"): "fitted: llama.cpp ROCm runs", ("ollama", "apple"): "fitted: llama.cpp Metal runs",
                ("transformers", "nvidia"): "fitted: transformers generate runs (RTX 4090, H100; the host sets most steps)",
                ("vllm", "nvidia"): "fitted: vLLM runs at one request (H100, A100 40GB)",
                ("sglang", "nvidia"): "assumption: vLLM's fitted constants (held out on SGLang 0.5.3 H100 runs)",
                ("exllamav2", "nvidia"): "fitted: ExLlamaV2 README runs (RTX 4090)",
                ("exllamav3", "nvidia"): "assumption: ExLlamaV2's fitted constants (no ExLlamaV3 run with its setup published)",
                ("mlc-llm", "nvidia"): "fitted: mlc-ai/llm-perf-bench runs (RTX 4090)",
                ("mlx-lm", "apple"): "fitted: mlx-lm BENCHMARKS.md runs (M4 Max)"}


def expert_read_share(experts_per_token, num_experts, concurrency=1.0) -> np.ndarray:
    """Share of the routed experts a decode step reads: with c sequences routing k of E experts
    each, uniformly and independently (an assumption), 1 - (1 - k/E)^c (k/E at one request);
    1 for a dense model (E = 0)."""
    E = np.asarray(num_experts, dtype=float)
    k = np.asarray(experts_per_token, dtype=float)
    c = np.asarray(concurrency, dtype=float)
    return np.where(E > 0, 1.0 - (1.0 - k / np.maximum(E, 1.0)) ** c, 1.0)


# vLLM's MXFP4 MoE method pads the routed experts' tensors for its kernels when it creates them
# (vllm/model_executor/layers/quantization/mxfp4.py, Mxfp4MoEMethod.create_weights, read at
# 007d500 via the public index): the Marlin backend (weight-only FP4: Ampere, Ada, consumer
# Blackwell, Hopper without triton_kernels) rounds each GPU's expert intermediate size up to 128
# and the hidden size up to 256 ("n % 256 == 0 and k % 128 == 0"); FlashInfer's SM100 backends
# (B200, B300) round both up to 256; ROCm rounds both to get_padding_alignment() (256 on gfx950,
# MI355X; 128 otherwise). Hopper's default Triton backend keeps the sizes here and lays the
# tensors out in triton_kernels' swizzled format, whose size is not traced: the Marlin padding is
# counted for it too (gpt-oss-120b on one H100: Triton 64.38 GiB, Marlin 65.97 GiB measured,
# catalog/references.yaml; Marlin's padding gives 65.90). The padded tensors are the codes (4 bits)
# and their scales (one byte per 32): the whole expert bytes scale with the padded area.
MXFP4_PAD_MARLIN = (128, 256)  # (intermediate per GPU, hidden)
MXFP4_PAD_SM100 = (256, 256)
MXFP4_PAD_ROCM = {"cdna4": 256}  # else 128


def vllm_mxfp4_padding_bytes(expert_bytes, hidden, expert_intermediate, tp, architecture, segment,
                             family) -> np.ndarray:
    """Bytes vLLM adds to the routed experts of an MXFP4 checkpoint by padding their tensors, in total
    over the `tp` GPUs (each pads its own slice of the intermediate size); 0 where nothing pads."""
    hidden = np.asarray(hidden, float)
    inter = np.asarray(expert_intermediate, float) / np.asarray(tp, float)
    arch = np.asarray(architecture, dtype=object).astype(str)
    sm100 = (arch == "blackwell") & (np.asarray(segment, dtype=object).astype(str) == "datacenter")
    amd = np.asarray(family, dtype=object) == "amd"
    rocm_align = np.where(arch == "cdna4", float(MXFP4_PAD_ROCM["cdna4"]), 128.0)
    a_inter = np.where(amd, rocm_align, np.where(sm100, MXFP4_PAD_SM100[0], MXFP4_PAD_MARLIN[0]))
    a_hidden = np.where(amd, rocm_align, np.where(sm100, MXFP4_PAD_SM100[1], MXFP4_PAD_MARLIN[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        area = (np.ceil(inter / a_inter) * a_inter * np.ceil(hidden / a_hidden) * a_hidden) / (inter * hidden)
    area = np.where((inter > 0) & (hidden > 0), area, 1.0)
    return np.asarray(expert_bytes, float) * (area - 1.0)


def apple_gpu_share(memory_gb) -> np.ndarray:
    """The share of unified memory macOS lets the GPU use by default."""
    memory_gb = np.asarray(memory_gb, dtype=float)
    return np.where(memory_gb > APPLE_SMALL_GB, APPLE_SHARE_LARGE, APPLE_SHARE_SMALL)


def gpu_family(gpus: pd.DataFrame) -> np.ndarray:
    """nvidia | amd | apple, for the speed model's efficiency."""
    unified = gpus["unified_memory"].fillna(False).astype(bool).to_numpy()
    vendor = gpus["vendor"].astype(str).str.lower().to_numpy()
    return np.where(unified & (vendor == "apple"), "apple", np.where(vendor == "amd", "amd", "nvidia"))


def decode_step_seconds(gpu_bytes, host_bytes, layers, bandwidth_gbps, family, engine,
                        host_bandwidth_gbps=HOST_BANDWIDTH_GBPS, flops=0.0, tflops=np.nan, precision=None, backend=None,
                        expert_bytes=0.0, tp=1.0, step_s=0.0, pcie=False):
    """Seconds per decode step (one token for every running sequence), whole columns.

    gpu_bytes / host_bytes: bytes read per step from GPU memory / host RAM (weights + the
    KV cache of every running sequence). family: nvidia|amd|apple. engine: an ENGINES name.
    precision: the weights' format, for its per-layer dequantization cost (DEQUANT_LAYER_S).
    backend: llama.cpp's (cuda|rocm|metal|vulkan); "vulkan" takes the Vulkan efficiency.
    expert_bytes: the part of gpu_bytes that is routed experts (MoE), read at
    MOE_EXPERT_EFFICIENCY x the dense efficiency where a backend has one.
    tp: the tensor-parallel degree the step runs at (gpu_bytes are one rank's): from 2 on, each layer's two
    all-reduces (TP_ALLREDUCE_STEP_S; TP_ALLREDUCE_PCIE_STEP_S where `pcie`: no GPU link). An engine of
    CPU_BOUND_ENGINES takes the longer of the GPU's time and the host's (layers x its per-layer and format cost); the
    others add them. step_s: a fixed cost every step adds (VLLM_V0_STEP_S for vLLM V0).
    """
    engine = np.asarray(engine, dtype=object)
    family = np.asarray(family, dtype=object)
    engine, family = np.broadcast_arrays(engine, family)
    gguf = np.isin(engine, GGUF_ENGINES)
    vulkan = gguf & (np.broadcast_to(np.asarray(backend if backend is not None else "", dtype=object), engine.shape) == "vulkan")
    kind = np.where(vulkan, "gguf-vulkan", np.where(gguf, "gguf", engine))
    # the engine's own efficiency on this GPU family where fitted, else its family's (torch)
    key = pd.Series(list(zip(kind, family)), dtype=object)
    eff = key.map(DECODE_EFFICIENCY)
    eff = eff.fillna(pd.Series(list(zip(np.where(gguf, "gguf", "torch"), family)), dtype=object).map(DECODE_EFFICIENCY))
    eff = eff.to_numpy(float)
    bw = np.asarray(bandwidth_gbps, dtype=float) * 1e9 * eff
    bw = np.where(gguf, np.minimum(bw, GGUF_BANDWIDTH_CAP), bw)
    # routed experts: the kernels' share of the dense bandwidth (Vulkan is its own kind: none fitted)
    moe_eff = key.map(MOE_EXPERT_EFFICIENCY).fillna(1.0).to_numpy(float)
    expert = np.asarray(expert_bytes, dtype=float)
    gpu_read = np.asarray(gpu_bytes, dtype=float) + expert * (1.0 / moe_eff - 1.0)
    t_mem = gpu_read / bw + np.asarray(host_bytes, dtype=float) / (np.asarray(host_bandwidth_gbps, dtype=float) * 1e9)
    t_comp = np.asarray(flops, dtype=float) / (np.asarray(tflops, dtype=float) * 1e12 * DECODE_MFU)
    t_comp = np.nan_to_num(t_comp, nan=0.0)
    overhead = pd.Series(engine, dtype=object).map(LAYER_OVERHEAD_S).to_numpy(float)
    if precision is not None:
        prec = np.broadcast_to(np.asarray(precision, dtype=object), engine.shape)
        overhead = overhead + pd.Series(list(zip(engine, prec)), dtype=object).map(DEQUANT_LAYER_S).fillna(0.0).to_numpy(float)
    overhead = overhead + np.where(np.asarray(tp, dtype=float) > 1,
                                   np.where(np.asarray(pcie, dtype=bool), TP_ALLREDUCE_PCIE_STEP_S, TP_ALLREDUCE_STEP_S), 0.0)
    gpu = np.maximum(t_mem, t_comp)
    host = np.asarray(layers, dtype=float) * overhead
    return np.where(np.isin(engine, CPU_BOUND_ENGINES), np.maximum(gpu, host), gpu + host) + np.asarray(step_s, dtype=float)


def prefill_tokens_per_s(params, layers, hidden, prompt, tflops, engine, tp=1, family=None):
    """Prompt tokens per second: dense 16-bit TFLOPS x MFU over 2 N + 2 L h p FLOPs per token
    (the attention term: Q K^T and A V over the p/2 earlier tokens on average, x2 for K and V).
    family: nvidia|amd|apple, for an engine's MFU fitted on that backend (PREFILL_MFU_BY_FAMILY)."""
    engine = np.asarray(engine, dtype=object)
    mfu = pd.Series(engine, dtype=object).map(PREFILL_MFU)
    if family is not None:
        fam = np.broadcast_to(np.asarray(family, dtype=object), engine.shape)
        mfu = pd.Series(list(zip(engine, fam)), dtype=object).map(PREFILL_MFU_BY_FAMILY).fillna(mfu)
    mfu = mfu.to_numpy(float)
    per_token = 2.0 * np.asarray(params, float) + 2.0 * np.asarray(layers, float) * np.asarray(hidden, float) * np.asarray(prompt, float)
    return np.asarray(tflops, float) * 1e12 * mfu * np.asarray(tp, float) / per_token


REQUEST_DEFAULTS = {
    "gpus": 1, "kv_precision": "auto", "gpu_memory_utilization": np.nan, "max_num_seqs": np.nan,
    "gpu_layers": -1, "concurrency": np.nan, "max_num_batched_tokens": np.nan, "prompt_tokens": 512, "output_tokens": 128,
    "host_bandwidth_gbps": HOST_BANDWIDTH_GBPS, "cpu_moe_layers": 0,
    "engine_version": "", "draft_model": "", "draft_tensor_parallel_size": np.nan, "draft_context": np.nan,
    "backend": "",
    "gpu_memory_in_use_gib": 0.0, "kv_cache_memory_bytes": np.nan,
}
# The request settings only some engines read (serve() below), and those engines. A `serve` flag given with another
# engine is refused (exit 2), never dropped unseen: kv_cache_memory_bytes, cpu_moe_layers, engine_version, draft_model
# and backend by _check here; the others (CLI_CHECKED_SETTINGS), whose defaults a frame cannot tell from a value given
# and which the Serving page's grids carry for every engine, by the command line (planner/cli.py _check_engine_flags).
# gpu_memory_utilization: vLLM's and MLC-LLM's share of the card, SGLang's mem_fraction_static (the others fit in what
# is free); gpu_layers: llama.cpp's -ngl, Ollama's num_gpu; host_bandwidth_gbps: the layers (and experts) they leave in
# host RAM; draft_context: the draft's context per slot under llama.cpp (the target's only: DRAFT_CONTEXT_NOTE).
ENGINE_ONLY_SETTINGS = {
    "gpu_memory_utilization": ("vllm", "sglang", "mlc-llm"),
    "kv_cache_memory_bytes": ("vllm",),
    "gpu_layers": GGUF_ENGINES,
    "cpu_moe_layers": ("llama.cpp",),
    "host_bandwidth_gbps": GGUF_ENGINES,
    "engine_version": ("vllm", "sglang"),
    "draft_model": DRAFT_ENGINES,
    "draft_tensor_parallel_size": ("vllm",),
    "draft_context": ("llama.cpp",),
    "backend": GGUF_ENGINES,
}
CLI_CHECKED_SETTINGS = ("gpu_memory_utilization", "gpu_layers", "host_bandwidth_gbps", "draft_tensor_parallel_size",
                        "draft_context")


# The KV cache types an engine launches (serve's kv_precision; llama.cpp takes every type, LLAMA_KV_TYPES), with what
# its own option calls them. vLLM: --kv-cache-dtype (CacheConfig.cache_dtype; vllm/config/cache.py CacheDType at
# 002f10e: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...; the V0 releases' vllm/engine/arg_utils.py choices:
# auto, fp8, fp8_e5m2, fp8_e4m3), "auto" being the model's dtype (--dtype). SGLang: --kv-cache-dtype (server_args.py
# choices: auto, fp8_e5m2, fp8_e4m3; bf16 / bfloat16 in later releases), fp16 through auto under --dtype float16.
# Neither has an int8 or int4 cache of 1 or 0.5 bytes a value (vLLM's 2026 int8_per_token_head / int4_per_token_head
# keep a scale per token and head beside the values: not modelled), nor an fp32 one but through auto under --dtype
# float32: a plan on such a cache would count bytes the engine never allocates, and its command could not carry it.
# Ollama's is f16, q8_0 or q4_0 (OLLAMA_KV_TYPES; no f32: an fp32 plan counted twice the bytes it runs with). MLC-LLM's
# paged KV cache is fp16; ExLlamaV2's fp16, Q8 or Q4 (EXL_CACHE_BYTES); ExLlamaV3's fp16 or 2-8 bits (EXL3_CACHE_BYTES).
KV_ENGINE_TYPES = {
    "vllm": (("auto", "fp16", "bf16", "fp8"), "its --kv-cache-dtype: auto (the model's dtype), float16, bfloat16, fp8; "
                                              "no int8 or int4 cache, fp32 only as auto under --precision fp32"),
    "sglang": (("auto", "fp16", "bf16", "fp8"), "its --kv-cache-dtype: auto (the model's dtype), fp8_e4m3, fp8_e5m2, "
                                                "bf16; no int8 or int4 cache, fp32 only as auto under --precision fp32"),
    "ollama": (("auto", "fp16", "bf16", "fp8", "int8", "int4"), "its OLLAMA_KV_CACHE_TYPE: f16, q8_0, q4_0; bf16 runs "
                                                                "as f16, fp8 as q8_0"),
    "mlc-llm": (("auto", "fp16"), "its paged KV cache is fp16"),
    "mlx-lm": (("auto", "fp16", "bf16", "int8", "int4"), "its KVCache in the model's 16-bit dtype; int8/int4: "
                                                       "mlx_lm.generate --kv-bits 8/4, no fp8"),
    "exllamav2": (tuple(EXL_CACHE_BYTES), "int8/fp8: its Q8 cache, int4: Q4"),
    "exllamav3": (tuple(EXL3_CACHE_BYTES), "its fp16 cache, bf16 as fp16; int8/fp8: -cq 8,8, int4: -cq 4,4"),
}


def _kv_refusals(req: pd.DataFrame):
    """(rows, message) for each engine whose KV cache types (KV_ENGINE_TYPES) leave out a row's kv_precision."""
    kv = req["kv_precision"].astype(str)
    for engine, (accepted, why) in KV_ENGINE_TYPES.items():
        bad = (req["engine"] == engine) & ~kv.isin(accepted)
        if bad.any():
            yield bad, (f"kv_precision {kv[bad].iloc[0]!r} is not accepted for {engine}; accepted: "
                        f"{', '.join(accepted)} ({why})")


def kv_refused(req: pd.DataFrame) -> np.ndarray:
    """Per request: its kv_precision is a cache type its engine does not have (the requests serve() would refuse for
    it; a search over engines leaves them out, planner/serving.py cheapest, as formats_refused does for weights)."""
    out = np.zeros(len(req), dtype=bool)
    for rows, _ in _kv_refusals(req):
        out |= rows.to_numpy(bool)
    return out


def max_num_seqs_help() -> str:
    """`serve --max-num-seqs`'s help: each engine's default as serve() decides it, written from the same constants."""
    v1, by_memory = VLLM_V1_FROM, VLLM_MEMORY_DEFAULTS_FROM
    return (f"vLLM/SGLang: running requests (default {VLLM_MAX_NUM_SEQS_LARGE} on a card of "
            f"{VLLM_LARGE_GPU_BYTES / C.GIB:g} GiB or more that is not an A100, else {VLLM_MAX_NUM_SEQS}; vLLM --engine-version "
            f"from {v1[0]}.{v1[1]} before {by_memory[0]}.{by_memory[1]}: {VLLM_MAX_NUM_SEQS_LARGE} on an H100/H200 only, "
            f"before {v1[0]}.{v1[1]}: {VLLM_V0_MAX_NUM_SEQS}); MLC-LLM: max_num_sequence (default {MLC_MAX_BATCH}); "

            f"llama.cpp/ollama: parallel slots; transformers/exllamav2: sequences in one batch, exllamav3: sequences "
            f"its cache pool holds at max_model_len (default {OTHER_MAX_NUM_SEQS}); MLX: its server's decode concurrency (default {MLX_DECODE_CONCURRENCY}; 1 under a "
            "quantized KV cache, which only its generate command has)")


# llama.cpp's backends (`serve --backend`, llama.cpp/Ollama): the build a GPU family runs by default,
# and the families each backend runs on (Vulkan: NVIDIA and AMD here; no Vulkan row for Apple/Intel)
DEFAULT_BACKEND = {"nvidia": "cuda", "amd": "rocm", "apple": "metal"}
BACKEND_FAMILIES = {"cuda": ("nvidia",), "rocm": ("amd",), "metal": ("apple",), "vulkan": ("nvidia", "amd")}


def _check_hybrid(req: pd.DataFrame, models: pd.DataFrame) -> None:
    """Hybrid linear-attention models (Qwen3-Next, Qwen3.5): the engines whose allocation of their state is modelled
    (HYBRID_LINEAR_ENGINES), and vLLM from the release that runs them."""
    stateful = [c for c in ("linear_attention_layers", "mamba_layers") if c in models]  # (Mamba2 layers alike)
    if not stateful:
        return
    by_id = models.set_index("id")
    hybrid = sum(req["model"].map(by_id[c].fillna(0)).to_numpy(float) for c in stateful) > 0
    if not hybrid.any():
        return
    engine = req["engine"].astype(str).to_numpy()
    bad = hybrid & ~np.isin(engine, HYBRID_LINEAR_ENGINES)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"engine {engine[i]!r} is not accepted for {req['model'].iloc[i]} (linear-attention or Mamba2 layers: its "
                         f"state per request is not modelled there); accepted: {', '.join(HYBRID_LINEAR_ENGINES)}")
    draft = req["draft_model"].fillna("").astype(str).str.strip().to_numpy() != "" if "draft_model" in req \
        else np.zeros(len(req), dtype=bool)
    bad = hybrid & draft & np.isin(engine, ("vllm", "sglang"))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"draft_model {req['draft_model'].iloc[i]!r} is not accepted beside {req['model'].iloc[i]} under "
                         f"{engine[i]}: a separate draft's pages beside the linear-attention / Mamba2 states are not modelled; "
                         "accepted: no draft model")
    key = _version_key(*vllm_version(req["engine_version"]))
    bad = hybrid & (engine == "vllm") & ~np.isnan(key) & (key < _version_key(*VLLM_LINEAR_ATTENTION_FROM))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"engine_version {req['engine_version'].iloc[i]!r} is not accepted for {req['model'].iloc[i]}: "
                         f"vLLM runs Gated DeltaNet models from 0.10.2 (Mamba2 hybrids in its V1 engine from 0.10); "
                         "accepted: 0.10 or later (or no version)")


# llama.cpp stores MXFP4 only as its MXFP4_MOE file type: llama-quantize's QUANT_OPTIONS list "MXFP4_MOE"
# (LLAMA_FTYPE_MOSTLY_MXFP4_MOE = 38, include/llama.h) and no plain MXFP4 type, and gpt-oss's GGUFs are that type
# (the experts in MXFP4, the rest as the file keeps it: GGUF_EXPERT_BITS). So `--precision mxfp4` under llama.cpp or
# Ollama (issue 27: "MXFP4, gpt-oss's native format and a llama.cpp quant type") is read as mxfp4_moe.
# llama.cpp's one NVFP4 type likewise (LLAMA_FTYPE_MOSTLY_NVFP4: engine/constants.py GGUF_BITS nvfp4_gguf)
GGUF_PRECISION_ALIASES = {"mxfp4": "mxfp4_moe", "nvfp4": "nvfp4_gguf"}
# GGUF types Ollama does not load: its GGML runner stops on an NVFP4 GGUF with `GGML_ASSERT(type >= 0 && type <
# GGML_TYPE_COUNT) failed` (ollama/ollama#16056, 2026-05-09, open; #15399: `ollama create --quantize nvfp4` is
# "unsupported quantization type", NVFP4 only through its experimental MLX engine)
OLLAMA_NOT_LOADED = ("nvfp4_gguf",)


# The GGUF file types whose output tensor llama-quant.cpp stores as Q8_0 (the others: Q6_K), above
GGUF_OUTPUT_Q8_0 = ("q8_0", "mxfp4_moe")
# Model types whose attention layers have no rotary embedding in vLLM / SGLang (NemotronHAttention builds none; Granite 4.0-H's
# config sets position_embedding_type "nope"): no cos/sin table (serve's rope_table)
NO_ROPE_MODEL_TYPES = ("nemotron_h", "granitemoehybrid")
GGUF_QK_K = 256  # a K-quant block (ggml-common.h QK_K): llama-quant.cpp's `nx % qk_k != 0` falls back to Q8_0


LLAMA_CTX_PAD = 256  # src/llama-context.cpp GGML_PAD(n_ctx, 256) and GGML_PAD(n_ctx_seq, 256)


def llama_ctx_seq(n_ctx, n_seq) -> np.ndarray:
    """The cells each of llama.cpp's n_seq sequence streams holds for -c n_ctx (no unified cache): n_ctx padded to 256,
    split by n_seq (integer division), padded to 256 again."""
    n_ctx = np.ceil(np.asarray(n_ctx, dtype=float) / LLAMA_CTX_PAD) * LLAMA_CTX_PAD
    n_seq = np.maximum(np.asarray(n_seq, dtype=float), 1.0)
    return np.ceil(np.floor(n_ctx / n_seq) / LLAMA_CTX_PAD) * LLAMA_CTX_PAD


def gguf_precision(engine, precision) -> pd.Series:
    """Per row: the precision asked, with GGUF_PRECISION_ALIASES applied to the llama.cpp / Ollama rows."""
    precision = pd.Series(precision, dtype=object).reset_index(drop=True)
    gguf = np.isin(np.asarray(engine, dtype=object), GGUF_ENGINES)
    alias = precision.map(GGUF_PRECISION_ALIASES)
    return pd.Series(np.where(gguf & alias.notna().to_numpy(), alias.to_numpy(object), precision.to_numpy(object)),
                     dtype=object)


def engine_takes_precision(engine: str, precision: str) -> bool:
    """Whether `engine` serves weights of `precision` on some card: the per-engine precision checks of `_check`, one
    value at a time (llama.cpp / Ollama take GGUF types only, mlc-llm its MLC_BITS names, ExLlamaV2 exl2-B or int4,
    ExLlamaV3 exl3-B, the others neither exl2-B / exl3-B nor MLC's names, fp8 / mxfp4 / nvfp4 only on FORMAT_ENGINES; a card's own refusals aside).
    catalog/checkpoints.py default_precision asks it (given by planner/cli.py) before offering a checkpoint's stored precision, so a
    safetensors BF16 checkpoint under llama.cpp keeps the engine's default instead of being refused
    (tests/test_checkpoints.py checks it agrees with `serve` for every engine and precision)."""
    precision = str(precision)
    if engine in GGUF_ENGINES:
        return precision in engine_precisions(engine)
    if engine == "mlc-llm":
        return precision in MLC_BITS
    if engine == "mlx-lm":
        return precision in MLX_BITS
    if precision in MLC_BITS or precision in MLX_QUANTIZED:
        return False
    bits = float(exl2_bits(pd.Series([precision]))[0])
    if engine == "exllamav2":
        return precision == "int4" or EXL_BITS_RANGE[0] <= bits <= EXL_BITS_RANGE[1]
    bits3 = float(exl3_bits(pd.Series([precision]))[0])
    if engine == "exllamav3":
        return EXL3_BITS_RANGE[0] <= bits3 <= EXL3_BITS_RANGE[1]
    if precision.startswith(("exl2", "exl3")):
        return False
    if engine == "vllm" and precision == "nf4":  # the current release has no bitsandbytes (VLLM_BNB_UNTIL)
        return False
    return engine in FORMAT_ENGINES.get(precision, (engine,))


def _check(req: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame) -> None:
    bad = ~req["engine"].isin(ENGINES)
    if bad.any():
        raise ValueError(f"engine {req['engine'][bad].iloc[0]!r} is not accepted; accepted: {', '.join(ENGINES)}")
    for col, ids, what in (("model", models["id"], "a catalog model id"), ("gpu", gpus["id"], "a catalog GPU id")):
        bad = ~req[col].isin(set(ids))
        if bad.any():
            raise ValueError(f"{col} {req[col][bad].iloc[0]!r} is not in the catalog; accepted: {what}"
                             + did_you_mean(req[col][bad].iloc[0], ids))
    util = req["gpu_memory_utilization"].to_numpy(float)
    if np.any((util <= 0) | (util > 1)):
        raise ValueError("gpu_memory_utilization is not accepted; accepted: a number > 0 and <= 1")
    in_use = pd.to_numeric(req["gpu_memory_in_use_gib"], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(in_use) | (in_use < 0)
    if bad.any():
        raise ValueError(f"gpu_memory_in_use_gib {req['gpu_memory_in_use_gib'][bad].iloc[0]!r} is not accepted; accepted: "
                         "a number of GiB >= 0 (what other processes already hold on each GPU)")
    kv_bytes = pd.to_numeric(req["kv_cache_memory_bytes"], errors="coerce").to_numpy(float)
    given = req["kv_cache_memory_bytes"].notna().to_numpy()
    bad = given & (~np.isfinite(kv_bytes) | (kv_bytes <= 0) | (kv_bytes != np.floor(kv_bytes)))
    if bad.any():
        raise ValueError(f"kv_cache_memory_bytes {req['kv_cache_memory_bytes'][bad].iloc[0]!r} is not accepted; accepted: "
                         "a whole number of bytes > 0 (vLLM's --kv-cache-memory-bytes)")
    bad = given & (req["engine"] != "vllm").to_numpy(bool)
    if bad.any():
        raise ValueError(f"kv_cache_memory_bytes is not accepted for engine {req['engine'][bad].iloc[0]!r}; accepted: "
                         "--engine vllm only (its --kv-cache-memory-bytes)")
    # vLLM's --kv-cache-memory-bytes first appears in 0.10.2 (engine/arg_utils.py, read in the wheels by helper-34):
    # a version X.Y before 0.10 has no such flag (0.10 itself, which X.Y cannot split, is taken)
    major, minor = vllm_version(req["engine_version"])
    bad = given & (req["engine"] == "vllm").to_numpy(bool) & (_version_key(major, minor) < _version_key(0, 10))
    if bad.any():
        raise ValueError(f"kv_cache_memory_bytes is not accepted for vllm {req['engine_version'][bad].iloc[0]!r}: vLLM "
                         "has --kv-cache-memory-bytes from 0.10.2; accepted: --engine-version 0.10 or later, or leave "
                         "--engine-version out (the current release)")
    cpu_moe = req["cpu_moe_layers"].to_numpy(float)
    bad = (cpu_moe != 0) & (req["engine"] != "llama.cpp").to_numpy(bool)
    if bad.any():
        raise ValueError(f"cpu_moe_layers is not accepted for engine {req['engine'][bad].iloc[0]!r}; accepted: "
                         "llama.cpp only (its --n-cpu-moe / --cpu-moe)")
    if np.any((cpu_moe < CPU_MOE_ALL) | (cpu_moe != np.floor(cpu_moe))):
        raise ValueError("cpu_moe_layers is not accepted; accepted: a whole number >= 0, -1 (auto) or -2 (all)")
    gguf = req["precision"].astype(str).isin(C.GGUF_FILE_PRECISIONS)
    llama = req["engine"].isin(GGUF_ENGINES)
    if (llama & ~gguf).any():
        raise ValueError(f"precision {req['precision'][llama & ~gguf].iloc[0]!r} is not accepted for llama.cpp/ollama; "
                         f"accepted: {', '.join(C.GGUF_FILE_PRECISIONS)} (GGUF file types; bf16 / fp16: a 16-bit "
                         "GGUF)")
    not_loaded = (req["engine"] == "ollama") & req["precision"].astype(str).isin(OLLAMA_NOT_LOADED)
    if not_loaded.any():
        raise ValueError(f"precision {req['precision'][not_loaded].iloc[0]!r} is not accepted for ollama: its GGML runner "
                         "does not load NVFP4 GGUF files (ollama/ollama#16056: GGML_ASSERT type < GGML_TYPE_COUNT); "
                         f"accepted: {', '.join(engine_precisions('ollama'))}, or --engine llama.cpp for this file")
    _check_version(req)
    _check_hybrid(req, models)
    _check_draft(req, models)
    _check_devices(req, gpus)
    _check_formats(req, gpus)
    _check_exllama(req)
    _check_backend(req, gpus)
    _check_tensor_parallel(req, models)
    precision = req["precision"].astype(str)
    # the engines with format names of their own: only they take them, and they take only those
    for engine, names, own, words in (("mlc-llm", MLC_BITS, MLC_BITS, "its quantization names"),
                                      ("mlx-lm", MLX_BITS, MLX_QUANTIZED, "mlx_lm.convert's formats")):
        runs = req["engine"] == engine
        bad = runs & ~precision.isin(tuple(names))
        if bad.any():
            raise ValueError(f"precision {precision[bad].iloc[0]!r} is not accepted for {engine}; accepted: "
                             f"{', '.join(names)} ({words})")
        bad = ~runs & precision.isin(tuple(own))
        if bad.any():
            raise ValueError(f"precision {precision[bad].iloc[0]!r} is not accepted for engine "
                             f"{req['engine'][bad].iloc[0]!r}; accepted: --engine {engine}")
    for _, message in _kv_refusals(req):  # a KV cache type the engine has (KV_ENGINE_TYPES)
        raise ValueError(message)
    mlx = req["engine"] == "mlx-lm"
    seqs = pd.to_numeric(req["max_num_seqs"], errors="coerce").to_numpy(float)
    bad = mlx.to_numpy(bool) & req["kv_precision"].astype(str).isin(tuple(MLX_KV_BITS)).to_numpy(bool) & (seqs > 1)
    if bad.any():
        raise ValueError(f"max_num_seqs {seqs[bad][0]:g} is not accepted for mlx-lm with kv_precision "
                         f"{req['kv_precision'][bad].iloc[0]!r}: a quantized cache is mlx_lm.generate's --kv-bits, one "
                         "sequence (mlx_lm.server has no --kv-bits); accepted: 1, or --kv-precision auto for the server")


# vLLM and SGLang split a layer's attention heads over the tensor-parallel ranks: the query heads evenly, the KV
# heads evenly or, where there are fewer KV heads than ranks, each KV head replicated over tp / kv ranks. vLLM's
# ModelConfig.verify_with_parallel_config (vllm/config.py) raises "Total number of attention heads (N) must be
# divisible by tensor parallel size (T)", and both engines' attention layers (models/llama.py LlamaAttention and
# the others) assert total_num_heads % tp_size == 0 and then total_num_kv_heads % tp_size == 0 or
# tp_size % total_num_kv_heads == 0: such a plan does not start. MLC-LLM's tensor_parallel_shards split the heads
# without replicating any: its attention modules assert num_key_value_heads % tensor_parallel_shards == 0 and
# num_key_value_heads >= tensor_parallel_shards ("Too large tensor_parallel_shards", mlc-ai/mlc-llm
# python/mlc_llm/model/llama/llama_model.py LlamaAttention; the other families' modules alike, some also the query
# heads), so Llama 3.1 70B (8 KV heads) runs on 1, 2, 4 or 8 shards, not 3 or 16. (llama.cpp, transformers and
# ExLlamaV2 split whole layers.)
TP_SPLIT_ENGINES = ("vllm", "sglang")
TP_SHARD_ENGINES = ("mlc-llm",)


def tensor_parallel_accepted(heads, kv_heads, tp, engine=None) -> np.ndarray:
    """Whether vLLM / SGLang (or, with engine 'mlc-llm', MLC-LLM) start a model of `heads` query and `kv_heads` KV
    heads at tensor parallel `tp`."""
    heads, kv_heads, tp = (np.asarray(v, dtype=float) for v in (heads, kv_heads, tp))
    replicate = np.fmod(tp, np.maximum(kv_heads, 1.0)) == 0
    if engine is not None:
        replicate = replicate & ~np.isin(np.asarray(engine, dtype=object), TP_SHARD_ENGINES)
    kv_ok = np.where(kv_heads >= tp, np.fmod(kv_heads, tp) == 0, replicate)
    return (np.fmod(heads, tp) == 0) & kv_ok


def _check_tensor_parallel(req: pd.DataFrame, models: pd.DataFrame) -> None:
    tp_engine = req["engine"].isin(TP_SPLIT_ENGINES + TP_SHARD_ENGINES).to_numpy(bool)
    if not tp_engine.any():
        return
    m = models.set_index("id").loc[req["model"]]
    heads, kvh = m["num_heads"].to_numpy(float), m["num_kv_heads"].to_numpy(float)
    tp = req["gpus"].to_numpy(float)
    engine = req["engine"].to_numpy(object)
    bad = tp_engine & ~tensor_parallel_accepted(heads, kvh, tp, engine)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        ok = [k for k in range(1, 65) if tensor_parallel_accepted(heads[i], kvh[i], k, engine[i])]
        why = ("MLC-LLM's tensor_parallel_shards: its attention asserts KV heads % shards == 0" if engine[i] == "mlc-llm"
               else "vLLM's verify_with_parallel_config, SGLang's attention layers")
        raise ValueError(f"gpus {int(tp[i])} is not accepted for {engine[i]} with {req['model'].iloc[i]}: "
                         f"tensor parallelism splits its {int(heads[i])} attention heads ({int(kvh[i])} KV heads) "
                         f"evenly over the GPUs, which {int(tp[i])} does not ({why}); "
                         f"accepted: {', '.join(str(k) for k in ok[:8])}")


def _check_backend(req: pd.DataFrame, gpus: pd.DataFrame) -> None:
    """--backend: llama.cpp/Ollama only, one of BACKEND_FAMILIES, on a GPU family it runs on."""
    backend = req["backend"].fillna("").astype(str).str.strip().str.lower()
    given = backend != ""
    if not given.any():
        return
    bad = given & ~req["engine"].isin(GGUF_ENGINES)
    if bad.any():
        raise ValueError(f"backend {backend[bad].iloc[0]!r} is not accepted for engine {req['engine'][bad].iloc[0]!r}; "
                         "accepted: --engine llama.cpp or ollama")
    bad = given & ~backend.isin(tuple(BACKEND_FAMILIES))
    if bad.any():
        raise ValueError(f"backend {backend[bad].iloc[0]!r} is not accepted; accepted: {', '.join(BACKEND_FAMILIES)}")
    family = pd.Series(gpu_family(gpus.set_index("id").loc[req["gpu"]].reset_index()), index=req.index)
    ok = pd.Series([f in BACKEND_FAMILIES.get(b, ()) for b, f in zip(backend, family)], index=req.index)
    bad = given & ~ok
    if bad.any():
        b = backend[bad].iloc[0]
        raise ValueError(f"backend {b!r} is not accepted on gpu {req['gpu'][bad].iloc[0]!r} ({family[bad].iloc[0]}); "
                         f"accepted: {', '.join(BACKEND_FAMILIES[b])} GPUs")


def engine_precisions(engine: str) -> tuple[str, ...]:
    """The weight formats an engine takes (what _check accepts), in the order a list offers them: GGUF
    types for llama.cpp / Ollama, MLC's own formats, EXL2 at a few bits (any 2-8 is taken) and GPTQ for
    ExLlamaV2, EXL3 at a few bits (any 1-8 is taken) for ExLlamaV3, else the torch formats with the 2026 ones the engine runs (FORMAT_ENGINES)."""
    if engine in GGUF_ENGINES:
        return tuple(p for p in C.GGUF_FILE_PRECISIONS if not (engine == "ollama" and p in OLLAMA_NOT_LOADED))
    if engine == "mlc-llm":
        return tuple(MLC_BITS)
    if engine == "mlx-lm":
        return tuple(MLX_BITS)
    if engine == "exllamav2":
        return ("exl2-4.0", "exl2-5.0", "exl2-6.0", "exl2-8.0", "exl2-3.0", "exl2-2.5", "int4")
    if engine == "exllamav3":
        return ("exl3-4.0", "exl3-5.0", "exl3-6.0", "exl3-8.0", "exl3-3.0", "exl3-2.5", "exl3-2.0")
    torch = ("bf16", "fp16", "int8", "int4")
    return torch + tuple(fmt for fmt, engines in FORMAT_ENGINES.items() if engine in engines)


# Each ExLlama engine's own weight files: (the precisions' prefix, their bits, the bits accepted, other precisions it
# takes, what the other ExLlama engine is told it takes, the refusal's example); checked by _check_exllama
EXL_FILES = {
    "exllamav3": ("exl3", exl3_bits, EXL3_BITS_RANGE, (), "exl3-B (its EXL3 files)", "(e.g. exl3-4.0; its convert.py -b)"),
    "exllamav2": ("exl2", exl2_bits, EXL_BITS_RANGE, ("int4",), "exl2-B or int4 (its EXL2 / GPTQ files)",
                  "(e.g. exl2-4.0), or int4 (GPTQ)"),
}


def _check_exllama(req: pd.DataFrame) -> None:
    """ExLlamaV3 runs EXL3 weights (exl3-B, 1 <= B <= 8: convert_model.py's -b range), ExLlamaV2 EXL2 (exl2-B, 2 <= B
    <= 8) and GPTQ 4-bit (int4) weights; exl3-B / exl2-B need their engine (ExLlamaV3's first: exl3-B under exllamav2
    is told its engine, as exl2-B under exllamav3 is)."""
    precision = req["precision"].astype(str)
    for own, (prefix, bits_of, (low, high), others, takes, example) in EXL_FILES.items():
        bits = bits_of(precision)
        exl = (req["engine"] == own).to_numpy()
        bad = precision.str.startswith(prefix).to_numpy() & ~exl
        if bad.any():
            engine = str(req["engine"][bad].iloc[0])
            told = f"; {engine} takes {EXL_FILES[engine][4]}" if engine in EXL_FILES else ""
            raise ValueError(f"precision {precision[bad].iloc[0]!r} is not accepted for engine {engine!r}; accepted: "
                             f"--engine {own}{told}")
        bad = exl & ~(precision.isin(others).to_numpy() | ((bits >= low) & (bits <= high)))
        if bad.any():
            raise ValueError(f"precision {precision[bad].iloc[0]!r} is not accepted for {own}; accepted: {prefix}-B with B "
                             f"the bits per weight from {low:g} to {high:g} {example}")


def _format_refusals(req: pd.DataFrame, gpus: pd.DataFrame):
    """(rows, message) for each way the weights' format is refused: bf16 under vLLM on a card without bf16
    (NO_BF16_ARCHITECTURES); fp8 / mxfp4 / nvfp4 under an engine that does not run the format (FORMAT_ENGINES), on a
    card it does not run on (FORMAT_REFUSED_BY_ENGINE, FORMAT_REFUSED_ARCHITECTURES, Apple)."""
    precision = req["precision"].astype(str)
    arch = req["gpu"].map(gpus.set_index("id")["architecture"]).fillna("").astype(str) if "architecture" in gpus \
        else pd.Series("", index=req.index)
    bad = (precision == "bf16") & req["engine"].isin(BF16_REFUSING_ENGINES) & arch.isin(NO_BF16_ARCHITECTURES)
    if bad.any():
        yield bad, (f"precision 'bf16' is not accepted on gpu {req['gpu'][bad].iloc[0]!r} ({arch[bad].iloc[0]}) with "
                    f"engine {req['engine'][bad].iloc[0]!r}; accepted: fp16 (vLLM: 'Bfloat16 is only supported on GPUs "
                    "with compute capability of at least 8.0 ... use float16 instead', vllm/platforms/cuda.py)")
    for fmt, engines in FORMAT_ENGINES.items():
        rows = precision == fmt
        if not rows.any():
            continue
        bad = rows & ~req["engine"].isin(engines)
        if bad.any():
            engine = str(req["engine"][bad].iloc[0])
            # (an engine with its own formats says them: what the user can ask of the engine they chose)
            own = engine_precisions(engine) if engine in (*GGUF_ENGINES, "mlc-llm", *MLX_ENGINES, *EXL_ENGINES) else None
            yield bad, (f"precision {fmt!r} is not accepted for engine {engine!r}; accepted: {', '.join(engines)}"
                        + (f"; {engine} takes {', '.join(own)}" if own else ""))
        for engine in engines:
            refused = FORMAT_REFUSED_BY_ENGINE.get((fmt, engine), FORMAT_REFUSED_ARCHITECTURES[fmt])
            bad = rows & (req["engine"] == engine) & (arch.isin(refused) | arch.str.startswith("apple"))
            if bad.any():
                names = ", ".join(refused[:-1]) + " and " + refused[-1] if len(refused) > 1 else refused[0]
                why = "" if (fmt, engine) in FORMAT_OWN_SOURCE else " (catalog/gpus.yaml compatibility rules)"
                yield bad, (f"precision {fmt!r} is not accepted on gpu {req['gpu'][bad].iloc[0]!r} "
                            f"({arch[bad].iloc[0]}) with engine {engine!r}; accepted: GPUs newer than {names}{why}"
                            + FORMAT_INSTEAD.get((fmt, engine), ""))


def _check_formats(req: pd.DataFrame, gpus: pd.DataFrame) -> None:
    """fp8 / mxfp4 / nvfp4 only on the engines and GPUs that run them (FORMAT_ENGINES)."""
    for _, message in _format_refusals(req, gpus):
        raise ValueError(message)


def _device_refusals(req: pd.DataFrame, gpus: pd.DataFrame):
    """(rows, message) for each way the device itself is refused: ExLlamaV2 on a GPU without CUDA or ROCm
    (EXL_VENDORS), ExLlamaV3 off NVIDIA Ampere or newer (EXL3_VENDORS, EXL3_REFUSED_ARCHITECTURES), more than one Apple device per replica (ONE_DEVICE_VENDORS)."""
    vendor = req["gpu"].map(gpus.set_index("id")["vendor"]).fillna("").astype(str).str.lower()
    bad = (req["engine"] == "exllamav2") & ~vendor.isin(EXL_VENDORS)
    if bad.any():
        v = vendor[bad].iloc[0]
        yield bad, (f"engine 'exllamav2' is not accepted on gpu {req['gpu'][bad].iloc[0]!r} ({v or 'vendor unknown'}); "
                    f"accepted: {' or '.join(EXL_VENDORS)} GPUs (ExLlamaV2's kernels are a CUDA / ROCm extension, its "
                    "setup.py)" + ("; on an Apple GPU: --engine llama.cpp, ollama, mlc-llm or mlx-lm (Metal)" if v == "apple" else ""))
    arch = req["gpu"].map(gpus.set_index("id")["architecture"]).fillna("").astype(str).str.lower() \
        if "architecture" in gpus else pd.Series("", index=req.index)
    exl3 = req["engine"] == "exllamav3"
    bad = exl3 & (~vendor.isin(EXL3_VENDORS) | arch.isin(EXL3_REFUSED_ARCHITECTURES))
    if bad.any():
        v, a = vendor[bad].iloc[0], arch[bad].iloc[0]
        yield bad, (f"engine 'exllamav3' is not accepted on gpu {req['gpu'][bad].iloc[0]!r} ({a or v or 'vendor unknown'}); "
                    "accepted: NVIDIA GPUs of compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell: its EXL3 "
                    "kernels use cp.async and mma.m16n8k16, sm_80; no ROCm build, its README)"
                    + ("; on an Apple GPU: --engine llama.cpp, ollama, mlc-llm or mlx-lm (Metal)" if v == "apple"
                       else "; on AMD: --engine exllamav2 (ROCm) or llama.cpp" if v == "amd"
                       else "; on this card: --engine exllamav2 (EXL2) or llama.cpp" if v == "nvidia" else ""))
    bad = (req["engine"] == "mlx-lm") & ~vendor.isin(MLX_VENDORS)
    if bad.any():
        v = vendor[bad].iloc[0]
        yield bad, (f"engine 'mlx-lm' is not accepted on gpu {req['gpu'][bad].iloc[0]!r} ({v or 'vendor unknown'}); "
                    "accepted: Apple GPUs (MLX's Metal backend, whose wired memory limit is modelled here)")
    count = pd.to_numeric(req["gpus"], errors="coerce").fillna(1).to_numpy(float) if "gpus" in req \
        else np.ones(len(req))
    bad = vendor.isin(ONE_DEVICE_VENDORS).to_numpy(bool) & (count > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        yield pd.Series(bad, index=req.index), (
            f"gpus {count[i]:g} is not accepted on gpu {req['gpu'].iloc[i]!r} ({vendor.iloc[i]}): a Mac is one device "
            "(its GPU addresses the whole unified memory; no multi-device backend on Apple silicon, catalog/gpus.yaml "
            "rule no-multi-device-on-apple); accepted: 1")


def _check_devices(req: pd.DataFrame, gpus: pd.DataFrame) -> None:
    """ExLlamaV2 on NVIDIA / AMD GPUs only, ExLlamaV3 on NVIDIA Ampere or newer; one Apple device per replica (_device_refusals)."""
    for _, message in _device_refusals(req, gpus):
        raise ValueError(message)


def devices_refused(req: pd.DataFrame, gpus: pd.DataFrame) -> np.ndarray:
    """Per request: its engine does not run on its card, or it asks several of a card that is one device (the requests
    serve() would refuse for the device; a search over cards and GPU counts leaves them out, planner/serving.py
    cheapest, as formats_refused does for weights)."""
    out = np.zeros(len(req), dtype=bool)
    for rows, _ in _device_refusals(req, gpus):
        out |= np.asarray(rows, dtype=bool)
    return out


def formats_refused(req: pd.DataFrame, gpus: pd.DataFrame) -> np.ndarray:
    """Per request: its fp8 / mxfp4 / nvfp4 weights are refused by its engine or card (the requests serve() would
    refuse for their format; a search over cards leaves them out, planner/serving.py cheapest)."""
    out = np.zeros(len(req), dtype=bool)
    for rows, _ in _format_refusals(req, gpus):
        out |= rows.to_numpy(bool)
    return out


def vllm_version(text) -> tuple[np.ndarray, np.ndarray]:
    """(major, minor) of each `engine_version` ("0.6", "v0.7.3", "0.10.1rc1" -> 0, 10); NaN where
    the text is empty (the current defaults) or is not a version."""
    parts = pd.Series(text, dtype=object).fillna("").astype(str).str.strip().str.extract(r"^v?(\d+)\.(\d+)(?:[.+\w-]*)$")
    return pd.to_numeric(parts[0], errors="coerce").to_numpy(float), pd.to_numeric(parts[1], errors="coerce").to_numpy(float)


def _version_key(major, minor) -> np.ndarray:
    return np.asarray(major, float) * 1000.0 + np.asarray(minor, float)


def _vllm_group_size(n_a, n_b) -> np.ndarray:
    """The layers per KV-cache group when a model's layers are of two kinds, n_a and n_b of them (vLLM
    kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`): the fewer, or the more where more < 1.5 x fewer, or
    all of one kind where the other has none."""
    fewer, more = np.minimum(n_a, n_b), np.maximum(n_a, n_b)
    return np.where(fewer == 0, more, np.where(more < 1.5 * fewer, more, fewer))


def _check_version(req: pd.DataFrame) -> None:
    text = req["engine_version"].fillna("").astype(str).str.strip()
    given = text != ""
    bad = given & ~req["engine"].isin(("vllm", "sglang"))
    if bad.any():
        raise ValueError(f"engine_version {text[bad].iloc[0]!r} is not accepted for engine {req['engine'][bad].iloc[0]!r}; "
                         "accepted: --engine vllm (its V0/V1 memory profiling) or sglang (its mem-fraction-static default)")
    vllm, sglang = given & (req["engine"] == "vllm"), given & (req["engine"] == "sglang")
    if vllm.any():  # (each check below is a no-op without its rows: the versions are parsed only where given)
        major, minor = vllm_version(text)
        key = _version_key(major, minor)
        bad = vllm.to_numpy() & (np.isnan(key) | (key < _version_key(*VLLM_OLDEST_MODELLED)))
        if bad.any():
            raise ValueError(f"engine_version {text[bad].iloc[0]!r} is not accepted; accepted: a vLLM version X.Y, "
                             f"{VLLM_OLDEST_MODELLED[0]}.{VLLM_OLDEST_MODELLED[1]} or later (e.g. 0.6, 0.7, 0.8, 0.10)")
    nf4 = ((req["engine"] == "vllm") & (req["precision"].astype(str) == "nf4")).to_numpy()
    bad = nf4 & ~vllm_has_bitsandbytes(text) if nf4.any() else nf4
    if bad.any():
        raise ValueError("precision 'nf4' is not accepted for vllm from 0.28 (its current release included): vLLM 0.28 "
                         "removed bitsandbytes (no --quantization bitsandbytes); accepted: --precision int4 (an AWQ/GPTQ "
                         f"checkpoint) or --engine-version {VLLM_BNB_UNTIL[0]}.{VLLM_BNB_UNTIL[1]} or earlier")
    if not sglang.any():
        return
    key = sglang_version(text)
    bad = sglang.to_numpy() & (np.isnan(key) | (key < _sglang_key(*SGLANG_OLDEST_MODELLED)))
    if bad.any():
        raise ValueError(f"engine_version {text[bad].iloc[0]!r} is not accepted; accepted: an SGLang version X.Y.Z, "
                         f"{'.'.join(map(str, SGLANG_OLDEST_MODELLED[:2]))} or later (e.g. 0.4.9, 0.5.2, 0.5.19)")


def tokenizer_group(models: pd.DataFrame, ids) -> np.ndarray:
    """The tokenizer family of each model id (TOKENIZER_GROUP; "" where its family is not listed)."""
    family = models.set_index("id")["family"] if "family" in models else pd.Series(dtype=object)
    fam = pd.Series(list(ids), dtype=object).map(family).fillna("").astype(str)
    return fam.map(TOKENIZER_GROUP).fillna("").to_numpy(object)


def _check_draft(req: pd.DataFrame, models: pd.DataFrame) -> None:
    draft = req["draft_model"].fillna("").astype(str).str.strip()
    given = draft != ""
    tp_asked = pd.to_numeric(req["draft_tensor_parallel_size"], errors="coerce")
    if (tp_asked.notna() & ~given).any():
        raise ValueError("draft_tensor_parallel_size is not accepted without a draft model; accepted: --draft-model ID first")
    if not given.any():
        return
    bad = given & ~req["engine"].isin(DRAFT_ENGINES)
    if bad.any():
        raise ValueError(f"draft_model {draft[bad].iloc[0]!r} is not accepted for engine {req['engine'][bad].iloc[0]!r}; "
                         f"accepted: {', '.join(DRAFT_ENGINES)} (their draft-model speculative decoding)")
    bad = given & ~draft.isin(set(models["id"]))
    if bad.any():
        raise ValueError(f"draft model {draft[bad].iloc[0]!r} is not in the catalog; accepted: a catalog model id "
                         "(see: catalog models), ORG/NAME or a model file, with the target's tokenizer")
    bad = given & (req["engine"] == "sglang") & sglang_before(req["engine_version"], SGLANG_STANDALONE_FROM)
    if bad.any():
        raise ValueError(f"draft_model {draft[bad].iloc[0]!r} is not accepted for sglang {req['engine_version'][bad].iloc[0]!r}: "
                         "its --speculative-algorithm has no STANDALONE (a separate draft model) before 0.5.2 "
                         "(server_args.py); accepted: --engine-version 0.5.2 or later, or leave it out (the current release)")
    rows = req[given]
    d_ids, t_ids = draft[given].to_numpy(object), rows["model"].to_numpy(object)
    g_d, g_t = tokenizer_group(models, d_ids), tokenizer_group(models, t_ids)
    known = (g_d != "") & (g_t != "")
    bad = known & (g_d != g_t)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"draft model {d_ids[i]!r} does not share the tokenizer of {t_ids[i]!r} ({g_d[i]} against {g_t[i]}); "
                         "accepted: a draft model of the target's tokenizer family")
    vocab = models.set_index("id")["vocab_size"]
    v_d = pd.Series(d_ids).map(vocab).to_numpy(float)
    v_t = pd.Series(t_ids).map(vocab).to_numpy(float)
    llama = rows["engine"].to_numpy(object) == "llama.cpp"
    allowed = np.where(llama, LLAMA_DRAFT_VOCAB_DIFFERENCE, 0.0)
    bad = np.abs(v_d - v_t) > allowed
    if bad.any():
        i = int(np.argmax(bad))
        rule = (f"within {LLAMA_DRAFT_VOCAB_DIFFERENCE} tokens of the target's (llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE)"
                if llama[i] else "of the target's size exactly (vLLM/SGLang)")
        raise ValueError(f"draft model {d_ids[i]!r} has a vocabulary of {int(v_d[i]):,} tokens, the target {t_ids[i]!r} "
                         f"{int(v_t[i]):,}; accepted: a draft vocabulary {rule}")
    d_ctx = pd.to_numeric(rows["draft_context"], errors="coerce").to_numpy(float)
    bad = llama & ~np.isnan(d_ctx) & (d_ctx != pd.to_numeric(rows["max_model_len"], errors="coerce").to_numpy(float))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"draft_context {d_ctx[i]:g} is not accepted: {DRAFT_CONTEXT_NOTE}; accepted: the target's "
                         f"--max-model-len ({int(rows['max_model_len'].to_numpy()[i])}) or none")
    d_tp = tp_asked[given].to_numpy(float)
    tp = rows["gpus"].to_numpy(float)
    vllm = rows["engine"].to_numpy(object) == "vllm"
    bad = ~np.isnan(d_tp) & (~vllm | ((d_tp != 1) & (d_tp != tp)))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"draft_tensor_parallel_size {d_tp[i]:g} is not accepted; accepted: 1 or the target's "
                         f"--gpus ({int(tp[i])}), with --engine vllm only")


REQUIRED_COLUMNS = ("model", "gpu", "engine", "precision", "max_model_len")  # serve()'s; the others have defaults
# The catalog columns serve() reads without a default: found by dropping each column of the shipped tables in turn
# under 285 random requests of all eight engines (tests/test_serve_properties.py's drawer); these, and only these,
# ended in a KeyError before the check
SERVE_MODEL_COLUMNS = (*REQUIRED_MODEL_COLUMNS, "source")
SERVE_GPU_COLUMNS = ("id", "vendor", "architecture", "memory_gb", "usable_memory_bytes", "unified_memory", "bandwidth_gbps",
                     "bf16_tflops", "fp16_tflops", "interconnect_gbps", "cloud_usd_per_hour", "cloud_source", "cloud_date")


def serve(requests: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """Serving memory, capacity, speed and cost for every request row (see module docstring).

    requests: columns model, gpu, engine, precision, max_model_len and optionally the
    REQUEST_DEFAULTS columns (gpu_layers -1 = auto; NaN = the engine's default).
    """

    if not isinstance(requests, pd.DataFrame):
        raise ValueError(f"requests must be a table (a pandas DataFrame) with one row per request, got "
                         f"{type(requests).__name__}")
    missing = [col for col in REQUIRED_COLUMNS if col not in requests.columns]
    if missing:  # a KeyError traceback before
        raise ValueError(f"serving requests need the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
                         f"accepted: {', '.join(REQUIRED_COLUMNS)}, and optionally {', '.join(REQUEST_DEFAULTS)}")
    check_tables(models, gpus, SERVE_MODEL_COLUMNS, SERVE_GPU_COLUMNS, gpus_optional=False)
    req = requests.reset_index(drop=True).copy()
    for col, default in REQUEST_DEFAULTS.items():
        if col not in req:
            req[col] = default
        req[col] = req[col].fillna(default) if not (isinstance(default, float) and np.isnan(default)) else req[col]
    for col in ("gpu_memory_utilization", "max_num_seqs", "concurrency", "max_num_batched_tokens"):
        req[col] = pd.to_numeric(req[col], errors="coerce").astype(float)
    req["precision"] = gguf_precision(req["engine"], req["precision"])
    _check(req, models, gpus)
    n = len(req)
    engine = req["engine"].to_numpy(object)
    is_vllm, is_sglang = engine == "vllm", engine == "sglang"
    is_llama, is_hf = np.isin(engine, GGUF_ENGINES), engine == "transformers"
    is_exl = np.isin(engine, EXL_ENGINES)  # ExLlamaV2 and V3 alike (autosplit, host embedding, own cache) ...
    is_exl3 = engine == "exllamav3"  # ... but for V3's own constants (EXL3_*)
    is_mlc = engine == "mlc-llm"
    is_mlx = engine == "mlx-lm"
    draft_id = req["draft_model"].fillna("").astype(str).str.strip().to_numpy(object)
    has_draft = draft_id != ""

    m = models.set_index("id").loc[req["model"]]
    g = gpus.set_index("id").loc[req["gpu"]].reset_index()
    L = m["num_layers"].to_numpy(float)
    h = m["hidden_size"].to_numpy(float)
    ffn = m["intermediate_size"].to_numpy(float)
    V = m["vocab_size"].to_numpy(float)
    heads, kvh = m["num_heads"].to_numpy(float), m["num_kv_heads"].to_numpy(float)
    d = m["head_dim"].fillna(0).to_numpy(float)
    d = np.where(d > 0, d, h / heads)
    params = m["params"].to_numpy(float)
    tied = m["tied_embeddings"].fillna(False).astype(bool).to_numpy()
    tp = req["gpus"].to_numpy(float)

    # Ollama's default context when the request keeps ours (max_model_len is always given here)
    ctx = req["max_model_len"].to_numpy(float)
    kv_prec = req["kv_precision"].astype(str).to_numpy(object)

    # KV policy by engine (issue 15): vLLM's and SGLang's paged allocators reserve every layer at
    # the full length for hybrid sliding-window models and keep MLA's latent ("latent");
    # llama.cpp's SWA cache keeps the window ("windowed"); transformers' DynamicCache holds the
    # whole prefill's K/V of its sliding-window layers (a view of the full torch.cat output,
    # cache_utils.py DynamicSlidingWindowLayer.update: "full", issue 28) and, transformers 5, MLA's latent (the
    # "latent" policy's count for MLA: engine/rules.py kv_policy; 4.x cached the per-head K/V)
    # ExLlamaV2's cache holds every layer at max_seq_len ("latent"); its weights are computed below. ExLlamaV3's too: its
    # command asks -swa_full where the model has sliding-window layers (full pages there, not its default ring state)
    mla = _model_col(m, "kv_lora_rank") > 0
    policy = np.where(is_vllm | is_sglang | is_exl | is_mlc | (is_hf & mla), "latent",
                      np.where(is_hf, "full", "windowed"))
    asked = pd.DataFrame({
        "model": req["model"], "task": "infer",
        "precision": np.where(is_exl | is_mlc | is_mlx, "fp16", req["precision"].to_numpy(object)),
        "batch": 1, "seq": ctx.astype(int), "kv_precision": np.where(is_exl | is_mlc | is_mlx, "fp16", kv_prec),
        "allow_long_context": True, "gpus": 1, "kv_policy": policy,
    })
    est = estimate(asked, models)
    weights = est["weights_bytes"].to_numpy(float)
    kv_token = est["kv_cache_context_bytes"].to_numpy(float) / ctx  # whole model, one token (at the context)
    # llama.cpp / Ollama with a quantized cache: its K/V values in ggml blocks (GGML_KV_BLOCK_BYTES), where the estimate
    # counts 1 or 0.5 bytes a value. The values are the difference to the same cache in f16 (the rest of kv_token, a
    # linear-attention layer's state per sequence, is in its own dtype whatever the cache type)
    block_bytes = pd.Series(kv_prec, dtype=object).map(LLAMA_KV_TYPES).map(GGML_KV_BLOCK_BYTES).to_numpy(float)
    blocked = np.flatnonzero(is_llama & ~np.isnan(block_bytes))
    if len(blocked):
        f16 = estimate(asked.iloc[blocked].assign(kv_precision="fp16").reset_index(drop=True), models)
        b = pd.Series(kv_prec[blocked], dtype=object).map(C.KV_BYTES).to_numpy(float)
        values = (f16["kv_cache_context_bytes"].to_numpy(float) / ctx[blocked] - kv_token[blocked]) / (2.0 - b)
        kv_token[blocked] += values * (block_bytes[blocked] - b)
    # each model's parameters by part (ExLlamaV2's and MLC's weights, vLLM's MXFP4 padding, the MoE split below)
    counts = architecture_counts(m)
    # the routed experts' bytes (all experts of every MoE layer, at the linear layers' bits)
    linear_bits = _linear_bits(req["precision"])
    expert_bytes = np.asarray(counts["experts"], dtype=float) * linear_bits / 8.0
    # which engines hold a mixture of experts' routed experts in 16 bits (HF_FUSED_EXPERTS_16BIT): the estimate counts
    # nf4 / int8 (bitsandbytes) experts so, as transformers does; vLLM and SGLang quantize them with the rest
    experts16 = np.asarray(counts["experts"], dtype=float) * 2.0
    prec_s = req["precision"].astype(str).to_numpy()
    moe_rows = experts16 > 0
    bnb_rows = moe_rows & np.isin(prec_s, ("nf4", "int8"))  # (engine/components.py _bnb_base: 16 bits there)
    weights = np.where(bnb_rows & ~is_hf, weights - experts16 + expert_bytes, weights)
    hf_experts16 = moe_rows & is_hf & np.isin(prec_s, HF_FUSED_EXPERTS_16BIT)
    weights = np.where(hf_experts16 & ~bnb_rows, weights - expert_bytes + experts16, weights)
    expert_bytes = np.where(hf_experts16, experts16, expert_bytes)
    # ExLlamaV2: EXL2/GPTQ linear layers, its head, the fp16 embedding in host RAM; its cache type. ExLlamaV3 the same
    # with EXL3 linear layers (exl3-B) and its head at EXL3_HEAD_BITS
    exl_embed = V * h
    exl_head = V * h  # the output layer, stored (quantized) in the file even where tied
    exl_linear = np.asarray(counts["total"], float) - exl_embed - np.where(tied, 0.0, exl_head)
    exl_bpw = np.where(req["precision"].astype(str).to_numpy() == "int4", C.LINEAR_BITS["int4"],
                       np.where(is_exl3, exl3_bits(req["precision"]), exl2_bits(req["precision"])))
    exl_head_bits = np.where(req["precision"].astype(str).to_numpy() == "int4", 16.0,
                             np.where(is_exl3, EXL3_HEAD_BITS, EXL2_HEAD_BITS))
    exl_weights_gpu = exl_linear * exl_bpw / 8.0 + exl_head * exl_head_bits / 8.0
    exl_host = exl_embed * 2.0
    weights = np.where(is_exl, exl_weights_gpu + exl_host, weights)
    exl_cache_bytes = np.where(is_exl3, pd.Series(kv_prec, dtype=object).map(EXL3_CACHE_BYTES).fillna(2.0).to_numpy(float),
                               pd.Series(kv_prec, dtype=object).map(EXL_CACHE_BYTES).fillna(2.0).to_numpy(float))
    # MLC-LLM and mlx-lm: every weight (embedding and head too) at their format's bits, group scales included (MLC_BITS,
    # MLX_BITS, as _linear_bits reads them)
    weights = np.where(is_mlc | is_mlx, np.asarray(counts["total"], float) * linear_bits / 8.0, weights)
    # its cache: 16-bit K/V, or QuantizedKVCache's B / 8 + 4 / 64 bytes a value (MLX_KV_BITS) for mlx_lm.generate --kv-bits
    mlx_kv_bits = pd.Series(kv_prec, dtype=object).map(MLX_KV_BITS).to_numpy(float)
    mlx_kv_quant = is_mlx & ~np.isnan(mlx_kv_bits)
    kv_token = np.where(mlx_kv_quant, kv_token / 2.0 * (mlx_kv_bits / 8.0 + 4.0 / MLX_KV_GROUP), kv_token)
    kv_token = np.where(is_exl, kv_token * exl_cache_bytes / 2.0, kv_token)
    # the draft model (DRAFT_ENGINES): its weights at the target's precision (a checkpoint's: as stored), its KV per token
    # (llama.cpp keeps the draft's K/V in f16); zero where there is none
    draft_w = np.zeros(n)
    draft_kv_token = np.zeros(n)
    draft_layers = np.zeros(n)
    draft_compute = np.zeros(n)
    draft_kvh = np.ones(n)
    if has_draft.any():
        rows = np.flatnonzero(has_draft)
        d_kv = np.where(np.isin(engine[rows], GGUF_ENGINES), "fp16", kv_prec[rows])
        # a draft read from its checkpoint (--draft-model FILE or ORG/NAME: a record with stored_precision) is loaded
        # as it is stored, not at the target's precision: llama-server's -md loads the GGUF file as it is
        # (tools/server/server.cpp --model-draft), vLLM builds the draft's ModelConfig with the draft's own quantization
        # (vllm/config/speculative.py SpeculativeConfig.quantization, None: the draft checkpoint's quantization_config).
        # An F16 draft GGUF beside a Q4_K_M target was sized at q4_k_m (4.58 GiB for its 14.96)
        d_prec = req["precision"].to_numpy(object)[rows].copy()
        if "stored_precision" in models:
            stored = models.set_index("id")["stored_precision"].reindex(draft_id[rows]).to_numpy(object)
            known = np.array([isinstance(v, str) and v in C.INFER_PRECISIONS for v in stored], dtype=bool)
            d_prec = np.where(known, stored, d_prec)
        d_est = estimate(pd.DataFrame({
            "model": draft_id[rows], "task": "infer", "precision": d_prec, "batch": 1,
            "seq": ctx[rows].astype(int), "kv_precision": d_kv, "allow_long_context": True, "gpus": 1,
            "kv_policy": policy[rows],
        }), models)
        draft_w[rows] = d_est["weights_bytes"].to_numpy(float)
        draft_kv_token[rows] = d_est["kv_cache_context_bytes"].to_numpy(float) / ctx[rows]
        dm = models.set_index("id").loc[draft_id[rows]]
        draft_layers[rows] = dm["num_layers"].to_numpy(float)
        draft_kvh[rows] = dm["num_kv_heads"].to_numpy(float)
        draft_compute[rows] = LLAMA_UBATCH * 4.0 * (dm["vocab_size"].to_numpy(float) + 4.0 * dm["hidden_size"].to_numpy(float)
                                                    + 2.0 * dm["intermediate_size"].to_numpy(float))
    kv_layer_token = kv_token / L

    # --- usable memory -------------------------------------------------------------------
    unified = g["unified_memory"].fillna(False).astype(bool).to_numpy()
    apple_total = g["memory_gb"].to_numpy(float) * C.GIB
    usable = np.where(unified, apple_total * apple_gpu_share(g["memory_gb"]), g["usable_memory_bytes"].to_numpy(float))
    # memory other processes already hold on each GPU (a desktop, another server): see VLLM_UTILIZATION's note
    in_use = pd.to_numeric(req["gpu_memory_in_use_gib"], errors="coerce").to_numpy(float) * C.GIB
    free_at_start = np.maximum(usable - in_use, 0.0)
    family = gpu_family(g)
    backend = req["backend"].fillna("").astype(str).str.strip().str.lower().to_numpy(object)
    backend = np.where(backend == "", pd.Series(family, dtype=object).map(DEFAULT_BACKEND).fillna("").to_numpy(object), backend)

    # --- engine defaults, decided here once ----------------------------------------------
    util = req["gpu_memory_utilization"].to_numpy(float)
    # SGLang's by version (sglang_mem_fraction): the card's memory as nvidia-smi gives it (usable_memory_bytes)
    # (SGLang matches "llama-2" in the model path; the repo as command_lines writes it)
    llama2 = _hf_repos(m, req.index).str.lower().str.contains("llama-2", regex=False).to_numpy(bool)
    vision = _model_col(m, "vision_params")
    reserved_mib = sglang_reserved_mib(usable / C.MIB, tp, mla, llama2, has_draft)
    by_memory = sglang_by_memory(req["engine_version"])  # (else the tensor-parallel table)
    sglang_default = sglang_mem_fraction(usable / C.MIB, tp, req["engine_version"].to_numpy(object),
                                         vision_params=vision, reserved_mib=reserved_mib)
    sglang_reserved = np.where(by_memory, reserved_mib, np.nan) * C.MIB
    util = np.where(np.isnan(util), np.where(is_sglang, sglang_default, np.where(is_vllm, VLLM_UTILIZATION,
                                                                          np.where(is_mlc, MLC_UTILIZATION, 1.0))), util)
    large = (usable >= VLLM_LARGE_GPU_BYTES) & ~req["gpu"].astype(str).str.contains("a100").to_numpy(bool)
    # vLLM by version (see VLLM_V1_FROM): V0 before 0.8, V1's device-name defaults in 0.8.x
    version_key = _version_key(*vllm_version(req["engine_version"]))
    has_version = is_vllm & ~np.isnan(version_key)
    v0 = _vllm_v0(is_vllm, version_key)
    v1_by_name = has_version & ~v0 & (version_key < _version_key(*VLLM_MEMORY_DEFAULTS_FROM))

    def vllm_from(release) -> np.ndarray:  # vLLM V1 rows of that release or later (no version: the current one)
        return is_vllm & ~v0 & (~has_version | (version_key >= _version_key(*release)))
    by_name = req["gpu"].astype(str).str.contains("h100|h200").to_numpy(bool)  # GH200's name holds "h200" too
    large = np.where(v1_by_name, by_name, np.where(v0, False, large))
    seqs = req["max_num_seqs"].to_numpy(float)
    seqs = np.where(np.isnan(seqs), np.where(is_vllm | is_sglang, np.where(large, VLLM_MAX_NUM_SEQS_LARGE, VLLM_MAX_NUM_SEQS),
                                             float(OTHER_MAX_NUM_SEQS)), seqs)
    seqs = np.where(v0 & req["max_num_seqs"].isna().to_numpy(), VLLM_V0_MAX_NUM_SEQS, seqs)
    seqs = np.where(is_mlc & req["max_num_seqs"].isna().to_numpy(), MLC_MAX_BATCH, seqs)
    # mlx-lm: the server's --decode-concurrency; mlx_lm.generate (a quantized cache) runs one sequence
    seqs = np.where(is_mlx & req["max_num_seqs"].isna().to_numpy(), np.where(mlx_kv_quant, 1.0, MLX_DECODE_CONCURRENCY), seqs)

    # --- tensor parallel split: weights and the KV heads (never below one head per GPU) ---
    # MLA's latent (kv_lora_rank + qk_rope_head_dim a layer) has no heads to split: under vLLM and SGLang every
    # tensor-parallel rank caches all of it (vLLM config/model.py ModelConfig.get_num_kv_heads: "if self.use_mla:
    # return 1", one 576-wide head per rank; SGLang's MLATokenToKVPool, head_num 1), as engine/components.py kv_cache
    # counts it for the estimate. Split by the 128 query heads instead, DeepSeek-V3 at TP 8 held 8 times the requests.
    kv_split = np.where(mla & (policy == "latent"), 1.0, np.minimum(tp, kvh) * 1.0)
    # an MXFP4 checkpoint under vLLM: its routed experts as the kernels pad them (vllm_mxfp4_padding_bytes)
    mx_vllm = is_vllm & (req["precision"].astype(str).to_numpy() == "mxfp4") & (_model_col(m, "num_experts") > 0)
    mx_pad = np.zeros(n)
    if mx_vllm.any():
        mx_pad = np.where(mx_vllm, vllm_mxfp4_padding_bytes(
            expert_bytes, h,
            _model_col(m, "expert_intermediate_size"), tp, g["architecture"].to_numpy(object),
            g["segment"].to_numpy(object) if "segment" in g else np.full(n, ""), gpu_family(g)), 0.0)
    checkpoint_bytes = weights  # what the host reads while loading; the padding is made on the GPU
    weights = weights + mx_pad
    model_type = model_types(m["family"] if "family" in m else np.full(n, ""))  # (a custom-<model_type> too)
    # vLLM's rotary embedding keeps a cos/sin table of every position: RotaryEmbedding.__init__ registers the buffer
    # cos_sin_cache of [max_position_embeddings, rotary_dim] (cos and sin halves) in the default dtype, the model's
    # (vllm/model_executor/layers/rotary_embedding.py: `cache = cache.to(torch.get_default_dtype())`), built once per
    # model (get_rope caches its modules) and on every tensor-parallel rank: part of "Model loading took". Llama 3.1's
    # 131,072 positions x 128 are 32 MiB; Llama 4 Scout's 10,485,760 positions 2.5 GiB. Published vLLM 0.19 logs (H100,
    # llm-d-planner's sweep) print weights 0.03 GiB above the tensors for Llama 3.1 8B and Llama 3.3 70B at TP 2, 0.06
    # at --dtype float32, and Scout 2.53 GiB above at TP 4 (53.12 against 50.59). MLA rotates qk_rope_head_dim of a head;
    # Nemotron-H and Granite 4.0-H attend without positions (no table). A decode step reads its positions' rows only.
    # SGLang's copy of the class (python/sglang/srt/layers/rotary_embedding/base.py at 0099dee) keeps the table in fp32
    # on CUDA and ROCm ("cache needs to be in FP32 for numerical stability": `if not (_is_cuda or _is_hip ...):
    # cache = cache.to(dtype)`), and its fused kernel reads it so (forward_cuda): 4 bytes a value.
    rope_dim = np.where(_model_col(m, "qk_rope_head_dim") > 0, _model_col(m, "qk_rope_head_dim"), d)
    act_bytes = np.where(is_sglang | (prec_s == "fp32"), 4.0, 2.0)
    rope_table = np.where((is_vllm | is_sglang) & ~np.isin(model_type, NO_ROPE_MODEL_TYPES),
                          m["max_context"].to_numpy(float) * rope_dim * act_bytes, 0.0)
    w_gpu_full = weights / tp + rope_table
    kv_token_gpu = kv_token / kv_split
    # the draft on the most loaded GPU: split draft_tensor_parallel_size ways (default the target's;
    # at 1 the first GPU holds all of it), its KV heads likewise
    draft_tp = pd.to_numeric(req["draft_tensor_parallel_size"], errors="coerce").to_numpy(float)
    draft_tp = np.where(np.isnan(draft_tp), tp, draft_tp)
    draft_w_gpu = draft_w / draft_tp
    draft_kv_gpu = draft_kv_token / np.minimum(draft_tp, draft_kvh)
    context = np.where(unified, 0.0, C.CUDA_CONTEXT_BYTES)
    # (vLLM 0.19 on: the TP group's NCCL communicator inside the profile, VLLM_TP_NON_TORCH_FROM)
    # (on NVLink cards, as the logs are: a PCIe pair runs fewer NCCL channels, and an RTX PRO 6000 TP 2 log of 0.27
    # holds 2.7 GiB more KV than this term would leave it)
    nvlink = g["form_factor"].astype(str).str.lower().isin(("sxm", "oam", "superchip")).to_numpy() if "form_factor" in g \
        else np.zeros(n, dtype=bool)
    tp_comm = np.where(vllm_from(VLLM_TP_NON_TORCH_FROM) & nvlink, VLLM_TP_NON_TORCH_BYTES, C.NCCL_BYTES)
    non_torch = context + C.CUBLAS_WORKSPACE_BYTES + np.where(tp > 1, tp_comm, 0.0)

    # --- vLLM / SGLang / transformers activation peak --------------------------------------
    batched = req["max_num_batched_tokens"].to_numpy(float)
    # V0: chunked prefill only above 32K tokens (not with a draft model or a sliding window), else
    # the whole max_model_len in one profile forward (SchedulerConfig: max(max_model_len, 2048))
    sliding = _model_col(m, "sliding_window") > 0
    v0_chunked = v0 & (ctx > VLLM_V0_CHUNKED_ABOVE) & ~has_draft & ~sliding
    v0_batched = np.where(v0_chunked, VLLM_V0_CHUNKED_TOKENS, np.maximum(ctx, VLLM_V0_MIN_BATCHED_TOKENS))
    chunked = np.where(v0, np.where(np.isnan(batched), v0_chunked, batched < ctx), True)
    batched = np.where(np.isnan(batched), np.where(v0, v0_batched,
                                                   np.where(large, VLLM_BATCHED_TOKENS_LARGE, VLLM_BATCHED_TOKENS_SMALL)), batched)
    # one layer's transient working set over T tokens: gate+up (2 ffn) and the SwiGLU product
    # (ffn) per GPU, q/k/v (a+2kv)d per GPU, and ~4 hidden-size buffers (residual, norm, attn out)
    per_token_act = 2.0 * (3.0 * ffn / tp + (heads + 2 * kvh) * d / tp + 4.0 * h)
    # the sampler runs after the dummy forward, whose transients are freed by then; the forward's
    # output hidden states stay referenced (profile_run holds them): 2 B x hidden per batched token
    # (vLLM 0.17 on: the Triton kernel's in-place top-k/top-p from 8 sequences, see VLLM_TRITON_SAMPLER_FROM)
    triton = vllm_from(VLLM_TRITON_SAMPLER_FROM) & (seqs >= VLLM_TRITON_SAMPLER_MIN_ROWS)
    sampler = np.where(triton, seqs * V * SAMPLER_BYTES_PER_LOGIT_TRITON + VLLM_TRITON_SAMPLER_BUFFER_ROWS * V * 4.0,
                       seqs * V * SAMPLER_BYTES_PER_LOGIT) + batched * h * 2.0
    # transformers runs its requests as one generate() batch: the sequences asked at once (--concurrency), else
    # --max-num-seqs (default 1); its prefill's working set and logits grow with that batch
    hf_batch = np.maximum(np.where(req["concurrency"].isna().to_numpy(), seqs, req["concurrency"].to_numpy(float)), 1.0)
    hf_tokens = ctx * hf_batch
    # hybrid linear attention (Qwen3-Next, Qwen3.5) and Mamba2 (Granite 4.0-H, Nemotron-H, Bamba): their Gated DeltaNet /
    # Mamba2 layers' fields, read once; n_linear counts both kinds (the layers that keep a state, not K/V)
    n_gdn, n_mamba = _model_col(m, "linear_attention_layers"), _model_col(m, "mamba_layers")
    n_linear = n_gdn + n_mamba
    # the attention layers, which keep K/V (Nemotron-H's MLP blocks keep nothing; Falcon-H1's layers attend beside their
    # Mamba2 mixer)
    n_attention = L - n_gdn - np.where(_model_col(m, "mamba_parallel") > 0, 0.0, n_mamba) - _model_col(m, "mixer_free_layers")
    linear_arch = {c: _model_col(m, c) for c in ("linear_attention_layers", *LINEAR_ATTENTION_FIELDS, "mamba_layers",
                                                 *MAMBA_FIELDS, "mamba_chunk_size")} if (n_linear > 0).any() else None
    # transformers' prefill of a Gated DeltaNet layer without flash-linear-attention, or of a Mamba2 mixer without
    # mamba_ssm (engine/components.py LINEAR_PREFILL_COEF, MAMBA_PREFILL_COEF), where it is the larger working set
    if is_hf.any() and linear_arch is not None:
        lin_held, lin_split = linear_prefill_bytes(linear_arch, h, 2.0)
        per_token_hf = np.where(lin_held > 0, np.maximum(8.0 * h, lin_held)
                                + np.maximum(per_token_act - 8.0 * h, lin_split / tp), per_token_act)
    else:
        per_token_hf = per_token_act
    # transformers' Llama 4 runs every expert on every token (engine/constants.py DENSE_EXPERTS_MODEL_TYPES): its
    # prefill holds E x (h + 4 fe) values a token at the experts' largest moment (engine/components.py, the same term)
    dense_experts = is_hf & np.isin(model_type, C.DENSE_EXPERTS_MODEL_TYPES) & (_model_col(m, "num_experts") > 0)
    if dense_experts.any():
        every = 2.0 * (4.0 * h + dense_experts_prefill_values(h, _model_col(m, "num_experts"),
                                                             _model_col(m, "expert_intermediate_size")) / tp)
        per_token_hf = np.where(dense_experts, np.maximum(per_token_hf, every), per_token_hf)
    activation = np.where(is_hf, hf_tokens * per_token_hf + hf_tokens / ctx * V * 4.0,
                          np.maximum(batched * per_token_act, sampler))
    activation = np.where(is_llama, 0.0, activation)
    # transformers' SDPA prefill of a model with sliding-window layers (issue 28, engine/components.py
    # sliding_mask_window): from the window on one (1, 1, ctx, ctx) bool mask is held through the prefill and
    # three are alive while it is built, before any KV cache, beside the embeddings' output (Gemma 2 and gpt-oss
    # attend eagerly under transformers: their masks are part of the eager scores' working set, below)
    eager_family = np.isin(model_type, C.TRANSFORMERS_EAGER_MODEL_TYPES)
    window = _model_col(m, "sliding_window")
    hf_mask = (is_hf & (_model_col(m, "sliding_window_layers") > 0) & (window > 0) & (ctx >= window)
               & ~eager_family)
    mask_held = np.where(hf_mask, ctx * ctx, 0.0)
    mask_build = np.where(hf_mask, 3.0 * ctx * ctx + hf_tokens * h * 2.0, 0.0)
    # Gemma 2 and gpt-oss under transformers attend eagerly (the rule of engine/components.py attention_path):
    # a prefill layer holds its batch x heads x ctx x ctx scores (16-bit, their fp32 softmax and its cast)
    # and the models' masks, the working set `estimate` counts as its `attention` phase (eager_prefill_terms,
    # one function for both). device_map="auto" splits the layers, not the heads: a layer's scores sit
    # whole on its GPU (tp 1 here). The prefill's peak is the larger of that and the per-token working set.
    eager_hf = is_hf & eager_family
    if eager_hf.any():
        act_b = np.array([C.INFER_ACT_BYTES.get(p, 2) for p in req["precision"].astype(str)], dtype=float)
        e_tok, e_seq = eager_prefill_terms(act_b, h, d, heads, kvh, 1.0, (model_type == "gemma2") * 1.0)
        activation = np.where(eager_hf, np.maximum(activation, hf_tokens * (e_tok + ctx * e_seq)), activation)

    # --- llama.cpp / Ollama per-layer split ------------------------------------------------
    embed_bytes = weights * 0 + V * h * _bits(req["precision"]) / 8.0
    # A tied model's output layer under llama.cpp is a second copy of token_embd: its loaders create `output` from
    # LLM_TENSOR_TOKEN_EMBD with TENSOR_DUPLICATED ("duplicated to allow offloading", src/llama-model.cpp), placed
    # with the output layer (on the GPU where it is offloaded, a real copy; on the host the mapped file's same bytes),
    # while token_embd stays on the host as the input layer. The file stores it at the output tensor's type
    # (src/llama-quant.cpp llama_tensor_get_type: `output.weight`, or token_embd.weight where the model has no output
    # tensor: Q8_0 in Q8_0 and MXFP4_MOE files and where a row is not whole K-quant blocks of 256, else Q6_K; a 16-bit
    # GGUF keeps it in 16 bits). Published loads: Llama-3.2-3B and Qwen3-4B Q4_K_M print
    # a CUDA0 model buffer of 1,918.36 and 2,375.91 MiB, 14% and 11% above the layers alone (docs/serving.md).
    out_bits = np.where(np.isin(prec_s, C.GGUF_16BIT + tuple(C.GGUF_LINEAR_BITS)), 16.0,
                        np.where(np.isin(prec_s, GGUF_OUTPUT_Q8_0) | (h % GGUF_QK_K != 0), C.GGUF_BITS["q8_0"],
                                 C.GGUF_BITS["q6_k"]))
    output_bytes = np.where(tied, V * h * out_bits / 8.0, embed_bytes)
    layer_w = (weights - embed_bytes - np.where(tied, 0.0, output_bytes)) / L
    # MoE: the routed experts' bytes per MoE layer (expert_bytes, above); the rest of a layer
    # (attention, router, shared experts, norms) is averaged
    moe_L = np.asarray(counts["moe_layers"], dtype=float)
    e_layer = np.where(moe_L > 0, expert_bytes / np.maximum(moe_L, 1.0), 0.0)
    ne_layer = layer_w - expert_bytes / L  # a layer without its routed experts (average)
    # MoE models: a dense layer (DeepSeek's first 3, Llama 4 Maverick's even ones) holds a dense
    # MLP (3 h f) where a MoE layer holds its router and shared experts; both share attention and
    # norms (engine/params.py architecture_counts). By parameter count, at the layers' mean bits.
    # Nemotron 3 Nano: its experts and shared expert up and down alone (mlp_ungated, 2 h f), and its dense layers (the
    # M and * blocks) hold no MLP (mlp_free_layers): the dense layers' mean MLP is over those that hold one
    E_col = _model_col(m, "num_experts")
    mats = np.where(_model_col(m, "mlp_ungated") > 0, 2.0, 3.0)
    dense_L = L - moe_L
    mlp_p = mats * h * ffn * np.maximum(dense_L - _model_col(m, "mlp_free_layers"), 0.0) / np.maximum(dense_L, 1.0)
    fs = _model_col(m, "shared_intermediate_size")
    rs_p = (E_col * h + np.where(_model_col(m, "router_bias") > 0, E_col, 0.0) + mats * h * fs
            + np.where((_model_col(m, "shared_expert_gate") > 0) & (fs > 0), h, 0.0))
    outside_p = V * h + np.where(tied, 0.0, V * h) + h
    attn_p = (np.asarray(counts["total"], float) - outside_p - np.asarray(counts["experts"], float)
              - dense_L * mlp_p - moe_L * rs_p) / L
    ne_total = layer_w * L - expert_bytes
    per_param = ne_total / np.maximum(L * attn_p + dense_L * mlp_p + moe_L * rs_p, 1.0)
    first_dense = _model_col(m, "first_dense_layers")
    moe_step = np.maximum(_model_col(m, "moe_layer_step"), 1.0)
    # Nemotron 3 Nano's E blocks stand between its M and * ones (first_dense_layers counts those, not a leading run):
    # taken as spread evenly, x x moe_L / L of them among layers 0..x-1 (its pattern MEMEM*EMEMEM*...: within one layer
    # at every x)
    interleaved = (_model_col(m, "mlp_free_layers") > 0) & (moe_L > 0)
    # llama-server's -c is shared by its -np slots (the command writes -c = slots x --max-model-len), and llama.cpp pads
    # both (src/llama-context.cpp: `cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)`, then without a unified cache
    # `n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256)`, each slot's stream that many cells): -c 1023 -np 3 holds 3 x 512
    # cells (Unsloth Studio's 39 matched allocations, unslothai/unsloth PR #7530: 'ctx 1024 with 3 slots allocates 1536
    # cells')
    llama_ctx = seqs * llama_ctx_seq(ctx * seqs, seqs)
    layer_kv = kv_layer_token * llama_ctx
    compute = LLAMA_UBATCH * 4.0 * (V + 4.0 * h + 2.0 * ffn)  # graph buffer: logits + a layer's f32 temporaries
    # --split-mode layer over several GPUs: each GPU that holds layers runs its part of the graph in its own compute
    # buffer (ggml-backend's scheduler reserves one per backend: llama.cpp logs a "CUDAi compute buffer size" line for
    # each, e.g. ggml-org/llama.cpp PR #14939 and #6122's two-GPU logs, and common/fit.cpp's per-device measurement
    # `ret[i].mb.compute` counts each), the logits only on the output layer's GPU: a layer's temporaries on each other one
    compute_layer = LLAMA_UBATCH * 4.0 * (4.0 * h + 2.0 * ffn)
    # -ngl N counts the output layer first: src/llama-model.cpp `load_tensors` puts layer slots
    # i >= i_gpu_start = max(n_layer + 1 - N, 0) on the GPU, slot n_layer being the output
    # (dev_output = get_layer_buft_list(n_layer)); so N = 1 is the output alone and N = n_layer + 1
    # everything. Each layer's K/V goes to that layer's device (offload_kqv, the default).
    # --n-cpu-moe N keeps the experts of layers 0..N-1 in host RAM (see the module docstring);
    # -ngl keeps layers 0..L-k-1 there whole, so the GPU holds the experts of the MoE layers
    # with index >= max(L - k, N).
    # a draft model (-md, every layer on the GPU: -ngld 99) and its own f16 context of -cd tokens
    # (default: the target's per-slot context) in each slot, plus its compute buffer, come first
    draft_ctx = req["draft_context"].to_numpy(float)
    draft_ctx = np.where(np.isnan(draft_ctx), ctx, draft_ctx)
    llama_draft = np.where(is_llama & has_draft, draft_w + draft_kv_token * draft_ctx * seqs + draft_compute, 0.0)
    # --fit keeps its margin free on each GPU (FIT_MARGIN_BYTES's note), not once over them all
    free = (free_at_start - context - FIT_MARGIN_BYTES) * tp - llama_draft
    layer_full = layer_w + layer_kv

    def col(a):
        """A row column as a (rows, 1) array, for the rows x layer-count grids below."""
        return np.asarray(a, dtype=float)[:, None]

    def moe_below(x, c=np.asarray):
        """MoE layers among layer indices 0..x-1 (dense first, then every step-th layer; spread evenly where
        interleaved)."""
        spread = np.floor(np.maximum(x, 0.0) * c(moe_L) / c(L))
        leading = np.floor(np.maximum(x - c(first_dense), 0.0) / c(moe_step))
        return np.minimum(np.where(c(interleaved) > 0, spread, leading), c(moe_L))

    def ne_bytes(k, c=np.asarray):
        """The routed-expert-free bytes of the last k layers (the ones -ngl puts on the GPU):
        k x the mean for a dense model; for MoE, each layer's own kind."""
        moe_in = c(moe_L) - moe_below(c(L) - k, c)
        exact = k * c(attn_p * per_param) + (k - moe_in) * c(mlp_p * per_param) + moe_in * c(rs_p * per_param)
        return np.where(c(moe_L) > 0, exact, k * c(ne_layer))

    def layer_bytes(k, n_cpu, c=np.asarray):
        """Bytes of the last k repeating layers on the GPUs (weights, K/V, the experts not in host RAM)."""
        gpu_experts = (c(moe_L) - moe_below(np.maximum(c(L) - k, n_cpu), c)) * c(e_layer)
        return ne_bytes(k, c) + k * c(layer_kv) + gpu_experts

    def gpu_bytes(k, n_cpu, out, c=np.asarray, devs=1.0):
        """Bytes on the GPUs with k repeating layers there (and the output if out), experts of
        the first n_cpu layers in host RAM, the compute buffers of devs GPUs; the CUDA context is
        added by the caller. c=col evaluates a rows x grid array."""
        return (layer_bytes(k, n_cpu, c) + out * c(output_bytes) + c(compute)
                + (c(devs) - 1.0) * c(compute_layer))

    grid = np.arange(int(np.nanmax(L)) + 2 if n else 1, dtype=float)[None, :]
    asked = req["gpu_layers"].to_numpy(float)
    asked_cpu = req["cpu_moe_layers"].to_numpy(float)
    # auto (-1): the fewest layers whose experts go to host RAM for the layers asked (all of them
    # when -ngl is auto) to fit; where none does, every layer's experts (--cpu-moe)
    k_target = np.where(asked < 0, L, np.clip(asked - 1, 0, L))
    out_target = np.where(asked < 0, 1.0, (asked >= 1) * 1.0)
    fits_n = (grid <= col(L)) & (gpu_bytes(col(k_target), grid, col(out_target), col, tp) <= col(free))
    n_auto = np.where(fits_n.any(axis=1), np.argmax(fits_n, axis=1), L)
    n_cpu = np.where(asked_cpu == CPU_MOE_AUTO, n_auto, np.where(asked_cpu == CPU_MOE_ALL, L, np.minimum(asked_cpu, L)))
    n_cpu = np.where(moe_L > 0, n_cpu, 0.0)  # a dense model has no expert tensors to move
    # the most repeating layers that fit after the output layer (the fit grid, as --fit does)
    cum = layer_bytes(grid, col(n_cpu), col)  # rows x k: the last k layers' bytes
    fits_k = (grid <= col(L)) & (cum + 1.0 * col(output_bytes) + col(compute) <= col(free))
    fit_layers = np.where(fits_k.any(axis=1), fits_k.sum(axis=1), 0.0)  # k + 1 slots (output first)
    # on several GPUs each keeps the margin on its own (LLAMA_FIT_MIN_CTX's note): llama.cpp's default layout where
    # that leaves every GPU its margin, else --fit's back-to-front fill
    split = is_llama & (engine == "llama.cpp") & (asked < 0) & (tp > 1)
    G = int(np.max(tp[is_llama])) if is_llama.any() else 1
    split_t, split_has = np.zeros((n, G), dtype=int), np.zeros((n, G), dtype=bool)
    split_out = np.full(n, -1)
    if split.any():
        rows = np.flatnonzero(split)
        layers, t3, has3, out3 = _llama_split_fit(cum[rows], L[rows], tp[rows],
                                                  (free_at_start - context - FIT_MARGIN_BYTES - llama_draft / tp)[rows],
                                                  output_bytes[rows], compute[rows], compute_layer[rows])
        fit_layers[rows] = layers
        split_t[rows, :t3.shape[1]], split_has[rows, :has3.shape[1]], split_out[rows] = t3, has3, out3
    # Ollama: (free - minimum - one buffer layer - graph) / layer, strictly less; output last if it fits
    ollama_free = free_at_start * tp - (OLLAMA_MINIMUM_MEMORY + layer_full + compute) * tp
    ollama_layers = np.clip(np.ceil(ollama_free / layer_full) - 1, 0, L)
    ollama_layers = np.where((ollama_layers >= L) & (ollama_free - L * layer_full > output_bytes), L + 1, ollama_layers)
    fit_layers = np.where(engine == "ollama", ollama_layers, fit_layers)
    # on several GPUs the num_gpu slots go to llama-server as -ngl (the default layout, Ollama passing no split): the most
    # of Ollama's count whose default layout fits each GPU (its estimate spreads the layers evenly in bytes)
    ollama_split = (engine == "ollama") & (asked < 0) & (tp > 1)
    if ollama_split.any():
        rows = np.flatnonzero(ollama_split)
        width = cum.shape[1]
        rr, nn = np.repeat(rows, width), np.tile(np.arange(width), len(rows))
        valid = nn <= np.minimum(ollama_layers[rr], L[rr] + 1)
        nn_ok = np.where(valid, nn, 0)
        t, has, out_gpu = _llama_default_layout(nn_ok, tp[rr], G)
        held = _llama_layout_held(cum[rr], t, has, out_gpu, output_bytes[rr], compute[rr], compute_layer[rr])
        ok = valid & (held.max(axis=1) + context[rr] + llama_draft[rr] / tp[rr] <= free_at_start[rr])
        fit_layers[rows] = np.where(ok, nn, 0).reshape(len(rows), width).max(axis=1)
    gpu_layers = np.where(is_llama, np.where(asked < 0, fit_layers, np.minimum(asked, L + 1)), L + 1)
    on_gpu_layers = np.maximum(gpu_layers - 1, 0)  # repeating layers on the GPU
    out_on_gpu = is_llama & (gpu_layers >= 1)
    expert_gpu = np.where(is_llama, (moe_L - moe_below(np.maximum(L - on_gpu_layers, n_cpu))) * e_layer, expert_bytes)
    expert_host = expert_bytes - expert_gpu
    # the GPUs that hold layers, each with its compute buffer: under -ngl N (and Ollama's num_gpu) llama.cpp's default
    # layout spreads the N slots evenly, one GPU at least; under --fit, as chosen above
    gpus_used = np.where(split, np.maximum(split_has.sum(axis=1), 1.0),
                         np.where(tp > 1, np.maximum(np.minimum(tp, gpu_layers), 1.0), 1.0))
    llama_gpu = gpu_bytes(on_gpu_layers, n_cpu, out_on_gpu * 1.0, devs=gpus_used) + context * tp + llama_draft
    # per GPU, the most loaded one: llama.cpp's layers are whole, so its GPUs hold unequal shares (the default layout of
    # 81 slots on 2 GPUs: 41 layers on the first; 39, the output layer and the logits on the second), and the one
    # holding the most is the one that runs out (an average over the GPUs would say "fits" where one of them does not)
    llama_per_gpu = llama_gpu / tp
    # --fit's step-3 layout is no default layout of its -ngl slots: the command writes it as -ts, each GPU's slots
    # (src/llama-model.cpp: splits = the cumulative shares of -ts, slot s on upper_bound(splits, s / N): counts as
    # shares give back those counts)
    tensor_split = np.full(n, "", dtype=object)
    # (Ollama too: from 2026-05-29 it runs every GGUF through llama-server with -ngl num_gpu, the default layout:
    # ollama/ollama 9db4bda "runner: Remove CGO engines, use llama-server exclusively", llm/llama_server.go)
    spread = is_llama & (tp > 1) & (gpu_layers >= 1)
    if spread.any():
        rows = np.flatnonzero(spread)
        t0, has0, out0 = _llama_default_layout(gpu_layers[rows], tp[rows], G)
        from_fit = split[rows]
        t = np.where(from_fit[:, None], split_t[rows], t0)
        has = np.where(from_fit[:, None], split_has[rows], has0)
        out_gpu = np.where(from_fit, split_out[rows], out0)
        held = _llama_layout_held(cum[rows], t, has, out_gpu, output_bytes[rows], compute[rows], compute_layer[rows])
        llama_per_gpu[rows] = held.max(axis=1) + context[rows] + llama_draft[rows] / tp[rows]
        counts = _llama_layout_slots(t, out_gpu)
        own = from_fit & (counts != _llama_layout_slots(t0, out0)).any(axis=1)
        for i in np.flatnonzero(own):
            tensor_split[rows[i]] = ",".join(str(int(c)) for c in counts[i, :int(tp[rows[i]])])
    ne_gpu = ne_bytes(on_gpu_layers)
    llama_host = ((ne_total - ne_gpu) + (L - on_gpu_layers) * layer_kv + expert_host + embed_bytes
                  + np.where(out_on_gpu | tied, 0.0, output_bytes))  # (a tied output on the host: token_embd's bytes)

    # --- KV budget and concurrency ------------------------------------------------------
    budget = np.where(is_sglang, free_at_start, usable) * util  # (SGLang: a fraction of what is free at its start)
    # a draft's weights sit beside the target's; both models' blocks come from one budget
    peak_vllm = w_gpu_full + draft_w_gpu + activation + non_torch
    kv_vllm = budget - peak_vllm
    # --kv-cache-memory-bytes: the KV cache as given; the rest must fit in what is free (VLLM_HYBRID_KV_FROM's note)
    kv_given = pd.to_numeric(req["kv_cache_memory_bytes"], errors="coerce").to_numpy(float)
    pinned = is_vllm & ~np.isnan(kv_given)
    kv_vllm = np.where(pinned, kv_given, kv_vllm)
    pinned_used = peak_vllm + np.nan_to_num(kv_given)  # what a pinned plan holds per GPU
    pinned_oom = pinned & (pinned_used > free_at_start)
    kv_sglang = budget - w_gpu_full - draft_w_gpu - non_torch
    kv_hf = free_at_start - w_gpu_full - non_torch - activation - mask_held
    kv_hf = np.where(w_gpu_full + non_torch + mask_build > free_at_start, 0.0, kv_hf)  # the mask is built before the cache
    # llama.cpp / Ollama allocate K/V for -c tokens (shared by the -np slots) on the layers placed on the GPUs, per GPU:
    # their own allocation (kv_cache_bytes_allocated), not what is left for K/V (set below, after the slots)
    kv_llama = on_gpu_layers * layer_kv / tp
    kv_available = np.select([is_vllm, is_sglang, is_hf], [kv_vllm, kv_sglang, kv_hf], kv_llama)
    kv_available = np.maximum(kv_available, 0.0)
    blocks = np.floor(kv_available / (VLLM_BLOCK_SIZE * (kv_token_gpu + draft_kv_gpu)))
    max_conc_paged = blocks * VLLM_BLOCK_SIZE / ctx
    # vLLM's hybrid KV cache manager (VLLM_HYBRID_KV_FROM): window layers hold their window, not the context
    n_window = np.minimum(_model_col(m, "sliding_window_layers"), L) * sliding
    hybrid = vllm_from(VLLM_HYBRID_KV_FROM) & ~has_draft & (n_window > 0)
    window_tokens = np.full(n, np.nan)
    if hybrid.any():
        n_full = L - n_window
        group = np.where(hybrid, _vllm_group_size(n_full, n_window), 1.0)  # (rows without window layers: any whole number, not used)
        groups_full = np.ceil(n_full / group)
        groups_window = np.ceil(n_window / group)
        chunked_local = np.isin(model_type, LLAMA4_MODEL_TYPES)
        held = np.minimum(window + np.where(chunked_local, 0.0, -1.0) + batched, ctx)
        window_blocks = np.ceil(held / VLLM_BLOCK_SIZE) + np.where(chunked_local, 0.0, 1.0)
        per_request = groups_full * np.ceil(ctx / VLLM_BLOCK_SIZE) + groups_window * window_blocks
        block_bytes = VLLM_BLOCK_SIZE * kv_token_gpu / L * group
        pool = np.floor(kv_available / np.where(hybrid, block_bytes, 1.0))
        blocks = np.where(hybrid, pool, blocks)
        max_conc_paged = np.where(hybrid, pool / per_request, max_conc_paged)
        window_tokens = np.where(hybrid, held, np.nan)
    # SGLang's hybrid SWA pool (SGLANG_SWA_FULL_TOKENS_RATIO): the window layers' share of a token is 0.8
    swa_sglang = (is_sglang & (n_window > 0) & (n_window < L) & by_memory
                  & np.isin(model_type, SGLANG_HYBRID_SWA_MODEL_TYPES))
    if swa_sglang.any():
        per_layer = kv_token_gpu / L
        full_tokens = kv_available / (per_layer * ((L - n_window) + SGLANG_SWA_FULL_TOKENS_RATIO * n_window))
        max_conc_paged = np.where(swa_sglang, np.floor(full_tokens) / ctx, max_conc_paged)
    # hybrid linear attention (VLLM_LINEAR_ATTENTION_FROM's note): vLLM's mamba pages beside the attention pages,
    # SGLang's Mamba pool beside its KV pool
    linear = (is_vllm | is_sglang) & (n_linear > 0)
    linear_block = np.full(n, np.nan)
    if linear.any():
        conv, ssm = recurrent_state(linear_arch, conv_positions="kernel-1", tp=tp)
        ssm_fp32 = np.isin(model_type, LINEAR_SSM_FP32_MODEL_TYPES)
        n_lin = np.maximum(n_linear, 1.0)
        conv_layer, ssm_layer = conv / n_lin / tp * 2.0, ssm / n_lin / tp  # one layer's, per GPU (values x bytes below)
        n_full = n_attention
        kv_b = pd.Series(kv_prec, dtype=object).map(C.KV_BYTES).fillna(2.0).to_numpy(float)
        attn_token = 2.0 * np.maximum(kvh / tp, 1.0) * d * kv_b  # one full-attention layer's K and V of a token, per GPU
        # vLLM: the mamba page (temporal state in the model's dtype unless the config asks float32), the block size
        mamba_page = conv_layer + ssm_layer * np.where(ssm_fp32, 4.0, 2.0)
        block = VLLM_MAMBA_ALIGN_TOKENS * np.maximum(np.ceil(mamba_page / (VLLM_MAMBA_ALIGN_TOKENS * attn_token)), 1.0)
        page = block * attn_token  # (rows without linear layers: one 16-token block, not used)
        group = np.where(linear, _vllm_group_size(n_full, n_linear), 1.0)
        pool = np.floor(kv_available / (page * group))
        per_request = np.ceil(n_full / group) * np.ceil(ctx / block) + np.ceil(n_linear / group)
        vllm_linear = linear & is_vllm
        blocks = np.where(vllm_linear, pool, blocks)
        max_conc_paged = np.where(vllm_linear, pool / per_request, max_conc_paged)
        linear_block = np.where(vllm_linear, block, np.nan)
        # SGLang: r / (1 + r) of the budget to the Mamba pool (bf16 conv, float32 temporal states), the rest to tokens
        per_req = n_linear * (conv_layer + ssm_layer * 4.0)
        mamba_reqs = np.floor(kv_available * SGLANG_MAMBA_FULL_MEMORY_RATIO / (1.0 + SGLANG_MAMBA_FULL_MEMORY_RATIO)
                              / np.where(linear, per_req, 1.0))
        tokens = np.floor(np.maximum(kv_available - mamba_reqs * per_req, 0.0) / (attn_token * np.maximum(n_full, 1.0)))
        sglang_linear = linear & is_sglang
        max_conc_paged = np.where(sglang_linear, np.minimum(tokens / ctx,
                                                            np.floor(mamba_reqs / SGLANG_MAMBA_RUNNING_RATIO)),
                                  max_conc_paged)
        kv_available = np.where(sglang_linear, tokens * attn_token * n_full, kv_available)
    # transformers: the largest batch whose prefill working set (activation, linear in the batch: per sequence,
    # activation / hf_batch) and K/V both fit beside the weights, non-torch memory and the mask; a batch of the
    # KV room alone (kv_available over one request's K/V) would leave its own prefill out (Llama 3.1 8B at 8,192
    # tokens on an RTX 4090: 7 by the KV room, 4 with each sequence's 1 GiB prefill, as `check --task infer` counts)
    hf_room = np.where(w_gpu_full + non_torch + mask_build > free_at_start, 0.0,
                       free_at_start - w_gpu_full - non_torch - mask_held)
    max_conc_hf = np.floor(np.maximum(hf_room, 0.0) / (activation / hf_batch + kv_token_gpu * ctx))
    fits_llama = (llama_per_gpu <= free_at_start) & (gpu_layers >= 0)
    # llama-server slots of max_model_len tokens that fit beside every layer on the GPUs (its -np);
    # where the layers do not all fit, the slots asked (-np, default 1) run with layers on the CPU
    full_gpu = gpu_bytes(L, n_cpu, 1.0, devs=np.where(tp > 1, np.minimum(tp, L + 1.0), 1.0)) - L * layer_kv  # no KV
    draft_slot_kv = np.where(is_llama & has_draft, draft_kv_token * draft_ctx, 0.0)  # a slot's own draft context
    slots_all_on_gpu = np.floor(np.maximum(free + draft_slot_kv * seqs - full_gpu, 0.0) / (kv_token * ctx + draft_slot_kv))
    # llama.cpp on several GPUs: the slots each GPU holds beside its share of the default layout (its layers' K/V of a
    # slot, its share of the draft's), the fewest of them
    several = is_llama & (tp > 1)
    if several.any():
        rows = np.flatnonzero(several)
        t, has, out_gpu = _llama_default_layout(L[rows] + 1, tp[rows], G)
        held = _llama_layout_held(cum[rows], t, has, out_gpu, output_bytes[rows], compute[rows], compute_layer[rows])
        n_j = _llama_layout_layers(t)
        tp_r, slot_draft = tp[rows][:, None], draft_slot_kv[rows][:, None]
        room = (free[rows][:, None] + slot_draft * seqs[rows][:, None]) / tp_r - (held - n_j * layer_kv[rows][:, None])
        need = n_j * (kv_layer_token * ctx)[rows][:, None] + slot_draft / tp_r
        each = np.where(has & (need > 0), np.floor(np.maximum(room, 0.0) / np.where(need > 0, need, 1.0)), np.inf)
        slots_all_on_gpu[rows] = np.minimum(slots_all_on_gpu[rows], each.min(axis=1))
    max_conc_llama = np.where(slots_all_on_gpu >= 1, slots_all_on_gpu, np.where(fits_llama, seqs, 0.0))
    # what is left for K/V on the GPUs, per GPU (kv_cache_bytes_available means this for every engine, as vLLM's
    # budget less its peak): what is free less the CUDA context, --fit's margin, the draft's weights and compute buffer,
    # and the layers placed there without their K/V (their weights, the experts kept there, the output layer, the compute
    # buffer). With every layer there, the slots above are this over one slot's K/V (and its draft context's).
    placed_no_kv = gpu_bytes(on_gpu_layers, n_cpu, out_on_gpu * 1.0, devs=gpus_used) - on_gpu_layers * layer_kv
    kv_room_llama = np.maximum(free + draft_slot_kv * seqs - placed_no_kv, 0.0) / tp
    kv_available = np.where(is_llama, kv_room_llama, kv_available)
    max_concurrency = np.select([is_vllm | is_sglang, is_hf], [max_conc_paged, max_conc_hf], max_conc_llama)
    weights_gpu = np.where(is_llama, (ne_gpu + expert_gpu + np.where(out_on_gpu, output_bytes, 0.0)) / tp,
                           w_gpu_full)
    memory_used = np.where(is_llama, llama_per_gpu, np.where(is_hf, free_at_start, np.where(pinned, pinned_used, budget)))
    # vLLM and MLC-LLM ask for their share of the card's total: they do not start where less is free
    # (with --kv-cache-memory-bytes the share is still checked at start, vllm/v1/worker/utils.py request_memory, and
    # the weights, activation peak, non-torch memory and the pinned cache must fit in what is free)
    refused_at_start = ((is_vllm | is_mlc) & (free_at_start < usable * util)) | pinned_oom
    fits = np.where(is_llama, fits_llama, max_concurrency >= np.where(is_hf, hf_batch, 1.0))  # transformers: its batch
    # ExLlamaV2 (autosplit): the layers split over the GPUs in turn (no tensor-parallel speed-up);
    # a GPU holds its share of the weights and cache, the largest module's scratch, the head's
    # logits over max_input_len tokens, and what the loader keeps free; the cache holds -l tokens
    # for each of max_num_seqs sequences, max_concurrency being the sequences that would fit
    exl_chunk = np.minimum(EXL_MAX_INPUT_LEN, ctx)
    exl_scratch = (exl_chunk * 2.0 * (h + 2.0 * np.maximum(h, ffn)) + 2.0 * np.minimum(h * ffn, EXL_MAX_DQ_SIZE)
                   + exl_chunk * V * 2.0)
    # ExLlamaV3: the MLP's fp32 state over its chunk, the fp16 weight a prefill chunk of more than 144 rows reconstructs
    # (the larger of up/gate's and down's, sliced at 32,768 output columns), the 32 output tokens' logits (EXL3_*)
    exl3_chunk = np.minimum(EXL3_MAX_CHUNK, ctx)
    exl3_reconstruct = np.where(exl3_chunk > EXL3_RECONSTRUCT_ROWS, 2.0 * np.maximum(
        h * np.minimum(ffn, EXL3_RECONSTRUCT_SLICE), ffn * np.minimum(h, EXL3_RECONSTRUCT_SLICE)), 0.0)
    exl_scratch = np.where(is_exl3, exl3_chunk * 4.0 * (h + 2.0 * np.maximum(h, ffn)) + exl3_reconstruct
                           + EXL3_MAX_OUTPUT * V * 4.0, exl_scratch)
    exl_reserve = np.where(is_exl3, EXL3_RESERVE_BYTES, EXL_RESERVE_BYTES)  # per GPU (V3: on each, its reserve_per_device)
    exl_fixed = exl_weights_gpu / tp + exl_scratch + exl_reserve + context
    exl_kv_room = np.maximum(free_at_start - exl_fixed, 0.0)
    exl_conc = np.floor(exl_kv_room / (kv_token / tp * ctx))
    # its own allocation (kv_cache_bytes_allocated): ExLlamaV2 -l tokens x max_num_seqs; ExLlamaV3 one pool of -cs
    # tokens, max_num_seqs x max_model_len rounded up to its 256-token pages (EXL3_PAGE_TOKENS)
    exl_tokens = np.where(is_exl3, np.ceil(ctx * seqs / EXL3_PAGE_TOKENS) * EXL3_PAGE_TOKENS, ctx * seqs)
    exl_cache = kv_token / tp * exl_tokens
    exl_conc = np.where(is_exl3, np.floor(np.floor(exl_kv_room / (kv_token / tp) / EXL3_PAGE_TOKENS)
                                          * EXL3_PAGE_TOKENS / ctx), exl_conc)
    kv_available = np.where(is_exl, exl_kv_room, kv_available)  # what is left for it (the same meaning as vLLM's)
    max_concurrency = np.where(is_exl, exl_conc, max_concurrency)
    weights_gpu = np.where(is_exl, exl_weights_gpu / tp, weights_gpu)
    memory_used = np.where(is_exl, exl_fixed + exl_cache - exl_reserve, memory_used)
    fits = np.where(is_exl, exl_conc >= seqs, fits)
    activation = np.where(is_exl, exl_scratch, activation)
    # MLC-LLM (server mode): config.cc's budget, per shard (its tensor parallelism splits heads)
    mlc_chunk = np.minimum(ctx, MLC_MAX_CHUNK)
    mlc_kv_token = d * np.maximum(kvh / tp, 1.0) * L * 4.0 + 1.25
    mlc_aux = ((seqs + 1) * 88 + mlc_chunk * (heads / tp + 1) * 8 + mlc_chunk * d * (heads + kvh) / tp * 4 + 48 * C.MIB)
    mlc_workspace = mlc_chunk * 4 + seqs * 4 + (2 * mlc_chunk + seqs) * h * 2
    mlc_logits = seqs * 20 + seqs * V * 16.125
    mlc_temp = mlc_chunk * per_token_act
    mlc_kv = np.maximum(usable * util - w_gpu_full - mlc_temp - mlc_aux - mlc_workspace - mlc_logits, 0.0)
    mlc_tokens = np.floor(mlc_kv / mlc_kv_token)
    kv_available = np.where(is_mlc, mlc_kv, kv_available)
    max_concurrency = np.where(is_mlc, np.minimum(mlc_tokens / ctx, seqs), max_concurrency)
    activation = np.where(is_mlc, mlc_temp + mlc_aux + mlc_workspace + mlc_logits, activation)
    kv_token_gpu = np.where(is_mlc, mlc_kv_token, kv_token_gpu)
    fits = np.where(is_mlc, max_concurrency >= 1, fits)
    # mlx-lm (MLX_DECODE_CONCURRENCY's note): the weights and one prefill forward (up to --prompt-concurrency prompts of
    # --prefill-step-size tokens) in the wired share (usable), each request's KVCache of max_model_len tokens rounded
    # up to its 256-token steps; max_concurrency = those requests the rest holds, at most --decode-concurrency
    mlx_prefill = np.where(mlx_kv_quant, 1.0, np.minimum(seqs, MLX_PROMPT_CONCURRENCY)) * np.minimum(ctx, MLX_PREFILL_STEP)
    mlx_activation = mlx_prefill * per_token_act
    mlx_request = kv_token * np.ceil(ctx / MLX_KV_STEP) * MLX_KV_STEP
    mlx_room = np.maximum(free_at_start - weights - mlx_activation, 0.0)
    mlx_conc = np.minimum(np.floor(mlx_room / mlx_request), seqs)
    kv_available = np.where(is_mlx, mlx_room, kv_available)
    max_concurrency = np.where(is_mlx, mlx_conc, max_concurrency)
    activation = np.where(is_mlx, mlx_activation, activation)
    memory_used = np.where(is_mlx, weights + mlx_activation + mlx_request * np.maximum(mlx_conc, 1.0), memory_used)
    fits = np.where(is_mlx, mlx_conc >= 1, fits)
    # the KV cache each engine sets aside itself, per GPU: vLLM, SGLang and MLC-LLM their whole KV budget (blocks, pool,
    # max_total_seq_length), llama.cpp / Ollama -c tokens on the GPU layers, ExLlamaV2 its cache of max_num_seqs x -l;
    # none for transformers, whose DynamicCache grows with each sequence (NaN)
    kv_allocated = np.where(is_llama, kv_llama, np.where(is_exl, exl_cache, np.where(is_hf | is_mlx, np.nan, kv_available)))
    # one request of max_model_len's K/V, per GPU, as each engine counts it (the "does not fit" line names it where the
    # room left holds less than one, planner/serving.py format_serve): the paged engines' by their pools (windows,
    # linear-attention states, draft tokens and block rounding included), the others' per token
    paged_request = np.divide(kv_available, max_concurrency, out=(kv_token_gpu + draft_kv_gpu) * ctx,
                              where=max_concurrency > 0)
    kv_request = np.select([is_vllm | is_sglang, is_llama, is_exl, is_mlx],
                           [paged_request, (kv_token * ctx + draft_slot_kv) / tp, kv_token / tp * ctx, mlx_request],
                           kv_token_gpu * ctx)
    fits = fits & ~refused_at_start
    max_concurrency = np.where(refused_at_start, 0.0, max_concurrency)  # (it does not start: it holds none)

    # --- speed --------------------------------------------------------------------------
    conc = req["concurrency"].to_numpy(float)
    conc = np.where(np.isnan(conc), np.maximum(np.minimum(np.floor(max_concurrency), seqs), 1), conc)
    conc = np.where(is_hf, hf_batch, conc)  # transformers: the one batch it runs (its memory above is that batch's)
    prompt = req["prompt_tokens"].to_numpy(float)
    out_tok = req["output_tokens"].to_numpy(float)
    position = prompt + out_tok / 2.0  # average context read per step
    gpu_frac = np.where(is_llama, on_gpu_layers / L, 1.0)
    # llama.cpp splits layers over GPUs (--split-mode layer), as ExLlamaV2's autosplit does: a token
    # visits them one after the other, so a step reads every GPU's share in turn (no TP speed-up)
    # transformers' device_map="auto" places whole layers on the GPUs in turn too (accelerate's hooks move the hidden
    # state between them): a step reads every GPU's weights one after the other, with no tensor-parallel speed-up
    speed_tp = np.where(is_llama | is_exl | is_hf, 1.0, tp)
    # MoE: a decode step reads, in each MoE layer, the experts its running sequences route to;
    # with c sequences routing k of E experts each, uniformly and independently (assumption),
    # 1 - (1 - k/E)^c of the experts: k/E at batch 1 (the active parameters), all at large c
    read_share = expert_read_share(_model_col(m, "experts_per_token"), _model_col(m, "num_experts"), conc)
    unread = 1.0 - read_share
    # the routed experts a step could read on the GPU(s) it reads (llama.cpp: the layers' it placed
    # there, all GPUs in turn; ExLlamaV2: all of them, in turn; the others: one tensor-parallel rank's)
    gpu_experts = np.where(is_exl | is_hf, expert_bytes, np.where(is_llama, expert_gpu, expert_bytes / tp))
    # (llama.cpp and transformers read every GPU's weights in turn: weights_gpu * tp; gpu_frac is 1 for transformers)
    step_gpu_bytes = np.where(is_llama | is_hf,
                              weights_gpu * tp - gpu_experts * unread + conc * kv_token * position * gpu_frac,
                              weights_gpu - rope_table - gpu_experts * unread + conc * kv_token_gpu * position)
    step_gpu_bytes = np.where(is_exl, exl_weights_gpu - gpu_experts * unread + conc * kv_token * position, step_gpu_bytes)
    step_host_bytes = np.where(is_llama, (ne_total - ne_gpu) + expert_host * read_share
                               + np.where(out_on_gpu, 0.0, output_bytes) + conc * kv_token * position * (1 - gpu_frac), 0.0)
    tflops = g["bf16_tflops"].to_numpy(float)
    tflops = np.where(np.isnan(tflops), g["fp16_tflops"].to_numpy(float), tflops)
    # a token's FLOPs go through its active parameters (= params for a dense model)
    active = est["active_params"].to_numpy(float) if "active_params" in est else params
    pcie_links = pcie_only(g["interconnect"] if "interconnect" in g else np.full(len(g), None))
    step = decode_step_seconds(step_gpu_bytes, step_host_bytes, L, g["bandwidth_gbps"].to_numpy(float), family, engine,
                               req["host_bandwidth_gbps"].to_numpy(float), 2.0 * active * conc, tflops * speed_tp,
                               precision=req["precision"].astype(str).to_numpy(object), backend=backend,
                               expert_bytes=gpu_experts * read_share,  # read at the backend's MoE efficiency
                               tp=speed_tp, step_s=np.where(v0, VLLM_V0_STEP_S, 0.0),
                               pcie=pcie_links)
    prefill = prefill_tokens_per_s(active, L, h, prompt, tflops, engine, speed_tp, family=family)
    # llama.cpp prefills host-resident layers (and host-resident experts) on the GPU, streaming
    # their weights over PCIe: a prompt batch touches every expert
    pcie = g["interconnect_gbps"].fillna(64).to_numpy(float) / 2 * 1e9 * PCIE_EFFICIENCY
    host_w = np.where(is_llama, (ne_total - ne_gpu) + expert_host, 0.0)
    prefill_s = prompt / prefill + np.where(unified, 0.0, host_w / pcie)
    prefill = prompt / prefill_s
    ttft = prefill_s + step
    aggregate = conc / step
    price = g["cloud_usd_per_hour"].to_numpy(float)
    usd_per_m = price * tp / (aggregate * 3600.0) * 1e6
    host_ram = np.where(is_llama, llama_host, checkpoint_bytes)  # safetensors pages during load; GGUF: the host layers
    host_ram = np.where(is_exl, exl_host, host_ram)  # ExLlamaV2: the embedding (the file streams in per module)

    out = req.assign(
        gpu_memory_utilization=util, max_num_seqs=seqs, max_num_batched_tokens=np.where(is_llama | is_exl | is_mlc | is_mlx, np.nan, batched), usable_bytes=usable, budget_bytes=budget,
        gpu_memory_in_use_bytes=in_use, refused_at_start=refused_at_start, kv_cache_memory_bytes=np.where(pinned, kv_given, np.nan),
        weights_bytes=weights, weights_gpu_bytes=weights_gpu, activation_peak_bytes=activation,
        non_torch_bytes=np.where(is_llama | is_exl | is_mlx, context, non_torch),
        compute_buffer_bytes=np.where(is_llama, compute, np.where(is_exl, exl_scratch, 0.0)),
        kv_policy=policy, kv_bytes_per_token=kv_token_gpu, kv_cache_bytes_available=kv_available,
        kv_cache_bytes_allocated=kv_allocated, kv_request_bytes=kv_request,
        num_gpu_blocks=np.where(is_vllm | is_sglang, blocks, np.nan),
        max_concurrency=max_concurrency, gpu_layers=np.where(is_llama, gpu_layers, L), total_layers=L,
        gpu_memory_used_bytes=memory_used, gpu_memory_used_total_bytes=np.where(is_llama, llama_gpu, memory_used * tp),
        tensor_split=np.where(tensor_split == "", None, tensor_split),
        host_ram_bytes=host_ram, fits=fits, concurrency=conc,
        decode_tokens_per_s=1.0 / step, time_per_output_token_ms=step * 1e3, prefill_tokens_per_s=prefill,
        ttft_s=ttft, aggregate_tokens_per_s=aggregate, usd_per_million_tokens=usd_per_m,
        cloud_usd_per_hour=price, price_source=g["cloud_source"].to_numpy(object), price_date=g["cloud_date"].to_numpy(object),
        # the same, under the names estimate --json, budget --json and the sweep CSV give the cloud price's source and date
        # (their price_source / price_date are the card's purchase price): one key, one meaning across subcommands
        cloud_source=g["cloud_source"].to_numpy(object), cloud_date=g["cloud_date"].to_numpy(object),
        cpu_moe_layers=np.where(is_llama, n_cpu, 0.0), expert_bytes=expert_bytes,
        expert_host_bytes=np.where(is_llama, expert_host, 0.0), params=params, active_params=active,
        moe_layers=moe_L,
        # vLLM by version: the profile run's tokens (its activation peak), V0 or V1
        engine_version=np.where(is_vllm | is_sglang, np.where(req["engine_version"].astype(str).str.strip() != "",
                                                              req["engine_version"].astype(str).str.strip(), "current"), None),
        engine_generation=np.where(is_vllm, np.where(v0, "V0", "V1"), None),
        profile_tokens=np.where(is_vllm, batched, np.nan),
        # SGLang (0.5.3 on): what its mem_fraction_static default leaves outside, for activations and CUDA graphs
        engine_reserved_bytes=np.where(is_sglang & np.isnan(req["gpu_memory_utilization"].to_numpy(float)), sglang_reserved, np.nan),
        # where the SGLang fraction comes from: given, the tensor-parallel table (before 0.5.3), the card's memory
        fraction_basis=np.where(is_sglang, np.where(~np.isnan(req["gpu_memory_utilization"].to_numpy(float)), "given",
                                                    np.where(np.isnan(sglang_reserved), "tp", "memory")), None),
        # True where that profile's peak is the sampler's warm-up over max_num_seqs (not the forward)
        sampler_peak=np.where(is_vllm, sampler >= batched * per_token_act, None),
        chunked_prefill=np.where(is_vllm, chunked, None),
        # vLLM's hybrid KV cache manager: the tokens a request holds in each sliding-window (chunked-local) layer
        kv_window_tokens=window_tokens, kv_block_tokens=linear_block, linear_attention_layers=n_gdn, mamba_layers=n_mamba,
        attention_layers=n_attention,
        kv_window_layers=np.where(np.isnan(window_tokens), np.nan, n_window),
        # the draft model (speculative decoding), per GPU like every byte above
        draft_model=np.where(has_draft, draft_id, None),
        draft_weights_bytes=np.where(is_llama, draft_w / tp, draft_w_gpu),
        draft_kv_bytes_per_token=np.where(is_llama, draft_kv_token / tp, draft_kv_gpu),
        draft_kv_cache_bytes=np.where(is_llama, draft_slot_kv * seqs / tp, blocks * VLLM_BLOCK_SIZE * draft_kv_gpu),
        draft_tensor_parallel_size=np.where(has_draft & ~is_llama, draft_tp, np.nan),
        draft_context=np.where(has_draft & is_llama, draft_ctx, np.nan),
        speed_basis=_speed_basis(np.where(is_llama & (backend == "vulkan"), "fitted: one llama.cpp Vulkan run on this GPU family",
                                          pd.Series(list(zip(engine, family)), dtype=object).map(FITTED_SPEED)
                                          .fillna("assumption: not fitted for this engine on this GPU family").to_numpy(object)),
                                 speed_tp, pcie_links, v0),
        backend=np.where(is_llama, backend, None),
    )
    out["command"] = command_lines(out, m, models)
    return out


def _model_col(m: pd.DataFrame, key: str) -> np.ndarray:
    """A model column as floats, the dense Llama value (engine/params.py ARCH_DEFAULTS) where absent."""
    if key not in m:
        return np.full(len(m), float(ARCH_DEFAULTS[key]))
    return pd.to_numeric(m[key], errors="coerce").fillna(ARCH_DEFAULTS[key]).to_numpy(float)


def _linear_bits(precision: pd.Series) -> np.ndarray:
    """Bits per weight of the linear layers (the experts): the GGUF type's, else the format's
    (engine/constants.py LINEAR_BITS)."""
    p = precision.astype(str)
    # GGUF MXFP4_MOE: the experts MXFP4 (4.25 bits), the rest Q8_0 (engine/constants.py GGUF_EXPERT_BITS)
    bits = p.map(C.GGUF_EXPERT_BITS).fillna(p.map(C.GGUF_LINEAR_BITS)).fillna(p.map(C.GGUF_BITS)).fillna(p.map(C.LINEAR_BITS))
    bits = bits.fillna(pd.Series(exl2_bits(p), index=p.index)).fillna(pd.Series(exl3_bits(p), index=p.index))
    # MLC-LLM's and mlx-lm's formats quantize every weight, the experts too (MLC_BITS, MLX_BITS: their group scales
    # included); without these an MoE's experts were counted at 16 bits, more than its whole file
    bits = bits.fillna(p.map(MLC_BITS)).fillna(p.map(MLX_BITS))
    return bits.fillna(16.0).to_numpy(float)


def _bits(precision: pd.Series) -> np.ndarray:
    """Bits per weight of the embedding/output tensors: GGUF quantizes them like the rest;
    the other formats keep them 16-bit (engine/constants.py)."""
    p = precision.astype(str)
    gguf = p.map(C.GGUF_BITS)
    return np.where(gguf.notna(), gguf.astype(float), np.where(p == "fp32", 32.0, 16.0))


# a model's Hugging Face repository in its catalog source URL (planner/cli.py reads one model's the same way)
HF_REPO_PATTERN = r"huggingface\.co/([^/\s]+/[^/\s]+)"


def _hf_repos(m: pd.DataFrame, index) -> pd.Series:
    """Each model row's Hugging Face repo (from its source URL; its id where there is none)."""
    repo = m["source"].astype(str).str.extract(HF_REPO_PATTERN, expand=False)
    return pd.Series(repo.fillna(pd.Series(m.index.astype(str), index=m.index)).to_numpy(), index=index)


# vLLM's draft flags: --speculative-model / --num-speculative-tokens /
# --speculative-draft-tensor-parallel-size up to the V0 era, one --speculative-config JSON
# (SpeculativeConfig's model, num_speculative_tokens, draft_tensor_parallel_size) since; 5 draft
# tokens is an example (vLLM requires a number for a draft model, it has no default).
SPEC_TOKENS = 5
# The weights' format and the KV cache type as each engine's command names them: the plan that was sized, and the one
# `serve --export` writes (planner/exports.py; tests/test_serving_commands.py checks the two agree, flag for flag).
# vLLM and SGLang: --dtype for 16/32-bit weights (vLLM's ModelConfig.dtype choices; SGLang's --dtype takes the same),
# --quantization fp8 (quantized at load; an FP8 checkpoint's own quantization_config is read without it, the same
# bytes), and for vLLM 4-bit weights in-flight bitsandbytes (--quantization bitsandbytes: its loader quantizes a bf16
# checkpoint at load; a pre-quantized AWQ/GPTQ checkpoint, whose method vLLM reads from its config, runs faster);
# other formats are read from the checkpoint's config. The KV cache: vLLM's --kv-cache-dtype fp8 / float16 / bfloat16
# (vllm/config/cache.py CacheDType at 002f10e), SGLang's fp8_e4m3 (its fp16 / bf16 cache is auto, the model's dtype);
# llama.cpp's -ctk / -ctv and Ollama's OLLAMA_KV_CACHE_TYPE (LLAMA_KV_TYPES, OLLAMA_KV_TYPES).
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
VLLM_BNB_WEIGHTS = ("int4", "nf4")
# transformers 5.x keeps every mixture of experts' routed experts as 3-D parameters of one module
# (engine/constants.py BNB_FUSED_EXPERTS's note), and of its quantizers only those with a fused-experts module of
# their own keep them quantized (finegrained FP8: integrations/finegrained_fp8.py FP8Experts; MXFP4: gpt-oss's
# Mxfp4 experts). Read in transformers 5.24.0 (the measuring venv, 2026-12-06):
# - bitsandbytes (nf4, int8) swaps nn.Linear only (integrations/bitsandbytes.py replace_with_bnb_linear): the experts stay
#   in the load dtype;
# - compressed-tensors (the int4 W4A16 checkpoints llm-compressor writes) decompresses them while loading
#   (integrations/compressed_tensors.py CompressedTensorsDequantize: "the MoE experts, which are in the new fused layout
#   and aren't nn.Modules anymore"; quantizers/quantizer_compressed_tensors.py get_load_operations {"dequantize"});
# - GPTQ and AWQ (quantizer_gptq.py, quantizer_awq.py) convert nn.Linear modules alone and declare no serialized
#   names, so base.py update_weight_conversions gives the per-expert qweight tensors no way into the fused parameter.
# Llama 4 is patched back to per-expert nn.Linear (quantizers/base.py MODULES_TO_PATCH_FOR_QUANTIZATION) only for a
# checkpoint already quantized with bitsandbytes or compressed-tensors: a load that quantizes keeps them fused.
# So the transformers engine holds the experts of these precisions in 16 bits; vLLM and SGLang quantize them with the
# rest (their own MoE methods: vLLM's BitsAndBytesMoEMethod, its and SGLang's compressed-tensors / GPTQ / AWQ MoE
# methods), as do llama.cpp, ExLlama, MLC-LLM and mlx-lm from their own files.
HF_FUSED_EXPERTS_16BIT = ("nf4", "int8", "int4")
# vLLM 0.28.0 removed bitsandbytes: its QuantizationMethods (vllm/model_executor/layers/quantization/__init__.py) lists
# "bitsandbytes" up to 0.27.0 and not from 0.28.0 (read in the PyPI wheels; 0.34.0 the same), and ModelConfig's
# _verify_quantization refuses any other name ("Unknown quantization method: bitsandbytes. Must be one of [...]").
# From 0.28 (and at the current release, no --engine-version) int4 is a pre-quantized AWQ/GPTQ checkpoint whose
# method vLLM reads from its config, and nf4 (bitsandbytes' own format) is refused.
VLLM_BNB_UNTIL = (0, 27)


def vllm_v0(engine, engine_version) -> np.ndarray:
    """Per row: a vLLM row of a V0 release (`engine_version` X.Y before VLLM_V1_FROM; empty or 'current': V1)."""
    return _vllm_v0(np.asarray(engine, dtype=object) == "vllm", _version_key(*vllm_version(engine_version)))


def _vllm_v0(is_vllm, version_key) -> np.ndarray:
    return is_vllm & ~np.isnan(version_key) & (version_key < _version_key(*VLLM_V1_FROM))


def vllm_has_bitsandbytes(engine_version) -> np.ndarray:
    """Per row: the vLLM release asked (`engine_version` X.Y; empty or 'current': the current one) still has
    --quantization bitsandbytes (VLLM_BNB_UNTIL)."""
    major, minor = vllm_version(pd.Series(engine_version, dtype=object).replace("current", ""))
    return _version_key(major, minor) <= _version_key(*VLLM_BNB_UNTIL)  # NaN (current) compares False


VLLM_KV_DTYPE = {"fp8": "fp8", "fp16": "float16", "bf16": "bfloat16"}
SGLANG_KV_DTYPE = {"fp8": "fp8_e4m3"}
# SGLang before 0.4.2 takes only fp8_e5m2 for an 8-bit cache (server_args.py --kv-cache-dtype choices, read in the
# 0.4.0 / 0.4.1 wheels by helper-34): the same bytes, so an older version's command names that one
SGLANG_FP8_E4M3_FROM = (0, 4, 2)
# SGLang's STANDALONE speculative algorithm (a separate draft model) is among --speculative-algorithm's choices from
# 0.5.2 (server_args.py; absent from the 0.4.0 - 0.5.1 wheels): a draft model with an older --engine-version is refused
SGLANG_STANDALONE_FROM = (0, 5, 2)
# vLLM before 0.9 loads in-flight bitsandbytes only under --load-format bitsandbytes ("BitsAndBytes quantization ...
# only support 'bitsandbytes' load format", 0.6 - 0.8.1 wheels, helper-34); later releases set it themselves and take it
# too up to 0.27 (the last with bitsandbytes): the command writes it with --quantization bitsandbytes
VLLM_BNB_LOAD_FORMAT = " --load-format bitsandbytes"


def sglang_before(engine_version, since: tuple) -> np.ndarray:
    """Per row: an SGLang --engine-version given and older than `since` (major, minor, patch); False where none is
    given (the current release)."""
    key = sglang_version(engine_version)
    return ~np.isnan(key) & (key < _sglang_key(*since))
# transformers' from_pretrained for the weights sized (engine/constants.py LINEAR_BITS): 16/32-bit in their torch_dtype;
# int8 / int4 / nf4 through bitsandbytes' BitsAndBytesConfig (transformers utils/quantization_config.py): LLM.int8
# (load_in_8bit), NF4 (nf4: 4.127 bits a weight, its block scales quantized again, bnb_4bit_use_double_quant) and
# int4 as bitsandbytes' FP4 at the same layout (4.127 bits, within the 4.25 sized), computing in fp16; the rest of the
# model in float16, the dtype transformers' bitsandbytes quantizers set where none is given
# (quantizers/quantizer_bnb_4bit.py update_torch_dtype: "Overriding torch_dtype=None with torch_dtype=torch.float16 due
# to requirements of bitsandbytes"), as the plan counts it (engine/constants.py FP16_ACTIVATION_WEIGHTS). fp8 and mxfp4
# checkpoints carry their quantization_config: torch_dtype='auto'. Without this the command loaded a 16-bit model
# (Llama 3 8B: 15 GiB of weights where int4 was sized at 5.4).
BNB_4BIT = "load_in_4bit=True, bnb_4bit_quant_type='{}', bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype='float16'"
TRANSFORMERS_LOAD = {
    **{p: f"torch_dtype='{dtype}'" for p, dtype in TORCH_DTYPE.items()},
    "int8": "torch_dtype='float16', quantization_config=BitsAndBytesConfig(load_in_8bit=True)",
    "int4": "torch_dtype='float16', quantization_config=BitsAndBytesConfig(" + BNB_4BIT.format("fp4") + ")",
    "nf4": "torch_dtype='float16', quantization_config=BitsAndBytesConfig(" + BNB_4BIT.format("nf4") + ")",
}


def _g(values: pd.Series) -> pd.Series:
    """Numbers as '%g' writes them (0.9, 0.83, 0.7885): the share planned, whole (planner/exports.py writes it so)."""
    return pd.Series(np.char.mod("%g", pd.to_numeric(values, errors="coerce").to_numpy(float)), index=values.index)


def command_lines(out: pd.DataFrame, m: pd.DataFrame, models: pd.DataFrame | None = None) -> np.ndarray:
    """The command that runs each row's configuration, as text (string columns, no loop over rows). One pass per
    engine present, over that engine's rows: building all eight engines' commands for every row was ~30% of a
    one-request serve()."""
    e = out["engine"].to_numpy(object)
    command = np.empty(len(out), dtype=object)
    for engine in pd.unique(e):
        rows = np.flatnonzero(e == engine)
        command[rows] = np.asarray(_engine_command_lines(engine, out.iloc[rows], m.iloc[rows], models), dtype=object)
    # beyond the model's context (serve --allow-long-context): vLLM and SGLang start only with their variable
    env = long_context_env(e, out["max_model_len"].to_numpy(), m["max_context"].to_numpy())
    # a model that loads only with its own code (REMOTE_CODE_MODEL_TYPES: Kimi K2) under vLLM or SGLang
    remote = np.isin(e, ("vllm", "sglang")) & np.isin(model_types(m["family"] if "family" in m else np.full(len(m), "")),
                                                      C.REMOTE_CODE_MODEL_TYPES)
    command = np.where(remote, command.astype(object) + " --trust-remote-code", command)
    return np.where(env != "", env + " " + command.astype(object), command)


def _engine_command_lines(engine: str, out: pd.DataFrame, m: pd.DataFrame, models: pd.DataFrame | None):
    """command_lines() for rows of one engine (a Series or an array of text)."""
    hf = _hf_repos(m, out.index)
    draft = out["draft_model"] if "draft_model" in out else pd.Series(None, index=out.index, dtype=object)
    has_draft = draft.notna().to_numpy()
    gguf = out["model"].astype(str) + "-" + out["precision"].astype(str).str.upper() + ".gguf"
    ngl = out["gpu_layers"].astype(int).astype(str)
    tp = out["gpus"].astype(int).astype(str)
    seqs = out["max_num_seqs"].astype(int).astype(str)
    length = out["max_model_len"].astype(int).astype(str)
    prec, kv = out["precision"].astype(str), out["kv_precision"].astype(str)
    if engine in ("vllm", "sglang"):
        if has_draft.any() and models is not None:
            dm = models.set_index("id").loc[draft.fillna(out["model"]).to_numpy()]
            draft_hf = _hf_repos(dm, out.index)
        else:
            draft_hf = hf
        share = _g(out["gpu_memory_utilization"])
        # the weights and the KV cache in each engine's words (TORCH_DTYPE's note)
        dtype = prec.map(TORCH_DTYPE)
        torch_weights = np.where(dtype.notna(), " --dtype " + dtype.fillna(""), np.where(prec == "fp8", " --quantization fp8", ""))
    if engine == "vllm":
        d_tp1 = (out.get("draft_tensor_parallel_size", pd.Series(np.nan, index=out.index)) == 1) & (out["gpus"] > 1)
        old_flags = (out.get("engine_generation", pd.Series(None, index=out.index)) == "V0").to_numpy()
        vllm_draft = np.where(
            old_flags,
            " --speculative-model " + draft_hf + f" --num-speculative-tokens {SPEC_TOKENS}"
            + np.where(d_tp1, " --speculative-draft-tensor-parallel-size 1", ""),
            " --speculative-config '{\"model\": \"" + draft_hf + f"\", \"num_speculative_tokens\": {SPEC_TOKENS}"
            + np.where(d_tp1, ", \"draft_tensor_parallel_size\": 1", "") + "}'")
        vllm_draft = np.where(has_draft, vllm_draft, "")
        bnb = vllm_has_bitsandbytes(out["engine_version"] if "engine_version" in out else [""] * len(out))
        vllm_weights = np.where(prec.isin(VLLM_BNB_WEIGHTS) & bnb, " --quantization bitsandbytes" + VLLM_BNB_LOAD_FORMAT,
                                torch_weights)
        vllm_kv = kv.map(VLLM_KV_DTYPE)
        vllm = ("vllm serve " + hf + " --max-model-len " + length
                + np.where(out["kv_cache_memory_bytes"].notna(),
                           " --kv-cache-memory-bytes " + out["kv_cache_memory_bytes"].fillna(0).astype("int64").astype(str),
                           " --gpu-memory-utilization " + share)
                + " --max-num-seqs " + seqs
                + np.where(tp != "1", " --tensor-parallel-size " + tp, "")
                + vllm_weights + np.where(vllm_kv.notna(), " --kv-cache-dtype " + vllm_kv.fillna(""), "") + vllm_draft)
        return vllm
    if engine == "sglang":
        sglang_draft = np.where(has_draft, " --speculative-algorithm STANDALONE --speculative-draft-model-path " + draft_hf, "")
        sglang_kv = kv.map(SGLANG_KV_DTYPE)
        old_fp8 = sglang_before(out["engine_version"] if "engine_version" in out else [""] * len(out), SGLANG_FP8_E4M3_FROM)
        sglang_kv = pd.Series(np.where(old_fp8 & (sglang_kv == "fp8_e4m3").to_numpy(), "fp8_e5m2", sglang_kv.to_numpy(object)),
                              index=sglang_kv.index)
        # (SGLang's tensor-parallel size is --tp-size, server_args.py's field tp_size)
        sglang = ("python -m sglang.launch_server --model-path " + hf + " --context-length " + length
                  + " --mem-fraction-static " + share + " --max-running-requests " + seqs
                  + np.where(tp != "1", " --tp-size " + tp, "") + torch_weights + sglang_draft
                  + np.where(sglang_kv.notna(), " --kv-cache-dtype " + sglang_kv.fillna(""), ""))
        return sglang
    if engine == "llama.cpp":
        draft_gguf = draft.fillna("").astype(str) + "-" + out["precision"].astype(str).str.upper() + ".gguf"
        # (no -cd: current llama.cpp sizes the draft's context as the target's, DRAFT_CONTEXT_NOTE)
        llama_draft = np.where(has_draft, " -md " + draft_gguf + " -ngld 99", "")
        ctx_total = (out["max_model_len"] * out["max_num_seqs"]).astype(int).astype(str)
        # llama.cpp's cache type (LLAMA_KV_TYPES; auto and fp16 are its default f16); a quantized V cache needs flash
        # attention (-fa on)
        ctk = kv.map(LLAMA_KV_TYPES)
        kvtype = np.where(ctk.notna(), " -ctk " + ctk.fillna("") + " -ctv " + ctk.fillna("")
                          + np.where(ctk.fillna("").str.startswith("q"), " -fa on", ""), "")
        # routed experts in host RAM: --cpu-moe where every MoE layer's go, else --n-cpu-moe N
        # (common/arg.cpp; N counts layers from 0, dense ones included)
        n_cpu = out["cpu_moe_layers"].fillna(0).astype(int)
        all_moe = (out["expert_host_bytes"] >= out["expert_bytes"]) & (out["expert_bytes"] > 0)
        cpu_moe = np.where(all_moe & (n_cpu > 0), " --cpu-moe", np.where(n_cpu > 0, " --n-cpu-moe " + n_cpu.astype(str), ""))
        # a vision-language model (issue 25): its projector file beside the language model (llama-server --mmproj,
        # tools/mtmd), counted in the weights as vision_params (engine/components.py weight_bytes)
        vision = (pd.to_numeric(m["vision_params"], errors="coerce").fillna(0).to_numpy() > 0) if "vision_params" in m \
            else np.zeros(len(out), dtype=bool)
        mmproj = np.where(vision, " --mmproj mmproj-" + out["model"].astype(str) + "-f16.gguf", "")
        # (-sm: --split-mode, layers over the GPUs)
        ts = out["tensor_split"] if "tensor_split" in out else pd.Series(None, index=out.index, dtype=object)
        llama = ("llama-server -m " + gguf + mmproj + " -ngl " + ngl + cpu_moe + " -c " + ctx_total + " -np " + seqs
                 + kvtype + np.where(tp != "1", " -sm layer", "") + np.where(ts.notna(), " -ts " + ts.fillna(""), "")
                 + llama_draft)
        return llama
    if engine == "ollama":
        # Ollama: its cache type through the server's environment, which it applies with flash attention on. The model is
        # the GGUF the plan sized (llama-server's file), made an Ollama model by `ollama create` under the name the export's
        # Modelfile is created as: the catalog id (llama-3.1-8b) is no Ollama library name (that is llama3.1:8b), and
        # /api/generate does not pull, so a request for it was answered "model not found" (ollama/ollama @fb307609
        # server/routes.go GenerateHandler; types/model/name.go takes letters, digits, '_', '-', '.')
        okv = kv.map(OLLAMA_KV_TYPES)
        ollama_name = out["model"].astype(str) + OLLAMA_CREATED_SUFFIX
        ollama = ("OLLAMA_NUM_PARALLEL=" + seqs
                  + np.where(okv.notna(), " OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=" + okv.fillna(""), "")
                  + " ollama serve & echo 'FROM ./" + gguf + "' > Modelfile && ollama create " + ollama_name
                  + " -f Modelfile && curl http://localhost:11434/api/generate -d '{\"model\": \""
                  + ollama_name + "\", \"options\": {\"num_gpu\": " + ngl + ", \"num_ctx\": " + length + "}}'")
        return ollama
    if engine == "exllamav2":
        # ExLlamaV2's own runner (README "How to": test_inference.py; model_init.py: -l/--length the
        # cache's max_seq_len, -gs auto its autosplit over several GPUs); the cache type is chosen in code
        exl_dir = out["model"].astype(str) + "-" + out["precision"].astype(str).str.replace("int4", "gptq-4bit") + "bpw"
        exl_dir = exl_dir.str.replace("gptq-4bitbpw", "gptq-4bit", regex=False)
        # A quantized cache (EXL_CACHE_BYTES: fp8/int8 its Q8 cache, int4 Q4): test_inference.py's -p generation always
        # builds an fp16 ExLlamaV2Cache and has no cache flag (turboderp-org/exllamav2 @da07fac test_inference.py, prompt
        # branch), so the command is examples/chat.py, whose -cq8 / -cq4 pick ExLlamaV2Cache_Q8 / _Q4 (its -mode is
        # required; raw takes any model)
        exl_cq = kv.map(EXL_CACHE_FLAGS)
        exl_args = (" -m " + exl_dir + " -l " + out["max_model_len"].astype(int).astype(str)
                    + np.where(tp != "1", " -gs auto", ""))
        exl = np.where(exl_cq.notna(), "python examples/chat.py" + exl_args + " -mode raw " + exl_cq.fillna(""),
                       "python test_inference.py" + exl_args + " -p 'Once upon a time,'")
        return exl
    if engine == "exllamav3":
        # ExLlamaV3's example runner (README "Examples": `python examples/chat.py -m <input_dir> -mode <prompt_mode>`; its
        # model_init.py add_args: -cs / --cache_size the cache pool's tokens, a multiple of 256 (kv_cache_bytes_allocated:
        # max_num_seqs x max_model_len in whole pages), -cq "k_bits,v_bits" a quantized cache (EXL3_CACHE_BITS), -gs auto
        # its autosplit over the visible GPUs, -swa_full full pages for sliding-window layers, as counted here; chat.py:
        # -mode raw takes any model, -prompt runs one prompt and exits). The directory is named as convert.md's example
        # output (llama3.1-70b-instruct-exl3-3.75bpw).
        exl3_dir = out["model"].astype(str) + "-" + prec + "bpw"
        tokens = (np.ceil(out["max_model_len"].to_numpy(float) * out["max_num_seqs"].to_numpy(float) / EXL3_PAGE_TOKENS)
                  * EXL3_PAGE_TOKENS).astype(int).astype(str)
        cq = kv.map(EXL3_CACHE_BITS)
        swa = (_model_col(m, "sliding_window_layers") > 0) & (_model_col(m, "sliding_window") > 0)
        return ("python examples/chat.py -m " + exl3_dir + " -mode raw -cs " + pd.Series(tokens, index=out.index)
                + np.where(cq.notna(), " -cq " + cq.fillna(0).astype(int).astype(str) + "," + cq.fillna(0).astype(int).astype(str), "")
                + np.where(tp != "1", " -gs auto", "") + np.where(swa, " -swa_full", "")
                + " -prompt 'Once upon a time,'")
    if engine == "mlc-llm":
        # MLC-LLM: `mlc_llm serve MODEL --mode server --overrides "..."` (interface/help.py mode_serve;
        # the overrides max_num_sequence, max_total_seq_length, gpu_memory_utilization, context_window_size:
        # mlc-ai/mlc-llm @79d603f0 python/mlc_llm/cli/serve.py EngineConfigOverride.from_str). context_window_size is
        # the plan's max_model_len: serve passes it as max_single_sequence_length and to the JIT compile
        # (serve/engine_base.py model_compile_overrides), whose prefill chunk is min(context window, 8192), the chunk sized
        # above (MLC_MAX_CHUNK); without it the model's whole context is taken and a longer request admitted
        mlc_total = np.floor(out["kv_cache_bytes_available"] / out["kv_bytes_per_token"]).fillna(0).astype(int).astype(str)
        mlc = ("mlc_llm serve HF://mlc-ai/" + hf.str.split("/").str[-1] + "-" + out["precision"].astype(str) + "-MLC --mode server"
               + " --overrides \"max_num_sequence=" + out["max_num_seqs"].astype(int).astype(str) + ";max_total_seq_length="
               + mlc_total + ";context_window_size=" + length + ";gpu_memory_utilization=" + out["gpu_memory_utilization"].round(3).astype(str)
               + np.where(tp != "1", ";tensor_parallel_shards=" + tp, "") + "\"")
        return mlc
    if engine == "mlx-lm":
        # mlx-lm: mlx-community's conversion where it publishes that format under <Name>-<B>bit (MLX_COMMUNITY_BITS), the
        # model's own repository in bf16 (mlx-lm loads Hugging Face safetensors), else the user's `mlx_lm.convert` output
        # (MLX_CONVERT_FLAGS: -q --q-bits 3, -q --q-mode mxfp4, --dtype float16) in a folder of that name. The server's
        # --decode-concurrency is the plan's max_num_seqs, --prefill-step-size the chunk sized; a quantized cache is
        # mlx_lm.generate's --kv-bits (one sequence, the server has none)
        name = hf.str.split("/").str[-1]
        community = prec.map(MLX_COMMUNITY_BITS)
        convert = prec.map(MLX_CONVERT_FLAGS)
        folder = name + "-" + prec.str.replace("mlx-", "", regex=False)
        mlx_model = np.where(community.notna(), "mlx-community/" + name + "-" + community.fillna(""),
                             np.where(convert.notna(), folder, hf))
        mlx_prep = np.where(convert.notna(), "mlx_lm.convert --hf-path " + hf + convert.fillna("") + " --mlx-path " + folder
                            + " && ", "")
        mlx_kv = kv.map({k: str(v) for k, v in MLX_KV_BITS.items()})
        mlx = np.where(mlx_kv.notna(),
                       mlx_prep + "mlx_lm.generate --model " + mlx_model + " --kv-bits " + mlx_kv.fillna("")
                       + f" --kv-group-size {MLX_KV_GROUP} --max-tokens "
                       + out["output_tokens"].fillna(128).astype(int).astype(str) + " --prompt -",
                       mlx_prep + "mlx_lm.server --model " + mlx_model + " --decode-concurrency " + seqs
                       + f" --prefill-step-size {MLX_PREFILL_STEP}")
        return mlx
    # transformers: the weights as sized (TRANSFORMERS_LOAD), bitsandbytes' config where they are quantized by it
    load = prec.map(TRANSFORMERS_LOAD)
    hf_cmd = ("python -c \"from transformers import AutoModelForCausalLM"
              + np.where(load.fillna("").str.contains("BitsAndBytesConfig"), ", BitsAndBytesConfig", "")
              + "; AutoModelForCausalLM.from_pretrained('" + hf + "', device_map='auto', "
              + load.fillna("torch_dtype='auto'") + ")\"")
    return hf_cmd


# --- Each engine's own context when `serve` is given no --max-model-len -------------------------------------------
# (planner/serving.py default_model_len plans with it; a separate block: nothing above reads it)
# The engines that read the model's own context from its config.json when their flag is left out (the catalog's
# max_context is that max_position_embeddings); the launch command then leaves the flag out too, since the engine
# derives the same length itself, and a figure stated from the catalog could differ from its own derivation (vLLM
# refuses a --max-model-len above what it derives, LONG_CONTEXT_ENV):
# - vLLM: vllm/config/model.py ModelConfig.max_model_len "Model context length (prompt and output). If unspecified,
#   will be automatically derived from the model config." (vllm-project/vllm @18ec662, via the public code index)
# - SGLang: python/sglang/srt/server_args.py --context-length "The model's maximum context length. Defaults to None
#   (will use the value from the model's config.json instead)." (sgl-project/sglang @469c63e, via the public code index)
# - ExLlamaV2: exllamav2/config.py ExLlamaV2Config.prepare reads max_seq_len from config.json's max_sequence_length,
#   model_max_length, max_position_embeddings, max_seq_len or n_positions (else 2048) (@7532969), and
#   exllamav2/model_init.py init sets it from -l only where given (`if args.length: config.max_seq_len = args.length`),
#   and exllamav2/cache.py's cache takes `max_seq_len if max_seq_len != -1 else self.model.config.max_seq_len`
#   (@f25f653): test_inference.py / examples/chat.py without -l build the cache at the model's context
# - MLC-LLM: python/mlc_llm/model/llama/llama_model.py LlamaConfig.__post_init__ takes context_window_size from
#   config.json's max_position_embeddings (or max_sequence_length) when mlc-chat-config leaves it 0 (mlc-ai/mlc-llm
#   @01ced33), and serve/engine_base.py's server mode admits a sequence of min(its models' context_window_size)
CONTEXT_FROM_MODEL_ENGINES = ("vllm", "sglang", "exllamav2", "mlc-llm")
# ExLlamaV3: examples/chat.py calls model_init.add_args(..., default_cache_size = 32768) (examples/chat.py:620-625;
# exllamav3/model_init.py:14 and :102 `-cs / --cache_size ... default: {default_cache_size}`, 8192 for other callers),
# and model_init.py:271-291 builds Cache(model, max_num_tokens = args.cache_size): a 32,768-token pool whatever the
# model's context (turboderp-org/exllamav3 @4f8ad01, 2026-08-08, read via fetch); its sequences share it
EXL3_DEFAULT_CACHE_TOKENS = 32768
# Ollama: server/routes.go (ollama/ollama @fb307609, 2026-08-21, read via fetch) sets its default num_ctx when neither
# the request, the Modelfile nor OLLAMA_CONTEXT_LENGTH gives one (usesAutomaticNumCtx) from the total VRAM of every GPU
# it found, `totalVRAM += gpu.TotalMemory - envconfig.GpuOverhead()` (OLLAMA_GPU_OVERHEAD, default 0), with "slightly
# lower thresholds (47/23 GiB vs. 48/24 GiB)": >= 47 GiB 262144, >= 23 GiB 32768, else 4096 (routes.go:2043-2056; its
# docs/context-length.mdx @01562a7, via the public code index: "< 24 GiB VRAM: 4k context, 24-48 GiB VRAM: 32k context,
# >= 48 GiB VRAM: 256k context").
# llm/server.go:112-116 NewLlamaServer then lowers a num_ctx above the GGUF's trained context to it ("requested
# context size too large for model"). (Not modelled: sched.go reduceAutoNumCtxForLoadOOM retries a load that ran out
# of memory once at the next lower tier, 32768 then 4096; the plan offloads layers as Ollama's estimate does instead.)
OLLAMA_CONTEXT_TIERS_GIB = ((47, 262144), (23, 32768), (0, 4096))
# llama.cpp (llama-server without -c): common/common.h `n_ctx = 0 // context size, 0 == context the model was trained
# with`, `fit_params = true`, `fit_params_target = 1024 * 1024*1024 // margin per device` (FIT_MARGIN_BYTES) and
# `fit_params_min_ctx = 4096 // minimum context size to set when trying to reduce memory use` (via the public code
# index); and
# common/fit.cpp common_params_fit_impl (ggml-org/llama.cpp @08033df, via the public code index; the snapshot is too
# large to fetch, so cited by function and code, not line): step 1 an automatic n_ctx is the trained context (x the
# slots without a unified cache); each device's free memory (ggml_backend_dev_memory) less its use (model + context +
# compute, measured per device; the host's buffers apart, not counted) is compared with its own margin
# (`projected_free_per_device[id] < margins[id]`): nothing changes where every device keeps it. Step 2 only where the
# total falls short (`global_surplus = sum_projected_free - sum of margins[id]` < 0): it lowers an automatic context by
# linear interpolation between the trained context and the minimum towards `sum_used_target = sum_free - sum of
# margins`, rounded down to 256 tokens (x the slots), never below fit_params_min_ctx. On one device it is then done
# (`if (nd <= 1) { ... entire model can be fit by reducing context; return; }`); on several it first keeps back
# `(nd + 1) * model_per_layer / (hp_nex == 0 ? 2 : 6)` (model_per_layer = the devices' model bytes / the GPU layers:
# whole layers, or MoE tensors, waste about half of one per device) and goes on to step 3 ("should be fit across
# devices"). Where the total suffices but one device lacks its margin, the context stays and step 3 moves layers.
# Step 3 (dense; a user's -ngl aborts it: "n_gpu_layers already set by user") sets `targets[id] = dmds_full[id].free -
# margins[id]` and fills the devices back to front ("the last device has the output layer, which cannot be a partial
# layer"), each the most of the remaining layers whose measured use stays within its target, writing tensor_split; the
# rest stays in host RAM. Without changes the default split applies (src/llama-model.cpp: the n_layer + 1 slots by
# each device's free memory, the output slot on the last). engine/serving.py _llama_split_fit does steps 1 and 3 on
# identical GPUs; planner/serving.py _llama_fit_context step 2. Not modelled: --fit's MoE steps (dense-only layers
# first, then experts overflowing to the next device), the pipeline-parallel copies of the compute buffers
# (src/llama-context.cpp, n_copies with every layer on several GPUs), GPUs of different sizes. A trained context at
# or below the minimum is kept ("<= the min. context size ... no change").
LLAMA_FIT_MIN_CTX = 4096
LLAMA_FIT_CTX_ALIGN = 256
# transformers and mlx-lm allocate no cache ahead of the requests (DynamicCache and mlx-lm's KVCache grow with each
# sequence): no context of the engine's own to plan with, so --max-model-len stays required there
CONTEXT_REQUIRED_ENGINES = {
    "transformers": "transformers preallocates no KV cache (its DynamicCache grows with each sequence)",
    "mlx-lm": "mlx-lm preallocates no KV cache (its KVCache grows in 256-token steps with each sequence)",
}


def _llama_default_layout(slots, tp, width):
    """llama.cpp's default --split-mode layer layout of `slots` -ngl slots (the output layer's the last) on tp identical
    GPUs: src/llama-model.cpp load_tensors puts slot s = il - i_gpu_start on device upper_bound(splits, s / slots), splits
    being the devices' cumulative shares of free memory (j / tp here), so GPU j holds slots ceil(j x slots / tp) up to
    ceil((j + 1) x slots / tp). Per GPU j < width (rows x width): t, the repeating layers GPUs j, j + 1, ... hold (they
    are the model's last ones); whether it holds any slot; and (rows) the GPU holding the output slot (none without)."""
    N = np.asarray(slots).astype(int)[:, None]
    T = np.asarray(tp).astype(int)[:, None]
    j = np.arange(width)[None, :]
    start = np.where(j < T, -(-(j * N) // T), N)
    end = np.where(j < T, -(-((j + 1) * N) // T), N)
    t = np.maximum(N - 1 - start, 0)  # the repeating-layer slots (all but the last, the output) from GPU j on
    out_gpu = np.where(N[:, 0] >= 1, ((N[:, 0] - 1) * T[:, 0]) // np.maximum(N[:, 0], 1), -1)
    return t, end > start, out_gpu


def _llama_layout_held(cum, t, has, out_gpu, output, compute, compute_layer):
    """The bytes each GPU of a layout holds (rows x GPUs): its repeating layers (the last t_j less the last t_j+1, from
    cum: rows x k, the bytes of the last k layers with their K/V and the experts kept there), the output layer and the
    compute buffer with the logits on the output's GPU, a layer's temporaries on each other GPU holding a slot."""
    tt = np.concatenate([t, np.zeros((len(t), 1), dtype=int)], axis=1)
    last = np.take_along_axis(cum, tt, axis=1)
    out = np.arange(t.shape[1])[None, :] == np.asarray(out_gpu)[:, None]
    return (last[:, :-1] - last[:, 1:] + has * np.asarray(compute_layer, dtype=float)[:, None]
            + out * np.asarray(output + compute - compute_layer, dtype=float)[:, None])


def _llama_layout_layers(t):
    """Each GPU's repeating layers in a layout (rows x GPUs): t_j less t_j+1."""
    return t - np.concatenate([t[:, 1:], np.zeros((len(t), 1), dtype=t.dtype)], axis=1)


def _llama_layout_slots(t, out_gpu):
    """Each GPU's -ngl slots in a layout (rows x GPUs): its repeating layers and the output slot."""
    return _llama_layout_layers(t) + (np.arange(t.shape[1])[None, :] == np.asarray(out_gpu)[:, None])


def _llama_split_fit(cum, L, tp, target, output, compute, compute_layer):
    """llama.cpp's layers on tp identical GPUs under --gpu-layers auto (common/fit.cpp common_params_fit_impl, LLAMA_FIT_MIN_CTX's
    note), for rows of one engine: (the -ngl slots it places, counting the output layer; and the layout as
    _llama_default_layout gives it: t, has, out_gpu).
    cum: rows x k, the bytes of the last k repeating layers (nondecreasing in k); target: what each GPU may hold, its free
    memory less the CUDA context, the draft's share and --fit's margin (`targets[id] = dmds_full[id].free - margins[id]`).
    Step 1 keeps the default layout (_llama_default_layout of the n_layer + 1 slots) where every GPU stays within its
    target. Else step 3 fills back to front: the last GPU takes the output layer, the logits and the most layers that
    fit, each GPU before it the most of the layers left (whole layers, contiguous); the rest stay in host RAM. Loops
    over the GPU count only (numpy over the rows)."""
    rows, width = cum.shape
    Li = L.astype(int)
    tpi = tp.astype(int)
    G = int(tpi.max())
    k = np.arange(width)[None, :]
    valid = k <= Li[:, None]

    def last_bytes(n):
        """the last n layers' bytes (n per row)"""
        return np.take_along_axis(cum, np.clip(n, 0, Li)[:, None].astype(int), axis=1)[:, 0]

    # step 1: the default layout
    t1, has1, out1 = _llama_default_layout(Li + 1, tpi, G)
    default_ok = (_llama_layout_held(cum, t1, has1, out1, output, compute, compute_layer) <= target[:, None]).all(axis=1)
    # step 3: back to front; the output GPU first (output layer, logits, a layer's temporaries)
    first = target - output - compute

    def extend(s, room):
        """the most layers, from the s already placed, whose bytes fit in room more"""
        reach = last_bytes(s) + room
        n_fit = (valid & (cum <= reach[:, None])).sum(axis=1) - 1
        return np.where(room >= 0, np.maximum(n_fit, s), s)

    placed = extend(np.zeros(rows, dtype=int), first)
    back_t, back_has = [placed], [first >= 0]  # from the last GPU back
    for j in range(1, G):
        more = (j < tpi) & (first >= 0) & (placed < Li)
        after = np.where(more, extend(placed, target - compute_layer), placed)
        back_has.append(after > placed)
        placed = after
        back_t.append(placed)
    # GPU j (front to back) is the (tp - 1 - j)-th from the back; the GPUs before the ones reached hold nothing
    back = np.clip(tpi[:, None] - 1 - np.arange(G)[None, :], 0, G - 1)
    inside = np.arange(G)[None, :] < tpi[:, None]
    t3 = np.where(inside, np.take_along_axis(np.stack(back_t, axis=1), back, axis=1), 0)
    has3 = inside & np.take_along_axis(np.stack(back_has, axis=1), back, axis=1)
    out3 = np.where(first >= 0, tpi - 1, -1)
    layers = np.where(first >= 0, placed + 1.0, 0.0)
    ok = default_ok[:, None]
    return (np.where(default_ok, L + 1.0, layers), np.where(ok, t1, t3), np.where(ok, has1, has3),
            np.where(default_ok, out1, out3))


def ollama_default_context(total_vram_bytes: float, trained: float | None) -> tuple[int, str]:
    """Ollama's num_ctx when none is given (OLLAMA_CONTEXT_TIERS_GIB): by the VRAM of all its GPUs, at most the model's
    trained context. (tokens, why)."""
    gib = float(total_vram_bytes) / C.GIB
    tier = next(tokens for floor, tokens in OLLAMA_CONTEXT_TIERS_GIB if gib >= floor)
    floor = next(f for f, t in OLLAMA_CONTEXT_TIERS_GIB if t == tier)
    why = (f"Ollama's default for {gib:.1f} GiB of VRAM in all ({'>= ' + str(floor) if floor else '< 23'} GiB: "
           f"{tier:,} tokens; server/routes.go)")
    if trained is not None and np.isfinite(trained) and 0 < trained < tier:
        return int(trained), why + f", lowered to the model's trained context ({int(trained):,}; llm/server.go)"
    return tier, why
