"""Validation of catalog YAML documents: types, ranges, required fields, unique ids, no
unknown keys. Every error names the file, the entry and the field, in one line.

Parsing is `yaml.safe_load` only: tags that try to construct Python objects are refused by
the parser and reported like any other malformed file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable

import yaml

from engine.params import total_params

ID_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,63}$")
YM_RE = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])$")
YMD_RE = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")


class CatalogError(ValueError):
    """A catalog document is malformed. str() is one line naming file, entry and field."""

    def __init__(self, file: str, entry: str | None, field: str | None, problem: str):
        self.file, self.entry, self.field, self.problem = file, entry, field, problem
        where = file
        if entry is not None:
            where += f": entry {entry}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")


# ---- field checkers: return the cleaned value or raise ValueError(problem) -----------------

def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number(low: float | None = None, high: float | None = None, *, strict_low=True, integer=False):
    def check(v):
        if integer:
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"must be a whole number, got {v!r}")
        elif not _is_number(v):
            raise ValueError(f"must be a number, got {v!r}")
        if low is not None and (v <= low if strict_low else v < low):
            raise ValueError(f"must be {'>' if strict_low else '>='} {low:g}, got {v!r}")
        if high is not None and v > high:
            raise ValueError(f"must be <= {high:g}, got {v!r}")
        return v
    return check


def text(max_len=500, pattern: re.Pattern | None = None, what="text"):
    def check(v):
        if not isinstance(v, str):
            raise ValueError(f"must be {what} (a string), got {v!r}")
        if len(v) > max_len:
            raise ValueError(f"must be at most {max_len} characters, got {len(v)}")
        if pattern is not None and not pattern.match(v):
            raise ValueError(f"must be {what}, got {v!r}")
        return v
    return check


def choice(*options):
    def check(v):
        if v not in options:
            raise ValueError(f"must be one of {', '.join(map(str, options))}; got {v!r}")
        return v
    return check


def boolean(v):
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def year_month(v):
    if not isinstance(v, str) or not YM_RE.match(v):
        raise ValueError(f"must be a quoted year-month 'YYYY-MM', got {v!r}")
    return v


def iso_date(v):
    if isinstance(v, date):
        v = v.isoformat()
    if not isinstance(v, str) or not YMD_RE.match(v):
        raise ValueError(f"must be a date 'YYYY-MM-DD', got {v!r}")
    return v


def optional(check: Callable):
    def wrapped(v):
        return None if v is None else check(v)
    wrapped.optional = True
    return wrapped


def mapping(v):
    if not isinstance(v, dict):
        raise ValueError(f"must be a mapping of keys to values, got {type(v).__name__}")
    return v


IDENT = text(64, ID_RE, "an id of lowercase letters, digits, '.' and '-'")
NAME = text(120)
NOTE = text(2000)


@dataclass(frozen=True)
class Field:
    check: Callable[[Any], Any]
    required: bool = True


GPU_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "name": Field(NAME),
    "vendor": Field(choice("nvidia", "amd", "intel", "apple")),
    "segment": Field(choice("consumer", "workstation", "datacenter", "apple")),
    "memory_gb": Field(number(0, 100_000)),
    "usable_memory_bytes": Field(number(0, 1e14, integer=True)),
    "usable_memory_source": Field(NOTE),
    "memory_type": Field(text(40)),
    "unified_memory": Field(boolean),
    "bandwidth_gbps": Field(number(0, 1e6)),
    "bf16_tflops": Field(optional(number(0, 1e6))),
    "fp16_tflops": Field(number(0, 1e6)),
    "fp32_tflops": Field(optional(number(0, 1e6))),
    "int8_tops": Field(optional(number(0, 1e7))),
    "fp8_tflops": Field(optional(number(0, 1e7))),
    "tdp_w": Field(number(0, 100_000)),
    "interconnect": Field(text(80)),
    "interconnect_gbps": Field(number(0, 1e6)),
    "launch_year": Field(number(1990, 2100, integer=True, strict_low=False)),
    "price_usd": Field(optional(number(0, 1e8))),
    "price_source": Field(NOTE),
    "price_date": Field(year_month),
    "cloud_usd_per_hour": Field(optional(number(0, 10_000))),
    "cloud_source": Field(NOTE),
    "cloud_date": Field(year_month),
    "notes": Field(NOTE, required=False),
}

ALIAS_FIELDS: dict[str, Field] = {
    "alias": Field(text(60)),
    "gpu": Field(IDENT),
    "count": Field(number(1, 100_000, integer=True, strict_low=False)),
    "note": Field(NOTE, required=False),
}

MODEL_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "name": Field(NAME),
    "family": Field(text(40)),
    "hidden_size": Field(number(0, 1_000_000, integer=True)),
    "intermediate_size": Field(number(0, 10_000_000, integer=True)),
    "num_layers": Field(number(0, 1_000, integer=True)),
    "num_heads": Field(number(0, 10_000, integer=True)),
    "num_kv_heads": Field(number(0, 10_000, integer=True)),
    "head_dim": Field(number(0, 10_000, integer=True)),
    "vocab_size": Field(number(0, 10_000_000, integer=True)),
    "max_context": Field(number(0, 100_000_000, integer=True)),
    "tied_embeddings": Field(boolean),
    "params": Field(number(0, 1e14, integer=True)),
    "release_date": Field(iso_date),
    "source": Field(NOTE),
    "notes": Field(NOTE, required=False),
}

REFERENCE_METRICS = ("peak_bytes", "weights_bytes", "kv_cache_bytes", "model_states_bytes",
                     "trainable_params", "gpus_needed", "train_gpu_hours", "decode_tokens_per_s")
UNITS = ("B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "TB", "count", "hours", "tokens/s")
REFERENCE_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "kind": Field(choice("measured", "estimate", "claim")),
    "source": Field(NOTE),
    "url": Field(text(500)),
    "date": Field(year_month),
    "metric": Field(choice(*REFERENCE_METRICS)),
    "value": Field(number(0, 1e18, strict_low=False)),
    "unit": Field(choice(*UNITS)),
    "per_gpu": Field(boolean),
    "scenario": Field(mapping),
    "setup_note": Field(NOTE),
    "explanation": Field(NOTE, required=False),
}
SCENARIO_KEYS = {
    "model": IDENT, "task": choice("train", "infer"), "method": choice("full", "lora", "qlora", "freeze"),
    "precision": text(20), "optimizer": text(30), "batch": number(0, 1e7, integer=True),
    "seq": number(0, 1e9, integer=True), "grad_checkpointing": boolean,
    "lora_rank": number(0, 1e6, integer=True), "lora_targets": text(200), "zero": choice(0, 1, 2, 3),
    "offload": choice("none", "optimizer", "all"), "gpus": number(0, 1e6, integer=True),
    "gpu": IDENT, "kv_precision": text(10), "base_precision": text(10), "tokens": number(0, 1e16),
    "tp": number(0, 4096, integer=True), "pp": number(0, 4096, integer=True),
}


def entry_label(index: int, item: Any, key: str = "id") -> str:
    if isinstance(item, dict) and isinstance(item.get(key), str):
        return f"'{item[key]}'"
    return f"#{index + 1}"


def validate_entries(items: Any, fields: dict[str, Field], file: str, section: str,
                     key: str = "id") -> list[dict]:
    if not isinstance(items, list):
        raise CatalogError(file, None, section, f"must be a list of entries, got {type(items).__name__}")
    clean: list[dict] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        label = entry_label(i, item, key)
        if not isinstance(item, dict):
            raise CatalogError(file, label, None, f"must be a mapping of fields, got {type(item).__name__}")
        for k in item:
            if k not in fields:
                raise CatalogError(file, label, str(k), f"unknown field; accepted: {', '.join(fields)}")
        out = {}
        for name, spec in fields.items():
            if name not in item:
                if spec.required:
                    raise CatalogError(file, label, name, "is required but missing")
                out[name] = None
                continue
            if item[name] is None and spec.required and not getattr(spec.check, "optional", False):
                raise CatalogError(file, label, name, "is required but empty")
            try:
                out[name] = spec.check(item[name])
            except ValueError as exc:
                raise CatalogError(file, label, name, str(exc)) from None
        ident = out[key]
        if ident in seen:
            raise CatalogError(file, label, key, f"duplicate {key} {ident!r}; each must be unique")
        seen.add(ident)
        clean.append(out)
    return clean


def check_model(m: dict, file: str) -> None:
    label = f"'{m['id']}'"
    if m["num_heads"] % m["num_kv_heads"]:
        raise CatalogError(file, label, "num_kv_heads", f"must divide num_heads ({m['num_heads']}), got {m['num_kv_heads']}")
    derived = total_params(m["hidden_size"], m["intermediate_size"], m["num_layers"], m["num_heads"],
                           m["num_kv_heads"], m["head_dim"], m["vocab_size"], m["tied_embeddings"])
    if derived != m["params"]:
        raise CatalogError(file, label, "params",
                           f"the architecture gives {derived:,} parameters but the entry says {m['params']:,}; check the config fields")


def check_gpu(g: dict, file: str) -> None:
    label = f"'{g['id']}'"
    if g["usable_memory_bytes"] > g["memory_gb"] * 1.1e9 * 1.08:
        raise CatalogError(file, label, "usable_memory_bytes",
                           f"{g['usable_memory_bytes']:,} bytes is more than the card's {g['memory_gb']} GB")


def check_reference(ref: dict, file: str, model_ids: set[str], gpu_ids: set[str]) -> None:
    label = f"'{ref['id']}'"
    sc = ref["scenario"]
    for k, v in sc.items():
        if k not in SCENARIO_KEYS:
            raise CatalogError(file, label, f"scenario.{k}", f"unknown scenario key; accepted: {', '.join(SCENARIO_KEYS)}")
        try:
            SCENARIO_KEYS[k](v)
        except ValueError as exc:
            raise CatalogError(file, label, f"scenario.{k}", str(exc)) from None
    if "model" not in sc:
        raise CatalogError(file, label, "scenario.model", "is required but missing")
    if sc["model"] not in model_ids:
        raise CatalogError(file, label, "scenario.model", f"{sc['model']!r} is not a catalog model id")
    if "gpu" in sc and sc["gpu"] not in gpu_ids:
        raise CatalogError(file, label, "scenario.gpu", f"{sc['gpu']!r} is not a catalog GPU id")


def read_yaml(path: Path, text_: str | None = None) -> Any:
    """yaml.safe_load a file; any parse error becomes a CatalogError naming the file."""
    name = path.name if path.parent.name != "catalog" else f"catalog/{path.name}"
    try:
        raw = path.read_text(encoding="utf-8") if text_ is None else text_
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(name, None, None, f"cannot be read: {exc}") from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError(name, None, None, f"is not valid YAML{where}: {problem}") from None


def top_level(doc: Any, file: str, allowed: dict[str, bool]) -> dict:
    if not isinstance(doc, dict):
        raise CatalogError(file, None, None, f"must be a mapping with {', '.join(allowed)}, got {type(doc).__name__}")
    for k in doc:
        if k not in allowed:
            raise CatalogError(file, None, str(k), f"unknown top-level key; accepted: {', '.join(allowed)}")
    for k, required in allowed.items():
        if required and k not in doc:
            raise CatalogError(file, None, k, "top-level list is required but missing")
    return doc
