"""LLM hardware planner: the Streamlit entry point.

Page config, the shared workload sidebar (app.common.sidebar, kept in session state across
pages) and the navigation over pages/. Run with `make run` (streamlit run dashboard.py).
"""

import streamlit as st

from app import common
from app.frame import framed

st.set_page_config(page_title=common.APP_NAME, page_icon="🧮", layout="wide")

# url_path = the file's stem, as Streamlit's legacy pages/ handling names it (see app/frame.py)
PAGES = {
    "Plan": [
        # the default page is served at "/" and Streamlit does not resolve its own url_path (a link
        # to /overview said "Page not found"): the same page is also listed, hidden, at /overview
        st.Page("pages/overview.py", title="Overview", icon=":material/home:", url_path="home", default=True),
        st.Page("pages/overview.py", title="Overview", icon=":material/home:", url_path="overview",
                visibility="hidden"),
        st.Page("pages/feasibility.py", title="Feasibility matrix", icon=":material/grid_on:", url_path="feasibility"),
        st.Page("pages/budget.py", title="Budget planner", icon=":material/savings:", url_path="budget"),
        st.Page("pages/cost_per_fit.py", title="Cost per fit", icon=":material/payments:", url_path="cost_per_fit"),
        st.Page("pages/inference.py", title="Inference", icon=":material/bolt:", url_path="inference"),
        st.Page("pages/serving.py", title="Serving", icon=":material/dns:", url_path="serving"),
    ],
    "Explain": [
        st.Page("pages/breakdown.py", title="Breakdown & what-if", icon=":material/stacked_bar_chart:", url_path="breakdown"),
        st.Page("pages/evidence.py", title="Evidence", icon=":material/fact_check:", url_path="evidence"),
    ],
    "Data": [
        st.Page("pages/catalog_browser.py", title="Catalog", icon=":material/menu_book:", url_path="catalog_browser"),
    ],
}

page = st.navigation(PAGES)
common.sidebar()
with framed():
    page.run()
