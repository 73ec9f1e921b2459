"""The dashboard through Streamlit's AppTest: every page renders, every table has a CSV
download of exactly what it shows, the sidebar's workload drives the tables and survives page
switches, bad input gives one clear line, and user catalog entries reach every page.

Expected numbers come from direct engine.estimate calls or the catalog's own figures."""

import io
import json

import numpy as np
import pandas as pd
import pytest
import streamlit as st
import streamlit.testing.v1.app_test as app_test_module
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from engine import estimate, grid
from engine.report import FORMULA_START
from tests.conftest import ROOT

DASHBOARD = str(ROOT / "dashboard.py")
PAGES = {  # page file -> (title, charts at least)
    "pages/overview.py": ("LLM hardware planner", 1),
    "pages/feasibility.py": ("Feasibility matrix", 1),
    "pages/budget.py": ("Budget planner", 1),
    "pages/cost_per_fit.py": ("Cost per fit", 2),
    "pages/inference.py": ("Inference", 1),
    "pages/breakdown.py": ("Breakdown & what-if", 4),
    "pages/evidence.py": ("Evidence", 1),
    "pages/catalog_browser.py": ("Catalog", 0),
}
UNIT_WORDS = ("GiB", "GB", "$", "%", "tokens")
GIB = 2**30


@pytest.fixture(autouse=True)
def clear_caches():
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


class _WarmServerPages(PagesManager):
    """A running server stops treating pages/ as a legacy multipage folder once st.navigation
    has run (process-wide flag); AppTest resets that flag before every run. Keep it off, as on
    a warm server, so each run goes through dashboard.py and clicks are not consumed by the
    one-off rerun of app.common.ensure_frame (tested on its own below)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        PagesManager.uses_pages_directory = False


@pytest.fixture(autouse=True)
def warm_server(monkeypatch, request):
    monkeypatch.setattr(PagesManager, "uses_pages_directory", None)  # restored after the test
    if not request.node.name.startswith("test_cold_server"):
        monkeypatch.setattr(app_test_module, "PagesManager", _WarmServerPages)
    yield


@pytest.fixture
def downloads(monkeypatch):
    """Read what a download button would hand to the browser (AppTest keeps it in memory)."""
    stores = []

    class Recording(MemoryMediaFileStorage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stores.append(self)

    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", Recording)

    def read(button) -> str:
        file_id = button.proto.url.rsplit("/", 1)[-1].split(".")[0]
        return stores[-1].get_file(file_id).content.decode("utf-8")

    return read


def open_app(page: str | None = None, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    if query:
        at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page:
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def table(at: AppTest, i: int = 0) -> pd.DataFrame:
    return at.dataframe[i].value


def parse_csv(text: str) -> tuple[dict, pd.DataFrame]:
    lines = text.splitlines(keepends=True)
    settings = {}
    body = 0
    while body < len(lines) and lines[body].startswith("# "):
        key, _, value = lines[body][2:].rstrip("\n").partition(": ")
        settings[key] = value
        body += 1
    return settings, pd.read_csv(io.StringIO("".join(lines[body:])), keep_default_na=True)


def assert_same_table(shown: pd.DataFrame, csv: pd.DataFrame, where: str):
    assert list(csv.columns) == [str(c) for c in shown.columns], where
    assert len(csv) == len(shown), where
    for col in shown.columns:
        left, right = shown[col], csv[str(col)]
        if pd.api.types.is_bool_dtype(left):
            assert left.astype(bool).tolist() == right.astype(bool).tolist(), (where, col)
        elif pd.api.types.is_numeric_dtype(left):
            assert np.allclose(left.astype(float), right.astype(float), equal_nan=True), (where, col)
        else:
            a = left.astype(object).where(left.notna(), "").astype(str).tolist()
            b = right.astype(object).where(right.notna(), "").astype(str).tolist()
            # to_csv prefixes a quote to text a spreadsheet would run as a formula
            b = [v[1:] if v.startswith("'") and v[1:].startswith(FORMULA_START) else v for v in b]
            assert a == b, (where, col)


def chart_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("vega_lite_chart")]


def quantitative_axis_titles(spec: dict) -> list[str]:
    titles = []
    for layer in spec.get("layer", [spec]):
        for channel in ("x", "y"):
            enc = layer.get("encoding", {}).get(channel)
            if isinstance(enc, dict) and enc.get("type") == "quantitative" and "title" in enc:
                titles.append(enc["title"])
    return titles


def cell(frame: pd.DataFrame, row_label: str, column: str, key: str = "Model") -> str:
    return str(frame.set_index(key).loc[row_label, column])


def smallest_count(models, gpus, workload: dict, model: str, gpu: str, limit: int = 8):
    """Independently: the first GPU count 1..limit that fits (ZeRO as configured from two GPUs on)."""
    frame = grid(gpus=list(range(1, limit + 1)))
    frame["model"], frame["gpu"] = model, gpu
    for key, value in workload.items():
        frame[key] = value
    frame["zero"] = np.where(frame["gpus"] == 1, 0, workload.get("zero", 0))
    est = estimate(frame, models, gpus)
    fitting = est.loc[est["fits"].fillna(False).astype(bool), "gpus"]
    return int(fitting.min()) if len(fitting) else None


DEFAULT_WORKLOAD = {"task": "train", "method": "lora", "precision": "bf16", "optimizer": "adamw", "batch": 1,
                    "seq": 2048, "grad_checkpointing": True, "lora_rank": 8, "lora_targets": "q_proj,v_proj",
                    "zero": 3, "offload": "none"}


# ---- every page ---------------------------------------------------------------------------

@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_with_tables_downloads_and_labelled_charts(page, downloads):
    title, charts = PAGES[page]
    at = open_app(page)
    assert [t.value for t in at.title] == [title]
    assert not at.error, [e.value for e in at.error]
    assert len(at.dataframe) >= 1
    # every table has a CSV download of exactly what it shows, with the settings recorded
    assert len(at.download_button) == len(at.dataframe)
    for i, (frame, button) in enumerate(zip(at.dataframe, at.download_button)):
        settings, csv = parse_csv(downloads(button))
        assert settings["tool"] == "LLM hardware planner" and settings["model"] == "llama-3-8b"
        assert "GiB" in settings["memory unit"]
        assert_same_table(frame.value, csv, f"{page} table {i}")
    specs = chart_specs(at)
    assert len(specs) >= charts
    for spec in specs:
        for axis_title in quantitative_axis_titles(spec):
            assert any(word in axis_title for word in UNIT_WORDS), f"{page}: axis '{axis_title}' has no unit"


def test_every_page_file_is_in_the_navigation_and_has_a_smoke_test():
    files = {f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py")}
    assert files == set(PAGES)
    navigation = (ROOT / "dashboard.py").read_text()
    for path in files:
        assert f'"{path}"' in navigation, path


def test_cold_server_deep_link_still_runs_inside_the_dashboard_frame():
    # AppTest as is: every run starts like a fresh server, where Streamlit would run pages/x.py
    # alone (no sidebar); app.common.ensure_frame reruns it through dashboard.py
    at = open_app("pages/feasibility.py")
    assert [t.value for t in at.title] == ["Feasibility matrix"]
    assert at.selectbox(key="w_method").value == "lora"
    assert len(at.sidebar.children) > 0


# ---- the first screen ------------------------------------------------------------------------

def test_first_screen_answers_llama_3_8b_lora(models, gpus):
    at = open_app()
    assert "Llama 3 8B · LoRA r=8 on q_proj, v_proj · bf16" in at.subheader[0].value
    metrics = {m.label: m for m in at.metric}
    direct = estimate(pd.DataFrame([{**DEFAULT_WORKLOAD, "zero": 0, "model": "llama-3-8b", "gpu": "rtx-4090"}]),
                      models, gpus).iloc[0]
    assert metrics["Peak per GPU"].value == f"{direct['peak_bytes'] / GIB:,.2f} GiB"
    # cheapest purchase, found directly: for every priced card, its smallest count up to 8, times its price
    costs = {}
    for gpu_id, price in zip(gpus["id"], gpus["price_usd"]):
        if pd.isna(price) or bool(gpus.set_index("id").loc[gpu_id, "unified_memory"]):
            continue
        n = smallest_count(models, gpus, DEFAULT_WORKLOAD, "llama-3-8b", gpu_id)
        if n:
            costs[gpu_id] = n * price
    assert metrics["Cheapest to buy"].value == f"${min(costs.values()):,.0f}"
    singles = estimate(grid(gpu=list(gpus["id"])).assign(model="llama-3-8b", **{**DEFAULT_WORKLOAD, "zero": 0}), models, gpus)
    assert metrics["Cards that hold it alone"].value == f"{int(singles['fits'].sum())} of {len(gpus)}"


# ---- the workload drives the tables ----------------------------------------------------------

def test_switching_lora_to_full_raises_the_gpus_needed_for_llama_2_70b(models, gpus):
    at = open_app("pages/feasibility.py")
    column = "A100 80GB SXM4"
    lora = cell(table(at), "Llama 2 70B", column)
    expected = smallest_count(models, gpus, DEFAULT_WORKLOAD, "llama-2-70b", "a100-80gb-sxm")
    assert lora == str(expected)
    at.selectbox(key="w_method").set_value("full").run()
    assert not at.exception
    full = cell(table(at), "Llama 2 70B", column)
    expected_full = smallest_count(models, gpus, {**DEFAULT_WORKLOAD, "method": "full"}, "llama-2-70b", "a100-80gb-sxm")
    assert full == (str(expected_full) if expected_full else "✗ >8")
    as_number = lambda text: float("inf") if text.startswith("✗") else int(text)  # noqa: E731
    assert as_number(full) > as_number(lora)


def test_the_workload_survives_page_switches_and_hidden_widgets():
    at = open_app()
    at.number_input(key="w_batch").set_value(4).run()
    at.number_input(key="w_lora_rank").set_value(16).run()
    at.switch_page("pages/breakdown.py").run()
    assert at.number_input(key="w_batch").value == 4
    assert any("micro-batch 4 × 2,048 tokens" in cap.value for cap in at.caption)
    # serving hides the LoRA widgets; the rank must come back when training is chosen again
    at.radio(key="w_task").set_value("infer").run()
    with pytest.raises(KeyError):
        at.number_input(key="w_lora_rank")
    at.switch_page("pages/inference.py").run()
    at.radio(key="w_task").set_value("train").run()
    assert at.number_input(key="w_lora_rank").value == 16
    assert at.selectbox(key="w_method").value == "lora"
    assert not at.exception


def test_units_switch_between_gib_and_gb(gpus):
    at = open_app()
    usable = float(gpus.set_index("id").loc["rtx-4090", "usable_memory_bytes"])
    assert cell(table(at), "RTX 4090", "Usable per card (GiB)", key="GPU") == str(round(usable / GIB, 2))
    at.radio(key="w_units").set_value("GB").run()
    assert cell(table(at), "RTX 4090", "Usable per card (GB)", key="GPU") == str(round(usable / 1e9, 2))
    assert at.metric[0].value.endswith(" GB")


def test_query_parameters_seed_the_workload_and_bad_ones_are_named():
    at = open_app(query={"model": "llama-2-7b", "batch": "4", "seq": "lots"})
    assert at.selectbox(key="w_model").value == "llama-2-7b"
    assert at.number_input(key="w_batch").value == 4
    assert at.number_input(key="w_seq").value == 2048
    assert any("seq='lots' ignored" in w.value for w in at.warning)
    assert at.query_params.get("batch") == "4"  # the URL keeps reproducing the view


# ---- planners --------------------------------------------------------------------------------

def test_budget_planner_respects_the_budget_and_the_article_tiers():
    at = open_app("pages/budget.py")
    at.number_input(key="bp_budget").set_value(5000.0).run()
    feasible, unlocks = table(at, 0), table(at, 1)
    assert len(feasible) > 0 and (feasible["Purchase ($)"] <= 5000).all()
    assert ((unlocks["Purchase ($)"] > 5000) & (unlocks["Purchase ($)"] <= 7500)).all()
    assert np.allclose(unlocks["Extra needed ($)"], unlocks["Purchase ($)"] - 5000)
    at.segmented_control(key="bp_tier").set_value("$20k–$50k").run()
    assert at.number_input(key="bp_budget").value == 50_000
    assert any(m.label == "Fit within $50,000" for m in at.metric)
    assert len(table(at, 0)) > len(feasible)
    tiers = table(at, len(at.dataframe) - 1)
    assert tiers["Article's configuration"].tolist()[0].startswith("2× RTX 4090")


def test_cloud_budget_per_job_uses_hours():
    at = open_app("pages/budget.py")
    at.radio(key="bp_mode").set_value("cloud_job").run()
    at.number_input(key="bp_budget").set_value(100.0).run()
    at.number_input(key="bp_hours").set_value(10.0).run()
    feasible = table(at, 0)
    assert "Job cost ($)" in feasible.columns and (feasible["Job cost ($)"] <= 100).all()


def test_breakdown_ranks_the_changes_that_make_it_fit(models, gpus):
    at = open_app("pages/breakdown.py")
    at.selectbox(key="w_method").set_value("full").run()
    assert not at.exception
    components, variants = table(at, 0), table(at, 1)
    direct = estimate(pd.DataFrame([{**DEFAULT_WORKLOAD, "method": "full", "zero": 0, "model": "llama-3-8b",
                                     "gpu": "rtx-4090"}]), models, gpus).iloc[0]
    assert not bool(direct["fits"])
    assert components["Per GPU (GiB)"].sum() == pytest.approx(direct["peak_bytes"] / GIB, abs=0.01)
    assert variants["Change"].iloc[0] == "As configured" and not variants["Fits"].iloc[0]
    fits = variants["Fits"].astype(bool).tolist()[1:]
    assert fits[0] and fits == sorted(fits, reverse=True)  # those that fit come first
    assert any(m.label == "Largest micro-batch" for m in at.metric)


def test_inference_page_sets_the_articles_table_beside_ours():
    at = open_app("pages/inference.py")
    article = table(at, 1).set_index("Model")
    assert article.loc["Llama 2 7B", ["FP16 article (GB)", "INT8 article (GB)", "INT4 article (GB)"]].tolist() == [14, 7, 3.5]
    assert article.loc["Llama 2 13B", ["FP16 article (GB)", "INT8 article (GB)", "INT4 article (GB)"]].tolist() == [26, 13, 6.5]
    assert article.loc["Llama 3 70B", ["FP16 article (GB)", "INT8 article (GB)", "INT4 article (GB)"]].tolist() == [140, 70, 35]
    assert article.loc["Llama 2 7B", "FP16 ours (GB)"] == round(6_738_415_616 * 2 / 1e9, 2)
    main = table(at, 0)
    assert set(main["Weights"]) >= {"FP16", "INT8 (LLM.int8)", "INT4 (GPTQ/AWQ, g128)", "GGUF Q4_K_M"}


def test_evidence_lists_every_reference(cat):
    at = open_app("pages/evidence.py")
    shown = table(at)
    assert len(shown) == len(cat.references())
    row = shown.set_index("Reference").loc["llamacpp-llama31-8b-fp16-size"]
    assert row["Published"] == 14.96 and row["Unit"] == "GiB"
    # 8,030,261,248 parameters x 2 bytes = 14.957 GiB
    assert row["Ours"] == pytest.approx(8_030_261_248 * 2 / GIB, abs=0.001)


# ---- bad input -------------------------------------------------------------------------------

def test_bad_input_gives_one_clear_line_and_keeps_what_was_entered():
    at = open_app("pages/breakdown.py")
    at.multiselect(key="w_lora_targets").set_value([]).run()
    assert not at.exception
    assert any("LoRA target modules: none chosen" in e.value for e in at.error)
    assert at.multiselect(key="w_lora_targets").value == []
    at.multiselect(key="w_lora_targets").set_value(["q_proj"]).run()
    at.selectbox(key="w_model").set_value("llama-1-7b").run()
    at.number_input(key="w_seq").set_value(4096).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("4,096" in e and "2,048" in e for e in errors), errors
    assert at.number_input(key="w_seq").value == 4096


# ---- the catalog: user entries reach every page ----------------------------------------------

def _fill_gpu(at: AppTest, gpu_id: str, name: str) -> AppTest:
    at.text_input(key="ag_id").input(gpu_id)
    at.text_input(key="ag_name").input(name)
    return at.form_submit_button[0].click().run()


def test_a_gpu_added_in_the_catalog_reaches_every_page():
    at = open_app("pages/catalog_browser.py")
    _fill_gpu(at, "My GPU", "Test card 48GB")
    assert not at.exception
    assert any("field 'id'" in e.value and "'My GPU'" in e.value for e in at.error)
    assert at.text_input(key="ag_id").value == "My GPU"  # what the user typed is kept
    _fill_gpu(at, "test-card-48gb", "Test card 48GB")
    assert not at.exception and not at.error
    assert any("test-card-48gb" in s.value for s in at.success)
    assert "test-card-48gb" in table(at, 0)["id"].tolist()
    assert "Test card 48GB" in at.selectbox(key="w_gpu").options  # shown by name
    at.switch_page("pages/feasibility.py").run()
    assert "Test card 48GB" in table(at).columns
    at.selectbox(key="w_gpu").set_value("test-card-48gb").run()
    at.switch_page("pages/breakdown.py").run()
    usable = {m.label: m.value for m in at.metric}["Usable per GPU"]
    assert usable == f"{49140 * 2**20 / GIB:,.2f} GiB"  # the form's default: 49,140 MiB as nvidia-smi shows
    # the same id twice is refused
    at.switch_page("pages/catalog_browser.py").run()
    _fill_gpu(at, "test-card-48gb", "Again")
    assert any("already in the catalog" in e.value for e in at.error)


LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                "max_position_embeddings": 2048, "tie_word_embeddings": False}


def test_a_config_json_upload_adds_a_model_and_bad_json_is_named():
    at = open_app("pages/catalog_browser.py")
    at.file_uploader(key="am_upload").set_value(("config.json", b"{not json", "application/json")).run()
    at.button(key="am_upload_add").click().run()
    assert not at.exception
    assert any("not valid JSON" in e.value for e in at.error)
    at.file_uploader(key="am_upload").set_value(("config.json", json.dumps(LLAMA_CONFIG).encode(), "application/json")).run()
    at.text_input(key="am_upload_id").input("tiny-llama-1b").run()
    at.button(key="am_upload_add").click().run()
    assert not at.exception and not at.error
    models_table = table(at, 1).set_index("id")
    # embedding + lm_head 2 x 32000 x 2048; per layer q,o 2 x 2048^2, k,v 2 x 2048 x 256, MLP 3 x 2048 x 5632, norms 2 x 2048
    per_layer = 2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048
    assert models_table.loc["tiny-llama-1b", "Parameters (exact)"] == 2 * 32000 * 2048 + 22 * per_layer + 2048
    assert "tiny-llama-1b" in at.selectbox(key="w_model").options  # no name in the config: shown by its id
