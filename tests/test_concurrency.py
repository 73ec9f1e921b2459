"""Many people on one server at once: 20 dashboard sessions run at the same time, each with its
own workload (task, method, model, batch), some adding their own GPUs and models on the Catalog
page. Every session runs the four pages that list the catalog's entries or the workload's figure
(Overview, Feasibility, Inference, Catalog) and one of the other four in turn, so that five sessions
are on each of those at once and every page runs under load. No session may raise, and none may
see another's session-only entries or settings: asserted on the tables, widgets and figures each one
sees. (Every session ran all eight pages until session 8: 190 s of the suite's 490 s, for four pages
whose only check is the sidebar's values, which the pages run here check as well.)

The sessions are Streamlit AppTest instances in threads, all started together behind a barrier.
AppTest is written for one app at a time: every run puts its own mock runtime into a
process-wide slot (Runtime._instance) and empties it when it ends, and sets the global
`global.appTest` option only for the length of its run. The `one_server` fixture instead holds
one runtime (caches, media files) and that option for the whole test, as one server would for
all its sessions; everything else (session state, widgets, script runs) stays per session.

Expected figures come from direct engine.estimate calls and the shipped catalog."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from unittest.mock import MagicMock

import pandas as pd
import pytest
import streamlit as st
import streamlit.testing.v1.app_test as app_test_module
import streamlit.testing.v1.local_script_runner as local_script_runner_module
from streamlit.components.v2.component_manager import BidiComponentManager
from streamlit.runtime import Runtime
from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
from streamlit.runtime.dataframe_source_manager import DataframeSourceManager
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.util import patch_config_options

from app.labels import md_escape
from catalog.store import ENV_VAR, UserCatalog
from engine import estimate
from tests.conftest import ROOT

DASHBOARD = str(ROOT / "dashboard.py")
PAGES = ["pages/overview.py", "pages/feasibility.py", "pages/budget.py", "pages/cost_per_fit.py",
         "pages/inference.py", "pages/breakdown.py", "pages/evidence.py", "pages/catalog_browser.py"]
# the pages observe() reads entries or figures from; every session runs these
LISTING_PAGES = ["pages/overview.py", "pages/feasibility.py", "pages/inference.py", "pages/catalog_browser.py"]
# the others, one per session in turn: session n runs OTHER_PAGES[(n + n // 4) % 4], so that each is
# run by five sessions and with each of the four workloads (WORKLOADS[n % 4])
OTHER_PAGES = [p for p in PAGES if p not in LISTING_PAGES]
N_SESSIONS = 8  # (20 until issue 28: the suite is held to 6 minutes on 2 cores; 8: each page under two workloads)
GIB = 2**30
MODELS = ["llama-3-8b", "llama-2-7b", "llama-2-13b", "llama-1-7b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
          "llama-1-13b", "llama-2-70b", "llama-3-70b"]
# (task, method, batch) by session number mod 4; with MODELS by number mod 10, every session differs
WORKLOADS = [("train", "lora", 1), ("train", "full", 2), ("train", "qlora", 3), ("infer", "full", 2)]


@dataclass(frozen=True)
class Spec:
    n: int
    task: str
    method: str
    model: str
    batch: int
    gpu_id: str | None      # a GPU this session adds on the Catalog page (session only)
    model_id: str | None    # a model this session adds

    @property
    def pages(self):
        return LISTING_PAGES + [OTHER_PAGES[(self.n + self.n // 4) % len(OTHER_PAGES)]]

    @property
    def gpu_name(self):
        return f"Session {self.n} card"

    @property
    def model_name(self):
        return f"Session {self.n} model"


SPECS = [Spec(n, *WORKLOADS[n % 4][:2], MODELS[n % 10], WORKLOADS[n % 4][2],
              gpu_id=f"s{n}-card" if n % 5 == 0 else None, model_id=f"s{n}-model" if n % 10 == 0 else None)
         for n in range(N_SESSIONS)]


@pytest.fixture
def one_server(monkeypatch, tmp_path):
    """Concurrent AppTests as sessions of one server (see the module docstring)."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "user_catalog.yaml"))
    runtime = MagicMock(spec=Runtime)
    runtime.media_file_mgr = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
    runtime.dataframe_source_mgr = DataframeSourceManager()
    runtime.cache_storage_manager = MemoryCacheStorageManager()
    components = BidiComponentManager()
    components.discover_and_register_components(start_file_watching=False)
    runtime.bidi_component_registry = components
    monkeypatch.setattr(Runtime, "_instance", runtime)
    # AppTest's own per-run swap of the runtime and of the option now touch a stand-in
    monkeypatch.setattr(app_test_module, "Runtime", SimpleNamespace(_instance=None))
    monkeypatch.setattr(app_test_module, "patch_config_options", lambda options: contextlib.nullcontext())
    # one compiled copy of each script for all sessions, compiled under one lock, as a server's single
    # ScriptCache does. AppTest and its LocalScriptRunner each make a fresh ScriptCache per run, so 20
    # sessions would parse the same scripts in 20 threads at once, and CPython 3.11's ast module is not
    # safe for that: "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905),
    # seen once in CI as a page that rendered nothing. Patching the class covers every instance.
    shared_scripts = ScriptCache()
    compile_script = ScriptCache.get_bytecode
    monkeypatch.setattr(ScriptCache, "get_bytecode", lambda _cache, path: compile_script(shared_scripts, path))
    # AppTest waits for a script run by waking every millisecond to look for its end; 20 waiting
    # sessions then take the GIL from the running scripts thousands of times a second (the test took
    # 128 s so, 20 sessions x 5 pages). A server has no such loop: wait for the end in 20 ms steps.
    monkeypatch.setattr(local_script_runner_module, "require_widgets_deltas", _wait_for_the_run)
    st.cache_data.clear()
    with patch_config_options({"global.appTest": True}):
        yield
    st.cache_data.clear()


def _wait_for_the_run(runner, timeout: float = 3) -> None:
    """streamlit's require_widgets_deltas (testing/v1/local_script_runner.py, 1.67) with a 20 ms poll:
    return when the run has ended; past the timeout, stop the run and raise as it does."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        time.sleep(0.02)
        if runner.script_stopped():
            return
    runner.request_stop()
    runner.join()
    raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")


def _ok(at: AppTest, where: str) -> None:
    assert not at.exception, (where, [e.value for e in at.exception])
    assert not at.error, (where, [e.value for e in at.error])


def _add_entries(at: AppTest, spec: Spec) -> None:
    at.switch_page("pages/catalog_browser.py").run()
    at.text_input(key="ag_id").input(spec.gpu_id)
    at.text_input(key="ag_name").input(spec.gpu_name)
    at.number_input(key="ag_usable_mib").set_value(20_000 + 1_000 * spec.n)
    at.form_submit_button[0].click().run()
    _ok(at, f"session {spec.n} adding a GPU")
    if spec.model_id:
        at.text_input(key="am_id").input(spec.model_id)
        at.text_input(key="am_name").input(spec.model_name)
        at.number_input(key="am_layers").set_value(2 + spec.n)
        at.form_submit_button[1].click().run()
        _ok(at, f"session {spec.n} adding a model")


def observe(at: AppTest, spec: Spec, page: str, seen: dict) -> None:
    """What this session sees on one page: its sidebar, and the tables that could leak."""
    _ok(at, f"session {spec.n} {page}")
    # a script that fails to compile leaves no exception element in AppTest, only an empty page
    assert "w_task" in {r.key for r in at.radio}, f"session {spec.n}: {page} rendered no sidebar"
    task = at.radio(key="w_task").value
    method = at.selectbox(key="w_method").value if task == "train" else "full"  # serving has no method box
    seen["widgets"][page] = (task, method, at.selectbox(key="w_model").value, at.number_input(key="w_batch").value)
    if page == "pages/overview.py":
        seen["subheader"] = at.subheader[0].value
        seen["peak"] = {m.label: m.value for m in at.metric}["Peak per GPU"]
    elif page == "pages/feasibility.py":
        seen["matrix_gpus"] = set(at.dataframe[0].value.columns) - {"Model"}
        seen["matrix_models"] = set(at.dataframe[0].value["Model"])
    elif page == "pages/inference.py":
        seen["inference_models"] = set(at.dataframe[0].value["Model"])
    elif page == "pages/catalog_browser.py":
        seen["catalog_gpus"] = set(at.dataframe[0].value["id"])
        seen["catalog_models"] = set(at.dataframe[1].value["id"])
        seen["gpu_options"] = set(at.selectbox(key="w_gpu").options)


def run_session(spec: Spec, start: threading.Barrier) -> dict:
    """One person: open the app, maybe add entries, set a workload, then visit every page."""
    start.wait(timeout=120)
    at = AppTest.from_file(DASHBOARD, default_timeout=240)
    at.run()
    _ok(at, f"session {spec.n} first screen")
    page = "pages/overview.py"
    if spec.gpu_id:
        _add_entries(at, spec)
        page = "pages/catalog_browser.py"
    at.radio(key="w_task").set_value(spec.task)
    if spec.task == "train":
        at.selectbox(key="w_method").set_value(spec.method)
    at.selectbox(key="w_model").set_value(spec.model)
    at.number_input(key="w_batch").set_value(spec.batch)
    at.run()  # the page it is on, with the new workload
    seen = {"widgets": {}, "n": spec.n}
    observe(at, spec, page, seen)
    for other in spec.pages:
        if other != page:
            at.switch_page(other).run()
            observe(at, spec, other, seen)
    return seen


def expected_peak(spec: Spec, models: pd.DataFrame, gpus: pd.DataFrame) -> str:
    """The Overview's 'Peak per GPU' for the session's workload on one RTX 4090, straight from
    the engine (every field spelled out as the sidebar's defaults give it)."""
    common = {"model": spec.model, "gpu": "rtx-4090", "gpus": 1, "batch": spec.batch, "seq": 2048, "headroom": 0.0,
              "allow_long_context": False, "zero": 0, "offload": "none"}
    if spec.task == "train":
        sc = {**common, "task": "train", "method": spec.method, "precision": "bf16", "optimizer": "adamw",
              "grad_checkpointing": True, "lora_rank": 8, "lora_targets": "q_proj,v_proj", "base_precision": "auto",
              "freeze_layers": 2}
    else:
        sc = {**common, "task": "infer", "method": "full", "precision": "bf16", "kv_precision": "auto", "tp": 1}
    peak = float(estimate(pd.DataFrame([sc]), models, gpus).iloc[0]["peak_bytes"])
    return f"{peak / GIB:,.2f} GiB"


def test_eight_sessions_at_once_each_see_only_their_own_entries_and_settings(one_server, models, gpus, tmp_path):
    start = threading.Barrier(N_SESSIONS)
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=N_SESSIONS) as pool:
        futures = [pool.submit(run_session, spec, start) for spec in SPECS]
        results = [f.result(timeout=600) for f in futures]  # re-raises a session's failure
    elapsed = time.monotonic() - began
    names = dict(zip(models["id"], models["name"]))
    all_gpu_ids = {s.gpu_id for s in SPECS if s.gpu_id}
    all_gpu_names = {s.gpu_name for s in SPECS if s.gpu_id}
    all_model_ids = {s.model_id for s in SPECS if s.model_id}
    all_model_names = {s.model_name for s in SPECS if s.model_id}
    # every fifth session saves a card, every tenth a model (2 and 1 of eight)
    assert len(all_gpu_ids) == 2 and len(all_model_ids) == 1
    # every page ran in some session, each of the other four in two sessions at once
    assert set().union(*(set(r["widgets"]) for r in results)) == set(PAGES)
    assert all(sum(p in s.pages for s in SPECS) == N_SESSIONS // len(OTHER_PAGES) for p in OTHER_PAGES)
    # each of those pages under two different workloads, each workload on two pages
    combos = {(s.pages[-1], s.task, s.method) for s in SPECS}
    assert len(combos) == N_SESSIONS
    assert all(len({c[1:] for c in combos if c[0] == p}) == 2 for p in OTHER_PAGES)
    assert all(len({c[0] for c in combos if c[1:] == tuple(w[:2])}) == 2 for w in WORKLOADS)
    for spec, seen in zip(SPECS, results):
        where = f"session {spec.n}"
        assert seen["n"] == spec.n
        own_gpus = {spec.gpu_id} if spec.gpu_id else set()
        own_models = {spec.model_id} if spec.model_id else set()
        # the catalog each session sees: the shipped one plus its own entries, nobody else's
        assert seen["catalog_gpus"] == set(gpus["id"]) | own_gpus, where
        assert seen["catalog_models"] == set(models["id"]) | own_models, where
        assert seen["gpu_options"] & all_gpu_names == ({spec.gpu_name} if spec.gpu_id else set()), where
        assert seen["matrix_gpus"] & all_gpu_names == ({spec.gpu_name} if spec.gpu_id else set()), where
        assert seen["matrix_models"] & all_model_names == ({spec.model_name} if spec.model_id else set()), where
        assert seen["inference_models"] & all_model_names == ({spec.model_name} if spec.model_id else set()), where
        # its own settings on every page, and the figures they give
        assert set(seen["widgets"]) == set(spec.pages), where  # it ran each of its pages
        for page, shown in seen["widgets"].items():
            assert shown == (spec.task, spec.method, spec.model, spec.batch), (where, page)
        # the subheader is Markdown: catalog names are shown escaped (app/labels.py md_escape)
        assert seen["subheader"].startswith(md_escape(names[spec.model]) + " · "), (where, seen["subheader"])
        size = (f"micro-batch {spec.batch} × 2,048 tokens" if spec.task == "train"
                else f"{spec.batch} sequences × 2,048 tokens")
        assert size in seen["subheader"], (where, seen["subheader"])
        assert seen["peak"] == expected_peak(spec, models, gpus), where
    # session-only entries never reached the user catalog file
    assert UserCatalog(tmp_path / "user_catalog.yaml", shipped_ids={}).load() == {"gpus": [], "models": []}
    print(f"{N_SESSIONS} sessions x {len(SPECS[0].pages)} pages in {elapsed:.1f} s")


def save_session(n: int, start: threading.Barrier) -> AppTest:
    """One person adds a GPU and presses "Save to my catalog file" at the same moment as the others."""
    try:
        at = AppTest.from_file(DASHBOARD, default_timeout=240)
        at.run()
        at.switch_page("pages/catalog_browser.py").run()
        at.text_input(key="ag_id").input(f"saved-{n}")
        at.text_input(key="ag_name").input(f"Saved card {n}")
        at.form_submit_button[0].click().run()
        _ok(at, f"session {n} adding")
    except BaseException:
        start.abort()  # the others stop waiting for this one
        raise
    start.wait(timeout=120)
    at.button(key=f"save_gpus_saved-{n}").click().run()
    _ok(at, f"session {n} saving")
    return at


def test_people_saving_at_the_same_moment_lose_nothing(one_server, gpus, tmp_path):
    n_savers = 6
    start = threading.Barrier(n_savers)
    with ThreadPoolExecutor(max_workers=n_savers) as pool:
        sessions = [f.result(timeout=300) for f in [pool.submit(save_session, n, start) for n in range(n_savers)]]
    wanted = {f"saved-{n}" for n in range(n_savers)}
    stored = UserCatalog(tmp_path / "user_catalog.yaml", shipped_ids={}).load()
    assert sorted(g["id"] for g in stored["gpus"]) == sorted(wanted)  # every save kept, none twice
    for n, at in enumerate(sessions):
        at.run()  # the next run of every session loads the file: all saved entries, as saved ones
        _ok(at, f"session {n} after everyone saved")
        shown = at.dataframe[0].value.set_index("id")
        assert set(shown.index) == set(gpus["id"]) | wanted
        assert set(shown.loc[sorted(wanted), "Origin"]) == {"saved in your catalog file"}
