"""The user's own GPUs and models in the dashboard: the ones saved in the user catalog file and
the ones added in one browser session.

Two kinds of user entries, kept apart on purpose (several people share one server):

- saved: the entries in the user catalog file (catalog/store.py: $LLM_PLANNER_USER_CATALOG, or
  ~/.llm-planner/user_catalog.yaml). They belong to the person running the server, like the
  shipped catalog: every session loads them beside the shipped catalog, and so does the CLI.
  The file is read once per version of it (cached by its inode, size and change times), so a
  save made by any session or by the CLI reaches every session on its next run.
- session: the entries added on the Catalog page, kept in this session's st.session_state only
  ("user_gpus" / "user_models", lists of validated records). Another session never sees them.
  The "Save to my catalog file" button moves one into the file, through UserCatalog (validated
  exactly like the shipped YAML, atomic write).

A session entry hides a saved entry with the same id in that session only (what the user typed
is what they see); the Catalog page says so. A corrupt file is never dropped silently:
UserCatalog keeps it aside as `<name>.corrupt-<timestamp>`, and `problems()` reports it (the
file, where it was moved and, when this server moved it, why) until the user deletes that copy.
One bad entry only sets that entry aside (it stays in the file): `set_aside()` gives one line
per such entry (its id, the field, the bad value, what is accepted), `filled()` one line per
entry an older version saved that was read with a field filled in; the Catalog page lists both
and every other page says once that entries were set aside.

No formulas here; YAML is parsed and written only by catalog/ (catalog.schema, catalog.store).
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from pathlib import Path

import streamlit as st

from app.labels import md_escape  # the one escape of user text in Markdown (app/labels.py)
from catalog.schema import CatalogError, parse_yaml
from catalog.store import (
    ENV_VAR,
    SINGULAR,
    UserCatalog,
    UserCatalogCorrupt,
    dump_document,
    kind_name,
    user_catalog_path,
    validate_document,
)

KINDS = ("gpus", "models")
SESSION_KEYS = {"gpus": "user_gpus", "models": "user_models"}
ORIGIN_SHIPPED, ORIGIN_SAVED, ORIGIN_SESSION = "shipped", "saved in your catalog file", "this session only"
ORIGIN_SOURCE = "the sidebar's Hugging Face / file field (this session only)"
# The model this session's sidebar field resolved (app/model_source.py), added to this session's
# frames like a session entry; None when the field is empty or bad, or the same entry is saved.
SOURCE_ROW_KEY = "_model_source_row"
# Upload caps, in the uploader's unit (MB): a config.json is a few KB (catalog.user caps it at
# 1,000,000 bytes); a catalog document at catalog.schema.MAX_YAML_BYTES (16 MiB, so a file the
# page exported can be imported again). The catalog functions check the exact byte limits again.
MAX_CONFIG_UPLOAD_MB = 1
MAX_YAML_UPLOAD_MB = 16

# Why each corrupt file was moved, as this server found it: {kept_as path: one-line message}.
_moved: dict[str, str] = {}
_moved_lock = threading.Lock()


# ---- the saved entries (the user catalog file) --------------------------------------------------

def catalog_path() -> Path:
    return user_catalog_path()


def _signature(path: Path):
    """What identifies one version of the file: a write replaces it (new inode) and changes its times."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ("unreadable", exc.errno)
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@st.cache_data(max_entries=8, show_spinner=False)
def _load(path: str, signature) -> dict:
    """{'gpus': [...], 'models': [...], 'problem': str | None, 'set_aside': [line, ...],
    'filled': [line, ...]} for one version of the file."""
    empty = {"gpus": [], "models": [], "set_aside": [], "filled": []}
    try:
        loaded = UserCatalog(path, shipped_ids={}).read()
    except UserCatalogCorrupt as exc:
        if exc.kept_as is not None:
            with _moved_lock:
                _moved[str(exc.kept_as)] = str(exc)
        return {**empty, "problem": str(exc)}
    except CatalogError as exc:  # e.g. no permission to read: the file is left alone
        return {**empty, "problem": str(exc)}
    return {**loaded.records, "problem": None, "set_aside": [str(entry) for entry in loaded.set_aside],
            "filled": [line for kind in KINDS for line in loaded.filled[kind]]}


def saved() -> dict:
    """The user catalog file's entries: {'gpus': [...], 'models': [...], 'problem': str | None,
    'set_aside': [...], 'filled': [...]} (see _load)."""
    path = catalog_path()
    return _load(str(path), _signature(path))


@functools.lru_cache(maxsize=16)
def _kept_aside(path: str, folder_signature, file_signature) -> tuple[Path, ...]:
    """The corrupt copies kept next to the file; listed again whenever the folder changes."""
    return tuple(UserCatalog(path, shipped_ids={}).quarantined())


@functools.lru_cache(maxsize=16)
def _rejected_copies(path: str, folder_signature, file_signature) -> tuple[Path, ...]:
    """The copies a save kept of a file whose set-aside entry could not be written back."""
    return tuple(UserCatalog(path, shipped_ids={}).rejected())


def saved_records(kind: str) -> list[dict]:
    return saved()[kind_name(kind)]


def problems(shipped_ids: dict[str, set] | None = None) -> list[str]:
    """One line per problem with the user catalog: the file cannot be read, a corrupt copy was
    kept aside (named, with the reason when this server moved it), a saved id that the shipped
    catalog now also uses."""
    data = saved()
    out = []
    path = catalog_path()
    kept = _kept_aside(str(path), _signature(path.parent), _signature(path))
    with _moved_lock:
        reasons = {k: _moved.get(str(k)) for k in kept}
    for copy in kept:
        reason = reasons[copy]
        if reason:
            out.append(f"Your user catalog file could not be loaded and was moved aside: {reason}. "
                       f"Delete {copy} once you no longer need it.")
        else:
            out.append(f"A copy of your user catalog file that could not be loaded was kept as {copy} "
                       f"(the catalog {path} started empty); fix it and import it below, or delete it.")
    for copy in _rejected_copies(str(path), _signature(path.parent), _signature(path)):
        out.append(f"{copy}: a copy of your catalog file from before a save, kept because an entry set aside in "
                   f"it could not be written back as it was (the other entries are in {path}); fix that entry "
                   "and import it, or delete the copy.")
    if data["problem"] and not any(str(k) in data["problem"] for k in kept):
        out.append(data["problem"])
    for kind in KINDS:
        clash = sorted({r["id"] for r in data[kind]} & set((shipped_ids or {}).get(kind, ())))
        for ident in clash:
            out.append(f"{path}: entry '{ident}': the shipped catalog now has this id; the shipped "
                       f"{SINGULAR[kind]} is used (rename yours to keep it)")
    return out


def set_aside() -> list[str]:
    """One line per entry of the file that did not load (kept in the file; the others loaded)."""
    return list(saved()["set_aside"])


def filled() -> list[str]:
    """One line per saved entry read with a field filled in (an older version saved it)."""
    return list(saved()["filled"])


def set_aside_summary() -> str | None:
    """One line saying how many entries were set aside, for pages other than the Catalog page."""
    count = len(saved()["set_aside"])
    if not count:
        return None
    return (f"{catalog_path()}: {count:,} {'entry' if count == 1 else 'entries'} could not be loaded and "
            f"{'was' if count == 1 else 'were'} set aside (kept in the file as written); every other entry loaded")


def notify_once(shipped_ids: dict[str, set] | None = None) -> None:
    """Tell this session, once per problem, on whatever page it is (a toast pointing to the
    Catalog page, which keeps listing the problems)."""
    told = st.session_state.setdefault("_user_catalog_told", set())
    summary = set_aside_summary()
    for problem in problems(shipped_ids) + ([summary] if summary else []):
        if problem not in told:
            told.add(problem)
            st.toast(f"User catalog: {md_escape(problem[:400])} (see the Catalog page)", icon="⚠️", duration="long")


def store(shipped_ids: dict[str, set]) -> UserCatalog:
    """The user catalog file, refusing the shipped ids given."""
    return UserCatalog(catalog_path(), shipped_ids=shipped_ids)


@contextlib.contextmanager
def writing():
    """A file system refusal (read-only folder, full disk, a file where the folder should be)
    as one CatalogError line naming the file; UserCatalog never leaves a half-written file."""
    try:
        yield
    except OSError as exc:
        raise CatalogError(str(catalog_path()), None, None,
                           f"cannot be written: {exc.strerror or exc}; set {ENV_VAR} to a folder you can write to") from None


# ---- this session's entries ----------------------------------------------------------------------

def session_records(kind: str) -> list[dict]:
    """This session's own entries (never another session's)."""
    return list(st.session_state.get(SESSION_KEYS[kind_name(kind)]) or [])


def visible(kind: str, shipped_ids: set) -> list[dict]:
    """The user entries of one kind this session sees, in order: saved ones (less those whose id
    the shipped catalog or this session's own entries now use), then this session's."""
    kind = kind_name(kind)
    own = session_records(kind)
    hidden = set(shipped_ids) | {r["id"] for r in own}
    return [r for r in saved_records(kind) if r["id"] not in hidden] + own


def source_row() -> dict | None:
    """The model row of the sidebar's Hugging Face / file field in this session, if any."""
    return st.session_state.get(SOURCE_ROW_KEY)


def origins(kind: str, shipped_ids: set) -> dict[str, str]:
    """id -> where the entry this session sees comes from (shipped / saved / this session / the
    sidebar's Hugging Face or file field)."""
    out = {ident: ORIGIN_SHIPPED for ident in shipped_ids}
    own = {r["id"] for r in session_records(kind)}
    for r in visible(kind, shipped_ids):
        out[r["id"]] = ORIGIN_SESSION if r["id"] in own else ORIGIN_SAVED
    row = source_row() if kind_name(kind) == "models" else None
    if row is not None:
        out[row["id"]] = ORIGIN_SOURCE
    return out


def shadowed(kind: str) -> list[str]:
    """Saved ids that this session's own entries hide (same id)."""
    own = {r["id"] for r in session_records(kind)}
    return [r["id"] for r in saved_records(kind) if r["id"] in own]


def add_to_session(kind: str, record: dict) -> None:
    key = SESSION_KEYS[kind_name(kind)]
    st.session_state[key] = session_records(kind) + [record]


def remove_from_session(kind: str, ident: str) -> None:
    key = SESSION_KEYS[kind_name(kind)]
    st.session_state[key] = [r for r in session_records(kind) if r["id"] != ident]


def save_session_entry(kind: str, ident: str, shipped_ids: dict[str, set]) -> dict:
    """Move one of this session's entries into the user catalog file (validated again by
    UserCatalog, written atomically). The session keeps it when the save fails."""
    kind = kind_name(kind)
    record = next((r for r in session_records(kind) if r["id"] == ident), None)
    if record is None:
        raise CatalogError("this session", f"'{ident}'", None, f"is not one of this session's {kind}")
    user = store(shipped_ids)
    with writing():
        stored = user.add_gpu(record) if kind == "gpus" else user.add_model(record)
    remove_from_session(kind, ident)
    return stored


def delete_saved_entry(kind: str, ident: str, shipped_ids: dict[str, set]) -> dict:
    with writing():
        return store(shipped_ids).remove(kind, ident)


# ---- import and export (YAML text, parsed and written by catalog/) ------------------------------

def parse_import(raw: bytes | str, label: str, taken: dict[str, set]) -> dict[str, list[dict]]:
    """A whole uploaded catalog document, validated like the shipped YAML; raises CatalogError
    (one line) on the first problem, so nothing of it is used unless all of it is valid.
    taken: ids per kind already in this session's catalog (shipped, saved and session)."""
    doc = parse_yaml(raw, label)
    if doc is None:
        raise CatalogError(label, None, None, "is empty; expected a mapping with gpus, models")
    incoming = validate_document(doc, label)
    if not any(incoming.values()):
        raise CatalogError(label, None, None, "has no entries; expected a list under gpus or models")
    for kind in KINDS:
        for record in incoming[kind]:
            if record["id"] in taken.get(kind, ()):
                raise CatalogError(label, f"'{record['id']}'", "id",
                                   f"is already in the catalog; nothing was imported (rename it, e.g. {record['id']}-2)")
    return incoming


def import_into_session(raw: bytes | str, label: str, taken: dict[str, set]) -> dict[str, list[str]]:
    incoming = parse_import(raw, label, taken)
    for kind in KINDS:
        if incoming[kind]:
            st.session_state[SESSION_KEYS[kind]] = session_records(kind) + incoming[kind]
    return {kind: [r["id"] for r in incoming[kind]] for kind in KINDS}


def import_into_file(raw: bytes | str, label: str, shipped_ids: dict[str, set]) -> dict[str, list[str]]:
    """UserCatalog.import_yaml: all or nothing; an entry replaces your saved entry with its id."""
    with writing():
        result = store(shipped_ids).import_yaml(raw, label)
    if not any(result.values()):
        raise CatalogError(label, None, None, "has no entries; expected a list under gpus or models")
    return result


def export_saved() -> str:
    data = saved()
    return dump_document({kind: data[kind] for kind in KINDS})


def export_session() -> str:
    return dump_document({kind: session_records(kind) for kind in KINDS})


# ---- showing user text --------------------------------------------------------------------------

def md_code(text) -> str:
    """User text (a name, an id, a path) as a Markdown code span: shown exactly as typed, with no
    formatting, links or typography ('--' stays two hyphens). The fence is longer than any run of
    backticks inside (CommonMark code spans)."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    runs = [len(r) for r in re.findall("`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"
