"""The catalog: YAML sources, their validation, and the DuckDB database built from them.

The only package that touches YAML or SQL. Everything else asks it for DataFrames:
Catalog / default_catalog for the shipped catalog, catalog_frames for the shipped catalog
merged with the user's saved entries (and a session's own records).
"""

from catalog.db import Catalog, database_path, default_catalog, load_records
from catalog.schema import CatalogError
from catalog.store import catalog_frames

__all__ = ["Catalog", "CatalogError", "catalog_frames", "database_path", "default_catalog", "load_records"]
