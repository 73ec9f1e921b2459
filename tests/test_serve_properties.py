"""A random property search over `engine.serving.serve`, on every `make test`, with the run's fresh seed.

`serve` is whole-column numpy like the estimate (tests/test_property_search.py searches that): a
request's figures must be the same alone and inside any frame of other requests (every engine,
model, card, format, TP size, draft model and setting drawn at random), every byte figure finite and
>= 0, and for the paged engines (vLLM, SGLang) the requests one card holds never more at a longer
--max-model-len. The seed is tests/conftest.py's (printed in pytest's header; PROPERTY_SEARCH_SEED=S
reruns it); a failure names the seed and the first offending request.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from engine import serving as S

# drawn with a fresh seed each run (160 before: 17 s of the suite's time); those serve refuses alone (a format, TP size
# or draft the engine or card refuses) are left out
N_REQUESTS = 120
BYTE_COLUMNS = ("usable_bytes", "budget_bytes", "weights_bytes", "weights_gpu_bytes", "activation_peak_bytes",
                "non_torch_bytes", "kv_bytes_per_token", "kv_cache_bytes_available", "gpu_memory_used_bytes",
                "host_ram_bytes", "draft_weights_bytes", "draft_kv_cache_bytes")


def random_requests(rng: np.random.Generator, models: pd.DataFrame, gpus: pd.DataFrame, n: int) -> list[dict]:
    ids = models["id"].tolist()
    out = []
    for _ in range(n):
        engine = str(rng.choice(S.ENGINES))
        req = {"model": str(rng.choice(ids)), "gpu": str(rng.choice(gpus["id"].tolist())), "engine": engine,
               "precision": str(rng.choice(S.engine_precisions(engine))),
               "max_model_len": int(rng.choice([512, 2048, 4096, 8192, 16384, 32768, 131072])),
               "gpus": int(rng.choice([1, 1, 2, 4, 8]))}
        if rng.random() < 0.3:
            req["gpu_memory_utilization"] = float(np.round(rng.uniform(0.5, 0.95), 2))
        if rng.random() < 0.3:
            req["max_num_seqs"] = int(rng.choice([1, 8, 64, 256]))
        if engine in ("vllm", "sglang") and rng.random() < 0.3:
            req["engine_version"] = str(rng.choice(["0.6", "0.8", "0.9", "0.10", "0.21"] if engine == "vllm"
                                                   else ["0.4.9", "0.5.2", "0.5.3", "0.5.19"]))
        if engine in S.DRAFT_ENGINES and rng.random() < 0.15:
            req["draft_model"] = str(rng.choice(ids))
        if rng.random() < 0.3:
            req["concurrency"] = int(rng.choice([1, 4, 16]))
        if rng.random() < 0.2:
            req["gpu_memory_in_use_gib"] = float(rng.choice([0.5, 2.0, 8.0, 40.0]))
        if engine == "vllm" and rng.random() < 0.2:
            req["kv_cache_memory_bytes"] = float(rng.choice([2**28, 2**31, 2**34]))
        out.append(req)
    return out


def _served_alone(requests, models, gpus):
    rows, kept = [], []
    for req in requests:
        try:
            rows.append(S.serve(pd.DataFrame([req]), models, gpus).iloc[0])
        except ValueError:  # refused alone: the frame below holds only requests serve takes
            continue
        kept.append(req)
    return kept, pd.DataFrame(rows).reset_index(drop=True)


def test_serve_gives_each_request_its_own_answer_in_any_frame(models, gpus):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    rng = np.random.default_rng(seed)
    kept, alone = _served_alone(random_requests(rng, models, gpus, N_REQUESTS), models, gpus)
    print(f"serve property search seed={seed} requests={len(kept)}")
    assert len(kept) >= N_REQUESTS // 4  # the draw is not mostly refused: the check below is not vacuous
    framed = S.serve(pd.DataFrame(kept), models, gpus)
    numeric = [c for c in framed.columns if pd.api.types.is_numeric_dtype(framed[c]) and c in alone.columns]
    for col in numeric:
        a = pd.to_numeric(alone[col], errors="coerce").to_numpy(float)
        b = framed[col].to_numpy(float)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if not same.all():
            i = int(np.argmin(same))
            raise AssertionError(f"seed={seed}: {col} is {b[i]!r} in the frame, {a[i]!r} alone, for {kept[i]}")
    for col in BYTE_COLUMNS:
        v = framed[col].to_numpy(float)
        bad = ~(np.isfinite(v) & (v >= 0))
        assert not bad.any(), f"seed={seed}: {col} = {v[np.argmax(bad)]!r} for {kept[int(np.argmax(bad))]}"
    # the KV cache an engine sets aside itself: bytes >= 0, none for transformers (its cache grows with each sequence)
    # nor for mlx-lm (its KVCache grows in 256-token steps)
    v, hf = framed["kv_cache_bytes_allocated"].to_numpy(float), framed["engine"].isin(("transformers", "mlx-lm")).to_numpy()
    bad = np.where(hf, ~np.isnan(v), ~(np.isfinite(v) & (v >= 0)))
    assert not bad.any(), f"seed={seed}: kv_cache_bytes_allocated = {v[np.argmax(bad)]!r} for {kept[int(np.argmax(bad))]}"


def test_a_longer_context_never_holds_more_requests(models, gpus):
    seed = int(os.environ["PROPERTY_SEARCH_SEED"])
    rng = np.random.default_rng(seed + 1)
    base = [r for r in random_requests(rng, models, gpus, N_REQUESTS) if r["engine"] in ("vllm", "sglang")]
    kept, _ = _served_alone(base, models, gpus)
    lengths = (2048, 4096, 8192, 16384, 32768)
    frame = pd.DataFrame([{**r, "max_model_len": n} for r in kept for n in lengths])
    frame = frame.drop(columns=[c for c in ("concurrency",) if c in frame])
    try:
        out = S.serve(frame, models, gpus)
    except ValueError:  # a longer context than a model takes: ask each request alone
        out = pd.concat([S.serve(frame.iloc[[i]], models, gpus) for i in range(len(frame))], ignore_index=True)
    conc = out["max_concurrency"].to_numpy(float).reshape(len(kept), len(lengths))
    worse = np.diff(conc, axis=1) > 1e-9
    assert not worse.any(), (f"seed={seed}: {kept[int(np.argmax(worse.any(axis=1)))]} holds more requests at a longer "
                             f"context: {conc[int(np.argmax(worse.any(axis=1)))].tolist()}")


def test_a_reserve_larger_than_the_card_gives_sglang_no_room_not_negative_bytes(models, gpus):
    """Found by this search (seed 3668949637250939106): SGLang's default mem_fraction_static on an 8 GiB card at TP 8
    with a STANDALONE draft model is (8,192 - 11,104 MiB reserved) / 8,192 < 0, which gave a budget, and the memory
    used, of -2.84 GiB. SGLang stops at start there (no room for weights and KV); the fraction is now 0, every byte
    figure >= 0, and the request does not fit."""
    req = {"model": "qwen3-32b", "gpu": "rtx-3060-ti", "engine": "sglang", "precision": "fp16",
           "max_model_len": 131072, "gpus": 8, "max_num_seqs": 1, "draft_model": "deepseek-r1-distill-qwen-1.5b"}
    row = S.serve(pd.DataFrame([req]), models, gpus).iloc[0]
    assert row["engine_reserved_bytes"] > row["usable_bytes"]  # the case: the reserve alone exceeds the card
    assert row["gpu_memory_utilization"] == 0.0
    for col in BYTE_COLUMNS:
        assert np.isfinite(row[col]) and row[col] >= 0, (col, row[col])
    assert not row["fits"] and row["max_concurrency"] == 0
    # the same card without the draft keeps its positive default (the clamp changes only the impossible case)
    alone = S.serve(pd.DataFrame([{k: v for k, v in req.items() if k != "draft_model"}]), models, gpus).iloc[0]
    assert 0 < alone["gpu_memory_utilization"] < 1
