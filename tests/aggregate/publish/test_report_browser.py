"""The aggregate's ``report.html`` opened from ``file://`` in a real browser: headless Chromium (Debian's,
through Playwright) on a report built in-process from a small synthetic grid. It loads without console or
page errors and without network requests, every figure decodes, every section's heading and first table
row show, and a numeric column sorts by clicking its header. Skips, saying why, without Playwright or
Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.publish import report
from kvx.core.records import dumps
from kvx.testing.synthetic import Grid, cells

pytestmark = pytest.mark.slow
pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

from playwright.sync_api import expect, sync_playwright  # noqa: E402 - after the skip

# two readers (so the reader-upgrade audit has figures), two compressors (matched comparisons), one ratio
GRID = Grid(readers=("smollm2", "tiny"), ratios=(0.5,), n_sources=10)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The output folder of ``python -m kvx.aggregate --records`` over the grid's record files."""
    root = tmp_path_factory.mktemp("report")
    records = root / "records"
    records.mkdir()
    for (task, reader, compressor, ratio), rows in cells(GRID):
        (records / f"{task}_{reader}_{compressor}_{ratio}.jsonl").write_text(dumps(rows), encoding="utf-8")
    out = root / "out"
    args = ["--records", str(records), "--out", str(out), "--no-log", "--quiet"]
    assert main([*args, "--splits", "50", "--boot", "50"]) == 0
    return out


@pytest.fixture(scope="module")
def browser_page(built, chromium):
    """The report open in one headless Chromium, with every console error, page error, failed request
    and attempted network request collected."""
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(**chromium)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.route(
            re.compile(r"^(https?|wss?)://"),
            lambda route: (errors.append(f"network: {route.request.url}"), route.abort()),
        )
        page = context.new_page()
        page.on("console", lambda msg: msg.type == "error" and errors.append(f"console: {msg.text}"))
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on("requestfailed", lambda req: errors.append(f"requestfailed: {req.url[:80]} {req.failure}"))
        page.goto((built / "report.html").as_uri(), wait_until="load")
        yield page, errors
        browser.close()


def _sections_with_rows(out: Path) -> set[str]:
    """Anchors of the sections whose tables the aggregate wrote with at least one row."""
    return {
        section.anchor
        for section in report.placed()
        if any(
            (out / f"{name}.csv").exists() and len(pd.read_csv(out / f"{name}.csv"))
            for name in section.tables
        )
    }


def test_every_image_loads_with_its_pixel_size(built, browser_page):
    """Each lazy image is scrolled into view (which starts its load), then every one must have decoded
    at the pixel size its width/height attributes announce."""
    page, errors = browser_page
    images = page.locator("img")
    n = images.count()
    assert n == len(list(built.glob("*.png"))) and n > 5
    for i in range(n):
        images.nth(i).scroll_into_view_if_needed()
    page.wait_for_function("() => Array.from(document.images).every(img => img.complete)", timeout=15_000)
    states = images.evaluate_all(
        "imgs => imgs.map(img => [img.alt, img.naturalWidth, img.naturalHeight, +img.getAttribute('width'),"
        " +img.getAttribute('height'), img.loading, img.decoding])"
    )
    for name, *state in states:
        assert state[0] > 0 and state[1] > 0, f"{name} did not decode"
        assert state[:2] == state[2:4], f"{name}: width/height attributes differ from the PNG"
        assert state[4:] == ["lazy", "async"], name
    assert errors == []


def test_every_section_shows_its_heading_and_first_row(built, browser_page):
    page, errors = browser_page
    with_rows = _sections_with_rows(built)
    assert {"matrix", "failures", "matched", "separation", "audit"} <= with_rows
    anchors = ["validation", *(s.anchor for s in report.placed() if not s.optional)]
    anchors += [s.anchor for s in report.placed() if s.optional and page.locator(f"h2#{s.anchor}").count()]
    for anchor in anchors:
        expect(page.locator(f"h2#{anchor}")).to_be_visible()
        # the first table between this heading and the next one
        first_row = page.locator(
            f"xpath=//div[@class='scroll'][preceding-sibling::h2[1][@id='{anchor}']]//tbody/tr[1]"
        ).first
        if anchor in with_rows:
            first_row.scroll_into_view_if_needed()
            expect(first_row).to_be_visible()
        else:
            assert first_row.count() == 0, f"section {anchor} shows a table the aggregate did not write"
    assert errors == []


def _column(page, index: int) -> list[str]:
    return page.locator("h2#matrix ~ div.scroll table").first.evaluate(
        "(t, i) => Array.from(t.tBodies[0].rows, r => r.cells[i].textContent)", index
    )


def _numbers(values: list[str]) -> list[float]:
    return [float(v) for v in values if v not in ("N/A", "")]


def test_clicking_a_numeric_header_sorts_ascending_then_descending(browser_page):
    page, errors = browser_page
    table = page.locator("h2#matrix ~ div.scroll table").first
    headers = table.locator("thead th")
    numeric = table.evaluate("t => Array.from(t.tBodies[0].rows[0].cells, c => c.classList.contains('num'))")
    rows_before = sorted(table.locator("tbody tr").all_inner_texts())
    # a numeric column with several distinct values, not already ascending; one with N/A cells if any
    candidates = []
    for i in (i for i, is_num in enumerate(numeric) if is_num):
        values = _column(page, i)
        numbers = _numbers(values)
        if len(set(numbers)) >= 3 and numbers != sorted(numbers):
            candidates.append(("N/A" not in values, i))
    assert candidates, "no unsorted numeric column with three distinct values in the matrix table"
    index = min(candidates)[1]
    header = headers.nth(index)
    n_missing = _column(page, index).count("N/A")

    header.click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    values = _column(page, index)
    assert _numbers(values) == sorted(_numbers(values)) and len(set(_numbers(values))) >= 3
    assert values[len(values) - n_missing :] == ["N/A"] * n_missing  # N/A last

    header.click()
    expect(header).to_have_attribute("aria-sort", "descending")
    values = _column(page, index)
    assert _numbers(values) == sorted(_numbers(values), reverse=True)
    assert values[len(values) - n_missing :] == ["N/A"] * n_missing  # still last
    assert headers.locator("xpath=self::*[@aria-sort]").count() == 1  # only the sorted column
    header.locator("button").press("Enter")  # the header is a button: the keyboard sorts too
    expect(header).to_have_attribute("aria-sort", "ascending")
    assert sorted(table.locator("tbody tr").all_inner_texts()) == rows_before  # rows moved, not changed
    assert errors == []
