"""The run report as a teacher sees it: chromium at 1280 pixels, no sideways scrolling, a picture.

The page is made from a report shaped as `make run` writes it (every lesson, its parameters, long
records, an error), opened by Debian's chromium through Playwright; the screenshot lands in
``tests/browser/artifacts/run-page-1280.png``. Skipped only where no chromium exists.
"""

from __future__ import annotations

import pytest

from mgtutor.classroom.estimate import REFERENCE
from mgtutor.classroom.run_page import index_html
from tests.browser.test_jupyterlab import CHROMIUM_ARGS, _chromium
from tests.conftest import ROOT

SCREENSHOT = ROOT / "tests" / "browser" / "artifacts" / "run-page-1280.png"
WIDTH = 1280


def _report() -> dict:
    long_list = [f"/job:worker/replica:0/task:{n}/device:CPU:0" for n in range(40)]
    entries = []
    for lesson, seconds in REFERENCE["seconds"].items():
        defaults = {f"PARAMETER_WITH_A_LONG_NAME_{n}": long_list[:3] for n in range(12)}
        records = {"synthetic": False, "device_names": long_list, "class_counts": list(range(500)),
                   "test_accuracy": 0.4, "allreduce_vs_one_device": 1e-8}  # fmt: skip
        entries.append({"notebook": f"{lesson}_a_lesson_with_a_long_name.ipynb", "status": "ok",
                        "seconds": seconds * 2, "parameters": {"PARAMETER_WITH_A_LONG_NAME_0": long_list},
                        "defaults": defaults, "records": records, "peak_rss_mb": 4235, "end_rss_mb": 2985,
                        "html": f"{lesson}.html", "ipynb": f"{lesson}.ipynb"})  # fmt: skip
    entries[-1].update(status="failed", error="cell In [7]: " + "ValueError: " + "a long message " * 40)
    return {"started": "2026-11-29T00:00:00", "status": "failed", "seconds": 1800.0,
            "command": "python -m mgtutor.classroom.runner " + "-p NAME VALUE " * 30, "overrides": {},
            "machine": {"hostname": "laptop", "cpu_count": 2, "tensorflow": "2.21.0", "keras": "3.15.1",
                        "python": "3.11.7"}, "notebooks": entries}  # fmt: skip


def test_the_run_report_fits_a_1280_pixel_window_with_its_picture(tmp_path):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium not installed: apt-get install -y chromium (as root; .ci/run does it)")
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "index.html"
    page_file.write_text(index_html(_report()), encoding="utf-8")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(page_file.as_uri())
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            panels = page.evaluate(
                "[...document.querySelectorAll('.glance svg')].map(s => s.getBoundingClientRect().width)"
            )
            rows = page.evaluate("document.querySelectorAll('tbody tr').length")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert scroll_width <= WIDTH, f"the page is {scroll_width} pixels wide: it scrolls sideways"
    assert len(panels) == 2 and all(width > 300 for width in panels)  # time and accuracy, both drawn
    assert rows == len(REFERENCE["seconds"])
