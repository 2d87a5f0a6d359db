"""The HTML report of a real toy sweep opens in headless Chromium, error-free, with every figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from raylab import report

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                    reason=f"{CHROMIUM} is absent (Debian's chromium package; .ci/run installs it)")
def test_html_report_opens_in_headless_chromium_and_shows_every_figure(smoke_sweep, tmp_path):
    from playwright.sync_api import sync_playwright

    _, run_path, _ = smoke_sweep("toy")
    path = Path(report.write_report(run_path))
    content = json.loads((path.parent / "report.json").read_text())
    figures = [f for f in content["figures"] if f["file"]]
    assert len(figures) == 2

    messages, shot = [], tmp_path / "report.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("console", lambda m: messages.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: messages.append(f"page error: {error}"))
            page.on("requestfailed", lambda request: messages.append(f"request failed: {request.url}"))
            page.goto(path.as_uri(), wait_until="load")
            images = page.evaluate(
                "() => Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,"
                " w: i.naturalWidth, h: i.naturalHeight, shown: i.getBoundingClientRect().width}))")
            tables = page.evaluate("() => document.querySelectorAll('table').length")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()

    assert messages == []
    assert len(images) == len(figures)
    for image, figure in zip(images, figures):
        assert image["alt"] == figure["title"] and image["complete"], image
        assert image["w"] >= 200 and image["h"] >= 150 and image["shown"] > 100, image
    assert tables >= 1 + len(content["tables"]) + 1  # facts, each table, trials

    from PIL import Image

    with Image.open(shot) as screenshot:
        width, height = screenshot.size
    # the page holds both figures one above the other, plus tables: taller than the viewport
    assert width == 1280 and height > sum(i["h"] for i in images) + 300
    assert shot.stat().st_size > 50_000
