"""An SDPA prefill of a model with sliding-window layers (issue 28; engine/components.py
sliding_mask_window): transformers 5.24 materializes the sliding-window mask from the window on, a
(1, 1, seq, seq) bool tensor whatever the batch, held through every layer; while it is built three such
tensors are alive beside the weights and the embeddings' output, before any KV cache (the `mask` phase).
Every expected figure is worked out here from the models' configs (Gemma 3 1B: h 1,152, window 512;
Gemma 3 4B: h 2,560, window 1,024, 34 layers, 4 KV heads of 256; Mistral 7B: window 4,096), not by
the engine."""

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.serving import serve
from tests.clirun import run_cli

H1, W1 = 1152, 512


def rows(models, *scenarios, gpus=None):
    frame = pd.DataFrame([{"task": "infer", "batch": 1, "allow_long_context": True, **s} for s in scenarios])
    return [r for _i, r in estimate(frame, models, gpus).iterrows()]


def tensors(row):
    return row.peak_bytes - row.runtime_overhead_bytes


def test_the_mask_phase_holds_the_weights_the_embeddings_and_three_masks(models):
    """Gemma 3 1B, 1 x 65,536 tokens: 3 x 65,536^2 bool bytes (12 GiB) beside the weights and one bf16
    row of the embeddings' output per token; no KV cache yet. The peak is there (the traced 64k run peaks
    at the mask's `__and__`), and the KV cache at the context is still reported."""
    (r,) = rows(models, dict(model="gemma-3-1b", seq=65536))
    s = 65536
    assert r.mask_phase_bytes == pytest.approx(r.weights_bytes + 2 * H1 * s + 3 * s * s, rel=1e-12)
    assert r.peak_phase == "mask"
    assert r.kv_cache_bytes == 0.0
    kv = 2 * 26 * 1 * 256 * 2 * s  # 26 layers, one KV head of 256, bf16: every layer's K/V (kv_policy auto)
    assert r.kv_cache_context_bytes == pytest.approx(kv, rel=1e-12)
    assert tensors(r) == pytest.approx(r.mask_phase_bytes, rel=1e-12)


def test_the_prefill_holds_one_mask_from_the_window_on_and_none_below(models):
    """The prefill with SDPA differs from the same prefill with flash attention by one seq^2 bool mask
    from the window on (512 tokens for Gemma 3 1B), by nothing below it; flash builds no mask phase."""
    sdpa_long, flash_long, sdpa_short, flash_short = rows(
        models, dict(model="gemma-3-1b", seq=16384), dict(model="gemma-3-1b", seq=16384, attention="flash"),
        dict(model="gemma-3-1b", seq=W1 - 1), dict(model="gemma-3-1b", seq=W1 - 1, attention="flash"))
    assert sdpa_long.prefill_phase_bytes - flash_long.prefill_phase_bytes == pytest.approx(16384 ** 2, rel=1e-9)
    assert sdpa_short.prefill_phase_bytes == flash_short.prefill_phase_bytes
    assert sdpa_short.mask_phase_bytes == pytest.approx(sdpa_short.weights_bytes + 2 * H1 * (W1 - 1), rel=1e-12)
    assert np.isnan(flash_long.mask_phase_bytes) and np.isnan(flash_short.mask_phase_bytes)


def test_the_mask_does_not_grow_with_the_batch(models):
    """Without padding the mask has a batch of one: four sequences of 8,192 tokens hold the same 8,192^2
    bytes as one (the traced Mistral 7B 2 x 16,384 prefill keeps one [1, 1, 16384, 16384] mask)."""
    one, four, four_flash = rows(models, dict(model="gemma-3-1b", seq=8192), dict(model="gemma-3-1b", seq=8192, batch=4),
                                 dict(model="gemma-3-1b", seq=8192, batch=4, attention="flash"))
    assert four.prefill_phase_bytes - four_flash.prefill_phase_bytes == pytest.approx(8192 ** 2, rel=1e-9)
    assert (four.mask_phase_bytes - four.weights_bytes - 4 * 2 * H1 * 8192
            == pytest.approx(one.mask_phase_bytes - one.weights_bytes - 2 * H1 * 8192, rel=1e-12))


def test_no_mask_phase_for_training_eager_attention_or_full_attention_models(models):
    """Training rows, Gemma 2 (eager under 'sdpa': its masks are its scores' phase) and a model without
    sliding-window layers have no mask phase."""
    train, gemma2, llama = rows(models, dict(model="gemma-3-1b", task="train", method="lora", seq=4096),
                                dict(model="gemma-2-2b", seq=16384), dict(model="llama-3.2-1b", seq=16384))
    assert np.isnan(train.mask_phase_bytes) and np.isnan(gemma2.mask_phase_bytes) and np.isnan(llama.mask_phase_bytes)
    assert llama.kv_cache_context_bytes == llama.kv_cache_bytes


def test_the_longest_context_stops_where_the_masks_no_longer_fit(models, gpus):
    """On one RTX 4090 Gemma 3 4B's longest SDPA prefill is set by the masks: the row fits at max_seq
    and not one token more, and flash attention (no mask) reaches further."""
    sdpa, flash = rows(models, dict(model="gemma-3-4b", seq=4096, gpu="rtx-4090"),
                       dict(model="gemma-3-4b", seq=4096, gpu="rtx-4090", attention="flash"), gpus=gpus)
    assert sdpa.max_seq < flash.max_seq
    at, more = rows(models, dict(model="gemma-3-4b", seq=int(sdpa.max_seq), gpu="rtx-4090"),
                    dict(model="gemma-3-4b", seq=int(sdpa.max_seq) + 1, gpu="rtx-4090"), gpus=gpus)
    assert bool(at.fits) and not bool(more.fits)


def test_the_decode_speed_reads_the_cache_where_the_mask_phase_is_the_peak(models, gpus):
    """The decode step reads the weights and the KV cache at the context: the same for the SDPA row
    (peak at the mask phase, kv_cache_bytes 0) as for the flash row."""
    sdpa, flash = rows(models, dict(model="gemma-3-1b", seq=65536, gpu="h100-sxm-80gb"),
                       dict(model="gemma-3-1b", seq=65536, gpu="h100-sxm-80gb", attention="flash"), gpus=gpus)
    assert sdpa.peak_phase == "mask" and flash.peak_phase != "mask"
    assert sdpa.decode_tokens_per_s == pytest.approx(flash.decode_tokens_per_s, rel=1e-12)


def test_serve_with_transformers_keeps_room_for_the_mask(models, gpus):
    """serve --engine transformers: the same model with its sliding-window layers taken away (every layer
    keeps the whole K/V under transformers either way) has exactly ctx^2 bytes more KV room at 65,536
    tokens; where the three masks being built do not fit beside the weights, no KV room is left."""
    plain = models.copy()
    plain.loc[plain["id"] == "gemma-3-4b", "sliding_window_layers"] = 0
    req = pd.DataFrame({"model": ["gemma-3-4b"], "gpu": ["a100-80gb-sxm"], "engine": ["transformers"], "precision": ["bf16"],
                        "max_model_len": [65536]})
    with_mask = serve(req, models, gpus).iloc[0]
    without = serve(req, plain, gpus).iloc[0]
    assert without["kv_cache_bytes_available"] - with_mask["kv_cache_bytes_available"] == pytest.approx(65536 ** 2, rel=1e-9)
    # 120,000 tokens on an A100 40GB: held, the mask (13.4 GiB) would leave KV room; the three being built
    # (40.2 GiB) beside the weights do not fit, so none is left
    long = req.assign(max_model_len=120000, gpu="a100-40gb-sxm")
    assert serve(long, plain, gpus).iloc[0]["kv_cache_bytes_available"] > 120000 ** 2
    assert serve(long, models, gpus).iloc[0]["kv_cache_bytes_available"] == 0.0


# ---- the training side (engine/components.py sliding_window_training) ------------------------------------

def test_a_training_step_keeps_each_sliding_layers_mask_and_repeated_kv_from_the_window_on(models):
    """Gemma 3 1B full fine-tuning, 1 x 8,192, no checkpointing, unpadded: its 22 sliding layers (of 26) each
    keep SDPA's converted mask (2 bytes per position pair, expanded to the batch) and K and V repeated from
    one KV head to four (2 x 3 x 256 x 2 bytes per token) that flash attention keeps none of; the full
    layers pass no mask. Below the window (511 tokens) the two are the same."""
    s = 8192
    sdpa, flash, short, short_flash = rows(
        models, *[dict(model="gemma-3-1b", task="train", method="full", padding="unpadded", grad_checkpointing=False,
                       seq=q, **a) for q in (s, 511) for a in ({}, {"attention": "flash"})])
    expected = 22 * (2 * 3 * 256 * 2) * s + 22 * 2 * s * s
    assert sdpa.loss_backward_phase_bytes - flash.loss_backward_phase_bytes == pytest.approx(expected, rel=1e-9)
    assert short.loss_backward_phase_bytes == short_flash.loss_backward_phase_bytes


def test_with_checkpointing_the_recomputed_layer_and_the_checkpoints_bool_mask(models):
    """Mistral 7B LoRA, 1 x 16,384 with checkpointing (every layer slides, window 4,096): the checkpoint
    frames keep the bool mask (one byte per position pair) from the forward on, and the recomputed layer's
    backward holds its converted mask and K/V repeated from 8 KV heads to 32 (2 x 24 x 128 x 2 bytes per
    token) beside it; a padded batch masks every layer already (no second count)."""
    s = 16384
    sdpa, flash, padded = rows(models, *[dict(model="mistral-7b", task="train", method="lora", grad_checkpointing=True,
                                              seq=s, **a) for a in ({"padding": "unpadded"},
                                                                    {"padding": "unpadded", "attention": "flash"},
                                                                    {"padding": "padded"})])
    assert sdpa.forward_phase_bytes - flash.forward_phase_bytes == pytest.approx(s * s, rel=1e-9)
    assert sdpa.backward_phase_bytes - flash.backward_phase_bytes == pytest.approx(s * s + 2 * s * s + 2 * 24 * 128 * 2 * s,
                                                                                   rel=1e-9)
    assert padded.backward_phase_bytes > flash.backward_phase_bytes  # (the padded path's own terms)


# ---- gpt-oss attends eagerly under transformers (GptOssPreTrainedModel._supports_sdpa = False) ----------

def test_gpt_oss_under_sdpa_attends_eagerly_and_keeps_its_16bit_softmax(models):
    """gpt-oss-20b asked with the default attention runs transformers' eager path, as Gemma 2 does: its
    prefill has the eager attention phase (no SDPA mask phase), the same as asking eager; and a training
    step without checkpointing keeps, per layer, the softmax of its 64 heads in bf16 (2 bytes per position
    pair; traced `_softmax` [1, 64, 1024, 1025] bf16, no fp32 copy) and K/V repeated from 8 heads to 64
    (2 x 56 x 64 x 2 bytes per token), which flash attention keeps none of: 24 layers."""
    infer, infer_eager = rows(models, dict(model="gpt-oss-20b", seq=4096), dict(model="gpt-oss-20b", seq=4096, attention="eager"))
    assert infer.peak_phase == "attention" and np.isnan(infer.mask_phase_bytes)
    assert tensors(infer) == tensors(infer_eager)
    s = 1024
    sdpa, flash = rows(models, *[dict(model="gpt-oss-20b", task="train", method="lora", padding="unpadded", seq=s,
                                      grad_checkpointing=False, **a) for a in ({}, {"attention": "flash"})])
    expected = 24 * (64 * 2 * s * s + 2 * 56 * 64 * 2 * s)
    assert sdpa.loss_backward_phase_bytes - flash.loss_backward_phase_bytes == pytest.approx(expected, rel=1e-9)


def test_gpt_oss_experts_clamped_swiglu_keeps_three_more_f_wide_tensors(models):
    """gpt-oss's experts (GptOssExperts._apply_gate: gate.clamp, up.clamp, gate * sigmoid(alpha gate), (up + 1)
    * glu) keep, per routed slot, the fused gate_up output (2 f), the clamped gate, the sigmoid, up + 1 and the
    glu where SiLU's product keeps three f-wide tensors: 3 x 2 bytes x (4 experts x 2,880) more per token in each
    of the 24 layers, against the same model under another family name (flash attention: no eager scores)."""
    other = models.copy()
    other.loc[other["id"] == "gpt-oss-20b", "family"] = "not-gpt-oss"
    s = 1024
    row = dict(model="gpt-oss-20b", task="train", method="lora", padding="unpadded", seq=s, grad_checkpointing=False,
               attention="flash")
    (ours,), (plain,) = rows(models, row), rows(other, row)
    assert ours.loss_backward_phase_bytes - plain.loss_backward_phase_bytes == pytest.approx(24 * 3 * 2 * 4 * 2880 * s, rel=1e-9)


def test_vision_tower_off_loads_the_language_model_alone(models):
    """--vision-tower off: Gemma 3 4B's 419,816,304 vision parameters (SigLIP + projector, catalog) are not
    loaded: 2 bytes each less at bf16, vision_params 0; a text model is the same either way."""
    on, off, text_on, text_off = rows(models, dict(model="gemma-3-4b", seq=2048), dict(model="gemma-3-4b", seq=2048, vision_tower="off"),
                                      dict(model="llama-3.2-1b", seq=2048), dict(model="llama-3.2-1b", seq=2048, vision_tower="off"))
    assert on.vision_params == 419816304 and off.vision_params == 0
    assert on.weights_bytes - off.weights_bytes == 2 * 419816304
    assert text_on.peak_bytes == text_off.peak_bytes


# ---- serve --engine transformers: the eager prefill of Gemma 2 and gpt-oss ----------------------------------

def test_serve_with_transformers_keeps_room_for_the_eager_scores(models, gpus):
    """transformers runs Gemma 2 and gpt-oss eagerly: a prefill layer holds its heads x ctx x ctx scores. serve
    reserves the same working set as estimate's `attention` phase, worked out here from the configs.
    Gemma 2 9B (h 3,584, 16 heads of 256, 8 KV heads, softcapped), bf16, 8,192 tokens: per token
    2 x (3 x 3,584 + 256 x (16 + 2 x 16)) = 46,080 B (K and V repeated to every head), per token per position
    (2 x 2 + 4) x 16 + 2 x (1 + 1) = 132 B; gpt-oss-20b (h 2,880, 64 heads of 64, 8 KV heads): 41,856 B and
    (2 x 2 + 4) x 64 + 2 = 514 B. Llama 3.1 8B (SDPA) keeps its per-token working set."""
    req = pd.DataFrame({"model": ["gemma-2-9b", "gpt-oss-20b", "llama-3.1-8b"], "gpu": "a100-80gb-sxm",
                        "engine": "transformers", "precision": "bf16", "max_model_len": 8192})
    out = serve(req, models, gpus)
    ctx = 8192
    gemma = ctx * 46080 + ctx * ctx * 132
    oss = ctx * 41856 + ctx * ctx * 514
    assert out["activation_peak_bytes"].iloc[0] == pytest.approx(gemma, rel=1e-12)
    assert out["activation_peak_bytes"].iloc[1] == pytest.approx(oss, rel=1e-12)
    assert out["activation_peak_bytes"].iloc[2] < 1.5e9  # (no scores: 1.07 GB of per-token buffers and logits)
    # the same working set as estimate's attention phase at batch 1 (that phase less the weights and the K/V)
    est = estimate(pd.DataFrame({"model": ["gemma-2-9b", "gpt-oss-20b"], "task": "infer", "precision": "bf16",
                                 "batch": 1, "seq": ctx}), models)
    scores = est["attention_phase_bytes"] - est["weights_bytes"] - est["kv_cache_bytes"]
    assert scores.to_numpy() == pytest.approx([gemma, oss], rel=1e-9)
    # the scores grow with the square of the context: the KV room left on the same card shrinks accordingly
    short = serve(req.assign(max_model_len=2048), models, gpus)
    assert short["activation_peak_bytes"].iloc[0] == pytest.approx(2048 * 46080 + 2048 ** 2 * 132, rel=1e-12)


def test_serve_names_the_activation_peak_when_it_is_what_does_not_fit():
    """gpt-oss-20b mxfp4 on an RTX 4090 under transformers: its 12.82 GiB of weights fit; an 8,192-token prompt's
    eager scores (8,192 x 41,856 + 8,192^2 x 514 B = 32.44 GiB) do not, and the verdict says which."""
    code, out, _ = run_cli("serve", "--model", "gpt-oss-20b", "--gpu", "rtx-4090", "--engine", "transformers",
                           "--precision", "mxfp4", "--max-model-len", "8192")
    assert code == 0
    assert ("DOES NOT FIT: the weights (12.82 GiB per GPU) and the activation peak (32.44 GiB: the prefill of one "
            "--max-model-len request) leave no room") in out
    code, out, _ = run_cli("serve", "--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "vllm",
                           "--max-model-len", "2048")
    assert "DOES NOT FIT: the weights (131.45 GiB per GPU) leave no room" in out
