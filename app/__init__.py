"""The dashboard's shared Streamlit helpers (sidebar, catalog access, tables, downloads).

Pages import `app.common`; nothing here computes a formula: the numbers come from
`engine.estimate` and `planner.planning`.
"""
