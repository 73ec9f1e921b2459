"""Offline check of the loss buffers of transformers' ForCausalLMLoss by version and batch (issue 13,
engine/stacks.py logits_upcast loss; engine/memory.py logits_bytes).

transformers 4.46.0-4.48.x shift the fp32 logits (`shift_logits = logits[..., :-1, :].contiguous()`);
4.49.0 pads the labels instead (huggingface/transformers PR #35646). Whether the shifted slice is copied
depends on the batch: with one sequence, (1, T-1, V) sliced from a contiguous (1, T, V) is contiguous
already, so `.contiguous()` returns it as it is; with two or more it is a fp32 copy of the logits.

Reads `ForCausalLMLoss` and `fixed_cross_entropy` from the wheels given on the command line (the
functions' own source, run as written, with torch and torch.nn in scope), then runs one loss forward
and backward the way LlamaForCausalLM does it (the model's 16-bit logits are held by the caller while
the loss runs; the Trainer keeps only the loss) under torch's MemTracker on fake tensors, and prints,
per token and vocabulary entry, the most bytes alive in forward (the loss's own tensors plus the
16-bit logits) and in backward down to the logits' 16-bit gradient (the loss's saved tensors and
gradients; the 16-bit logits, which the Trainer has dropped by then, left out). transformers is not
a dependency: download the wheels first, e.g.

    for v in 4.46.3 4.48.3 4.49.0; do pip download transformers==$v --no-deps -d /tmp/tf; done
    .venv-measure/bin/python benchmarks/check_shifted_logits_copy.py /tmp/tf/transformers-4.4*.whl

Output on 2026-12-01 (torch 2.13.0+cpu, 4,096 tokens per batch, vocabulary 32,000, bf16 logits):
    transformers-4.46.3 batch 1: forward 10.00 bytes per token and vocabulary entry, start of backward 12.00
    transformers-4.46.3 batch 2: forward 14.00 bytes per token and vocabulary entry, start of backward 11.99
    transformers-4.48.3 batch 1: forward 10.00 bytes per token and vocabulary entry, start of backward 12.00
    transformers-4.48.3 batch 2: forward 14.00 bytes per token and vocabulary entry, start of backward 11.99
    transformers-4.49.0 batch 1: forward 10.00 bytes per token and vocabulary entry, start of backward 12.00
    transformers-4.49.0 batch 2: forward 10.00 bytes per token and vocabulary entry, start of backward 12.00
i.e. engine/memory.py logits_bytes (10 V in forward, 12 V at the start of backward, V = the vocabulary)
for transformers 4.49 and later at any batch, and for 4.46-4.48 at micro-batch 1; 4.46-4.48 at
micro-batch 2 or more hold 4 V per token more in forward (the shifted fp32 copy), which the engine does
not model (docs/stacks.md, logits_upcast).
"""
import ast
import sys
import zipfile

TOKENS, VOCAB = 4096, 32000
BATCHES = (1, 2)
FUNCTIONS = ("fixed_cross_entropy", "ForCausalLMLoss")


def load_loss(wheel: str):
    source = zipfile.ZipFile(wheel).read("transformers/loss/loss_utils.py").decode()
    tree = ast.parse(source)
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    assert {n.name for n in body} == set(FUNCTIONS), f"{wheel}: {FUNCTIONS} not both found"
    import torch
    from torch import nn
    from typing import Optional
    namespace = {"torch": torch, "nn": nn, "Optional": Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), wheel, "exec"), namespace)
    return namespace["ForCausalLMLoss"]


def measure(loss_fn, batch: int) -> tuple[float, float]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

    with FakeTensorMode():
        # the logits as a 16-bit leaf that needs a gradient: lm_head's output, without lm_head's weight
        logits = torch.empty(batch, TOKENS // batch, VOCAB, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.zeros(batch, TOKENS // batch, dtype=torch.long)
        tracker = MemTracker()
        with tracker:
            def live() -> int:
                return int(sum(s[_TOTAL_KEY] for s in tracker._curr_mem_snap.values()))
            base = live()  # the logits and labels
            loss = loss_fn(logits, labels, vocab_size=VOCAB)
            forward = max(tracker._peak_mem.values()) - base + logits.untyped_storage().nbytes()  # + the 16-bit logits
            after = live()
            tracker._peak_mem = {k: after for k in tracker._peak_mem}
            # down to the logits' 16-bit gradient (what lm_head's backward receives); the loss's saved
            # tensors and its gradients, the logits and labels (base) left out
            loss.backward(inputs=[logits], retain_graph=False)
            backward = max(tracker._peak_mem.values()) - base
    per = TOKENS * VOCAB
    return forward / per, backward / per


def main(wheels: list[str]) -> int:
    if not wheels:
        print(__doc__)
        return 2
    for wheel in wheels:
        loss_fn = load_loss(wheel)
        name = wheel.rsplit("/", 1)[-1].split("-py3")[0]
        for batch in BATCHES:
            fwd, bwd = measure(loss_fn, batch)
            print(f"    {name} batch {batch}: forward {fwd:.2f} bytes per token and vocabulary entry, "
                  f"start of backward {bwd:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
