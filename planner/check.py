"""`llm-planner check` (and `python -m engine check`): does one scenario fit, as one line and an
exit status, for a script or a CI job that guards a launch or a download.

    $ llm-planner check --model llama-3.1-8b --task infer --precision int4 --gpu rtx-4090
    fits: llama-3.1-8b infer int4 on 1x rtx-4090: 6.6 of 24.0 GiB (28%, headroom 10%)
    $ echo $?
    0

Exit status: 0 fits, 1 does not fit (memory, or a card the compatibility rules of
catalog/gpus.yaml refuse), 2 bad input (planner/cli.py's main: one `error:` line on stderr).
The flags are the estimate's (generated from engine/columns.py); the figures are the estimate's
row (peak_bytes per GPU against usable_bytes). `--json` prints the estimate's JSON object
instead, with the same exit status.
"""

from __future__ import annotations

import math

import pandas as pd

from engine.compat import refusals
from engine.constants import MAX_GPUS

FITS, DOES_NOT_FIT, BAD_INPUT = 0, 1, 2
GIB = 2**30


def fits(row: pd.Series, verdict: dict) -> bool:
    """The estimate's fit, and a card the compatibility rules allow (never a fit otherwise)."""
    return bool(row["fits"]) and bool(verdict["compatible"])


def exit_code(row: pd.Series, verdict: dict) -> int:
    return FITS if fits(row, verdict) else DOES_NOT_FIT


def _what(row: pd.Series) -> str:
    """'llama-3.1-8b lora' for training ('llama-3.1-8b lora DPO, 4 pairs' for preference tuning, whose batch counts
    pairs), 'llama-3.1-8b infer int4' for inference."""
    if row["task"] == "train":
        if str(row.get("objective", "sft")) == "dpo":
            pairs = int(row["batch"])
            return f"{row['model']} {row['method']} DPO, {pairs:,} pair{'s' if pairs != 1 else ''}"
        return f"{row['model']} {row['method']}"
    return f"{row['model']} infer {row['precision']}"


def verdict_line(row: pd.Series, verdict: dict) -> str:
    """One line: 'fits: MODEL METHOD on Nx GPU: PEAK of USABLE GiB (P%)', or 'does not fit: ...'
    with what would change that (the GPU count that fits, or the compatibility rule)."""
    peak, usable = float(row["peak_bytes"]), float(row["usable_bytes"])
    # the fit keeps the headroom free (and the allocator's share): 95% of the card can be too much
    share = f"{peak / usable:,.0%}" if usable > 0 else "no usable memory"
    line = (f"{'fits' if fits(row, verdict) else 'does not fit'}: {_what(row)} on {int(row['gpus'])}x {row['gpu']}: "
            f"{peak / GIB:,.1f} of {usable / GIB:,.1f} GiB ({share}, headroom {float(row['headroom']):.0%}"
            + (f", decided on {float(row['safe_peak_bytes']) / GIB:,.1f} GiB, the tensors "
               f"+{float(row['verdict_margin_pct']):.0f}%" if pd.notna(row.get("safe_peak_bytes")) else "") + ")")
    if not verdict["compatible"]:
        notes = list(verdict["compatibility_notes"])  # the refusing rules ('incompatible: ...'), not the notes
        return line + "; " + "; ".join(refusals(notes) or notes or ["not compatible"])
    if not bool(row["fits"]):
        needed = float(row["gpus_needed"])
        if math.isfinite(needed) and needed > int(row["gpus"]):
            line += f"; fits on {int(needed):,}x {row['gpu']} (--gpus {int(needed)})"
        else:
            line += f"; no count of {row['gpu']} up to {MAX_GPUS:,} fits it as asked"
        line += " (changes that fit: estimate --what-if)"
    return line
