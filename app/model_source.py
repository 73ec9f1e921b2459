"""The sidebar's "model from Hugging Face or a file" field (issue 25 item 5).

The user types a Hugging Face Hub id (ORG/NAME[@REVISION]) or a path on the machine running the
dashboard (a GGUF file, split parts included; a safetensors file or folder with its config.json;
a config.json). It is resolved by the catalog's own resolver, exactly as `python -m engine
estimate --model ORG/NAME` / `--model-file PATH` resolve it (catalog/checkpoints.py: the Hub
through huggingface_hub, HF_HOME / HF_HUB_CACHE / HF_HUB_OFFLINE / HF_TOKEN / HF_ENDPOINT read at
the call; files by their headers only). The resolved row joins this session's models frame
(app/data.py merged_frames) under its id, so every page can use it; its `source` names the repo
and commit, or the file, and its notes say where the parameters came from.

What is kept where:
- the URL and the settings hold the source text only (`model_source`), never the resolved row;
- the resolved row is cached per process by (text, a fingerprint of what it names: the files'
  inode, size and mtime, or the Hub cache's ref and snapshot and the HF_* environment), so a
  rerun that changes nothing costs a few stat calls; an error is kept by the session alone (until
  the text or the fingerprint changes: clearing the field retries), so a bad id is not fetched
  again on every rerun and an unreachable Hub is tried again by the next session;
- st.session_state[ROW_KEY] holds the row this session's frames add (None when the field is
  empty or bad, or when the user catalog file already has the same entry saved).

A bad value gives the resolver's own one-line message (what was typed, what is accepted) in the
sidebar; the text stays in the field and every other setting stays as it was.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import streamlit as st

from app import user_entries
from catalog.schema import MODEL_FIELDS, CatalogError, not_text, one_line, show

KEY = "model_source"  # the settings / URL key (app/state.py FIELDS)
ROW_KEY = user_entries.SOURCE_ROW_KEY  # the row the frames add (read by app/data.py, app/user_entries.py)
_MEMO = "_model_source_memo"  # {"text", "fingerprint", "result"}: this session's last resolution
_PICKED = "_model_source_picked"  # (text, id) last selected in the Model list for the user
MAX_TEXT = 1000
MAX_FOLDER_ENTRIES = 4096  # a folder's entries fingerprinted (catalog/checkpoints.py MAX_FILES)
HF_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "XDG_CACHE_HOME")
LABEL = "Model from Hugging Face or a file"
PLACEHOLDER = "ORG/NAME[@REV], or /path/to/model.gguf"
HELP = ("A Hugging Face Hub id (ORG/NAME or ORG/NAME@REVISION: read from the local HF cache, or from the Hub "
        "unless HF_HUB_OFFLINE is set; HF_TOKEN for gated repos), or a path on the machine running this "
        "dashboard: a GGUF file (split parts -00001-of-0000N read together), a safetensors file or folder with "
        "its config.json, or a config.json. Only headers are read. The model joins the Model list on every page.")


def accepted() -> str:
    from catalog.checkpoints import ACCEPTED, ACCEPTED_HUB
    return f"{ACCEPTED_HUB}, or a path on this machine to {ACCEPTED}"


# ---- what the text names ------------------------------------------------------------------------

def _path(text: str) -> Path:
    return Path(os.path.expanduser(text))


def kind_of(text: str) -> str | None:
    """'hub', 'path' or None (empty). A path that exists wins over a Hub-shaped id; so does text
    that looks like a path (a leading / ~ or ., a backslash, a drive letter, a model file's suffix)."""
    from catalog.checkpoints import is_hub_id
    t = text.strip()
    if not t:
        return None
    looks_like_path = (t.startswith(("/", "~", ".", "\\")) or "\\" in t or re.match(r"^[A-Za-z]:[\\/]", t)
                       or t.lower().endswith((".gguf", ".safetensors", ".json")))
    if looks_like_path:
        return "path"
    try:
        if _path(t).exists():
            return "path"
    except (OSError, ValueError):  # a name too long, a NUL byte
        return "path"
    return "hub" if is_hub_id(t) else "path"


def _stat(path) -> tuple:
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        return ("absent", getattr(exc, "errno", None))
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode)


def fingerprint(text: str) -> tuple:
    """What the resolved row depends on besides the text, cheap enough for every rerun (a few
    stat calls): a changed, replaced or added file gives a new key, so the row is read again."""
    t = text.strip()
    kind = kind_of(t)
    if kind == "path":
        path = _path(t)
        parts = [_stat(path)]
        try:
            if path.is_dir():
                with os.scandir(path) as entries:
                    listed = sorted((e.name, _stat(e.path)) for _i, e in zip(range(MAX_FOLDER_ENTRIES), entries))
                parts.append(tuple(listed))
            else:  # split parts, an index, the config.json beside a safetensors file
                parts += [_stat(path.parent), _stat(path.parent / "config.json")]
        except (OSError, ValueError):
            pass
        return ("path", str(path), tuple(parts))
    if kind == "hub":
        from catalog.checkpoints import HUB_ID_RE, hub_cache_dir
        env = tuple(os.environ.get(k) for k in HF_ENV)
        token = hashlib.sha256((os.environ.get("HF_TOKEN") or "").encode()).hexdigest()[:16]
        m = HUB_ID_RE.match(t)
        cache = []
        if m:
            folder = hub_cache_dir() / f"models--{m.group('repo').replace('/', '--')}"
            ref = folder / "refs" / (m.group("revision") or "main")
            commit = m.group("revision") or ""
            try:
                if ref.is_file() and ref.stat().st_size < 256:
                    commit = ref.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                pass
            snap = folder / "snapshots" / commit if commit and "/" not in commit else folder / "snapshots"
            cache = [_stat(ref), _stat(snap)]
            try:
                if snap.is_dir():
                    with os.scandir(snap) as entries:
                        cache.append(tuple(sorted((e.name, _stat(e.path)) for _i, e in
                                                  zip(range(MAX_FOLDER_ENTRIES), entries))))
            except OSError:
                pass
        return ("hub", env, token, tuple(cache))
    return (kind,)


# ---- resolving (catalog/checkpoints.py, cached) ----------------------------------------------------

def weights_line(info: dict) -> str:
    """Where the row's parameters came from, in words: the checkpoint header or the config arithmetic."""
    if info.get("weights_source") == "header":
        return f"from the checkpoint header ({info.get('tensors', 0):,} tensors; the config arithmetic agrees)"
    if info.get("params_stored"):
        return (f"from the config arithmetic (the checkpoint header holds {int(info['params_stored']):,}: "
                "see the notes)")
    return "from the config arithmetic (no checkpoint header read)"


def _row(record: dict, info: dict, text: str, kind: str, shipped_ids: set) -> dict:
    """The resolver's record as the dashboard's row: the Hub id as its name, its source naming the
    repo and commit or the file, a note of where the parameters came from; an id the shipped
    catalog uses gets the format as a suffix (the shipped model is never replaced)."""
    row = dict(record)
    fmt = info.get("format", "file")
    if kind == "hub":
        row["name"] = text.strip()[:120]
        where = f"Hugging Face Hub {info.get('hub_id')}@{info.get('commit') or info.get('revision') or 'main'}"
        where += " (local cache, offline)" if info.get("offline") else ""
    else:
        files = info.get("files") or [str(_path(text.strip()))]
        label = {"gguf": "GGUF file", "safetensors": "safetensors", "config": "config.json"}.get(fmt, fmt)
        where = f"{label} {os.path.abspath(files[0])}" + (f" (+{len(files) - 1} more files)" if len(files) > 1 else "")
    row["source"] = one_line(f"{where}; parameters {weights_line(info)}", 2000)
    if row["id"] in shipped_ids:
        row["id"] = f"{row['id'][:63 - len(fmt)]}-{fmt}"
    said = [f"Read in the dashboard from {text.strip()!r}: parameters {weights_line(info)}."]
    if info.get("commit"):
        said.append(f"Resolved commit {info['commit']}.")
    row["notes"] = one_line(" ".join([*said, str(record.get("notes") or "")]), 2000)
    from catalog.schema import check_model, validate_entries
    clean = validate_entries([row], MODEL_FIELDS, "model from the sidebar", "model")[0]
    check_model(clean, "model from the sidebar")
    return clean


def _jsonable(info: dict) -> dict:
    keep = ("format", "files", "params_config", "params_stored", "weights_bytes_stored", "tensors", "dtypes",
            "vision_params", "vision_weights_bytes", "weights_source", "precision", "file_type_name", "notes",
            "hub_id", "revision", "commit", "offline", "projector_files", "gguf_extra_blocks")
    return {k: info[k] for k in keep if k in info}


def resolve_now(text: str, shipped_ids: frozenset) -> dict:
    """{'row': record, 'info': {...}} or {'error': one line}: never raises."""
    t = text.strip()
    kind = kind_of(t)
    try:
        if len(t) > MAX_TEXT:
            raise CatalogError(f"model source {show(t)}", None, None,
                               f"is {len(t):,} characters; at most {MAX_TEXT:,}; accepted: {accepted()}")
        if not_text(t):
            raise CatalogError(f"model source {show(t)}", None, None, f"has {not_text(t)}; accepted: {accepted()}")
        from catalog.checkpoints import model_from_files, model_from_hub
        if kind == "hub":
            record, info = model_from_hub(t)
        else:
            try:
                record, info = model_from_files(_path(t))
            except CatalogError as exc:
                if "does not exist" in exc.problem and not t.startswith(("/", "~", ".")):
                    raise CatalogError(exc.file, exc.entry, exc.field,
                                       f"{exc.problem}; or a Hugging Face Hub model id: ORG/NAME or ORG/NAME@REVISION") from None
                raise
        row = _row(record, info, t, kind, shipped_ids)
    except CatalogError as exc:
        return {"error": one_line(str(exc), 600)}
    except RecursionError:
        return {"error": f"{show(t)}: is not a model its reader can take (nested too deeply); accepted: {accepted()}"}
    except Exception as exc:  # noqa: BLE001 - a reader's surprise is one line on the page, never a traceback
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return {"error": one_line(f"{show(t)}: could not be read ({type(exc).__name__}{': ' + first if first else ''}); "
                                  f"accepted: {accepted()}", 600)}
    return {"row": row, "info": _jsonable(info)}


class _Unresolved(Exception):
    """An error is not cached per process (a Hub that was unreachable may answer on the next try);
    the session keeps it until the text or what it names changes (clearing the field retries)."""


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Reading the model's headers…")
def _resolve_cached(text: str, key: tuple, shipped_ids: frozenset) -> dict:
    result = resolve_now(text, shipped_ids)
    if "error" in result:
        raise _Unresolved(result["error"])
    return result


def resolve(text: str, shipped_ids) -> dict | None:
    """This session's resolution of the field's text: None when empty, else resolve_now's dict.
    Read again only when the text or its fingerprint changed (a rerun costs a few stat calls)."""
    if not text or not text.strip():
        st.session_state.pop(_MEMO, None)
        return None
    key = fingerprint(text)
    memo = st.session_state.get(_MEMO)
    if memo is not None and memo["text"] == text and memo["fingerprint"] == key:
        return memo["result"]
    try:
        result = _resolve_cached(text.strip(), key, frozenset(shipped_ids))
    except _Unresolved as exc:
        result = {"error": str(exc)}
    st.session_state[_MEMO] = {"text": text, "fingerprint": key, "result": result}
    return result


def files_read(model_id: str) -> dict | None:
    """What the field's files said (format, files, precision, mmproj files) when `model_id` is the model the field
    added from a path on this machine; None for a catalog or Hub model (no files of the user's to name)."""
    memo = st.session_state.get(_MEMO) or {}
    result = memo.get("result") or {}
    row = result.get("row") or {}
    if row.get("id") != model_id or kind_of(str(memo.get("text", "")).strip()) == "hub":
        return None
    return result.get("info")


def saved_match(row: dict) -> dict | None:
    """The user catalog file's entry with the row's id, when it is the same model (every catalog
    field equal): the frames then show the saved entry and add nothing."""
    for record in user_entries.saved_records("models"):
        if record["id"] == row["id"]:
            same = all(record.get(k) == row.get(k) for k in MODEL_FIELDS if k not in ("notes",))
            return record if same else {**record, "_differs": True}
    return None


def update(text: str, shipped_ids) -> dict | None:
    """Resolve the text and set the row the frames add (st.session_state[ROW_KEY]). Returns the
    resolution with 'saved' (the matching saved entry, if any) added."""
    result = resolve(text, shipped_ids)
    if not result or "row" not in result:
        st.session_state[ROW_KEY] = None
        return result
    saved = saved_match(result["row"])
    st.session_state[ROW_KEY] = None if saved is not None and not saved.get("_differs") else result["row"]
    return {**result, "saved": saved}


def pick(text: str, result: dict | None, current: str) -> str | None:
    """The model the Model list should now select, or None to leave it: the row's id when this
    text resolved to it for the first time in this session; the model selected before that when
    the field's model is gone (the field cleared or bad) and it is still the one selected."""
    picked = st.session_state.get(_PICKED)
    if not result or "row" not in result:
        if picked is not None and current == picked[1]:
            st.session_state.pop(_PICKED, None)
            return picked[2]
        return None
    ident = result["row"]["id"]
    if picked is not None and picked[:2] == (text, ident):
        return None
    before = picked[2] if picked is not None and current == picked[1] else current
    st.session_state[_PICKED] = (text, ident, before)
    return ident


def save(result: dict, shipped_ids: dict) -> dict:
    """Write the resolved row to the user catalog file with its source and revision (the Hub
    commit; none for a file). A saved entry with the same id is replaced (the same model read
    again, or the same repo at another commit)."""
    row = dict(result["row"])
    info = result.get("info") or {}
    row["revision"] = info.get("commit") or info.get("revision") or None
    replace = any(r["id"] == row["id"] for r in user_entries.saved_records("models"))
    with user_entries.writing():
        return user_entries.store(shipped_ids).add_model(row, replace=replace)
