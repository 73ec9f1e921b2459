"""Memory per GPU for every scenario at once, phase by phase.

The model (derivation in docs/engine.md):

* A training step has phases; the peak is the largest, not the sum of everything:
  - `forward`: weights + optimizer states + saved activations + the loss computation
    (16-bit logits, their fp32 upcast and log_softmax's fp32 output);
  - `loss_backward`: the start of backward: log_softmax's backward holds its saved output,
    the incoming gradient and its own output, all fp32, over the whole vocabulary;
  - `backward`: a decoder layer's backward (with checkpointing: its recomputed activations)
    on top of what is still saved, and the lm_head gradient;
  - `backward_end`: every gradient exists; with tied embeddings the embedding's gradient and
    lm_head's are summed in autograd's input buffer (two more V x h tensors) before the
    parameter's .grad is set;
  - `grad_reduce` (DeepSpeed ZeRO-1/2 only): its gradients' reduction after backward (ZeRO-1:
    every gradient beside the rank's partition buffer; ZeRO-2: the last bucket);
  - `optimizer`: weights + gradients + states + the optimizer's step temporaries.
* Inference: `prefill` (weights + KV cache + one layer's working set) and `logits`
  (weights + KV cache + the output logits); `attention` (an eager prefill's scores), `load`
  (AutoAWQ's fused modules while they are built) and `mask` (transformers building an SDPA
  prefill's sliding-window mask, before the first layer) where a row has them.

Each phase is a sum of components (`PHASE_COMPONENTS`: which, in what order); each component
is `fixed + per_token * tokens + per_token_seq * tokens * seq + seq_sq * seq^2`, where tokens =
batch x sequence per GPU (per_token_seq: an attention mask or eager scores, batch x seq x seq; seq_sq:
one (1, 1, seq, seq) mask whatever the batch, from the window on: see Part); engine/components.py
gives each component's terms, phase by phase. Fixed parts are split into what data-parallel ZeRO
sharding divides (`shard`) and what it does not (`fixed`), so that the number of GPUs
needed, the largest batch (linear in the batch at a given seq) and the longest context (a
quadratic's root at a given batch) are solved in closed form.

Activations are counted tensor by tensor for Hugging Face's LlamaDecoderLayer with SDPA
(see `layer_activation_bytes`); every coefficient is a dtype size times a tensor width.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

COMPONENTS = (
    "weights", "gradients", "optimizer", "optimizer_temp", "autocast_copies",
    "activations", "logits", "kv_cache", "workspace",
)
# grad_reduce: DeepSpeed ZeRO-1/2's gradient reduction after autograd's backward (its rows only,
# engine/components.py deepspeed_zero12): every gradient or the rank's partition, its partition buffer,
# the reduction bucket and the all-reduce's flat copy
TRAIN_PHASES = ("forward", "loss_backward", "backward", "backward_end", "grad_reduce", "optimizer")
# attention: a prefill's eager attention scores (Gemma 2, --attention eager), beside the layer's input,
# q and K/V repeated to every head instead of the MLP's working set (engine/components.py workspace).
# load: the loading of AutoAWQ's fused modules (--int4-kernel autoawq_fused): every layer's fused QKV
# beside the original q/k/v, the preallocated caches and RoPE tables (engine/components.py int4_kernel_parts)
# mask: transformers 5.24 building the sliding-window mask of an SDPA prefill (masking_utils.py sdpa_mask:
# `_ignore_causal_mask_sdpa` returns False once kv_length >= the window, and `and_masks` materializes the
# causal and window comparisons and their conjunction, three (1, 1, seq, seq) bool tensors), before the
# first layer: the weights and the embeddings' output, no KV cache yet (engine/components.py workspace)
INFER_PHASES = ("prefill", "logits", "attention", "load", "mask")
PHASES = TRAIN_PHASES + INFER_PHASES

# The components each phase holds, in the order its totals add them (IEEE addition is not
# associative: this order is part of the numbers; engine/components.py gives each term).
PHASE_COMPONENTS = {
    # (issue 28: the training loop's kept outputs -- logits, a KV cache -- come last, so the phases
    # without them add in the order they always did)
    # (gradients last in forward and loss_backward: only gradient accumulation's alive gradients, engine/stacks.py
    # accum_sync last, are there)
    "forward": ("weights", "optimizer", "workspace", "autocast_copies", "activations", "logits", "kv_cache", "gradients"),
    "loss_backward": ("weights", "optimizer", "workspace", "autocast_copies", "activations", "logits", "kv_cache",
                      "gradients"),
    "backward": ("weights", "optimizer", "workspace", "autocast_copies", "gradients", "activations", "logits",
                 "kv_cache"),
    "backward_end": ("weights", "optimizer", "workspace", "gradients", "logits", "kv_cache"),
    "grad_reduce": ("weights", "optimizer", "workspace", "gradients", "logits", "kv_cache"),
    "optimizer": ("weights", "gradients", "optimizer", "optimizer_temp", "workspace", "logits", "kv_cache"),
    "prefill": ("weights", "kv_cache", "workspace"),
    # (the workspace last: buffers a library or the model keeps beside the logits, --int4-kernel, --rope-cache)
    "logits": ("weights", "kv_cache", "logits", "workspace"),
    "attention": ("weights", "kv_cache", "workspace"),
    "load": ("weights", "kv_cache", "workspace"),
    "mask": ("weights", "workspace"),
}


class Part(NamedTuple):
    """One component's bytes in one phase, per memory configuration (or a scalar): fixed +
    shard / dp + per_token x tokens + per_token_seq x tokens x seq (issue 12: the attention mask
    and eager attention scores, batch x seq x seq) + seq_sq x seq^2 where seq reaches the row's
    sliding window (issue 28: transformers' unpadded sliding-window mask, (1, 1, seq, seq) whatever
    the batch, built only from the window on; engine/executor.py RowTerms.seq_sq)."""

    fixed: np.ndarray | float = 0.0
    shard: np.ndarray | float = 0.0
    per_token: np.ndarray | float = 0.0
    per_token_seq: np.ndarray | float = 0.0
    seq_sq: np.ndarray | float = 0.0
    # (issue 28) per token and per token per position, counted only where seq reaches the row's sliding
    # window: a training layer's sliding-window mask in SDPA's dtype and K/V repeated to every head, which
    # SDPA keeps once transformers passes a mask (engine/components.py sliding_window_training)
    per_token_w: np.ndarray | float = 0.0
    per_token_seq_w: np.ndarray | float = 0.0


@dataclass
class Phase:
    """One phase: per component, bytes = fixed + shard / dp + per_token * tokens
    + per_token_seq * tokens * seq + seq_sq * seq^2 (from the window on)."""

    fixed: dict[str, np.ndarray] = field(default_factory=dict)
    shard: dict[str, np.ndarray] = field(default_factory=dict)
    per_token: dict[str, np.ndarray] = field(default_factory=dict)
    per_token_seq: dict[str, np.ndarray] = field(default_factory=dict)
    seq_sq: dict[str, np.ndarray] = field(default_factory=dict)
    per_token_w: dict[str, np.ndarray] = field(default_factory=dict)
    per_token_seq_w: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, comp: str, fixed=0.0, shard=0.0, per_token=0.0, per_token_seq=0.0, seq_sq=0.0, per_token_w=0.0,
            per_token_seq_w=0.0):
        for part, value in ((self.fixed, fixed), (self.shard, shard), (self.per_token, per_token),
                            (self.per_token_seq, per_token_seq), (self.seq_sq, seq_sq),
                            (self.per_token_w, per_token_w), (self.per_token_seq_w, per_token_seq_w)):
            if not (np.isscalar(value) and value == 0):
                part[comp] = part.get(comp, 0.0) + value
        return self

    def totals(self):
        f = sum(self.fixed.values(), 0.0)
        s = sum(self.shard.values(), 0.0)
        t = sum(self.per_token.values(), 0.0)
        return f, s, t

    def seq_total(self):
        """The bytes per token per sequence position (0.0 when no component has any)."""
        return sum(self.per_token_seq.values(), 0.0)

    def window_totals(self):
        """(per token, per token per position) counted from the window on (0.0 where no component has any)."""
        return sum(self.per_token_w.values(), 0.0), sum(self.per_token_seq_w.values(), 0.0)

    def seq_sq_total(self):
        """The bytes per squared sequence length, whatever the batch (0.0 when no component has any)."""
        return sum(self.seq_sq.values(), 0.0)


def is_zero(value) -> bool:
    """A scalar zero: a term that adds nothing (arrays are never taken as zero, whatever they hold)."""
    return np.ndim(value) == 0 and value == 0


def assemble(parts: dict[str, dict[str, Part]]) -> dict[str, Phase]:
    """Every phase from each component's parts ({component: {phase: Part}}), the components
    added in PHASE_COMPONENTS's order."""
    for comp, by_phase in parts.items():
        stray = [name for name in by_phase if comp not in PHASE_COMPONENTS[name]]
        if stray:  # a term the totals would leave out
            raise AssertionError(f"component {comp!r} has a part in phase {stray[0]!r}, which does not hold it")
    phases = {}
    for name in PHASES:
        phase = Phase()
        for comp in PHASE_COMPONENTS[name]:
            part = parts.get(comp, {}).get(name)
            if part is not None:
                phase.add(comp, *part)
        phases[name] = phase
    return phases


def layer_activation_bytes(h, f, qd, kvd, a, R, M, cast_each, saves, wgrad, adapted, lora_r, tp, adapter16=False,
                           seq_split=1.0, dropout=False, uncast=False, fused_qkv=False, liger=False, down_f=None):
    """Bytes per token saved for backward by one LlamaDecoderLayer (HF transformers, SDPA).

    R: bytes of the residual stream (4 under fp32/autocast, 2 in pure 16-bit).
    M: bytes of matmul outputs (4 in fp32, else 2).
    cast_each: autocast on (each linear casts its fp32 input to a 16-bit copy it keeps).
    saves[m]: 1 where module m's weight is trained (full fine-tuning, freeze's trained layers).
    adapted[m]: 1 where a LoRA adapter sits on module m (frozen linears keep only their weight).
    wgrad: 1 where the norm weights are trained.
    lora_r: LoRA rank (0 when no adapters); tp: tensor-parallel degree (splits the
      attention and MLP widths, not the h-wide norms and residual stream).
    seq_split: sequence parallelism beside tp (issue 27; tp where it is on, else 1): the norms are
      kept for seq / tp of the tokens on each rank (torchtitan's SequenceParallel norms, configs.py
      enable_sequence_parallel True; Korthikanti et al. 2022, "Reducing Activation Recomputation in
      Large Transformer Models", section 4.2.2). The column-parallel linears' h-wide inputs are not:
      under torch's DTensor tensor parallelism, the plan torchtitan applies (pytorch/torchtitan
      9dec370 torchtitan/parallelisms/parallelize_llama.py apply_tp: "attention" and "feed_forward"
      PrepareModuleInput(input_layouts Shard(1), desired_input_layouts Replicate())), the module's
      input is all-gathered over the sequence before wq/wk/wv (and w1/w3) run (torch 2.6
      distributed/tensor/parallel/style.py PrepareModuleInput._prepare_input_arg,
      `dt_inp.redistribute(placements=(desired_layout,))`), and each linear's matmul keeps that
      gathered input, every token of the sequence, for its weight's gradient. (Megatron-LM's
      column-parallel linears save the sequence-sharded input and all-gather it again in backward;
      no recipe here runs Megatron, so sequence_parallel on is DTensor's.)

    Tensor by tensor (checked op by op with torch.autograd.graph.saved_tensors_hooks on
    transformers' LlamaDecoderLayer; see docs/accuracy.md):
      RMSNorm: pow() keeps x in fp32 (4h: the upcast copy, or x itself when fp32), rsqrt()
               keeps one fp32 value per token; weight * y keeps y (R*h) when the weight trains.
      q/k/v inputs: the norm's output, once (R*h), or one 16-bit cast per module under autocast.
      SDPA (flash path): keeps q, k, v (after rotary; k, v at kv width with GQA), its output
               and a log-sum-exp (fp32, one per head); the s x s scores are never stored.
               The output is laid out (batch, seq, heads, dim) already, so o_proj keeps the
               same tensor: transpose(1, 2).contiguous() copies nothing.
      MLP: SiLU keeps gate's output, the product keeps SiLU's output and up's output (3*M*f),
               down_proj keeps the product (M*f) when its weight trains. down_f (default f): the input
               width of down_proj's adapter, where LoRA adapts a narrower MLP than f (a mixture of
               experts' shared expert; engine/components.py Inputs.down_f).
      LoRA (peft): adapters are fp32 (peft's autocast_adapter_dtype=True upcasts them), so a
               16-bit input is cast to fp32 for each adapted module and kept by lora_A (4*in);
               lora_B keeps lora_A's fp32 output (4*r). Under autocast lora_A instead casts
               to 16-bit (2*in, or nothing new when its input is already 16-bit).
      adapter16 (issue 13, engine/stacks.py adapter_dtype bf16): adapters in the base's 16-bit
               type (torchtune) take the 16-bit input the base linear keeps (nothing new) and
               lora_B keeps a 16-bit output (2*r).
      dropout (lora_dropout > 0, where adapters exist): peft 0.21.2 tuners/lora/layer.py
               Linear.forward (lines 1098-1102) runs `x = self._cast_input_dtype(x, lora_A.weight.dtype)`
               then `lora_B(lora_A(dropout(x)))` with an nn.Dropout per adapted module (update_layer,
               lines 255-258; bnb.py's Linear4bit / Linear8bitLt likewise, their cast skipped under
               autocast); torchtune's LoRALinear `self.lora_a(self.dropout(x))` (torchtune/modules/
               peft/lora.py line 145, no cast). On a GPU the dropout is ATen's native_dropout (aten/src/
               ATen/native/Dropout.cpp `dropout`), which keeps a bool mask (1 byte per input value;
               cuda/Dropout.cu native_dropout_cuda -> dropout_cuda<bool>) and nothing else, and lora_A
               keeps the dropout's output, a tensor of its own: so every adapted module keeps
               1*in more (the mask) and, where lora_A kept the module's input itself (no cast, no
               autocast: adapter16, or an fp32 base), its own copy of that input's width in that
               input's dtype, and the input is no longer kept by the adapters (once, shared by q, k,
               v or gate, up). Where lora_A kept a cast already (fp32 adapters on a 16-bit base: the
               4*in fp32 copy, now the dropout's fp32 output; autocast: its 16-bit cast of the dropout's
               output, 2*in) only the mask is new. Traced on a tiny Llama with real tensors,
               benchmarks/check_lora_dropout_saved.py: +1.00 x in per module (fp32 adapters on bf16,
               amp_bf16), +2 / +3 / +1 x in for q,v / o / down with bf16 adapters, +3 / +5 / +1 on fp32.
               Under autocast o_proj's input is SDPA's 16-bit output: where lora_A gets it uncast
               (`uncast`: adapter16, or bitsandbytes' LoRA layers, which skip `_cast_input_dtype`
               under autocast, peft tuners/lora/bnb.py `requires_conversion = not
               torch.is_autocast_enabled()`) the dropout's 16-bit output is a tensor of its own (2*qd).
      fused_qkv (recipe litgpt, engine/components.py `litgpt_model`): LitGPT's LoRAQKVLinear adapts q, k and v
               in one module with ONE dropout on their shared input, `after_A = F.linear(self.lora_dropout(x),
               self.lora_A)` (Lightning-AI/litgpt litgpt/lora.py LoRAQKVLinear.forward: line 420 at 5895df10,
               426 at 00af8b0d, 405 at 2685705; nn.Dropout built once per module, LoRALayer.__init__ line 82):
               one bool mask (1*h) and one dropout output (the input's dtype, R*h: bf16 under bf16-true)
               for the q/k/v group, however many of q, k, v are adapted. o (attn.proj) and the MLP's fc_1,
               fc_2, proj are LoRALinear, one dropout each (`self.lora_dropout(x) @ self.lora_A.transpose(0,
               1)`, line 171 at all three commits), as peft's, but with no cast before lora_A (`uncast`).
               Traced with LitGPT's own lora.py on real tensors, benchmarks/check_litgpt_lora_saved.py:
               +1 x h per layer for q,v or q,k,v (peft with bf16 adapters: +4 x h for q,v, 2 x h per module).
      liger (engine/stacks.py liger; Liger-Kernel v0.6.2): LigerRMSNormFunction saves (X, W, RSTD), the norm's
               input itself (R*h) and one fp32 rstd per token, in place of the fp32 upcast, rsqrt and normalized
               copy; LigerSiLUMulFunction saves (a, b), gate's and up's outputs (2*M*f), in place of SiLU's
               and the product's three.
    """
    q_saves, k_saves, v_saves = saves["q_proj"], saves["k_proj"], saves["v_proj"]
    g_saves, u_saves, d_saves = saves["gate_proj"], saves["up_proj"], saves["down_proj"]
    # pure 16-bit base with fp32 adapters: every adapted module keeps its own fp32 copy
    fp32_cast = (lora_r > 0) & (R == 2) & ~cast_each & ~np.asarray(adapter16, dtype=bool)
    shared_keep = np.where(fp32_cast, 0.0, 1.0)
    # LoRA dropout (see above): `drop` 1 where it runs; `own` 1 where lora_A then keeps the dropout's
    # output as a copy of its input (no cast before it: the input's dtype), beside every module's mask
    drop = np.where((lora_r > 0) & np.asarray(dropout, dtype=bool), 1.0, 0.0)
    any_drop = bool(np.any(drop))
    own = np.where(cast_each, 0.0, drop * shared_keep)
    input_keep = shared_keep * (1.0 - own)  # the adapters keep the module's input itself
    keep_each = np.where(cast_each, shared_keep, input_keep) if any_drop else shared_keep
    any_liger = bool(np.any(liger))

    def norm_and_inputs(names, trained, fused=False):
        a_count = sum(adapted[m] for m in names)
        keepers = sum(trained) + a_count * keep_each
        any_keeps = np.minimum(keepers, 1.0)
        inputs = np.where(cast_each, 2.0 * h * keepers, R * h * any_keeps) + 4.0 * h * a_count * (1 - shared_keep)
        if any_drop:  # each adapted module's mask, and its own copy where lora_A kept the input itself
            drops = np.where(np.asarray(fused, dtype=bool), np.minimum(a_count, 1.0), a_count)
            inputs = inputs + (R * own + drop) * h * drops
        # the norm's own tensors are sequence-sharded, the linears' gathered input is not (seq_split
        # above); for seq_split 1 the same sum as before, in the same order
        return rms_norm_saved_bytes(h, R, wgrad, liger) / seq_split + inputs

    # Under autocast SDPA runs in 16-bit: its q, k, v are 16-bit casts of the rotary outputs.
    qkv_bytes = np.where(cast_each, 2.0, M)
    attn = (qkv_bytes * (qd + 2 * kvd) + qkv_bytes * qd + 4.0 * a) / tp
    attn = attn + 4.0 * qd * adapted["o_proj"] * (1 - shared_keep) / tp
    glu = np.where(liger, 2.0, 3.0) * M * f if any_liger else 3.0 * M * f  # SiLU and the product (Liger: a, b)
    fd = f if down_f is None else down_f  # down_proj's adapter's input width
    mlp = (glu + M * np.maximum(f * d_saves, fd * adapted["down_proj"] * input_keep)) / tp
    mlp = mlp + 4.0 * fd * adapted["down_proj"] * (1 - shared_keep) / tp
    if any_drop:  # o_proj's input (SDPA's output) and down_proj's (the product) at M bytes
        o_own = np.where(cast_each, 2.0 * drop * np.asarray(uncast, dtype=bool), M * own)
        attn = attn + (o_own + drop) * qd * adapted["o_proj"] / tp
        mlp = mlp + (M * own + drop) * fd * adapted["down_proj"] / tp
    n_adapted = sum(adapted.values())
    lora = np.where(cast_each | np.asarray(adapter16, dtype=bool), 2.0, 4.0) * lora_r * n_adapted
    return (
        norm_and_inputs(("q_proj", "k_proj", "v_proj"), (q_saves, k_saves, v_saves), fused_qkv)
        + attn
        + norm_and_inputs(("gate_proj", "up_proj"), (g_saves, u_saves))
        + mlp
        + lora
    )


def rms_norm_saved_bytes(h, R, wgrad, liger=False):
    """Bytes per token an RMSNorm keeps for backward (its output aside, which the next module keeps).
    transformers' (LlamaRMSNorm): pow() keeps x in fp32 (4h: the upcast copy, or x itself when fp32),
    rsqrt() one fp32 value, and weight * y keeps y (R*h) where the weight trains. Liger's
    (engine/stacks.py liger; Liger-Kernel v0.6.2 ops/rms_norm.py LigerRMSNormFunction saves (X, W, RSTD)):
    the input itself (R*h) and one fp32 rstd."""
    norm = 4.0 * h + 4.0 + wgrad * R * h
    if np.any(liger):
        norm = np.where(liger, R * h + 4.0, norm)
    return norm


def layer_backward_transient_bytes(h, f, R, M, tp, liger=False):
    """Bytes per token alive on top of saved activations while one layer runs backward.

    The incoming gradient of the layer output (R*h) and, in the MLP (its widest part),
    the gradient of down_proj's input, then the gradients of SiLU's output and of up's
    output computed by the product's backward: three f-wide tensors of the matmul dtype.
    Liger's SwiGLU (engine/stacks.py liger) writes the gradients of gate's and up's outputs into the
    saved a and b in place (Liger-Kernel v0.6.2 ops/swiglu.py _swiglu_backward_kernel: `tl.store(a_ptr
    ..., da_row)`, `tl.store(b_ptr ..., db_row)`): of the three only down_proj's input's is new.
    """
    transient = R * h + 3.0 * M * f / tp
    if np.any(liger):
        transient = np.where(liger, transient - 2.0 * M * f / tp, transient)
    return transient


def logits_bytes(V, M, tp):
    """Per token: (forward, start of backward) loss buffers.

    HF's ForCausalLMLoss upcasts the logits (`logits.float()`, a new fp32 tensor unless
    they already are fp32) and cross_entropy keeps log_softmax's fp32 output. In backward,
    nll_loss's fp32 gradient and log_softmax's fp32 gradient exist together with it.
    The 16-bit logits themselves are dropped once the loss is computed, as Hugging Face's
    Trainer does (it keeps only the loss), so nothing of them is kept through the layers'
    backward; a loop that holds `outputs` through backward keeps M*V more per token.
    """
    upcast = np.where(M < 4, 4.0, 0.0)
    forward = (M + upcast + 4.0) * V / tp
    backward = 12.0 * V / tp
    return forward, backward


def stack_logits_bytes(V, M, h, tp, old, kind, compiled, legacy, chunks):
    """Per token: (forward, start of backward) loss buffers under the stack's loss (issue 13,
    engine/stacks.py `loss`); `old` = logits_bytes' pair (the unfused loss), kept bit for bit
    where it applies. kind: {'chunked', 'linear_chunked', 'fused'} -> row masks; compiled,
    legacy: row masks (torch.compile on; transformers' older in-model upcast). Derivation, with
    u = 4 bytes of a chunk's fp32 upcast when the logits are 16-bit (0 when already fp32) and c
    the 16-bit cast back of its gradient (M, 0 in fp32), C chunks:
      legacy unfused (transformers before 4.46: logits.float() in the model, then
               shift_logits = logits[..., :-1, :].contiguous()): fp32 logits + the shifted fp32
               copy + log_softmax's fp32 output = 12 V forward; backward as the unfused loss.
      chunked (CEWithChunkedOutputLoss): every chunk's 16-bit logits (M V, the model's output
               list) + the fp32 log_softmax outputs cross_entropy saves (4 V over all chunks) +
               the last chunk's upcast (u V / C); backward (the logits list is deleted first):
               the saved outputs + one chunk's nll and log_softmax gradients and cast (8 + c) V / C.
      linear_chunked (LinearCrossEntropyLoss): the projection per chunk inside the loss: no
               whole 16-bit logits; the saved fp32 outputs (4 V) + one chunk's logits, upcast
               (M + u) V / C; backward as chunked.
      compiled chunked / linear_chunked: inductor fuses the upcast, log_softmax and nll into one
               reduction kernel that materialises no V-wide tensor, keeps each chunk's 16-bit input
               and two fp32 values per token (the max and the log-sum-exp, 8 B) and recomputes the
               softmax in backward, which allocates only the chunk's 16-bit gradient: M V + 8
               forward, M V + M V / C + 8 backward (benchmarks/check_compiled_ce_buffers.py lists
               the generated code's buffers, torch 2.13).
      fused (Liger / Unsloth fused linear cross-entropy): logits of about 2 h / V of the tokens at
               a time (2 (M + u + 4) h per token) and the hidden states' gradient computed in
               forward and kept (M h); backward: that gradient (M h).
      parallel (torch loss_parallel over vocab-sharded logits, tp > 1; the unfused loss at tp 1):
               torch/distributed/tensor/parallel/loss.py (read at pytorch 02eef6b). Forward, the
               _log_softmax handler beside the 16-bit logits (M) and their upcast (u):
               `shifted = x - x_max` (4) and `torch.exp(shifted)` (4) alive together, then `result`
               (4, saved) in exp's freed place: (M + u + 8) V / tp. Backward,
               _nll_loss_and_log_softmax_backward: the saved result (4), `grad_input =
               torch.zeros_like(x)` (4), `torch.exp(x)` (4) and their sum (4) alive together, then the
               product with grad_output in exp's place (the log-softmax backward handler only casts):
               16 V / tp, where the unfused loss's nll and log-softmax gradients hold 12.
      compiled (the unfused loss under torch.compile, torchtitan's build_cross_entropy_loss with
               --compile since 2025): the compiled chunked loss's kernels over one chunk, M V + 8
               forward, 2 M V + 8 backward (the saved logits and their 16-bit gradient).
      litgpt (LitGPT finetune/lora.py: lm_head per 128-token chunk, the list converted to fp32 by
               Fabric's _FabricModule.forward, chunked_cross_entropy per chunk; engine/stacks.py), with
               F = 4 bytes of the converted logits (M for an fp32 model, returned as is): forward the fp32
               logits and every chunk's log_softmax output, 2 F V; backward the saved outputs, each
               chunk's turning into its logits' gradient (F V). The fp32 logits themselves are the
               output the loop keeps (kept_logits_bytes), added by loop manual from the loss backward on.
      litgpt_full (finetune/full.py: whole logits, converted to fp32, chunked_cross_entropy over the
               shifted logits reshaped to (tokens, V) and split in 128 rows): forward 3 F V (the fp32
               logits, the reshape's copy of the shifted slice, the log-softmax outputs); backward 2 F V
               (split's backward concatenates the chunks' gradients, then the slice's backward
               allocates a zero-filled (batch, seq, V) and copies them in).
    """
    u = np.where(M < 4, 4.0, 0.0)
    c = np.where(M < 4, M, 0.0)
    fwd_old, bwd_old = old
    chunked, linear, fused = kind["chunked"], kind["linear_chunked"], kind["fused"]
    fwd = np.where(legacy & ~(chunked | linear | fused), 12.0 * V / tp, fwd_old)
    bwd = bwd_old
    if "parallel" in kind:
        par = kind["parallel"] & (tp > 1)
        fwd = np.where(par, (M + u + 8.0) * V / tp, fwd)
        bwd = np.where(par, 16.0 * V / tp, bwd)
    if "compiled" in kind:  # the compiled chunked loss's kernels over one chunk: the whole logits
        whole = kind["compiled"]
        fwd = np.where(whole, M * V / tp + 8.0, fwd)
        bwd = np.where(whole, 2.0 * M * V / tp + 8.0, bwd)
    fwd = np.where(chunked, (M * V + 4.0 * V + u * V / chunks) / tp, fwd)
    fwd = np.where(linear, (4.0 * V + (M + u) * V / chunks) / tp, fwd)
    bwd = np.where(chunked | linear, (4.0 * V + (8.0 + c) * V / chunks) / tp, bwd)
    comp = compiled & (chunked | linear)
    fwd = np.where(comp, M * V / tp + 8.0, fwd)
    bwd = np.where(comp, (M * V + M * V / chunks) / tp + 8.0, bwd)
    fwd = np.where(fused, 2.0 * (M + u + 4.0) * h + M * h, fwd)
    bwd = np.where(fused, M * h, bwd)
    if "litgpt" in kind:
        F = np.where(M < 4, 4.0, M)
        lit, lit_full = kind["litgpt"], kind["litgpt_full"]
        fwd = np.where(lit, 2.0 * F * V / tp, np.where(lit_full, 3.0 * F * V / tp, fwd))
        bwd = np.where(lit, F * V / tp, np.where(lit_full, 2.0 * F * V / tp, bwd))
    return fwd, bwd

def moe_routing_bytes(h, E, k, M, experts_train, tp):
    """Bytes per token one MoE layer saves beyond its experts' MLP tensors (which the dense formula
    counts at the width experts_per_token x expert width), for transformers' default experts
    implementation (5.24 integrations/moe.py grouped_mm_experts_forward; traced op by op on a
    small Qwen3-MoE under fake tensors, docs/accuracy.md):
      router: the fp32 softmax over the E experts (4E), the top-k sum (4), the normalized weights
        (4k), the top-k, sort, token and inverse-permutation int64 indices (4 x 8k), the gathered
        16-bit routing weights (2k);
      the experts' output rows, kept by the multiplication with the routing weights (M*k*h);
      the hidden states gathered into expert order (M*k*h), kept by the grouped matmul only when
        the experts train (full fine-tuning).
    M: bytes of the layer's 16-bit (or fp32) values; experts_train: 1 where the experts train."""
    router = 4.0 * E + 4.0 + 4.0 * k + 32.0 * k + 2.0 * k
    return router + (M * k * h + experts_train * M * k * h) / tp


def dense_experts_prefill_values(h, E, fe):
    """Values a token holds at the largest moment of a MoE layer that runs every expert on every token (engine/constants.py
    DENSE_EXPERTS_MODEL_TYPES: transformers 5.24 Llama4TextMoe / Llama4TextExperts, no gradient kept): in the MoE's
    forward the repeated input and its product with the router scores (2 E h); in the experts' forward the scaled input
    (E h) beside gate_up (2 E fe), SiLU's output and its product with up (E fe each); then gate_up, that product and the
    down bmm's output (E h) beside the scaled input: the largest of the three."""
    return E * np.maximum(2.0 * h, np.maximum(h + 4.0 * fe, 2.0 * h + 3.0 * fe))


def gemma_norm_bytes(h, R, wgrad, norms, gemma):
    """Bytes per token a Gemma decoder layer's RMSNorms save beyond Llama's two (transformers 5.24
    GemmaRMSNorm / Gemma2RMSNorm: `output = self._norm(x.float()); output * (1.0 + self.weight.float())`,
    then `.type_as(x)`; traced op by op on a small Gemma 2, docs/accuracy.md):
      where the weight trains, the product keeps the fp32 normalized output (4h) where Llama's
        keeps the 16-bit one (R*h): (4 - R) h more per norm;
      norms beyond two (Gemma 2/3: post-attention and post-feedforward norms on the projections'
        outputs) each keep the fp32 upcast input (4h), the fp32 rsqrt per token (4) and, where
        the weight trains, the fp32 normalized output (4h).
    gemma: 1 for Gemma models (0 leaves the Llama norms unchanged)."""
    extra_norms = np.maximum(norms - 2.0, 0.0)
    return gemma * (2.0 * wgrad * (4.0 - R) * h + extra_norms * (4.0 * h + 4.0 + wgrad * 4.0 * h))


def qk_norm_bytes(qd, kvd, a, kvh, M, wgrad, gemma, tp):
    """Bytes per token and layer the q and k RMSNorms (Qwen3, Gemma 3: catalog `qk_norm`) save,
    per head over head_dim (transformers 5.24 models/qwen3/modeling_qwen3.py Qwen3Attention.forward:
    `self.q_norm(self.q_proj(hidden_states).view(hidden_shape))`, Qwen3RMSNorm as LlamaRMSNorm:
    `hidden_states.to(torch.float32)`, `pow(2)` keeps that fp32 copy, `rsqrt` one fp32 value per
    head, `self.weight * hidden_states.to(input_dtype)` keeps the normalized input (M bytes) where the
    weight trains; Gemma's norms keep their fp32 product input instead, 4 bytes):
      (4 qd + 4 a + wgrad x Mn x qd) + (4 kvd + 4 kvh + wgrad x Mn x kvd), Mn = 4 for Gemma else M.
    Traced with benchmarks/trace_peak.py on the held-out qwen3-30b-a3b LoRA 2 x 2,048 row: per layer
    an fp32 [2, 2048, 32, 128] copy in q_norm and [2, 2048, 4, 128] in k_norm with their rsqrt: the
    ~9h bytes per layer and token the engine missed there."""
    mn = np.where(gemma > 0, 4.0, M)
    return (4.0 * (qd + kvd) + wgrad * mn * (qd + kvd)) / tp + 4.0 * (a + kvh) / tp


def softcap_logits_bytes(V, M, tp):
    """Per token, in forward and at the start of backward: Gemma 2's final-logit softcapping
    (transformers 5.24 Gemma2ForCausalLM.forward: `logits / cap`, `torch.tanh`, `* cap`) keeps
    tanh's output (M*V) for backward beside the logits that the loss upcasts. Measured: gemma-2-2b
    LoRA b2 x 2048 with checkpointing (calibration) held 1.95 GiB = 4,096 tokens x 256,000 x 2
    bytes more than the loss buffers without it."""
    return M * V / tp

