"""Fit the serving speed model on the `fit` rows of catalog/serving_measurements.yaml and
print the held-out accuracy table of docs/serving.md (markdown).

    .venv/bin/python benchmarks/serving_accuracy.py            # the table (as in docs/serving.md)
    .venv/bin/python benchmarks/serving_accuracy.py --fit      # the fitted constants

The constants in engine/serving.py are these fitted values (tests/test_serving.py refits and
compares, and checks that docs/serving.md holds this script's table). Held-out rows never set a
constant: the error reported on them is the model's accuracy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import default_catalog  # noqa: E402
from catalog.serving_data import load_measurements  # noqa: E402
from engine import serving as S  # noqa: E402
from engine.constants import GGUF_EXPERT_BITS  # noqa: E402
from engine.params import ARCH_DEFAULTS, architecture_counts  # noqa: E402

GIB = 2**30
TABLE_BEGIN = "<!-- serving-accuracy:begin (benchmarks/serving_accuracy.py) -->"
TABLE_END = "<!-- serving-accuracy:end -->"


def fit(meas: pd.DataFrame) -> dict:
    """The speed constants from the fit rows, in closed form.

    NVIDIA GDDR rows (not capped): 1/v = b / (e BW) + L c, two rows -> e and c.
    The H100 row: the cap on effective bandwidth = b / (1/v - L c).
    The ROCm and the Metal row: their family's efficiency = b / (BW (1/v - L c)); the Vulkan
    backend's one row per family likewise (issue 27).
    Prefill: MFU = v x FLOPs per token / TFLOPS."""
    f = meas[meas["role"] == "fit"]
    lcpp_all = f[(f["metric"] == "decode_tokens_per_s") & (f["engine"] == "llama.cpp")]
    routed = batch1_expert_share(lcpp_all) > 0  # MoE rows set the expert efficiency alone (below)
    lcpp, moe = lcpp_all[~routed], lcpp_all[routed]
    dec, vulkan = lcpp[lcpp["backend"] != "vulkan"], lcpp[lcpp["backend"] == "vulkan"]
    nv = dec[(dec["gpu_family"] == "nvidia") & (dec["bandwidth_gbps"] < 3000)]
    b = nv["weights_gib"].to_numpy(float) * GIB
    x = b / (nv["bandwidth_gbps"].to_numpy(float) * 1e9)  # seconds at full bandwidth
    y = 1.0 / nv["value"].to_numpy(float)
    A = np.column_stack([x, nv["layers"].to_numpy(float)])
    inv_e, c = np.linalg.lstsq(A, y, rcond=None)[0]
    hbm = dec[(dec["gpu_family"] == "nvidia") & (dec["bandwidth_gbps"] >= 3000)].iloc[0]
    cap = hbm["weights_gib"] * GIB / (1.0 / hbm["value"] - hbm["layers"] * c)
    def family_efficiency(family, rows=dec):  # one fit row per other GPU family, same per-layer cost
        r = rows[rows["gpu_family"] == family].iloc[0]
        return r["weights_gib"] * GIB / (r["bandwidth_gbps"] * 1e9 * (1.0 / r["value"] - r["layers"] * c))
    def prefill_mfu(family):  # one llama.cpp pp512 fit row per GPU family
        pre = f[(f["metric"] == "prefill_tokens_per_s") & (f["gpu_family"] == family)].iloc[0]
        flops = 2 * pre["params_b"] * 1e9 + 2 * pre["layers"] * pre["hidden"] * pre["prompt_tokens"]
        return pre["value"] * flops / (pre["tflops"] * 1e12)
    out = {"efficiency_nvidia": 1.0 / inv_e, "layer_overhead_s": c, "bandwidth_cap": cap,
           "efficiency_amd": family_efficiency("amd"), "efficiency_apple": family_efficiency("apple"),
           "efficiency_vulkan_nvidia": family_efficiency("nvidia", vulkan), "efficiency_vulkan_amd": family_efficiency("amd", vulkan),
           "prefill_mfu": prefill_mfu("nvidia"), "prefill_mfu_amd": prefill_mfu("amd")}
    out.update(fit_torch_engines(f))
    # MoE: one llama.cpp row per family -> the share of the dense efficiency its routed experts are
    # read at: 1/v - L c = (B_rest + B_experts / m) / bw, bw = min(e BW, cap) as decode_step_seconds
    eff = {"nvidia": out["efficiency_nvidia"], "apple": out["efficiency_apple"]}
    for family in ("nvidia", "apple"):
        r = moe[moe["gpu_family"] == family]
        read = r["weights_gib"].to_numpy(float) * GIB * batch1_read_share(r)
        experts = r["weights_gib"].to_numpy(float) * GIB * batch1_expert_share(r)
        bw = min(eff[family] * r["bandwidth_gbps"].iloc[0] * 1e9, S.GGUF_BANDWIDTH_CAP)
        out[f"moe_expert_efficiency_{family}"] = float(experts[0] / ((1.0 / r["value"].iloc[0] - r["layers"].iloc[0] * c) * bw
                                                                     - (read[0] - experts[0])))
    return out


def fit_torch_engines(f: pd.DataFrame) -> dict:
    """transformers, vLLM and ExLlamaV2 at batch 1 (issue 27), in closed form on their `fit` rows:
    each engine's two rows (16-bit; ExLlamaV2's EXL2) on two cards or models -> its efficiency e
    and per-layer cost c
    (1/v = b / (e BW) + L c); each quantized transformers row (bitsandbytes 4-bit, LLM.int8) ->
    its per-layer dequantization cost d = (1/v - b / (e BW) - L c) / L."""
    dec = f[f["metric"] == "decode_tokens_per_s"]
    sixteen = dec["precision"].isin(("fp16", "bf16"))
    out = {}
    for engine in ("transformers", "vllm", "exllamav2", "mlc-llm"):
        own = {"exllamav2": dec["precision"].str.startswith("exl2").fillna(False),
               "mlc-llm": dec["precision"].isin(tuple(S.MLC_BITS))}.get(engine, sixteen)
        rows = dec[(dec["engine"] == engine) & own]
        x = rows["weights_gib"].to_numpy(float) * GIB / (rows["bandwidth_gbps"].to_numpy(float) * 1e9)
        inv_e, c = np.linalg.lstsq(np.column_stack([x, rows["layers"].to_numpy(float)]), 1.0 / rows["value"].to_numpy(float),
                                   rcond=None)[0]
        out[f"efficiency_{engine}"], out[f"layer_overhead_{engine}"] = 1.0 / inv_e, c
    inv_e, c = 1.0 / out["efficiency_transformers"], out["layer_overhead_transformers"]
    for precision in ("nf4", "int8"):
        r = dec[(dec["engine"] == "transformers") & (dec["precision"] == precision)].iloc[0]
        mem = r["weights_gib"] * GIB * inv_e / (r["bandwidth_gbps"] * 1e9)
        out[f"dequant_transformers_{precision}"] = (1.0 / r["value"] - mem - r["layers"] * c) / r["layers"]
    return out


def predict(meas: pd.DataFrame) -> pd.Series:
    """The engine's prediction for every row (engine/serving.py's functions, whole columns)."""
    pred = pd.Series(np.nan, index=meas.index)
    dec = meas["metric"] == "decode_tokens_per_s"
    d = meas[dec]
    step = S.decode_step_seconds(d["weights_gib"].to_numpy(float) * GIB * batch1_read_share(d), 0.0, d["layers"].to_numpy(float),
                                 d["bandwidth_gbps"].to_numpy(float), d["gpu_family"].to_numpy(object),
                                 d["engine"].to_numpy(object), precision=d["precision"].fillna("").to_numpy(object),
                                 backend=d["backend"].to_numpy(object),
                                 expert_bytes=d["weights_gib"].to_numpy(float) * GIB * batch1_expert_share(d))
    pred[dec] = 1.0 / step
    pre = meas["metric"] == "prefill_tokens_per_s"
    p = meas[pre]
    pred[pre] = S.prefill_tokens_per_s(p["params_b"].to_numpy(float) * 1e9, p["layers"].to_numpy(float),
                                       p["hidden"].to_numpy(float), p["prompt_tokens"].to_numpy(float),
                                       p["tflops"].to_numpy(float), p["engine"].to_numpy(object),
                                       family=p["gpu_family"].to_numpy(object))
    kv = meas["metric"] == "kv_cache_available_gib"
    if kv.any():
        pred[kv] = engine_kv_gib(meas[kv])
    return pred


def batch1_read_share(rows: pd.DataFrame) -> np.ndarray:
    """Share of the file a batch-1 decode step reads: 1 for a dense model; for a catalog
    mixture-of-experts model, every weight but the routed experts a token does not use
    (engine/serving.py expert_read_share at one request) and the input embedding (_routed_experts)."""
    experts, read, embedding = _routed_experts(rows)
    return 1.0 - experts * (1.0 - read) - embedding


def batch1_expert_share(rows: pd.DataFrame) -> np.ndarray:
    """Share of the file that is routed experts a batch-1 step reads (k of E of them) for a catalog
    mixture-of-experts model; 0 for a dense model or a model not in the catalog."""
    experts, read, _ = _routed_experts(rows)
    return experts * read


def _routed_experts(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the routed experts' share of the file, the share of them a batch-1 step reads, the input
    embedding's share where it is not read) per row; (0, 1, 0) for a dense model or a model not in
    the catalog. By parameter count at the file's mean bits, except where the row's precision is a
    GGUF type that stores the experts apart (mxfp4_moe: gpt-oss's experts in MXFP4 at 4.25 bits in
    every GGUF of it, engine/constants.py GGUF_EXPERT_BITS; the rest of the file is what is left).
    The input embedding: llama.cpp keeps token_embd on the CPU (src/llama-model.cpp load_tensors:
    "there is very little benefit to offloading the input layer, so always keep it on the CPU") and
    a step reads one row of it; serve() leaves it out of the GPU's bytes (engine/serving.py
    embed_bytes). Here it is left out for MoE models only, where it is a large part of a step's
    bytes (gpt-oss's 201,088 x 2,880 at 8.5 bits: a quarter of what gpt-oss-20b reads); the dense
    fit rows keep it (about 2% of a Llama 7B file, inside their fitted efficiency)."""
    n = len(rows)
    experts_share, read, embedding = np.zeros(n), np.ones(n), np.zeros(n)
    models = default_catalog().models().set_index("id")
    known = rows["model"].isin(models.index).to_numpy() if "model" in rows else np.zeros(n, bool)
    if not known.any():
        return experts_share, read, embedding
    r = rows[known]
    m = models.loc[r["model"]]
    m = m.assign(**{k: m[k].fillna(v) if k in m else v for k, v in ARCH_DEFAULTS.items()})
    counts = architecture_counts(m)
    experts, total = np.asarray(counts["experts"], float), np.asarray(counts["total"], float)
    file_bytes = r["weights_gib"].to_numpy(float) * GIB
    prec = r["precision"].fillna("").to_numpy(object) if "precision" in r else np.full(len(r), "", object)
    expert_bits = pd.Series(prec, dtype=object).map(GGUF_EXPERT_BITS).to_numpy(float)
    share = np.where(np.isnan(expert_bits), experts / total, experts * expert_bits / 8.0 / file_bytes)
    rest_bits = (1.0 - share) * file_bytes * 8.0 / np.maximum(total - experts, 1.0)  # the rest's mean bits
    moe = experts > 0
    experts_share[known] = share
    read[known] = np.where(moe, S.expert_read_share(m["experts_per_token"].to_numpy(float), m["num_experts"].to_numpy(float)), 1.0)
    embedding[known] = np.where(moe, m["vocab_size"].to_numpy(float) * m["hidden_size"].to_numpy(float) * rest_bits / 8.0
                                / file_bytes, 0.0)
    return experts_share, read, embedding


def engine_kv_gib(rows: pd.DataFrame) -> np.ndarray:
    """vLLM's KV budget / SGLang's KV pool for logged start-ups: the card's total as the log prints it
    (vLLM) or as nvidia-smi gives it (SGLang reads that) replaces the catalog's, so the check is of the
    memory model, not of the catalog's usable bytes."""
    cat = default_catalog()
    gpus = cat.gpus()
    base = gpus[gpus["id"] == "h100-sxm-80gb"].iloc[[0] * len(rows)].reset_index(drop=True)
    base = base.assign(id=[f"logged-{i}" for i in range(len(rows))],
                       usable_memory_bytes=rows["total_gpu_memory_gib"].to_numpy(float) * GIB)
    req = pd.DataFrame({
        "model": rows["model"].to_numpy(), "gpu": base["id"], "engine": rows["engine"].to_numpy(object),
        # the checkpoint's format where the row names one (fp8, mxfp4), else bf16
        "precision": (rows["precision"].fillna("bf16") if "precision" in rows else pd.Series("bf16", index=rows.index)).to_numpy(object),
        "max_model_len": rows["max_model_len"].to_numpy(float).astype(int),
        "gpu_memory_utilization": rows["gpu_memory_utilization"].to_numpy(float),
        "max_num_seqs": rows["max_num_seqs"].to_numpy(float),
        "max_num_batched_tokens": rows["max_num_batched_tokens"].to_numpy(float),
        "engine_version": rows["engine_version"].fillna("").to_numpy(object),  # V0's defaults where the log is V0's
        "gpus": rows["tensor_parallel_size"].fillna(1).to_numpy(float).astype(int),  # -tp: the figures are per GPU
    })
    out = S.serve(req, cat.models(), pd.concat([gpus, base], ignore_index=True))
    return out["kv_cache_bytes_available"].to_numpy(float) / GIB


def table(meas: pd.DataFrame | None = None) -> str:
    """The markdown table (fit rows shown for reference, held-out rows carry the accuracy)."""
    meas = load_measurements() if meas is None else meas
    pred = predict(meas)
    err = (pred / meas["value"] - 1) * 100
    unit = {"decode_tokens_per_s": "tok/s", "prefill_tokens_per_s": "tok/s", "kv_cache_available_gib": "GiB"}
    lines = ["| role | metric | GPU | model | build | published | ours | error % | source |", "|---|---|---|---|---|---|---|---|---|"]
    for i, m in meas.sort_values(["role", "metric"], kind="stable").iterrows():
        lines.append(f"| {m['role']} | {m['metric'].replace('_tokens_per_s', '')} ({unit[m['metric']]}) | {m['gpu_name']} "
                     f"| {m['model_name']} | {m['build']} | {m['value']:,.2f} | {pred[i]:,.2f} | {err[i]:+.1f} "
                     f"| {m['url']} ({m['date']}) |")
    lines.append("")
    for metric in ("decode_tokens_per_s", "prefill_tokens_per_s", "kv_cache_available_gib"):
        held = err[(meas["role"] == "holdout") & (meas["metric"] == metric)].abs()
        if len(held):
            lines.append(f"- held-out {metric}: {len(held)} rows, median |error| {held.median():.1f}%, "
                         f"max |error| {held.max():.1f}%, within 35%: {(held <= 35).sum()} of {len(held)}")
        if metric == "kv_cache_available_gib":
            for engine in sorted(meas.loc[meas["metric"] == metric, "engine"].unique()):
                e = err[(meas["role"] == "holdout") & (meas["metric"] == metric) & (meas["engine"] == engine)]
                lines.append(f"  - {engine}: {len(e)} rows, median |error| {e.abs().median():.1f}%, "
                             f"from {e.min():+.1f}% to {e.max():+.1f}%")
    speed = (meas["role"] == "holdout") & meas["metric"].isin(("decode_tokens_per_s", "prefill_tokens_per_s"))
    held = err[speed].abs()
    lines.append(f"- held-out speed figures (decode and prefill): {(held <= 35).sum()} of {len(held)} within 35% "
                 f"({(held <= 35).mean() * 100:.0f}%)")
    for engine in sorted(meas.loc[speed, "engine"].unique()):
        rows = speed & (meas["engine"] == engine)
        fitted = ((meas["role"] == "fit") & (meas["engine"] == engine)).sum()
        e = err[rows].abs()
        lines.append(f"  - {engine}: {fitted} fit rows; held out {len(e)}, within 35%: {(e <= 35).sum()}, "
                     f"median |error| {e.median():.1f}%")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if "--fit" in argv:
        for key, value in fit(load_measurements()).items():
            print(f"{key} = {value:.6g}")
        return
    print(table())


if __name__ == "__main__":
    main(sys.argv[1:])
