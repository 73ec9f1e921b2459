"""Compatibility of a scenario with a GPU, from a rule table (catalog/gpus.yaml `compatibility`).

Pure and vectorized: `check(frame, gpus, rules)` takes the scenarios (decided columns, e.g. the
output of `estimate`), the GPU frame (id, vendor, architecture) and the rules frame, and
returns two columns per row: `compatible` (False where an "incompatible" rule applies) and
`compatibility_notes` (the notes of every rule that applies, "incompatible" first). The loop
runs over the few rules, never over scenario rows. The data (which dtype needs which
architecture, which library exists for which vendor) lives in the catalog YAML with its
sources; this module only applies it. Rows without a GPU are compatible with no notes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RULE_COLUMNS = ("id", "columns", "values", "multi_gpu", "architectures", "vendors", "severity", "note")


def _items(text) -> list[str]:
    return [t.strip() for t in str(text or "").split(",") if t.strip()]


def _gpu_facts(frame: pd.DataFrame, gpus: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    n = len(frame)
    if gpus is None or "gpu" not in frame.columns or not len(gpus):
        return np.full(n, "", dtype=object), np.full(n, "", dtype=object)
    idx = pd.Index(gpus["id"].astype(str)).get_indexer(frame["gpu"].astype(str))
    found = idx >= 0

    def take(col):
        if col not in gpus.columns:
            return np.full(n, "", dtype=object)
        values = gpus[col].astype(object).where(gpus[col].notna(), "").astype(str).str.lower().to_numpy(dtype=object)
        return np.where(found, values[np.maximum(idx, 0)], "")

    return take("architecture"), take("vendor")


def check(frame: pd.DataFrame, gpus: pd.DataFrame | None, rules: pd.DataFrame | None) -> pd.DataFrame:
    """`compatible` and `compatibility_notes` for every row of `frame` (same index)."""
    n = len(frame)
    compatible = np.ones(n, dtype=bool)
    notes = [[] for _ in range(n)]
    if rules is None or not len(rules) or not n:
        return pd.DataFrame({"compatible": compatible, "compatibility_notes": notes}, index=frame.index)
    arch, vendor = _gpu_facts(frame, gpus)
    gpu_count = pd.to_numeric(frame["gpus"], errors="coerce").fillna(1).to_numpy(dtype=float) \
        if "gpus" in frame.columns else np.ones(n)
    ordered = rules.assign(_first=(rules["severity"] != "incompatible")).sort_values(["_first", "id"], kind="stable")
    for _, rule in ordered.iterrows():
        targets = np.isin(arch, _items(rule["architectures"])) | np.isin(vendor, _items(rule["vendors"]))
        if not targets.any():
            continue
        applies = np.zeros(n, dtype=bool)
        values = _items(rule["values"])
        for col in _items(rule["columns"]):
            if col in frame.columns:
                applies |= frame[col].astype(str).str.strip().str.lower().isin(values).to_numpy(dtype=bool)
        if bool(rule.get("multi_gpu", False)):
            applies |= gpu_count > 1
        hit = applies & targets
        if not hit.any():
            continue
        if rule["severity"] == "incompatible":
            compatible &= ~hit
        for i in np.flatnonzero(hit):
            notes[i].append(f"{rule['severity']}: {rule['note']}")
    return pd.DataFrame({"compatible": compatible, "compatibility_notes": notes}, index=frame.index)
