"""Optimizers people pick for memory (issue 27 item 3): bitsandbytes Lion, GaLore (AdamW, 8-bit,
layer-wise), Adam-mini and Muon. Their states and step temporaries per memory configuration, from their
source (engine/constants.py, "Optimizers people pick for memory", names each source).

Every function works on whole columns of `engine.components.Inputs` (one value per configuration) and
returns bytes before any split, as optimizer_state_bytes / step_temporary_bytes take them: `states` the
optimizer's states (with the fp32 master copy of mixed_*), `temps` the step's largest temporaries.

Which parameters are matrices that GaLore projects and Muon orthogonalizes (`matrices`):
- full / freeze: the decoder layers' attention and MLP linear weights (q, k, v, o, gate, up, down) of every
  trained layer, as transformers' optim_target_modules=["attn", "mlp"] selects for GaLore and LLaMA-Factory's
  _create_muon_optimizer does for Muon (2-D, not the embedding or lm_head). Mixture-of-experts models keep their
  routed experts as 3-D nn.Parameter (transformers 5.24 MixtralExperts / Qwen3MoeExperts / DeepseekV3Experts
  gate_up_proj, down_proj): neither nn.Linear (GaLore) nor 2-D (Muon), so AdamW; their attention is taken as
  q, k, v, o of the catalog's widths and their dense / shared MLPs are left to AdamW (an upper bound).
- LoRA: the adapters are the trainable parameters, small nn.Linear 2-D matrices (lora_A r x in, lora_B
  out x r) under the attention / MLP modules' names, so transformers targets them: GaLore's rank is then
  min(rank, r) = r, its states are AdamW's and it adds an r x r projection per adapter (it saves nothing:
  modelled as the code does it); Muon keeps one momentum buffer per adapter.
- The rest (embeddings, lm_head, norms, biases, routed experts): each optimizer's AdamW.
"""

from __future__ import annotations

import numpy as np

import engine.constants as C
from engine.params import lora_module_dims


def matrices(x) -> list[tuple]:
    """(rows, cols, count) of each kind of targeted 2-D weight (module weight shape out x in), per
    configuration: see the module docstring."""
    dense = x.expert_params <= 0
    layers = np.where(x.full, x.L, np.where(x.freeze, x.k_layers, 0.0))
    mlp = np.where(dense, layers, 0.0)
    out = [(x.qd, x.h, layers), (x.kvd, x.h, 2 * layers), (x.h, x.qd, layers),
           (x.f, x.h, 2 * mlp), (x.h, x.f, mlp)]
    for m, (i, o) in lora_module_dims(x.h, x.f, x.a, x.kvh, x.d).items():
        n = np.where(x.lora, x.L * x.flags[m], 0.0)
        out += [(x.r, i, n), (o, x.r, n)]
    return out


def matrix_values(mats) -> np.ndarray:
    return sum(c * m * n for m, n, c in mats)


def _largest(mats, per_matrix) -> np.ndarray:
    """The largest of per_matrix(m, n) over the kinds a configuration has (0 where it has none)."""
    return np.maximum.reduce([np.where(c > 0, per_matrix(m, n), 0.0) for m, n, c in mats])


def _largest_rest(x) -> np.ndarray:
    """Values of the largest parameter left to AdamW: full: the embedding (V x h; lm_head is as large) or a
    routed experts' gate_up_proj (experts x 2 x their width x h, transformers 5.24 MixtralExperts); freeze:
    a layer's norm weight, or those experts; LoRA: none (every adapter is a matrix)."""
    moe_layers = np.maximum(x.moe_share * x.L, 1.0)
    gate_up = np.where(x.expert_params > 0, 2.0 / 3.0 * x.expert_linear / moe_layers, 0.0)
    return np.select([x.full, x.freeze], [np.maximum(x.V * x.h, gate_up), np.maximum(x.h, gate_up)], 0.0)


def _small_norms(x) -> np.ndarray:
    """Trained norm values in tensors of fewer than 4096 elements (bitsandbytes keeps fp32 states there:
    min_8bit_size), as engine/components.py optimizer_state_bytes counts them for adamw_8bit."""
    norms = np.where(x.full | x.freeze, 2 * x.h * np.where(x.freeze, x.k_layers, x.L) + x.h * x.full, 0.0)
    return np.where(x.h < C.ADAM8BIT_MIN_SIZE, norms, 0.0)


def lion(x, trainable, eight_bit: bool) -> tuple[np.ndarray, np.ndarray]:
    """bitsandbytes Lion: one state (fp32, or 8-bit blockwise with fp32 for tensors under 4096 values);
    the step is one in-place CUDA kernel (no temporaries)."""
    if eight_bit:
        small = _small_norms(x)
        states = (trainable - small) * C.LION_8BIT_BYTES + small * C.LION_32BIT_STATE_BYTES
    else:
        states = trainable * C.LION_32BIT_STATE_BYTES
    return states + trainable * x.master, np.zeros_like(np.asarray(trainable, dtype=float))


def galore(x, trainable, eight_bit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GaLore AdamW (galore_torch.GaLoreAdamW) or its 8-bit one (GaLoreAdamW8bit, bitsandbytes
    Optimizer2State), per configuration (`eight_bit` a mask).

    States of a targeted m x n weight at rank R (re = min(R, m, n): the SVD has min(m, n) singular vectors):
    exp_avg and exp_avg_sq of re x max(m, n) (8-bit: bitsandbytes' 2 + 8/256 bytes per value, fp32 under
    4096 values), and the projection matrix min(m, n) x re in the gradient's dtype. The rest: AdamW's two
    states (8-bit: bitsandbytes' adamw_8bit layout).

    Temporaries, one parameter at a time (both step each parameter in a Python loop), the largest of:
    - the projector's SVD (galore_projector.py get_orthogonal_matrix, at step 0 and every update_proj_gap
      steps): `matrix.float()` (an fp32 copy of a 16-bit gradient), torch.linalg.svd's own column-major copy
      of it (pytorch aten/src/ATen/native/cuda/linalg/BatchLinearAlgebraLib.cpp svd_cusolver_gesvd: "We need
      to pass a copy of A, as it will be overwritten", cloneBatchedColumnMajor), and U (m x k), Vh (k x n)
      with k = min(m, n), all fp32; cuSOLVER's workspace is left out;
    - GaLoreAdamW's projection back (adamw.py lines 120-133): the low-rank gradient, `denom`, `norm_grad`
      (re x max each) and project_back's full m x n product and its `* self.scale` copy;
      (measured on the CPU, torch 2.14.1, GaLore 2cc66f8, a bf16 4096 x 1024 weight at rank 128, second
      step: 18.9 MiB above the step's start, 19.0 modelled; a plain parameter's denom + norm_grad 15.9, 16.0);
      GaLoreAdamW8bit (adamw8bit.py lines 58-75): `p.saved_data = p.data.clone()` (the m x n weight),
      `p.data = grad.clone()` and the low-rank gradient (re x max each), project_back's two m x n tensors;
    - a parameter left to AdamW: GaLoreAdamW's `denom` and `norm_grad` (two of its size); none for the
      8-bit one (bitsandbytes' kernel updates in place)."""
    mats = matrices(x)
    targeted = np.minimum(matrix_values(mats), trainable)
    rest = trainable - targeted
    R = x.galore_rank  # per configuration, as engine/rules.py decided it (0: the recipe's)

    def rank(m, n):
        return np.minimum(R, np.minimum(m, n))

    def low_rank_bytes(m, n):  # exp_avg + exp_avg_sq of one matrix (re x max)
        v = rank(m, n) * np.maximum(m, n)
        return np.where(eight_bit, v * np.where(v < C.ADAM8BIT_MIN_SIZE, 8.0, C.ADAM8BIT_BYTES), 2 * v * x.sdb)

    projected = sum(c * (low_rank_bytes(m, n) + rank(m, n) * np.minimum(m, n) * x.sdb) for m, n, c in mats)
    small = np.minimum(_small_norms(x), rest)
    rest_states = np.where(eight_bit, (rest - small) * C.ADAM8BIT_BYTES + small * 8.0, rest * 2 * x.sdb)
    states = projected + rest_states + trainable * x.master

    copy16 = np.where(x.gb < 4, 1.0, 0.0)

    def svd(m, n):
        k = np.minimum(m, n)
        return C.SVD_BYTES * ((1.0 + copy16) * m * n + m * k + k * n)

    def back(m, n):
        low = rank(m, n) * np.maximum(m, n)
        return np.where(eight_bit, (3 * m * n + 2 * low) * x.wb_trained, (2 * m * n + 3 * low) * x.sdb)

    temps = np.maximum(_largest(mats, svd), _largest(mats, back))
    temps = np.maximum(temps, np.where(eight_bit, 0.0, 2 * np.minimum(_largest_rest(x), rest) * x.sdb))
    return states, temps


def adam_mini(x, trainable) -> tuple[np.ndarray, np.ndarray]:
    """Adam-mini 1.1.1 (zyushun/Adam-mini at 402aadf, adam_mini/adam_mini.py; LLaMA-Factory use_adam_mini
    passes dim = hidden_size, n_heads, n_kv_heads). A full first moment `m` per parameter (zeros_like, lines
    225, 246, 283, 332) and one second-moment scalar `vmean` per block: q_proj / k_proj one per head of
    head_numel = dim x dim / n_heads values (lines 83, 244-254: qd x h / head_numel = qd x a / h blocks),
    the embedding, lm_head, v_proj, o_proj and the MLP one per output row (lines 274-294: m[0:rows, 0:1]),
    a norm weight one (lines 315-341), biases a full second moment (lines 220-227; left out, a few
    thousand values a layer). LoRA: one vmean per adapter row (lora_A r, lora_B out), the rows branch; note
    the q/k adapters take the head branch, whose view(-1, head_numel) fails unless r x a / h is a whole
    number. Temporaries, one parameter at a time: `update = m * stepsize` and `p.add_(-update)`'s
    negation (lines 311-313), two of the largest parameter's size (measured on the CPU, torch 2.14.1, an
    fp32 4096 x 1024 embedding: 31.9 MiB above the step's start, 32 modelled; a bf16 one holds a third
    tensor there, the CPU's fp32 upcast inside `torch.mean(grad * grad, dim=1)`, which CUDA's reduction
    kernels do not materialize)."""
    per_layer = ((x.qd + x.kvd) * x.a / x.h + x.kvd + x.h + 2 * x.f + x.h + x.norms)
    full_rows = x.L * per_layer + x.V * np.where(x.tied, 1.0, 2.0) + 1.0
    dims = lora_module_dims(x.h, x.f, x.a, x.kvh, x.d)
    lora_rows = x.L * sum(x.flags[m] * (x.r + o) for m, (_i, o) in dims.items())
    rows = np.select([x.full, x.freeze, x.lora], [full_rows, x.k_layers * per_layer, lora_rows], 0.0)
    states = (trainable + rows) * x.sdb + trainable * x.master
    largest = np.select([x.full, x.freeze, x.lora],
                        [np.maximum(_largest_rest(x), x.h * x.f), np.maximum(_largest_rest(x), x.h * x.f),
                         x.r * np.maximum(np.maximum(x.h, x.f), x.qd)], 0.0)
    return states, 2 * largest * x.sdb


def muon(x, trainable, llama_factory) -> tuple[np.ndarray, np.ndarray]:
    """Muon on the targeted 2-D matrices, AdamW on the rest (torch.optim.Muon takes only 2-D parameters:
    torch 2.14.1 torch/optim/_muon.py Muon.__init__ line 133 raises otherwise; KellerJordan/Muon at 857d1ad
    README: "embeddings, classifier heads, and hidden gains/biases should be optimized using standard AdamW";
    LLaMA-Factory _create_muon_optimizer: `param.ndim == 2 and "embed" not in name and "lm_head" not in name`).
    `llama_factory` (a mask): the recipe's own Muon (its third_party/muon/muon.py at 85b0f31, Moonlight's);
    elsewhere torch.optim.Muon beside torch.optim.AdamW.

    States: one momentum buffer per matrix value (_muon.py line 160 `zeros_like(p.grad)`; LLaMA-Factory:
    `zeros_like(g)`), AdamW's two on the rest.
    Temporaries: Muon steps one matrix at a time (_single_tensor_muon; foreach "not supported", line 376):
    the Nesterov update (`grad.lerp(buf, momentum)`, line 344; LLaMA-Factory `g.add(buf, ...)`), m x n in
    the gradient's dtype, kept through the Newton-Schulz iteration (5 steps, bf16, s = min(m, n), l = max):
    - torch 2.14.1 _zeropower_via_newtonschulz (lines 55-66): `grad.bfloat16()` (the update itself when it
      is bf16, else a copy freed after the first step) normalized in place, then `torch.addmm` for the
      gram update and the new X: the previous X and the new one (2 x s x l) with gram_matrix and
      gram_update (2 x s x s): m x n x (grad bytes + 4) + 4 s^2 bytes;
    - LLaMA-Factory zeropower_via_newtonschulz5: `X = X / (X.norm() + 1e-7)` a new X, `a * X + B @ X` three
      more (4 x s x l) with A and B: m x n x (grad bytes + 8) + 4 s^2 bytes.
    Measured on the CPU (torch 2.14.1, 4096 x 1024, peak RSS above the step's start): torch's bf16 27.8 MiB
    (28.0 modelled), fp32 35.8 (36.0); LLaMA-Factory's iteration 36.1 bf16, 35.9 fp32 (36.0 each).
    The AdamW part runs after it: torch.optim.AdamW's foreach sqrt of every second moment at once
    (STEP_TEMP_COUNT adamw; one parameter's under optimizer in backward), or LLaMA-Factory's loop over
    parameters, `buf1 / (eps + buf2.sqrt())` holding two of the largest parameter's size."""
    mats = matrices(x)
    targeted = np.minimum(matrix_values(mats), trainable)
    rest = trainable - targeted
    states = targeted * x.sdb + rest * 2 * x.sdb + trainable * x.master

    copies = np.where(llama_factory, 4.0, 2.0)  # full-size bf16 X's alive in the iteration

    def ns(m, n):
        s = np.minimum(m, n)
        return m * n * (x.gb + copies * C.MUON_NS_BYTES) + 2 * C.MUON_NS_BYTES * s * s

    largest_rest = np.minimum(_largest_rest(x), rest)
    bwd = np.asarray(x.opt_bwd, dtype=bool)
    adamw = np.where(llama_factory & ~bwd, 2 * largest_rest * x.sdb,
                     np.where(bwd, largest_rest * x.sdb, rest * C.STEP_TEMP_COUNT["adamw"] * x.sdb))
    return states, np.maximum(_largest(mats, ns), adamw)


def bytes_of(x, trainable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mask, states, temps) for the configurations whose optimizer is one of C.NEW_OPTIMIZERS
    (x.opt_kind: name -> mask); the mask is all False (and the bytes 0) where none is."""
    kind = x.opt_kind or {}
    n = np.shape(np.asarray(trainable))
    mask = np.zeros(n, dtype=bool)
    states, temps = np.zeros(n), np.zeros(n)
    for names, fn in ((("lion_32bit",), lambda: lion(x, trainable, False)),
                      (("lion_8bit",), lambda: lion(x, trainable, True)),
                      (C.GALORE_OPTIMIZERS, lambda: galore(x, trainable, _any(kind, C.GALORE_8BIT, n))),
                      (("adam_mini",), lambda: adam_mini(x, trainable)),
                      (("muon",), lambda: muon(x, trainable, np.asarray(x.lf_muon, dtype=bool) & np.ones(n, dtype=bool)))):
        hit = _any(kind, names, n)
        if hit.any():
            s, t = fn()
            states, temps, mask = np.where(hit, s, states), np.where(hit, t, temps), mask | hit
    return mask, states, temps


def _any(kind: dict, names, n) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    for name in names:
        if name in kind:
            out = out | np.asarray(kind[name], dtype=bool)
    return out
