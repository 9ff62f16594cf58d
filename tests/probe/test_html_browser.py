"""The capability page in headless Chromium: the grid matches the results, a cell shows its evidence,
the surface filter hides rows, and a narrow screen scrolls the grid under a sticky probe column.

Chromium and ChromeDriver are Debian's (`chromium`, `chromium-driver`); scripts/test installs them when
they are missing. Screenshots go to artifacts/browser/.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from jevper.probe import reports
from jevper.probe.catalogue import load_catalogue
from jevper.probe.html import COMMAND, render_index, served, serves, unserved
from jevper.probe.presets import load_presets
from jevper.probe.recording import Layout, ProbeResult, Recording

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("JEVPER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("JEVPER_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1440,1000",
)
# The whole module's budget: past it the watchdog kills chromedriver and Chromium, so a hung browser
# fails the tests instead of holding the suite.
BUDGET_S = 120
WAIT_S = 5
WIDE = (1440, 1000)
NARROW = (390, 844)

EXPECTED_KIND = {
    "supported": "supported",
    "refused": "refused",
    "ignored": "ignored",
    "info": "info",
    "fault": "fault",
    "timeout": "fault",
    "not-run": "not-recorded",
}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.fail(
            f"expected Chromium and ChromeDriver at {', '.join(missing)}: scripts/test installs them "
            "(apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Its own session, so the watchdog can kill chromedriver and the browsers it started in one go.
    service = Service(
        CHROMEDRIVER,
        log_output=str(ARTIFACTS / "chromedriver.log"),
        popen_kw={"start_new_session": True},
    )
    driver = webdriver.Chrome(service=service, options=options)
    watchdog = threading.Timer(BUDGET_S, _kill_group, args=(service.process.pid,))
    watchdog.daemon = True
    watchdog.start()
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(10)
    try:
        yield driver
    finally:
        watchdog.cancel()
        driver.quit()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def columns() -> list[Recording]:
    """The page's columns as the harness loads them: the recordings, then the transcribed ones."""
    return reports.columns(Layout.repository())


def recorded() -> Recording:
    found = [r for r in columns() if r.provenance == "recorded"]
    assert found, "expected at least one recording under tests/fixtures/providers"
    return found[0]


def expected_kind(result: ProbeResult | None, surface: str, recording: Recording) -> str:
    shown = served(recording, load_catalogue())
    if result is not None and result.outcome == "refused" and unserved(result, surface, shown):
        return "unserved"
    if result is None:
        return "not-recorded"
    kind = EXPECTED_KIND[result.outcome]
    if kind in ("supported", "refused", "ignored", "info") and result.grade == "fail":
        return "fails"
    if kind in ("supported", "refused", "ignored", "info") and result.agrees_with_reference is False:
        return "differs"
    return kind


def open_page(driver: WebDriver, path: Path, size: tuple[int, int] = WIDE) -> None:
    width, height = size
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
    )
    driver.get(path.resolve().as_uri())
    loaded = "return document.readyState === 'complete'"
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(loaded))


def grid_cells(driver: WebDriver) -> dict[tuple[str, str], dict[str, str]]:
    cells = driver.execute_script(
        """return Array.from(document.querySelectorAll('td[data-key]')).map(td => ({
            key: td.dataset.key, probe: td.dataset.probe, kind: td.dataset.kind,
            klass: td.className, verdict: td.querySelector('.verdict').textContent}));"""
    )
    return {(c["key"], c["probe"]): c for c in cells}


def cell_button(driver: WebDriver, key: str, probe_id: str) -> Any:
    return driver.find_element(By.CSS_SELECTOR, f'td[data-key="{key}"][data-probe="{probe_id}"] button')


def evidence(driver: WebDriver, selector: str) -> str:
    found = driver.find_element(By.CSS_SELECTOR, f"#evidence-body {selector}")
    return found.get_attribute("textContent") or ""


@pytest.fixture(scope="module")
def committed_page() -> Path:
    page = ROOT / "reports" / "index.html"
    assert page.is_file(), f"expected the committed page at {page}: run `{COMMAND}`"
    return page


def test_every_probe_of_every_recording_has_a_cell_with_its_verdict_and_outcome(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    cells = grid_cells(browser)
    recordings = columns()
    catalogue = load_catalogue()
    assert len(cells) == len(recordings) * len(catalogue.probes)
    for recording in recordings:
        for probe in catalogue.probes:
            result = recording.result(probe.id)
            cell = cells[(recording.key, probe.id)]
            where = (recording.key, probe.id)
            assert cell["verdict"] == (result.verdict if result else "not recorded"), where
            assert cell["kind"] == expected_kind(result, probe.surface, recording), where
            assert f"k-{cell['kind']}" in cell["klass"].split(), where
    # Nothing was fetched: the page is one file.
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_at_1440_px_the_columns_a_reader_sees_first_are_the_openai_style_servers_by_release(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    heads = browser.execute_script(
        """return Array.from(document.querySelectorAll('th.col-head')).map(th => ({
            key: th.dataset.key, right: th.getBoundingClientRect().right}));"""
    )
    keys = [h["key"] for h in heads]
    assert keys == [r.key for r in columns()]
    on_screen = [h["key"] for h in heads if h["right"] <= WIDE[0]]
    llamacpp = [r.key for r in columns() if r.server == "llamacpp" and r.provenance == "recorded"]
    assert on_screen[: len(llamacpp)] == llamacpp  # every recorded llama.cpp release, oldest first
    assert any(key.startswith("vllm-") for key in on_screen)
    # The System One servers come after the OpenAI-style ones, in the presets' order.
    kinds = list(load_presets())
    recorded = [r for r in columns() if r.provenance == "recorded"]
    assert [kinds.index(r.server) for r in recorded] == sorted(kinds.index(r.server) for r in recorded)


def test_a_system_one_servers_column_shows_its_route_and_marks_the_surfaces_it_does_not_serve(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    cells = grid_cells(browser)
    catalogue = load_catalogue()
    only_systemone = [r for r in columns() if serves(r.server) == ("systemone",)]
    assert only_systemone, "expected a recording of a System One server"
    for recording in only_systemone:
        kinds = {p.surface: set() for p in catalogue.probes}
        for probe in catalogue.probes:
            kinds[probe.surface].add(cells[(recording.key, probe.id)]["kind"])
        for surface, seen in kinds.items():
            if surface == "systemone":
                assert "unserved" not in seen and "supported" in seen, recording.key
            elif seen != {"not-recorded"}:  # a surface added since the recording was made
                assert seen == {"unserved"}, (recording.key, surface)
    key, probe_id = only_systemone[0].key, "chat-logprobs"
    td = browser.find_element(By.CSS_SELECTOR, f'td[data-key="{key}"][data-probe="{probe_id}"]')
    # The grid shows one quiet mark; the verdict stays for screen readers and in the evidence.
    shown = browser.execute_script(
        "const b = arguments[0].querySelector('button');"
        "const v = b.querySelector('.verdict').getBoundingClientRect();"
        "return [getComputedStyle(b, '::after').content, v.width * v.height];",
        td,
    )
    assert shown == ['"not served"', 1]
    td.find_element(By.TAG_NAME, "button").click()
    verdict = only_systemone[0].result(probe_id)
    assert verdict is not None
    WebDriverWait(browser, WAIT_S).until(lambda d: evidence(d, ".ev-verdict") == verdict.verdict)


def test_the_header_names_every_recording_with_its_provenance(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    for recording in columns():
        head = browser.find_element(By.CSS_SELECTOR, f'th.col-head[data-key="{recording.key}"]').text
        assert recording.release in head
        if recording.provenance == "recorded":
            assert f"recorded live {recording.recorded_on}" in head
            assert recording.model_name in head
        elif recording.folder is not None:  # a dialect fixture: cassettes from a test server of ours
            assert "transcribed from documentation" in head and "not a recording" in head
        else:
            assert "transcribed from the reference" in head


def test_clicking_a_cell_shows_its_request_status_and_response(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    recording = recorded()
    result = next(p for p in recording.probes if p.outcome not in ("not-run", "fault", "timeout"))
    cell_button(browser, recording.key, result.id).click()
    WebDriverWait(browser, WAIT_S).until(lambda d: result.id in evidence(d, "h3"))
    assert evidence(browser, ".ev-verdict") == result.verdict
    assert evidence(browser, ".ev-status") == str(result.status)
    probe = load_catalogue().get(result.id)
    assert evidence(browser, ".ev-request") == f"{probe.method} /v1{probe.path}"
    assert evidence(browser, ".ev-response-status") == str(result.status)
    assert evidence(browser, ".ev-response").strip()
    assert browser.find_element(By.ID, "evidence").is_displayed()
    browser.save_screenshot(str(ARTIFACTS / "capabilities-evidence.png"))


def test_a_link_to_a_cell_opens_the_page_on_its_evidence(browser: WebDriver, committed_page: Path) -> None:
    recording = recorded()
    result = recording.probes[-1]
    open_page(browser, committed_page)
    cell_button(browser, recording.key, result.id).click()
    link = browser.current_url
    assert link.endswith(f"#cell-{recording.key}--{result.id}")
    browser.get("about:blank")
    browser.get(link)
    WebDriverWait(browser, WAIT_S).until(lambda d: result.id in evidence(d, "h3"))
    assert evidence(browser, ".ev-verdict") == result.verdict


def test_moving_to_a_cell_with_the_tab_key_shows_its_evidence(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page)
    recording = recorded()
    first_id = recording.probes[0].id
    first = cell_button(browser, recording.key, first_id)
    first.click()
    WebDriverWait(browser, WAIT_S).until(lambda d: first_id in evidence(d, "h3"))
    ActionChains(browser).send_keys(Keys.TAB).perform()
    focused = browser.switch_to.active_element
    assert "cell" in (focused.get_attribute("class") or "").split()
    td = focused.find_element(By.XPATH, "..")
    key, probe_id = td.get_attribute("data-key"), td.get_attribute("data-probe")
    assert (key, probe_id) != (recording.key, first_id)
    WebDriverWait(browser, WAIT_S).until(lambda d: evidence(d, "h3").startswith(f"{probe_id} on "))
    assert focused.get_attribute("aria-pressed") == "true"
    assert first.get_attribute("aria-pressed") == "false"


def test_the_surface_filter_shows_only_that_surfaces_probes(browser: WebDriver, committed_page: Path) -> None:
    open_page(browser, committed_page)
    surfaces = {p.id: p.surface for p in load_catalogue().probes}
    browser.find_element(By.CSS_SELECTOR, 'input[name="surface"][value="responses"]').click()
    visible = browser.execute_script(
        "return Array.from(document.querySelectorAll('tr.probe-row'))"
        ".filter(r => r.offsetParent !== null).map(r => r.dataset.probe);"
    )
    expected = sorted(pid for pid, s in surfaces.items() if s == "responses")
    assert sorted(visible) == expected
    assert browser.find_element(By.ID, "shown").text == f"Showing {len(expected)} of {len(surfaces)} probes"
    browser.find_element(By.CSS_SELECTOR, 'input[name="surface"][value="all"]').click()
    assert browser.find_element(By.ID, "shown").text == f"Showing {len(surfaces)} of {len(surfaces)} probes"


def test_on_a_narrow_screen_the_grid_scrolls_under_a_sticky_probe_column(
    browser: WebDriver, committed_page: Path
) -> None:
    open_page(browser, committed_page, NARROW)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= NARROW[0]
    wrap = browser.find_element(By.CSS_SELECTOR, ".grid-wrap")
    assert browser.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", wrap)
    probe_left = "return document.querySelector('th.probe').getBoundingClientRect().left"
    before = browser.execute_script(probe_left)
    browser.execute_script("arguments[0].scrollLeft = 400", wrap)
    scrolled = "return arguments[0].scrollLeft > 0"
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script(scrolled, wrap))
    assert browser.execute_script(probe_left) == before
    browser.save_screenshot(str(ARTIFACTS / "capabilities-narrow.png"))


def test_a_changed_verdict_between_two_releases_is_highlighted(browser: WebDriver, tmp_path: Path) -> None:
    # A later release made from the first recording, with one verdict changed.
    earlier = recorded()
    changed = replace(earlier.probes[0], verdict="a verdict that changed")
    later = replace(
        earlier, key=f"{earlier.key}-later", run=replace(earlier.run, release=f"{earlier.release}-later")
    )
    later = replace(later, probes=(changed, *earlier.probes[1:]))
    page = tmp_path / "index.html"
    html = render_index([earlier, later], load_catalogue(), source="a test")
    page.write_text(html, encoding="utf-8")
    open_page(browser, page)
    td = browser.find_element(By.CSS_SELECTOR, f'td[data-key="{later.key}"][data-probe="{changed.id}"]')
    assert "changed" in (td.get_attribute("class") or "").split()
    assert td.find_element(By.CSS_SELECTOR, ".delta").text == f"Δ since {earlier.release}"
    assert len(browser.find_elements(By.CSS_SELECTOR, "td.changed")) == 1
    td.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: evidence(d, ".ev-before") == earlier.probes[0].verdict)


def test_a_screenshot_of_the_page_is_saved_for_the_readme(browser: WebDriver, committed_page: Path) -> None:
    open_page(browser, committed_page)
    # Show a verdict that changed between releases when there is one: it says the most at a glance.
    changed = browser.find_elements(By.CSS_SELECTOR, "td.changed button")
    if changed:
        changed[0].click()
    else:
        recording = recorded()
        cell_button(browser, recording.key, recording.probes[0].id).click()
    browser.execute_script("window.scrollTo(0, 0); document.querySelector('.grid-wrap').scrollTo(0, 0)")
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return window.scrollY") == 0)
    shot = ARTIFACTS / "capabilities.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
