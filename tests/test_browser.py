"""The dashboard in a real browser: `streamlit run` on a free port, Debian's Chromium driven by
Playwright. Visits every page through the sidebar navigation, changes a setting, checks that
no error or exception is shown and that the setting survives page switches, and saves a
screenshot of every page under tests/artifacts/screenshots/.

Needs /usr/bin/chromium (.ci/run installs it). Outside CI a missing Chromium skips with the
reason; under CI=true it fails.
"""

from __future__ import annotations

import os
import shutil

import pytest

from planner.report import read_settings
from app.local_server import CHROMIUM, IDLE, launch_chromium
from tests.conftest import ROOT

pytestmark = pytest.mark.browser

SHOTS = ROOT / "tests" / "artifacts" / "screenshots"
PAGES = [  # (navigation label, title shown on the page)
    ("Overview", "LLM hardware planner"),
    ("Feasibility matrix", "Feasibility matrix"),
    ("Budget planner", "Budget planner"),
    ("Cost per fit", "Cost per fit"),
    ("Inference", "Inference"),
    ("Breakdown & what-if", "Breakdown & what-if"),
    ("Evidence", "Evidence"),
    ("Catalog", "Catalog"),
]


def _require_chromium():
    if CHROMIUM.exists():
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{CHROMIUM} is missing: CI must install Debian's chromium (see .ci/run)")
    pytest.skip(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` to run the browser test")


@pytest.fixture
def server(dashboard_server):
    """The worker's `streamlit run dashboard.py` (tests/conftest.py), Chromium required."""
    _require_chromium()
    return dashboard_server


def _idle(page):
    page.wait_for_selector(IDLE, timeout=60_000)


def _shows(main, text: str, why=None) -> None:
    """`text` drawn in `main` within 30 s: the script is idle before the frontend has drawn what it sent (0.1-0.9 s
    later, probed on the Overview), so the text is waited for, not read at once; a failure shows what was drawn."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        main.get_by_text(text).first.wait_for(timeout=30_000)
    except PlaywrightTimeout:
        raise AssertionError(f"{text!r} not drawn ({why}): {main.inner_text()[:1500]!r}") from None


def _no_errors(page, where: str):
    exceptions = page.locator("[data-testid='stException']")
    assert exceptions.count() == 0, f"{where}: exception shown: {exceptions.first.inner_text()[:500]}"
    alerts = page.locator("[data-testid='stAlertContentError']")
    assert alerts.count() == 0, f"{where}: error shown: {alerts.first.inner_text()[:500]}"


def _choose(page, box, option: str, exact: bool = False) -> None:
    """Open a selectbox (`box`, a locator) and click `option`. A click can land while the page's
    script is still rerunning and Streamlit redraws the box, closing its list (CI stop 36, four
    pages on two cores: the option never appeared in 30 s); then open it again, up to four times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    choice = page.get_by_role("option", name=option, exact=exact)
    for attempt in range(4):
        _idle(page)
        box.click()
        try:
            choice.wait_for(timeout=15_000)
            choice.click(timeout=15_000)
            return
        except PlaywrightTimeout:
            if attempt == 3:
                raise
            page.keyboard.press("Escape")


def _goto(page, label: str, title: str):
    page.locator("[data-testid='stSidebarNav'] a", has_text=label).first.click()
    page.wait_for_selector(f"h1:has-text('{title}')", timeout=60_000)
    _idle(page)


def test_every_page_renders_and_keeps_the_workload(server):
    from playwright.sync_api import sync_playwright

    if SHOTS.exists():
        shutil.rmtree(SHOTS)
    SHOTS.mkdir(parents=True)
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2400})
            # the fresh server's first request is a deep link: it must still run inside the
            # dashboard's frame (sidebar, navigation), not as a bare legacy pages/ script
            page.goto(f"{server}/feasibility")
            page.wait_for_selector("h1:has-text('Feasibility matrix')", timeout=60_000)
            _idle(page)
            _no_errors(page, "deep link")
            page.locator("[data-testid='stSidebar'] input[aria-label='Micro-batch per GPU (sequences)']").wait_for(timeout=60_000)
            page.locator("[data-testid='stSidebarNav'] a", has_text="Budget planner").wait_for(timeout=60_000)

            _goto(page, "Overview", "LLM hardware planner")
            _no_errors(page, "first screen")
            _shows(page.locator("[data-testid='stMain']"), "Llama 3 8B", "first screen")

            # change a setting: the micro-batch, then wait for the page to show it
            batch = page.locator("[data-testid='stSidebar'] input[aria-label='Micro-batch per GPU (sequences)']")
            batch.fill("2")
            batch.press("Enter")
            page.wait_for_selector("text=micro-batch 2 × 2,048 tokens", timeout=60_000)
            _idle(page)
            _no_errors(page, "after changing the batch")

            for i, (label, title) in enumerate(PAGES):
                _goto(page, label, title)
                _no_errors(page, label)
                # the sidebar's value survived the page switch
                assert batch.input_value() == "2", f"{label}: batch reset to {batch.input_value()}"
                if label == "Cost per fit":  # lazy tabs: a chart tab runs when it is opened, and draws its chart
                    main = page.locator("[data-testid='stMain']")
                    assert main.locator("[data-testid='stVegaLiteChart']").count() == 0
                    page.get_by_role("tab", name="Chart: buy").click()
                    main.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=60_000)
                    _idle(page)
                    _no_errors(page, "cost per fit, buy chart")
                    assert page.get_by_role("tab", name="Chart: buy").get_attribute("aria-selected") == "true"
                if label == "Budget planner":  # the article's tiers: a lazy expander, its table drawn when opened
                    main = page.locator("[data-testid='stMain']")
                    tables = main.locator("[data-testid='stDataFrame']").count()
                    main.get_by_text("The source article's tiers, checked").click()
                    main.get_by_text("Source article 001's budget table").wait_for(timeout=60_000)
                    _idle(page)
                    _no_errors(page, "budget, the article's tiers")
                    assert main.locator("[data-testid='stDataFrame']").count() == tables + 1
                page.screenshot(path=str(SHOTS / f"{i:02d}_{label.lower().replace(' ', '_').replace('&', 'and')}.png"),
                                full_page=True)

            # a page control: switch the feasibility matrix to full fine-tuning via the sidebar
            _goto(page, "Feasibility matrix", "Feasibility matrix")
            _choose(page, page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']", has_text="Method"),
                    "Full fine-tuning")
            page.locator("[data-testid='stMain']").get_by_text("Full fine-tuning · bf16").first.wait_for(timeout=60_000)
            _idle(page)
            _no_errors(page, "feasibility after switching to full fine-tuning")
            page.screenshot(path=str(SHOTS / "08_feasibility_full.png"), full_page=True)

            # page controls (app/state.py PAGE_FIELDS): the Catalog's search and open tab and the Feasibility matrix's
            # largest count and details section were widget state only: back from another page they were at their
            # defaults, and the URL did not carry them
            _goto(page, "Catalog", "Catalog")
            page.get_by_role("tab", name="Models").click()
            _idle(page)
            search = page.locator("input[aria-label='Search all tables (id, name, vendor, source, …)']")
            search.fill("gemma")
            search.press("Enter")
            page.wait_for_function("() => window.location.search.includes('catalog_search=gemma')", timeout=60_000)
            _idle(page)
            assert "catalog_tab=models" in page.url
            _goto(page, "Feasibility matrix", "Feasibility matrix")
            main = page.locator("[data-testid='stMain']")
            _choose(page, main.locator("[data-testid='stSelectbox']", has_text="Largest GPU count considered"), "16",
                    exact=True)
            page.wait_for_function("() => window.location.search.includes('feas_max_gpus=16')", timeout=60_000)
            _idle(page)
            main.get_by_text("Details: one row per model × GPU").click()  # a lazy section, opened
            page.wait_for_function("() => window.location.search.includes('feas_details=1')", timeout=60_000)
            _idle(page)
            tables = main.locator("[data-testid='stDataFrame']")
            assert tables.count() == 2
            _goto(page, "Catalog", "Catalog")
            assert search.input_value() == "gemma"
            assert page.get_by_role("tab", name="Models").get_attribute("aria-selected") == "true"
            _goto(page, "Feasibility matrix", "Feasibility matrix")
            box = main.locator("[data-testid='stSelectbox']", has_text="Largest GPU count considered")
            assert "16" in box.inner_text() + box.locator("input").first.input_value(), box.inner_html()[:2000]
            assert "catalog_search=gemma" in page.url and "feas_max_gpus=16" in page.url
            tables.nth(1).wait_for(timeout=60_000)  # the details section still open, its table drawn
            main.get_by_text("Details: one row per model × GPU").click()  # and closed again
            page.wait_for_function("() => !window.location.search.includes('feas_details')", timeout=60_000)
            _idle(page)
            assert tables.count() == 1
            _no_errors(page, "feasibility after the switches")
        finally:
            browser.close()
    assert len(list(SHOTS.glob("*.png"))) == len(PAGES) + 1


def test_serving_page_draws_the_curve_and_switches_to_llamacpp(server):
    """The Serving page in a real browser: the concurrency x context chart and its table render,
    and switching the engine to llama.cpp shows its layer split without an error."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2400})
            page.goto(server)
            _idle(page)
            _goto(page, "Serving", "Serving")
            _no_errors(page, "Serving")
            main = page.locator("[data-testid='stMain']")
            main.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=60_000)
            assert "Concurrent requests against context, per card" in main.inner_text()
            # (the curve's table and the cheapest plans' table: the second may still be rendering when the chart is
            # drawn, so it is waited for, not counted at once)
            main.locator("[data-testid='stDataFrame']").nth(1).wait_for(timeout=60_000)
            assert main.locator("[data-testid='stDataFrame']").count() >= 2
            _choose(page, main.locator("[data-testid='stSelectbox']", has_text="Serving engine"), "llama.cpp")
            _idle(page)
            main.get_by_text("whose KV cache fits beside every layer").first.wait_for(timeout=60_000)  # the GGUF caption
            _no_errors(page, "Serving with llama.cpp")
            SHOTS.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS.parent / "serving_llamacpp.png"), full_page=True)
        finally:
            browser.close()


# ---- issue 14: the defects a buyer saw, each in a real browser ----------------------------------

def _open(pw, server: str, path: str, title: str | None, width: int = 1500, height: int = 2400):
    """A browser on `path`, its page's title drawn (any h1 where `title` is None) and the run finished."""
    browser = launch_chromium(pw)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(f"{server}{path}")
    page.wait_for_selector(f"h1:has-text('{title}')" if title else "h1", timeout=60_000)
    _idle(page)
    return browser, page


def test_overview_link_opens_the_overview_without_page_not_found(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/overview", "LLM hardware planner")
        try:
            _shows(page.locator("[data-testid='stMain']"), "Peak per GPU", "/overview")  # (CI 2026-12-06 read it too early)
            _idle(page)
            _no_errors(page, "/overview")
            assert page.get_by_text("Page not found").count() == 0
        finally:
            browser.close()


def test_budget_and_mode_are_in_the_shareable_url_and_the_answer_is_a_system(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/budget?budget=2000", "Budget planner")
        try:
            _no_errors(page, "budget from the URL")
            main = page.locator("[data-testid='stMain']")
            assert page.locator("input[aria-label='Budget ($)']").input_value().replace(",", "") == "2000"
            main.get_by_text("One purchase:").first.wait_for(timeout=60_000)
            assert "host" in main.get_by_text("One purchase:").first.inner_text()
            main.get_by_text("Renting for one job ($)").click()
            _idle(page)
            page.wait_for_function("() => window.location.search.includes('budget_mode=cloud_job')", timeout=60_000)
            assert "budget=2000" in page.url
            _no_errors(page, "budget in cloud_job mode")
        finally:
            browser.close()


def test_a_tables_csv_is_written_when_its_button_is_pressed(server):
    """The tables' CSVs are deferred downloads (written on the press, app/tables.py): pressing one in
    the browser gives the file, with the settings lines and the table's own header."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/evidence", "Evidence")
        try:
            main = page.locator("[data-testid='stMain']")
            button = main.get_by_role("button", name="Download CSV").first
            button.wait_for(timeout=60_000)
            with page.expect_download(timeout=60_000) as got:
                button.click()
            download = got.value
            text = open(download.path(), encoding="utf-8").read()
            assert download.suggested_filename.endswith(".csv")
            settings, body = read_settings(text)
            assert settings["tool"] == "LLM hardware planner" and settings["page"] == "evidence", settings
            rows = [line for line in body.splitlines() if line]
            assert len(rows) > 10, text[:500]  # the header and the evidence rows
            _no_errors(page, "after the CSV download")
        finally:
            browser.close()


def test_metrics_show_their_whole_value(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/breakdown", "Breakdown & what-if")
        try:
            values = page.locator("[data-testid='stMetricValue']")
            page.get_by_text("Longest sequence (tokens)").first.wait_for(timeout=60_000)
            _idle(page)
            # every metric drawn (under load the last ones can follow the idle state by a moment)
            page.wait_for_function("document.querySelectorAll(\"[data-testid='stMetricValue']\").length >= 5",
                                   timeout=60_000)
            assert values.count() >= 5
            # at 1500 px, and at 800 px with the sidebar open (five st.columns cut "23.99 GiB" to "23.…")
            for width in (1500, 800):
                page.set_viewport_size({"width": width, "height": 2400})
                for i in range(values.count()):
                    cut = values.nth(i).evaluate(
                        "el => [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)")
                    assert not cut, f"{width} px: metric value cut: {values.nth(i).inner_text()!r}"
            assert page.get_by_text("Longest sequence (tokens)").count() == 1
        finally:
            browser.close()


def test_catalog_stays_on_the_add_a_gpu_tab_after_adding_one(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/catalog_browser", "Catalog")
        try:
            page.get_by_role("tab", name="Add a GPU").click()
            _idle(page)
            page.locator("input[aria-label=\"id (lowercase letters, digits, '.', '-')\"]").fill("my-test-card")
            page.locator("input[aria-label='Name']").first.fill("NVIDIA GeForce RTX 4090")
            page.get_by_role("button", name="Add this GPU for the session").click()
            page.get_by_text("to this session").first.wait_for(timeout=60_000)
            _idle(page)
            assert page.get_by_role("tab", name="Add a GPU").get_attribute("aria-selected") == "true"
            # the shipped RTX 4090 keeps its name; only the added look-alike carries its id
            page.get_by_role("tab", name="GPUs").click()
            _idle(page)
            _no_errors(page, "catalog after adding a GPU")
        finally:
            browser.close()


def test_long_context_is_refused_with_the_sidebar_control_not_the_cli_flag(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2400})
            page.goto(f"{server}/overview?model=llama-2-7b&seq=8192")
            page.locator("[data-testid='stAlertContentError']").first.wait_for(timeout=60_000)
            text = page.locator("[data-testid='stAlertContentError']").first.inner_text()
            assert "--allow-long-context" not in text
            assert "Allow sequences beyond a model's context" in text and "Display and margins" in text
        finally:
            browser.close()


def test_the_sidebar_keeps_its_values_through_page_switches_and_page_controls(server):
    """Seeded only through their keys, the sidebar's widgets sometimes came back at their own
    defaults after a page switch and a page control (sequence 1, rank 1, no LoRA targets, the
    first model: 2 of 6 tries on a busy machine); seeded with the store's value as their default
    (app/state.py _widget), they keep the user's values. Three tries (four before, 8 s of the suite's time): at 2 in 6
    a regression is seen 70% of runs."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            for attempt in range(3):
                page = browser.new_page(viewport={"width": 1500, "height": 2400})
                page.goto(server)
                page.wait_for_selector("h1:has-text('LLM hardware planner')", timeout=60_000)
                _idle(page)
                _goto(page, "Serving", "Serving")
                main = page.locator("[data-testid='stMain']")
                _choose(page, main.locator("[data-testid='stSelectbox']", has_text="Serving engine"),
                        "llama.cpp" if attempt % 2 == 0 else "vllm")
                _idle(page)
                _goto(page, "Overview", "LLM hardware planner")
                seq = page.locator("[data-testid='stSidebar'] input[aria-label='Sequence length (tokens)']")
                assert seq.input_value().replace(",", "") == "2048", (attempt, page.url)
                _shows(main, "Llama 3 8B", (attempt, page.url))
                assert "seq=" not in page.url and "model=" not in page.url, (attempt, page.url)
                page.close()
        finally:
            browser.close()


def test_overview_prices_a_whole_system_with_its_date(server):
    """Issue 14: the Overview's cheapest purchase is a system (card + host), dated, and no metric is cut."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/", "LLM hardware planner")
        try:
            main = page.locator("[data-testid='stMain']")
            main.get_by_text("Cheapest to buy").first.wait_for(timeout=60_000)
            _idle(page)
            _no_errors(page, "overview")
            box = main.locator("[data-testid='stMetric']", has_text="Cheapest to buy").first
            assert "+ desktop" in box.inner_text(), box.inner_text()  # at HEAD: $1,350, one used 24 GB card
            words = main.get_by_text("Cheapest to buy: 1×").first.inner_text()
            assert "used" in words and "price of 2026" in words and "desktop host" in words, words
            values = page.locator("[data-testid='stMetricValue'], [data-testid='stMetricDelta']")
            for i in range(values.count()):
                cut = values.nth(i).evaluate(
                    "el => [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)")
                assert not cut, f"metric cut: {values.nth(i).inner_text()!r}"
        finally:
            browser.close()


# ---- issue 24: the feasibility matrix is legible at catalog size ---------------------------------

# The Vega view behind the page's first chart, read from the React hooks of Streamlit's chart
# element (Streamlit 1.67 keeps it in a ref: its `current` has scenegraph()); then, for every
# text mark of the cells (its datum has a gpu and a model), its bounds against its cell (the x
# and y band scales' band), and whether a rect is drawn there. Renderer-independent: the item
# bounds are Vega's own (text widths measured by the browser), in canvas and in SVG alike.
# The page's first chart's Vega view, from the React hooks of Streamlit's chart element (Streamlit 1.67 keeps it in a
# ref: its `current` has scenegraph()): `el` and `view` for the scripts below, which return null where there is none.
_FIND_VIEW = """  const el = document.querySelector("[data-testid='stMain'] [data-testid='stVegaLiteChart']");
  if (!el) return null;
  let view = null;
  for (const node of [el, ...el.querySelectorAll("*")]) {
    const key = Object.keys(node).find(k => k.startsWith("__reactFiber$"));
    for (let f = key && node[key]; f && !view; f = f.return)
      for (let h = f.memoizedState; h && typeof h === "object" && "next" in h && !view; h = h.next) {
        const v = h.memoizedState && h.memoizedState.current;
        if (v && typeof v.scenegraph === "function") view = v;
      }
    if (view) break;
  }
  if (!view) return null;
"""

_HEATMAP_GEOMETRY = """() => {
""" + _FIND_VIEW + """  const marks = [];
  (function walk(item) {
    if (item && item.marktype) marks.push(item);
    for (const i of (item && item.items) || []) walk(i);
  })(view.scenegraph().root);
  const cellItems = type => marks.filter(m => m.marktype === type && m.role === "mark")
    .flatMap(m => m.items).filter(i => i.datum && "gpu" in i.datum && "model" in i.datum);
  const texts = cellItems("text"), rects = cellItems("rect");
  if (!texts.length) return null;
  const xs = view.scale("x"), ys = view.scale("y");
  const drawn = new Set(rects.filter(r => r.width > 0 && r.height > 0).map(r => r.datum.gpu + "\\u0000" + r.datum.model));
  const over = [];
  for (const t of texts) {
    const x0 = xs(t.datum.gpu), y0 = ys(t.datum.model), b = t.bounds;
    const cell = {x1: x0, x2: x0 + xs.bandwidth(), y1: y0, y2: y0 + ys.bandwidth()};
    const px = Math.max(cell.x1 - b.x1, b.x2 - cell.x2, cell.y1 - b.y1, b.y2 - cell.y2);
    if (px > 0.5) over.push({text: t.text, gpu: t.datum.gpu, model: t.datum.model, px: Math.round(px * 10) / 10,
                             text_width: Math.round((b.x2 - b.x1) * 10) / 10, cell_width: xs.bandwidth()});
  }
  const ylabels = marks.filter(m => m.role === "axis-label").flatMap(m => m.items)
    .filter(i => ys.domain().includes(i.datum && i.datum.value)).map(i => i.bounds).sort((a, b) => a.y1 - b.y1);
  const yOverlaps = ylabels.slice(1).filter((b, i) => b.y1 < ylabels[i].y2 - 0.5).length;
  const hit = (a, b) => a.x1 < b.x2 - 0.5 && b.x1 < a.x2 - 0.5 && a.y1 < b.y2 - 0.5 && b.y1 < a.y2 - 0.5;
  const titleOverLabels = marks.filter(m => m.role === "axis-title").flatMap(m => m.items).flatMap(t =>
    marks.filter(m => m.role === "axis-label").flatMap(m => m.items).filter(l => hit(t.bounds, l.bounds))
      .map(l => t.text + " over " + l.text));
  return {title_over_labels: titleOverLabels,
          renderer: view.renderer(), texts: texts.length, gpus: xs.domain().length, models: ys.domain().length,
          undrawn: texts.filter(t => !drawn.has(t.datum.gpu + "\\u0000" + t.datum.model)).length,
          cell: [xs.bandwidth(), ys.bandwidth()], overflowing: over.length,
          worst: over.sort((a, b) => b.px - a.px).slice(0, 5), y_label_overlaps: yOverlaps};
}"""


def test_feasibility_cells_hold_their_text_at_catalog_size(server, models, gpus):
    """Issue 24: at 1500 px, the whole catalog (every model x every GPU), no cell's text runs
    past its cell, every cell is drawn (coloured or grey), and no two model names overlap; no axis
    title is drawn across a name (the y title crossed the longest model name: Vega's 200 px
    default maxExtent)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/feasibility", "Feasibility matrix")
        try:
            _no_errors(page, "feasibility")
            handle = page.wait_for_function(_HEATMAP_GEOMETRY, timeout=60_000)
            geo = handle.json_value()
            assert (geo["gpus"], geo["models"], geo["texts"]) == (len(gpus), len(models), len(gpus) * len(models)), geo
            assert geo["overflowing"] == 0, f"cell text overflows its cell: {geo}"
            assert geo["undrawn"] == 0, f"cells without a rect: {geo}"
            assert geo["y_label_overlaps"] == 0, geo
            assert geo["title_over_labels"] == [], geo["title_over_labels"]
        finally:
            browser.close()


# ---- the charts' legends and titles stay clear of the data and inside the chart ------------------

# The first chart's Vega view (found as in _HEATMAP_GEOMETRY), every drawn item's bounds in the
# chart's own pixels: legend entries drawn over a bar or a bar's label, and items past the
# chart's edges (cut by the page).
_CHART_FIT = """() => {
""" + _FIND_VIEW + """  const drawn = el.querySelector("canvas, svg");
  const width = drawn.getBoundingClientRect().width, height = drawn.getBoundingClientRect().height;
  const [ox, oy] = view.origin();
  const boxes = [];
  (function walk(mark, dx, dy) {
    for (const it of mark.items || []) {
      const b = it.bounds;
      if (mark.marktype === "group") {
        for (const m of it.items || []) walk(m, dx + (it.x || 0), dy + (it.y || 0));
      } else if (b && b.width() > 0 && it.opacity !== 0) {  // (a label hidden as overlapping: opacity 0)
        boxes.push({role: mark.role || "", type: mark.marktype, text: it.text === undefined ? "" : String(it.text),
                    x1: b.x1 + dx, x2: b.x2 + dx, y1: b.y1 + dy, y2: b.y2 + dy});
      }
    }
  })(view.scenegraph().root, ox, oy);
  const hit = (a, b) => a.x1 < b.x2 - 0.5 && b.x1 < a.x2 - 0.5 && a.y1 < b.y2 - 0.5 && b.y1 < a.y2 - 0.5;
  const legend = boxes.filter(b => b.role.startsWith("legend-"));
  const marks = boxes.filter(b => b.role === "mark" && (b.type === "text" || b.type === "rect"));
  const name = b => b.text || b.type;
  return {width: Math.round(width), legend: legend.length,
          legend_over_marks: legend.flatMap(l => marks.filter(m => hit(l, m)).map(m => name(l) + " over " + name(m))).slice(0, 5),
          cut: boxes.filter(b => b.x2 > width + 1 || b.x1 < -1 || b.y2 > height + 1 || b.y1 < -1).map(b => b.role + ": " + name(b)).slice(0, 5)};
}"""


def _chart_fit(page, width: int) -> dict:
    """_CHART_FIT at a window `width` px wide, once the chart has been laid out again for it (narrower than the page)."""
    page.set_viewport_size({"width": width, "height": 1000})
    return page.wait_for_function(f"() => {{ const r = ({_CHART_FIT})(); return r && r.width < {width - 250} && r; }}",
                                  timeout=60_000).json_value()


def test_overview_chart_keeps_its_legend_off_the_labels_and_its_title_inside(server):
    """The Overview's bars stop at 200% with their count after them: for Llama 3.1 70B QLoRA at
    8k most cards are past 200%, and with the legend at the right "✗ incompatible" (T4) was drawn
    across "not within 8 cards"; at 800 px the one-line x title ran past the chart's right edge."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, "/?model=llama-3.1-70b&method=qlora&seq=8192", "LLM hardware planner",
                              1280, 1000)
        try:
            _no_errors(page, "overview, 70B QLoRA at 8k")
            for width in (1280, 800):
                fit = _chart_fit(page, width)
                assert fit["legend"] > 0, fit
                assert fit["legend_over_marks"] == [], (width, fit)
                assert fit["cut"] == [], (width, fit)
        finally:
            browser.close()


@pytest.mark.parametrize("path", ["/serving", "/inference"])
def test_serving_and_inference_charts_keep_their_titles_and_legends_inside(server, path):
    """Serving: the y title "Max concurrent requests (of that many tokens, log scale)" was taller than
    the chart, cut at both ends, at every width. Inference at 800 px: its legend of five weights in
    one line ran past the chart's right edge."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _open(pw, server, path, None, 1500, 1000)
        try:
            _no_errors(page, path)
            for width in (1500, 800):
                fit = _chart_fit(page, width)
                assert fit["legend_over_marks"] == [] and fit["cut"] == [], (path, width, fit)
        finally:
            browser.close()
