"""``memstrata ui`` in a real browser: headless Chromium from the distribution's packages,
driven by Selenium, against the console script serving a sample home.

JavaScript is switched off in the browser: every flow here must work without it.
Skipped, with the reason, where Chromium or its driver is not installed
(``apt-get install chromium chromium-driver``; ``.ci/run`` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import UiServer
from memstrata.memory.files import FileMemory
from memstrata.testing.sample_home import fill_sample_home

pytest.importorskip("starlette")
pytest.importorskip("jinja2")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ui_screenshots.py"


def _load_script() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ui_screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shots = _load_script()
if None in shots.browser_paths():
    pytest.skip(
        "no headless browser: install the distribution's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver) to run the browser tests",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    home = fill_sample_home(tmp_path_factory.mktemp("ui-browser") / "home")
    with UiServer(home) as server:
        server.home = home  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="module")
def browser(ui: UiServer) -> Iterator[Any]:
    driver = shots.chromium()
    try:
        driver.get(ui.url)  # the printed URL: sets the cookie, drops the token
        yield driver
    finally:
        driver.quit()


def click_and_wait(browser: Any, element: Any) -> None:
    """Click a button that submits a form (or a link), and wait for the next page."""
    old = browser.find_element(By.TAG_NAME, "html").id
    element.click()

    # Only the new document is asked, never the old node: Chromium may answer a
    # question about a node of a document being replaced with a generic
    # WebDriverException ("Node with given id does not belong to the document")
    # instead of a stale-element error, which staleness_of does not catch.
    def replaced(driver: Any) -> bool:
        return bool(driver.find_element(By.TAG_NAME, "html").id != old)

    WebDriverWait(browser, 15, ignored_exceptions=(WebDriverException,)).until(replaced)


def note(browser: Any) -> str:
    return str(browser.find_element(By.ID, "note").text)


def entries(browser: Any, target: str) -> list[str]:
    section = browser.find_element(By.ID, f"target-{target}")
    return [e.text for e in section.find_elements(By.CSS_SELECTOR, ".entry-text")]


def test_the_printed_url_opens_the_memory_page_without_the_token(
    ui: UiServer, browser: Any
) -> None:
    """The token leaves the address bar; the page shows both files with usage bars."""
    browser.get(ui.url)
    assert browser.current_url == f"{ui.origin}/memory"
    assert "token" not in browser.current_url
    assert "Project uses pnpm, not npm" in entries(browser, "memory")
    bars = browser.find_elements(By.CSS_SELECTOR, ".usage .bar span")
    assert len(bars) == 2 and all(b.get_attribute("style").startswith("width") for b in bars)


def test_add_a_memory_see_it_then_undo_it(ui: UiServer, browser: Any) -> None:
    """Add through the form, see the entry and its history row, undo it in one click."""
    browser.get(f"{ui.origin}/memory")
    box = browser.find_element(By.ID, "add-memory")
    box.send_keys("Release notes live in docs/releases/")
    click_and_wait(browser, browser.find_element(By.ID, "add-memory-button"))
    assert "Release notes live in docs/releases/" in entries(browser, "memory")
    assert "added" in note(browser).lower()
    newest = browser.find_elements(By.CSS_SELECTOR, "#history tr.change")[0]
    assert "Release notes live in docs/releases/" in newest.text
    click_and_wait(browser, newest.find_element(By.CSS_SELECTOR, "button.undo"))
    assert note(browser).startswith("Undid change #")
    assert "Release notes live in docs/releases/" not in entries(browser, "memory")
    files = FileMemory(ui.home)  # type: ignore[attr-defined]
    assert "Release notes live in docs/releases/" not in files.entries("memory")


def test_approve_a_pending_write(ui: UiServer, browser: Any) -> None:
    """The staged tool write is listed, and Approve applies it through the approval queue."""
    browser.get(f"{ui.origin}/memory")
    row = browser.find_element(By.CSS_SELECTOR, "#pending tr.pending-write")
    assert "Deploys happen on Tuesdays after 17:00" in row.text
    click_and_wait(browser, row.find_element(By.CSS_SELECTOR, "button.approve"))
    assert note(browser).startswith("Approved ")
    assert "Deploys happen on Tuesdays after 17:00" in entries(browser, "memory")
    assert browser.find_elements(By.CSS_SELECTOR, "#pending tr.pending-write") == []


def test_a_chinese_question_finds_the_highlighted_conversation(ui: UiServer, browser: Any) -> None:
    """A question in Chinese ranks the Chinese conversation first, its terms marked."""
    browser.get(f"{ui.origin}/recall")
    box = browser.find_element(By.ID, "q")
    box.send_keys("我们什么时候迁移数据库？")
    click_and_wait(browser, browser.find_element(By.ID, "search"))
    first = browser.find_elements(By.CSS_SELECTOR, "li.result")[0]
    assert first.find_element(By.CSS_SELECTOR, "h2").text == "数据库迁移"
    marked = [m.text for m in first.find_elements(By.CSS_SELECTOR, ".snippet mark")]
    assert "数据库迁移" in marked or {"数据库", "迁移"} <= set(marked), marked
    assert first.find_elements(By.CSS_SELECTOR, "table.score th")[0].text == "fused score"


def test_a_compressed_sessions_lineage(ui: UiServer, browser: Any) -> None:
    """The list shows the conversation once; its page draws the chain with the tip marked."""
    browser.get(f"{ui.origin}/sessions")
    links = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "tr.session-row td a")]
    assert links.count("Kyoto trip #3") == 1 and "Kyoto trip" not in links
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "Kyoto trip #3"))
    parts = browser.find_elements(By.CSS_SELECTOR, "#lineage li.part")
    assert [p.find_element(By.CSS_SELECTOR, "a").text for p in parts] == [
        "Kyoto trip",
        "Kyoto trip #2",
        "Kyoto trip #3",
    ]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#lineage li.split")) == 2
    tips = browser.find_elements(By.CSS_SELECTOR, "#lineage li.part.tip")
    assert len(tips) == 1 and "trip-3" in tips[0].text and "tip" in tips[0].text


def test_tool_calls_are_folded_in_the_transcript(ui: UiServer, browser: Any) -> None:
    """A tool call and its result are closed <details> until opened."""
    browser.get(f"{ui.origin}/sessions/db-move")
    call = browser.find_element(By.CSS_SELECTOR, "details.tool-call")
    result = browser.find_element(By.CSS_SELECTOR, "details.tool")
    assert call.get_attribute("open") is None and result.get_attribute("open") is None
    assert "calendar_lookup" in call.text
    call.find_element(By.TAG_NAME, "summary").click()
    assert '"week": "next"' in call.text


def test_the_screenshot_script_runs(tmp_path: Path, ui: UiServer) -> None:
    """scripts/ui_screenshots.py saves one PNG per page through the same browser."""
    saved = shots.shoot(ui.origin, ui.token, tmp_path, pages=[("memory", "/memory")])
    assert [p.name for p in saved] == ["memory.png"]
    assert saved[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
