"""The shipped catalog: YAML -> validated records -> a DuckDB database file -> DataFrames.

The database is rebuilt when the YAML changes (its file name carries a hash of the YAML
and of this module's schema version), written to a temporary file and renamed into place,
so concurrent starts never see half a database. Sessions open it read-only and query through
their own cursor with parameterized SQL.

A database file that DuckDB cannot read (truncated, overwritten, missing a table) is only a
cache of the YAML: it is rebuilt in place (a new file renamed over it, so other processes
never see none) and the rebuild is reported once with a CatalogDatabaseWarning.

This module knows nothing of the user catalog (catalog/store.py builds on it, and
catalog/db.py's Catalog adds the user's entries on top of both).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path

import duckdb
import pandas as pd

from catalog.schema import (
    ALIAS_FIELDS,
    COMPAT_FIELDS,
    GPU_FIELDS,
    HOST_FIELDS,
    MAX_YAML_BYTES,
    MODEL_FIELDS,
    REFERENCE_FIELDS,
    CatalogError,
    check_gpu,
    check_model,
    check_reference,
    one_line,
    read_regular_file,
    read_yaml,
    top_level,
    validate_entries,
    yaml_label,
)

CATALOG_DIR = Path(__file__).resolve().parent
SCHEMA_VERSION = "3"  # 2: models gained the optional qkv_bias column; 3: systems, used prices, hosts, compatibility
YAML_FILES = ("gpus.yaml", "models.yaml", "references.yaml")

SQL = {
    "gpus": "SELECT * FROM gpus ORDER BY vendor, memory_gb, id",
    "models": "SELECT * FROM models ORDER BY family, params, id",
    "references": "SELECT * FROM refs ORDER BY id",
    "aliases": "SELECT * FROM gpu_aliases ORDER BY alias",
    "gpu_by_id": "SELECT * FROM gpus WHERE id = ?",
    "model_by_id": "SELECT * FROM models WHERE id = ?",
    "hosts": "SELECT * FROM hosts ORDER BY kind, id",
    "compatibility": "SELECT * FROM compat_rules ORDER BY id",
}
TABLES = ("gpus", "models", "gpu_aliases", "refs", "hosts", "compat_rules")
# What DuckDB raises when a query meets a damaged file (not a wrong parameter, which is the
# caller's error and raised as is): the file is then rebuilt and the query run once more.
DAMAGED = (duckdb.IOException, duckdb.InternalException, duckdb.CatalogException,
           duckdb.SerializationException, duckdb.FatalException)


class CatalogDatabaseWarning(UserWarning):
    """The built catalog database could not be read and was rebuilt from the YAML."""


def read_sources(directory: Path = CATALOG_DIR) -> dict[str, bytes]:
    """The three YAML files' bytes (regular files only, each at most MAX_YAML_BYTES)."""
    directory = Path(directory)
    out = {}
    for name in YAML_FILES:
        path = directory / name
        try:
            out[name] = read_regular_file(path, MAX_YAML_BYTES, "a catalog file", "a YAML file", label=yaml_label(path))
        except FileNotFoundError as exc:
            raise CatalogError(yaml_label(path), None, None, f"cannot be read: {exc.strerror or exc}") from None
    return out


def load_records(directory: Path = CATALOG_DIR, sources: dict[str, bytes] | None = None) -> dict[str, list[dict]]:
    """Read and validate the three YAML files (or their bytes, already read); raise
    CatalogError on the first problem."""
    directory = Path(directory)
    sources = sources or {}
    gdoc = top_level(read_yaml(directory / "gpus.yaml", sources.get("gpus.yaml")), "catalog/gpus.yaml",
                     {"gpus": True, "aliases": False, "hosts": False, "compatibility": False})
    gpus = validate_entries(gdoc["gpus"], GPU_FIELDS, "catalog/gpus.yaml", "gpus")
    for g in gpus:
        check_gpu(g, "catalog/gpus.yaml")
    aliases = validate_entries(gdoc.get("aliases") or [], ALIAS_FIELDS, "catalog/gpus.yaml", "aliases", key="alias")
    gpu_ids = {g["id"] for g in gpus}
    for al in aliases:
        if al["gpu"] not in gpu_ids:
            raise CatalogError("catalog/gpus.yaml", f"'{al['alias']}'", "gpu", f"{al['gpu']!r} is not a GPU id in this file")
    hosts = validate_entries(gdoc.get("hosts") or [], HOST_FIELDS, "catalog/gpus.yaml", "hosts")
    host_ids = {h["id"] for h in hosts if h["kind"] == "host"}
    for g in gpus:
        if g.get("host_class") and g["host_class"] not in host_ids:
            raise CatalogError("catalog/gpus.yaml", f"'{g['id']}'", "host_class",
                               f"{g['host_class']!r} is not a host id of the hosts list; accepted: {', '.join(sorted(host_ids))}")
    compat = validate_entries(gdoc.get("compatibility") or [], COMPAT_FIELDS, "catalog/gpus.yaml", "compatibility")

    mdoc = top_level(read_yaml(directory / "models.yaml", sources.get("models.yaml")), "catalog/models.yaml",
                     {"models": True})
    models = validate_entries(mdoc["models"], MODEL_FIELDS, "catalog/models.yaml", "models")
    for m in models:
        check_model(m, "catalog/models.yaml")

    rdoc = top_level(read_yaml(directory / "references.yaml", sources.get("references.yaml")),
                     "catalog/references.yaml", {"references": True})
    refs = validate_entries(rdoc["references"], REFERENCE_FIELDS, "catalog/references.yaml", "references")
    model_ids = {m["id"] for m in models}
    for ref in refs:
        check_reference(ref, "catalog/references.yaml", model_ids, gpu_ids)
    return {"gpus": gpus, "aliases": aliases, "models": models, "references": refs, "hosts": hosts,
            "compatibility": compat}


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
    for col in ("max_per_node", "price_used_usd"):
        gpus[col] = gpus[col].astype("float64")
    refs["value"] = refs["value"].astype("float64")
    hosts = pd.DataFrame(records.get("hosts") or [], columns=list(HOST_FIELDS))
    for col in ("usd_per_node", "usd_fixed", "max_gpus"):
        hosts[col] = hosts[col].astype("float64")
    compat = pd.DataFrame(records.get("compatibility") or [], columns=list(COMPAT_FIELDS))
    compat["multi_gpu"] = compat["multi_gpu"].astype(bool)
    compat["only_multi_gpu"] = compat["only_multi_gpu"].astype(bool)
    return {"gpus": gpus, "models": models, "aliases": aliases, "refs": refs, "hosts": hosts, "compat_rules": compat}


def _fingerprint(sources: dict[str, bytes]) -> str:
    digest = hashlib.sha256(SCHEMA_VERSION.encode())
    for name in YAML_FILES:
        digest.update(name.encode())
        digest.update(sources[name])
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    """Where built databases live: $LLM_PLANNER_BUILD_DIR or catalog/build (git-ignored)."""
    env = os.environ.get("LLM_PLANNER_BUILD_DIR")
    return Path(env) if env else CATALOG_DIR / "build"


_build_lock = threading.Lock()


def database_path(directory: Path = CATALOG_DIR, rebuild: bool = False) -> Path:
    """Return the path of an up-to-date database for the YAML in `directory`, building it if
    needed; rebuild=True builds it again even if the file exists (it could not be read)."""
    directory = Path(directory)
    sources = read_sources(directory)
    target_dir = build_dir()
    path = target_dir / f"catalog-{_fingerprint(sources)}.duckdb"
    if path.exists() and not rebuild:
        return path
    with _build_lock:
        if path.exists() and not rebuild:
            return path
        frames = records_to_frames(load_records(directory, sources))
        try:
            target_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".catalog-", suffix=".duckdb", dir=target_dir)
        except OSError as exc:  # it read "error: Not a directory: /etc/passwd/b", naming neither the folder's role nor
            # the setting that moves it
            raise OSError(exc.errno, f"{exc.strerror}: the catalog's database cannot be built in {str(target_dir)!r}; "
                          "accepted: a writable folder ($LLM_PLANNER_BUILD_DIR names one; docs/install.md)") from None
        os.close(fd)
        os.unlink(tmp)  # duckdb wants to create the file itself
        try:
            con = duckdb.connect(tmp)
            try:
                for table, frame in zip(TABLES, (frames["gpus"], frames["models"], frames["aliases"], frames["refs"],
                                                 frames["hosts"], frames["compat_rules"])):
                    con.register("incoming", frame)
                    con.execute(f"CREATE TABLE {table} AS SELECT * FROM incoming")  # table names are ours, not input
                    con.unregister("incoming")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, path)  # atomic, also over a corrupt file another process may hold open
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


def _probe(con) -> None:
    """Read every table once: a damaged file fails here (on open or on the first query), not
    in the middle of a user's command."""
    for table in TABLES:
        con.execute(f"SELECT * FROM {table}").fetchall()  # our table names; the tables are small


def _connect(directory: Path, rebuild: bool = False, problem: str | None = None):
    """(path, read-only connection) to a readable database; a file DuckDB cannot read is
    rebuilt once, and that is warned about once."""
    path = database_path(directory, rebuild=rebuild)
    for attempt in (1, 2):
        con = None
        try:
            con = duckdb.connect(str(path), read_only=True)
            _probe(con)
        except duckdb.Error as exc:
            if con is not None:
                try:
                    con.close()
                except duckdb.Error:
                    pass
            if attempt == 2:
                raise CatalogError(str(path), None, None,
                                   f"cannot be read even after a rebuild: {exc}; delete {path.parent} and retry") from None
            problem = str(exc)
            path = database_path(directory, rebuild=True)
            continue
        if problem is not None:
            warnings.warn(f"the catalog database {path} could not be read ({one_line(problem, 200)}); "
                          "it was rebuilt from the catalog YAML", CatalogDatabaseWarning, stacklevel=2)
        return path, con


class Database:
    """One read-only DuckDB connection to the built catalog, reopened (after a rebuild) when a
    query finds the file damaged. Shared by the catalog objects of a process."""

    def __init__(self, directory: Path = CATALOG_DIR):
        self.directory = Path(directory)
        self.lock = threading.Lock()
        self.path, self.con = _connect(self.directory)
        self._held: dict[str, pd.DataFrame] = {}

    def held(self, name: str) -> pd.DataFrame:
        """query(SQL[name]) read once per connection's database and then handed out as shallow
        copies (copy-on-write keeps the held frame intact whatever a caller changes). The file
        is named by a fingerprint of the YAML it was built from and a rebuild reads the same YAML,
        so a held frame is the database's answer for the life of the process. The CLI's
        include_user frames ask for it: two queries of 8 ms (2-core machine) per command before."""
        found = self._held.get(name)
        if found is None:
            found = self._held[name] = self.query(SQL[name])
        return found.copy(deep=False)

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        for attempt in (1, 2):
            with self.lock:
                con = self.con
                cur = con.cursor()
            try:
                return cur.execute(sql, params or []).df()
            except DAMAGED as exc:
                if attempt == 2:
                    raise
                self._reopen(con, exc)
            finally:
                cur.close()

    def _reopen(self, broken, exc: Exception) -> None:
        with self.lock:
            if self.con is not broken:  # another thread already did
                return
            try:
                broken.close()
            except duckdb.Error:
                pass
            self.path, self.con = _connect(self.directory, rebuild=True, problem=str(exc))

    def close(self) -> None:
        self.con.close()


class ShippedCatalog:
    """Read-only access to the shipped catalog. One connection; one cursor per query."""

    def __init__(self, directory: Path = CATALOG_DIR, database: Database | None = None):
        self._db = database or Database(directory)

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def _con(self):
        return self._db.con

    def query(self, name: str, params: list | None = None) -> pd.DataFrame:
        return self._db.query(SQL[name], params)

    def gpus(self) -> pd.DataFrame:
        return self.query("gpus")

    def models(self) -> pd.DataFrame:
        return self.query("models")

    def aliases(self) -> pd.DataFrame:
        return self.query("aliases")

    def hosts(self) -> pd.DataFrame:
        """Host classes (chassis, CPU, RAM, PSU per node) and the network, with source and date."""
        return self.query("hosts")

    def compatibility(self) -> pd.DataFrame:
        """The compatibility rules (engine/compat.py applies them)."""
        return self.query("compatibility")

    def references(self) -> pd.DataFrame:
        frame = self.query("references")
        frame["scenario"] = frame["scenario_json"].map(json.loads)
        return frame

    def close(self) -> None:
        self._db.close()


_database: Database | None = None
_database_lock = threading.Lock()


def shared_database() -> Database:
    """The shipped catalog's database, opened once per process."""
    global _database
    with _database_lock:
        if _database is None:
            _database = Database()
        return _database


def shipped_catalog() -> ShippedCatalog:
    """The shipped catalog, on the process's one connection."""
    return ShippedCatalog(database=shared_database())


def shipped_ids() -> dict[str, set]:
    """{'gpus': ids, 'models': ids} of the shipped catalog (user ids may not reuse them)."""
    cat = shipped_catalog()
    return {"gpus": set(cat.gpus()["id"]), "models": set(cat.models()["id"])}
