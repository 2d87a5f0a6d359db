"""The HTML report of a real sweep opens in headless Chromium, error-free, with every figure, the
claims table, the aggregates and the sweep view."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from raylab import report

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMAGES_ENV = "RAYLAB_DOCS_IMAGES"
"""A folder (``docs/images`` for the site: ``make screenshots``) where this test also writes the
documentation's screenshots of the report, section by section: ``DOCS_SCREENSHOTS``."""
DOCS_SCREENSHOTS = {
    # file: (the section heading it starts at, the heading it stops before)
    "report_claims.png": ("Claims", "Figures"),
    "report_sweep.png": ("Sweep", "Trials"),
}
# the report test's dqn_softlinf sweep (3 seeds of MSE and soft-linf on FeatureMDP), shared
DQN_SWEEP = ("dqn_softlinf_small", "search.seed=[0,1,2]")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} is absent (Debian's chromium package; .ci/run installs it)"
)
def test_html_report_opens_in_headless_chromium_and_shows_claims_aggregates_and_sweep(shared_smoke_sweep, tmp_path):
    from playwright.sync_api import sync_playwright

    _, run_path, _ = shared_smoke_sweep(*DQN_SWEEP)
    path = Path(report.write_report(run_path, out=tmp_path / "report"))
    content = json.loads((path.parent / "report.json").read_text())
    figures = [f for f in content["figures"] if f["file"]]
    extra = [content["aggregates"][0]["file"], content["sweep"]["parallel"]["file"], content["sweep"]["curves"]["file"]]
    assert all(extra) and len(figures) >= 2

    messages, shot = [], Path(os.environ.get("RAYLAB_REPORT_SCREENSHOT", tmp_path / "report.png"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on(
                "console", lambda m: messages.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
            )
            page.on("pageerror", lambda error: messages.append(f"page error: {error}"))
            page.on("requestfailed", lambda request: messages.append(f"request failed: {request.url}"))
            page.goto(path.as_uri(), wait_until="load")
            images = page.evaluate(
                "() => Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,"
                " w: i.naturalWidth, h: i.naturalHeight, shown: i.getBoundingClientRect().width,"
                " caption: i.parentElement.querySelector('figcaption').textContent}))"
            )
            claims = page.evaluate(
                "() => Array.from(document.querySelectorAll('table.claims tbody tr')).map(r =>"
                " Array.from(r.cells).map(c => ({text: c.innerText, cls: c.className})))"
            )
            order = page.evaluate("() => Array.from(document.querySelectorAll('h2')).map(h => h.innerText)")
            tables = page.evaluate("() => document.querySelectorAll('table').length")
            page.screenshot(path=str(shot), full_page=True)
            if os.environ.get(DOCS_IMAGES_ENV):
                docs_screenshots(page, Path(os.environ[DOCS_IMAGES_ENV]), tmp_path)
        finally:
            browser.close()

    assert messages == []
    assert len(images) == len(figures) + len(extra)
    shown = {i["caption"].split(" ")[0]: i for i in images}
    for file in [f["file"] for f in figures] + extra:
        image = shown[file]
        assert image["complete"] and image["w"] >= 200 and image["h"] >= 150 and image["shown"] > 100, image
    # the claims table: one row per claim here, its verdict cell coloured by the verdict
    assert len(claims) == len(content["claims"]) == 2
    for row, claim in zip(claims, content["claims"]):
        assert row[1]["text"] == claim["statement"]
        assert row[3]["text"] == ", ".join(claim["rows"][0]["measured_on"])  # the metric the values came from
        assert "wide: 3 seeds < 5" in row[5]["text"]
        assert row[-1]["text"] == claim["rows"][0]["verdict_words"] and row[-1]["cls"].startswith("v-")
    assert order[:4] == ["Status", "Claims", "Aggregate performance: evaluation return over games", "Figures"]
    assert "Sweep" in order and order[-1] == "Trials"
    with_rows = sum(1 for t in content["tables"] for b in t["blocks"] if b["rows"])
    assert tables == 1 + 1 + 1 + with_rows + 1 + 1  # facts, claims, aggregates, each table, importance, trials

    from PIL import Image

    with Image.open(shot) as screenshot:
        width, height = screenshot.size
    assert width == 1280 and height > sum(i["h"] for i in images) + 300
    assert shot.stat().st_size > 50_000


def docs_screenshots(page, folder: Path, tmp_path: Path) -> None:
    """Each of ``DOCS_SCREENSHOTS``: the report from one section heading to the next, as a small
    PNG (128 colours) in ``folder``."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name, (first, stop) in DOCS_SCREENSHOTS.items():
        top, bottom = page.evaluate(
            "([first, stop]) => { const h = Array.from(document.querySelectorAll('h2'));"
            " const y = t => h.find(e => e.innerText.startsWith(t)).getBoundingClientRect().top + window.scrollY;"
            " return [y(first), y(stop)]; }",
            [first, stop],
        )
        assert bottom > top + 100, (name, top, bottom)
        raw = tmp_path / f"raw-{name}"
        page.screenshot(
            path=str(raw), full_page=True, clip={"x": 0, "y": top - 12, "width": 1280, "height": bottom - top}
        )
        with Image.open(raw) as image:
            image.convert("RGB").quantize(colors=128).save(folder / name, optimize=True)
