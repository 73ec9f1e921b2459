"""Our estimate beside every published reference point (measurements, estimates, claims)."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd

from engine.estimate import OVERHEAD_DEFAULTS, estimate
from engine.stacks import DEFAULT_RECIPE
from planner.report import NOT_WITHIN

UNIT_FACTORS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20,
                "GiB": 2**30, "count": 1, "hours": 1, "tokens/s": 1}
BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB")
TOLERANCE_PCT = 10.0
# issue 13's target: measured references within 15% under their own recipe
TARGET_PCT = 15.0
# `python -m engine evidence --json`: one object per row with these keys (a contract: add, never rename)
EVIDENCE_JSON_KEYS = ("id", "kind", "metric", "reference", "estimate", "unit", "error_pct", "recipe", "explanation",
                      "model", "per_gpu", "within_10pct", "within_15pct", "source", "url", "setup_note", "estimate_note",
                      # issue 28: the counter a memory figure was read from, and whose figure it is
                      "counter", "source_kind",
                      # the figure the verdicts decide on (fits, max_batch, max_seq, gpus_needed), on the reference's own
                      # counter: the estimate + (safe_peak_bytes - peak_bytes), a memory peak with a GPU only (else NaN)
                      "safe_estimate")

# The memory counters (docs/evidence.md). A measured peak names the counter it was read from in its
# metric; each is compared with the part of our estimate that counter sees:
#   allocated_peak_bytes  torch.cuda.max_memory_allocated(): the tensors' peak
#   reserved_peak_bytes   torch.cuda.max_memory_reserved(): the tensors + what the caching allocator
#                         holds cached (our fragmentation) + the cuBLAS workspace (allocated through
#                         the caching allocator: pytorch aten/src/ATen/cuda/CublasHandlePool.cpp,
#                         getNewWorkspace() = CUDACachingAllocator::get()->allocate(...)); not the
#                         CUDA context, not NCCL's buffers (cudaMalloc'd outside the allocator)
#   process_peak_bytes    the whole process as nvidia-smi / cudaMemGetInfo see it: all of the above +
#                         the CUDA context + NCCL's buffers with more than one GPU (= peak_bytes)
#   peak_bytes            the same whole-process figure (the older name, kept: estimates and claims
#                         that do not say what they count use it)
#   alloc_ext_peak_bytes  torch's allocated peak + (nvidia-smi's peak - torch's reserved peak), the
#                         figure of optimum's benchmark_gptq.py: the tensors (the cuBLAS workspace among
#                         them) + the CUDA context and NCCL, without the allocator's cache
COUNTERS = {
    "allocated_peak_bytes": "torch.cuda.max_memory_allocated (tensors)",
    "reserved_peak_bytes": "torch.cuda.max_memory_reserved (tensors + allocator cache + cuBLAS workspace)",
    "process_peak_bytes": "whole process, nvidia-smi (+ CUDA context, NCCL)",
    "peak_bytes": "whole process (unstated counter)",
    "alloc_ext_peak_bytes": "torch allocated + non-PyTorch memory (nvidia-smi - reserved)",
    "weights_bytes": "weights alone (file size or load log)",
    "kv_cache_bytes": "KV cache alone (engine log or calculation)",
    "adapter_bytes": "adapter weights alone",
    "model_states_bytes": "weights + gradients + optimizer states",
}
# each metric in words (the Evidence page's Metric filter): what was measured, then the counter where it is memory
METRIC_WORDS = {
    "allocated_peak_bytes": "allocated peak", "reserved_peak_bytes": "reserved peak",
    "process_peak_bytes": "whole-process peak", "peak_bytes": "peak (counter unstated)",
    "alloc_ext_peak_bytes": "allocated + non-PyTorch peak", "weights_bytes": "weights", "kv_cache_bytes": "KV cache",
    "adapter_bytes": "adapter weights", "model_states_bytes": "model states", "gpus_needed": "GPUs needed",
    "train_gpu_hours": "training GPU-hours", "decode_tokens_per_s": "decode tokens/s",
    "trainable_params": "trainable parameters",
}


def metric_words(metric: str) -> str:
    """A metric in words with its counter ("allocated peak: torch.cuda.max_memory_allocated (tensors)"); the column name
    itself where it has none."""
    words = METRIC_WORDS.get(metric)
    if words is None:
        return metric
    counter = COUNTERS.get(metric)
    return f"{words}: {counter}" if counter and metric in PEAK_METRICS else words


PEAK_METRICS = ("allocated_peak_bytes", "reserved_peak_bytes", "process_peak_bytes", "alloc_ext_peak_bytes",
                "peak_bytes")
# a measured peak must say its counter: every peak metric but the unstated one
MEASURED_PEAK_METRICS = PEAK_METRICS[:-1]
MEMORY_METRICS = tuple(COUNTERS)
# issue 28's target for measured memory figures: >= 85% within +-15%, none under by more than 10%
MEMORY_TARGET_SHARE = 0.85
MAX_UNDER_PCT = 10.0


def _adapter_bytes(result: pd.DataFrame) -> np.ndarray:
    """The LoRA adapters' weights as the engine holds them (engine/components.py `wb_trained`):
    trainable parameters x 2 bytes with adapter_dtype bf16, x engine.constants.LORA_ADAPTER_BYTES
    (peft's fp32) otherwise; NaN for rows without adapters."""
    from engine.constants import LORA_ADAPTER_BYTES
    lora = result["method"].isin(("lora", "qlora")).to_numpy() if "method" in result else np.zeros(len(result), bool)
    bf16 = (result["adapter_dtype"] == "bf16").to_numpy() if "adapter_dtype" in result else np.zeros(len(result), bool)
    per_param = np.where(bf16, 2.0, float(LORA_ADAPTER_BYTES))
    return np.where(lora, result["trainable_params"].to_numpy(dtype=float) * per_param, np.nan)


def reserved_peak_bytes(result: pd.DataFrame, overhead: dict | None = None) -> np.ndarray:
    """torch.cuda.max_memory_reserved()'s counterpart: the whole-process peak less what lives outside
    PyTorch's caching allocator, i.e. the CUDA context and (more than one GPU) NCCL's buffers, as
    estimate() counted them (engine/components.py runtime_overhead: context + cuBLAS workspace +
    NCCL, + fragmentation x the tensors' peak). What is left: the tensors' peak x (1 + fragmentation)
    + the cuBLAS workspace, which PyTorch allocates through the caching allocator.
    overhead: the settings estimate() ran with (engine.estimate.OVERHEAD_DEFAULTS when None)."""
    settings = {**OVERHEAD_DEFAULTS, **(overhead or {})}
    gpus = result["gpus"].to_numpy(dtype=float) if "gpus" in result else np.ones(len(result))
    outside = settings["context_bytes"] + np.where(gpus > 1, settings["nccl_bytes"], 0.0)
    return process_peak_bytes(result) - outside


def process_peak_bytes(result: pd.DataFrame) -> np.ndarray:
    """The whole process as nvidia-smi sees it: peak_bytes (the tensors' peak + runtime overhead) +
    the freed blocks the caching allocator still holds reserved above the tensors' peak
    (allocator_cached_bytes: reclaimable, so not in peak_bytes or the verdict, but reserved)."""
    cached = result["allocator_cached_bytes"].to_numpy(dtype=float) if "allocator_cached_bytes" in result else 0.0
    return result["peak_bytes"].to_numpy(dtype=float) + cached


def alloc_ext_peak_bytes(result: pd.DataFrame, overhead: dict | None = None) -> np.ndarray:
    """optimum's 'peak memory' (tests/benchmark/benchmark_gptq.py: torch's allocated peak + nvidia-smi's
    peak - torch's reserved peak): the whole-process peak less the caching allocator's share, i.e. the
    tensors' peak + the fixed runtime overhead (CUDA context, cuBLAS workspace, NCCL with more than one
    GPU) without fragmentation x the tensors' peak."""
    settings = {**OVERHEAD_DEFAULTS, **(overhead or {})}
    tensors = (result["peak_bytes"] - result["runtime_overhead_bytes"]).to_numpy(dtype=float)
    return result["peak_bytes"].to_numpy(dtype=float) - settings["fragmentation"] * tensors


def _metric_values(result: pd.DataFrame, metrics: pd.Series) -> np.ndarray:
    states = result["weights_bytes"] * 0  # placeholder shape
    columns = {
        "peak_bytes": result["peak_bytes"],
        # nvidia-smi's whole process: peak_bytes + what the allocator holds cached above the tensors' peak
        "process_peak_bytes": process_peak_bytes(result),
        # torch.cuda.max_memory_allocated's counterpart: the tensors' peak, no runtime overhead
        "allocated_peak_bytes": result["peak_bytes"] - result["runtime_overhead_bytes"],
        "reserved_peak_bytes": reserved_peak_bytes(result),
        "alloc_ext_peak_bytes": alloc_ext_peak_bytes(result),
        "weights_bytes": result["weights_bytes"],
        "kv_cache_bytes": result["kv_cache_bytes"],
        "model_states_bytes": result["model_states_bytes"],
        "trainable_params": result["trainable_params"].astype(float),
        "gpus_needed": result["gpus_needed"] if "gpus_needed" in result else states + np.nan,
        "adapter_bytes": _adapter_bytes(result),
    }
    # speed metrics (engine/speed.py): reference metric -> result column
    for metric, column in (("train_gpu_hours", "gpu_hours"), ("decode_tokens_per_s", "decode_tokens_per_s")):
        columns[metric] = result[column] if column in result else states + np.nan
    out = np.full(len(result), np.nan)
    for metric, values in columns.items():
        hit = (metrics == metric).to_numpy()
        out[hit] = np.asarray(values, dtype=float)[hit]
    return out


def evidence_table(refs: pd.DataFrame, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """One row per reference: reference value, our estimate in the same unit, error, why."""
    scenarios = pd.DataFrame(list(refs["scenario"]))
    # `tokens` (a training-token budget) stays: engine/speed.py reads it for train_gpu_hours
    if "gpu" not in scenarios:
        scenarios["gpu"] = ""
    scenarios["gpu"] = scenarios["gpu"].fillna("")
    # the published setups sometimes exceed a model's native context (e.g. 128k KV figures)
    scenarios["allow_long_context"] = True
    # each figure under the stack it was measured with (issue 13): the reference's recipe, else hf
    recipes = refs["recipe"] if "recipe" in refs else pd.Series(None, index=refs.index, dtype=object)
    scenarios["recipe"] = recipes.fillna(DEFAULT_RECIPE).replace("", DEFAULT_RECIPE).to_numpy(dtype=object)
    result = estimate(scenarios, models, gpus)
    factor = refs["unit"].map(UNIT_FACTORS).to_numpy(dtype=float)
    est = _metric_values(result, refs["metric"])
    is_bytes = refs["unit"].isin(BYTE_UNITS).to_numpy()
    total = ~refs["per_gpu"].to_numpy(dtype=bool) & is_bytes
    # the verdicts' figure: the same counter's estimate plus what the band's high side adds (engine/margins.py)
    extra = ((result["safe_peak_bytes"] - result["peak_bytes"]).to_numpy(dtype=float) if "safe_peak_bytes" in result
             else np.full(len(result), np.nan))
    safe = np.where(refs["metric"].isin(PEAK_METRICS).to_numpy(), est + extra, np.nan)
    est = np.where(total, est * result["gpus"].to_numpy(), est)
    safe = np.where(total, safe * result["gpus"].to_numpy(), safe)
    estimate_in_unit = est / factor
    reference = refs["value"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (estimate_in_unit - reference) / reference * 100
    table = pd.DataFrame({
        "id": refs["id"],
        "kind": refs["kind"],
        "model": scenarios["model"],
        "metric": refs["metric"],
        "reference": reference,
        "estimate": np.round(estimate_in_unit, 3),
        "unit": refs["unit"],
        "per_gpu": refs["per_gpu"],
        "error_pct": np.round(error, 1),
        "within_10pct": np.abs(error) <= TOLERANCE_PCT,
        "source": refs["source"],
        "url": refs["url"],
        "setup_note": refs["setup_note"],
        "recipe": scenarios["recipe"].to_numpy(dtype=object),
        "within_15pct": np.abs(error) <= TARGET_PCT,
    })
    explanation = refs["explanation"].fillna("").to_numpy(dtype=object)
    no_estimate = np.isnan(estimate_in_unit)
    explanation = np.where(no_estimate & (explanation == ""), "the engine has no estimate for this metric yet", explanation)
    needs = (np.abs(error) > TOLERANCE_PCT) & (explanation == "")
    explanation = np.where(needs, "no explanation recorded for this difference", explanation)
    table["explanation"] = np.where(np.abs(np.nan_to_num(error)) > TOLERANCE_PCT, explanation, np.where(no_estimate, explanation, ""))
    # a count the engine cannot reach (gpus_needed is +inf beyond engine.constants.MAX_GPUS): said in words
    beyond = (refs["metric"].to_numpy() == "gpus_needed") & (estimate_in_unit == np.inf)
    table["estimate_note"] = np.where(beyond, NOT_WITHIN, "")
    table["counter"] = refs["metric"].map(COUNTERS).fillna("").to_numpy(dtype=object)
    # whose figure: every shipped reference is published; a user's own runs (another issue) say "user"
    kinds = refs["source_kind"] if "source_kind" in refs else pd.Series(None, index=refs.index, dtype=object)
    table["source_kind"] = kinds.fillna("published").replace("", "published").to_numpy(dtype=object)
    table["safe_estimate"] = np.round(safe / factor, 3)
    return table


# The columns `python -m engine evidence` prints, in order (the explanation goes below its row).
EVIDENCE_COLUMNS = ("id", "kind", "metric", "reference", "estimate", "unit", "error_pct")


def _figure(value: float, fmt: str | None = None) -> str:
    """A number for the text table: "—" when there is none; by default thousands separated, up to
    three decimals, trailing zeros dropped (8, 17.315, 4,194,304)."""
    if not math.isfinite(value):
        return "—"
    if fmt:
        return fmt.format(value)
    text = f"{value:,.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def format_evidence(table: pd.DataFrame, width: int = 100) -> str:
    """evidence_table as text for a terminal: one line per reference with no trailing spaces
    (numbers right-aligned, "—" where there is no figure, the estimate's note, e.g. "not within
    1,024 GPUs", in place of inf), and its explanation, when there is one, wrapped to `width`
    columns and indented below it."""
    notes = table["estimate_note"] if "estimate_note" in table else pd.Series("", index=table.index)
    rows = []
    for (_, r), note in zip(table.iterrows(), notes):
        rows.append([str(r["id"]), str(r["kind"]), str(r["metric"]), _figure(float(r["reference"])),
                     note or _figure(float(r["estimate"])), str(r["unit"]),
                     _figure(float(r["error_pct"]), "{:+,.1f}")])
    numeric = {3, 4, 6}
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(EVIDENCE_COLUMNS)]

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(EVIDENCE_COLUMNS)]
    explanations = table["explanation"].fillna("").astype(str) if "explanation" in table else [""] * len(rows)
    for row, text in zip(rows, explanations):
        out.append(line(row))
        text = " ".join(text.split())
        if text:
            out.extend(textwrap.wrap(text, width=max(40, width), initial_indent="    ", subsequent_indent="    ",
                                     break_on_hyphens=False))
    return "\n".join(out)


def hit_rate(table: pd.DataFrame, kind: str = "measured", pct: float = TARGET_PCT) -> tuple[int, int]:
    """(rows of `kind` whose estimate is within pct %, rows of `kind`): the Evidence page's and
    the README's hit rate."""
    rows = table[table["kind"] == kind]
    return int((rows["error_pct"].abs() <= pct).sum()), len(rows)


def memory_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The measured memory figures with an estimate (issue 28's real-run references)."""
    rows = table[(table["kind"] == "measured") & table["metric"].isin(MEMORY_METRICS)]
    return rows[np.isfinite(rows["error_pct"].astype(float))]


def memory_hit_rate(table: pd.DataFrame, pct: float = TARGET_PCT) -> tuple[int, int]:
    """(measured memory figures within pct %, measured memory figures with an estimate)."""
    rows = memory_rows(table)
    return int((rows["error_pct"].abs() <= pct).sum()), len(rows)


def worst_underestimate(table: pd.DataFrame) -> tuple[str, float]:
    """(id, error %) of the measured memory figure we estimate furthest below ("", 0.0) when none is under."""
    rows = memory_rows(table)
    under = rows[rows["error_pct"] < 0]
    if under.empty:
        return "", 0.0
    worst = under.loc[under["error_pct"].idxmin()]
    return str(worst["id"]), float(worst["error_pct"])


def memory_summary(table: pd.DataFrame) -> str:
    """One line: the measured memory figures' hit rate and worst underestimate against issue 28's target."""
    hits, total = memory_hit_rate(table)
    rid, err = worst_underestimate(table)
    share = hits / total if total else 0.0
    met = share >= MEMORY_TARGET_SHARE and err >= -MAX_UNDER_PCT
    under = f"worst underestimate {err:+.1f}% ({rid})" if rid else "none under"
    if rid:  # (memory_rows: every error a finite number)
        rows = memory_rows(table)
        far = rows[rows["error_pct"] < -MAX_UNDER_PCT]
        under += f", {len(far)} under by more than {MAX_UNDER_PCT:.0f}%"
        if "safe_estimate" in far and len(far):  # of those, the ones the verdicts' figure still covers
            covered = int((far["safe_estimate"].astype(float) >= far["reference"].astype(float)).sum())
            under += f" ({covered} of them at or under the safe figure the verdicts decide on)"
    return (f"measured memory figures within +-{TARGET_PCT:.0f}%: {hits} of {total} ({100 * share:.0f}%); {under}; "
            f"target (>= {100 * MEMORY_TARGET_SHARE:.0f}% within, none under by more than {MAX_UNDER_PCT:.0f}%): "
            f"{'met' if met else 'not met'}")


README_BEGIN = "<!-- evidence-readme:begin (python -m planner.evidence --readme) -->\n"
README_END = "<!-- evidence-readme:end -->"


def readme_sentence(table: pd.DataFrame) -> str:
    """README.md's sentence on the real runs (tests/test_evidence.py checks README holds it)."""
    return ("Against published real runs, each compared under its own recipe and on its own memory counter "
            "(torch's allocated or reserved peak, or the whole process as nvidia-smi sees it; docs/evidence.md): "
            + memory_summary(table) + ".\n")


if __name__ == "__main__":  # `python -m planner.evidence`: the real-run memory figures' line (docs/evidence.md)
    from catalog import default_catalog
    _cat = default_catalog()
    import sys
    _table = evidence_table(_cat.references(), _cat.models(), _cat.gpus())
    print(readme_sentence(_table) if "--readme" in sys.argv[1:] else memory_summary(_table), end="\n" if "--readme" not in sys.argv[1:] else "")
