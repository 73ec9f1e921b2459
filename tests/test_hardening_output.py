"""Hardening: what the planner writes and shows is inert and says what it means.

1. CSV downloads: no cell a spreadsheet would run as a formula, the settings rows included
   (a model named 'x,=HYPERLINK(...)' or a Catalog search 'x,@SUM(1)' used to put a live
   formula cell into the settings lines).
2. Markdown: a catalog name like '![p](http://evil.example/pixel.png)' is shown as typed on
   every page, never rendered as an image or a link.
3. Text output: no 'nan-bound', 'n/a' or '$n/a' for a GPU without a TFLOPS figure or price, no
   'inf' for a GPU count beyond the engine's limit, and an evidence table without padding.
"""

import csv
import io
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings as hyp_settings, strategies as hs
from streamlit.testing.v1 import AppTest

from app.labels import md_escape
from catalog.store import ENV_VAR
from engine import estimate
from engine.constants import MAX_GPUS
from engine.speed import format_speed_cost
from planner.evidence import evidence_table, format_evidence
from planner.report import read_settings, to_csv
from tests.conftest import ROOT

DASHBOARD = str(ROOT / "dashboard.py")
PAGES = ["pages/overview.py", "pages/feasibility.py", "pages/budget.py", "pages/cost_per_fit.py",
         "pages/inference.py", "pages/breakdown.py", "pages/evidence.py", "pages/catalog_browser.py"]
TUNED = 'My tuned model,=HYPERLINK("http://evil.example/x"),'
SEARCH = "x,@SUM(1)"
PIXEL = "![p](http://evil.example/pixel.png)"
GPU_PIXEL = "![g](http://evil.example/g.png) card"  # the word after it keeps the short GPU name whole
NOT_WITHIN = f"not within {MAX_GPUS:,} GPUs"


# ---- a spreadsheet's reading of a CSV file ------------------------------------------------------

SIGNS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def spreadsheet_cells(text: str) -> list[list[str]]:
    """Every row of the file as a spreadsheet splits it: all lines, the settings rows included."""
    return list(csv.reader(io.StringIO(text)))


def runs_as_formula(cell: str) -> bool:
    """After the whitespace and double quotes a spreadsheet may trim, the cell starts with a
    formula sign and is not just a number."""
    core = cell
    while core != (trimmed := core.strip().strip('"')):
        core = trimmed
    return core.startswith(SIGNS) and not NUMBER.fullmatch(core)


def formula_cells(text: str) -> list[str]:
    return [cell for row in spreadsheet_cells(text) for cell in row if runs_as_formula(cell)]


def one_line(text) -> str:
    return " ".join(str(text).splitlines())


# ---- 1. CSV: the settings rows are cells like any other -----------------------------------------

def test_a_model_name_in_the_settings_is_one_inert_cell():
    frame = pd.DataFrame({"model": ["tuned"], "peak_bytes": [1.5e9]})
    text = to_csv(frame, {"tool": "LLM hardware planner", "workload": f"{TUNED} · LoRA r=8 on q_proj, v_proj",
                          "search": SEARCH, "note": '=HYPERLINK("http://evil.example/y")'})
    assert formula_cells(text) == []
    rows = spreadsheet_cells(text)
    assert rows[1] == ["# workload", f"{TUNED} · LoRA r=8 on q_proj, v_proj"]  # whole, in one cell
    assert rows[2] == ["# search", SEARCH]
    assert rows[3] == ["# note", "'" + '=HYPERLINK("http://evil.example/y")']
    assert all(line.startswith("# ") for line in text.splitlines()[:4])  # still comment-like lines
    settings, body = read_settings(text)
    assert settings["workload"].startswith(TUNED) and settings["search"] == SEARCH
    assert pd.read_csv(io.StringIO(body))["peak_bytes"].tolist() == [1.5e9]
    # a reader that skips '#' lines still gets the table
    assert pd.read_csv(io.StringIO(text), comment="#").columns.tolist() == ["model", "peak_bytes"]


def test_spaces_or_quotes_before_a_sign_do_not_hide_a_formula():
    text = to_csv(pd.DataFrame({"a": [" =1+1", '"@SUM(1)"', " -5", "text"]}), {"k": "  +cmd"})
    assert formula_cells(text) == []
    assert [r[0] for r in spreadsheet_cells(text)[2:]] == ["' =1+1", "'\"@SUM(1)\"", " -5", "text"]


# no lone surrogates: not text a user can type or paste (pandas 3 stores strings in Arrow, which refuses them)
TEXT = hs.text(alphabet=hs.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30)
CELL = hs.one_of(TEXT, hs.sampled_from(["=1+1", " @SUM(A1)", "-2+3", "+", "\t=x", "-5", '"=1"', "a,=b", "x\r=y"]))


@hyp_settings(derandomize=True, max_examples=300, deadline=None)
@given(keys=hs.lists(hs.one_of(TEXT, hs.sampled_from(["=key", "a,=b", "x\n=y"])), max_size=4, unique=True),
       values=hs.lists(hs.one_of(CELL, hs.integers(), hs.floats()), min_size=4, max_size=4),
       cells=hs.lists(CELL, min_size=1, max_size=5),
       numbers=hs.lists(hs.floats(), min_size=5, max_size=5),
       # the numbers' column: any header but the two the frame below names itself
       column=CELL.filter(lambda c: not one_line(c).lstrip('"').startswith("# ") and c not in ("text", "gpus_needed")))
def test_any_text_in_settings_or_cells_gives_no_formula_cell(keys, values, cells, numbers, column):
    settings = dict(zip(keys, values))
    n = len(cells)
    frame = pd.DataFrame({"text": cells, column: numbers[:n], "gpus_needed": [np.inf] + numbers[: n - 1]})
    text = to_csv(frame, settings)
    assert formula_cells(text) == [], text
    # the settings come back one row each, whole: "# key", the value (a quote before a formula)
    rows = spreadsheet_cells(text)
    for row, (key, value) in zip(rows, settings.items()):
        assert row[0] == "# " + one_line(key)
        assert row[1] in (one_line(value), "'" + one_line(value))
    read, body = read_settings(text)
    assert len(read) == len({one_line(k) for k in keys})
    # and the table below them: every row, every text cell as it was (or quoted)
    table = list(csv.reader(io.StringIO(body)))
    assert len(table) == n + 1
    for row, original in zip(table[1:], cells):
        original = original.replace("\r\n", "\n").replace("\r", "\n")
        assert row[0] in (original, "'" + original)
    assert table[1][2] == NOT_WITHIN


# ---- 3. no inf in the CSV's count columns ------------------------------------------------------

def test_a_gpu_count_beyond_the_limit_is_written_in_words(models, gpus):
    sc = pd.DataFrame([{"model": "llama-2-70b", "gpu": "rtx-3060-12gb", "task": "train", "method": "full",
                        "zero": 0, "gpus": 1}])
    out = estimate(sc, models, gpus)
    assert out["gpus_needed"].iloc[0] == np.inf  # the engine's answer: no count up to MAX_GPUS
    frame = out[["model", "gpus_needed", "peak_bytes"]].assign(card_gpus_needed=np.inf, gpus_to_fit=[np.inf],
                                                               breakeven_months=np.inf, low=-np.inf)
    text = to_csv(frame)
    header, row = spreadsheet_cells(text)
    cells = dict(zip(header, row))
    assert cells["gpus_needed"] == cells["card_gpus_needed"] == cells["gpus_to_fit"] == NOT_WITHIN
    assert cells["breakeven_months"] == "inf"  # not a count: a plain infinity ("renting never costs more")
    assert cells["low"] == "'-inf" and formula_cells(text) == []
    assert float(cells["peak_bytes"]) == out["peak_bytes"].iloc[0]
    finite = to_csv(pd.DataFrame({"gpus_needed": [3.0, np.nan]}))
    assert spreadsheet_cells(finite) == [["gpus_needed"], ["3"], [""]]  # whole, as --json gives it (WHOLE_COLUMNS)


# ---- 3. speed and cost text ---------------------------------------------------------------------

LEAKS = re.compile(r"\bnan\b|n/a|\binf\b|\$—|\$nan|nan-bound", re.IGNORECASE)


def test_v100_bf16_inference_says_there_is_no_bf16_figure(models, gpus):
    row = estimate(pd.DataFrame([{"model": "llama-2-7b", "task": "infer", "precision": "bf16", "gpu": "v100-32gb"}]),
                   models, gpus).iloc[0]
    text = format_speed_cost(row)
    assert not LEAKS.search(text), text
    assert "no bf16 TFLOPS figure for v100-32gb" in text
    assert "buy: $10,700" in text  # what the catalog does have is still given
    fp16 = estimate(pd.DataFrame([{"model": "llama-2-7b", "task": "infer", "precision": "fp16", "gpu": "v100-32gb"}]),
                    models, gpus).iloc[0]
    assert "memory-bound" in format_speed_cost(fp16) and not LEAKS.search(format_speed_cost(fp16))


@pytest.mark.parametrize("task, precision", [("train", "bf16"), ("train", "fp32"), ("infer", "bf16"), ("infer", "fp16")])
def test_a_user_gpu_without_rates_or_prices_gets_words_not_nan(models, gpus, task, precision):
    mine = {**gpus.iloc[0].to_dict(), "id": "mine-48gb", "name": "Mine 48GB", "bf16_tflops": np.nan,
            "fp32_tflops": np.nan, "price_usd": np.nan, "cloud_usd_per_hour": np.nan}
    table = pd.concat([gpus, pd.DataFrame([mine])], ignore_index=True)
    sc = {"model": "llama-2-7b", "task": task, "precision": precision, "gpu": "mine-48gb"}
    if task == "train":
        sc["method"] = "lora"
    text = format_speed_cost(estimate(pd.DataFrame([sc]), models, table).iloc[0])
    assert not LEAKS.search(text), text
    assert "no purchase price for mine-48gb" in text
    if precision in ("bf16", "fp32"):
        assert f"no {precision} TFLOPS figure for mine-48gb" in text
    else:
        assert "tokens/s per sequence" in text and "no cloud price for mine-48gb" in text


# ---- 3. the evidence table ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def evidence(cat, models, gpus):
    return evidence_table(cat.references(), models, gpus)


def test_evidence_names_a_count_beyond_the_limit(evidence):
    beyond = evidence[evidence["estimate"] == np.inf]
    assert len(beyond) > 0 and (beyond["metric"] == "gpus_needed").all()
    assert (beyond["estimate_note"] == NOT_WITHIN).all()
    assert (evidence.loc[np.isfinite(evidence["estimate"]), "estimate_note"] == "").all()


def test_format_evidence_has_no_padding_and_no_inf(evidence):
    text = format_evidence(evidence)
    lines = text.splitlines()
    assert all(line == line.rstrip() for line in lines)
    assert max(map(len, lines)) <= 140  # the table's widest row; explanations wrap at 100
    assert not re.search(r"\binf\b|\bnan\b", text)
    assert NOT_WITHIN in text and "error_pct" in lines[0]
    body = [line for line in lines[1:] if not line.startswith("    ")]
    assert [line.split()[0] for line in body] == evidence["id"].tolist()  # one line per reference
    wrapped = [line for line in lines if line.startswith("    ")]
    assert wrapped and max(map(len, wrapped)) <= 100


# ---- the pages (AppTest) ------------------------------------------------------------------------

# every test starts and ends with empty Streamlit caches (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    path = tmp_path / "planner" / "user_catalog.yaml"
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def open_app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def add_model(at: AppTest, model_id: str, name: str) -> None:
    """The Catalog page's "Add a model" form, a small Llama-style model, for this session."""
    at.text_input(key="am_id").input(model_id)
    at.text_input(key="am_name").input(name)
    for key, value in (("am_hidden", 512), ("am_ffn", 1376), ("am_layers", 4), ("am_heads", 8), ("am_kv", 8),
                       ("am_vocab", 1000)):
        at.number_input(key=key).set_value(value)
    at.form_submit_button[1].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def add_gpu(at: AppTest, gpu_id: str, name: str) -> None:
    at.text_input(key="ag_id").input(gpu_id)
    at.text_input(key="ag_name").input(name)
    at.form_submit_button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def csv_downloads(at: AppTest, read) -> list[str]:
    return [read(b) for b in at.download_button if b.proto.label == "Download CSV"]  # the tables' CSVs


def test_a_model_named_like_a_formula_leaves_no_formula_cell_in_any_csv(user_file, downloads):
    at = open_app("pages/catalog_browser.py")
    add_model(at, "tuned-model", TUNED)
    at.selectbox(key="w_model").set_value("tuned-model").run()
    seen = 0
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
        for text in csv_downloads(at, downloads):
            assert formula_cells(text) == [], page
            settings, _ = read_settings(text)
            assert settings["workload"].startswith(TUNED), page  # the name is there, whole, as text
            seen += 1
    assert seen >= len(PAGES)


def test_the_catalog_search_is_one_inert_cell_of_the_settings(downloads):
    at = open_app("pages/catalog_browser.py")
    at.text_input(key="cat_search").input(SEARCH).run()
    assert not at.exception
    texts = csv_downloads(at, downloads)
    assert len(texts) == 3  # GPUs, models, references
    for text in texts:
        assert formula_cells(text) == []
        assert ["# search", SEARCH] in spreadsheet_cells(text)
        assert read_settings(text)[0]["search"] == SEARCH


# Markdown-rendered text of a node: the body of markdown, captions, headings, alerts, toasts and
# metrics (value), metric labels and deltas, widget labels and help tooltips, tab and expander labels.
MARKDOWN_FIELDS = ("body", "label", "help", "delta")
NOT_MARKDOWN = {"text", "code", "json", "arrow_data_frame", "dataframe", "arrow_vega_lite_chart",
                "vega_lite_chart", "exception", "html"}


def markdown_bodies(at: AppTest) -> list[tuple[str, str]]:
    out = []
    for node in at._tree:
        if getattr(node, "type", "") in NOT_MARKDOWN or getattr(node, "proto", None) is None:
            continue
        for name in MARKDOWN_FIELDS:
            value = getattr(node.proto, name, None)
            if isinstance(value, str) and value:
                out.append((node.type, value))
    return out


def live_markdown(body: str) -> str:
    """The Markdown syntax that is live: backslash escapes and code spans taken out."""
    body = re.sub(r"\\.", "", body)
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", body)


def unescape(body: str) -> str:
    return re.sub(r"\\(.)", r"\1", body)


def test_a_catalog_name_is_never_rendered_as_markdown(user_file):
    at = open_app("pages/catalog_browser.py")
    add_model(at, "pixel-model", PIXEL)
    add_gpu(at, "pixel-gpu", GPU_PIXEL)
    at.selectbox(key="w_model").set_value("pixel-model").run()
    at.selectbox(key="w_gpu").set_value("pixel-gpu").run()
    visible = {}
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
        for kind, body in markdown_bodies(at):
            if "evil.example" not in unescape(body):
                continue
            live = live_markdown(body)
            assert "![" not in live and "](" not in live and "evil.example" not in live, (page, kind, body)
            visible.setdefault(page, []).append(unescape(body))
    # the name is still shown, as typed: the Overview's heading and metrics, the Breakdown's caption
    at.switch_page("pages/overview.py").run()
    assert PIXEL in unescape(at.subheader[0].value)
    assert any(GPU_PIXEL in unescape(m.proto.delta) for m in at.metric)
    at.switch_page("pages/breakdown.py").run()
    assert any(unescape(cap.value).startswith(f"{PIXEL} · ") and unescape(cap.value).endswith(f"on 1× {GPU_PIXEL}")
               for cap in at.caption)
    assert {"pages/overview.py", "pages/breakdown.py", "pages/inference.py"} <= set(visible)


@hyp_settings(derandomize=True, max_examples=300, deadline=None)
@given(text=hs.text(max_size=40) | hs.sampled_from([PIXEL, "[x](javascript:alert(1))", "<img src=x>", "**b** _i_",
                                                     ":red[x] $x$ ~~s~~ www.evil.example", "# h\n- item", "a\\*b"]))
def test_md_escape_leaves_no_live_markdown_and_keeps_the_text(text):
    escaped = md_escape(text)
    assert unescape(escaped) == one_line(text)
    live = live_markdown(escaped)
    assert not set(live) & set("\\`*_[]()<>!#|~$:&"), escaped


def test_the_evidence_page_shows_no_infinity(downloads):
    at = open_app("pages/evidence.py")
    view = at.dataframe[0].value.set_index("Reference")
    row = view.loc["a000-full-70b-zero-8gpus"]
    assert pd.isna(row["Ours"]) and pd.isna(row["Error (%)"])
    assert row["Why it differs"].startswith(f"Ours: {NOT_WITHIN}. ")
    assert np.isfinite(view[["Ours", "Error (%)"]].to_numpy(dtype=float)[~view[["Ours", "Error (%)"]].isna().to_numpy()]).all()
    text = downloads(at.download_button[0])
    cells = [c for r in spreadsheet_cells(text) for c in r]
    assert not {"inf", "-inf", "'-inf"} & set(cells) and formula_cells(text) == []


def test_a_byte_column_beyond_int64_keeps_its_number_in_the_csv():
    """The property search above found it (column '_bytes', 9.223372036854776e+18 = 2**63): whole bytes are written
    as int64, which cannot hold 2**63, and to_csv raised TypeError; such a figure keeps its float text."""
    frame = pd.DataFrame({"weights_bytes": [0.0, 2.0 ** 63, 1.5], "x_bytes": [1.4, 2.0, np.nan]})
    rows = list(csv.reader(io.StringIO(to_csv(frame))))
    assert rows[0] == ["weights_bytes", "x_bytes"]
    assert float(rows[2][0]) == 2.0 ** 63 and rows[1][1] == "1" and rows[3][1] == ""
