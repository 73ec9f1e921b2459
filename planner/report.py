"""Presentation helpers shared by the CLI and the pages: text summaries, sweep frames, CSV.

CSV cells that a spreadsheet would run as a formula (text starting with =, +, -, @, tab or
carriage return, also after leading spaces or double quotes) are prefixed with a single quote
(OWASP "CSV injection"); numbers stay numbers. The settings that produced a table are leading
CSV rows of two cells, "# key" and the value, written by the csv module like every other row.
"""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np
import pandas as pd

from engine import columns as _columns
from engine.constants import MAX_GPUS
from engine.estimate import estimate
from planner.planning import expand, lora_refused_models, not_modelled, refused_rows

GIB = 2**30
GB = 10**9
# Characters that make a spreadsheet read a cell as a formula: OWASP "CSV Injection" lists
# =, +, -, @, tab (0x09) and carriage return (0x0D); a line feed can start a cell too, and the
# full-width forms (U+FF1D, U+FF0B, U+FF0D, U+FF20) are read as formulas by some CJK locales.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
# Text that is only a number ("-5", "+1.5e3") cannot be a formula and stays as it is, so a
# negative number written as text still reads as a number (defusedcsv makes the same exception).
PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
# What a spreadsheet may skip before it looks for the formula sign: spaces (LibreOffice and
# Google Sheets trim them on import) and the double quotes of a quoted value.
SKIPPED_AROUND = re.compile(r'^[\s"]+|[\s"]+$')
# Count columns whose +inf means "no count up to the engine's limit fits" (engine/estimate.py sets
# gpus_needed to inf beyond engine.constants.MAX_GPUS); the CSV says so in words.
COUNT_COLUMNS = ("gpus_needed", "card_gpus_needed", "gpus_to_fit")
NOT_WITHIN = f"not within {MAX_GPUS:,} GPUs"
# Columns of whole numbers (engine/columns.py: a result in counts, sequences, tokens or GPUs, a scenario column of
# kind int) that the frame holds as floats for their nulls: the CSV writes them whole, as `--json` does (max_batch
# 10, not 10.0, which a shell's `[ "$n" -ge 4 ]` refuses and pandas reads as float64).
WHOLE_COLUMNS = frozenset(
    {r.name for r in _columns.RESULT if r.unit in ("count", "sequences", "tokens", "GPUs")}
    | {c.name for c in _columns.SCENARIO if c.kind == "int"} | set(COUNT_COLUMNS))

COMPONENT_LABELS = {
    "weights_bytes": "weights",
    "gradients_bytes": "gradients",
    "optimizer_bytes": "optimizer states",
    "optimizer_temp_bytes": "optimizer step temporaries",
    "autocast_copies_bytes": "autocast 16-bit weight copies",
    "activations_bytes": "saved activations",
    "logits_bytes": "logits and loss buffers",
    "kv_cache_bytes": "KV cache",
    "workspace_bytes": "working set (transients, gathered layers)",
    "runtime_overhead_bytes": "runtime overhead (CUDA context, allocator)",
}
PHASE_LABELS = {
    "forward": "forward (loss computed)",
    "loss_backward": "start of backward (loss gradient)",
    "backward": "backward through the layers",
    "backward_end": "end of backward (all gradients)",
    "grad_reduce": "gradient reduction after backward (DeepSpeed ZeRO-1/2)",
    "optimizer": "optimizer step",
    "prefill": "prefill (prompt processing)",
    "logits": "output logits",
    "attention": "prefill attention scores (eager)",
    "load": "loading (AutoAWQ fused modules)",
    "mask": "building the sliding-window attention mask (before the first layer)",
}


def gib(x) -> str:
    return f"{x / GIB:,.2f} GiB ({x / GB:,.2f} GB)"


def format_estimate(row: pd.Series) -> str:
    lines = [
        f"{row['model']}: {row['task']}"
        + (f", {row['method']}" if row["task"] == "train" else "")
        + (f", DPO (reference: {row.get('dpo_reference')})" if str(row.get("objective", "sft")) == "dpo" else "")
        + f", {row['precision']}, batch {row['batch']}"
        + (" pair" + ("s" if row["batch"] != 1 else "") if str(row.get("objective", "sft")) == "dpo" else "")
        + f", seq {row['seq']:,}, {row['gpus']} GPU(s)"
        + (f", recipe {row['recipe']}" if row["task"] == "train" and "recipe" in row.index else ""),
        f"parameters {row['params']:,} (trainable {row['trainable_params']:,})",
        f"peak per GPU: {gib(row['peak_bytes'])} during {PHASE_LABELS.get(str(row['peak_phase']), row['peak_phase'])}",
    ]
    for col, label in COMPONENT_LABELS.items():
        if row[col] > 0:
            lines.append(f"  {label:<45} {gib(row[col])}")
    if row.get("paged_optimizer_bytes", 0) > 0:
        lines.append(f"  paged optimizer states (may spill to CPU)     {gib(row['paged_optimizer_bytes'])}")
    if row["cpu_bytes"] > 0:
        lines.append(f"CPU memory needed (all processes): {gib(row['cpu_bytes'])}")
    if row.get("allocator_cached_bytes", 0) > 0:  # reserved and reclaimable: nvidia-smi shows it, the verdict not
        lines.append(f"nvidia-smi also shows {gib(row['allocator_cached_bytes'])} more: freed blocks PyTorch's "
                     "caching allocator keeps reserved (the dropped logits'), given back before an OOM")
    if isinstance(row.get("gpu"), str) and row["gpu"]:
        fits = bool(row["fits"])
        needed = row["gpus_needed"]
        lines.append(
            f"on {row['gpu']} ({gib(row['usable_bytes'])} usable): "
            + ("fits" if fits else "does not fit")
            + (f"; GPUs needed: {int(needed)}" if np.isfinite(needed) else f"; no GPU count up to {MAX_GPUS:,} fits")
            + f"; largest batch {int(row['max_batch']):,}"
            + (" pairs" if str(row.get("objective", "sft")) == "dpo" else "")  # (dpo: --batch counts pairs)
            + f", longest seq {int(row['max_seq']):,}"
        )
        if pd.notna(row.get("safe_peak_bytes")):  # issue 28: what the verdicts were decided on
            at_estimate = bool(row["fits_at_estimate"]) if pd.notna(row.get("fits_at_estimate")) else False
            lines.append(f"  decided on the safe peak {gib(row['safe_peak_bytes'])} (the tensors' estimate "
                         f"+{float(row['verdict_margin_pct']):.0f}%, docs/accuracy.md)"
                         + ("; the estimate alone would fit" if at_estimate and not fits else ""))
    return "\n".join(lines)


def format_what_if(table: pd.DataFrame, limit: int | None = None) -> str:
    """planner.planning.what_if's ranked changes as a text table (the baseline, rank 0, is left
    out: the estimate above it is the baseline). limit: the first so many changes."""
    changes = table[table["rank"] > 0]
    shown = changes if limit is None else changes.head(limit)
    width = max([len("change")] + [len(str(c)) for c in shown["change"]])
    lines = [f"  {'rank':>4}  {'change':<{width}}  {'fits':<4}  {'GPUs to fit':>11}  {'peak per GPU':>12}  "
             f"{'saved':>10}  impact"]
    for _, r in shown.iterrows():
        to_fit = float(r["gpus_to_fit"])
        lines.append(f"  {int(r['rank']):>4}  {str(r['change']):<{width}}  {'yes' if bool(r['fits']) else 'no':<4}  "
                     f"{(f'{int(to_fit):,}' if math.isfinite(to_fit) else '> 1,024'):>11}  "
                     f"{r['peak_bytes'] / GIB:>8,.2f} GiB  {r['saved_bytes'] / GIB:>6,.2f} GiB  {r['impact_label']}")
    if len(shown) < len(changes):
        lines.append(f"  ... {len(changes) - len(shown)} more")
    return "\n".join(lines)


def sweep_frame(models: pd.DataFrame, gpus: pd.DataFrame, model_ids, gpu_ids, methods, base: dict,
                overhead: dict | None = None) -> pd.DataFrame:
    """Every model x GPU (x method for training) for one request, with fit columns: each row is
    exactly what `estimate` answers for its scenario (engine/rules.py decides what the request
    leaves open). Rows the engine refuses (a sequence beyond the model's context without the
    explicit override, freeze layers beyond its layers: planning.refused_rows) are left out and
    named in `result.attrs["beyond_context"]` and `["beyond_layers"]` (model ids); training rows of a hybrid
    linear-attention model (planning.not_modelled) in `["not_modelled"]`."""
    axes = {"model": list(model_ids), "gpu": list(gpu_ids)}
    if base.get("task", "train") == "train":
        axes["method"] = list(methods)
    frame = expand(base, **axes)
    long_rows, deep_rows = refused_rows(frame, models)
    unmodelled = not_modelled(frame, models) & ~(long_rows | deep_rows)
    names = lambda rows: list(dict.fromkeys(frame.loc[rows, "model"].astype(str))) if rows.any() else []  # noqa: E731
    left_out, too_deep, hybrid = names(long_rows), names(deep_rows), names(unmodelled)
    dropped = long_rows | deep_rows | unmodelled
    if dropped.any():
        frame = frame[~dropped].reset_index(drop=True)
    result = estimate(frame, models, gpus, **(overhead or {}))
    # LoRA rows peft would not build (planning.lora_refused_models, as the matrix pages name them), which `estimate`
    # refuses: left out, named
    refused_lora: list[str] = []
    if "method" in result and result["method"].isin(["lora", "qlora"]).any():
        adapters = result["method"].isin(["lora", "qlora"]).to_numpy()
        refused_lora = list(lora_refused_models(models, {**base, "method": "lora"},
                                                pd.unique(result.loc[adapters, "model"].astype(str))))
        bad = adapters & result["model"].astype(str).isin(refused_lora).to_numpy()
        if bad.any():
            result = result[~bad].reset_index(drop=True)
    # the columns in the order engine/columns.py declares them (RESULT order), whatever flags were given: they came in
    # the request's order (a sweep with --precision had it fifth, one without it 23rd), so `cut -f` read another column
    order = [c for c in _columns.result_columns() if c in result.columns]
    result = result[order + [c for c in result.columns if c not in set(order)]]
    result.attrs["beyond_context"] = left_out
    result.attrs["beyond_layers"] = too_deep
    result.attrs["not_modelled"] = hybrid
    result.attrs["lora_refused"] = refused_lora
    return result


def neutralize(value):
    """Text a spreadsheet would run as a formula, prefixed with a single quote; anything else
    (numbers, booleans, missing values, text that is only a number) unchanged. The sign is
    looked for after leading whitespace and double quotes too (" =1+1" runs once trimmed)."""
    if not isinstance(value, str) or not value:
        return value
    if not value.startswith(FORMULA_START) and not (value[0].isspace() or value[0] == '"'):
        return value  # the usual text: nothing to skip, no sign
    core = SKIPPED_AROUND.sub("", value)
    if (value.startswith(FORMULA_START) or core.startswith(FORMULA_START)) and not PLAIN_NUMBER.fullmatch(core):
        return "'" + value
    return value


def _cell(value, count: bool = False):
    """neutralize(), then a carriage return inside text becomes a line feed: Python's csv writer
    (3.11) quotes a field only for the characters of its line terminator ("\n" here), and an
    unquoted CR would start a new row, whose first cell a spreadsheet could run as a formula.
    An infinite number: NOT_WITHIN for +inf in a count column, the text "-inf" quoted (a
    spreadsheet would run -inf as a formula), +inf elsewhere as it is."""
    if isinstance(value, (float, np.floating)) and math.isinf(value):
        if value > 0:
            return NOT_WITHIN if count else value
        return "'-inf"
    value = neutralize(value)
    if isinstance(value, str) and "\r" in value:
        return value.replace("\r\n", "\n").replace("\r", "\n")
    return value


def _comment(text) -> str:
    """A settings key or value on one line: line breaks (every kind str.splitlines knows) become
    spaces, so a settings row stays one line that starts with "# "."""
    return " ".join(str(text).splitlines()).replace("\r", " ")


def _infinite_as_text(values: pd.Series, count: bool) -> pd.Series:
    """A float column for the CSV: its infinities as _cell writes them (the rest stay numbers)."""
    array = values.to_numpy(dtype=float, na_value=np.nan)
    hit = (array == np.inf) & count | (array == -np.inf)
    if not hit.any():
        return values
    return values.astype(object).where(~hit, pd.Series(array, index=values.index).map(lambda v: _cell(v, count)))


def settings_rows(settings: dict) -> str:
    """The settings as leading CSV rows, one a line: "# key" and the value, both one line, the
    value neutralised like every data cell and quoted by the csv module where it holds a comma
    or a double quote (a spreadsheet then shows it whole in one cell, never as a formula)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for key, value in settings.items():
        writer.writerow(["# " + _comment(key), neutralize(_comment(value))])
    return buf.getvalue()


def read_settings(text: str) -> tuple[dict, str]:
    """to_csv's text split into its settings (key -> value as written, a formula's quote
    included) and the CSV body after them. A settings row is one line (settings_rows puts no
    line break in it) whose first cell starts with "# " (the csv module quotes a key that holds
    a comma or a double quote)."""
    lines = text.split("\n")
    settings = {}
    body = 0
    while body < len(lines) and lines[body].lstrip('"').startswith("# "):
        row = next(csv.reader([lines[body]]), [""])
        if not row[0].startswith("# "):
            break
        settings[row[0][2:]] = row[1] if len(row) > 1 else ""
        body += 1
    return settings, "\n".join(lines[body:])


def to_csv(frame: pd.DataFrame, settings: dict | None = None) -> str:
    """CSV text of a frame, after the settings that produced it (settings_rows). Text cells a
    spreadsheet would run as a formula get a leading quote; +inf in a count column
    (COUNT_COLUMNS) reads NOT_WITHIN."""
    out = frame.copy()
    for col in out.columns:
        values = out[col]
        count = str(col) in COUNT_COLUMNS
        if pd.api.types.is_float_dtype(values.dtype):
            if str(col).endswith("_bytes"):
                # whole bytes, as `--json` gives them: a 4.127-bit weight's share wrote "7817846718.464" and a
                # zero "0.0"; null stays empty (and an infinity, which no byte figure has, keeps its text)
                numbers = values.to_numpy(dtype=float)
                finite = np.isfinite(numbers)
                # (and each whole within int64: 2**63 bytes and beyond keep the float's text; the cast refused them)
                fits = bool((np.abs(numbers[finite]).round() < 2.0 ** 63).all())
                if fits and (finite.all() or (~finite == values.isna().to_numpy()).all()):
                    out[col] = values.round().astype("Int64")
                    continue
            if str(col) in WHOLE_COLUMNS:
                numbers = values.to_numpy(dtype=float)
                finite = numbers[np.isfinite(numbers)]
                if (finite == np.round(finite)).all() and (np.abs(finite) < 2.0 ** 63).all():
                    # whole: ints, null empty, +inf in a count column NOT_WITHIN (_cell)
                    out[col] = pd.array([None if math.isnan(v) else int(v) if math.isfinite(v) else _cell(v, count)
                                         for v in numbers], dtype=object)
                    continue
            out[col] = _infinite_as_text(values, count)
            continue
        if isinstance(values.dtype, pd.CategoricalDtype):
            cats = values.cat.categories
            renamed = [_cell(c) for c in cats]  # one check per category, not per row
            if len(set(renamed)) == len(renamed):
                out[col] = values.cat.rename_categories(renamed)
                continue
        if values.dtype == object or isinstance(values.dtype, (pd.StringDtype, pd.CategoricalDtype)):
            out[col] = values.astype(object).map(lambda v: _cell(v, count))
    out.columns = [_cell(str(c)) for c in out.columns]
    buf = io.StringIO()
    if settings:
        buf.write(settings_rows(settings))
    out.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()
