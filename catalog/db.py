"""The catalog as the rest of the program sees it: the shipped catalog (catalog/shipped.py:
YAML -> validated records -> a DuckDB database file -> DataFrames) and, on request, the
user's own entries on top (catalog/store.py's catalog_frames).

The modules depend one way only: schema <- shipped <- store <- db (and user <- schema);
none imports one that imports it back.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd

from catalog.shipped import (  # noqa: F401  (re-exported: catalog.db was their home)
    CATALOG_DIR,
    SCHEMA_VERSION,
    SQL,
    YAML_FILES,
    CatalogDatabaseWarning,
    Database,
    ShippedCatalog,
    build_dir,
    database_path,
    load_records,
    records_to_frames,
    shared_database,
)
from catalog.store import ShippedFrames, catalog_frames


class Catalog(ShippedCatalog):
    """Read-only access to the built catalog. One connection; one cursor per query."""

    def __init__(self, directory: Path = CATALOG_DIR, database: Database | None = None):
        super().__init__(directory, database)

    def gpus(self, include_user: bool = False) -> pd.DataFrame:
        """The shipped GPUs; with include_user=True also the user catalog's (catalog_frames),
        with an `origin` column ('shipped' or 'user')."""
        if include_user:
            return catalog_frames(ShippedFrames({"gpus": self._db.held("gpus")}), kinds=("gpus",))["gpus"]
        return self.query("gpus")

    def models(self, include_user: bool = False) -> pd.DataFrame:
        """The shipped models; with include_user=True also the user catalog's (see gpus())."""
        if include_user:
            return catalog_frames(ShippedFrames({"models": self._db.held("models")}), kinds=("models",))["models"]
        return self.query("models")


_default: Catalog | None = None
_default_lock = threading.Lock()


def default_catalog() -> Catalog:
    """The shipped catalog, opened once per process (the connection catalog/store.py uses too)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Catalog(database=shared_database())
        return _default
