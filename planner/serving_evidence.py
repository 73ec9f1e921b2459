"""Published serving runs beside the serving model's figure for the same run.

catalog/serving_measurements.yaml holds measured batch-1 decode and prefill speeds (llama-bench,
engines' own benchmarks) and logged KV budgets (vLLM's and SGLang's start-up logs). Each row is
either a `fit` row, which set one of engine/serving.py's speed constants (benchmarks/serving_accuracy.py
--fit refits them), or a `holdout` row, which set nothing: its error is the model's accuracy.

The prediction for a row is made from the row's own facts, not the catalog card's: the published
card's memory bandwidth and TFLOPS, the file size the tool printed, the total memory the log printed.
So the comparison checks the serving model, not the catalog's card figures. The Evidence page, the
`evidence --serving` command and docs/serving.md's table (benchmarks/serving_accuracy.py) all read
serving_evidence_table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine import serving as S
from engine.constants import GGUF_EXPERT_BITS
from engine.params import ARCH_DEFAULTS, architecture_counts

GIB = 2**30
SPEED_METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s")
METRICS = (*SPEED_METRICS, "kv_cache_available_gib")
UNITS = {"decode_tokens_per_s": "tokens/s", "prefill_tokens_per_s": "tokens/s", "kv_cache_available_gib": "GiB"}
# issue 27's speed target: >= 75% of the held-out speed figures within +-35%
SPEED_TOLERANCE_PCT = 35.0
SPEED_TARGET_SHARE = 0.75
# `evidence --serving --json`: one object per measurement with these keys (a contract: add, never rename)
SERVING_EVIDENCE_JSON_KEYS = ("id", "metric", "role", "engine", "backend", "build", "engine_version", "gpu_name",
                              "model_name", "model", "precision", "reference", "estimate", "unit", "error_pct",
                              "within_35pct", "date", "source", "url", "setup_note", "quoted")


def _catalog(models, gpus):
    if models is None or gpus is None:
        from catalog import default_catalog
        cat = default_catalog()
        models = cat.models() if models is None else models
        gpus = cat.gpus() if gpus is None else gpus
    return models, gpus


def predict(meas: pd.DataFrame, models: pd.DataFrame | None = None, gpus: pd.DataFrame | None = None) -> pd.Series:
    """The serving model's figure for every row (engine/serving.py's functions, whole columns)."""
    models, gpus = _catalog(models, gpus)
    pred = pd.Series(np.nan, index=meas.index)
    dec = meas["metric"] == "decode_tokens_per_s"
    d = meas[dec]
    if len(d):
        # tensor parallel (vLLM / SGLang -tp): each rank reads its share of the weights and of the K/V heads
        tp = pd.to_numeric(d["tensor_parallel_size"], errors="coerce").fillna(1.0).to_numpy(float) \
            if "tensor_parallel_size" in d else np.ones(len(d))
        step = S.decode_step_seconds((d["weights_gib"].to_numpy(float) * GIB * batch1_read_share(d, models)
                                      + context_kv_bytes(d, models)) / tp, 0.0,
                                     d["layers"].to_numpy(float), d["bandwidth_gbps"].to_numpy(float),
                                     d["gpu_family"].to_numpy(object), d["engine"].to_numpy(object),
                                     precision=d["precision"].fillna("").to_numpy(object),
                                     backend=d["backend"].to_numpy(object),
                                     expert_bytes=d["weights_gib"].to_numpy(float) * GIB * batch1_expert_share(d, models) / tp,
                                     tp=tp, step_s=np.where(vllm_v0(d), S.VLLM_V0_STEP_S, 0.0),
                                     pcie=(d["gpu_link"] == "pcie").to_numpy(bool) if "gpu_link" in d else False)
        pred[dec] = 1.0 / step
    pre = meas["metric"] == "prefill_tokens_per_s"
    p = meas[pre]
    if len(p):
        pred[pre] = S.prefill_tokens_per_s(p["params_b"].to_numpy(float) * 1e9, p["layers"].to_numpy(float),
                                           p["hidden"].to_numpy(float), p["prompt_tokens"].to_numpy(float),
                                           p["tflops"].to_numpy(float), p["engine"].to_numpy(object),
                                           family=p["gpu_family"].to_numpy(object))
    kv = meas["metric"] == "kv_cache_available_gib"
    if kv.any():
        pred[kv] = engine_kv_gib(meas[kv], models, gpus)
    return pred


def vllm_v0(rows: pd.DataFrame) -> np.ndarray:
    """The vLLM rows of a V0 release (engine_version before engine/serving.py VLLM_V1_FROM), as serve() tells them."""
    if "engine_version" not in rows:
        return np.zeros(len(rows), dtype=bool)
    return S.vllm_v0(rows["engine"].to_numpy(object), rows["engine_version"].to_numpy(object))


def context_kv_bytes(rows: pd.DataFrame, models: pd.DataFrame | None = None) -> np.ndarray:
    """The 16-bit K/V a batch-1 decode step reads beside the weights: K and V of every layer (2 x layers x KV heads x
    head_dim x 2 bytes a token) over the row's average context (`context_tokens`: the prompt and half the tokens
    generated), for a catalog model; 0 where a row has none (llama-bench's tg128 decodes from an empty context)."""
    n = len(rows)
    ctx = pd.to_numeric(rows["context_tokens"], errors="coerce").to_numpy(float) if "context_tokens" in rows \
        else np.full(n, np.nan)
    out = np.zeros(n)
    models = (models if models is not None else _catalog(None, None)[0]).set_index("id")
    known = ~np.isnan(ctx) & (rows["model"].isin(models.index).to_numpy() if "model" in rows else np.zeros(n, bool))
    if not known.any():
        return out
    m = models.loc[rows["model"][known]]
    d = pd.to_numeric(m["head_dim"], errors="coerce").to_numpy(float) if "head_dim" in m else np.full(len(m), np.nan)
    d = np.where(np.isnan(d) | (d <= 0), m["hidden_size"].to_numpy(float) / m["num_heads"].to_numpy(float), d)
    out[known] = 2.0 * m["num_layers"].to_numpy(float) * m["num_kv_heads"].to_numpy(float) * d * 2.0 * ctx[known]
    return out


def batch1_read_share(rows: pd.DataFrame, models: pd.DataFrame | None = None) -> np.ndarray:
    """Share of the file a batch-1 decode step reads: 1 for a dense model; for a catalog
    mixture-of-experts model, every weight but the routed experts a token does not use
    (engine/serving.py expert_read_share at one request) and the input embedding (_routed_experts)."""
    experts, read, embedding = _routed_experts(rows, models)
    return 1.0 - experts * (1.0 - read) - embedding


def batch1_expert_share(rows: pd.DataFrame, models: pd.DataFrame | None = None) -> np.ndarray:
    """Share of the file that is routed experts a batch-1 step reads (k of E of them) for a catalog
    mixture-of-experts model; 0 for a dense model or a model not in the catalog."""
    experts, read, _ = _routed_experts(rows, models)
    return experts * read


def _routed_experts(rows: pd.DataFrame, models: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    models = (models if models is not None else _catalog(None, None)[0]).set_index("id")
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


def engine_kv_gib(rows: pd.DataFrame, models: pd.DataFrame | None = None, gpus: pd.DataFrame | None = None) -> np.ndarray:
    """vLLM's KV budget / SGLang's KV pool for logged start-ups: the card's total as the log prints it
    (vLLM) or as nvidia-smi gives it (SGLang reads that) replaces the catalog's, so the check is of the
    memory model, not of the catalog's usable bytes."""
    models, gpus = _catalog(models, gpus)
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
    out = S.serve(req, models, pd.concat([gpus, base], ignore_index=True))
    return out["kv_cache_bytes_available"].to_numpy(float) / GIB


def serving_evidence_table(meas: pd.DataFrame | None = None, models: pd.DataFrame | None = None,
                           gpus: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per published serving measurement: the figure, ours, the error and the source (the
    measurements' order; SERVING_EVIDENCE_JSON_KEYS are among the columns)."""
    if meas is None:
        from catalog.serving_data import load_measurements
        meas = load_measurements()
    models, gpus = _catalog(models, gpus)
    pred = predict(meas, models, gpus)
    value = meas["value"].astype(float)
    error = (pred / value - 1) * 100
    out = pd.DataFrame({
        "id": meas["id"], "metric": meas["metric"], "role": meas["role"], "engine": meas["engine"],
        "backend": meas["backend"], "build": meas["build"], "engine_version": meas["engine_version"],
        "gpu_name": meas["gpu_name"], "model_name": meas["model_name"], "model": meas["model"],
        "precision": meas["precision"], "reference": value, "estimate": pred.astype(float),
        "unit": meas["metric"].map(UNITS), "error_pct": error,
        "within_35pct": error.abs() <= SPEED_TOLERANCE_PCT,
        "date": meas["date"], "source": meas["source"], "url": meas["url"], "setup_note": meas["setup_note"],
        "quoted": meas["quoted"].fillna(False).astype(bool),
    })
    return out


def held_out_lines(table: pd.DataFrame) -> list[str]:
    """The held-out accuracy, metric by metric and engine by engine (docs/serving.md's lines under its table)."""
    err, role, metric, engine = table["error_pct"], table["role"], table["metric"], table["engine"]
    lines, tol = [], f"{SPEED_TOLERANCE_PCT:.0f}"
    for name in METRICS:
        held = err[(role == "holdout") & (metric == name)].abs()
        if len(held):
            lines.append(f"- held-out {name}: {len(held)} rows, median |error| {held.median():.1f}%, "
                         f"max |error| {held.max():.1f}%, within {tol}%: {(held <= SPEED_TOLERANCE_PCT).sum()} of {len(held)}")
        if name == "kv_cache_available_gib":
            for eng in sorted(engine[metric == name].unique()):
                e = err[(role == "holdout") & (metric == name) & (engine == eng)]
                lines.append(f"  - {eng}: {len(e)} rows, median |error| {e.abs().median():.1f}%, "
                             f"from {e.min():+.1f}% to {e.max():+.1f}%")
    speed = (role == "holdout") & metric.isin(SPEED_METRICS)
    held = err[speed].abs()
    lines.append(f"- held-out speed figures (decode and prefill): {(held <= SPEED_TOLERANCE_PCT).sum()} of {len(held)} within {tol}% "
                 f"({(held <= SPEED_TOLERANCE_PCT).mean() * 100:.0f}%)")
    for eng in sorted(engine[speed].unique()):
        rows = speed & (engine == eng)
        fitted = ((role == "fit") & (engine == eng)).sum()
        e = err[rows].abs()
        lines.append(f"  - {eng}: {fitted} fit rows; held out {len(e)}, within {tol}%: {(e <= SPEED_TOLERANCE_PCT).sum()}, "
                     f"median |error| {e.median():.1f}%")
    return lines


def held_out_figures(table: pd.DataFrame) -> dict:
    """The held-out rows' headline figures (speed_summary's line and the Evidence page's metrics): the speed figures
    within +-SPEED_TOLERANCE_PCT, of how many, their median |error|; the KV budgets' count, median and largest |error|."""
    held = table[table["role"] == "holdout"]
    speed = held[held["metric"].isin(SPEED_METRICS)]
    kv = held.loc[held["metric"] == "kv_cache_available_gib", "error_pct"].abs()
    return {"speed_hits": int(speed["within_35pct"].sum()), "speed_total": len(speed),
            "speed_median": float(speed["error_pct"].abs().median()) if len(speed) else float("nan"),
            "kv_total": len(kv), "kv_median": float(kv.median()) if len(kv) else float("nan"),
            "kv_max": float(kv.max()) if len(kv) else float("nan")}


def speed_summary(table: pd.DataFrame) -> str:
    """One line: the held-out speed figures within +-35% against issue 27's target, and the KV budgets' median."""
    f = held_out_figures(table)
    hits, total = f["speed_hits"], f["speed_total"]
    share = hits / total if total else 0.0
    line = (f"held-out batch-1 speed figures within +-{SPEED_TOLERANCE_PCT:.0f}%: {hits} of {total} ({100 * share:.0f}%); "
            f"target (>= {100 * SPEED_TARGET_SHARE:.0f}%): {'met' if share >= SPEED_TARGET_SHARE else 'not met'}")
    if f["kv_total"]:
        line += f"; held-out KV budgets: {f['kv_total']}, median |error| {f['kv_median']:.1f}%, max {f['kv_max']:.1f}%"
    return line


def format_serving_evidence(table: pd.DataFrame) -> str:
    """The plain-text table of `evidence --serving`: a line per measurement, then the held-out lines."""
    lines = [f"{'id':<52} {'role':<7} {'engine':<12} {'metric':<8} {'published':>11} {'ours':>11} {'error':>8}"]
    short = {"decode_tokens_per_s": "decode", "prefill_tokens_per_s": "prefill", "kv_cache_available_gib": "kv GiB"}
    for r in table.itertuples(index=False):
        err = f"{r.error_pct:+.1f}%" if np.isfinite(r.error_pct) else "-"
        ours = f"{r.estimate:,.2f}" if np.isfinite(r.estimate) else "-"
        lines.append(f"{r.id:<52} {r.role:<7} {r.engine:<12} {short[r.metric]:<8} {r.reference:>11,.2f} {ours:>11} "
                     f"{err:>8}")
    lines.append("")
    lines.extend(held_out_lines(table))
    lines.append(speed_summary(table))
    return "\n".join(lines)


README_BEGIN = "<!-- serving-evidence-readme:begin (planner/serving_evidence.py readme_sentence) -->\n"
README_END = "<!-- serving-evidence-readme:end -->"


def readme_sentence(table: pd.DataFrame) -> str:
    """README.md's sentence on the serving runs (tests/test_serving_evidence.py checks README holds it)."""
    role = table["role"]
    return (f"{len(table)} published runs ({int((role == 'fit').sum())} set a constant, "
            f"{int((role == 'holdout').sum())} held out), over {table['engine'].nunique()} engines: "
            + speed_summary(table) + ".\n")


if __name__ == "__main__":  # `python -m planner.serving_evidence`: the line README.md holds
    print(readme_sentence(serving_evidence_table()), end="")
