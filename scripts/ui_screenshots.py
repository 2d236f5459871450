"""Screenshots of every page of ``memstrata ui`` for docs/ui.md, through a real browser.

Usage::

    python scripts/ui_screenshots.py [--out docs/ui]

Fills a temporary home with the sample (``memstrata.testing.sample_home``), starts the
``memstrata ui`` console script on it, and saves one PNG per page with the
distribution's headless Chromium (``apt-get install chromium chromium-driver``) driven
by Selenium. The tests load :func:`chromium` and :func:`shoot` from here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# (file name, path): what docs/ui.md shows, in its order.
PAGES = [
    ("memory", "/memory"),
    ("facts", "/facts"),
    ("sessions", "/sessions"),
    ("session", "/sessions/trip-2"),
    (
        "recall",
        "/recall?q=%E6%88%91%E4%BB%AC%E4%BB%80%E4%B9%88%E6%97%B6%E5%80%99%E8%BF%81%E7%A7%BB%E6%95%B0%E6%8D%AE%E5%BA%93%EF%BC%9F",
    ),
    ("curate", "/curate"),
    ("forget", "/forget?query=ryokan"),
    ("health", "/health"),
]


def browser_paths() -> tuple[str | None, str | None]:
    """The Chromium binary and its driver on PATH (None where missing)."""
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which(
        "chromedriver"
    )


def chromium(*, javascript: bool = False, width: int = 1280, height: int = 900) -> Any:
    """Headless Chromium through the system's chromedriver (no browser download)."""
    from selenium import webdriver

    binary, driver = browser_paths()
    if binary is None or driver is None:
        raise SystemExit("Install chromium and chromium-driver (apt-get) first.")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",  # containers and CI run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--lang=en-US",
        "--hide-scrollbars",
    ):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


def shoot(origin: str, token: str, out: Path, pages: list[tuple[str, str]] = PAGES) -> list[Path]:
    """Save ``<name>.png`` of each page under ``out``; the whole page, not the window."""
    out.mkdir(parents=True, exist_ok=True)
    driver = chromium()
    saved = []
    try:
        driver.get(f"{origin}/?token={token}")
        for name, path in pages:
            driver.get(origin + path)
            height = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
            driver.set_window_size(1280, min(2400, max(700, int(height["height"]) + 40)))
            target = out / f"{name}.png"
            driver.save_screenshot(str(target))
            saved.append(target)
    finally:
        driver.quit()
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    args = parser.parse_args(argv)
    from memstrata.testing.sample_home import fill_sample_home

    with tempfile.TemporaryDirectory(prefix="memstrata-ui-") as folder:
        home = fill_sample_home(Path(folder) / "home")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
        env["MEMSTRATA_HOME"] = str(home)
        script = Path(sys.executable).parent / "memstrata"
        proc = subprocess.Popen(  # noqa: S603 - our own console script
            [str(script), "ui", "--no-open"], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            found = re.search(r"(http://[^/\s]+)/\?token=(\S+)", proc.stdout.readline())
            if found is None:
                raise SystemExit("memstrata ui did not start")
            for path in shoot(found.group(1), found.group(2), args.out):
                print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
