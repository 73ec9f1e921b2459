"""Every page with a mixture-of-experts model selected (issue 15, done-when: "every page and the
budget planner handle MoE models (total vs active shown)"): nothing breaks, and where a page
shows a model's size it shows the total and the active parameters.

Expected counts come from the catalog's published totals and engine.params (the derivation the
catalog loader checks against the published count), not from the pages."""

import pandas as pd

from engine.serving import engine_precisions
import pytest
from streamlit.testing.v1 import AppTest

from catalog import default_catalog
from engine.params import architecture_counts
from tests.conftest import ROOT

DASHBOARD = str(ROOT / "dashboard.py")
ALL_PAGES = ("pages/overview.py", "pages/feasibility.py", "pages/budget.py", "pages/cost_per_fit.py",
             "pages/inference.py", "pages/serving.py", "pages/breakdown.py", "pages/evidence.py",
             "pages/catalog_browser.py")

pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


def open_app(page: str, query: dict) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=90)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page(page).run()
    assert not at.exception, (page, [e.value for e in at.exception])
    return at


def counts(model: str) -> tuple[float, float]:
    m = default_catalog().models().set_index("id").loc[model]
    c = architecture_counts(m.to_dict())
    assert c["total"] == m["params"]  # the derivation is the published total
    return float(c["total"]), float(c["active"])


def captions(at: AppTest) -> str:
    return " ".join(str(el.value) for el in at.caption)


@pytest.mark.parametrize("page", ALL_PAGES)
@pytest.mark.parametrize("task", ["infer", "train"])
def test_every_page_renders_with_a_moe_model(page, task):
    query = {"model": "mixtral-8x7b", "task": task, "gpu": "h100-sxm-80gb"}
    if task == "train":
        query.update(method="qlora")
    at = open_app(page, query)
    assert at.session_state["w_model"] == "mixtral-8x7b"  # the sidebar took the MoE model
    assert len(at.error) == 0, (page, [e.value for e in at.error])


def test_inference_table_shows_total_and_active_parameters():
    total, active = counts("mixtral-8x7b")  # 46,702,792,704 and 12,879,925,248 (issue 15)
    assert (total, active) == (46_702_792_704, 12_879_925_248)
    at = open_app("pages/inference.py", {"task": "infer"})
    frame = at.dataframe[0].value
    row = frame[frame["Model"] == "Mixtral 8x7B"].iloc[0]
    assert row["Parameters (billions)"] == round(total / 1e9, 2) == 46.7
    assert row["Active per token (billions)"] == round(active / 1e9, 2) == 12.88
    dense = frame[frame["Model"] == "Llama 2 7B"].iloc[0]
    assert dense["Parameters (billions)"] == dense["Active per token (billions)"] == round(6_738_415_616 / 1e9, 2)


def test_serving_page_shows_total_and_active_and_offers_expert_offload():
    total, active = counts("qwen3-30b-a3b")
    at = open_app("pages/serving.py", {"model": "qwen3-30b-a3b", "task": "infer"})
    text = captions(at)
    assert f"{total / 1e9:,.1f}B parameters resident" in text and f"{active / 1e9:,.1f}B active per token" in text
    at.selectbox(key="srv_engine").set_value("llama.cpp").run()
    assert not at.exception
    at.selectbox(key="srv_cpu_moe").set_value("all (--cpu-moe)").run()
    assert not at.exception, [e.value for e in at.exception]
    curve = at.dataframe[0].value
    L = default_catalog().models().set_index("id").loc["qwen3-30b-a3b", "num_layers"]
    assert (curve["Experts' layers in host RAM (--n-cpu-moe)"] == L).all()
    assert (curve["Host RAM (GiB)"] > 0).all()


def test_serving_page_on_a_dense_model_has_no_expert_control_in_use():
    at = open_app("pages/serving.py", {"model": "llama-3-8b", "task": "infer"})
    assert "active per token" not in captions(at)
    assert at.selectbox(key="srv_cpu_moe").disabled
    # each engine offers the formats it takes (engine/serving.py engine_precisions), never one it refuses
    for engine, first in (("exllamav2", "exl2-4.0"), ("exllamav3", "exl3-4.0"), ("mlc-llm", "q4f16_1")):
        at.selectbox(key="srv_engine").set_value(engine).run()
        assert not at.exception, [e.value for e in at.exception]
        weights = at.selectbox(key=f"srv_precision_{engine}")
        assert weights.value == first and "bf16" not in weights.options
    assert "fp8" in engine_precisions("vllm") and "fp8" not in engine_precisions("llama.cpp")


def test_breakdown_shows_total_and_active_for_a_moe_model():
    total, active = counts("mixtral-8x7b")
    at = open_app("pages/breakdown.py", {"model": "mixtral-8x7b", "task": "infer", "gpu": "h100-sxm-80gb"})
    text = captions(at)
    assert f"{total / 1e9:,.1f}B parameters resident" in text and f"{active / 1e9:,.1f}B active per token" in text
    assert not pd.isna(at.metric[0].value)


def test_serving_page_says_which_gpu_counts_vllm_takes_for_the_model():
    at = open_app("pages/serving.py", {"model": "qwen2.5-7b", "task": "infer"})
    at.selectbox(key="srv_gpus").set_value(8).run()
    assert not at.exception, [e.value for e in at.exception]
    # (a warning in the page's words since a627039: the cheapest search below still runs)
    warnings = [w.value.replace("\\", "") for w in at.warning]  # (markdown-escaped on the page)
    assert not at.error and len(warnings) == 1 and "1, 2, 4" in warnings[0]
    assert "8 GPUs per replica is not accepted for vllm with qwen2.5-7b" in warnings[0]
    at.selectbox(key="srv_gpus").set_value(4).run()
    assert not at.error and not at.warning and len(at.dataframe) >= 2


def test_serving_page_uses_each_engines_own_share_and_counts_memory_in_use():
    """SGLang's default memory share is its own (by the card), not the slider's 0.9, unless unticked; memory
    other processes hold makes vLLM refuse a card whose share is not free (0 requests there)."""
    from engine import serving as S
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    at = open_app("pages/serving.py", {"model": "llama-3.1-8b", "task": "infer"})
    at.selectbox(key="srv_engine").set_value("sglang").run()
    at.selectbox(key="srv_precision_sglang").set_value("bf16").run()
    assert not at.exception, [e.value for e in at.exception]
    want = S.serve(pd.DataFrame([dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine="sglang", precision="bf16",
                                      max_model_len=8192)]), models, gpus).iloc[0]
    assert want.gpu_memory_utilization == 0.83  # SGLang's own default on an H100, not 0.9

    def shown(card_name: str) -> float:
        frame = at.dataframe[0].value
        row = frame[frame["Card"].astype(str).str.contains(card_name) & (frame["Context (tokens)"] == 8192)]
        assert len(row) == 1, frame[["Card", "Context (tokens)"]]
        return float(row["Max concurrent requests"].iloc[0])

    assert shown("H100 SXM") == pytest.approx(want.max_concurrency, abs=0.01)
    at.selectbox(key="srv_engine").set_value("vllm").run()
    before = shown("4090")
    at.number_input(key="srv_in_use").set_value(3.0).run()
    assert not at.exception, [e.value for e in at.exception]
    refused = S.serve(pd.DataFrame([dict(model="llama-3.1-8b", gpu="rtx-4090", engine="vllm", precision="bf16",
                                         max_model_len=8192, gpu_memory_in_use_gib=3.0)]), models, gpus).iloc[0]
    assert refused.refused_at_start and before > 0 and shown("4090") == 0


def test_serving_page_finds_the_cheapest_fp8_configuration_without_the_cards_that_refuse_fp8():
    """An fp8 / mxfp4 / nvfp4 format runs on some cards only (engine/serving.py FORMAT_ENGINES and the refused
    architectures): the search for the cheapest configuration leaves the others out. It used to ask every catalog
    card, so one Apple card (fp8 is refused there) replaced the whole section by that card's error."""
    at = open_app("pages/serving.py", {"model": "llama-3.1-8b", "task": "infer"})
    for engine, fmt in (("vllm", "fp8"), ("sglang", "mxfp4"), ("vllm", "nvfp4")):
        at.selectbox(key="srv_engine").set_value(engine).run()
        at.selectbox(key=f"srv_precision_{engine}").set_value(fmt).run()
        assert not at.exception, [e.value for e in at.exception]
        assert not [e.value for e in at.error], (engine, fmt, [e.value for e in at.error])
        best = at.dataframe[-1].value  # the cheapest configurations' table, the page's last
        assert len(best) and "GPU" in " ".join(best.columns), (engine, fmt, list(best.columns))
    cards = default_catalog().gpus().set_index("id")
    from planner.serving import cheapest
    out = cheapest("llama-3.1-8b", 4, 8192, 10.0, 5.0, default_catalog().models(), default_catalog().gpus(),
                   engines=("vllm",), precisions=("fp8",))
    assert len(out) and not cards.loc[out["gpu"], "architecture"].astype(str).str.startswith("apple").any()
