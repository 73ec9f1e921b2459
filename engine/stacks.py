"""The software stack of a training run: its switches and the recipes that bundle them (issue 13).

Every switch is a scenario column (engine/scenarios.py DEFAULTS / CHOICES, so the CLI's flags,
the dashboard's sidebar and URL and the catalog's reference scenarios all read it from there)
whose default is 'auto'; engine/rules.py resolves 'auto' by the row's `recipe` from `RECIPES`
below. With recipe 'hf' and every switch 'auto' the resolved values are the stack the engine has
always modelled (transformers + peft defaults), so its numbers do not move.

What each value changes in memory (engine/components.py and engine/memory.py hold the terms;
docs/stacks.md says it in words, `stacks_table()` prints the table it shows):

* adapter_dtype   fp32: peft creates lora_A/lora_B in fp32 and keeps them fp32 on a 16-bit base
                  (peft.tuners.tuners_utils.BaseTuner, autocast_adapter_dtype=True; peft 0.13+):
                  4-byte adapter weights, gradients and states, and each adapted module keeps an
                  fp32 copy of its input. bf16: adapters in the base's 16-bit type (torchtune
                  builds the model under training.set_default_dtype(bf16), torchtune 0.7.0
                  recipes/lora_finetune_single_device.py): 2-byte adapters and states, no copies.
* loss            unfused: transformers' ForCausalLMLoss (`logits.float()`, then cross_entropy):
                  16-bit logits + fp32 upcast + fp32 log-softmax output per vocabulary entry
                  (engine/memory.py logits_bytes); under tensor parallel on the whole vocabulary on
                  every GPU, as every loss but `parallel` (transformers' tp_plan gathers lm_head's
                  output, `colwise_rep`; torchtune's plan replicates it: engine/components.py loss_tp). chunked: torchtune CEWithChunkedOutputLoss
                  (torchtune/modules/loss/ce_chunked_output_loss.py, num_output_chunks=8): the
                  16-bit logits of every chunk exist, each chunk is upcast alone; cross_entropy
                  keeps each chunk's fp32 log-softmax output for backward. linear_chunked:
                  torchtune LinearCrossEntropyLoss (torchtune/modules/loss/cross_entropy_loss.py,
                  0.7.0): the output projection runs per chunk inside the loss, so no whole 16-bit
                  logits; each chunk's fp32 log-softmax output is kept. fused: a fused linear +
                  cross-entropy kernel (Liger FusedLinearCrossEntropy, Unsloth's
                  unsloth_fused_ce_loss): logits exist one chunk of about 2 x tokens x h / V tokens
                  at a time (liger_kernel/ops/fused_linear_cross_entropy.py: chunk_size =
                  next_power_of_2(cdiv(BT, cdiv(V, H)))) and the gradient of the hidden states is
                  computed in forward and kept (h values per token). parallel: torch's
                  loss_parallel (torchtitan's default with TP) over vocab-sharded logits, whose
                  DTensor handlers (torch/distributed/tensor/parallel/loss.py) compute log-softmax
                  and its backward by hand: 4 bytes more per logit in forward (the shifted fp32
                  values beside their exp) and 4 more in backward; the unfused loss without TP.
                  compiled: the unfused cross-entropy under torch.compile, as torchtitan builds it
                  with --compile since 2025 (build_cross_entropy_loss): inductor's one reduction
                  kernel keeps the 16-bit logits and two fp32 values per token and allocates only
                  their 16-bit gradient (benchmarks/check_compiled_ce_buffers.py); no recipe sets it
                  by itself (torchtitan's 2024-12 runs did not compile the loss): ask for it.
                  litgpt: LitGPT's finetune/lora.py (and adapter.py) step, read at Lightning-AI/litgpt
                  5895df10, 00af8b0d and HEAD 2685705: `logits = model(input_ids, lm_head_chunk_size=128)`
                  runs lm_head per 128-token chunk and returns the list of 16-bit chunks (litgpt/lora.py
                  GPT.forward); Fabric's wrapper converts that output to the default dtype, fp32
                  (lightning fabric/wrappers.py _FabricModule.forward: `precision.convert_output(output)`;
                  plugins/precision/half.py and bitsandbytes.py convert_output: `dst_type=torch.get_default_
                  dtype()`), every chunk while the 16-bit list is alive (F = 4 bytes, M when the model is
                  fp32: no copy); litgpt/utils.py chunked_cross_entropy then runs cross_entropy per chunk on
                  those fp32 logits, each log_softmax output (F V) kept for backward. Forward 2 F V (the
                  fp32 logits and the log-softmax outputs); backward F V (the saved outputs, each chunk's
                  turned into its gradient as its backward runs) beside the fp32 logits the loop keeps
                  (loop manual: fit's `logits` stays bound through backward, the optimizer step and the
                  next forward, F V). Not counted: the one chunk (batch x 128 tokens) whose nll and
                  log-softmax gradients exist together in backward, 2 x F x V x batch x 128 bytes, which
                  the forward's peak covers from 512 tokens on (its (2F + M) V with the previous step's
                  logits) and which exceeds it below 512 tokens. litgpt_full: finetune/full.py's
                  `model(input_ids)`, whole 16-bit logits converted to fp32, `chunked_cross_entropy(logits[...,
                  :-1, :], ...)`: the shifted logits reshaped to (tokens, V) (a copy at batch >= 2) and
                  split into 128-row chunks: forward 3 F V (fp32 logits, the copy, the log-softmax
                  outputs); backward 2 F V (the chunks' gradients concatenated by split's backward, then
                  the slice's backward's zero-filled (batch, seq, V) beside it) beside the kept F V.
* logits_upcast   loss: transformers >= 4.46 upcast inside the loss function (the engine's model).
                  model: older transformers (LlamaForCausalLM.forward, `logits = logits.float()`
                  then `shift_logits = logits[..., :-1, :].contiguous()`): the fp32 logits and a
                  shifted fp32 copy exist beside the log-softmax output (applies to loss unfused).
                  Not a value: transformers 4.46.0-4.48.x at micro-batch >= 2 (their loss function
                  still copies the shifted fp32 logits; at micro-batch 1 the slice is contiguous and
                  nothing is copied, as under `model`): 4 V per token more in forward than `loss`
                  (benchmarks/check_shifted_logits_copy.py, docs/stacks.md).
* checkpointing   none / full (every decoder layer keeps only its input: transformers'
                  gradient_checkpointing_enable, torchtune enable_activation_checkpointing) /
                  selective (torchtune ac_mode 'selective', selective_ac_option 2: every second layer
                  checkpointed, torchtune/training/activations.py) / offload
                  (Unsloth's use_gradient_checkpointing="unsloth", axolotl 'offload': each layer's
                  input is copied to host RAM and brought back for its backward, so the GPU keeps
                  about two layers' inputs in flight and the host holds the rest: cpu_bytes).
* optimizer_in_backward  on: the optimizer step runs inside backward per parameter and frees its
                  gradient at once (torchtune optimizer_in_bwd, torchtune/training/memory.py
                  register_optim_in_bwd_hooks: register_post_accumulate_grad_hook, step + zero_grad): no full set of gradients; the largest
                  tensor's gradient at a time.
* activation_offload  on: torchtune enable_activation_offloading (training/_activation_offloading.py
                  OffloadActivations saved-tensor hooks): the saved activations (with checkpointing:
                  the layers' inputs) move to host RAM; the GPU keeps about two layers' worth.
* attention       sdpa / flash: the fused kernels keep q, k, v, the output and a log-sum-exp,
                  never the s x s scores (the engine's model; the two are the same in memory).
                  eager: transformers' eager_attention_forward materialises the scores and keeps
                  the fp32 softmax output and its 16-bit copy for backward, (4 + 2) bytes x heads x
                  seq per token per layer, and K and V repeated to every head (engine/components.py
                  attention_seq_bytes); the term grows with seq squared, which the solvers take
                  (the largest batch at a sequence is linear in the batch, the longest context is
                  the root of a quadratic: engine/executor.py).
* compile         on: torch.compile. Modelled only where the library documents a memory effect
                  the engine can derive: a compiled chunked cross-entropy keeps each chunk's
                  16-bit input and 8 bytes per token instead of its fp32 log-softmax output and
                  materialises no fp32 chunk (torchtune CEWithChunkedOutputLoss docstring; inductor
                  fuses upcast + log_softmax + nll and recomputes the softmax in backward:
                  benchmarks/check_compiled_ce_buffers.py).
                  Elsewhere compile changes no term here (its fusion of the norms and SiLU may save
                  some activations; not modelled, the estimate stays on the uncompiled side).
* packing         on: several examples packed into one sequence (torchtune dataset.packed,
                  axolotl sample_packing). No memory term changes: the engine already counts every
                  position of the micro-batch as a real token, which is what packing achieves;
                  without packing, padding makes tokens per step smaller than batch x seq, not the
                  peak (padded positions are computed and stored all the same).
* kbit_prep       on (QLoRA only): peft's prepare_model_for_kbit_training (peft 0.20.1.dev0
                  src/peft/utils/other.py: "cast all non INT8 parameters to fp32", every fp16/bf16
                  parameter that is not Params4bit -> fp32, then enable_input_require_grads and
                  gradient checkpointing), trained under the Trainer's bf16=True autocast
                  (accelerate wraps the model's forward in torch.autocast). What it implies:
                  embed_tokens, lm_head and the norms are held in fp32 (4 bytes each instead of 2:
                  the parameters outside the quantized linears); the embedding's fp32 output and
                  the fp32 norm weights keep the residual stream in fp32 (checkpointed layer inputs
                  4 h bytes, not 2 h; the engine's amp residual R = 4); autocast casts each
                  linear's input to 16-bit (the amp activation model); lm_head's frozen fp32 weight
                  is cast to a 16-bit copy that its matmul keeps for backward (V x h x 2 bytes
                  from forward to the end of lm_head's backward). The 4-bit linears are
                  dequantized by bitsandbytes per call and keep no 16-bit copy. off: the parameters
                  outside the quantized linears stay in the 16-bit load dtype (torchtune, Unsloth's
                  own prepare_model_for_kbit_training, which upcasts only the LoRA parameters:
                  unsloth/models/_utils.py; axolotl converts the norms and embeddings back to the
                  16-bit dtype after it: src/axolotl/loaders/model.py _configure_embedding_dtypes).
* padding         padded (issue 12): the micro-batch holds padding tokens and the model code passes
                  the padding mask to attention. transformers 5.24 drops the mask (SDPA
                  `is_causal=True`) only for a batch it can see is unpadded (masking_utils.py
                  `_ignore_causal_mask_sdpa`); a padded batch, a batch padded to max_length, and every
                  traced or fake-tensor run (utils/import_utils.py `is_tracing`) get a (batch, 1, seq,
                  seq) mask that SDPA keeps in the query's dtype in every layer, and with a mask
                  integrations/sdpa_attention.py repeats the grouped K and V to every head
                  (`use_gqa_in_sdpa` wants no mask, lines 118-127): per layer that saves activations
                  and per token seq + 2 x (heads - kv heads) x head_dim values (engine/components.py
                  attention_seq_bytes). It applies with attention sdpa and packing off only (flash
                  attention unpads to variable-length sequences; a packed batch has no padding).
                  unpadded: no mask is built: batches of equal length, packing, torchtune (its
                  padded_collate_sft returns tokens and labels only, torchtune/data/_collate.py line 77,
                  and its attention calls SDPA with is_causal when no mask is given,
                  torchtune/modules/attention.py line 298). 'padded' is the default of the hf-based
                  recipes because transformers' collators pad every batch to its longest sequence
                  (DataCollatorWithPadding, DataCollatorForSeq2Seq): the larger figure, never the
                  smaller, unless the run is known to be unpadded (measured: docs/accuracy.md).
                  Gemma 2 under 'sdpa' runs eagerly (softcapped scores: transformers'
                  Gemma2PreTrainedModel._supports_sdpa = False; torchtune's Gemma2Attention computes
                  the scores itself, torchtune/models/gemma2/_attention.py), which holds its scores
                  whether the batch is padded or not.
* loop            trainer (issue 28): the step keeps only the loss, as transformers' Trainer does
                  (transformers 5.24 trainer.py training_step lines 2089-2092 and compute_loss lines
                  2172-2205: `outputs = model(**inputs)`, the loss taken out and returned, the
                  outputs dropped before backward), and torchtune's recipes (`del logits` before
                  `loss.backward()`, recipes/full_finetune_single_device.py). manual: the loop people
                  write by hand (Hugging Face's "Train in native PyTorch" tutorial, the `*_no_trainer`
                  examples, accelerate's loop): `out = model(...)`; `out.loss.backward()`;
                  `opt.step()`: the outputs -- the logits (batch x seq x V in the lm_head's dtype) and,
                  with use_cache on, the KV cache of every layer -- stay alive through backward and
                  the optimizer step (measured: tests/data/measured_loops.csv, docs/accuracy.md).
* use_cache       on: the model builds a DynamicCache in the training forward (the model config's
                  default, use_cache=True, in every catalog model): each layer's keys and values are
                  kept by the cache as well as by attention's backward; what the cache alone holds is
                  the frozen layers' K/V (freeze), and where attention repeats K/V to every head
                  (a padded batch under SDPA, eager attention) the un-repeated K/V; with loop manual the
                  whole cache lives until the step ends. Under checkpointing, on means checkpointing
                  applied outside transformers (torch's checkpoint_wrapper / apply_activation_checkpointing,
                  as llama-recipes and ATorch wrap each decoder layer): transformers turns the cache off
                  only under its own gradient checkpointing (modeling_layers.py line 96, utils/generic.py
                  merge_with_config_defaults; 4.31-4.35 LlamaModel.forward `if self.gradient_checkpointing
                  and self.training: use_cache = False`), so a wrapped layer still returns its K/V, and
                  the cache then holds every layer's whole K/V (a checkpointed forward saves none for
                  backward). off: no cache. auto: what the framework decides: off under the Trainer
                  (transformers 5.24 trainer.py line 646 sets model.config.use_cache =
                  TrainingArguments.use_cache, default False, training_args.py line 971) and torchtune (no
                  cache unless setup_caches is called); for loop manual the model config's default (on),
                  but off under checkpointing (transformers' own turns it off).
* flat_params     (ZeRO-3 as FSDP: not under the DeepSpeed recipes, and the engine's ZeRO-1/2 are DeepSpeed's) off: each parameter sharded on its own (FSDP2's fully_shard, DeepSpeed
                  ZeRO-3): the weights a layer runs with are leaf parameters, whose autocast casts are cached.
                  on: FSDP1's FlatParameter (torch.distributed.fsdp.FullyShardedDataParallel): while a unit runs,
                  its module's weights are views of the unsharded flat parameter (_flat_param.py
                  _use_unsharded_views), and autocast caches no cast of a view (aten/src/ATen/autocast_mode.cpp
                  cached_cast: `arg.is_leaf() && !arg.is_view()`), so under checkpointing only the layer that runs
                  and lm_head hold a 16-bit copy, full fine-tuning too. Frozen and trained weights in separate
                  flat parameters (peft's fsdp_auto_wrap_policy, llama-recipes' LoRA-aware policy). mixed: as on,
                  with a decoder layer's frozen weights and its LoRA adapters in one flat parameter
                  (use_orig_params=True, the layer as the unit): the views all require grad, so backward computes
                  every frozen weight's gradient into the flat gradient and keeps its shard (the
                  FullyShardedDataParallel docstring: "the gradient memory usage will be higher than expected
                  (namely, equivalent to not freezing those parameters)"). Both traced on torch 2.13:
                  benchmarks/check_fsdp1_flat_params.py. Every recipe: off (the hf recipe's ZeRO-3 terms were
                  measured under FSDP2; accelerate's FSDP1 is --flat-params on).
* accum_sync      every: one micro-batch a step, or each micro-batch's gradients reduced to their shards at once
                  (accelerate's sync_each_batch; DeepSpeed ZeRO, which accumulates into partitions it holds from the
                  start): no gradient is alive in a forward. last: gradient accumulation, the step's gradients so far
                  alive through the next micro-batches' forward and backward (on one GPU or plain data parallelism the
                  usual gradients; DeepSpeed's ZeRO-2 keeps this rank's partition, grads_in_partition, and its ZeRO-3
                  the partitions counted from the start); under ZeRO-3 as FSDP accumulated under no_sync, reduced only
                  at the last micro-batch: FSDP1's `no_sync()` keeps each
                  unit's gradient unsharded in flat_param.grad ("`.grad` remains the unsharded gradient from prior
                  `no_sync()` iterations", torch/distributed/fsdp/_runtime_utils.py), in the parameters' dtype, a mixed
                  flat parameter's frozen weights too; FSDP2's set_requires_gradient_sync(False) accumulates them
                  unsharded in the reduce dtype (_fsdp_param.py to_accumulated_grad_if_needed; fp32 under mixed
                  precision). So from the first micro-batch's backward to the last one's every trained weight's gradient
                  is whole on each GPU (divided by tensor parallelism only). Lightning Fabric's no_backward_sync is FSDP1's
                  no_sync (LitGPT's finetune scripts accumulate under it); the transformers Trainer takes accelerate's
                  no_sync when gradient_accumulation_steps > 1 unless sync_each_batch. Every recipe but litgpt: every
                  (their default gradient_accumulation_steps is 1).
* checkpointing op (issue 27): torchtitan's selective activation checkpointing, `selective_ac_option
                  "op"` (torchtitan/distributed/activation_checkpoint.py at b5bcd76, `_get_custom_policy`:
                  "Save all compute/comm ops, except every second mm/linear", the count restarting in each
                  block): each decoder layer keeps its input, the outputs of its 1st, 3rd, 5th and 7th
                  matmul (wq, wv, w1, w2 in torchtitan's call order), SDPA's output and log-sum-exp and,
                  under sequence parallel, the two reduce-scatters' outputs; the rest is recomputed in its
                  backward (engine/components.py `_op_saved_bytes`).
* checkpointing module: each decoder layer's attention, MLP and both norms checkpointed separately
                  (NVIDIA NeMo Automodel b4733bdc1, components/distributed/parallelizer.py lines 147-171:
                  DefaultParallelizationStrategy wraps layer.self_attn, layer.mlp, layer.input_layernorm
                  and layer.post_attention_layernorm each in its own checkpoint_wrapper): each layer keeps
                  the four modules' inputs (the residual stream, the normed attention input, the residual
                  after attention, the normed MLP input: MODULE_CHECKPOINT_INPUTS residual-wide tensors,
                  where `full` keeps one); a backward recomputes one module at a time (counted as the
                  whole layer's, as `full`: the upper bound).
* liger           on: Liger's kernels as liger_kernel.transformers' _apply_liger_kernel_to_instance patches a
                  transformers model (HF Trainer use_liger_kernel, LLaMA-Factory enable_liger_kernel,
                  axolotl's liger plugin; NeMo Automodel's default), read at Liger-Kernel v0.6.2:
                  LigerRMSNormFunction saves (X, W, RSTD) (ops/rms_norm.py: the norm's input itself
                  and one fp32 rstd per token) where transformers' RMSNorm keeps an fp32 upcast,
                  its rsqrt and, where the weight trains, the 16-bit normalized copy; LigerSiLUMulFunction
                  saves (a, b) (ops/swiglu.py: gate's and up's outputs) where SiLU and the product keep
                  three f-wide tensors, and its backward writes the gradients of a and b into them in place
                  (two f-wide transients fewer in a layer's backward). Its fused linear cross-entropy replaces the loss where the model
                  is called with labels (lce_forward: HF's Trainer, LLaMA-Factory): a loss left 'auto'
                  becomes `fused`; a loop that computes its loss from the logits itself (NeMo Automodel
                  pops the labels) keeps them: ask --loss unfused. RoPE's kernel keeps what the engine
                  already counts (cos and sin). Every recipe's default: off. An architecture Liger does
                  not patch (LIGER_MODEL_TYPES) runs transformers' own modules, and a recipe that builds
                  its own (outside LIGER_RECIPES) never meets the patches: `on` is decided `off` there
                  (engine/rules.py).
* sequence_parallel  on (issue 27, with tp > 1): the norms and the residual stream between the tensor-
                  parallel regions are sharded on the sequence (Megatron-LM's sequence parallelism,
                  Korthikanti et al. 2022 section 4.2.2; torchtitan's SequenceParallel norms,
                  configs.py enable_sequence_parallel True): the norms' saved tensors and each
                  checkpointed layer input are 1/tp per rank (engine/memory.py layer_activation_bytes).
                  As torch's DTensor plan runs it (torchtitan's), the column-parallel linears' input is
                  all-gathered over the sequence first (PrepareModuleInput / ColwiseParallel with
                  input_layouts Shard(1)) and kept whole for their weights' gradients, lm_head's too
                  (issue 27). off: kept whole on every rank (transformers' tp_plan, the other recipes).
* float8          on (issue 27): torchao convert_to_float8_training. torchao/float8/float8_linear.py
                  (pytorch/ao 36027d8) `ctx.save_for_backward(input_hp, weight_hp_t)`: the high-precision
                  input and weight are what backward keeps, so the saved activations are bf16 training's;
                  the FP8 copies are a matmul's transients. What changes is where it runs (FP8 tensor
                  cores: a compatibility rule) and the matmuls' speed (not modelled yet).
* decode_cache    an inference row's generate() cache (issue 28). dynamic: transformers >= 4.36
                  DynamicCache.update replaces each layer's K/V by the torch.cat of old and new, the old
                  freed at once (one cache). tuple: transformers before 4.36 (the tuple cache, e.g. the
                  4.32-4.35 of optimum's 2023 GPTQ benchmark): LlamaAttention returns
                  `past_key_value = (torch.cat([past_key_value[0], key_states], dim=2), ...)`, collected in
                  next_decoder_cache while generate's model_kwargs still hold the previous step's tuple
                  until _update_model_kwargs_for_generation replaces it: at the last decode step the old
                  cache (seq - 1 tokens) and the new one (seq) are both allocated; counted as two caches of
                  seq tokens (one token more than the old one holds: 0.1% of it at 1,024 tokens).
* recipe litgpt   beside its switch values (RECIPES below), LitGPT builds its own model, and these follow
                  from its code wherever the recipe is litgpt (engine/components.py, `litgpt_model` and the
                  fields after it): its GPT (litgpt/model.py, lora.py) holds lm_head as its own nn.Linear
                  beside the embedding and never ties them in finetuning (only pretrain.py's
                  `train.tie_embeddings` does; convert_hf_checkpoint.py copies the embedding into
                  `lm_head.weight` where the Hugging Face checkpoint has none), at 5895df10, 00af8b0d and
                  HEAD: a catalog model with tied embeddings gets V x h more parameters. Its attention runs
                  on the fused qkv output: K and V repeated to every head before SDPA (model.py
                  CausalSelfAttention.forward: `k.expand(...).reshape(...)` in 2024, `repeat_interleave` at
                  HEAD), so SDPA keeps them at the query width; with as many KV heads as heads (Llama 2) V
                  is a view of the qkv output, which SDPA's saved V keeps whole (2 x q width more per token
                  and layer). Under --quantize, Fabric's BitsandbytesPrecision replaces every
                  torch.nn.Linear built under fabric.init_module (`_ClassReplacementContextManager(
                  {"torch.nn.Linear": ...})`, no ignore_modules in LitGPT), lm_head's too: the head is
                  quantized with the linears; Lightning's _Linear4bit.quantize quantizes from
                  `weight.to(torch.half)`, so bitsandbytes' MatMul4Bit dequantizes to fp16 and casts to
                  the bf16 input (`F.dequantize_4bit(B, quant_state).to(A.dtype)`, bitsandbytes 0.42.0
                  autograd/_functions.py): 4 bytes per weight at once, lm_head's (V x h) the largest, at
                  lm_head's backward beside the logits' 16-bit gradients. QLoRA's base 'auto' is
                  nf4_nodq (every config_hub qlora.yaml: `quantize: bnb.nf4`). LitGPT's QLoRA steps
                  bitsandbytes' PagedAdamW whatever optimizer the config names (finetune/lora.py
                  instantiate_bnb_optimizer; `optimizer_cls = bnb.optim.PagedAdamW` at 5895df10): ask for
                  --optimizer paged_adamw_32bit. Its LoRA (litgpt/lora.py) adapts q, k and v in one
                  LoRAQKVLinear with one dropout for the three (engine/memory.py layer_activation_bytes
                  `fused_qkv`), whose zero_pad keeps lora_B's output where some of q, k, v are adapted, and
                  its attention output is copied by reshape before proj (engine/components.py
                  `_litgpt_lora_kept`).
* bnb_4bit_input  what bitsandbytes' MatMul4Bit keeps for backward (issue 27 item 4; QLoRA's frozen NF4
                  base). freed: bitsandbytes >= 0.43.2 keeps only the packed weight (autograd/_functions.py
                  at 95f9af3: `ctx.tensors = (None, B)`). kept: before 0.43.2 `ctx.tensors = (A, B)` held
                  every 4-bit linear's input until backward (fixed by PR #1270, "fix QLoRA mem bug: delete
                  useless buffered activation", commit 9e75374, 2024-07-16, first in 0.43.2): the input
                  Linear4bit.forward passes, `x.to(compute_dtype)` (a new 16-bit copy per module when x is
                  fp32, as under kbit_prep; the same tensor when x is already 16-bit), is kept beside
                  what the layer saves (engine/components.py `_kbit_kept_inputs`). LLM.int8 bases
                  (MatMul8bitLt) keep theirs in every version (`ctx.tensors = (CAt, subA, A)`).
* int4_kernel     what runs an int4 (GPTQ/AWQ) checkpoint at inference, where its library allocates beside
                  the weights (engine/components.py `int4_kernel_parts`). none: the weights alone (the
                  engine's model so far). exllama: AutoGPTQ's exllama (v1) kernels as transformers/optimum
                  load a GPTQ model (auto_gptq/modeling/_utils.py autogptq_post_init, v0.4.2 and v0.5.0):
                  one persistent fp16 `temp_dq` buffer of the largest quantized linear (max qweight.numel()
                  x 8 values: in x out, 2 bytes each), allocated with torch.zeros, and a `temp_state` of 1 x 1
                  without act-order (max_input_len x max(in, out) with it: not modelled). autoawq_fused:
                  AutoAWQ 0.1.6 from_quantized(fuse_layers=True) (casper-hansen/AutoAWQ at 5c7e368): while
                  fusing, every layer's fused QKV (torch.cat of q, k, v: awq/utils/fused_utils.py fuse_qkv)
                  exists beside the original q/k/v until the old model is replaced (awq/models/llama.py
                  LlamaFuser.fuse_transformer), together with each layer's preallocated cache (fused/cache.py
                  WindowedCache: batch x kv heads x max_new_tokens x head_dim, K and V in fp16) and RoPE table
                  (fused/attn.py RoPE.freqs_cis: complex64, 2 x max_new_tokens x head_dim / 2); the load peak,
                  a phase `load`. Its prefill attention (fused/attn.py QuantAttentionFused.forward) is eager
                  with `F.softmax(scores.float())`: the 16-bit scores, their fp32 copy and the fp32 softmax.
* bnb_double_quant  bitsandbytes 4-bit storage (nf4, and the fp4 of the same layout): on: the absmax of every
                  64 weights quantized to 8 bits with an fp32 constant per 256 blocks (4 + 8/64 + 32/16,384 =
                  4.127 bits, the engine's nf4). off: bnb_4bit_use_double_quant=False, transformers'
                  BitsAndBytesConfig default: an fp32 absmax per 64 weights (bitsandbytes Params4bit
                  blocksize=64), 4 + 32/64 = 4.5 bits per linear weight.
* rope_cache      layers: transformers' per-layer rotary caches: each attention layer's LlamaRotaryEmbedding
                  registers cos_cached and sin_cached of max_position_embeddings x head_dim in the load dtype
                  (torch.get_default_dtype() at init, which from_pretrained sets to torch_dtype), kept on the
                  GPU with the model (transformers 4.32.0 and 4.35.0 models/llama/modeling_llama.py
                  LlamaRotaryEmbedding._set_cos_sin_cache; 4.38-4.40 keep them as _cos_cached/_sin_cached "for
                  BC"); 4.42.0 has none. none: no such buffers (current transformers compute cos/sin in forward).
* vision_tower    on: a vision-language checkpoint's vision tower and projector are loaded beside the language
                  model (the catalog's vision_params, in 16-bit, frozen when training): the model class its
                  config names (transformers 5.24 Gemma3ForConditionalGeneration, which AutoModelForCausalLM
                  maps a Gemma 3 multimodal config to). off: the language model alone (Gemma3ForCausalLM.
                  from_pretrained on the same checkpoint, a text-only export, llama.cpp without its mmproj);
                  the loops harness builds Gemma 3 4B that way. No effect on a text model.
* quantize_experts  (a mixture of experts under a bitsandbytes base, lora / qlora) off: transformers 5 keeps the
                  routed experts as fused 3-D parameters, which bitsandbytes does not quantize: they stay in the load
                  dtype (engine/constants.py BNB_FUSED_EXPERTS). on: axolotl's `quantize_moe_experts: true`
                  (src/axolotl/monkeypatch/moe_quant.py patch_moe_quantization_on_load, 0.20): each 3-D expert
                  parameter is quantized while it loads (bitsandbytes nn/parametrize.py replace_parameter_4bit at
                  the base's nf4 and double quantization, or int8 row-wise) and dequantized whole on access by its
                  parametrization, cached for the module's forward: a MoE layer's experts in 16 bits while it runs,
                  kept for its backward (one layer's under checkpointing, every MoE layer's without). axolotl's
                  examples: "`quantize_moe_experts: true` is required for QLoRA" (Qwen3-Next-80B: ~47 GiB).
* dpo_reference   (objective dpo rows only; engine/components.py dpo_parts) copy: a second, frozen model from the
                  policy's checkpoint in its dtype (trl 1.16.0 trl/trainer/dpo_trainer.py lines 908-927; LLaMA-Factory
                  trainer_utils.py create_ref_model; axolotl train.py setup_reference_model; torchtune
                  recipes/full_dpo_distributed.py `self._ref_model`): the policy's weights less its adapters, in
                  every training phase. adapters_off: the policy with its LoRA adapters disabled (TRL use_adapter,
                  LLaMA-Factory disable_adapter(), torchtune disable_adapter(self._model)): no copy. precomputed:
                  precompute_ref_log_probs (TRL, axolotl): no reference in the step.
"""

from __future__ import annotations

# switch -> its values; 'auto' (first) is resolved by the recipe (engine/rules.py)
SWITCHES: dict[str, tuple[str, ...]] = {
    "adapter_dtype": ("auto", "fp32", "bf16"),
    "loss": ("auto", "unfused", "chunked", "linear_chunked", "fused", "parallel", "compiled", "litgpt",
             "litgpt_full"),
    "logits_upcast": ("auto", "loss", "model"),
    "checkpointing": ("auto", "none", "full", "selective", "offload", "op", "module"),
    "optimizer_in_backward": ("auto", "off", "on"),
    "activation_offload": ("auto", "off", "on"),
    "attention": ("auto", "sdpa", "flash", "eager"),
    "compile": ("auto", "off", "on"),
    "packing": ("auto", "off", "on"),
    "kbit_prep": ("auto", "off", "on"),
    "padding": ("auto", "padded", "unpadded"),
    "loop": ("auto", "trainer", "manual"),
    "use_cache": ("auto", "on", "off"),
    # issue 27: Megatron-style sequence parallelism beside tensor parallelism, and torchao Float8 training
    "sequence_parallel": ("auto", "off", "on"),
    "float8": ("auto", "off", "on"),
    # issue 28: the decode cache of transformers' generate() (an inference row)
    "decode_cache": ("auto", "dynamic", "tuple"),
    # issue 27 item 4: bitsandbytes before 0.43.2 kept each 4-bit linear's input for backward
    "bnb_4bit_input": ("auto", "freed", "kept"),
    # inference libraries' own buffers: AutoGPTQ's exllama temp_dq, AutoAWQ's fused modules; bitsandbytes'
    # 4-bit storage with or without double quantization; transformers 4.32-4.40's per-layer rotary caches
    "int4_kernel": ("auto", "none", "exllama", "autoawq_fused"),
    "bnb_double_quant": ("auto", "on", "off"),
    "rope_cache": ("auto", "none", "layers"),
    # whether a vision-language checkpoint's vision tower is loaded (a text-only fine-tune may leave it out)
    "vision_tower": ("auto", "on", "off"),
    # Liger's Triton kernels (linkedin/Liger-Kernel) patched into a transformers model: RMSNorm, SwiGLU, RoPE and
    # the fused linear cross-entropy
    "liger": ("auto", "off", "on"),
    # issue 27: a mixture of experts' fused 3-D experts quantized at load for QLoRA (axolotl's quantize_moe_experts)
    "quantize_experts": ("auto", "off", "on"),
    # issue 28: FSDP1's flat parameters (autocast casts of views are not cached; frozen weights in a mixed flat
    # parameter get gradients)
    "flat_params": ("auto", "off", "on", "mixed"),
    # issue 28: gradient accumulation under FSDP's no_sync (each unit's unsharded gradient kept between micro-batches)
    "accum_sync": ("auto", "every", "last"),
    # the reference model of a preference-tuning row (objective dpo): a frozen copy of the weights, the policy with its
    # adapters disabled, or reference log-probs computed before training (none in the step)
    "dpo_reference": ("auto", "copy", "adapters_off", "precomputed"),
}
RECIPE_NAMES = ("hf", "torchtune", "unsloth", "llama-factory", "axolotl", "deepspeed", "torchtitan", "litgpt", "automodel")
DEFAULT_RECIPE = "hf"

# torchtune CEWithChunkedOutputLoss / LinearCrossEntropyLoss: num_output_chunks=8 (their default)
LOSS_CHUNKS = 8
# torchtune selective activation checkpointing, selective_ac_option 2 (torchtune/training/activations.py): every second layer checkpointed
SELECTIVE_EVERY = 2
# checkpointing module (NeMo Automodel's per-module checkpoint_wrapper): the h-wide inputs each decoder layer
# keeps, one per wrapped module (input_layernorm, self_attn, post_attention_layernorm, mlp); transformers'
# LlamaRMSNorm returns its input's dtype (weight * hidden_states.to(input_dtype)), so all four are the
# residual stream's width and dtype
MODULE_CHECKPOINT_INPUTS = 4
# activation offload / offloaded checkpointing: layers in flight on the GPU (the one in use and
# the one being copied; torchtune OffloadActivations uses one extra stream, Unsloth copies one
# layer's input ahead)
OFFLOAD_LAYERS_IN_FLIGHT = 2

# LitGPT's lm_head_chunk_size in finetune/lora.py and chunked_cross_entropy's chunk_size (litgpt/utils.py):
# tokens per chunk (docs only: the one-chunk transients are not counted, engine/stacks.py `loss`)
LITGPT_CHUNK_TOKENS = 128
# the recipes whose model builds no KV cache in a training forward, whatever the loop: LitGPT's GPT keeps
# one only after set_kv_cache (generation; litgpt/model.py CausalSelfAttention.forward reads it only with
# input_pos), so its hand-written loop (loop manual) does not turn use_cache on (engine/rules.py)
NO_TRAINING_CACHE = ("litgpt",)
# the recipes whose loop takes the labels out of the batch and computes the loss from the model's logits itself:
# Liger's patched forward computes the logits there (lce_forward: skip_logits only with labels), so --liger on
# leaves their loss as the recipe's (NeMo Automodel b4733bdc1 train_ft.py line 898 `labels = batch.pop("labels")`)
LOSS_FROM_LOGITS = ("automodel",)
# Preference tuning (objective dpo). The recipes that ship a DPO trainer (docs/stacks.md "DPO"); the others are refused
# (engine/scenarios.py check_combinations): torchtitan, LitGPT and NeMo Automodel have none.
DPO_RECIPES = ("hf", "deepspeed", "unsloth", "axolotl", "llama-factory", "torchtune")
# The references a recipe's DPO trainer cannot hold (refused by engine/scenarios.py check_combinations, as
# planner/exports.py refuses to write them): no precomputed reference log-probs under LLaMA-Factory (its
# src/llamafactory/train/dpo/trainer.py CustomDPOTrainer.__init__ sets `self.precompute_ref_log_probs = False`) nor
# torchtune (recipes/lora_dpo_single_device.py, lora_dpo_distributed.py and full_dpo_distributed.py compute the
# reference log-probs in every step); no frozen copy beside LoRA adapters under torchtune (its lora_dpo recipes take
# the reference as the policy under `disable_adapter(self._model)`, no ref checkpoint key) nor axolotl (0.18.0 @067b021
# src/axolotl/train.py setup_reference_model reads cfg.rl_adapter_ref_model, but the key is no field of
# utils/schemas/config.py AxolotlInputConfig and validate_config's model_dump drops it: model_ref None, the adapters off)
DPO_NO_PRECOMPUTED = ("llama-factory", "torchtune")
DPO_NO_ADAPTER_COPY = ("torchtune", "axolotl")
# Whose per-token log-probs the recipe's DPO step computes, and so what its loss holds (engine/components.py
# dpo_parts): TRL's fused LM head (trl 1.16.0 trl/trainer/utils.py add_fused_lm_head, trl/kernels/
# chunked_logprob.py: no (batch, seq, V) logits) under the recipes that run TRL's DPOTrainer; LLaMA-Factory's own
# concatenated_forward (src/llamafactory/train/dpo/trainer.py: `model(**batch).logits.to(torch.float32)` and
# trainer_utils.py get_batch_logps `torch.gather(logits.log_softmax(-1), ...)`), the 16-bit logits, their fp32 copy and
# the fp32 log-softmax output, and torchtune's concatenated_forward (its TransformerDecoder.unembed
# `self.output(h).float()`, rlhf logits_to_logprobs' `F.log_softmax(logits / temperature, dim=-1)`): the whole fp32
# logits, whatever loss the recipe's SFT runs.
DPO_TRL_HEAD = ("hf", "deepspeed", "unsloth", "axolotl")
DPO_FULL_LOGITS = ("llama-factory", "torchtune")
# TRL's fused head scores tiles of TOKEN_CHUNK_SIZE tokens x _CHUNKED_LOGPROB_CHUNK_SIZE vocabulary entries into one
# buffer in the compute dtype (trl 1.16.0 trl/kernels/chunked_logprob.py line 30 and `mm_buf = torch.empty((min(N,
# TOKEN_CHUNK_SIZE), chunk_size), ...)` lines 347 and 413; trl/trainer/utils.py line 1511)
TRL_TILE_TOKENS = 4096
TRL_TILE_VOCAB = 32768
# The transformers model_types Liger-Kernel v0.6.2 patches (src/liger_kernel/transformers/monkey_patch.py
# MODEL_TYPE_TO_APPLY_LIGER_FN); for any other _apply_liger_kernel_to_instance logs "There are currently no
# Liger kernels supported for model type" and patches nothing, so the run holds transformers' modules.
LIGER_MODEL_TYPES = ("gemma", "gemma2", "gemma3_text", "gemma3", "glm4", "glm4v", "llama", "llama4_text", "llama4",
                     "llava", "granite", "mllama", "mllama_text_model", "mistral", "mixtral", "olmo2", "qwen2",
                     "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "smollm3",
                     "phi3", "paligemma")
# The catalog families whose checkpoints' model_type is not in that list: DeepSeek-V3 / R1 (deepseek_v3),
# gpt-oss (gpt_oss: Liger adds it in v0.6.5, 2026-02, with its norms and fused loss but not its experts'
# clamped GLU; not counted here, so the estimate keeps transformers' larger figure) and Mistral Small 3.1 / 3.2
# (mistral3, Mistral3ForConditionalGeneration). The catalog's other families are llama, mllama, llama4,
# mistral, mixtral, gemma, gemma2, gemma3, qwen2, qwen2_5_vl, qwen3, qwen3_moe, phi3 (Phi-4) and smollm3
# checkpoints, all in the list; a model read from a file or the Hub is looked up by its own model_type.
LIGER_UNPATCHED_FAMILIES = ("deepseek-v3", "gpt-oss", "mistral-small")
# The recipes whose framework has a switch for Liger's kernels (each recipe's `liger` source below): HF Trainer's
# TrainingArguments.use_liger_kernel (also under DeepSpeed), LLaMA-Factory's enable_liger_kernel, axolotl's Liger
# plugin. (NeMo Automodel loads them by default; torchtune, Unsloth, torchtitan and LitGPT run their own modules.)
LIGER_SWITCH_RECIPES = ("hf", "llama-factory", "axolotl", "deepspeed")
# The recipes under which Liger's kernels can run at all: those, and NeMo Automodel (on by default). torchtune,
# Unsloth, torchtitan and LitGPT build their own modules, which Liger's patches (of transformers' modeling
# classes) never reach: --liger on is decided off there (engine/rules.py), as for an architecture it does not patch.
LIGER_RECIPES = LIGER_SWITCH_RECIPES + ("automodel",)

# recipe -> switch -> (value, source). 'flag' for checkpointing: follow the scenario's
# grad_checkpointing (full when true, none when false). A dict value picks by training method.
_HF = "transformers 4.5x Trainer + peft 0.13+ defaults"
RECIPES: dict[str, dict[str, tuple]] = {
    "hf": {
        "adapter_dtype": ("fp32", "peft get_peft_model(autocast_adapter_dtype=True): adapters fp32 (peft/tuners/tuners_utils.py)"),
        "loss": ("unfused", "transformers loss/loss_utils.py ForCausalLMLoss: logits.float() + cross_entropy"),
        "logits_upcast": ("loss", "transformers >= 4.46: the upcast sits in the loss function"),
        "checkpointing": ("flag", "TrainingArguments.gradient_checkpointing (default False): the scenario's flag"),
        "optimizer_in_backward": ("off", _HF + ": Trainer steps after backward"),
        "activation_offload": ("off", _HF + ": no activation offload"),
        "attention": ("sdpa", "transformers attn_implementation default 'sdpa' (torch >= 2.1.1)"),
        "compile": ("off", "TrainingArguments.torch_compile default False"),
        "packing": ("off", "trl SFTConfig packing default False"),
        "kbit_prep": ({"qlora": "on"}, "peft 0.20 docs/source/developer_guides/quantization.md: QLoRA calls prepare_model_for_kbit_training (peft/utils/other.py: non-4-bit parameters to fp32), then get_peft_model and the Trainer with bf16=True (trl SFTTrainer given a peft_config casts embeddings and lm_head back to bf16 with bf16=True: not this recipe; --kbit-prep off)"),
        "padding": ("padded", "transformers DataCollatorWithPadding / DataCollatorForSeq2Seq pad each batch to its longest sequence; masking_utils.py _ignore_causal_mask_sdpa keeps the mask for any padded batch"),
        "loop": ("trainer", "transformers 5.24 Trainer compute_loss keeps only the loss (trainer.py lines 2172-2205); training_step backward after (line 2126)"),
        "use_cache": ("off", "transformers 5.24 trainer.py line 646: model.config.use_cache = TrainingArguments.use_cache (default False, training_args.py line 971)"),
        "sequence_parallel": ("off", "transformers' tp_plan / accelerate: no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "no Float8 linear conversion by default (accelerate's FP8 needs mixed_precision='fp8')"),
        "decode_cache": ("dynamic", "transformers >= 4.36 DynamicCache: each layer's K/V grown in place of the old (one cache)"),
        "bnb_4bit_input": ("freed", "bitsandbytes >= 0.43.2 (PR #1270, commit 9e75374, 2024-07-16: MatMul4Bit ctx.tensors = (None, B))"),
        "int4_kernel": ("none", "no int4 library buffer modelled (the weights alone); AutoGPTQ's exllama or AutoAWQ's fused modules on request (--int4-kernel)"),
        "bnb_double_quant": ("on", "peft's QLoRA guide (docs/source/developer_guides/quantization.md): BitsAndBytesConfig(bnb_4bit_use_double_quant=True); transformers' own BitsAndBytesConfig default is False (--bnb-double-quant off)"),
        "rope_cache": ("none", "transformers >= 4.42 (read: 4.42.0 models/llama/modeling_llama.py): cos/sin computed from inv_freq in each forward, no per-layer cache"),
        "vision_tower": ("on", "transformers loads the class the checkpoint's config names: a VL config's (Gemma3ForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, MllamaForConditionalGeneration) includes the vision tower and projector"),
        "liger": ("off", "TrainingArguments.use_liger_kernel (default False); on: Trainer calls liger_kernel's _apply_liger_kernel_to_instance"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "trl 1.16.0 trl/trainer/dpo_trainer.py lines 908-927: no ref_model and a PEFT policy: None (the same model under disable_adapter, lines 1328-1336); otherwise a second model from the policy's checkpoint in its dtype (`ref_model_init_kwargs.setdefault(\"dtype\", self.model.dtype)`); precompute_ref_log_probs (default False) on request"),
        "quantize_experts": ("off", "transformers 5.24 + peft: bitsandbytes' replace_with_bnb_linear swaps nn.Linear only, so the fused 3-D experts stay in the load dtype (engine/constants.py BNB_FUSED_EXPERTS)"),
        "flat_params": ("off", "transformers Trainer: the engine's ZeRO-3 terms are FSDP2's, as measured (tests/data/measured_peaks.csv); accelerate's FSDP1 (fsdp_version 1) is --flat-params on, with peft's fsdp_auto_wrap_policy (adapters wrapped apart)"),
        "accum_sync": ("every", "TrainingArguments.gradient_accumulation_steps default 1 (no accumulation); with more the step's gradients stay alive between micro-batches (under FSDP the Trainer takes accelerate's no_sync unless sync_each_batch): --accum-sync last"),
    },
    "torchtune": {
        "adapter_dtype": ("bf16", "torchtune 0.7.0 recipes/lora_finetune_single_device.py: model built under set_default_dtype(bf16); configs dtype: bf16"),
        "loss": ("linear_chunked", "torchtune 0.7.0 recipes/configs/llama3_1/8B_lora_single_device.yaml loss: torchtune.modules.loss.LinearCrossEntropyLoss"),
        "logits_upcast": ("loss", "torchtune computes the loss itself (no transformers model forward)"),
        "checkpointing": ("full", "torchtune 0.7.0 llama3_1/8B_*_single_device.yaml enable_activation_checkpointing: True"),
        "optimizer_in_backward": ({"full": "on"}, "torchtune 0.7.0 llama3_1/8B_full_single_device.yaml optimizer_in_bwd: True (LoRA recipes have none)"),
        "activation_offload": ("off", "torchtune 0.7.0 configs enable_activation_offloading: False"),
        "attention": ("sdpa", "torchtune MultiHeadAttention: F.scaled_dot_product_attention (torchtune/modules/attention_utils.py)"),
        "compile": ("off", "torchtune 0.7.0 configs compile: False"),
        "packing": ("off", "torchtune 0.7.0 configs dataset.packed: False"),
        "kbit_prep": ("off", "torchtune 0.7.0: no peft; the base is built in bf16 and only its linears are NF4 (torchtune/modules/peft/lora.py LoRALinear quantize_base: to_nf4 on the linear weight)"),
        "padding": ("unpadded", "torchtune/data/_collate.py padded_collate_sft returns tokens and labels only (line 77); torchtune/modules/attention.py line 298 SDPA is_causal when no mask"),
        "loop": ("trainer", "torchtune 0.7.0 recipes/full_finetune_single_device.py and lora_finetune_single_device.py: `del logits` before loss.backward()"),
        "use_cache": ("off", "torchtune 0.7.0 TransformerDecoder keeps no KV cache in training (caches exist only after setup_caches, for generation)"),
        "sequence_parallel": ("off", "torchtune 0.7.0 distributed recipes' tensor_parallel_plan (ColwiseParallel / RowwiseParallel): no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "torchtune 0.7.0: no Float8 linear conversion by default"),
        "decode_cache": ("dynamic", "torchtune KVCache: a preallocated cache of max_seq_len (one cache)"),
        "bnb_4bit_input": ("freed", "torchtune's NF4 is torchao's (no bitsandbytes): nothing kept"),
        "int4_kernel": ("none", "torchtune: no GPTQ/AWQ kernels"),
        "bnb_double_quant": ("on", "torchtune's NF4 (torchao to_nf4) quantizes its block scales again: counted as the engine's nf4 (4.127 bits)"),
        "rope_cache": ("none", "torchtune's RotaryPositionalEmbeddings (not transformers' per-layer cos/sin caches)"),
        "vision_tower": ("on", "torchtune's vision builders (llama3_2_vision_11b) build the encoder with the decoder; its text-only builders do not (--vision-tower off)"),
        "liger": ("off", "torchtune's own modules and losses (no Liger kernels)"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "torchtune recipes/lora_dpo_single_device.py and lora_dpo_distributed.py: the reference log-probs under `with disable_adapter(self._model)`; recipes/full_dpo_distributed.py: `self._ref_model = self._setup_reference_model(...)`, a second copy"),
        "quantize_experts": ("off", "torchtune's QLoRA quantizes its LoRA linears (torchao NF4): no expert quantization"),
        "flat_params": ("off", "torchtune 0.7.0 shards with FSDP2 (training.shard_model: fully_shard per layer)"),
        "accum_sync": ("every", "torchtune recipes/full_finetune_distributed.py train(): current_loss.backward() at every micro-batch with no no_sync / set_requires_gradient_sync, the optimizer stepping every gradient_accumulation_steps: FSDP2 reduce-scatters each backward into the shards"),
    },
    "unsloth": {
        "adapter_dtype": ("bf16", "unsloth 2026.8.19 unsloth/kernels/fast_lora.py: LoRA_MLP/LoRA_QKV cast A, B to X.dtype and save only the 16-bit X (adapter parameters stay fp32: 2 B per adapter parameter not counted)"),
        "loss": ("fused", "unsloth 2026.8.19 unsloth/models/llama.py CausalLM_fast_forward: unsloth_fused_ce_loss (chunked linear + CE, no full logits)"),
        "logits_upcast": ("loss", "unsloth computes the loss itself"),
        "checkpointing": ("offload", "unsloth 2026.8.19 FastLlamaModel.get_peft_model(use_gradient_checkpointing='unsloth'): layer inputs offloaded to host RAM"),
        "optimizer_in_backward": ("off", "unsloth uses the transformers/trl Trainer"),
        "activation_offload": ("off", "only the checkpointed inputs are offloaded (checkpointing 'offload')"),
        "attention": ("flash", "unsloth llama attention: flash-attn / xformers / SDPA kernels, no s x s scores kept"),
        "compile": ("off", "not modelled for unsloth's own compiled kernels"),
        "packing": ("off", "trl SFTConfig packing default False"),
        "kbit_prep": ("off", "unsloth 2026.8.19 unsloth/models/_utils.py prepare_model_for_kbit_training: freezes the base and upcasts only the LoRA parameters to fp32"),
        "padding": ("unpadded", "unsloth attention kernels (flash-attn / xformers) take no padding mask matrix; attention flash"),
        "loop": ("trainer", "unsloth trains through the transformers/trl Trainer (compute_loss keeps the loss)"),
        "use_cache": ("off", "unsloth trains through the transformers Trainer (use_cache False, trainer.py line 646)"),
        "sequence_parallel": ("off", "unsloth: single-GPU kernels, no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "unsloth: no Float8 linear conversion by default"),
        "decode_cache": ("dynamic", "unsloth generates through transformers' DynamicCache (one cache)"),
        "bnb_4bit_input": ("freed", "unsloth 2026 requires bitsandbytes >= 0.45: freed"),
        "int4_kernel": ("none", "unsloth: no GPTQ/AWQ kernels"),
        "bnb_double_quant": ("on", "the engine's nf4 as for the hf recipe (unsloth's own 4-bit config not re-read here)"),
        "rope_cache": ("none", "unsloth 2026 on transformers >= 4.42: no per-layer cos/sin caches"),
        "vision_tower": ("on", "unsloth's FastModel / FastVisionModel load the whole multimodal model for a VL checkpoint"),
        "liger": ("off", "Unsloth's own Triton kernels (unsloth/kernels), not Liger's"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "Unsloth patches TRL's DPOTrainer (PatchDPOTrainer) and trains LoRA adapters: ref_model None, TRL disables the adapters (trl 1.16.0 dpo_trainer.py lines 908-914)"),
        "quantize_experts": ("off", "the engine's transformers base as for the hf recipe (Unsloth's own MoE loading not re-read here)"),
        "flat_params": ("off", "Unsloth trains on one GPU (no FSDP)"),
        "accum_sync": ("every", "Unsloth trains through the Trainer on one GPU: as hf (gradient_accumulation_steps > 1: --accum-sync last; a LoRA run's adapter gradients kept alive are small)"),
    },
    "llama-factory": {
        "adapter_dtype": ("fp32", "LLaMA-Factory 0.9.6.dev0 src/llamafactory/model/adapter.py: cast_trainable_params_to_fp32 unless pure_bf16"),
        "loss": ("unfused", "LLaMA-Factory 0.9.6.dev0 model_args.py enable_liger_kernel: False (transformers' loss)"),
        "logits_upcast": ("loss", "transformers >= 4.46 (LLaMA-Factory 0.9.6 requires a recent transformers)"),
        "checkpointing": ("full", "LLaMA-Factory 0.9.6.dev0 model_args.py disable_gradient_checkpointing: False (on by default); use_unsloth_gc: False"),
        "optimizer_in_backward": ("off", "transformers Trainer"),
        "activation_offload": ("off", "not a LLaMA-Factory option by default"),
        "attention": ("sdpa", "LLaMA-Factory 0.9.6.dev0 model_args.py flash_attn: auto (transformers' default, sdpa)"),
        "compile": ("off", "TrainingArguments.torch_compile default False"),
        "packing": ("off", "LLaMA-Factory data_args.packing default None (off for sft)"),
        "kbit_prep": ("off", "LLaMA-Factory 0.9.6.dev0 does not call peft prepare_model_for_kbit_training; model_args.py upcast_layernorm and upcast_lmhead_output default False"),
        "padding": ("padded", "LLaMA-Factory 0.9.6.dev0 src/llamafactory/data/collator.py: its SFT collators subclass transformers' DataCollatorForSeq2Seq (pads to the longest); transformers' sdpa"),
        "loop": ("trainer", "LLaMA-Factory 0.9.6.dev0 CustomSeq2SeqTrainer / CustomTrainer subclass transformers' Trainer"),
        "use_cache": ("off", "LLaMA-Factory trains through the transformers Trainer (use_cache False, trainer.py line 646)"),
        "sequence_parallel": ("off", "LLaMA-Factory trains through the transformers Trainer: no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "LLaMA-Factory 0.9.6: no Float8 linear conversion by default (fp8 through accelerate only when asked)"),
        "decode_cache": ("dynamic", "LLaMA-Factory 0.9.6 requires transformers >= 4.45: DynamicCache (one cache)"),
        "bnb_4bit_input": ("freed", "LLaMA-Factory 0.9.6 with a 2025-2026 bitsandbytes (>= 0.43.2): freed"),
        "int4_kernel": ("none", "LLaMA-Factory trains: no int4 inference kernels"),
        "bnb_double_quant": ("on", "LLaMA-Factory model_args.py QuantizationArguments double_quantization: default True"),
        "rope_cache": ("none", "LLaMA-Factory 0.9.6 requires transformers >= 4.45: no per-layer cos/sin caches"),
        "vision_tower": ("on", "LLaMA-Factory loads the VL model class for a multimodal template and freezes the tower (freeze_vision_tower: true), which stays on the GPU"),
        "liger": ("off", "LLaMA-Factory 0.9.6.dev0 model_args.py enable_liger_kernel: False"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "LLaMA-Factory src/llamafactory/train/trainer_utils.py create_ref_model: finetuning_type lora and no ref_model: None (the policy under disable_adapter(), train/dpo/trainer.py compute_reference_log_probs); otherwise load_model of the same checkpoint, a second copy"),
        "quantize_experts": ("off", "LLaMA-Factory loads its 4-bit base through transformers' BitsAndBytesConfig: the fused experts stay in the load dtype"),
        "flat_params": ("off", "LLaMA-Factory through the Trainer: as hf (accelerate's FSDP1 on request: --flat-params on)"),
        "accum_sync": ("every", "LLaMA-Factory through the Trainer: as hf (its examples' gradient_accumulation_steps 8 under FSDP: --accum-sync last)"),
    },
    "axolotl": {
        "adapter_dtype": ("fp32", "axolotl 0.18.0 uses peft get_peft_model (autocast_adapter_dtype=True)"),
        "loss": ("unfused", "axolotl 0.18.0 schemas: cut_cross_entropy / liger plugins off by default"),
        "logits_upcast": ("loss", "transformers >= 4.46"),
        "checkpointing": ("flag", "axolotl 0.18.0 src/axolotl/utils/schemas/config.py gradient_checkpointing default False ('offload' on request)"),
        "optimizer_in_backward": ("off", "transformers Trainer"),
        "activation_offload": ("off", "axolotl 0.18.0: activation_offloading default None"),
        "attention": ("sdpa", "axolotl 0.18.0 attn_implementation default None (transformers' sdpa)"),
        "compile": ("off", "axolotl 0.18.0 torch_compile default None"),
        "packing": ("off", "axolotl 0.18.0 sample_packing default None (examples set true)"),
        "kbit_prep": ("off", "axolotl 0.18.0 src/axolotl/loaders/model.py: calls prepare_model_for_kbit_training for qlora, then _configure_embedding_dtypes converts the norms and embeddings back to torch_dtype (16-bit) for LoRA/QLoRA"),
        "padding": ("padded", "axolotl 0.18.0 DataCollatorForSeq2Seq pads (pad_to_sequence_len, sample_packing off by default); transformers' sdpa"),
        "loop": ("trainer", "axolotl 0.18.0 AxolotlTrainer subclasses transformers' Trainer"),
        "use_cache": ("off", "axolotl trains through the transformers Trainer (use_cache False, trainer.py line 646)"),
        "sequence_parallel": ("off", "axolotl trains through the transformers Trainer: no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "axolotl 0.18.0: no Float8 linear conversion by default"),
        "decode_cache": ("dynamic", "axolotl 0.18.0 requires a recent transformers: DynamicCache (one cache)"),
        "bnb_4bit_input": ("freed", "axolotl 0.18.0 pins bitsandbytes >= 0.45: freed"),
        "int4_kernel": ("none", "axolotl trains: no int4 inference kernels"),
        "bnb_double_quant": ("on", "the engine's nf4 as for the hf recipe (axolotl's 4-bit config not re-read here)"),
        "rope_cache": ("none", "axolotl 0.18.0 requires a recent transformers (>= 4.42): no per-layer cos/sin caches"),
        "vision_tower": ("on", "axolotl loads the checkpoint's model class (a VL processor and model for multimodal configs)"),
        "liger": ("off", "axolotl's Liger is a plugin (axolotl.integrations.liger.LigerPlugin), off unless listed under plugins"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "axolotl src/axolotl/train.py setup_reference_model: `if cfg.adapter and not cfg.rl_adapter_ref_model: model_ref = None` (TRL disables the adapters; rl_adapter_ref_model is no field of axolotl 0.18.0's config schema, so validation drops it: a copy beside an adapter is refused, DPO_NO_ADAPTER_COPY); without an adapter the model is loaded again"),
        "quantize_experts": ("off", "axolotl 0.20: quantize_moe_experts is opt-in (its validator requires an adapter and load_in_4bit / load_in_8bit); the MoE QLoRA examples set it true: --quantize-experts on"),
        "flat_params": ("off", "axolotl: as hf (its fsdp_version 2 configs shard with FSDP2; fsdp_version 1: --flat-params on)"),
        "accum_sync": ("every", "axolotl through the Trainer: as hf (gradient_accumulation_steps > 1 under FSDP: --accum-sync last)"),
    },
    "deepspeed": {
        "adapter_dtype": ("fp32", "transformers Trainer + DeepSpeed: peft adapters fp32"),
        "loss": ("unfused", "transformers' loss (DeepSpeed does not replace it)"),
        "logits_upcast": ("loss", "transformers >= 4.46"),
        "checkpointing": ("flag", "DeepSpeed activation_checkpointing is off unless configured: the scenario's flag"),
        "optimizer_in_backward": ("off", "DeepSpeed steps after backward (ZeRO's stages and offload are the zero/offload columns)"),
        "activation_offload": ("off", "DeepSpeed activation_checkpointing.cpu_checkpointing default false"),
        "attention": ("sdpa", "transformers' default attention"),
        "compile": ("off", "DeepSpeed compile off by default"),
        "packing": ("off", "no packing by default"),
        "kbit_prep": ({"qlora": "on"}, "transformers Trainer + DeepSpeed runs the same peft QLoRA script as hf (prepare_model_for_kbit_training)"),
        "padding": ("padded", "transformers Trainer collators pad each batch; transformers' sdpa"),
        "loop": ("trainer", "transformers Trainer + DeepSpeed: compute_loss keeps the loss"),
        "use_cache": ("off", "transformers Trainer + DeepSpeed (use_cache False, trainer.py line 646)"),
        "sequence_parallel": ("off", "DeepSpeed ZeRO has no tensor parallel here: no sequence-parallel plan: tensor parallelism (where used) keeps the norms and the residual stream whole on every rank"),
        "float8": ("off", "DeepSpeed: no Float8 linear conversion by default"),
        "decode_cache": ("dynamic", "transformers generate() (DynamicCache) under DeepSpeed inference: one cache"),
        "bnb_4bit_input": ("freed", "a 2025-2026 bitsandbytes (>= 0.43.2): freed"),
        "int4_kernel": ("none", "transformers generate() under DeepSpeed: no int4 library buffer modelled (the weights alone); AutoGPTQ's exllama or AutoAWQ's fused modules on request (--int4-kernel)"),
        "bnb_double_quant": ("on", "the same peft QLoRA script as hf (bnb_4bit_use_double_quant=True)"),
        "rope_cache": ("none", "a 2025-2026 transformers (>= 4.42): no per-layer cos/sin caches"),
        "vision_tower": ("on", "transformers' Trainer under DeepSpeed loads the checkpoint's model class, vision tower included"),
        "liger": ("off", "transformers' Trainer under DeepSpeed: use_liger_kernel default False"),
        "dpo_reference": ({"full": "copy", "freeze": "copy", "lora": "adapters_off", "qlora": "adapters_off"}, "TRL's DPOTrainer under DeepSpeed: as hf (trl 1.16.0 dpo_trainer.py lines 908-927; the copy prepared by prepare_deepspeed, lines 984-986, sharded under ZeRO-3 only)"),
        "quantize_experts": ("off", "TRL / transformers under DeepSpeed: as hf"),
        "flat_params": ("off", "DeepSpeed ZeRO-3 partitions each parameter on its own (no flat parameter in the module)"),
        "accum_sync": ("every", "DeepSpeed ZeRO reduces each micro-batch's gradients into their partitions (no unsharded accumulation)"),
    },
    "torchtitan": {
        # read at pytorch/torchtitan b5bcd76 (2026-08-21); its published runs: benchmarks/llama3_h100_202412_torchtitan.md
        "adapter_dtype": ("fp32", "torchtitan trains whole models (no adapters): not used"),
        "loss": ("parallel", "torchtitan/components/loss.py cross_entropy_loss: cross_entropy(pred.float(), labels), under torch's loss_parallel() with TP (parallel_dims.py loss_parallel_enabled: tp > 1 and enable_loss_parallel, on unless --parallelism.disable_loss_parallel; the output layer's ColwiseParallel keeps the logits sharded, output_layouts Shard(-1))"),
        "logits_upcast": ("loss", "the upcast sits in the loss function (pred.float())"),
        "checkpointing": ("flag", "torchtitan activation_checkpoint.mode (none | selective | full) per job: the scenario's flag (full)"),
        "optimizer_in_backward": ("off", "torchtitan steps the optimizer after backward"),
        "activation_offload": ("off", "torchtitan: no activation offload by default"),
        "attention": ("sdpa", "torchtitan llama3 attention: F.scaled_dot_product_attention (flash backend)"),
        "compile": ("off", "torchtitan compile.enable default False (its published runs turn it on: --compile on)"),
        "packing": ("on", "torchtitan's text datasets concatenate documents into seq_len chunks (no padding)"),
        "kbit_prep": ("off", "no quantized base"),
        "padding": ("unpadded", "packed fixed-length sequences: no padding mask"),
        "loop": ("trainer", "torchtitan/trainer.py line 795: `del pred` before loss.backward() (the logits are not kept)"),
        "use_cache": ("off", "torchtitan's models keep no KV cache in training"),
        "sequence_parallel": ("on", "torchtitan/config/configs.py line 169: enable_sequence_parallel: bool = True (SequenceParallel norms, activations sharded on the sequence around attention and the FFN: torchtitan/models/llama3/sharding.py)"),
        "float8": ("off", "torchtitan model.converters default [] (its published runs add 'float8': --float8 on)"),
        "decode_cache": ("dynamic", "torchtitan trains only: not used"),
        "bnb_4bit_input": ("freed", "torchtitan trains no quantized base: not used"),
        "int4_kernel": ("none", "torchtitan trains only: not used"),
        "bnb_double_quant": ("on", "torchtitan trains no bitsandbytes base: not used"),
        "rope_cache": ("none", "torchtitan's llama3 precomputes one freqs_cis for the model (not transformers' per-layer caches)"),
        "vision_tower": ("on", "torchtitan's models are text-only; a VL catalog model is counted with its tower unless asked off"),
        "liger": ("off", "torchtitan's own model (no Liger kernels)"),
        "dpo_reference": ("copy", "torchtitan has no preference-tuning trainer: objective dpo is refused under this recipe"),
        "quantize_experts": ("off", "torchtitan trains no bitsandbytes base: not used"),
        "flat_params": ("off", "torchtitan shards with FSDP2 (fully_shard)"),
        "accum_sync": ("every", "torchtitan's gradient_accumulation_steps default 1"),
    },
    "litgpt": {
        # read at Lightning-AI/litgpt 5895df10 (2024-04) and 00af8b0d (2024-09), the commits of its config_hub
        # benchmark table, and HEAD 2685705 (2026-06); Lightning Fabric 2.3.0.dev20240328 / 2.4.0.dev20240728
        # (pinned there) and master. Its model's own mechanisms (untied head, K/V repeated, the head in the
        # 4-bit conversion) are in the module docstring's `recipe litgpt` and engine/components.py.
        "adapter_dtype": ("bf16", "litgpt/finetune/lora.py main() (00af8b0d line 197): GPT(config) built under fabric.init_module with precision bf16-true (Fabric HalfPrecision.module_init_context: default dtype bf16; BitsandbytesPrecision(mode, bf16).tensor_init_context under --quantize): lora_A, lora_B bf16, and torch AdamW's states zeros_like them"),
        "loss": ({"lora": "litgpt", "qlora": "litgpt", "full": "litgpt_full", "freeze": "litgpt_full"}, "litgpt/finetune/lora.py fit() (00af8b0d line 304, HEAD line 355): `logits = model(input_ids, lm_head_chunk_size=128)`, chunked_cross_entropy(logits, ...) over the list (litgpt/utils.py); finetune/full.py fit(): `model(input_ids)` and chunked_cross_entropy(logits[..., :-1, :], ...) (HEAD lines 282-284); Fabric's _FabricModule.forward converts the output to fp32 (precision.convert_output, fabric/wrappers.py). LitGPT has no freeze method: as full.py"),
        "logits_upcast": ("loss", "Fabric's fp32 conversion of the output is part of the litgpt losses (no transformers model forward)"),
        "checkpointing": ("flag", "litgpt/finetune/lora.py setup(): one device runs strategy 'auto', no checkpointing (00af8b0d line 155, HEAD line 164); devices > 1 FSDPStrategy(activation_checkpointing_policy={Block}) checkpoints every block (line 149): the scenario's flag"),
        "optimizer_in_backward": ("off", "litgpt/finetune/lora.py fit(): fabric.backward(loss / accumulation), optimizer.step() after the last micro-batch (00af8b0d lines 308-313)"),
        "activation_offload": ("off", "LitGPT finetune scripts: no activation offload"),
        "attention": ("sdpa", "litgpt/model.py CausalSelfAttention.scaled_dot_product_attention: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None) (00af8b0d line 319, HEAD line 594); training passes mask=None (GPT.forward line 92)"),
        "compile": ("off", "LitGPT finetune/lora.py and full.py: no torch.compile"),
        "packing": ("off", "litgpt/data/base.py get_sft_collate_fn: pad_sequence to the batch's longest sample (no packing)"),
        "kbit_prep": ("off", "no peft: Fabric's BitsandbytesPrecision quantizes the linears; the embedding and norms stay in the bf16 default dtype"),
        "padding": ("unpadded", "litgpt/data/base.py _sft_collate_fn returns input_ids and labels only (00af8b0d line 123); GPT.forward passes mask=None and SDPA runs is_causal=True: no mask is built for the padded batch"),
        "loop": ("manual", "litgpt/finetune/lora.py fit(): `logits = model(...)` stays bound through fabric.backward, optimizer.step() and the next iteration's forward (00af8b0d lines 304-313); Fabric's output is fp32"),
        "use_cache": ("off", "litgpt/model.py: a KV cache exists only after set_kv_cache (generation); the training forward passes input_pos=None"),
        "sequence_parallel": ("off", "LitGPT finetune scripts: FSDP only, no tensor parallel"),
        "float8": ("off", "LitGPT finetune scripts: no Float8 linear conversion"),
        "decode_cache": ("dynamic", "litgpt/model.py KVCache: one preallocated cache per layer (set_kv_cache)"),
        "bnb_4bit_input": ("freed", "LitGPT HEAD 2685705 pyproject.toml: bitsandbytes>=0.45.2,<0.50 on Linux (freed); 5895df10 and 00af8b0d pinned bitsandbytes==0.42.0 (kept) until d2ed13c3, 2024-12"),
        "int4_kernel": ("none", "LitGPT finetunes through Fabric's bitsandbytes precision: no GPTQ/AWQ kernels"),
        "bnb_double_quant": ("on", "LitGPT's --quantize names the storage itself: bnb.nf4 (no double quantization) is the recipe's base 'auto', nf4_nodq; bnb.nf4-dq is base nf4 (litgpt/utils.py / lightning BitsandbytesPrecision modes)"),
        "rope_cache": ("none", "litgpt/model.py GPT.rope_cache: one cos/sin cache for the model (not transformers' per-layer caches)"),
        "vision_tower": ("on", "LitGPT's models are text-only; a VL catalog model is counted with its tower unless asked off"),
        "liger": ("off", "LitGPT's own model (no Liger kernels)"),
        "dpo_reference": ("copy", "LitGPT ships no DPO script (litgpt/finetune: full, lora, adapter, adapter_v2): objective dpo is refused under this recipe"),
        "quantize_experts": ("off", "LitGPT quantizes its own nn.Linear modules (--quantize): no fused experts"),
        "flat_params": ("off", "LitGPT trains in bf16-true (no autocast: no casts to cache); whether its Fabric FSDP strategy puts adapters and frozen weights in one flat parameter is not re-read: off keeps the engine as before"),
        "accum_sync": ("last", "litgpt/finetune/lora.py and full.py: fabric.no_backward_sync(model, enabled=is_accumulating) on every micro-batch but the step's last (global_batch_size / micro_batch_size > 1 in config_hub), Fabric's FSDPStrategy implementing it as FSDP1's no_sync()"),
    },
    "automodel": {
        # NVIDIA NeMo Automodel, read at b4733bdc1 (2025-09-18, the commit of its gradient-checkpointing guide): its
        # llm recipe (nemo_automodel/recipes/llm/train_ft.py) over NeMoAutoModelForCausalLM (a transformers model,
        # patched), FSDP2 (components/distributed/fsdp2.py), its own LoRA (components/_peft/lora.py)
        "adapter_dtype": ("bf16", "NVIDIA NeMo Automodel b4733bdc1 components/_peft/lora.py LinearLoRA._init_adapter: lora_A and lora_B built in lora_dtype or the base weight's dtype (lines 171-177); the model loads torch_dtype 'auto' (the checkpoint's bf16)"),
        "loss": ("unfused", "NVIDIA NeMo Automodel b4733bdc1 examples/llm_finetune/*.yaml loss_fn: components/loss/masked_ce.py MaskedCrossEntropy (logits.float() then F.cross_entropy, lines 74-82); train_ft.py pops the labels before calling the model (line 898), so Liger's fused loss does not run"),
        "logits_upcast": ("loss", "NVIDIA NeMo Automodel b4733bdc1 MaskedCrossEntropy upcasts inside the loss (fp32_upcast, line 74)"),
        "checkpointing": ("flag_module", "NVIDIA NeMo Automodel b4733bdc1 components/distributed/parallelizer.py lines 147-171: distributed.activation_checkpointing (default false) wraps each layer's self_attn, mlp, input_layernorm and post_attention_layernorm in its own checkpoint_wrapper: module when the scenario's flag is on"),
        "optimizer_in_backward": ("off", "NVIDIA NeMo Automodel b4733bdc1 train_ft.py: backward per micro-batch, optimizer.step() once per global batch"),
        "activation_offload": ("off", "NVIDIA NeMo Automodel b4733bdc1 recipes/llm/train_ft.py: no activation offload (no offload option in the llm recipe)"),
        "attention": ("flash", "NVIDIA NeMo Automodel b4733bdc1 components/_transformers/auto_model.py from_pretrained attn_implementation='flash_attention_2' (line 180), falling back to sdpa, then eager, where it is not installed (_get_next_fallback_attn)"),
        "compile": ("off", "NVIDIA NeMo Automodel b4733bdc1 train_ft.py: torch.compile only where a compile config is given (cfg_compile None by default, line 258)"),
        "packing": ("off", "NVIDIA NeMo Automodel b4733bdc1 examples/llm_finetune/*.yaml packed_sequence_size: 0"),
        "kbit_prep": ("off", "NVIDIA NeMo Automodel b4733bdc1: its QLoRA (components/quantization/qlora.py) does not call peft's prepare_model_for_kbit_training"),
        "padding": ("padded", "NVIDIA NeMo Automodel b4733bdc1 components/datasets/utils.py default_collater pads each batch to its longest sequence (flash attention unpads: no mask tensor)"),
        "loop": ("manual", "NVIDIA NeMo Automodel b4733bdc1 train_ft.py _forward_backward_step lines 937-949: `out = model(**batch)`, the loss from out.logits, then backward with `out` still bound"),
        "use_cache": ("off", "NVIDIA NeMo Automodel b4733bdc1: the model config's default under loop manual (rules: use_cache auto), which parallelizer.py lines 149-153 set False under activation checkpointing"),
        "sequence_parallel": ("off", "NVIDIA NeMo Automodel b4733bdc1 components/distributed/fsdp2.py FSDP2Manager sequence_parallel default False"),
        "float8": ("off", "NVIDIA NeMo Automodel b4733bdc1 train_ft.py: apply_fp8_to_model only where an fp8 config is given (cfg_fp8=None by default, line 97)"),
        "decode_cache": ("dynamic", "transformers' generate() (NeMoAutoModelForCausalLM is a transformers model)"),
        "bnb_4bit_input": ("freed", "NVIDIA NeMo Automodel b4733bdc1 pyproject.toml line 72: bitsandbytes==0.45.5 (>= 0.43.2: the 4-bit matmul's input is not kept)"),
        "int4_kernel": ("none", "NVIDIA NeMo Automodel b4733bdc1 trains: no int4 inference kernels"),
        "bnb_double_quant": ("on", "NVIDIA NeMo Automodel b4733bdc1 components/quantization/qlora.py line 34: bnb_4bit_use_double_quant default True"),
        "rope_cache": ("none", "a 2025 transformers (>= 4.42): no per-layer cos/sin caches"),
        "vision_tower": ("on", "NVIDIA NeMo Automodel b4733bdc1 loads the checkpoint's model class (NeMoAutoModelForImageTextToText for VL checkpoints)"),
        "liger": ("on", "NVIDIA NeMo Automodel b4733bdc1 components/_transformers/auto_model.py from_pretrained use_liger_kernel=True (line 176), applied by _patch_liger_kernel (liger_kernel's _apply_liger_kernel_to_instance) where liger-kernel is installed, a base dependency on x86_64 (pyproject.toml line 74)"),
        "dpo_reference": ("copy", "NVIDIA NeMo Automodel b4733bdc1 has no DPO recipe in nemo_automodel/recipes/llm: objective dpo is refused under this recipe"),
        "quantize_experts": ("off", "NVIDIA NeMo Automodel's QLoRA (components/quantization/qlora.py) through BitsAndBytesConfig: as hf (not re-read for MoE)"),
        "flat_params": ("off", "NVIDIA NeMo Automodel shards with FSDP2 (components/distributed/fsdp2.py)"),
        "accum_sync": ("every", "NVIDIA NeMo Automodel: not re-read for accumulation under no_sync; every keeps the engine as before"),
    },
}

# the columns, in order: recipe then the switches (scenario columns, CLI flags, JSON keys)
STACK_COLUMNS = ("recipe",) + tuple(SWITCHES)


def recipe_value(recipe: str, switch: str, method: str, grad_checkpointing: bool) -> str:
    """The value `recipe` gives `switch` for a row of `method` (checkpointing 'flag': the row's
    grad_checkpointing)."""
    value = RECIPES[recipe][switch][0]
    if isinstance(value, dict):
        value = value.get(method, "off")
    if value == "flag":
        value = "full" if grad_checkpointing else "none"
    elif value == "flag_module":  # NeMo Automodel: its per-module wrappers where checkpointing is asked
        value = "module" if grad_checkpointing else "none"
    return value


def stacks_table() -> list[dict]:
    """Every recipe's value and source of every switch (docs/stacks.md's table)."""
    rows = []
    for recipe, switches in RECIPES.items():
        for switch, (value, source) in switches.items():
            shown = value if isinstance(value, str) else ", ".join(f"{k}: {v}" for k, v in value.items()) + ", else off"
            shown = {"flag": "as --grad-checkpointing", "flag_module": "module where --grad-checkpointing, else none"}.get(shown, shown)
            rows.append({"recipe": recipe, "switch": switch, "value": shown, "source": source})
    return rows


__all__ = ["SWITCHES", "RECIPES", "RECIPE_NAMES", "DEFAULT_RECIPE", "STACK_COLUMNS", "recipe_value", "stacks_table",
           "DPO_RECIPES", "DPO_NO_PRECOMPUTED", "DPO_NO_ADAPTER_COPY", "DPO_TRL_HEAD", "DPO_FULL_LOGITS", "TRL_TILE_TOKENS", "TRL_TILE_VOCAB",
           "LOSS_CHUNKS", "SELECTIVE_EVERY", "OFFLOAD_LAYERS_IN_FLIGHT", "LITGPT_CHUNK_TOKENS", "NO_TRAINING_CACHE"]
