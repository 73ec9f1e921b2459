"""Validation of catalog YAML documents: types, ranges, required fields, unique ids, no
unknown keys. Every error names the file, the entry and the field, in one line.

Text fields hold one line of printable text: control characters (C0, DEL, C1: tab and line
breaks included), Unicode line / paragraph separators, noncharacters and lone surrogates
(text that cannot be written as UTF-8) are refused by name, so whatever validates can be
saved, read back, put in a DataFrame and printed.

Files are read only when they are regular files (after symlinks), with a bounded read
(`read_regular_file`): a FIFO, /dev/zero or a directory is refused by name, never waited on.

Parsing is one pass over the YAML parser's event stream (libyaml's C parser when PyYAML has
it, the pure-Python parser otherwise), which checks bounds and builds the values as it goes,
with the same results as `yaml.safe_load` (YAML 1.1 plain scalars: ints, floats, booleans,
null, dates; merge keys): a size cap, at most MAX_YAML_ALIASES aliases and MAX_YAML_NODES
values after alias expansion (so a "billion laughs" alias bomb is refused before it is used),
a nesting depth cap, no duplicate keys in a mapping (YAML keeps the last one silently), and
only plain tags: tags that try to construct Python objects (`!!python/object/apply:...`) are
refused by name, with their line. Every problem is a CatalogError, never a parser traceback.
"""

from __future__ import annotations

import math
import os
import re
import reprlib
import stat
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable

import yaml
from yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from engine.params import BLOCK_KINDS, LINEAR_ATTENTION_FIELDS, MAMBA_FIELDS, architecture_counts
from engine.scenarios import CHOICES as SCENARIO_CHOICES
from engine.scenarios import INT_RANGES, PRECISIONS

try:  # libyaml's parser, in C: about ten times faster than PyYAML's pure-Python one
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None

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


# What text fields refuse: C0 controls (tab and line breaks included), DEL, C1 controls, the
# Unicode line and paragraph separators (YAML and many viewers break lines there), lone
# surrogates (not Unicode text: UTF-8 cannot encode them, so they could be neither saved nor
# shown) and the noncharacters U+FFFE / U+FFFF.
NOT_TEXT_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    ch = match.group()
    return _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def one_line(text: str, limit: int = 300) -> str:
    """Control characters and lone surrogates escaped and length capped, so a message is
    always one short line that can be printed and encoded as UTF-8."""
    text = NOT_TEXT_RE.sub(_escape, str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def not_text(v: str) -> str | None:
    """Why a string is not acceptable one-line text (see NOT_TEXT_RE), or None when it is."""
    bad = NOT_TEXT_RE.search(v)
    if bad is None:
        return None
    code = ord(bad.group())
    if 0xD800 <= code <= 0xDFFF:
        kind = "a lone surrogate, which is not Unicode text and cannot be saved as UTF-8"
    elif code in (0x2028, 0x2029):
        kind = "a line separator"
    elif code in (0xFFFE, 0xFFFF):
        kind = "a Unicode noncharacter"
    else:
        kind = "a control character"
    return f"U+{code:04X} ({kind}) at position {bad.start() + 1}"


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


def number(low: float | None = None, high: float | None = None, *, strict_low=True, integer=False, strict_high=False):
    def check(v):
        if integer:
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"must be a whole number, got {show(v)}")
        elif not _is_number(v):
            raise ValueError(f"must be a number, got {show(v)}")
        if low is not None and (v <= low if strict_low else v < low):
            raise ValueError(f"must be {'>' if strict_low else '>='} {low:g}, got {show(v)}")
        if high is not None and (v >= high if strict_high else v > high):
            raise ValueError(f"must be {'<' if strict_high else '<='} {high:g}, got {show(v)}")
        return v
    return check


def text(max_len=500, pattern: re.Pattern | None = None, what="text"):
    def check(v):
        if not isinstance(v, str):
            raise ValueError(f"must be {what} (a string), got {show(v)}")
        if len(v) > max_len:
            raise ValueError(f"must be at most {max_len} characters, got {len(v)}")
        problem = not_text(v)
        if problem is not None:
            raise ValueError(f"must be {what} on one line, without control characters; got {show(v)}, "
                             f"which has {problem}")
        if pattern is not None and not pattern.fullmatch(v):
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
    if not isinstance(v, str) or not YM_RE.fullmatch(v):
        raise ValueError(f"must be a quoted year-month 'YYYY-MM', got {show(v)}")
    return v


def iso_date(v):
    if isinstance(v, date):
        v = v.isoformat()
    if not isinstance(v, str) or not YMD_RE.fullmatch(v):
        raise ValueError(f"must be a date 'YYYY-MM-DD', got {show(v)}")
    try:
        date.fromisoformat(v)  # the pattern lets 02-30 through; the calendar does not
    except ValueError:
        raise ValueError(f"must be a real calendar date 'YYYY-MM-DD', got {show(v)}") from None
    return v


YEAR_RE = re.compile(r"^(19|20)\d\d$")


def year_or_month(v):
    """'2026' or '2026-02': a used-market quote is often dated only by its year ("in 2026")."""
    v = str(v)
    if not (YEAR_RE.match(v) or YM_RE.match(v)):
        raise ValueError(f"{show(v)} is not a date; accepted: YYYY or YYYY-MM")
    return v


def whole_count(low: int, high: int):
    """A count that may arrive as a float from a DataFrame column with empty cells (2.0): kept
    as the whole number it is; 2.5 is refused."""
    inner = number(low, high, strict_low=False, integer=True)

    def check(v):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        elif hasattr(v, "item") and not isinstance(v, bool):  # a numpy number
            v = v.item()
            v = int(v) if isinstance(v, float) and v.is_integer() else v
        return inner(v)
    return check


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
_NAME_TEXT = text(120)


def NAME(v):
    """A display name: the tables, the sidebar and the CSVs show it, so a blank one (which showed
    as an empty sidebar choice) is refused; give the id again if there is no better name."""
    v = _NAME_TEXT(v)
    if not v.strip():
        raise ValueError(f"must not be empty (it is what the tables and the sidebar show), got {show(v)}")
    return v


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
    # ---- systems and used prices (issue 14); optional so that older files and user GPUs load.
    # architecture: the compatibility rules' key (catalog/gpus.yaml `compatibility`), e.g. ampere
    "architecture": Field(optional(text(40, ID_RE, "an architecture id such as ampere, hopper, cdna3")),
                          required=False),
    # how the card is built into a system: pcie (a card in a slot), sxm / oam (a module on an
    # 8-GPU baseboard, sold as a whole server), superchip (CPU+GPU module), apple (a whole computer)
    "form_factor": Field(optional(choice("pcie", "sxm", "oam", "superchip", "apple")), required=False),
    "max_per_node": Field(optional(whole_count(1, 64)), required=False),
    "node_interconnect": Field(optional(choice("PCIe", "NVLink bridge", "NVLink", "NVSwitch", "Infinity Fabric",
                                               "Ethernet", "unified memory")), required=False),
    # the host the card goes in: an id of the `hosts` list (chassis, CPU, RAM, PSU per node)
    "host_class": Field(optional(IDENT), required=False),
    "system_source": Field(NOTE, required=False),
    "price_used_usd": Field(optional(number(0, 1e8)), required=False),
    "price_used_source": Field(NOTE, required=False),
    "price_used_date": Field(optional(year_or_month), required=False),
}

# What one node (server or workstation) costs besides its GPUs, by class; and what joining
# nodes costs (network). Every figure with its source and date; unknown stays empty.
HOST_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "name": Field(NAME),
    "kind": Field(choice("host", "network")),
    # host: chassis + CPU + RAM + PSU + storage of one node; network: per node joined (NIC, cables)
    "usd_per_node": Field(optional(number(0, 1e8, strict_low=False))),
    # network: once per multi-node plan (a switch); hosts: 0
    "usd_fixed": Field(optional(number(0, 1e8, strict_low=False)), required=False, default=0.0),
    "max_gpus": Field(optional(whole_count(1, 64)), required=False),
    "source": Field(NOTE),
    "date": Field(year_or_month),
    "notes": Field(NOTE, required=False),
}

# Compatibility rules: a scenario whose `columns` hold one of `values` (or, with multi_gpu,
# any scenario on more than one GPU) is `severity` on the listed architectures / vendors;
# with only_multi_gpu, the values count on more than one GPU only (a library that refuses a
# distributed launch).
COMPAT_SEVERITIES = ("incompatible", "note")
COMPAT_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "columns": Field(text(200), required=False, default=""),
    "values": Field(text(500), required=False, default=""),
    "multi_gpu": Field(boolean, required=False, default=False),
    "only_multi_gpu": Field(boolean, required=False, default=False),
    "architectures": Field(text(500), required=False, default=""),
    "vendors": Field(text(200), required=False, default=""),
    "severity": Field(choice(*COMPAT_SEVERITIES)),
    "note": Field(NOTE),
    "source": Field(NOTE),
    "date": Field(year_month),
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
    # Beyond the dense Llama layout (issue 15), each optional with the Llama value as default
    # (engine/params.py ARCH_DEFAULTS says what each counts): mixture-of-experts ...
    "num_experts": Field(whole_count(0, 100_000), required=False, default=0),
    "experts_per_token": Field(whole_count(0, 100_000), required=False, default=0),
    "expert_intermediate_size": Field(whole_count(0, 10_000_000), required=False, default=0),
    "shared_intermediate_size": Field(whole_count(0, 10_000_000), required=False, default=0),
    "shared_expert_gate": Field(boolean, required=False, default=False),
    "first_dense_layers": Field(whole_count(0, 1_000), required=False, default=0),
    "moe_layer_step": Field(whole_count(1, 1_000), required=False, default=1),
    "router_bias": Field(boolean, required=False, default=False),
    "expert_bias": Field(boolean, required=False, default=False),
    # ... attention: biases on q/k/v/o, sinks, q/k norms, norms per layer, MLA, sliding window
    "attention_bias": Field(boolean, required=False, default=False),
    "attention_sinks": Field(boolean, required=False, default=False),
    "qk_norm": Field(boolean, required=False, default=False),
    "qk_norm_full": Field(boolean, required=False, default=False),
    "norms_per_layer": Field(whole_count(0, 16), required=False, default=2),
    "kv_lora_rank": Field(whole_count(0, 1_000_000), required=False, default=0),
    "q_lora_rank": Field(whole_count(0, 1_000_000), required=False, default=0),
    "qk_rope_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "qk_nope_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "v_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "sliding_window": Field(whole_count(0, 100_000_000), required=False, default=0),
    "sliding_window_layers": Field(whole_count(0, 1_000), required=False, default=0),
    # hybrid linear attention (Qwen3-Next, Qwen3.5: Gated DeltaNet layers between full-attention ones, which keep no
    # K/V but a fixed state per sequence; engine/params.py ARCH_DEFAULTS): how many layers are linear, their key and
    # value heads and head widths, the short convolution's kernel; the full-attention layers' gated output (q_proj
    # twice as wide: a sigmoid gate per head, Qwen3NextAttention)
    "linear_attention_layers": Field(whole_count(0, 1_000), required=False, default=0),
    "linear_num_key_heads": Field(whole_count(0, 10_000), required=False, default=0),
    "linear_num_value_heads": Field(whole_count(0, 10_000), required=False, default=0),
    "linear_key_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "linear_value_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "linear_conv_kernel_dim": Field(whole_count(0, 1_000), required=False, default=0),
    "attention_output_gate": Field(boolean, required=False, default=False),
    # Mamba2 layers (Granite 4.0-H, Nemotron-H, Bamba; engine/params.py ARCH_DEFAULTS and mamba_params): how many, their
    # heads, head width, state size, groups, convolution kernel and biases; Nemotron-H's blocks of one kind
    "mamba_layers": Field(whole_count(0, 1_000), required=False, default=0),
    "mamba_num_heads": Field(whole_count(0, 100_000), required=False, default=0),
    "mamba_head_dim": Field(whole_count(0, 10_000), required=False, default=0),
    "mamba_state_size": Field(whole_count(0, 10_000), required=False, default=0),
    "mamba_groups": Field(whole_count(0, 10_000), required=False, default=0),
    "mamba_conv_kernel": Field(whole_count(0, 1_000), required=False, default=0),
    "mamba_conv_bias": Field(boolean, required=False, default=False),
    "mamba_proj_bias": Field(boolean, required=False, default=False),
    "mamba_norm": Field(boolean, required=False, default=True),
    "mamba_parallel": Field(boolean, required=False, default=False),
    "mamba_chunk_size": Field(whole_count(1, 1_000_000), required=False, default=256),
    "mixer_free_layers": Field(whole_count(0, 1_000), required=False, default=0),
    "mlp_free_layers": Field(whole_count(0, 1_000), required=False, default=0),
    "mlp_ungated": Field(boolean, required=False, default=False),
    # a hybrid's layers in order, which the counts above do not order: what freeze tuning's last k layers are
    # (engine/params.py block_tail). Nemotron-H: its hybrid_override_pattern, one kind a block (M Mamba2, * attention,
    # - MLP, E experts); the others, each layer's mixer beside its MLP (M Mamba2, L Gated DeltaNet, * attention)
    "block_pattern": Field(optional(text(max_len=1000, pattern=re.compile("[" + re.escape("".join(BLOCK_KINDS)) + "]+"),
                                         what="a string of M, L, *, - and E (one letter a layer)")), required=False),
    # issue 25: a vision-language checkpoint's vision encoder + multimodal projector, i.e. the
    # checkpoint's total minus the language model's count (`params`, what the fields above give);
    # 0 for a text-only model. Not part of the architecture count the loader checks.
    "vision_params": Field(whole_count(0, 100_000_000_000_000), required=False, default=0),
    # issue 25: a checkpoint read from its files (catalog/checkpoints.py): the language model's
    # stored bytes (a GGUF's tensor table, safetensors headers) and the precision they are stored
    # in; an inference row at that precision takes these bytes instead of the arithmetic. Empty for
    # a catalog model (its config alone is known).
    "stored_weights_bytes": Field(optional(whole_count(0, 10**15)), required=False),
    "stored_precision": Field(optional(choice(*PRECISIONS)), required=False),
    "params": Field(number(0, 1e14, integer=True)),
    # derived by the loader (engine/params.py architecture_counts), never written by hand
    "active_params": Field(optional(number(0, 1e14, integer=True)), required=False),
    # unknown for a model read from a config.json (it has no date): left empty, never invented
    "release_date": Field(optional(iso_date), required=False),
    "source": Field(NOTE),
    "notes": Field(NOTE, required=False),
}

REFERENCE_METRICS = ("peak_bytes", "weights_bytes", "kv_cache_bytes", "model_states_bytes",
                     "trainable_params", "gpus_needed", "train_gpu_hours", "decode_tokens_per_s",
                     # issue 13: torch's own peak (torch.cuda.max_memory_allocated / memory_stats'
                     # active peak, what torchtune and most training logs print): the tensors' peak,
                     # without the CUDA context, cuBLAS workspace and allocator fragmentation
                     "allocated_peak_bytes",
                     # the LoRA adapters' own weights (trainable parameters x their dtype's bytes)
                     "adapter_bytes",
                     # issue 28: torch.cuda.max_memory_reserved (the tensors + the caching allocator's
                     # cache + the cuBLAS workspace; no CUDA context, no NCCL) and the whole process
                     # as nvidia-smi reads it (= peak_bytes, a name that says its counter)
                     "reserved_peak_bytes", "process_peak_bytes",
                     # optimum's benchmarks: torch's allocated peak + what nvidia-smi sees outside
                     # PyTorch's reserve (the CUDA context, extensions): no allocator cache
                     "alloc_ext_peak_bytes")
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
    # the software stack the figure was measured under (issue 13, engine/stacks.py); absent = hf
    "recipe": Field(choice(*SCENARIO_CHOICES["recipe"]), required=False),
}
# A reference's scenario is a scenario of the engine: its columns, choices and ranges come from
# engine/scenarios.py (the one description the CLI and the dashboard use too).
SCENARIO_KEYS = {
    "model": IDENT, "gpu": IDENT, "grad_checkpointing": boolean, "allow_long_context": boolean,
    "precision": choice(*PRECISIONS), "lora_targets": text(200), "headroom": number(0, 1, strict_low=False),
    "tokens": number(0, 1e16),
    "lora_dropout": number(0, 1, strict_low=False, strict_high=True),  # engine/scenarios.py FRACTION_COLUMNS
    **{col: choice(*options) for col, options in SCENARIO_CHOICES.items()},
    **{col: (choice(0, 1, 2, 3) if col == "zero" else number(low, high, strict_low=False, integer=True))
       for col, (low, high) in INT_RANGES.items()},
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
    if m.get("num_experts", 0) and not (0 < m.get("experts_per_token", 0) <= m["num_experts"]):
        raise CatalogError(file, label, "experts_per_token",
                           f"must be 1 to num_experts ({m['num_experts']}), got {m.get('experts_per_token', 0)}")
    if m.get("num_experts", 0) and not m.get("expert_intermediate_size", 0):
        raise CatalogError(file, label, "expert_intermediate_size", "is required (> 0) for a mixture-of-experts model")
    if m.get("sliding_window_layers", 0) > m["num_layers"]:
        raise CatalogError(file, label, "sliding_window_layers",
                           f"must be at most num_layers ({m['num_layers']}), got {m['sliding_window_layers']}")
    if bool(m.get("sliding_window_layers", 0)) != bool(m.get("sliding_window", 0)):
        raise CatalogError(file, label, "sliding_window", "and sliding_window_layers are given together (both > 0) or not at all")
    if m.get("linear_attention_layers", 0):
        if m["linear_attention_layers"] >= m["num_layers"]:
            raise CatalogError(file, label, "linear_attention_layers",
                               f"must be below num_layers ({m['num_layers']}: at least one full-attention layer), "
                               f"got {m['linear_attention_layers']}")
        for key in LINEAR_ATTENTION_FIELDS:
            if not m.get(key, 0):
                raise CatalogError(file, label, key, "is required (> 0) for a model with linear-attention layers")
        if m["linear_num_value_heads"] % m["linear_num_key_heads"]:
            raise CatalogError(file, label, "linear_num_value_heads",
                               f"must be a multiple of linear_num_key_heads ({m['linear_num_key_heads']}), "
                               f"got {m['linear_num_value_heads']}")
        if m.get("sliding_window_layers", 0) or m.get("kv_lora_rank", 0):
            raise CatalogError(file, label, "linear_attention_layers",
                               "is not modelled together with sliding-window layers or latent attention")
    if m.get("mamba_layers", 0) or m.get("mixer_free_layers", 0) or m.get("mlp_free_layers", 0):
        attention = m["num_layers"] - m.get("linear_attention_layers", 0) - m.get("mixer_free_layers", 0) \
            - (0 if m.get("mamba_parallel", False) else m.get("mamba_layers", 0))
        if attention < 1:
            raise CatalogError(file, label, "mamba_layers",
                               f"leaves {attention} attention layers of num_layers ({m['num_layers']}; "
                               f"{m.get('mamba_layers', 0)} Mamba2, {m.get('linear_attention_layers', 0)} linear-attention, "
                               f"{m.get('mixer_free_layers', 0)} MLP alone): a model without attention is not modelled; "
                               "accepted: at least one attention layer")
        if m.get("mlp_free_layers", 0) > m["num_layers"] - m.get("mixer_free_layers", 0):
            raise CatalogError(file, label, "mlp_free_layers", f"must be at most the layers with a mixer "
                                                               f"({m['num_layers'] - m.get('mixer_free_layers', 0)}), "
                                                               f"got {m['mlp_free_layers']}")
    pattern = m.get("block_pattern")
    if pattern:
        kinds = {"mamba_layers": pattern.count("M"), "linear_attention_layers": pattern.count("L"),
                 "mixer_free_layers": pattern.count("-") + pattern.count("E")}
        if m.get("mixer_free_layers", 0) or m.get("mlp_free_layers", 0):  # (Nemotron-H's one-kind blocks)
            kinds["mlp_free_layers"] = pattern.count("M") + pattern.count("*")
        if m.get("mamba_parallel", False):
            raise CatalogError(file, label, "block_pattern", "is not read for a model whose Mamba2 mixers run beside "
                                                             "attention (mamba_parallel: every layer alike); accepted: "
                                                             "none")
        if len(pattern) != m["num_layers"]:
            raise CatalogError(file, label, "block_pattern", f"has {len(pattern)} blocks where num_layers is "
                                                             f"{m['num_layers']}; accepted: one letter a layer")
        for key, count in kinds.items():
            if m.get(key, 0) != count:
                raise CatalogError(file, label, "block_pattern", f"has {count} blocks of the kind {key} counts, "
                                                                 f"where {key} is {m.get(key, 0)}; accepted: a pattern "
                                                                 "that agrees with the counts")
    if m.get("mamba_layers", 0):
        for key in MAMBA_FIELDS[:5]:
            if not m.get(key, 0):
                raise CatalogError(file, label, key, "is required (> 0) for a model with Mamba2 layers")
        if m["mamba_num_heads"] % m["mamba_groups"]:
            raise CatalogError(file, label, "mamba_num_heads", f"must be a multiple of mamba_groups ({m['mamba_groups']}), "
                                                               f"got {m['mamba_num_heads']}")
        if m.get("sliding_window_layers", 0) or m.get("kv_lora_rank", 0):
            raise CatalogError(file, label, "mamba_layers",
                               "is not modelled together with sliding-window layers or latent attention")
    if m.get("kv_lora_rank", 0) and not (m.get("qk_rope_head_dim", 0) and m.get("v_head_dim", 0)):
        raise CatalogError(file, label, "kv_lora_rank", "latent attention needs qk_rope_head_dim and v_head_dim (> 0)")
    counts = architecture_counts(m)
    derived = int(counts["total"])
    if derived == m["params"]:
        m["active_params"] = int(counts["active"])
    if derived != m["params"]:
        raise CatalogError(file, label, "params",
                           f"the architecture gives {derived:,} parameters but the entry says {m['params']:,}; check the config fields")


def check_gpu(g: dict, file: str) -> None:
    label = f"'{g['id']}'"
    if g["usable_memory_bytes"] > g["memory_gb"] * 1.1e9 * 1.08:
        raise CatalogError(file, label, "usable_memory_bytes",
                           f"{g['usable_memory_bytes']:,} bytes is more than the card's {g['memory_gb']} GB")


# A price is a quote someone saw: dated at the latest this month. Checked on an entry the user adds
# (the Catalog page, UserCatalog.add_gpu), not on load, so that a file written on a machine whose
# clock is ahead still loads everywhere.
PRICE_DATE_FIELDS = ("price_date", "cloud_date", "price_used_date")


def check_dates_not_future(g: dict, file: str, today: date | None = None) -> None:
    today = today or date.today()
    this_month = f"{today.year:04d}-{today.month:02d}"
    for field in PRICE_DATE_FIELDS:
        value = g.get(field)
        if not value:
            continue
        value = str(value)
        if value[:7] > this_month[:len(value[:7])]:  # 'YYYY' compared with the year, 'YYYY-MM' with the month
            raise CatalogError(file, f"'{g['id']}'", field,
                               f"{value!r} is in the future; accepted: the month the price was seen, "
                               f"{this_month} at the latest")


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
    if "recipe" in sc:  # one place for it: the reference's own `recipe` field
        raise CatalogError(file, label, "scenario.recipe", "give the recipe as the reference's `recipe` field, not in its scenario")
    if "model" not in sc:
        raise CatalogError(file, label, "scenario.model", "is required but missing")
    if sc["model"] not in model_ids:
        raise CatalogError(file, label, "scenario.model", f"{sc['model']!r} is not a catalog model id")
    if "gpu" in sc and sc["gpu"] not in gpu_ids:
        raise CatalogError(file, label, "scenario.gpu", f"{sc['gpu']!r} is not a catalog GPU id")


# Bounds on a YAML document. The shipped files are ~150 KB together, with no aliases and a
# nesting depth under 10; the largest document is a user's own catalog (catalog/store.py),
# whose every GPU takes ~600 bytes and ~55 values: 16 MiB holds ~25,000 GPUs, far more than
# any fleet, and parses in seconds, while a file that is bigger (or /dev/zero) cannot
# exhaust memory. The node cap follows: such a catalog has ~1.5 million values.
MAX_YAML_BYTES = 16 * 2**20
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 2_000_000  # values after alias expansion
MAX_YAML_DEPTH = 50
# The only tags a catalog needs: YAML's core schema (plus timestamps, which safe_load makes dates).
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")}

_TAG = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _INT, _FLOAT, _TIMESTAMP, _SEQ, _MAP = (
    _TAG + t for t in ("str", "null", "bool", "int", "float", "timestamp", "seq", "map"))
_SCALAR_TAGS = PLAIN_TAGS - {_SEQ, _MAP}
# YAML 1.1 plain-scalar resolution and construction, exactly as yaml.safe_load does them.
_RESOLVERS = yaml.resolver.Resolver.yaml_implicit_resolvers
_SAFE = yaml.constructor.SafeConstructor()
_BUILD = {
    _NULL: lambda node: None,
    _BOOL: lambda node: _SAFE.bool_values[node.value.lower()],
    _INT: _SAFE.construct_yaml_int,
    _FLOAT: _SAFE.construct_yaml_float,
    _TIMESTAMP: _SAFE.construct_yaml_timestamp,
}


class _PyParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's pure-Python event parser (the fallback when libyaml is not installed)."""

    def __init__(self, stream):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


def yaml_parser(text: str, data: bytes):
    """The event parser for a document: libyaml's when PyYAML has it (fed the UTF-8 bytes),
    else the pure-Python one."""
    return _CParser(data) if _CParser is not None else _PyParser(text)


def _where(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_TAG):] if tag.startswith(_TAG) else tag


def _resolve(value: str) -> str:
    """The tag of a plain (unquoted) scalar, as PyYAML's Resolver gives it."""
    for tag, regexp in _RESOLVERS.get(value[0] if value else "", []) + _RESOLVERS.get(None, []):
        if regexp.match(value):
            return tag
    return _STR


class _Frame:
    """An open sequence or mapping while the events are walked."""
    __slots__ = ("value", "anchor", "size", "is_map", "key", "key_mark", "merge", "merges")

    def __init__(self, value, anchor, is_map):
        self.value, self.anchor, self.size, self.is_map = value, anchor, 1, is_map
        self.key, self.key_mark = _NO_KEY, None  # a mapping's pending key, until its value comes
        self.merge = False  # the pending key is a merge key (<<)
        self.merges: list = []


_NO_KEY = object()


def _load_events(parser, name: str, duplicates: list | None = None) -> Any:
    """Walk the parser's events once: refuse what a catalog must not hold (see the module
    docstring) and build the document's value as yaml.safe_load would. `duplicates`: a list that
    takes a key given twice in one entry (a mapping in a top-level list, `gpus: [{...}]`) as
    (the entry, the key, its second mark, its second value), the entry keeping the first value,
    so that the caller sets that one entry aside; a key twice anywhere else is still refused."""
    anchors: dict[str, tuple[Any, int]] = {}  # anchor -> (value, number of values it expands to)
    stack: list[_Frame] = []
    memo: dict[str, Any] = {}  # plain scalar -> its value (they repeat: true, nvidia, 2024-05, ...)
    root = None
    aliases = documents = 0

    def refuse(mark, problem):
        raise CatalogError(name, None, None, f"is not accepted as catalog YAML{_where(mark)}: {problem}")

    def invalid(mark, problem):
        raise CatalogError(name, None, None, f"is not valid YAML{_where(mark)}: {problem}")

    def check_tag(tag, mark, allowed, kind):
        if tag is None or tag == "!":
            return
        if tag not in PLAIN_TAGS:
            refuse(mark, f"tag {show(_short_tag(tag))} is not allowed; only plain values "
                         "(text, numbers, true/false, null, lists and mappings)")
        if tag not in allowed:
            invalid(mark, f"tag {show(_short_tag(tag))} cannot be used on {kind}")

    def add(value, size, anchor, mark, merge=False):
        nonlocal root
        if anchor is not None:
            if anchor in anchors:
                invalid(mark, f"anchor &{one_line(anchor, 40)} is defined twice; give each anchor its own name")
            anchors[anchor] = (value, size)
        if size > MAX_YAML_NODES:
            refuse(mark, f"it expands to more than {MAX_YAML_NODES:,} values (aliases); a catalog needs far fewer")
        if not stack:
            root = value
            return
        frame = stack[-1]
        frame.size += size
        if frame.size > MAX_YAML_NODES:
            refuse(mark, f"it expands to more than {MAX_YAML_NODES:,} values (aliases); a catalog needs far fewer")
        if not frame.is_map:
            frame.value.append(value)
        elif frame.key is _NO_KEY:  # this value is a key
            if isinstance(value, (list, dict)):
                invalid(mark, "a mapping key must be a single value (text or a number), not a list or a mapping")
            frame.key, frame.key_mark, frame.merge = value, mark, merge
        else:
            if frame.merge:
                frame.merges.append((value, frame.key_mark))
            elif frame.key in frame.value:
                if duplicates is None or len(stack) != 3 or stack[0].is_map is False or stack[1].is_map:
                    refuse(frame.key_mark, f"key {show(frame.key)} appears twice in the same mapping; keep one")
                duplicates.append((frame.value, frame.key, frame.key_mark, value))
            else:
                frame.value[frame.key] = value
            frame.key = _NO_KEY

    def merged(frame):
        out: dict = {}
        for value, mark in frame.merges:
            sources = value[::-1] if isinstance(value, list) else [value]  # the first of a list wins
            for source in sources:
                if not isinstance(source, dict):
                    invalid(mark, "a merge key (<<) needs a mapping or a list of mappings")
                out.update(source)
        out.update(frame.value)
        return out

    get_event = parser.get_event
    while True:
        event = get_event()
        cls = event.__class__
        if cls is ScalarEvent:
            value, tag = event.value, event.tag
            merge = False
            if (tag is None or tag == "!") and event.implicit[0]:  # plain: YAML 1.1 resolution (cached per text)
                try:
                    built = memo[value]
                except KeyError:
                    tag = _resolve(value)
                    if tag in _BUILD:
                        try:
                            built = _BUILD[tag](yaml.ScalarNode(tag, value))
                        except (ValueError, OverflowError) as exc:
                            hint = " (write dates quoted, as real 'YYYY-MM-DD' dates)" if tag == _TIMESTAMP else ""
                            invalid(event.start_mark, f"{exc}{hint}")
                    else:  # text; also '<<' (a merge key), '=' and the like, which safe_load has no value for
                        built = value
                    if len(value) <= 64:
                        memo[value] = built
                merge = value == "<<" and stack and stack[-1].is_map and stack[-1].key is _NO_KEY
            elif tag is None or tag == "!" or tag == _STR:
                built = value
            else:
                check_tag(tag, event.start_mark, _SCALAR_TAGS, "a single value")
                try:
                    built = _BUILD[tag](yaml.ScalarNode(tag, value))
                except (ValueError, OverflowError, KeyError, AttributeError, TypeError):
                    invalid(event.start_mark, f"{show(value)} is not a valid {_short_tag(tag)} value")
            add(built, 1, event.anchor, event.start_mark, merge)
        elif cls is MappingStartEvent or cls is SequenceStartEvent:
            is_map = cls is MappingStartEvent
            check_tag(event.tag, event.start_mark, {_MAP} if is_map else {_SEQ}, "a mapping" if is_map else "a list")
            if len(stack) >= MAX_YAML_DEPTH:
                refuse(event.start_mark, f"nested deeper than {MAX_YAML_DEPTH} levels; a catalog needs a few")
            stack.append(_Frame({} if is_map else [], event.anchor, is_map))
        elif cls is MappingEndEvent or cls is SequenceEndEvent:
            frame = stack.pop()
            add(merged(frame) if frame.merges else frame.value, frame.size, frame.anchor, event.start_mark)
        elif cls is AliasEvent:
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                refuse(event.start_mark, f"more than {MAX_YAML_ALIASES} aliases (*name); a catalog needs few or none")
            if event.anchor not in anchors:
                refuse(event.start_mark, f"alias *{one_line(event.anchor, 40)} refers to an anchor that is not "
                                         "defined before it, or to itself")
            value, size = anchors[event.anchor]
            add(value, size, None, event.start_mark)
        elif cls is DocumentStartEvent:
            documents += 1
            if documents > 1:
                invalid(event.start_mark, "expected a single document in the stream, but found another document")
        elif cls is StreamEndEvent:
            return root


def parse_yaml(raw: str | bytes, name: str, duplicates: list | None = None) -> Any:
    """Bounded, checked parse of a document's text (one pass, see _load_events); every problem
    is a one-line CatalogError. Gives what yaml.safe_load would, or refuses. `duplicates`: see
    _load_events (the user catalog sets an entry with a key given twice aside alone)."""
    if len(raw) > MAX_YAML_BYTES:
        raise CatalogError(name, None, None, f"is {len(raw):,} bytes; a catalog file is at most {MAX_YAML_BYTES:,}")
    if isinstance(raw, (bytes, bytearray)):
        data = bytes(raw)
        try:
            raw = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogError(name, None, None, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8") from None
    else:
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no file could hold it
            line = raw.count("\n", 0, exc.start)
            column = exc.start - (raw.rfind("\n", 0, exc.start) + 1)
            raise CatalogError(name, None, None, f"is not valid text at line {line + 1}, column {column + 1}: it has "
                                                 f"U+{ord(raw[exc.start]):04X}, a lone surrogate, which is not Unicode "
                                                 "text and cannot be saved as UTF-8") from None
    if raw.startswith("\ufeff"):
        raw, data = raw[1:], data[3:]  # a byte-order mark some editors add
    parser = yaml_parser(raw, data)
    try:
        return _load_events(parser, name, duplicates)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError(name, None, None, f"is not valid YAML{_where(mark)}: {problem}") from None
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()


def file_kind(mode: int) -> str:
    """What a file is, from its st_mode, for messages: 'a directory', 'a named pipe (FIFO)', ..."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


class FileTooLarge(CatalogError):
    """A file is bigger than its reader accepts (read_regular_file's limit)."""


# Open without blocking (a FIFO swapped in after the check must not hang open()), never inherited.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def _not_regular(path, name: str, mode: int, accepted: str) -> CatalogError:
    link = ""
    try:
        if os.path.islink(path):
            link = f" (a link to {os.path.realpath(path)})"
    except (OSError, ValueError):
        pass
    return CatalogError(name, None, None, f"is {file_kind(mode)}{link}, not a regular file; accepted: {accepted}")


def regular_file_stat(path: str | os.PathLike, accepted: str, label: str | None = None) -> os.stat_result:
    """os.stat of a path (symlinks followed) that must be a regular file; CatalogError (one
    line, naming the path and what is accepted) when it is anything else or cannot be looked
    at. FileNotFoundError is raised as is (for the caller to decide what missing means)."""
    if str(path) == "":
        raise CatalogError(f"{label or 'path'} ''", None, None, f"is not a file; accepted: {accepted}")
    name = label or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise CatalogError(name, None, None, f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, name, info.st_mode, accepted)
    return info


def read_regular_file(path: str | os.PathLike, limit: int, what: str, accepted: str,
                      label: str | None = None) -> bytes:
    """The bytes of a regular file (symlinks followed) of at most `limit` bytes.

    Anything else is refused by name before a byte is read, as a one-line CatalogError:
    a FIFO would block open() and read() until a writer comes, /dev/zero or /dev/urandom
    would be read until memory runs out, a directory or a socket cannot be read. The kind
    is checked with os.stat before opening (opening some devices has effects), the file is
    opened non-blocking and checked again with fstat (it may have been swapped in between),
    and the read stops after `limit` bytes whatever the size said (FileTooLarge). A missing
    file raises FileNotFoundError (a missing user catalog is an empty one). `what` names the
    kind of file in the size message ("a config.json"), `accepted` what would do instead.
    """
    name = label or str(path)
    info = regular_file_stat(path, accepted, label)
    if info.st_size > limit:
        raise FileTooLarge(name, None, None, f"is {info.st_size:,} bytes; {what} is at most {limit:,}")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CatalogError(name, None, None, f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, name, info.st_mode, accepted)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew since it was measured
                raise FileTooLarge(name, None, None, f"is more than {limit:,} bytes; {what} is at most {limit:,}")
        return b"".join(chunks)
    except OSError as exc:
        raise CatalogError(name, None, None, f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def yaml_label(path: Path) -> str:
    """How messages name a catalog YAML file: catalog/gpus.yaml for a shipped one."""
    return path.name if path.parent.name != "catalog" else f"catalog/{path.name}"


def read_yaml(path: Path, text_: str | bytes | None = None) -> Any:
    """Bounded, checked parse of a file (or of its text already read); any problem becomes a
    CatalogError naming the file."""
    name = yaml_label(path)
    if text_ is None:
        try:
            text_ = read_regular_file(path, MAX_YAML_BYTES, "a catalog file", "a YAML file", label=name)
        except FileNotFoundError as exc:
            raise CatalogError(name, None, None, f"cannot be read: {exc.strerror or exc}") from None
    return parse_yaml(text_, name)


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
