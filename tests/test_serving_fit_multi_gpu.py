"""llama.cpp's --fit on several GPUs (llama-server's default, --split-mode layer): the margin is kept on each GPU, not
once over them all, each GPU that holds layers has its own compute buffer, and the layers are placed GPU by GPU.

The expected figures are worked out here from the rule of common/fit.cpp common_params_fit_impl (ggml-org/llama.cpp
@08033df) and common/common.h (`fit_params_target`: one 1 GiB margin per device), with the bytes of a dense GGUF taken
from the config (catalog/models.yaml) and the file's size, not from engine/serving.py's placement:
- a repeating layer: (file - token embeddings - output) / n_layer, plus its f16 K/V of -c tokens; the output layer:
  vocab x hidden at the file's bits; the token embeddings stay in host RAM
- the compute buffer: n_ubatch 512 x 4 B x (vocab + 4 hidden + 2 intermediate) on the output layer's GPU, a layer's
  temporaries (512 x 4 B x (4 hidden + 2 intermediate)) on each other GPU holding layers
- each GPU may hold its free memory less the CUDA context and the 1 GiB margin (`targets[id] = free - margins[id]`)
- -ngl auto: the default layout (src/llama-model.cpp: slot il of the n_layer + 1 on GPU floor(il x N / (n_layer + 1)),
  the output slot last) where every GPU keeps its margin; else step 3 fills back to front: the last GPU the output
  layer and the most layers that fit, each GPU before it the most of those left
- per GPU: the most loaded GPU of the layout (src/llama-model.cpp: slot s of the N on device
  upper_bound(splits, float(s) / N), splits the cumulative float shares of free memory), with its CUDA context
- -c 0 (no --max-model-len): the trained context where the memory in use over all GPUs leaves N margins free; else the
  longest multiple of 256 that leaves N margins and (N + 1) x half a layer's weights free (step 2 on several devices)
"""

from __future__ import annotations

import bisect
import json

import numpy as np
import pandas as pd
import pytest

import engine.constants as C
from catalog import default_catalog
from engine import serving as S
from tests.clirun import run_cli

GIB = 2**30
UBATCH = 512  # common/common.h n_ubatch


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


def hand(cat, model, gpu, precision, ctx):
    """The byte figures of the module docstring for a dense model: (layer with its K/V, output, logits + a layer's
    temporaries, a layer's temporaries, per-GPU target, n_layer)."""
    models, gpus = cat
    m = models.set_index("id").loc[model]
    L, h, ffn, V = (int(m[k]) for k in ("num_layers", "hidden_size", "intermediate_size", "vocab_size"))
    kvh, heads = int(m["num_kv_heads"]), int(m["num_heads"])
    d = int(m["head_dim"]) if pd.notna(m.get("head_dim")) and m.get("head_dim") else h // heads
    one = S.serve(pd.DataFrame([dict(model=model, gpu=gpu, engine="llama.cpp", precision=precision, max_model_len=4096,
                                     gpu_layers=0)]), models, gpus).iloc[0]  # the file's size and the card
    bpw = C.GGUF_BITS[precision] / 8
    output = V * h * bpw
    layer = (one["weights_bytes"] - 2 * output) / L + 2 * kvh * d * 2 * ctx
    first_compute = UBATCH * 4.0 * (V + 4 * h + 2 * ffn)
    other_compute = UBATCH * 4.0 * (4 * h + 2 * ffn)
    target = one["usable_bytes"] - C.CUDA_CONTEXT_BYTES - 1024 * 2**20
    return layer, output, first_compute, other_compute, target, L


def ngl_auto(cat, model, gpu, precision, ctx, n_gpus):
    """-ngl under --fit on n_gpus identical GPUs, by the rule of the module docstring."""
    layer, output, first_compute, other_compute, target, L = hand(cat, model, gpu, precision, ctx)
    counts = [len([il for il in range(L + 1) if il * n_gpus // (L + 1) == j]) for j in range(n_gpus)]
    held = [c * layer + other_compute for c in counts[:-1]] + [(counts[-1] - 1) * layer + output + first_compute]
    if all(x <= target for x in held):
        return L + 1
    room = target - output - first_compute
    if room < 0:
        return 0
    placed = min(L, int(room // layer))
    for _ in range(n_gpus - 1):
        placed += min(L - placed, max(int((target - other_compute) // layer), 0))
    return placed + 1


def per_gpu(cat, model, gpu, precision, ctx, n_gpus, slots, figures=None):
    """The bytes on each GPU of llama.cpp's default layout of `slots` -ngl slots (the module docstring), the CUDA context
    included: slot s on GPU upper_bound(splits, s / slots) with splits 1/n, 2/n, ... summed in float32 as load_tensors
    does; the last slot is the output layer. figures: hand()'s at -c 0 and 1, for many contexts of one model."""
    (layer0, output, first_compute, other_compute, _, _), (layer1, *_) = figures or (
        hand(cat, model, gpu, precision, 0), hand(cat, model, gpu, precision, 1))
    layer = layer0 + (layer1 - layer0) * ctx  # the K/V grows with the context
    splits = list(np.cumsum(np.full(n_gpus, 1.0, dtype=np.float32)) / np.float32(n_gpus))
    held = [0.0] * n_gpus
    holds = [False] * n_gpus
    for s in range(slots):
        j = bisect.bisect_right(splits, np.float32(s) / np.float32(slots))
        holds[j] = True
        held[j] += output + first_compute - other_compute if s == slots - 1 else layer
    return [h + (other_compute + C.CUDA_CONTEXT_BYTES if holds[j] else 0.0) for j, h in enumerate(held)]


def one_row(cat, **kw):
    models, gpus = cat
    return S.serve(pd.DataFrame([dict(engine="llama.cpp", **kw)]), models, gpus).iloc[0]


@pytest.mark.parametrize("model, gpu, precision, ctx, n_gpus", [
    # (-ngl with one margin over all the GPUs and one compute buffer, as the plan had it: 51, 81, 62, 30, 69)
    ("llama-3-70b", "rtx-4090", "q8_0", 8192, 2),           # 50
    ("llama-3-70b", "rtx-3060-12gb", "q4_k_m", 8192, 4),    # 79: over all four GPUs it would fit, GPU by GPU it does not
    ("qwen2.5-32b", "rtx-4060-ti-16gb", "q8_0", 131072, 4),  # 56
    ("llama-3.1-8b", "rtx-3060-12gb", "q8_0", 131072, 2),   # 28
    ("llama-3-70b", "l4", "q4_k_m", 32768, 2),              # 67
])
def test_gpu_layers_keep_a_margin_on_each_gpu(cat, model, gpu, precision, ctx, n_gpus):
    row = one_row(cat, model=model, gpu=gpu, precision=precision, max_model_len=ctx, gpus=n_gpus)
    expected = ngl_auto(cat, model, gpu, precision, ctx, n_gpus)
    assert 0 < expected < row["total_layers"] + 1  # a case where --fit lowers the layers
    assert row["gpu_layers"] == expected
    assert f"-ngl {expected} " in row["command"]


def test_every_layer_on_the_gpus_leaves_each_gpu_its_margin(cat):
    """Where the default layout fits, every slot is on the GPUs and each GPU (the most loaded one reported) is within
    its free memory less 1 GiB; the total is every GPU's."""
    row = one_row(cat, model="llama-3-70b", gpu="rtx-4090", precision="q4_k_m", max_model_len=8192, gpus=4)
    assert row["gpu_layers"] == ngl_auto(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192, 4) == 81
    layer, output, first_compute, other_compute, target, L = hand(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192)
    total = L * layer + output + first_compute + 3 * other_compute + 4 * C.CUDA_CONTEXT_BYTES
    each = per_gpu(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192, 4, 81)
    assert sum(each) == pytest.approx(total, rel=1e-9)
    assert row["gpu_memory_used_total_bytes"] == pytest.approx(total, rel=1e-9)
    assert row["gpu_memory_used_bytes"] == pytest.approx(max(each), rel=1e-9)
    assert max(each) > total / 4 * 1.001  # the first GPU's 21 layers against 20, 20 and 19 with the output layer
    assert row["gpu_memory_used_bytes"] <= row["usable_bytes"] - S.FIT_MARGIN_BYTES


def test_single_gpu_is_the_same_rule(cat):
    row = one_row(cat, model="llama-3-70b", gpu="rtx-4090", precision="q4_k_m", max_model_len=8192, gpus=1)
    assert row["gpu_layers"] == ngl_auto(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192, 1)


def fit_context(cat, model, gpu, precision, n_gpus, trained):
    """llama-server's -c 0 under --fit on n_gpus GPUs (step 2, the module docstring)."""
    layer0, output, first_compute, other_compute, target, L = hand(cat, model, gpu, precision, 0)
    kv_token = (hand(cat, model, gpu, precision, 1)[0] - layer0) * L  # f16 K/V of one token, every layer
    free = n_gpus * (target + 1024 * 2**20)  # free memory less the CUDA contexts, over all GPUs

    def used(n):
        return L * layer0 + output + first_compute + (n_gpus - 1) * other_compute + kv_token * n
    margins = n_gpus * 1024 * 2**20
    if used(trained) + margins <= free:
        return trained
    waste = (n_gpus + 1) * (L * layer0 + output) / L / 2 if n_gpus > 1 else 0.0
    fits = [n for n in range(4096, trained, 256) if used(n) + margins + waste <= free]
    return fits[-1] if fits else 4096


@pytest.mark.parametrize("n_gpus", [2, 4])
def test_context_without_max_model_len_keeps_every_margin(cat, n_gpus):
    gpu = "rtx-4090" if n_gpus == 2 else "rtx-4060-ti-16gb"
    code, stdout, stderr = run_cli("serve", "--model", "llama-3.1-70b", "--gpu", gpu, "--engine", "llama.cpp",
                                   "--precision", "q4_k_m", "--gpus", str(n_gpus), "--json")
    assert code == 0, stderr
    plan = json.loads(stdout)
    plan = plan[0] if isinstance(plan, list) else plan
    expected = fit_context(cat, "llama-3.1-70b", gpu, "q4_k_m", n_gpus, 131072)
    assert 4096 < expected < 131072  # --fit lowers the context here
    assert plan["max_model_len"] == expected
    assert f"1 GiB free on each of the {n_gpus} GPUs" in plan["max_model_len_source"]
    # then step 3 places the layers at that context, GPU by GPU
    assert plan["gpu_layers"] == ngl_auto(cat, "llama-3.1-70b", gpu, "q4_k_m", expected, n_gpus)


def test_user_layers_keep_the_default_layout_and_a_buffer_per_gpu(cat):
    """-ngl N given: --fit leaves the layers alone (it stops at "n_gpu_layers already set by user"); the N slots are
    spread over the GPUs, each GPU holding some with its compute buffer."""
    row = one_row(cat, model="llama-3-70b", gpu="rtx-4090", precision="q4_k_m", max_model_len=8192, gpus=2,
                  gpu_layers=60)
    layer, output, first_compute, other_compute, target, L = hand(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192)
    assert row["gpu_layers"] == 60
    total = 59 * layer + output + first_compute + other_compute + 2 * C.CUDA_CONTEXT_BYTES
    assert row["gpu_memory_used_total_bytes"] == pytest.approx(total, rel=1e-9)
    # 30 layers on the first GPU; 29, the output layer and the logits on the second
    each = per_gpu(cat, "llama-3-70b", "rtx-4090", "q4_k_m", 8192, 2, 60)
    assert each[0] == pytest.approx(30 * layer + other_compute + C.CUDA_CONTEXT_BYTES)
    assert row["gpu_memory_used_bytes"] == pytest.approx(max(each), rel=1e-9)
    assert np.isfinite(row["kv_cache_bytes_available"])


@pytest.mark.parametrize("gpu, n_gpus, slots", [("rtx-4090", 2, 81), ("rtx-3060-12gb", 4, 61), ("rtx-3060-12gb", 3, 50)])
def test_fits_on_the_most_loaded_gpu_not_the_average(cat, gpu, n_gpus, slots):
    """-ngl N over several GPUs: the verdict is the most loaded GPU's. At the longest context where the average over
    the GPUs still fits, one GPU is over its memory, and the plan says it does not fit."""
    model, precision = "llama-3-70b", "q4_k_m"
    figures = hand(cat, model, gpu, precision, 0), hand(cat, model, gpu, precision, 1)
    usable = figures[0][4] + C.CUDA_CONTEXT_BYTES + 1024 * 2**20  # the card's free memory
    ctxs = np.arange(256, 131072, 256)
    loads = [per_gpu(cat, model, gpu, precision, int(c), n_gpus, slots, figures) for c in ctxs]
    split = [c for c, each in zip(ctxs, loads) if sum(each) / n_gpus <= usable < max(each)]
    assert split, "no context where the average and the most loaded GPU disagree"
    c = int(split[-1])
    each = loads[list(ctxs).index(c)]
    row = one_row(cat, model=model, gpu=gpu, precision=precision, max_model_len=c, gpus=n_gpus, gpu_layers=slots)
    assert row["gpu_layers"] == slots
    assert row["gpu_memory_used_bytes"] == pytest.approx(max(each), rel=1e-9)
    assert row["gpu_memory_used_total_bytes"] == pytest.approx(sum(each), rel=1e-9)
    assert not row["fits"]
    fitting = max(cc for cc, e in zip(ctxs, loads) if max(e) <= usable)
    assert one_row(cat, model=model, gpu=gpu, precision=precision, max_model_len=int(fitting), gpus=n_gpus,
                   gpu_layers=slots)["fits"]


def test_slots_are_the_fewest_any_gpu_holds(cat):
    """llama-server's slots of max_model_len tokens beside every layer (max_concurrency) on several GPUs: each GPU holds
    a slot's K/V for its own layers, so the slots are the fewest any GPU has room for, not the room over all of them
    divided by a slot's K/V."""
    model, gpu, precision, n_gpus = "llama-3.1-8b", "rtx-3060-12gb", "q4_k_m", 2
    figures = hand(cat, model, gpu, precision, 0), hand(cat, model, gpu, precision, 1)
    L = figures[0][5]
    kv_layer_token = figures[1][0] - figures[0][0]
    usable = figures[0][4] + C.CUDA_CONTEXT_BYTES + 1024 * 2**20
    weights_only = per_gpu(cat, model, gpu, precision, 0, n_gpus, L + 1, figures)  # no K/V, the CUDA context in
    layers = [17, 15]  # slots 0..16 on the first GPU; 17..31 and the output slot on the second
    seen = 0
    for ctx in (1024, 4096, 8192, 32768):
        room = [usable - 1024 * 2**20 - w for w in weights_only]
        each = min(int(r // (n * kv_layer_token * ctx)) for r, n in zip(room, layers))
        over_all = int(sum(room) // (L * kv_layer_token * ctx))
        row = one_row(cat, model=model, gpu=gpu, precision=precision, max_model_len=ctx, gpus=n_gpus)
        assert row["gpu_layers"] == L + 1
        assert row["max_concurrency"] == each, ctx
        seen += each < over_all
    assert seen, "no context where the per-GPU slots and the slots over all the GPUs differ"


def test_a_fit_layout_that_is_not_the_default_one_is_written_as_tensor_split(cat):
    """--fit's step 3 fills the GPUs from the last one back; where that leaves other per-GPU slot counts than the
    default layout of the same -ngl, a command with -ngl alone would run the default layout (llama-server skips --fit
    for a user's n_gpu_layers). The command writes -ts with each GPU's slots, which llama.cpp's upper_bound rule
    (splits: the cumulative shares, float32 as load_tensors sums them) turns back into the same counts."""
    models, gpus = cat
    rows = [dict(model=m, gpu=g, gpus=n, engine="llama.cpp", precision=p, max_model_len=c)
            for m in ("deepseek-r1", "llama-3-70b", "qwen2.5-32b", "mixtral-8x7b")
            for g in ("rtx-3060-12gb", "rtx-4090") for n in (2, 3, 4) for p in ("q4_k_m", "q8_0") for c in (4096, 65536)]
    out = S.serve(pd.DataFrame(rows), models, gpus)
    written = out[out["tensor_split"].notna()]
    assert len(written) >= 5, "no plan whose --fit layout differs from the default one"
    for _, r in written.iterrows():
        counts = [int(x) for x in r["tensor_split"].split(",")]
        assert len(counts) == r["gpus"] and sum(counts) == r["gpu_layers"]
        assert f" -ts {r['tensor_split']}" in r["command"]
        splits = list(np.cumsum(np.asarray(counts, dtype=np.float32)) / np.float32(sum(counts)))
        placed = [0] * len(counts)
        for s in range(int(r["gpu_layers"])):
            placed[bisect.bisect_right(splits, np.float32(s) / np.float32(r["gpu_layers"]))] += 1
        assert placed == counts, (r["model"], r["gpu"], r["tensor_split"], placed)
    # (a plan the default layout runs as planned writes none)
    assert out.loc[out["tensor_split"].isna(), "command"].str.contains(" -ts ").sum() == 0


def test_ollama_on_several_gpus_plans_the_layers_the_default_layout_fits(cat):
    """Ollama (from ollama/ollama 9db4bda, 2026-05-29) runs llama-server with -ngl num_gpu, the default layout over
    its GPUs: its own count spread the layers evenly in bytes, and where the default layout then puts more on one GPU
    than it holds, the plan takes the most slots whose layout fits each GPU (DeepSeek-R1 Q4_K_M on 8 x A100 40GB at
    65,536 tokens: 41 slots did not fit the first GPU). A slot more, asked as num_gpu, does not fit."""
    models, gpus = cat
    row = dict(model="deepseek-r1", gpu="a100-40gb-pcie", gpus=8, engine="ollama", precision="q4_k_m",
               max_model_len=65536)
    planned = S.serve(pd.DataFrame([row]), models, gpus).iloc[0]
    n = int(planned["gpu_layers"])
    assert planned["fits"] and 0 < n < 41
    asked = S.serve(pd.DataFrame([{**row, "gpu_layers": n}, {**row, "gpu_layers": n + 1}]), models, gpus)
    assert asked["fits"].tolist() == [True, False]


@pytest.mark.parametrize("engine", ["llama.cpp", "ollama"])
def test_the_report_says_what_the_most_loaded_gpu_holds(cat, engine):
    """Ollama runs llama-server with -ngl (ollama 9db4bda), so its layers fall on the GPUs as llama.cpp's do: the text
    report names the most loaded GPU's memory and the sum over the GPUs for both engines, as serve --json does."""
    from planner.serving import format_serve
    models, gpus = cat
    frame = S.serve(pd.DataFrame([dict(model="llama-3.1-70b", gpu="rtx-3090", gpus=2, engine=engine, precision="q4_k_m",
                                     max_model_len=8192)]), models, gpus)
    row = frame.iloc[0]
    text = format_serve(row)
    assert f"in use: {row['gpu_memory_used_bytes'] / 2**30:.2f} GiB on the most loaded GPU" in text, text
    assert f"{row['gpu_memory_used_total_bytes'] / 2**30:.2f} GiB over the 2" in text
    assert row["gpu_memory_used_bytes"] < row["gpu_memory_used_total_bytes"]
