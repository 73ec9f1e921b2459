"""The freed 16-bit logits' block that PyTorch's caching allocator keeps reserved through the loss's
backward (engine/components.py cached_logits_bytes, result column allocator_cached_bytes). Expected
figures are worked out here from the model's vocabulary and the scenario, not by the engine."""

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.constants import CUBLAS_WORKSPACE_BYTES, FRAGMENTATION_FRACTION
from planner.evidence import process_peak_bytes, reserved_peak_bytes

V8B = 128_256  # Llama 3.1 8B's vocabulary
# torchtitan's published Llama 3.1 8B context-parallel row at CP 1: 8 GPUs, one sequence of 32,768 tokens
TITAN = dict(model="llama-3.1-8b", task="train", method="full", precision="mixed_bf16", optimizer="adamw", zero=3,
             grad_checkpointing=True, recipe="torchtitan", batch=1, seq=32_768, gpus=8)


def rows(models, *scenarios, gpus=None):
    return estimate(pd.DataFrame(list(scenarios)), models, gpus)


def test_the_dropped_bf16_logits_block_stays_reserved_at_the_loss_backward(models):
    """The loss backward is this row's peak: what the allocator holds above it is the bf16 logits'
    block, 2 bytes x tokens x vocabulary, per GPU (the tokens of one GPU)."""
    row = rows(models, TITAN).iloc[0]
    assert row.peak_phase == "loss_backward"
    assert row.allocator_cached_bytes == pytest.approx(2.0 * 32_768 * V8B, rel=1e-12)


def test_context_parallel_and_vocab_parallel_divide_the_block_as_they_divide_the_logits(models):
    """cp GPUs hold seq / cp of the tokens; tensor parallel's vocab-parallel loss V / tp."""
    out = rows(models, dict(TITAN, seq=4 * 32_768, cp=4), dict(TITAN, model="llama-3.1-70b", gpus=256, tp=8,
                                                                 batch=16, seq=8192))
    cp, tp = out.iloc[0], out.iloc[1]
    assert cp.peak_phase == "loss_backward" and tp.peak_phase == "loss_backward"
    assert cp.allocator_cached_bytes == pytest.approx(2.0 * 32_768 * V8B, rel=1e-12)
    assert tp.allocator_cached_bytes == pytest.approx(2.0 * 16 * 8192 * V8B / 8, rel=1e-12)


def test_no_block_where_the_loss_allocates_otherwise(models):
    """Zero under the hand-written loop (the logits are alive, in the tensors' peak), for fp32 logits
    (no upcast block to reuse), a chunked loss, inference, and where another phase is far above."""
    out = rows(models,
               dict(TITAN, loop="manual"),
               dict(TITAN, precision="fp32"),
               dict(TITAN, recipe="torchtune", loss="chunked"),
               dict(model="llama-3.1-8b", task="infer", precision="bf16", batch=1, seq=32_768),
               dict(TITAN, seq=256, batch=1, gpus=1, zero=0))
    assert list(out["allocator_cached_bytes"]) == [0.0] * 5
    # the one where another phase sets the peak: the optimizer step holds far more than 256 tokens' logits
    assert out.iloc[4].peak_phase != "loss_backward"


def test_the_block_is_not_in_the_peak_or_the_verdict_but_in_the_reserved_and_process_counters(models, gpus):
    """peak_bytes and fits are decided without it (the allocator frees an unsplit cached block before
    an OOM); torch's reserved peak and nvidia-smi count it."""
    on = rows(models, dict(TITAN, gpu="h100-sxm-80gb"), dict(TITAN, gpu="h100-sxm-80gb", loop="manual"), gpus=gpus)
    trainer, manual = on.iloc[0], on.iloc[1]
    cached = 2.0 * 32_768 * V8B
    # the phases' tensors: the manual loop's kept logits are the same block, alive
    assert manual.loss_backward_phase_bytes - trainer.loss_backward_phase_bytes == pytest.approx(cached, rel=1e-12)
    tensors = trainer.peak_bytes - trainer.runtime_overhead_bytes
    assert tensors == pytest.approx(trainer.loss_backward_phase_bytes, rel=1e-12)
    assert np.isclose(process_peak_bytes(on)[0], trainer.peak_bytes + cached, rtol=1e-12)
    assert process_peak_bytes(on)[1] == manual.peak_bytes
    # max_memory_reserved: the tensors x (1 + the allocator's share) + cuBLAS's workspace, + the idle block
    reserved = reserved_peak_bytes(on)
    assert reserved[0] == pytest.approx(tensors * (1 + FRAGMENTATION_FRACTION) + CUBLAS_WORKSPACE_BYTES + cached,
                                        rel=1e-12)
    assert reserved[1] == pytest.approx(manual.loss_backward_phase_bytes * (1 + FRAGMENTATION_FRACTION)
                                        + CUBLAS_WORKSPACE_BYTES, rel=1e-12)


def test_the_compiled_loss_keeps_the_logits_and_their_gradient_and_leaves_no_block(models):
    """loss compiled (torchtitan's build_cross_entropy_loss under --compile): inductor's fused reduction keeps the
    16-bit logits and two fp32 values per token and allocates only their 16-bit gradient
    (benchmarks/check_compiled_ce_buffers.py): 2 + 2 bytes per logit + 8 per token at the loss backward, where
    the unfused loss holds 12 per logit; nothing for the allocator to keep idle."""
    out = rows(models, TITAN, dict(TITAN, loss="compiled"))
    unfused, compiled = out.iloc[0], out.iloc[1]
    tokens = 32_768
    assert unfused.loss_backward_phase_bytes - compiled.loss_backward_phase_bytes == pytest.approx(
        (12.0 - 4.0) * tokens * V8B - 8.0 * tokens, rel=1e-12)
    assert compiled.forward_phase_bytes - (unfused.forward_phase_bytes - 10.0 * tokens * V8B) == pytest.approx(
        2.0 * tokens * V8B + 8.0 * tokens, rel=1e-12)
    assert compiled.allocator_cached_bytes == 0.0
