"""Shared fixtures. The catalog database is built into a temporary folder per test run."""

import os
import secrets
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests draw the same examples on every run ("ci", the default): a submission never
# fails by luck, and a failure reproduces. Derandomized (a seed from each test's own source),
# no example database (a clone's .hypothesis/ would replay its own past failures), no deadline
# (shared CI machines), the reproduce blob printed. A failing example found at random belongs
# in tests/test_regressions_memory.py. The wide random search is `make bench`
# (benchmarks/bench_properties.py); HYPOTHESIS_PROFILE=nightly (HYPOTHESIS_MAX_EXAMPLES, default
# 1000) runs the same property tests with fresh random examples.
_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, database=None, max_examples=60, **_COMMON)
settings.register_profile("nightly", derandomize=False, database=None,
                          max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "1000")), **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Build the DuckDB catalog outside the working tree for the whole run (before any import).
os.environ.setdefault("LLM_PLANNER_BUILD_DIR", tempfile.mkdtemp(prefix="llm-planner-test-"))
os.environ["LLM_PLANNER_USER_CATALOG"] = os.path.join(tempfile.mkdtemp(prefix="llm-planner-user-"), "user_catalog.yaml")  # never ~/.llm-planner

ROOT = Path(__file__).resolve().parent.parent

# The tests run as the entry points do (planner/cli.py main, app/frame.py): text columns in pandas' python
# storage from the start, so no test depends on whether an earlier test in its worker imported the dashboard.
# tests/test_string_storage.py checks that pandas' default (Arrow) storage gives the same results.
from engine import buffers as _buffers  # noqa: E402

_buffers.prefer_python_strings()


def _scan_installed_components_once():
    """Streamlit's AppTest builds a new component manager for each AppTest object, and that scans
    the metadata of every installed distribution for v2 components (streamlit 1.67:
    testing/v1/app_test.py _run -> BidiComponentManager.discover_and_register_components ->
    manifest_scanner.scan_component_manifests): 77 ms per AppTest on this 2-core machine, about
    a fifth of the suite's page tests. `streamlit run` scans once at start; the tests scan once
    per worker process too. The installed packages do not change during a run."""
    import functools

    from streamlit.components.v2 import manifest_scanner

    if not hasattr(manifest_scanner.scan_component_manifests, "cache_info"):
        once = functools.lru_cache(maxsize=None)(manifest_scanner.scan_component_manifests)
        manifest_scanner.scan_component_manifests = lambda *a, **k: list(once(*a, **k))
        manifest_scanner.scan_component_manifests.cache_info = once.cache_info


_scan_installed_components_once()


def pytest_configure(config):
    """One fresh seed per run for tests/test_property_search.py, drawn by the controlling process
    before pytest-xdist starts its workers (they inherit the environment): every worker, and the
    header below, see the same seed. PROPERTY_SEARCH_SEED=S reruns a seed."""
    if not hasattr(config, "workerinput"):
        os.environ.setdefault("PROPERTY_SEARCH_SEED", str(secrets.randbits(63)))


def pytest_report_header(config):
    seed = os.environ.get("PROPERTY_SEARCH_SEED")
    return [f"property search seed: {seed} (rerun: PROPERTY_SEARCH_SEED={seed} make test)"]


@pytest.fixture(scope="session")
def cat():
    from catalog import default_catalog
    return default_catalog()


@pytest.fixture(scope="session")
def models(cat):
    return cat.models()


@pytest.fixture(scope="session")
def gpus(cat):
    return cat.gpus()


@pytest.fixture(scope="session")
def dashboard_server():
    """`streamlit run dashboard.py` on a free localhost port, one per test worker for the browser tests of every
    module (tests/test_browser.py `server`); always terminated. A server per module started a second one, with its
    imports and first runs (~5 s of CPU), wherever tests/test_browser_concurrency.py ran."""
    from app.local_server import DashboardDidNotStart, running_dashboard

    env = {**os.environ, "LLM_PLANNER_BUILD_DIR": os.environ.get("LLM_PLANNER_BUILD_DIR") or tempfile.mkdtemp()}
    try:
        with running_dashboard(env, timeout_s=60) as url:
            yield url
    except DashboardDidNotStart as exc:
        pytest.fail(str(exc))


@pytest.fixture
def runs_file(tmp_path, monkeypatch):
    """The user's runs file (`ingest --save`, the Catalog page's 'Keep it') in the test's own folder, never the user's:
    its path."""
    path = tmp_path / "user_runs.yaml"
    monkeypatch.setenv("LLM_PLANNER_USER_RUNS", str(path))
    return path


@pytest.fixture
def downloads(monkeypatch):
    """Read what a download button would hand to the browser (AppTest keeps it in memory)."""
    import streamlit.testing.v1.app_test as app_test_module
    from streamlit.runtime.media_file_manager import MediaFileManager
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    stores, managers = [], []

    class Recording(MemoryMediaFileStorage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stores.append(self)

    class RecordingManager(MediaFileManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            managers.append(self)

    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", Recording)
    monkeypatch.setattr(app_test_module, "MediaFileManager", RecordingManager)

    def read(button) -> str:
        # a deferred download (a callable as `data`, the tables' CSVs) is written when pressed: press it
        # as the browser does (the media file manager runs the callable and stores the file)
        url = managers[-1].execute_deferred(button.proto.deferred_file_id) \
            if button.proto.HasField("deferred_file_id") else button.proto.url
        file_id = url.rsplit("/", 1)[-1].split(".")[0]
        return stores[-1].get_file(file_id).content.decode("utf-8")

    return read


@pytest.fixture
def clear_streamlit_caches():
    """Empty st.cache_data before and after a dashboard test. st.cache_resource is kept across
    the tests of a worker, as a server keeps it across sessions: it holds the catalog connection,
    the shipped frames and the results memoised on the value of their inputs (app/data.py memo),
    so a test that changes an input gets its own entry. Emptying it too cost the page tests a
    quarter of their time (test_pages, test_share_links, test_pages_moe: 78.8 s against 62.5 s,
    2 workers); a test that counts computations asks for cold_streamlit_caches."""
    import streamlit as st

    st.cache_data.clear()
    yield
    st.cache_data.clear()


@pytest.fixture
def cold_streamlit_caches():
    """Empty st.cache_data and st.cache_resource before and after the test: every result is
    computed afresh (the tests that count computations)."""
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()
