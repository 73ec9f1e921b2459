"""Offline check of what torch.compile keeps for torchtune's compiled chunked cross-entropy (issue 13,
engine/memory.py `stack_logits_bytes`, compiled chunked / linear_chunked). torchtune compiles only
CEWithChunkedOutputLoss.compute_cross_entropy, `F.cross_entropy(logits.float(), labels,
reduction="sum")` per chunk (torchtune/training/_compile.py compile_loss, commit 1814feb17, the
README's 'Optimization flags' table). This compiles that function on the CPU with inductor and prints
every buffer the generated forward and backward allocate, and what the forward saves for backward.
The partition (what is saved) is decided by AOTAutograd's partitioner before code generation, so it is
the same on CUDA; the fusion of the upcast, log_softmax and nll into one reduction kernel is inductor's
for both. Run with the measuring venv (torch, never imported by the app or the tests):

    /work/main/.venv-measure/bin/python benchmarks/check_compiled_ce_buffers.py

Output on 2026-12-01 (torch 2.13.0+cpu), N = 64 rows, V = 4096:
    forward allocates: [((64, 1), 'float32'), ((64, 1), 'float32'), ((), 'float32')]
    forward returns (loss + saved for backward): ['buf3', 'primals_1', 'primals_2', 'buf0', 'buf2']
    backward allocates: [((64, 1), 'float32'), ((64, 4096), 'bfloat16')]
i.e. the compiled forward materialises no V-wide tensor (no fp32 upcast, no log_softmax output): it
keeps the 16-bit input chunk (primals_1) and two fp32 values per row (the max and the log-sum-exp,
8 bytes per token); the backward allocates only the chunk's 16-bit gradient (M V / C per token).
"""
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

N, V = 64, 4096


def compute_cross_entropy(logits, labels):
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def allocations(code: str) -> list:
    out = []
    for shape, dtype in re.findall(r"empty_strided_\w+\(\((.*?)\), \(.*?\), torch\.(\w+)\)", code):
        dims = tuple(int(d) for d in shape.replace(" ", "").split(",") if d)
        out.append((dims, dtype))
    return out


def main() -> int:
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    compiled = torch.compile(compute_cross_entropy)
    x = torch.randn(N, V, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, V, (N,))

    def step():
        loss = compiled(x, y)
        loss.backward()
        return loss

    _, codes = run_and_get_code(step)
    if len(codes) < 2:
        print("expected a forward and a backward module, got", len(codes), file=sys.stderr)
        return 1
    forward, backward = codes[0], codes[1]
    print("forward allocates:", allocations(forward))
    ret = re.findall(r"return \((.*?)\)", forward.split("def call")[1])[0]
    print("forward returns (loss + saved for backward):", [r.strip() for r in ret.split(",") if r.strip()])
    print("backward allocates:", allocations(backward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
