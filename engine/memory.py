"""Memory per GPU for every scenario at once, phase by phase.

The model (derivation in docs/engine.md):

* A training step has phases; the peak is the largest, not the sum of everything:
  - `forward`: weights + optimizer states + saved activations + the loss computation
    (16-bit logits, their fp32 upcast and log_softmax's fp32 output);
  - `loss_backward`: the start of backward: log_softmax's backward holds its saved output,
    the incoming gradient and its own output, all fp32, over the whole vocabulary;
  - `backward`: a decoder layer's backward (with checkpointing: its recomputed activations)
    on top of what is still saved, and the lm_head gradient;
  - `optimizer`: weights + gradients + states + the optimizer's step temporaries.
* Inference: `prefill` (weights + KV cache + one layer's working set) and `logits`
  (weights + KV cache + the output logits).

Each phase is a sum of components; each component is `fixed + per_token * tokens`, where
tokens = batch x sequence per GPU. Fixed parts are split into what data-parallel ZeRO
sharding divides (`shard`) and what it does not (`fixed`), so that the number of GPUs
needed, the largest batch and the longest context are solved in closed form.

Activations are counted tensor by tensor for Hugging Face's LlamaDecoderLayer with SDPA
(see `layer_activation_bytes`); every coefficient is a dtype size times a tensor width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import constants as C

COMPONENTS = (
    "weights", "gradients", "optimizer", "optimizer_temp", "autocast_copies",
    "activations", "logits", "kv_cache", "workspace",
)
TRAIN_PHASES = ("forward", "loss_backward", "backward", "optimizer")
INFER_PHASES = ("prefill", "logits")
PHASES = TRAIN_PHASES + INFER_PHASES


@dataclass
class Phase:
    """One phase: per component, bytes = fixed + shard / dp + per_token * tokens."""

    fixed: dict[str, np.ndarray] = field(default_factory=dict)
    shard: dict[str, np.ndarray] = field(default_factory=dict)
    per_token: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, comp: str, fixed=0.0, shard=0.0, per_token=0.0):
        for part, value in ((self.fixed, fixed), (self.shard, shard), (self.per_token, per_token)):
            if not (np.isscalar(value) and value == 0):
                part[comp] = part.get(comp, 0.0) + value
        return self

    def totals(self):
        f = sum(self.fixed.values(), 0.0)
        s = sum(self.shard.values(), 0.0)
        t = sum(self.per_token.values(), 0.0)
        return f, s, t

    def component(self, comp: str, dp, tokens):
        return self.fixed.get(comp, 0.0) + self.shard.get(comp, 0.0) / dp + self.per_token.get(comp, 0.0) * tokens


def layer_activation_bytes(h, f, qd, kvd, a, R, M, cast_each, saves, wgrad, lora_r, tp):
    """Bytes per token saved for backward by one LlamaDecoderLayer (HF transformers, SDPA).

    R: bytes of the residual stream (4 under fp32/autocast, 2 in pure 16-bit).
    M: bytes of matmul outputs (4 in fp32, else 2).
    cast_each: autocast on (each linear casts its fp32 input to a 16-bit copy it keeps).
    saves[m]: 1 where module m keeps its input for backward: its weight is trained, or a
      LoRA adapter on it needs the input (frozen linears keep only their weight).
    wgrad: 1 where the norm weights are trained (full fine-tuning).
    lora_r: LoRA rank (0 when no adapters); tp: tensor-parallel degree (splits the
      attention and MLP widths, not the h-wide norms and residual stream).

    Tensor by tensor (x = layer input):
      RMSNorm: pow() keeps x in fp32 (4h: the upcast copy, or x itself when fp32);
               weight * y keeps y (R*h) when the weight is trained.
      q/k/v inputs: the norm's output, once (R*h), or one 16-bit cast per module under autocast.
      SDPA (flash path): keeps q, k, v (after rotary; k, v at kv width with GQA), its output
               and a log-sum-exp (fp32, one per head); the s x s scores are never stored.
      o_proj input: the transposed-contiguous copy of the attention output.
      MLP: SiLU keeps gate's output, the product keeps SiLU's output and up's output (3*M*f),
               down_proj keeps the product (M*f) when it saves its input.
      LoRA: lora_B keeps lora_A's output (r wide) per adapted module.
    """
    q_saves = saves["q_proj"]; k_saves = saves["k_proj"]; v_saves = saves["v_proj"]
    o_saves = saves["o_proj"]; g_saves = saves["gate_proj"]; u_saves = saves["up_proj"]
    d_saves = saves["down_proj"]

    def norm_and_inputs(consumers):
        any_saves = np.maximum.reduce(consumers) if len(consumers) > 1 else consumers[0]
        count = sum(consumers)
        inputs = np.where(cast_each, 2.0 * h * count, R * h * any_saves)
        return 4.0 * h + wgrad * R * h + inputs

    # Under autocast SDPA runs in 16-bit: its q, k, v are 16-bit casts of the rotary outputs.
    qkv_bytes = np.where(cast_each, 2.0, M)
    attn = (qkv_bytes * (qd + 2 * kvd) + qkv_bytes * qd + 4.0 * a) / tp + M * qd * o_saves / tp
    mlp = (3.0 * M * f + M * f * d_saves) / tp
    n_adapted = sum(np.where(lora_r > 0, saves[m], 0) for m in saves)
    lora = M * lora_r * n_adapted
    return (
        norm_and_inputs([q_saves, k_saves, v_saves])
        + attn
        + norm_and_inputs([g_saves, u_saves])
        + mlp
        + lora
    )


def layer_backward_transient_bytes(h, f, R, M, tp):
    """Bytes per token alive on top of saved activations while one layer runs backward.

    The incoming gradient of the layer output (R*h) and, in the MLP (its widest part),
    the gradient of down_proj's input, then the gradients of SiLU's output and of up's
    output computed by the product's backward: three f-wide tensors of the matmul dtype.
    """
    return R * h + 3.0 * M * f / tp


def logits_bytes(V, M, tp):
    """Per token: (forward, start of backward, kept through backward) loss buffers.

    HF's ForCausalLMLoss upcasts the logits (`logits.float()`, a new fp32 tensor unless
    they already are fp32) and cross_entropy keeps log_softmax's fp32 output. In backward,
    nll_loss's fp32 gradient and log_softmax's fp32 gradient exist together with it.
    The model output keeps the 16-bit logits alive through backward.
    """
    upcast = np.where(M < 4, 4.0, 0.0)
    forward = (M + upcast + 4.0) * V / tp
    backward = (M + 12.0) * V / tp
    kept = M * V / tp
    return forward, backward, kept
