"""The user catalog: the GPUs and models a user adds, kept in one YAML file of their own.

Where: $LLM_PLANNER_USER_CATALOG, or ~/.llm-planner/user_catalog.yaml. The file has the same
shape as the shipped catalog (`gpus:` and `models:` lists) and every entry is validated exactly
like catalog/gpus.yaml and catalog/models.yaml (catalog/schema.py: the same fields, ranges and
cross-checks, the same bounded YAML parsing). User ids may not reuse a shipped id.

Writes never leave a half-written file and never lose another writer's entry:
- every change re-reads the file, merges, validates, writes a temporary file in the same
  folder (flushed to disk) and renames it over the old one with os.replace (atomic: readers
  see the old file or the new one, never a mix);
- writers in one process take a per-file threading lock; writers in different processes also
  take an advisory lock on `<file>.lock` (fcntl.flock, where the platform has it), so the
  re-read / merge / rename runs one at a time.

Entries are loaded one by one (issue 24: the user's file survives the schema):
- an entry written by an older schema, which lacks a field added since, is read with that
  field's value from BACKFILL (below: one table, a reason per field); where the filled value
  is one a user reads (a required field, a placeholder date made unknown) the load also gives
  a one-line note per entry saying what was filled in (UserCatalog.read().filled);
- an entry that still does not validate (a bad value, an unknown field, a duplicate id, a
  failed cross-check) is set aside ALONE: named in one line with the file, its id (or
  position), the field, the bad value and what is accepted (UserCatalog.read().set_aside);
  every other entry loads. The file is not renamed, and a later save keeps the set-aside
  entries in the file exactly as read, after the valid entries of their list, so they are
  never silently deleted: they keep being named at every load until fixed or removed by hand.
  (One that YAML cannot write back as read, such as text with a lone surrogate, is left out of
  the new file, and the file as it was is first copied byte for byte to
  `<name>.rejected-<timestamp>.yaml`, which UserCatalog.rejected() and the Catalog page list.)
  (An export holds only the entries that load; an import still takes a document only when
  every entry of it validates.)
A file that is not a catalog at all (not YAML, not UTF-8, too big, not a mapping of `gpus:` /
`models:` lists) is never dropped or overwritten: it is renamed to `<name>.corrupt-<timestamp>`
next to it and reported with UserCatalogCorrupt (one line naming the file, the problem and where
the file was kept); the user catalog then starts empty and the shipped catalog is unaffected. A
path that is not a regular file (a FIFO, /dev/zero, a directory, or a symlink to one) is refused
by name and left alone, never read (it could block or never end) and never moved. A file that
cannot be written (a read-only folder, a full disk) is a UserCatalogWriteError naming it.

`catalog_frames` is the one way to the merged catalog: the shipped frames, the saved entries
and a caller's extra (session) records, each with its `origin`; Catalog.gpus/models
(include_user=True), `with_user_entries` and `merged_frames` all go through it. The file is
parsed once while it is unchanged, however many frames are asked for.
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from catalog.schema import (
    GPU_FIELDS,
    MAX_YAML_BYTES,
    MODEL_FIELDS,
    CatalogError,
    Field,
    FileTooLarge,
    check_dates_not_future,
    check_gpu,
    check_model,
    entry_label,
    one_line,
    optional,
    parse_yaml,
    read_regular_file,
    regular_file_stat,
    show,
    text as text_field,
    top_level,
    validate_entries,
)
from catalog.shipped import shipped_catalog, shipped_ids

try:  # POSIX only; elsewhere write-temp-then-rename still keeps the file whole
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

# libyaml's emitter when PyYAML has it (a big catalog is written in a third of the time), the
# same safe representer either way.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

ENV_VAR = "LLM_PLANNER_USER_CATALOG"
DEFAULT_PATH = "~/.llm-planner/user_catalog.yaml"
KINDS = ("gpus", "models")
# The user catalog file is read at most this big: MAX_YAML_BYTES, 16 MiB (~25,000 GPUs), far
# beyond a real fleet; a bigger file (or /dev/zero behind a symlink) is refused, not read.
MAX_USER_CATALOG_BYTES = MAX_YAML_BYTES
ACCEPTED_PATH = f"a YAML file (set {ENV_VAR} to the path of a regular file)"
_KIND_NAMES = {"gpu": "gpus", "gpus": "gpus", "model": "models", "models": "models"}
# A model saved from the dashboard's "model from Hugging Face or a file" field (issue 25) keeps
# the Hub commit it was resolved at in `revision` (its `source` names the repo, the file or the
# folder). The field is the user file's only: the shipped models.yaml pins no revision, and the
# merged frames keep the shipped columns (the commit is in `source` there too).
USER_MODEL_FIELDS = {**MODEL_FIELDS, "revision": Field(optional(text_field(200)), required=False, default=None)}
FIELDS = {"gpus": GPU_FIELDS, "models": USER_MODEL_FIELDS}
CHECKS = {"gpus": check_gpu, "models": check_model}
SINGULAR = {"gpus": "GPU", "models": "model"}
HEADER = (
    "# LLM hardware planner: your own GPUs and models (the shipped catalog is not in this file).\n"
    "# Every entry is validated like catalog/gpus.yaml and catalog/models.yaml. An entry that does\n"
    "# not validate is set aside (named at every load) and kept here as it was, after the others;\n"
    "# a file that is not a catalog at all is renamed to <name>.corrupt-<timestamp>.\n"
)


# ---- entries written by an older schema (issue 24) ---------------------------------------------
# What an entry saved before a field existed is read with. From `git log -p` of catalog/schema.py
# and catalog/store.py: the user file began at b749624 (2026-11-29, GPU fields of the first
# schema b363dab, models with qkv_bias); every field added since is optional, so these values are
# also the fields' defaults (tests/test_user_catalog_schema.py holds them together and loads a file
# written by each version's code). `note`: the entry is named in a one-line note when the field is
# filled in, because the value is one a user reads as a fact about their own entry.


@dataclass(frozen=True)
class Backfill:
    value: Any  # what the entry is read with (never a number a user would read as measured)
    since: str  # the commit whose schema first had the field
    note: bool = False


USABLE_MEMORY_SOURCE_UNKNOWN = "not recorded (the entry was saved without a source for its usable memory)"

BACKFILL: dict[str, dict[str, Backfill]] = {
    "gpus": {
        # Required since the first schema (b363dab) and written by every version of this module,
        # but a file written by hand or by another tool may lack it (issue 24's report). It is a
        # citation, not a figure: a text saying it was not recorded is true. The figure itself,
        # usable_memory_bytes, is never filled in (an entry without it is set aside).
        "usable_memory_source": Backfill(USABLE_MEMORY_SOURCE_UNKNOWN, "b363dab", note=True),
        # Issue 14 (188f9d0): systems and used prices. None is "unknown", what every GPU had
        # before the fields existed; the planner then prices no system for it (NaN, never free).
        "architecture": Backfill(None, "188f9d0"),  # no compatibility rule names it, as before
        "form_factor": Backfill(None, "188f9d0"),  # unknown build; not guessed from the name
        "max_per_node": Backfill(None, "188f9d0"),  # no node limit known: the nodes stay unknown
        "node_interconnect": Backfill(None, "188f9d0"),  # unknown link inside a node
        "host_class": Backfill(None, "188f9d0"),  # no host priced: the system cost stays unknown
        "system_source": Backfill(None, "188f9d0"),  # nothing above was recorded, so no source
        "price_used_usd": Backfill(None, "188f9d0"),  # no used price known (never 0: free)
        "price_used_source": Backfill(None, "188f9d0"),  # no used price, so no source
        "price_used_date": Backfill(None, "188f9d0"),  # no used price, so no date
    },
    "models": {
        # b749624 (the user file's first version, which already wrote it when true): absent is
        # the Llama layout, no q/k/v biases
        "qkv_bias": Backfill(False, "b749624"),
        # Issue 15 (c5cbb93): layouts beyond the dense Llama one. Before it, the config.json
        # reader refused mixture-of-experts and the other layouts and the engine counted every
        # saved model as the dense Llama layout (a Mistral's note said its window was not
        # modelled), so each value below is what the entry was estimated with when it was saved.
        "num_experts": Backfill(0, "c5cbb93"),  # dense: no experts
        "experts_per_token": Backfill(0, "c5cbb93"),  # dense: none routed
        "expert_intermediate_size": Backfill(0, "c5cbb93"),  # dense: no expert MLP
        "shared_intermediate_size": Backfill(0, "c5cbb93"),  # dense: no shared expert
        "shared_expert_gate": Backfill(False, "c5cbb93"),  # dense: no gate
        "first_dense_layers": Backfill(0, "c5cbb93"),  # meaningful only with experts
        "moe_layer_step": Backfill(1, "c5cbb93"),  # meaningful only with experts (1: every layer)
        "router_bias": Backfill(False, "c5cbb93"),  # dense: no router
        "expert_bias": Backfill(False, "c5cbb93"),  # dense: no experts
        "attention_bias": Backfill(False, "c5cbb93"),  # Llama layout: no o/q/k/v biases beyond qkv_bias
        "attention_sinks": Backfill(False, "c5cbb93"),  # gpt-oss only, refused then
        "qk_norm": Backfill(False, "c5cbb93"),  # Qwen3 / Gemma 3 only, refused then
        "norms_per_layer": Backfill(2, "c5cbb93"),  # Llama layout: input + post-attention RMSNorm
        "kv_lora_rank": Backfill(0, "c5cbb93"),  # no latent attention (DeepSeek-V3, refused then)
        "q_lora_rank": Backfill(0, "c5cbb93"),  # no latent attention
        "qk_rope_head_dim": Backfill(0, "c5cbb93"),  # no latent attention
        "qk_nope_head_dim": Backfill(0, "c5cbb93"),  # no latent attention
        "v_head_dim": Backfill(0, "c5cbb93"),  # no latent attention
        "sliding_window": Backfill(0, "c5cbb93"),  # full attention: what was estimated then
        "sliding_window_layers": Backfill(0, "c5cbb93"),  # full attention on every layer
        # Issue 25 (5d61677): a vision tower beside the language model; none was counted before
        "vision_params": Backfill(0, "5d61677"),
        # Issue 25: a checkpoint's stored bytes and their precision; unknown before (the arithmetic)
        "stored_weights_bytes": Backfill(None, "e185fec"),
        "stored_precision": Backfill(None, "e185fec"),
        # Hybrid linear attention (Qwen3-Next, Qwen3.5), 2026-12-05: refused by the reader before, so every saved
        # model has none
        "linear_attention_layers": Backfill(0, "653f68d"),
        "linear_num_key_heads": Backfill(0, "653f68d"),
        "linear_num_value_heads": Backfill(0, "653f68d"),
        "linear_key_head_dim": Backfill(0, "653f68d"),
        "linear_value_head_dim": Backfill(0, "653f68d"),
        "linear_conv_kernel_dim": Backfill(0, "653f68d"),
        "attention_output_gate": Backfill(False, "653f68d"),
        # Mamba2 layers (Granite 4.0-H, Nemotron-H, Bamba), 2026-12-06: refused by the reader before, so every saved
        # model has none and one mixer and one gated MLP a layer
        "mamba_layers": Backfill(0, "f20d2e3"),
        "mamba_num_heads": Backfill(0, "f20d2e3"),
        "mamba_head_dim": Backfill(0, "f20d2e3"),
        "mamba_state_size": Backfill(0, "f20d2e3"),
        "mamba_groups": Backfill(0, "f20d2e3"),
        "mamba_conv_kernel": Backfill(0, "f20d2e3"),
        "mamba_conv_bias": Backfill(False, "f20d2e3"),
        "mamba_proj_bias": Backfill(False, "f20d2e3"),
        "mamba_norm": Backfill(True, "dc27e9d"),
        "mamba_parallel": Backfill(False, "dc27e9d"),
        "mamba_chunk_size": Backfill(256, "4d88e84"),
        "mixer_free_layers": Backfill(0, "f20d2e3"),
        "mlp_free_layers": Backfill(0, "f20d2e3"),
        "mlp_ungated": Backfill(False, "f20d2e3"),
        # Nemotron-H's block order, 2026-12-07: not kept before, so a saved model's freeze tuning counts its mean block
        "block_pattern": Backfill(None, "ca8aa5d"),
        # q/k norms over all heads (OLMo 2/3, MiniMax-M2), 2026-12-06: refused by the reader before, so every saved
        # model's q/k norms (if any) are per head
        "qk_norm_full": Backfill(False, "1c2c7fe"),
        # active_params (c5cbb93) is not filled in: check_model derives it from the fields above
    },
}

# A value an older version wrote in place of an unknown one: (kind, field, value, the text that
# marks the entry as that version's) -> read as unknown, with a note. Before 7b9506f a model read
# from a config.json got release_date 2000-01-01 and this sentence in its notes; the field has
# been optional since, and unknown is what such a model has today.
PLACEHOLDER_NOTE = "Release date unknown (a config.json has none): 2000-01-01 is a placeholder."
PLACEHOLDERS = (("models", "release_date", "2000-01-01", PLACEHOLDER_NOTE, "Release date unknown (a config.json has none)."),)


class UserCatalogCorrupt(CatalogError):
    """The user catalog file was unreadable or invalid; it was kept aside (see `kept_as`)."""

    def __init__(self, original: CatalogError, kept_as: Path | None):
        self.kept_as = kept_as
        where = f"the file was kept as {kept_as}" if kept_as else "the file was left in place"
        super().__init__(original.file, original.entry, original.field,
                         f"{one_line(original.problem, 300)}; {where} and the user catalog starts empty "
                         "(fix the file and import it to restore it)")


class UserCatalogWriteError(CatalogError):
    """The user catalog file could not be written (a read-only folder, a full disk): one line
    naming the file; `errno` is the OSError's, which is kept as __cause__."""

    def __init__(self, path: Path, exc: OSError):
        self.errno = exc.errno
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        super().__init__(str(path), None, None, f"cannot be written: {exc.strerror or exc}{where}; "
                                                f"nothing was changed (set {ENV_VAR} to a file in a folder you can write to)")


class UserCatalogWarning(UserWarning):
    """A problem with the user catalog that did not stop the shipped catalog from loading."""


def user_catalog_path() -> Path:
    """$LLM_PLANNER_USER_CATALOG, or ~/.llm-planner/user_catalog.yaml."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


def kind_name(kind: str) -> str:
    """'gpu' / 'gpus' -> 'gpus', 'model' / 'models' -> 'models'; anything else: CatalogError."""
    name = _KIND_NAMES.get(kind) if isinstance(kind, str) else None
    if name is None:
        raise CatalogError("user catalog", None, None, f"kind {show(kind)} is not accepted; accepted: gpu, model")
    return name


def _plain(value):
    """numpy scalars -> Python, NaN / NA -> None (records that come from a DataFrame row)."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _plain_record(record: Any, kind: str, label: str) -> dict:
    """Python values, and optional fields left at their default dropped: a record that already
    went through validate_entries (e.g. one a page validated and kept) validates again."""
    if not isinstance(record, dict):
        raise CatalogError(label, None, None, f"a new {SINGULAR[kind]} must be a mapping of fields, got {type(record).__name__}")
    fields = FIELDS[kind]
    out = {}
    for key, value in record.items():
        value = _plain(value)
        spec = fields.get(key) if isinstance(key, str) else None
        if spec is not None and not spec.required and value is spec.default:
            continue
        out[key] = value
    return out


def upgrade_entry(kind: str, item: Any, label: str, index: int) -> tuple[Any, str | None]:
    """An entry as an older schema wrote it -> as this one reads it (BACKFILL, PLACEHOLDERS),
    and a one-line note naming the entry and what was filled in (None when nothing a user
    reads was). Anything else about the entry is left for validation to judge."""
    if not isinstance(item, dict):
        return item, None
    missing = [(name, fill) for name, fill in BACKFILL[kind].items() if name not in item]
    notes = item.get("notes")
    marked = [(name, value, mark, repl) for k, name, value, mark, repl in PLACEHOLDERS
              if k == kind and name in item and str(item[name]) == value and isinstance(notes, str) and mark in notes]
    if not missing and not marked:
        return item, None
    out = dict(item)
    said = []
    for name, fill in missing:
        spec = FIELDS[kind][name]
        if spec.required or fill.value != spec.default:  # else validation gives the default itself
            out[name] = fill.value
        if fill.note:
            said.append(f"{name} was not in the entry (required since {fill.since}); read as {fill.value!r}")
    for name, value, mark, repl in marked:
        out[name] = None
        out["notes"] = out["notes"].replace(mark, repl)
        said.append(f"{name} {value!r} was a placeholder an older version wrote for an unknown value; read as unknown")
    if not said:
        return out, None
    return out, one_line(f"{label}: entry {entry_label(index, item)}: {'; '.join(said)}", 600)


def validate_document(doc: Any, label: str) -> dict[str, list[dict]]:
    """A parsed user-catalog document -> validated {'gpus': [...], 'models': [...]}; all or
    nothing (the first bad entry raises CatalogError). Entries an older schema wrote are
    upgraded first (upgrade_entry)."""
    top_level(doc, label, {"gpus": False, "models": False})
    out = {}
    for kind in KINDS:
        entries = doc.get(kind)
        if isinstance(entries, list):
            entries = [upgrade_entry(kind, item, label, i)[0] for i, item in enumerate(entries)]
        out[kind] = validate_entries([] if entries is None else entries, FIELDS[kind], label, kind)
        for record in out[kind]:
            CHECKS[kind](record, label)
    return out


@dataclass(frozen=True)
class SetAside:
    """One entry of the user catalog file that did not load: the others did. `raw` is the entry
    as it was read, written back unchanged by the next save."""
    kind: str  # 'gpus' or 'models'
    entry: str  # "'its-id'", or "#n" (its place in the list) when it has no usable id
    error: CatalogError  # names the file, the entry, the field, the bad value and what is accepted
    raw: Any

    def __str__(self) -> str:
        return (f"{self.error}; this {SINGULAR[self.kind]} was set aside (kept in the file as it is), "
                "every other entry loaded")


@dataclass
class UserCatalogLoad:
    """What UserCatalog.read() gives: the entries that load, the ones set aside, and one note
    per entry that was read with a field filled in ({'gpus': [line, ...], 'models': [...]})."""
    records: dict[str, list[dict]]
    set_aside: list[SetAside] = field(default_factory=list)
    filled: dict[str, list[str]] = field(default_factory=lambda: {kind: [] for kind in KINDS})

    def kept(self, kind: str) -> list[Any]:
        return [s.raw for s in self.set_aside if s.kind == kind]


def _one_entry(kind: str, item: Any, index: int, label: str) -> dict:
    """One entry validated alone (fields, then the cross-checks); CatalogError names it by its
    id, or by its place in the whole list."""
    try:
        clean = validate_entries([item], FIELDS[kind], label, kind)[0]
        CHECKS[kind](clean, label)
    except CatalogError as exc:
        if index and exc.entry == "#1":  # validate_entries saw a list of one
            raise CatalogError(exc.file, f"#{index + 1}", exc.field, exc.problem) from None
        raise
    return clean


class _KeyTwice(dict):
    """An entry read with a key given twice (parse_yaml's `duplicates`), holding the first value. A
    save cannot write it back as it was (a mapping holds a key once: one of the two values would be
    dropped unseen), so it is not a plain dict: _writes_back refuses it and the save first copies the
    file byte for byte to `<name>.rejected-<timestamp>.yaml`, as for any entry YAML cannot hold."""


def read_document(doc: Any, label: str, duplicates: list | None = None) -> UserCatalogLoad:
    """A parsed user catalog file -> the entries that load, each bad one set aside alone. Only a
    document that is not a mapping of `gpus:` / `models:` lists raises CatalogError. `duplicates`:
    parse_yaml's list of keys given twice in one entry; each such entry is set aside alone, named
    with the key, its line and both values (before, the whole file was renamed .corrupt and every
    entry of it left the catalog)."""
    top_level(doc, label, {"gpus": False, "models": False})
    twice = {}
    for entry, key, mark, second in duplicates or ():
        twice.setdefault(id(entry), (key, mark, second))
    result = UserCatalogLoad({})
    for kind in KINDS:
        entries = doc.get(kind)
        entries = [] if entries is None else entries
        if not isinstance(entries, list):
            raise CatalogError(label, None, kind, f"must be a list of entries, got {type(entries).__name__}")
        seen: set[str] = set()
        rows = []
        for i, item in enumerate(entries):
            if id(item) in twice:
                key, mark, second = twice[id(item)]
                where = f" (again at line {mark.line + 1})" if mark is not None else ""
                error = CatalogError(label, entry_label(i, item), str(key),
                                     f"appears twice in this entry{where}: {show(item[key])} and {show(second)}; "
                                     "accepted: the field once (keep the value you mean)")
                result.set_aside.append(SetAside(kind, error.entry, error, _KeyTwice(item)))
                continue
            upgraded, note = upgrade_entry(kind, item, label, i)
            try:
                clean = _one_entry(kind, upgraded, i, label)
                if clean["id"] in seen:
                    raise CatalogError(label, f"'{clean['id']}'", "id",
                                       f"duplicate id {clean['id']!r}: an earlier {SINGULAR[kind]} has it and is the "
                                       f"one used; accepted: an id used once in {kind}")
            except CatalogError as exc:
                result.set_aside.append(SetAside(kind, exc.entry or entry_label(i, item), exc, item))
                continue
            seen.add(clean["id"])
            rows.append(clean)
            if note:
                result.filled[kind].append(note)
        result.records[kind] = rows
    return result


def _writes_back(kind: str, raw: Any) -> bool:
    """Whether a set-aside entry written as YAML reads back the same (through parse_yaml)."""
    try:
        text = yaml.dump({kind: [raw]}, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=100,
                         default_flow_style=False)
        return parse_yaml(text, "a set-aside entry") == {kind: [raw]}
    except (CatalogError, UnicodeError, yaml.YAMLError, ValueError, TypeError, RecursionError):
        return False


def dump_document(data: dict[str, list[dict]], kept: dict[str, list[Any]] | None = None) -> str:
    """Validated records -> YAML text (optional fields left at their default are left out);
    `kept`: set-aside entries per kind, written after the records exactly as they were read."""
    doc = {}
    for kind in KINDS:
        rows = []
        for record in data.get(kind, []):
            row = {}
            for name, spec in FIELDS[kind].items():
                value = record.get(name, spec.default)
                if not spec.required and value == spec.default:
                    continue
                row[name] = value
            rows.append(row)
        doc[kind] = rows + list((kept or {}).get(kind, ()))
    return HEADER + yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=100,
                              default_flow_style=False)


_thread_locks: dict[str, threading.RLock] = {}
_thread_locks_guard = threading.Lock()


def _thread_lock(path: Path) -> threading.RLock:
    key = os.path.realpath(path)
    with _thread_locks_guard:
        return _thread_locks.setdefault(key, threading.RLock())


class UserCatalog:
    """The user's own GPUs and models, persisted in one YAML file (see the module docstring).

    shipped_ids: {'gpus': ids, 'models': ids} (or a callable returning it) that user ids may
    not reuse; default: the shipped catalog's ids.
    """

    def __init__(self, path: str | os.PathLike | None = None,
                 shipped_ids: dict[str, set] | Callable[[], dict[str, set]] | None = None):
        self.path = Path(path).expanduser() if path is not None else user_catalog_path()
        self._shipped_ids = shipped_ids

    # ---- public API ----------------------------------------------------------------------

    def load(self) -> dict[str, list[dict]]:
        """{'gpus': [...], 'models': [...]}: the entries that validate (read().records)."""
        return self.read().records

    def read(self) -> UserCatalogLoad:
        """The entries that validate, the ones set aside and the notes on filled-in fields (see
        the module docstring). Raises UserCatalogCorrupt (after keeping the file aside) when the
        file is not a catalog at all; a missing file is an empty catalog."""
        if not self.path.exists():
            return UserCatalogLoad({"gpus": [], "models": []})
        with self._locked(create=False):
            return self._read()

    def add_gpu(self, record: dict, replace: bool = False) -> dict:
        """Validate and store one GPU; returns the stored record. replace=True overwrites the
        user's own entry with the same id (a shipped id is always refused)."""
        return self._add("gpus", record, replace)

    def add_model(self, record: dict, replace: bool = False) -> dict:
        """Validate and store one model (e.g. catalog.user.model_from_config's record)."""
        return self._add("models", record, replace)

    def remove(self, kind: str, id: str) -> dict:
        """Remove the user's entry `id` of `kind` ('gpu' or 'model'); returns it."""
        kind = kind_name(kind)
        label = str(self.path)
        with self._locked(create=True):
            loaded = self._read()
            data = loaded.records
            kept = [r for r in data[kind] if r["id"] != id]
            if len(kept) == len(data[kind]):
                if id in self._shipped(kind):
                    raise CatalogError(label, f"'{id}'", None, f"is a shipped {SINGULAR[kind]}; only your own entries can be removed")
                have = ", ".join(r["id"] for r in data[kind]) or "none"
                raise CatalogError(label, None, None, f"has no {SINGULAR[kind]} {show(id)}; your {kind}: {have}")
            removed = next(r for r in data[kind] if r["id"] == id)
            data[kind] = kept
            self._write(loaded)
        return removed

    def export_yaml(self) -> str:
        """The user catalog as YAML text (what import_yaml accepts)."""
        return dump_document(self.load())

    def import_yaml(self, text: str | bytes, label: str = "imported YAML") -> dict[str, list[str]]:
        """Validate a whole document first, then merge it in (an entry replaces the user's own
        entry with the same id). Nothing is written unless every entry is valid. Returns the
        imported ids per kind."""
        doc = parse_yaml(text, label)
        if doc is None:
            raise CatalogError(label, None, None, "is empty; expected a mapping with gpus, models")
        incoming = validate_document(doc, label)
        for kind in KINDS:
            shipped = self._shipped(kind) if incoming[kind] else set()
            for record in incoming[kind]:
                if record["id"] in shipped:
                    raise CatalogError(label, f"'{record['id']}'", "id", self._collision(kind, record["id"]))
        with self._locked(create=True):
            loaded = self._read()
            data = loaded.records
            for kind in KINDS:
                new_ids = {r["id"] for r in incoming[kind]}
                data[kind] = [r for r in data[kind] if r["id"] not in new_ids] + incoming[kind]
            if any(incoming.values()):
                self._write(loaded)
        return {kind: [r["id"] for r in incoming[kind]] for kind in KINDS}

    def quarantined(self) -> list[Path]:
        """Corrupt files kept aside, oldest first (a page can keep telling the user about them)."""
        if not self.path.parent.is_dir():
            return []
        return sorted(self.path.parent.glob(self.path.name + ".corrupt-*"))

    # ---- internals -------------------------------------------------------------------------

    def _shipped(self, kind: str) -> set:
        ids = self._shipped_ids
        if ids is None:
            ids = shipped_ids()
        if callable(ids):
            ids = ids()
        return set(ids.get(kind, ()))

    @staticmethod
    def _collision(kind: str, ident: str) -> str:
        return (f"{ident!r} is the id of a shipped {SINGULAR[kind]}; user ids must differ from shipped ids "
                f"(e.g. {ident}-custom)")

    def _add(self, kind: str, record: dict, replace: bool) -> dict:
        label = "new " + SINGULAR[kind]
        clean = validate_entries([_plain_record(record, kind, label)], FIELDS[kind], label, kind)[0]
        CHECKS[kind](clean, label)
        if kind == "gpus":
            check_dates_not_future(clean, label)
        ident = clean["id"]
        if ident in self._shipped(kind):
            raise CatalogError(label, f"'{ident}'", "id", self._collision(kind, ident))
        with self._locked(create=True):
            loaded = self._read()  # re-read: another writer may have changed the file
            data = loaded.records
            ids = [r["id"] for r in data[kind]]
            if ident in ids and not replace:
                raise CatalogError(label, f"'{ident}'", "id",
                                   f"{ident!r} is already in your user catalog ({self.path}); remove it first or replace it")
            data[kind] = [r for r in data[kind] if r["id"] != ident] + [clean]
            self._write(loaded)
        return clean

    def _refuse_special_file(self) -> None:
        """A path that exists but is not a regular file (FIFO, device, directory) is refused
        before anything opens it or creates a lock file beside it."""
        try:
            regular_file_stat(self.path, ACCEPTED_PATH)
        except FileNotFoundError:
            pass

    @contextmanager
    def _locked(self, create: bool):
        self._refuse_special_file()
        with _thread_lock(self.path):
            fd = None
            if fcntl is not None:
                try:
                    if create:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
                except OSError:
                    fd = None  # a read-only folder: reading still works, writing reports its error
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)

    def _read(self) -> UserCatalogLoad:
        """Read and validate the file (the caller holds the lock). A file that cannot be read
        (permissions) is reported and left alone; one that is not a catalog is kept aside; a
        bad entry is set aside alone (read_document)."""
        label = str(self.path)
        try:
            raw = read_regular_file(self.path, MAX_USER_CATALOG_BYTES, "a catalog file", ACCEPTED_PATH)
        except FileNotFoundError:
            return UserCatalogLoad({"gpus": [], "models": []})
        except FileTooLarge as exc:
            raise UserCatalogCorrupt(exc, self._keep_aside()) from None
        # any other CatalogError (not a regular file, no permission): reported, the file left alone
        try:
            twice: list = []
            doc = parse_yaml(raw, label, duplicates=twice)
            if doc is None:  # empty, or only comments: an empty catalog
                return UserCatalogLoad({"gpus": [], "models": []})
            return read_document(doc, label, twice)
        except CatalogError as exc:
            raise UserCatalogCorrupt(exc, self._keep_aside()) from None

    def _keep_aside(self) -> Path | None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in range(1000):
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}" + (f"-{n}" if n else ""))
            if not target.exists():
                break
        try:
            os.replace(self.path, target)
        except FileNotFoundError:
            return None
        except OSError:
            return None  # could not move it: it stays where it is, and is still never overwritten
        return target

    def rejected(self) -> list[Path]:
        """Byte-exact copies of the file kept by a save that could not write a set-aside entry
        back as it was read (see _write), oldest first."""
        if not self.path.parent.is_dir():
            return []
        return sorted(self.path.parent.glob(self.path.name + ".rejected-*.yaml"))

    def _write(self, loaded: UserCatalogLoad) -> None:
        """The records, and the set-aside entries as they were read (never dropped by a save).
        A set-aside entry that cannot be written back as read (text YAML cannot hold, such as
        a lone surrogate an older version let in) is not written; the file as it was is first
        copied, byte for byte, to `<name>.rejected-<timestamp>.yaml` (UserCatalog.rejected())."""
        kept = {kind: loaded.kept(kind) for kind in KINDS}
        writable = {kind: [raw for raw in kept[kind] if _writes_back(kind, raw)] for kind in KINDS}
        try:
            if writable != kept:
                self._copy_rejected()
            self._replace_file(dump_document(loaded.records, writable))
        except OSError as exc:
            raise UserCatalogWriteError(self.path, exc) from exc

    def _copy_rejected(self) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in range(1000):
            target = self.path.with_name(f"{self.path.name}.rejected-{stamp}" + (f"-{n}" if n else "") + ".yaml")
            if not target.exists():
                break
        raw = read_regular_file(self.path, MAX_USER_CATALOG_BYTES, "a catalog file", ACCEPTED_PATH)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        return target

    def _replace_file(self, text: str) -> None:
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:  # make the rename itself durable (POSIX)
            dfd = os.open(folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)


# ---- the merged catalog: shipped + saved + extra entries ----------------------------------------

ORIGINS = ("shipped", "user", "session")  # the `origin` column of the merged frames
_saved_cache: dict[str, tuple[tuple, UserCatalogLoad]] = {}  # path -> (file signature, what it loads)
_saved_cache_lock = threading.Lock()


def _signature(path: Path) -> tuple | None:
    """What identifies one version of a regular file: a write replaces it (new inode) and
    changes its size or times. None when it is missing or not a regular file."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _saved_records(store: UserCatalog) -> UserCatalogLoad:
    """store.read(), parsed once per version of the file: the CLI asks for GPUs and models
    one after the other, and a big user catalog must not be parsed twice. The lists are
    shared: callers read them, never change them."""
    key = os.path.realpath(store.path)
    before = _signature(store.path)
    if before is not None:
        with _saved_cache_lock:
            hit = _saved_cache.get(key)
        if hit is not None and hit[0] == before:
            return hit[1]
    data = store.read()
    if before is not None and _signature(store.path) == before:  # unchanged while it was read
        with _saved_cache_lock:
            if len(_saved_cache) >= 8:
                _saved_cache.clear()
            _saved_cache[key] = (before, data)
    return data


def _extra_records(kind: str, records, shipped: set, problems: list[str]) -> list[dict]:
    """A caller's own records of one kind, validated like the YAML (a later one replaces an
    earlier one with its id); an invalid one, or one reusing a shipped id, is a problem."""
    label = "this session"
    out: dict[str, dict] = {}
    for record in records or []:
        try:
            clean = validate_entries([_plain_record(record, kind, label)], FIELDS[kind], label, kind)[0]
            CHECKS[kind](clean, label)
        except CatalogError as exc:
            problems.append(f"{exc} (left out)")
            continue
        if clean["id"] in shipped:
            problems.append(f"{label}: entry '{clean['id']}': is the id of a shipped {SINGULAR[kind]}; "
                            "the shipped entry is used")
            continue
        out.pop(clean["id"], None)
        out[clean["id"]] = clean
    return list(out.values())


def _with_records(frame: pd.DataFrame, kind: str, rows: list[tuple[dict, str]]) -> pd.DataFrame:
    """The shipped frame with `origin` 'shipped', then the rows (record, origin) in the
    shipped frame's columns and dtypes."""
    out = frame.assign(origin="shipped")
    if not rows:
        return out
    added = pd.DataFrame([record for record, _ in rows], columns=list(FIELDS[kind]))
    for col in frame.columns:
        if col not in added.columns:
            added[col] = None
        try:
            added[col] = added[col].astype(frame[col].dtype)
        except (TypeError, ValueError):
            pass
    added = added[list(frame.columns)].assign(origin=[origin for _, origin in rows])
    return pd.concat([out, added], ignore_index=True)


def catalog_frames(catalog=None, store: UserCatalog | None = None,
                   extra: dict[str, list[dict]] | None = None,
                   kinds: tuple[str, ...] = KINDS) -> dict[str, pd.DataFrame]:
    """{'gpus': frame, 'models': frame}: the shipped entries, then the entries saved in the
    user catalog file, then `extra`, with an `origin` column ('shipped', 'user', 'session').

    catalog: gives the shipped frames through .gpus() and .models() (default: the process's
      shipped catalog); store: the user catalog file (default: UserCatalog() at
      $LLM_PLANNER_USER_CATALOG), parsed once while it is unchanged; extra: {'gpus': [...],
      'models': [...]}, records of the caller's own (a dashboard session's), validated like
      the YAML; one hides a saved entry with the same id. kinds: which frames to build.
    Problems never stop the shipped entries: a corrupt user file (kept aside), a saved entry
    of these kinds set aside (one line each), a saved id that the shipped catalog now also
    uses, an invalid extra record, are each warned about (UserCatalogWarning) and listed in
    every frame's attrs['user_catalog_problems']. The notes on saved entries read with a field
    filled in (one line per entry) are in attrs['user_catalog_notes'], and warned about as
    one line per kind (a file of thousands of old entries must not print thousands of lines).
    """
    kinds = tuple(kind_name(k) for k in kinds)
    if catalog is None:
        catalog = shipped_catalog()
    shipped = {kind: catalog.gpus() if kind == "gpus" else catalog.models() for kind in kinds}
    ids = {kind: set(frame["id"]) for kind, frame in shipped.items()}
    store = store or UserCatalog(shipped_ids=ids)
    problems: list[str] = []
    notes: list[str] = []
    try:
        loaded = _saved_records(store)
    except CatalogError as exc:  # UserCatalogCorrupt included: the file was kept aside
        problems.append(str(exc))
        loaded = UserCatalogLoad({"gpus": [], "models": []})
    saved = loaded.records
    problems += [str(entry) for entry in loaded.set_aside if entry.kind in kinds]
    summaries = []
    for kind in kinds:
        filled = loaded.filled.get(kind, [])
        notes += filled
        if filled:
            summaries.append(f"{store.path}: {len(filled):,} {kind} saved by an older version were read with a field "
                             f"filled in (first: {filled[0].split(': ', 1)[-1]}); a save writes them back so")
    out = {}
    for kind in kinds:
        own = _extra_records(kind, (extra or {}).get(kind), ids[kind], problems)
        own_ids = {r["id"] for r in own}
        rows = []
        for record in saved[kind]:
            if record["id"] in ids[kind]:
                problems.append(f"{store.path}: entry '{record['id']}': the shipped catalog now has this id; "
                                f"the shipped entry is used (rename yours to keep it)")
            elif record["id"] not in own_ids:
                rows.append((record, "user"))
        rows += [(record, "session") for record in own]
        out[kind] = _with_records(shipped[kind], kind, rows)
    for problem in problems + summaries:
        warnings.warn(problem, UserCatalogWarning, stacklevel=3)
    for frame in out.values():
        frame.attrs["user_catalog_problems"] = list(problems)
        frame.attrs["user_catalog_notes"] = list(notes)
    return out


class ShippedFrames:
    """Shipped frames already in hand, in catalog_frames' `catalog` role (the dashboard keeps
    them cached per process and passes them in)."""

    def __init__(self, frames: dict[str, pd.DataFrame]):
        self._frames = frames

    def gpus(self) -> pd.DataFrame:
        return self._frames["gpus"]

    def models(self) -> pd.DataFrame:
        return self._frames["models"]


def with_user_entries(frame: pd.DataFrame, kind: str, store: UserCatalog | None = None) -> pd.DataFrame:
    """The shipped frame (gpus or models) plus the user catalog's entries, with an `origin`
    column ('shipped' / 'user'): catalog_frames for one frame already in hand."""
    kind = kind_name(kind)
    store = store or UserCatalog(shipped_ids={kind: set(frame["id"])})
    return catalog_frames(ShippedFrames({kind: frame}), store, kinds=(kind,))[kind]


def merged_frames(catalog=None, store: UserCatalog | None = None) -> dict[str, pd.DataFrame]:
    """{'gpus': ..., 'models': ...}: shipped + user entries (catalog_frames without extras)."""
    return catalog_frames(catalog, store)


__all__ = [
    "BACKFILL",
    "ENV_VAR",
    "MAX_USER_CATALOG_BYTES",
    "PLACEHOLDERS",
    "SetAside",
    "UserCatalog",
    "UserCatalogCorrupt",
    "UserCatalogLoad",
    "UserCatalogWarning",
    "UserCatalogWriteError",
    "catalog_frames",
    "dump_document",
    "merged_frames",
    "read_document",
    "upgrade_entry",
    "user_catalog_path",
    "validate_document",
    "with_user_entries",
]
