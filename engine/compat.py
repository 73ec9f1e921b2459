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

import engine.categories as categories

RULE_COLUMNS = ("id", "columns", "values", "multi_gpu", "only_multi_gpu", "architectures", "vendors", "severity", "note")


def _items(text) -> list[str]:
    return [t.strip() for t in str(text or "").split(",") if t.strip()]


def _flag(value) -> bool:
    """A rule's true/false field; missing (None, NaN: a rules frame without the column) is false."""
    return bool(value) if value is not None and not (isinstance(value, float) and value != value) else False


def _gpu_facts(frame: pd.DataFrame, gpus: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the GPU of each row as an index into the two arrays, -1 where unknown; the architectures
    and vendors of the GPUs, lower case). Per GPU, not per row: a sweep has a few dozen."""
    n = len(frame)
    if gpus is None or "gpu" not in frame.columns or not len(gpus):
        return np.full(n, -1, dtype=np.intp), np.zeros(0, dtype=object), np.zeros(0, dtype=object)
    idx = categories.positions(gpus["id"], frame["gpu"])  # through the categories (a sweep has a few dozen GPUs)

    def facts(col):  # (a few dozen GPUs: per value in Python, where pandas' string methods cost ~1 ms a column)
        if col not in gpus.columns:
            return np.full(len(gpus), "", dtype=object)
        return np.array(["" if pd.isna(v) else str(v).lower() for v in gpus[col].to_numpy(dtype=object)], dtype=object)

    return idx, facts("architecture"), facts("vendor")


def _texts(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(each row's code, the text of each code): column.astype(str).str.strip().str.lower() once per
    distinct value (categories.distinct: a missing value reads "nan"), for every rule that reads it."""
    codes, uniques = categories.distinct(column)
    return codes, np.array([str(u).strip().lower() for u in uniques], dtype=object)


def _text_in(texts: tuple[np.ndarray, np.ndarray], values: list[str]) -> np.ndarray:
    """Rows whose text (`_texts`) is one of values."""
    codes, text = texts
    return np.isin(text, values)[codes]


def check(frame: pd.DataFrame, gpus: pd.DataFrame | None, rules: pd.DataFrame | None) -> pd.DataFrame:
    """`compatible` and `compatibility_notes` for every row of `frame` (same index)."""
    n = len(frame)
    compatible = np.ones(n, dtype=bool)
    if rules is None or not len(rules) or not n:
        return pd.DataFrame({"compatible": compatible, "compatibility_notes": [[] for _ in range(n)]}, index=frame.index)
    gpu_of, arch, vendor = _gpu_facts(frame, gpus)
    known = gpu_of >= 0
    gpu_count = pd.to_numeric(frame["gpus"], errors="coerce").fillna(1).to_numpy(dtype=float) \
        if "gpus" in frame.columns else np.ones(n)
    # "incompatible" rules first, then by id (a stable sort of the few rules, as records)
    # (the records built from each column's list: DataFrame.to_dict("records") took ~3 ms for the shipped ~20 rules)
    cols = list(rules.columns)
    records = [dict(zip(cols, row)) for row in zip(*(rules[c].tolist() for c in cols))]
    ordered = sorted(records, key=lambda r: (r["severity"] != "incompatible", r["id"]))
    texts, hits = [], []  # the notes of the rules that hit some row, in order, and their rows
    column_texts: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # each column read as text once
    for rule in ordered:
        per_gpu = np.isin(arch, _items(rule["architectures"])) | np.isin(vendor, _items(rule["vendors"]))
        if not per_gpu.any():
            continue
        targets = known & per_gpu[np.maximum(gpu_of, 0)]
        if not targets.any():
            continue
        applies = np.zeros(n, dtype=bool)
        values = _items(rule["values"])
        for col in _items(rule["columns"]):
            if col in frame.columns:
                if col not in column_texts:
                    column_texts[col] = _texts(frame[col])
                applies |= _text_in(column_texts[col], values)
        if _flag(rule.get("multi_gpu")):
            applies |= gpu_count > 1
        if _flag(rule.get("only_multi_gpu")):  # the values count on several GPUs only
            applies &= gpu_count > 1
        hit = applies & targets
        if not hit.any():
            continue
        if rule["severity"] == "incompatible":
            compatible &= ~hit
        texts.append(f"{rule['severity']}: {rule['note']}")
        hits.append(hit)
    notes = _notes_per_row(n, texts, hits)
    return pd.DataFrame({"compatible": compatible, "compatibility_notes": notes}, index=frame.index)


def columns_read(rules: pd.DataFrame | None) -> set[str]:
    """The columns of a frame that check() reads under `rules`: gpu, gpus and every rule's columns (a caller may pass
    a frame of these alone: a row's verdict reads that row's values of these columns only)."""
    read = {"gpu", "gpus"}
    if rules is not None and "columns" in rules.columns:
        read.update(col for text in rules["columns"].tolist() for col in _items(text))
    return read


def refusals(notes) -> list[str]:
    """Of a row's compatibility_notes, those of the rules that refuse the card ("incompatible: ..."), not the notes."""
    return [str(n) for n in notes if str(n).startswith("incompatible: ")]


def refusal_reasons(notes) -> str:
    """The refusing rules' notes as one sentence, without their severity ("bf16 needs ...; ...")."""
    return "; ".join(n.removeprefix("incompatible: ") for n in refusals(notes))


def _notes_per_row(n: int, texts: list[str], hits: list[np.ndarray]) -> list[list[str]]:
    """Each row's list of the notes whose rule hit it (in rule order), a list of its own per
    row: the rows are grouped by which rules hit them (a few combinations), not visited per rule."""
    if not texts:
        return [[] for _ in range(n)]
    key = np.zeros(n, dtype=object if len(hits) > 62 else np.int64)
    for i, hit in enumerate(hits):
        key += hit.astype(key.dtype) * (1 << i)
    codes, combos = pd.factorize(key)
    lists = [[t for i, t in enumerate(texts) if int(combo) >> i & 1] for combo in combos]
    shared = np.empty(len(lists), dtype=object)
    for i, notes in enumerate(lists):  # (an object array of lists, filled one by one: numpy would nest them)
        shared[i] = notes
    # each row's own copy, made by map in C (a comprehension indexing `lists` took ~8 ms a 15,000-row sweep)
    return list(map(list, shared[codes]))
