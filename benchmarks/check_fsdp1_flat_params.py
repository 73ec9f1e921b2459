"""Offline check of two things FSDP1's flat parameters do to a training step's memory (engine/stacks.py
flat_params), on a tiny model with real tensors on the CPU (gloo, one rank). Run with the measuring venv
(torch, never imported by the app or tests):

    /work/venv-measure/bin/python benchmarks/check_fsdp1_flat_params.py

1. autocast's cast cache. aten/src/ATen/autocast_mode.cpp cached_cast caches a cast only when
   `arg.requires_grad() && arg.is_leaf() && !arg.is_view()`. A plain module's weights are leaf
   parameters: two forwards in one autocast region cast each weight once. Under FSDP1
   (FullyShardedDataParallel) a unit's weights are views of its unsharded FlatParameter while it runs
   (torch/distributed/fsdp/_flat_param.py _use_unsharded_views), so every call casts again and nothing
   is cached: the engine counts no cached copies of them (engine/components.py autocast_copies).
2. A mixed flat parameter. With use_orig_params=True FSDP1 accepts frozen and trained weights in one
   FlatParameter; the views it hands the module all require grad, so backward computes a gradient for
   every element of the flat parameter, frozen ones included (the FullyShardedDataParallel docstring:
   "the gradient memory usage will be higher than expected (namely, equivalent to not freezing those
   parameters)"); the frozen originals' .grad stay None, so the optimizer keeps no state for them.

Each layer here is two frozen-or-trained 64 x 64 linears and a 4 x 64 "adapter"; two layers, each its own
FSDP unit. Counted: aten._to_copy of a 64 x 64 weight (a cast) over two forwards under CPU bf16 autocast,
and the elements of the flat parameter's gradient after backward.

Output on 2026-12-06 (torch 2.13.0+cpu):
    plain module, all trained:        64x64 weight casts over 2 forwards: 4 (cached: one per weight)
    FSDP1, all trained:               64x64 weight casts over 2 forwards: 8; weight in forward: requires_grad True, leaf False, view True
    FSDP1, frozen + adapter (mixed):  64x64 weight casts over 2 forwards: 8; weight in forward: requires_grad True, leaf False, view True
    FSDP1 mixed: flat gradient elements 8448 of 8448 (trained: 256); frozen originals' .grad: None
"""
from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.utils._python_dispatch import TorchDispatchMode

WIDTH, RANK = 64, 4


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.b = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.adapter = torch.nn.Linear(WIDTH, RANK, bias=False)

    def forward(self, x):
        return self.b(self.a(x)) + self.adapter(x).sum(-1, keepdim=True)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class CountCasts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == (WIDTH, WIDTH):
            self.casts += 1
        return func(*args, **(kwargs or {}))


def run(fsdp: bool, mixed: bool) -> dict:
    torch.manual_seed(0)
    model = Model()
    for name, p in model.named_parameters():
        if mixed and "adapter" not in name:
            p.requires_grad_(False)
    seen = {}
    if fsdp:
        model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Layer}), use_orig_params=True,
                     device_id=torch.device("cpu"))
    for module in model.modules():
        if isinstance(module, Layer):
            def hook(mod, _inp):
                w = mod.a.weight
                seen["weight"] = (w.requires_grad, w.is_leaf, w._is_view())
            module.register_forward_pre_hook(hook)
    x = torch.randn(8, WIDTH, requires_grad=True)
    counter = CountCasts()
    with torch.autocast("cpu", dtype=torch.bfloat16), counter:
        y1, y2 = model(x), model(x)
    (y1.float().sum() + y2.float().sum()).backward()
    out = {"casts": counter.casts, "weight": seen["weight"]}
    if fsdp:
        flat = next(m._handle.flat_param for m in model.modules() if isinstance(m, FSDP) and m._handle is not None)
        out["flat_grad"] = (flat.grad.numel() if flat.grad is not None else 0, flat.numel())
        out["trained"] = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and "layers.0." in n)
        out["frozen_grads"] = {p.grad is None for n, p in model.named_parameters() if "adapter" not in n}
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        plain = run(fsdp=False, mixed=False)
        print(f"plain module, all trained:        {WIDTH}x{WIDTH} weight casts over 2 forwards: {plain['casts']}"
              " (cached: one per weight)")
        for label, mixed in (("FSDP1, all trained:              ", False), ("FSDP1, frozen + adapter (mixed): ", True)):
            r = run(fsdp=True, mixed=mixed)
            rg, leaf, view = r["weight"]
            print(f"{label} {WIDTH}x{WIDTH} weight casts over 2 forwards: {r['casts']}; weight in forward: "
                  f"requires_grad {rg}, leaf {leaf}, view {view}")
            if mixed:
                got, total = r["flat_grad"]
                frozen = "None" if r["frozen_grads"] == {True} else "set"
                print(f"FSDP1 mixed: flat gradient elements {got} of {total} (trained: {r['trained']}); "
                      f"frozen originals' .grad: {frozen}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
