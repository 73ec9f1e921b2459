"""The use cases over the engine and the catalog: cheapest configuration, budgets, what-if,
evidence, reports and the command line (`python -m engine` runs planner.cli).

Layers (tests/test_layers.py holds them): engine (physics) <- catalog (YAML, DuckDB) <-
planner (this package) <- app and pages (the dashboard). Nothing here imports streamlit.
"""
