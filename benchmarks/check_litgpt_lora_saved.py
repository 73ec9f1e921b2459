"""Offline check of what LitGPT's own model saves for backward per block and token under LoRA, with
LitGPT's real litgpt/lora.py, model.py and config.py on a tiny random model with real tensors on the
CPU (engine/memory.py layer_activation_bytes `fused_qkv`; engine/components.py `_litgpt_lora_kept`,
`first_layer_unsaved_masks`). Run with the measuring venv (torch; never imported by the app or tests)
and a LitGPT git directory:

    /work/venv-measure/bin/python benchmarks/check_litgpt_lora_saved.py [LITGPT_GIT_DIR]

(default /work/.mirror/Lightning-AI+litgpt/repo). For each of Lightning-AI/litgpt 5895df10, 00af8b0d
and 2685705 the three files are read with `git show` into a temporary package; litgpt/utils.py (which
imports lightning) and, at 2685705, scripts/convert_hf_checkpoint.py are replaced by stubs holding only
what those files import from them (find_multiple, map_old_state_dict_weights, qkv_reassemble: none runs
in a training forward). The model is built in bf16 (bf16-true's default dtype), LLaMAMLP and RMSNorm,
mark_only_lora_as_trainable, train mode; F.dropout is routed to ATen's native_dropout as on a GPU
(benchmarks/check_lora_dropout_saved.py says why). Sizes: h 64, 4 heads of 24 (q width 96), 2 query
groups (GQA: kv width 48) or 4 (MHA: 96), MLP 160, r 4. Per token (two sequence lengths, their
difference: per-call constants such as zero_pad's index tensor cancel) it prints the storages saved while
block 1's LoRAQKVLinear.forward runs (qkv), everything block 1 saves, and everything block 0 saves.

Read from the source and found here:
  qkv, q,v, p 0: the block input's norm x (2h, kept by lora_A's F.linear) + after_A (2 x 2r, conv1d's
      input) + after_B (2 x (96 + 48) GQA, 2 x (96 + 96) MHA): zero_pad's index_copy keeps its source
      (derivatives.yaml index_copy: `grad.index_select(dim, index).expand_as(source)`, a SavedVariable
      source_), = 432 / 528. All of q, k, v enabled: zero_pad returns its input, 128 + 2 x 3r = 152.
  p 0.1: ONE dropout for q, k and v: its bf16 output (2h) replaces x, and one bool mask (1h): +64.
  block, all, p 0 against the engine's per-layer bytes without these: +192 = 2 x 96, attention's output
      copy: q comes out of torch.cat (apply_rope), contiguous (B, heads, T, hs), so SDPA's output is laid
      out the same (flash: `out = at::empty_like(q_padded)`) and `y.transpose(1, 2)` then `y.reshape(B,
      T, ...)` (model.py CausalSelfAttention.forward) copies it: proj's lora_A keeps that copy. With
      dropout the copy is freed (the dropout's output is kept instead): all, p 0.1 - p 0 = 576.
  block 0: the embedding's output needs no grad: no norm_1 saves (4h + 4 less) and no q/k/v mask.
Output on 2026-12-04 (torch 2.13.0+cpu), the same at the three commits:
    commit    attn targets p    qkv B/token  block1 B/token  block0 B/token
    5895df10  GQA  q,v     0.0          432            2696            2436
    5895df10  GQA  q,v     0.1          496            2760            2436
    5895df10  GQA  all     0.0          152            3088            2828
    5895df10  GQA  all     0.1          216            3664            3340
    5895df10  MHA  q,v     0.0          528            3176            2916
    5895df10  MHA  q,v     0.1          592            3240            2916
    5895df10  MHA  all     0.0          152            3472            3212
    5895df10  MHA  all     0.1          216            4048            3724
    (00af8b0d and 2685705: the same figures)
tests/test_litgpt_dropout.py checks the engine's per-layer bytes against block 1's figures.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_peaks import gpu_dropout  # noqa: E402  (one routing of F.dropout to the GPU's op, for every script)

gpu_dropout(torch)

COMMITS = ("5895df10", "00af8b0d", "2685705")
H, FF, HEADS, HS, R = 64, 160, 4, 24, 4

UTILS_STUB = '''
def find_multiple(n, k):
    return n if n % k == 0 else n + k - n % k


def map_old_state_dict_weights(state_dict, mapping, prefix):
    return state_dict
'''
CONVERT_STUB = '''
def qkv_reassemble(*args, **kwargs):
    raise NotImplementedError("conversion only")
'''


def load_litgpt(git_dir: str, commit: str, into: Path):
    pkg = into / commit / "litgpt"
    (pkg / "scripts").mkdir(parents=True)
    for name in ("lora.py", "model.py", "config.py"):
        src = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:litgpt/{name}"], check=True,
                             capture_output=True, text=True).stdout
        (pkg / name).write_text(src)
    # litgpt/__init__.py imports the model before the config ("needs to be imported before config")
    (pkg / "__init__.py").write_text("from litgpt.model import GPT\nfrom litgpt.config import Config\n")
    (pkg / "utils.py").write_text(UTILS_STUB)
    (pkg / "scripts" / "__init__.py").write_text("")
    (pkg / "scripts" / "convert_hf_checkpoint.py").write_text(CONVERT_STUB)
    for mod in [m for m in sys.modules if m == "litgpt" or m.startswith("litgpt.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(into / commit))
    try:
        return importlib.import_module("litgpt.lora")
    finally:
        sys.path.pop(0)


def saved(lora, groups: int, targets: str, p: float, tok: int) -> tuple[int, int, int]:
    """(block 1's qkv module's saved bytes, block 1's, block 0's) for one sequence of `tok` tokens."""
    torch.manual_seed(0)
    allq = targets == "all"
    cfg = lora.Config(n_embd=H, n_head=HEADS, n_query_groups=groups, head_size=HS, n_layer=3, vocab_size=128,
                      padded_vocab_size=128, block_size=256, intermediate_size=FF, bias=False,
                      norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", rotary_percentage=1.0,
                      parallel_residual=False, lora_r=R, lora_alpha=8, lora_dropout=p, lora_query=True,
                      lora_key=allq, lora_value=True, lora_projection=allq, lora_mlp=allq, lora_head=False)
    torch.set_default_dtype(torch.bfloat16)
    try:
        m = lora.GPT(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    lora.mark_only_lora_as_trainable(m)
    m.train()
    params = {prm.untyped_storage().data_ptr() for prm in m.parameters()}
    params |= {b.untyped_storage().data_ptr() for b in m.buffers()}
    where = {"block": -1, "qkv": False}
    blocks = m.transformer.h
    for i, blk in enumerate(blocks):
        blk.register_forward_pre_hook(lambda _m, _a, i=i: where.__setitem__("block", i))
        blk.register_forward_hook(lambda _m, _a, _o: where.__setitem__("block", -1))
        qkv = blk.attn.attn if hasattr(blk.attn, "attn") else blk.attn.qkv
        qkv.register_forward_pre_hook(lambda _m, _a: where.__setitem__("qkv", True))
        qkv.register_forward_hook(lambda _m, _a, _o: where.__setitem__("qkv", False))
    seen_block: dict[int, dict[int, int]] = {0: {}, 1: {}}
    seen_qkv: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and where["block"] in seen_block:
            seen_block[where["block"]][st.data_ptr()] = st.nbytes()
            if where["qkv"] and where["block"] == 1:
                seen_qkv[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, 128, (1, tok))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(ids)
    return sum(seen_qkv.values()), sum(seen_block[1].values()), sum(seen_block[0].values())


def main() -> None:
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/Lightning-AI+litgpt/repo"
    print("commit    attn targets p    qkv B/token  block1 B/token  block0 B/token")
    with tempfile.TemporaryDirectory() as tmp:
        for commit in COMMITS:
            lora = load_litgpt(git_dir, commit, Path(tmp))
            for attn, groups in (("GQA", 2), ("MHA", HEADS)):
                for targets in ("q,v", "all"):
                    for p in (0.0, 0.1):
                        a1, b1, c1 = saved(lora, groups, targets, p, 32)
                        a2, b2, c2 = saved(lora, groups, targets, p, 64)
                        print(f"{commit:9} {attn:4} {targets:7} {p:<4} {(a2 - a1) / 32:11.0f}  {(b2 - b1) / 32:14.0f}"
                              f"  {(c2 - c1) / 32:14.0f}")


if __name__ == "__main__":
    main()
