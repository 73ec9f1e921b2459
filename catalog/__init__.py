"""The catalog: YAML sources, their validation, and the DuckDB database built from them.

The only package that touches YAML or SQL. Everything else asks it for DataFrames.
"""

from catalog.db import Catalog, database_path, default_catalog, load_records
from catalog.schema import CatalogError

__all__ = ["Catalog", "CatalogError", "database_path", "default_catalog", "load_records"]
