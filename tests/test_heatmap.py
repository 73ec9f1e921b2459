"""The feasibility matrix's heatmap (app/hm.py), from the real page's data: every cell the
chart draws holds a number or one declared symbol, the legend under it explains every symbol
drawn, and the tooltips keep the breakdown. The geometry in a browser (no text past its cell) is
tests/test_browser.py::test_feasibility_cells_hold_their_text_at_catalog_size."""

import json

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from app import heatmap as hm
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")

WORKLOADS = {  # query string -> a state it brings on the page, beside fits and no fits
    "default": ({}, "incompatible"),  # bf16 before Ampere
    "qlora": ({"method": "qlora"}, "incompatible"),  # bitsandbytes: no Apple backend
    "beyond context": ({"seq": "8192"}, "context"),  # Llama 3 8B's 8,192 tokens; LLaMA-1's 2,048
    "beyond layers": ({"method": "freeze", "freeze_layers": "20"}, "layers"),  # the 16- and 18-layer models
    # up_proj alone: half of Qwen3-MoE's fused gate_up_proj (peft raises), no module of Mixtral's fused experts
    "peft refused": ({"method": "lora", "lora_targets": "up_proj"}, "peft"),
}


def feasibility(query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=90)
    at.query_params.update(query)
    at.run()
    at.switch_page("pages/feasibility.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def heatmap(at: AppTest) -> tuple[dict, pd.DataFrame]:
    """The page's heatmap: its Vega-Lite spec and the rows it draws (Streamlit sends the data as
    Arrow datasets beside the spec; every layer draws from them)."""
    charts = [el for el in at.get("vega_lite_chart")
              if any(layer.get("mark", {}).get("type") == "text" for layer in json.loads(el.proto.spec).get("layer", []))]
    assert len(charts) == 1, len(charts)
    proto = charts[0].proto
    frames = [convert_arrow_bytes_to_pandas_df(ds.data.data) for ds in proto.datasets]
    assert len(frames) == 1, len(frames)
    return json.loads(proto.spec), frames[0]


def text_layer(spec: dict) -> dict:
    return next(layer for layer in spec["layer"] if layer["mark"]["type"] == "text")


def legend(at: AppTest) -> str:
    found = [cap.value for cap in at.caption if cap.value.startswith("**Cell:**")]
    assert len(found) == 1, [cap.value for cap in at.caption]
    return found[0]


def is_count(text: str, limit: int) -> bool:
    return text.isdigit() and 1 <= int(text) <= limit


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_cell_holds_a_number_or_a_declared_symbol_that_the_legend_explains(name):
    query, state = WORKLOADS[name]
    at = feasibility(query)
    spec, cells = heatmap(at)
    limit = int(at.selectbox(key="fm_max_gpus").value)
    text = text_layer(spec)
    assert text["encoding"]["text"]["field"] == "symbol"  # what the cells show
    # the whole matrix, as the page's table beside it
    table = at.dataframe[0].value
    assert len(cells) == table.shape[0] * (table.shape[1] - 1)
    symbols = set(hm.SYMBOLS.values())
    wrong = [s for s in cells["symbol"] if not (is_count(s, limit) or s in symbols)]
    assert not wrong, sorted(set(wrong))
    assert (cells["symbol"].str.len() <= 2).all()  # "64" at most
    assert "?" not in set(cells["symbol"])  # every label the planner gives has its own symbol
    # the symbols follow the planner's labels, which the table shows
    assert (cells["symbol"] == cells["label"].map(hm.cell_symbol)).all()
    assert {"fits", "over", state} <= set(cells["label"].map(hm.cell_state)), name
    # the legend explains every symbol drawn, and says which of the table's labels it stands for
    words = legend(at)
    for symbol in set(cells["symbol"]) & symbols:
        assert f"**{symbol}**" in words, (symbol, words)
    for label in set(cells.loc[~cells["label"].str.isdigit(), "label"]):
        assert label in words, (label, words)
    assert f"1 to {limit}" in words and "**Colour:**" in words


def test_the_tooltips_keep_the_breakdown_and_say_what_a_cell_means():
    at = feasibility({"method": "qlora"})
    spec, cells = heatmap(at)
    for layer in spec["layer"]:
        tips = layer["encoding"]["tooltip"]
        fields = [t["field"] for t in tips]
        assert {"model", "gpu", "label", "why", "needed", "share", "peak", "phase", "buy", "rent", "seq",
                "state_words", *hm.COMPONENTS} <= set(fields), fields
        assert set(fields) <= set(cells.columns)
    why = cells.loc[cells["symbol"] == "✗", "why"]
    assert len(why) and why.str.contains("bitsandbytes").any()
    assert (cells["state_words"] == cells["label"].map(lambda t: hm.STATES[hm.cell_state(t)][1])).all()


def test_every_cell_is_drawn_and_sized_to_hold_its_text():
    at = feasibility({})
    spec, cells = heatmap(at)
    assert {"fits", "over", "incompatible"} <= set(cells["state"])
    rects = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rect"]
    filters = [layer["transform"][0]["filter"] for layer in rects]
    assert sorted(filters) == sorted(["datum.state == 'fits'", "datum.state != 'fits'"])  # one rect per cell
    assert spec["width"] == {"step": hm.CELL_WIDTH} and spec["height"] == {"step": hm.CELL_HEIGHT}
    assert text_layer(spec)["mark"]["fontSize"] == hm.FONT_SIZE
    # two digits at this size (about 0.6 em each) fit a cell with room to spare
    assert 2 * 0.6 * hm.FONT_SIZE + 4 <= hm.CELL_WIDTH and hm.FONT_SIZE + 4 <= hm.CELL_HEIGHT


def test_unknown_labels_read_as_a_declared_symbol_and_the_legend_says_so():
    cells = pd.DataFrame({"model": ["A", "B", "C"], "gpu": ["x", "x", "x"],
                          "label": ["3", "✗ >8", "something new"], "share": [40.0, None, None]})
    assert [hm.cell_symbol(t) for t in cells["label"]] == ["3", "—", "?"]
    assert len(set(hm.SYMBOLS.values())) == len(hm.SYMBOLS)
    assert all(len(s) == 1 for s in hm.SYMBOLS.values())
    words = hm.legend_text(cells, 8, "GiB")
    assert "**?**" in words and "**—**" in words and "✗ >8" in words
    assert "**✗**" not in words  # only the symbols drawn are explained


def test_the_axis_titles_sit_past_the_longest_names():
    """Vega draws an axis title at most maxExtent px from the axis (its default: 200 px), whatever
    the labels' width: the y title crossed "Llama 3.2 11B Vision (language model, approximated)"
    (about 250 px at 11 px). Each axis reserves room for its longest label (labelLimit) instead.
    The drawn geometry: tests/test_browser.py::test_feasibility_cells_hold_their_text_at_catalog_size."""
    cells = pd.DataFrame({"model": ["A"], "gpu": ["x"], "label": ["1"], "share": [40.0]})
    spec = hm.feasibility_heatmap(cells, ["x"], ["A"], "GiB").to_dict()
    y_axis = spec["layer"][0]["encoding"]["y"]["axis"]
    x_axis = spec["layer"][0]["encoding"]["x"]["axis"]
    assert y_axis["maxExtent"] >= y_axis["labelLimit"] + y_axis["labelPadding"], y_axis
    # x labels at -45 degrees: their height is labelLimit * sin(45 degrees) plus a line
    assert x_axis["maxExtent"] >= x_axis["labelLimit"] * 0.7071 + x_axis["labelPadding"], x_axis
