"""Validation of catalog YAML documents: types, ranges, required fields, unique ids, no
unknown keys. Every error names the file, the entry and the field, in one line.

Parsing is `yaml.safe_load` only, behind bounds checked first on the parser's event stream
(linear in the text, nothing constructed): a size cap, at most MAX_YAML_ALIASES aliases and
MAX_YAML_NODES values after alias expansion (so a "billion laughs" alias bomb is refused before
it is built), a nesting depth cap (PyYAML's composer recurses per level), no duplicate keys in
a mapping (YAML keeps the last one silently), and only plain tags: tags that try to construct
Python objects (`!!python/object/apply:...`) are refused by name, with their line.
Every problem is a CatalogError, never a parser traceback.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable

import yaml

from engine.params import total_params

ID_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,63}$")
YM_RE = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])$")
YMD_RE = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")


_SHOW = reprlib.Repr()
_SHOW.maxstring = 80
_SHOW.maxother = 80
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxset = _SHOW.maxdict = 4
_SHOW.maxlevel = 2


def show(value) -> str:
    """A short, one-line repr of a value for messages (bounded even for huge or nested input)."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalar -> Python
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    return _SHOW.repr(value)


def one_line(text: str, limit: int = 300) -> str:
    """Control characters escaped and length capped, so a message is always one short line."""
    text = str(text).replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class CatalogError(ValueError):
    """A catalog document is malformed. str() is one line naming file, entry and field."""

    def __init__(self, file: str, entry: str | None, field: str | None, problem: str):
        self.file, self.entry, self.field, self.problem = file, entry, field, problem
        where = one_line(file, 200)
        if entry is not None:
            where += f": entry {one_line(entry, 100)}"
        if field is not None:
            where += f", field '{one_line(field, 100)}'"
        super().__init__(f"{where}: {one_line(problem, 600)}")


# ---- field checkers: return the cleaned value or raise ValueError(problem) -----------------

def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number(low: float | None = None, high: float | None = None, *, strict_low=True, integer=False):
    def check(v):
        if integer:
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"must be a whole number, got {show(v)}")
        elif not _is_number(v):
            raise ValueError(f"must be a number, got {show(v)}")
        if low is not None and (v <= low if strict_low else v < low):
            raise ValueError(f"must be {'>' if strict_low else '>='} {low:g}, got {show(v)}")
        if high is not None and v > high:
            raise ValueError(f"must be <= {high:g}, got {show(v)}")
        return v
    return check


def text(max_len=500, pattern: re.Pattern | None = None, what="text"):
    def check(v):
        if not isinstance(v, str):
            raise ValueError(f"must be {what} (a string), got {show(v)}")
        if len(v) > max_len:
            raise ValueError(f"must be at most {max_len} characters, got {len(v)}")
        if pattern is not None and not pattern.match(v):
            raise ValueError(f"must be {what}, got {show(v)}")
        return v
    return check


def choice(*options):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, (str, int)) or v not in options:
            raise ValueError(f"must be one of {', '.join(map(str, options))}; got {show(v)}")
        return v
    return check


def boolean(v):
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {show(v)}")
    return v


def year_month(v):
    if not isinstance(v, str) or not YM_RE.match(v):
        raise ValueError(f"must be a quoted year-month 'YYYY-MM', got {show(v)}")
    return v


def iso_date(v):
    if isinstance(v, date):
        v = v.isoformat()
    if not isinstance(v, str) or not YMD_RE.match(v):
        raise ValueError(f"must be a date 'YYYY-MM-DD', got {show(v)}")
    try:
        date.fromisoformat(v)  # the pattern lets 02-30 through; the calendar does not
    except ValueError:
        raise ValueError(f"must be a real calendar date 'YYYY-MM-DD', got {show(v)}") from None
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
    default: Any = None  # the value of an optional field left out


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
    # q, k and v projections with biases (Qwen2); absent = false, the Llama layout
    "qkv_bias": Field(boolean, required=False, default=False),
    "params": Field(number(0, 1e14, integer=True)),
    # unknown for a model read from a config.json (it has no date): left empty, never invented
    "release_date": Field(optional(iso_date), required=False),
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
                out[name] = spec.default
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
                           m["num_kv_heads"], m["head_dim"], m["vocab_size"], m["tied_embeddings"],
                           bool(m.get("qkv_bias")))
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


# Bounds on a YAML document (the shipped files are ~150 KB together, with no aliases and a
# nesting depth under 10; these leave room for any hand-written catalog).
MAX_YAML_BYTES = 4 * 2**20
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 1_000_000  # values after alias expansion
MAX_YAML_DEPTH = 50
# The only tags a catalog needs: YAML's core schema (plus timestamps, which safe_load makes dates).
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")}


def _where(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag


def _check_events(raw: str, name: str) -> None:
    """Walk the parser's events (nothing is constructed) and refuse what safe_load must not see."""
    sizes: dict[str, int] = {}  # anchor -> number of values it expands to
    # one frame per open collection: [anchor, expanded size, is mapping, expecting a key, keys seen]
    stack: list[list] = []
    aliases = 0

    def fail(mark, problem):
        raise CatalogError(name, None, None, f"is not accepted as catalog YAML{_where(mark)}: {problem}")

    def finished(size, anchor, mark, key=None):
        if anchor is not None:
            sizes[anchor] = size
        if size > MAX_YAML_NODES:
            fail(mark, f"it expands to more than {MAX_YAML_NODES:,} values (aliases); a catalog needs far fewer")
        if not stack:
            return
        parent = stack[-1]
        parent[1] += size
        if parent[1] > MAX_YAML_NODES:
            fail(mark, f"it expands to more than {MAX_YAML_NODES:,} values (aliases); a catalog needs far fewer")
        if parent[2]:
            if parent[3] and key is not None and key != "<<":
                if key in parent[4]:
                    fail(mark, f"key {show(key)} appears twice in the same mapping; keep one")
                parent[4].add(key)
            parent[3] = not parent[3]

    for event in yaml.parse(raw, Loader=yaml.SafeLoader):
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!" and tag not in PLAIN_TAGS:
            fail(event.start_mark, f"tag {show(_short_tag(tag))} is not allowed; only plain values "
                                   "(text, numbers, true/false, null, lists and mappings)")
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                fail(event.start_mark, f"more than {MAX_YAML_ALIASES} aliases (*name); a catalog needs few or none")
            if event.anchor not in sizes:
                fail(event.start_mark, f"alias *{one_line(event.anchor, 40)} refers to an anchor that is not defined before it, or to itself")
            finished(sizes[event.anchor], None, event.start_mark)
        elif isinstance(event, yaml.ScalarEvent):
            finished(1, event.anchor, event.start_mark, key=event.value)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_YAML_DEPTH:
                fail(event.start_mark, f"nested deeper than {MAX_YAML_DEPTH} levels; a catalog needs a few")
            stack.append([event.anchor, 1, isinstance(event, yaml.MappingStartEvent), True, set()])
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = stack.pop()[:2]
            finished(size, anchor, event.start_mark)


def parse_yaml(raw: str | bytes, name: str) -> Any:
    """Bounded yaml.safe_load of a document's text; every problem is a one-line CatalogError."""
    if len(raw) > MAX_YAML_BYTES:
        raise CatalogError(name, None, None, f"is {len(raw):,} bytes; a catalog file is at most {MAX_YAML_BYTES:,}")
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogError(name, None, None, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8") from None
    if raw.startswith("\ufeff"):
        raw = raw[1:]  # a byte-order mark some editors add
    try:
        _check_events(raw, name)
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        if isinstance(context, str) and context.startswith("expected"):  # e.g. a second document
            problem = f"{context}, {problem}"
        raise CatalogError(name, None, None, f"is not valid YAML{_where(mark)}: {problem}") from None
    except (ValueError, OverflowError) as exc:  # e.g. a date like 2023-02-30 (safe_load makes dates)
        if isinstance(exc, CatalogError):
            raise
        raise CatalogError(name, None, None, f"is not valid YAML: {exc} (write dates quoted, as real 'YYYY-MM-DD' dates)") from None
    except RecursionError:
        raise CatalogError(name, None, None, "is not valid YAML: nested too deeply") from None


def read_yaml(path: Path, text_: str | None = None) -> Any:
    """Bounded yaml.safe_load of a file; any problem becomes a CatalogError naming the file."""
    name = path.name if path.parent.name != "catalog" else f"catalog/{path.name}"
    if text_ is not None:
        return parse_yaml(text_, name)
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise CatalogError(name, None, None, f"is {size:,} bytes; a catalog file is at most {MAX_YAML_BYTES:,}")
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogError(name, None, None, f"cannot be read: {exc.strerror or exc}") from None
    return parse_yaml(raw, name)


def top_level(doc: Any, file: str, allowed: dict[str, bool]) -> dict:
    if doc is None:
        raise CatalogError(file, None, None, f"is empty; expected a mapping with {', '.join(allowed)}")
    if not isinstance(doc, dict):
        raise CatalogError(file, None, None, f"must be a mapping with {', '.join(allowed)}, got {type(doc).__name__}")
    for k in doc:
        if k not in allowed:
            raise CatalogError(file, None, str(k), f"unknown top-level key; accepted: {', '.join(allowed)}")
    for k, required in allowed.items():
        if required and k not in doc:
            raise CatalogError(file, None, k, "top-level list is required but missing")
    return doc
