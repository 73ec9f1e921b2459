"""Offline check of what one step of torchao's AdamW8bit holds beside the parameter, its gradient and
its states (issue 13, engine/constants.py TORCHAO_8BIT_*, optimizer `adamw_8bit_torchao`).

torchao's _AdamBase.step runs one parameter at a time through
`torch.compile(single_param_adam, fullgraph=True, dynamic=False)` (torchao/prototype/low_bit_optim/adam.py
at b714026, 2024-11-19). This runs that code on the CPU on one bf16 parameter, eager (torch.compile
replaced by the identity, to count what the Python code itself allocates) and compiled (inductor's C++
backend), and prints the peak resident memory above the step's start (/proc/self/status VmHWM after
resetting it through /proc/self/clear_refs) and, compiled, every buffer the generated code allocates.
CPU only: the CUDA (Triton) code generation is not run here (no GPU), see engine/constants.py.

torchao is not a dependency: the few files the optimizer needs are read from a git directory of
pytorch/ao at the pinned commit (torchao/__init__.py, which loads compiled extensions, is left out):

    /work/main/.venv-measure/bin/python benchmarks/check_torchao_8bit_step.py /path/to/pytorch-ao.git

Output on 2026-12-01 (torch 2.13.0+cpu, 2 cores), parameter 8192 x 3072 bf16 (25,165,824 values):
    states: OptimState8bit codes uint8, 98304 fp32 scales (block 256)
    eager: peak above the step's start 1367.9 MiB = 57.00 bytes per value   (57.99 in another run)
    compiled: peak above the step's start 192.6 MiB = 8.03 bytes per value
    compiled allocates: [((98304,), 'float32'), ((98304,), 'float32'), ((98304, 256), 'float32'), ((98304, 256), 'float32')]
i.e. eager about 14 fp32 copies of the parameter; compiled for the CPU (one fused C++ kernel,
TORCH_LOGS=output_code), two fp32 buffers of the parameter's size (the new exp_avg and exp_avg_sq,
viewed (-1, 256) for the per-block absmax) and the two new scale vectors.
"""
import os
import re
import subprocess
import sys
import tempfile

COMMIT = "b714026478d87a98796498a9daf4edbb24845dca"
FILES = ["torchao/utils.py"] + [f"torchao/prototype/low_bit_optim/{f}.py"
                                for f in ("adam", "quant_utils", "subclass_4bit", "subclass_8bit", "subclass_fp8")]
ROWS, COLS = 8192, 3072


def extract(git_dir: str) -> str:
    root = tempfile.mkdtemp(prefix="torchao-")
    for rel in FILES:
        text = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:{rel}"], check=True,
                              capture_output=True, text=True).stdout
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        open(os.path.join(root, rel), "w").write(text)
    for pkg in ("torchao", "torchao/prototype"):
        open(os.path.join(root, pkg, "__init__.py"), "w").close()
    open(os.path.join(root, "torchao/prototype/low_bit_optim/__init__.py"), "w").write("from .adam import AdamW8bit\n")
    return root


def kib(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
    raise KeyError(key)


def one_step(mode: str) -> None:
    """Run in a fresh process per mode (the compiled run must not see the eager run's peak)."""
    import torch
    import torchao.prototype.low_bit_optim.adam as adam
    from torch._inductor.utils import run_and_get_code

    if mode == "eager":
        adam.torch.compile = lambda fn, **kw: fn  # adam.py calls torch.compile(single_param_adam, ...) in step()
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(ROWS, COLS, dtype=torch.bfloat16) * 0.02)
    opt = adam.AdamW8bit([p], lr=1e-5)
    code = []
    for i in range(3):  # the first step creates the states and compiles
        p.grad = torch.randn_like(p) * 1e-3
        if i == 0 and mode == "compiled":
            _, code = run_and_get_code(opt.step)
            continue
        if i == 2:
            open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
            base = kib("VmRSS:")
        opt.step()
    extra = (kib("VmHWM:") - base) * 1024
    n = ROWS * COLS
    st = opt.state[p]["exp_avg"]
    print(f"torch {torch.__version__}, parameter {ROWS} x {COLS} bf16 ({n:,} values)")
    print(f"states: {type(st).__name__} codes {str(st.codes.dtype).split('.')[-1]}, "
          f"{st.scale.numel()} fp32 scales (block {st.block_size})")
    print(f"{mode}: peak above the step's start {extra / 2**20:.1f} MiB = {extra / n:.2f} bytes per value")
    for c in code:
        allocs = [(tuple(int(d) for d in s.replace(" ", "").split(",") if d), t)
                  for s, t in re.findall(r"empty_strided_\w+\(\((.*?)\), \(.*?\), torch\.(\w+)\)", c)]
        print(f"compiled allocates: {allocs}")


def main() -> None:
    if len(sys.argv) == 3:
        one_step(sys.argv[2])
        return
    if len(sys.argv) != 2:
        sys.exit("usage: check_torchao_8bit_step.py GIT_DIR_OF_PYTORCH_AO")
    root = extract(sys.argv[1])
    env = dict(os.environ, PYTHONPATH=root)
    for mode in ("eager", "compiled"):
        subprocess.run([sys.executable, __file__, "-", mode], env=env, check=True)


if __name__ == "__main__":
    main()
