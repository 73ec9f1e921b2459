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

from catalog.serving_data import load_measurements  # noqa: E402
from engine import serving as S  # noqa: E402
from planner.serving_evidence import (  # noqa: E402, F401 (predict and the shares: tests/test_serving.py reads them here)
    batch1_expert_share,
    batch1_read_share,
    context_kv_bytes,
    engine_kv_gib,
    held_out_lines,
    predict,
    serving_evidence_table,
)

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
    for engine in ("vllm", "exllamav2", "mlc-llm", "mlx-lm"):
        own = {"exllamav2": dec["precision"].str.startswith("exl2").fillna(False),
               "mlc-llm": dec["precision"].isin(tuple(S.MLC_BITS)),
               "mlx-lm": dec["precision"].isin(tuple(S.MLX_BITS))}.get(engine, sixteen)
        rows = dec[(dec["engine"] == engine) & own & dec["fit_term"].isna()]  # (a row fitting one term alone: below)
        rows = rows[batch1_expert_share(rows) == 0]  # (an MoE fit row sets its experts' share alone, below)
        # (mlx-lm's rows decode after a 2,048-token prompt: the K/V read beside the weights, context_kv_bytes)
        x = ((rows["weights_gib"].to_numpy(float) * GIB + context_kv_bytes(rows))
             / (rows["bandwidth_gbps"].to_numpy(float) * 1e9))
        inv_e, c = np.linalg.lstsq(np.column_stack([x, rows["layers"].to_numpy(float)]), 1.0 / rows["value"].to_numpy(float),
                                   rcond=None)[0]
        out[f"efficiency_{engine}"], out[f"layer_overhead_{engine}"] = 1.0 / inv_e, c
    # mlx-lm's MoE: its one MoE fit row (BENCHMARKS.md's M4 Max Qwen3-30B-A3B 4-bit) -> the share of its dense
    # efficiency the routed experts (gather_qmm) are read at, as llama.cpp's in fit(): 1/v - L c = (B_read + B_experts
    # (1/m - 1) + K/V) / (e BW)
    moe = dec[(dec["engine"] == "mlx-lm") & (batch1_expert_share(dec) > 0)]
    if len(moe):
        r = moe.iloc[[0]]
        file = r["weights_gib"].to_numpy(float) * GIB
        read = file * batch1_read_share(r) + context_kv_bytes(r)
        experts = file * batch1_expert_share(r)
        bw = out["efficiency_mlx-lm"] * r["bandwidth_gbps"].iloc[0] * 1e9
        step = 1.0 / r["value"].iloc[0] - r["layers"].iloc[0] * out["layer_overhead_mlx-lm"]
        out["moe_expert_efficiency_mlx-lm"] = float(experts[0] / (step * bw - read[0] + experts[0]))
    # mlx-lm's prefill MFU: its one prompt row (BENCHMARKS.md's M4 Max Qwen3-4B bf16, 2,048 tokens)
    pre = f[(f["metric"] == "prefill_tokens_per_s") & (f["engine"] == "mlx-lm")].iloc[0]
    flops = 2 * pre["params_b"] * 1e9 + 2 * pre["layers"] * pre["hidden"] * pre["prompt_tokens"]
    out["prefill_mfu_mlx-lm"] = pre["value"] * flops / (pre["tflops"] * 1e12)
    out.update(fit_transformers(dec))
    # vLLM's FP8 (W8A8) linear layers: its fit row (fit_term dequant) -> the extra per-layer cost beside its bytes,
    # at vLLM's efficiency and per-layer cost: d = (1/v - (B + K/V) / (e BW) - L c) / L
    r = dec[(dec["engine"] == "vllm") & (dec["precision"] == "fp8") & (dec["fit_term"] == "dequant")].iloc[[0]]
    mem = (r["weights_gib"].to_numpy(float) * GIB + context_kv_bytes(r)) / (out["efficiency_vllm"] * r["bandwidth_gbps"].to_numpy(float) * 1e9)
    out["dequant_vllm_fp8"] = float((1.0 / r["value"].iloc[0] - mem[0] - r["layers"].iloc[0] * out["layer_overhead_vllm"])
                                    / r["layers"].iloc[0])
    # vLLM V0's fixed cost a step: its fit row (fit_term step_cost) -> what its step takes beyond its bytes at vLLM's
    # efficiency and its layers' cost (the step as predict() gives it without that cost)
    r = dec[(dec["engine"] == "vllm") & (dec["fit_term"] == "step_cost")].iloc[[0]]
    without = predict(r.assign(engine_version=""))
    out["vllm_v0_step_s"] = float(1.0 / r["value"].iloc[0] - 1.0 / without.iloc[0])
    # the all-reduce latency without a GPU link: one rig's TP 1 / TP 2 pair (fit_term allreduce). t1 = bytes / (e BW) +
    # L c, t2 = bytes / (2 e BW) + L c + 2 L a, so a = (t2 - t1 / 2 - L c / 2) / (2 L), whatever e
    pair = dec[(dec["engine"] == "vllm") & (dec["fit_term"] == "allreduce")]
    tp = pd.to_numeric(pair["tensor_parallel_size"], errors="coerce").fillna(1.0)
    t1, t2 = 1.0 / pair["value"][tp == 1].iloc[0], 1.0 / pair["value"][tp == 2].iloc[0]
    L = float(pair["layers"].iloc[0])
    out["tp_allreduce_pcie_s"] = float((t2 - t1 / 2.0 - L * out["layer_overhead_vllm"] / 2.0) / (2.0 * L))
    return out


def fit_transformers(dec: pd.DataFrame) -> dict:
    """transformers' eager `generate` at batch 1: a step takes the longer of the GPU's work and the host's
    (engine/serving.py decode_step_seconds), so each constant comes from one row where it sets the step (fit_term):
    the efficiency from a GPU-bound 16-bit row, e = (B + K/V) v / BW; the host's per-layer cost from a host-bound
    16-bit row, c = 1 / (v L); each bitsandbytes format's extra host cost from its host-bound row, d = 1 / (v L) - c."""
    rows = dec[dec["engine"] == "transformers"]
    gpu_row = rows[rows["fit_term"] == "efficiency"].iloc[[0]]
    e = float(((gpu_row["weights_gib"].to_numpy(float) * GIB + context_kv_bytes(gpu_row)) * gpu_row["value"].to_numpy(float)
               / (gpu_row["bandwidth_gbps"].to_numpy(float) * 1e9))[0])
    host = rows[rows["fit_term"] == "layer_cost"].iloc[0]
    c = 1.0 / (host["value"] * host["layers"])
    out = {"efficiency_transformers": e, "layer_overhead_transformers": c}
    for precision in ("nf4", "int8"):
        r = rows[(rows["fit_term"] == "dequant") & (rows["precision"] == precision)].iloc[0]
        out[f"dequant_transformers_{precision}"] = 1.0 / (r["value"] * r["layers"]) - c
    return out


def table(meas: pd.DataFrame | None = None) -> str:
    """The markdown table (fit rows shown for reference, held-out rows carry the accuracy): the rows of
    planner/serving_evidence.py serving_evidence_table, which the Evidence page and `evidence --serving` show."""
    ev = serving_evidence_table(meas)
    unit = {"decode_tokens_per_s": "tok/s", "prefill_tokens_per_s": "tok/s", "kv_cache_available_gib": "GiB"}
    lines = ["| role | metric | GPU | model | build | published | ours | error % | source |", "|---|---|---|---|---|---|---|---|---|"]
    for _, m in ev.sort_values(["role", "metric"], kind="stable").iterrows():
        lines.append(f"| {m['role']} | {m['metric'].replace('_tokens_per_s', '')} ({unit[m['metric']]}) | {m['gpu_name']} "
                     f"| {m['model_name']} | {m['build']} | {m['reference']:,.2f} | {m['estimate']:,.2f} | {m['error_pct']:+.1f} "
                     f"| {m['url']} ({m['date']}) |")
    lines.append("")
    lines.extend(held_out_lines(ev))
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if "--fit" in argv:
        for key, value in fit(load_measurements()).items():
            print(f"{key} = {value:.6g}")
        return
    print(table())


if __name__ == "__main__":
    main(sys.argv[1:])
