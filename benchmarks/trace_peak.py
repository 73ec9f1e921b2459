#!/usr/bin/env python3
"""What a measured peak is made of: every tensor alive at the peak of one configuration of
benchmarks/measure_peaks.py, grouped by the op that made it, its shape, dtype, MemTracker
category and module (layer numbers folded to N), with the op and module at the peak.

Used for issue 12 to find the tensors a measured run holds that the engine does not count
(docs/accuracy.md "Known misses"). Same method as measure_peaks.py (FakeTensorMode + MemTracker,
its PhaseMemTracker subclass), plus a ledger of each tracked storage's first producer.

    .venv-measure/bin/python benchmarks/trace_peak.py CONFIG_ID [--min-gib X] [--top 40]

CONFIG_ID as `measure_peaks.py --list` prints it. Snapshots are taken only when the live total
passes --min-gib (default: the CSV's peak of that configuration minus 1%), which keeps the
run's time close to measure_peaks.py's.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_peaks as mp  # noqa: E402

GIB = 2**30


def _tracing_class(base_factory, threshold):
    def factory():
        import torch
        from torch.utils.weak import WeakIdKeyDictionary
        from torch.distributed._tools.mem_tracker import _TOTAL_KEY

        Base, Ref, TOTAL = base_factory()

        class TracingTracker(Base):
            def __init__(self):
                super().__init__()
                self._func = "setup"
                self._desc = WeakIdKeyDictionary()
                self.snap_total = -1
                self.snap = []
                self.snap_at = None

            def _module(self):
                parents = self._mod_tracker.parents
                return max(parents, key=len) if parents else ""

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self._func = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
                return super().__torch_dispatch__(func, types, args, kwargs)

            def _track(self, reftype, t):
                for st in [t.untyped_storage()] if isinstance(t, torch.Tensor) else []:
                    if st not in self._desc:
                        self._desc[st] = (self._func, tuple(t.shape), str(t.dtype).replace("torch.", ""),
                                          self._module(), self.phase)
                super()._track(reftype, t)

            def _update_peak_stats(self, peak_state):
                super()._update_peak_stats(peak_state)
                for snap in self._curr_mem_snap.values():
                    total = snap[_TOTAL_KEY]
                    if total >= threshold and total > self.snap_total:
                        self.snap_total = total
                        self.snap_at = (self._func, self._module(), self.phase)
                        self.snap = [(w.mem_consumed, w.reftype.name if hasattr(w.reftype, "name") else str(w.reftype),
                                      self._desc.get(st)) for st, (w, _) in self._WINFO.items()]

        TracingTracker.__name__ = "PhaseMemTracker"
        return TracingTracker, Ref, TOTAL

    return factory


def fold(module: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", module or "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--min-gib", type=float, default=None)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    by_id = {mp.config_id(c): c for c in (mp.CONFIGS + mp.LOOP_CONFIGS + mp.DROPOUT_CONFIGS + mp.HYBRID_CONFIGS
                                          + mp.MOE_LORA_CONFIGS)}
    c = by_id[args.config]
    if args.min_gib is None:
        rows = list(csv.DictReader(open(mp.DEFAULT_OUT)))
        keys = ("model", "task", "method", "precision", "optimizer", "batch", "seq")
        match = [r for r in rows if all(str(r[k]) == str(c[k]) for k in keys)
                 and r["grad_checkpointing"] == ("true" if c["grad_checkpointing"] else "false")
                 and int(r["gpus"]) == c["gpus"] and int(r["lora_rank"]) == c["lora_rank"]]
        threshold = int(int(match[0]["peak_bytes"]) * 0.99) if match else 0
    else:
        threshold = int(args.min_gib * GIB)
    holder = {}
    base = mp._make_tracker_class

    def patched():
        cls, ref, total = _tracing_class(base, threshold)()
        orig_init = cls.__init__

        def init(self):
            orig_init(self)
            holder.setdefault("trackers", []).append(self)

        cls.__init__ = init
        return cls, ref, total

    mp._make_tracker_class = patched
    res = mp.run_one(c)
    row = res["row"]
    # the tracker of the CSV row (inference runs a second, full-logits forward with its own tracker)
    tr = next(t for t in holder["trackers"] if t.peak_total == row["peak_bytes"])
    print(f"{args.config}: peak {row['peak_bytes'] / GIB:.3f} GiB ({row['peak_phase']}); snapshot "
          f"{tr.snap_total / GIB:.3f} GiB at op {tr.snap_at}")
    groups = defaultdict(lambda: [0, 0])
    for nbytes, ref, desc in tr.snap:
        func, shape, dtype, module, phase = desc or ("(untracked producer)", (), "", "", "")
        key = (ref, func, shape, dtype, fold(module), phase)
        groups[key][0] += nbytes
        groups[key][1] += 1
    total = sum(g[0] for g in groups.values())
    print(f"live at the snapshot: {total / GIB:.3f} GiB in {sum(g[1] for g in groups.values())} storages")
    print(f"{'GiB':>8} {'n':>5}  category  op  shape  dtype  module  phase")
    for key, (nbytes, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:args.top]:
        ref, func, shape, dtype, module, phase = key
        print(f"{nbytes / GIB:8.3f} {n:5d}  {ref}  {func}  {list(shape)}  {dtype}  {module}  {phase}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
