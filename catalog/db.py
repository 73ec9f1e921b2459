"""YAML -> validated records -> a DuckDB database file -> DataFrames.

The database is rebuilt when the YAML changes (its file name carries a hash of the YAML
and of this module's schema version), written to a temporary file and renamed into place,
so concurrent starts never see half a database. Sessions open it read-only and query through
their own cursor with parameterized SQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

import duckdb
import pandas as pd

from catalog.schema import (
    ALIAS_FIELDS,
    GPU_FIELDS,
    MODEL_FIELDS,
    REFERENCE_FIELDS,
    CatalogError,
    check_gpu,
    check_model,
    check_reference,
    read_yaml,
    top_level,
    validate_entries,
)

CATALOG_DIR = Path(__file__).resolve().parent
SCHEMA_VERSION = "2"  # 2: models gained the optional qkv_bias column
YAML_FILES = ("gpus.yaml", "models.yaml", "references.yaml")

SQL = {
    "gpus": "SELECT * FROM gpus ORDER BY vendor, memory_gb, id",
    "models": "SELECT * FROM models ORDER BY family, params, id",
    "references": "SELECT * FROM refs ORDER BY id",
    "aliases": "SELECT * FROM gpu_aliases ORDER BY alias",
    "gpu_by_id": "SELECT * FROM gpus WHERE id = ?",
    "model_by_id": "SELECT * FROM models WHERE id = ?",
}


def load_records(directory: Path = CATALOG_DIR) -> dict[str, list[dict]]:
    """Read and validate the three YAML files; raise CatalogError on the first problem."""
    directory = Path(directory)
    gdoc = top_level(read_yaml(directory / "gpus.yaml"), "catalog/gpus.yaml", {"gpus": True, "aliases": False})
    gpus = validate_entries(gdoc["gpus"], GPU_FIELDS, "catalog/gpus.yaml", "gpus")
    for g in gpus:
        check_gpu(g, "catalog/gpus.yaml")
    aliases = validate_entries(gdoc.get("aliases") or [], ALIAS_FIELDS, "catalog/gpus.yaml", "aliases", key="alias")
    gpu_ids = {g["id"] for g in gpus}
    for al in aliases:
        if al["gpu"] not in gpu_ids:
            raise CatalogError("catalog/gpus.yaml", f"'{al['alias']}'", "gpu", f"{al['gpu']!r} is not a GPU id in this file")

    mdoc = top_level(read_yaml(directory / "models.yaml"), "catalog/models.yaml", {"models": True})
    models = validate_entries(mdoc["models"], MODEL_FIELDS, "catalog/models.yaml", "models")
    for m in models:
        check_model(m, "catalog/models.yaml")

    rdoc = top_level(read_yaml(directory / "references.yaml"), "catalog/references.yaml", {"references": True})
    refs = validate_entries(rdoc["references"], REFERENCE_FIELDS, "catalog/references.yaml", "references")
    model_ids = {m["id"] for m in models}
    for ref in refs:
        check_reference(ref, "catalog/references.yaml", model_ids, gpu_ids)
    return {"gpus": gpus, "aliases": aliases, "models": models, "references": refs}


def records_to_frames(records: dict[str, list[dict]]) -> dict[str, pd.DataFrame]:
    gpus = pd.DataFrame(records["gpus"], columns=list(GPU_FIELDS))
    models = pd.DataFrame(records["models"], columns=list(MODEL_FIELDS))
    aliases = pd.DataFrame(records["aliases"], columns=list(ALIAS_FIELDS))
    refs = pd.DataFrame(
        [{**{k: v for k, v in r.items() if k != "scenario"}, "scenario_json": json.dumps(r["scenario"], sort_keys=True)}
         for r in records["references"]],
        columns=[k for k in REFERENCE_FIELDS if k != "scenario"] + ["scenario_json"],
    )
    for frame, ints in ((gpus, ("usable_memory_bytes", "launch_year")),
                        (models, ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                                  "num_kv_heads", "head_dim", "vocab_size", "max_context", "params"))):
        for col in ints:
            frame[col] = frame[col].astype("int64")
    for col in ("memory_gb", "bandwidth_gbps", "bf16_tflops", "fp16_tflops", "fp32_tflops", "int8_tops",
                "fp8_tflops", "tdp_w", "interconnect_gbps", "price_usd", "cloud_usd_per_hour"):
        gpus[col] = gpus[col].astype("float64")
    refs["value"] = refs["value"].astype("float64")
    return {"gpus": gpus, "models": models, "aliases": aliases, "refs": refs}


def _fingerprint(directory: Path) -> str:
    digest = hashlib.sha256(SCHEMA_VERSION.encode())
    for name in YAML_FILES:
        digest.update(name.encode())
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    """Where built databases live: $LLM_PLANNER_BUILD_DIR or catalog/build (git-ignored)."""
    env = os.environ.get("LLM_PLANNER_BUILD_DIR")
    return Path(env) if env else CATALOG_DIR / "build"


_build_lock = threading.Lock()


def database_path(directory: Path = CATALOG_DIR) -> Path:
    """Return the path of an up-to-date database for the YAML in `directory`, building it if needed."""
    directory = Path(directory)
    try:
        fingerprint = _fingerprint(directory)
    except OSError as exc:
        raise CatalogError(str(getattr(exc, "filename", directory)), None, None, f"cannot be read: {exc.strerror}") from None
    target_dir = build_dir()
    path = target_dir / f"catalog-{fingerprint}.duckdb"
    if path.exists():
        return path
    with _build_lock:
        if path.exists():
            return path
        frames = records_to_frames(load_records(directory))
        target_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".catalog-", suffix=".duckdb", dir=target_dir)
        os.close(fd)
        os.unlink(tmp)  # duckdb wants to create the file itself
        try:
            con = duckdb.connect(tmp)
            try:
                for table, frame in (("gpus", frames["gpus"]), ("models", frames["models"]),
                                     ("gpu_aliases", frames["aliases"]), ("refs", frames["refs"])):
                    con.register("incoming", frame)
                    con.execute(f"CREATE TABLE {table} AS SELECT * FROM incoming")  # table names are ours, not input
                    con.unregister("incoming")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, path)
        finally:
            for leftover in (tmp, tmp + ".wal"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
        for old in target_dir.glob("catalog-*.duckdb"):
            if old != path:
                try:
                    old.unlink()
                except OSError:
                    pass
    return path


class Catalog:
    """Read-only access to the built catalog. One connection; one cursor per query."""

    def __init__(self, directory: Path = CATALOG_DIR):
        self.path = database_path(directory)
        self._con = duckdb.connect(str(self.path), read_only=True)
        self._lock = threading.Lock()

    def query(self, name: str, params: list | None = None) -> pd.DataFrame:
        with self._lock:
            cur = self._con.cursor()
        try:
            return cur.execute(SQL[name], params or []).df()
        finally:
            cur.close()

    def gpus(self, include_user: bool = False) -> pd.DataFrame:
        """The shipped GPUs; with include_user=True also the user catalog's (see catalog/store.py),
        with an `origin` column ('shipped' or 'user')."""
        frame = self.query("gpus")
        if include_user:
            from catalog.store import with_user_entries  # lazy: only this path reads the user file
            frame = with_user_entries(frame, "gpus")
        return frame

    def models(self, include_user: bool = False) -> pd.DataFrame:
        """The shipped models; with include_user=True also the user catalog's (see gpus())."""
        frame = self.query("models")
        if include_user:
            from catalog.store import with_user_entries
            frame = with_user_entries(frame, "models")
        return frame

    def aliases(self) -> pd.DataFrame:
        return self.query("aliases")

    def references(self) -> pd.DataFrame:
        frame = self.query("references")
        frame["scenario"] = frame["scenario_json"].map(json.loads)
        return frame

    def close(self) -> None:
        self._con.close()


_default: Catalog | None = None
_default_lock = threading.Lock()


def default_catalog() -> Catalog:
    """The shipped catalog, opened once per process."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Catalog()
        return _default
