"""Several people on one server, in a real browser: four Playwright contexts (separate cookie
jars and websocket sessions, like four people) in one Chromium against one `streamlit run`
server. Each changes the workload its own way, or adds its own GPU on the Catalog page, while the
others are running; then each must see its own state, nobody else's, and no error.

Reuses the server fixture of tests/test_browser.py (same Chromium requirements). Nothing is saved
to the user catalog file here (the entries are session-only).
"""

from __future__ import annotations

import pytest

from tests.test_browser import CHROMIUM, _choose, _goto, _idle, _no_errors, server  # noqa: F401 (server: fixture)

pytestmark = pytest.mark.browser

SIDEBAR = "[data-testid='stSidebar']"
MAIN = "[data-testid='stMain']"
CARD = "Browser card 3"


def _pick(page, label: str, option: str) -> None:
    """Choose an option of a sidebar selectbox (reopening it if a rerun closed its list)."""
    _choose(page, page.locator(f"{SIDEBAR} [data-testid='stSelectbox']", has_text=label), option, exact=True)


def _set_batch(page):
    box = page.locator(f"{SIDEBAR} input[aria-label='Micro-batch per GPU (sequences)']")
    box.fill("3")
    box.press("Enter")


def _add_gpu(page):
    _goto(page, "Catalog", "Catalog")
    page.get_by_role("tab", name="Add a GPU").click()
    page.get_by_label("id (lowercase letters, digits, '.', '-')").fill("browser-card-3")
    page.get_by_label("Name", exact=True).first.fill(CARD)
    page.get_by_role("button", name="Add this GPU for the session").click()


# (what the person does, text that shows it is done, a mark only their Overview headline has)
PEOPLE = [
    (_set_batch, "micro-batch 3 × 2,048 tokens", "micro-batch 3 ×"),
    (lambda p: _pick(p, "Method", "Full fine-tuning"), "Full fine-tuning · bf16", "Full fine-tuning"),
    (lambda p: p.locator(SIDEBAR).get_by_text("Serve (inference)").click(), "· serving ·", "serving"),
    (_add_gpu, f"Added GPU {CARD}", None),
]


def _everyone_goes(pages, label: str, title: str) -> None:
    """Everyone clicks the same page in the navigation at once (the server runs them together)."""
    for page in pages:
        page.locator("[data-testid='stSidebarNav'] a", has_text=label).first.click()
    for page in pages:
        page.wait_for_selector(f"h1:has-text('{title}')", timeout=60_000)
        _idle(page)


def _headline(page) -> str:
    return page.locator(f"{MAIN} h3").first.inner_text()


def _gpu_choices(page, text: str) -> str:
    """Type into the sidebar's GPU box and read what it offers (then close it)."""
    box = page.locator(f"{SIDEBAR} [data-testid='stSelectbox']", has_text="GPU").filter(
        has_not_text="GPU count").first
    box.click()
    page.keyboard.type(text)
    listbox = page.get_by_role("listbox")
    listbox.wait_for(timeout=30_000)
    offered = listbox.inner_text()
    page.keyboard.press("Escape")
    return offered


def test_four_people_at_once_each_keep_their_own_workload_and_entries(server):  # noqa: F811 (the fixture)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            contexts = [browser.new_context(viewport={"width": 1280, "height": 900}) for _ in PEOPLE]
            pages = [ctx.new_page() for ctx in contexts]
            pages[0].goto(server)  # the first person warms the fresh server's caches ...
            pages[0].wait_for_selector("h1:has-text('LLM hardware planner')", timeout=60_000)
            for page in pages[1:]:  # ... then three more open at once, their first runs overlapping
                page.goto(server, wait_until="commit")
            for page in pages:
                page.wait_for_selector("h1:has-text('LLM hardware planner')", timeout=60_000)
                _idle(page)
                page.locator(f"{SIDEBAR} input[aria-label='Micro-batch per GPU (sequences)']").wait_for(timeout=60_000)
            for page, (act, _, _) in zip(pages, PEOPLE):  # everyone changes something, no waiting between
                act(page)
            for i, (page, (_, done, _)) in enumerate(zip(pages, PEOPLE)):
                page.locator(MAIN).get_by_text(done).first.wait_for(timeout=60_000)
                _idle(page)
                _no_errors(page, f"person {i} after their change")
            # a fresh run for everyone after all the changes: the Catalog page lists the GPU one
            # person added for that person only, and only that person's GPU box offers it
            _everyone_goes(pages, "Catalog", "Catalog")
            for i, page in enumerate(pages):
                _no_errors(page, f"person {i} on the Catalog page")
                text = page.locator(MAIN).inner_text()
                assert (f"GPU: {CARD} (browser-card-3)" in text) == (i == len(PEOPLE) - 1), i
                offered = _gpu_choices(page, "Browser card")
                assert (CARD in offered) == (i == len(PEOPLE) - 1), (i, offered)
            # and on the Overview each headline has its own change and nobody else's
            marks = [mark for _, _, mark in PEOPLE if mark]
            _everyone_goes(pages, "Overview", "LLM hardware planner")
            for i, (page, (_, _, mark)) in enumerate(zip(pages, PEOPLE)):
                headline = _headline(page)
                assert (mark is None or mark in headline), (i, headline)
                others = [m for m in marks if m != mark]
                assert not any(m in headline for m in others), (i, headline)
                _no_errors(page, f"person {i} on the Overview")
        finally:
            browser.close()
