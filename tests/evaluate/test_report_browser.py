"""The evaluation's report.html in headless Chromium: one file that fetches nothing, a reliability
diagram and a coverage curve drawn per question, and each bin's row count shown over its bar.

Chromium and ChromeDriver are Debian's (`chromium`, `chromium-driver`), as for the capability page's
browser tests. The screenshot goes to artifacts/browser/evaluation-report.png.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _answers import QUESTIONS, TICKETS, answers, labelled, write
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from jevper.evaluate.cli import main

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("JEVPER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("JEVPER_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1280,1000")  # fmt: skip
WAIT_S = 5
BINDING = ["--server", "llamacpp", "--release", "b11549", "--model", "m", "--method", "logprobs",
           "--api", "chat_completions"]  # fmt: skip


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.fail(f"expected Chromium and ChromeDriver at {', '.join(missing)}: scripts/test installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A report of the labelled tickets' seeded answers, calibrated (held-out points drawn too)."""
    folder = tmp_path_factory.mktemp("evaluation")
    # The first 60 tickets: what is drawn and where does not depend on the row count, and 60 are fit in
    # a quarter of the 240's time.
    rows = labelled()[:60]
    tickets = folder / "tickets.csv"
    tickets.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:61]))
    scored = write(folder / "answers.parquet", [r["id"] for r in rows], answers(rows))
    out = folder / "out"
    argv = [str(tickets), "--questions", str(QUESTIONS), "--answers", str(scored), "--out", str(out)]
    assert main([*argv, "--fit", *BINDING]) == 0
    return out / "report.html", json.loads((out / "metrics.json").read_text())


def opened(driver: WebDriver, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def test_the_report_is_one_file_that_fetches_nothing(
    browser: WebDriver, report: tuple[Path, dict[str, Any]]
) -> None:
    page, _ = report
    opened(browser, page)
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    linked = browser.execute_script(
        "return Array.from(document.querySelectorAll('[src], link[href], use[href]')).length"
    )
    assert linked == 0


def test_each_question_has_a_reliability_diagram_and_a_coverage_curve_drawn_on_screen(
    browser: WebDriver, report: tuple[Path, dict[str, Any]]
) -> None:
    page, metrics = report
    opened(browser, page)
    drawn = browser.execute_script(
        """return Array.from(document.querySelectorAll('section')).map(s => ({
            id: s.id,
            plots: Array.from(s.querySelectorAll('svg')).map(svg => {
                const box = svg.getBoundingClientRect();
                return {kind: svg.getAttribute('class'), width: box.width, height: box.height,
                        bars: svg.querySelectorAll('rect.before').length,
                        points: svg.querySelectorAll('circle.after').length,
                        lines: Array.from(svg.querySelectorAll('polyline')).map(
                            p => p.getBoundingClientRect().width)};
            })}));"""
    )
    assert [s["id"] for s in drawn] == [f"q-{qid}" for qid in metrics["questions"]]
    for section, (qid, q) in zip(drawn, metrics["questions"].items(), strict=True):
        kinds = {plot["kind"]: plot for plot in section["plots"]}
        assert set(kinds) == {"reliability", "coverage"}, qid
        for plot in kinds.values():
            assert plot["width"] > 300 and plot["height"] > 300, (qid, plot)
        filled = [b for b in q["before"]["ece"]["equal_width"]["bins"] if b["count"]]
        after = [b for b in q["after"]["ece"]["equal_width"]["bins"] if b["count"]]
        assert kinds["reliability"]["bars"] == len(filled), qid
        assert kinds["reliability"]["points"] == len(after), qid
        # Both curves (before and held out after) span some of the coverage axis.
        assert len(kinds["coverage"]["lines"]) == 2 and all(w > 0 for w in kinds["coverage"]["lines"]), qid


def test_each_bar_shows_its_row_count_and_the_counts_add_up_to_the_rows(
    browser: WebDriver, report: tuple[Path, dict[str, Any]]
) -> None:
    page, metrics = report
    opened(browser, page)
    for qid, q in metrics["questions"].items():
        shown = browser.execute_script(
            """const svg = document.querySelector(`section#q-${arguments[0]} svg.reliability`);
            return Array.from(svg.querySelectorAll('rect.before')).map(r => {
                const label = r.nextElementSibling;
                const bar = r.getBoundingClientRect(), text = label.getBoundingClientRect();
                return {count: label.textContent, above: text.bottom <= bar.top + 1,
                        over: text.left < bar.right && text.right > bar.left, visible: text.width > 0};
            });""",
            qid,
        )
        counts = [str(b["count"]) for b in q["before"]["ece"]["equal_width"]["bins"] if b["count"]]
        assert [s["count"] for s in shown] == counts, qid
        assert sum(int(c) for c in counts) == q["before"]["n"], qid
        assert all(s["above"] and s["over"] and s["visible"] for s in shown), (qid, shown)
        # The figures table states the rows too.
        table = browser.execute_script(
            "return document.querySelector(`section#q-${arguments[0]} table`).innerText", qid
        )
        assert f"rows\t{q['before']['n']}" in table, qid
    shot = ARTIFACTS / "evaluation-report.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
