"""The MLflow UI a researcher opens, checked in a real browser: headless Chromium (Debian's, through
Playwright) on ``mlflow server`` over a sweep's store. The experiment opens as a classic ML experiment
with the sweep and its cells, and a trace shows the pipeline's spans. Skips, saying why, without
Playwright or Chromium."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvx.stores.health import wait_healthy
from kvx.stores.postgres import free_port
from kvx.stores.tracking import ui_path
from kvx.testing.cli import kvx_env, sweep
from kvx.testing.stores import store

pytestmark = pytest.mark.slow
pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

from playwright.sync_api import expect, sync_playwright  # noqa: E402 - after the skip


@pytest.fixture(scope="module")
def ui(tmp_path_factory, blank_store):
    """A two-cell sweep with every source traced, served by ``mlflow server`` on loopback. The server
    comes up on the (blank) store while the sweep fills it, as it would over a running study."""
    root = tmp_path_factory.mktemp("ui")
    blank_store(root)
    port = free_port()
    db = f"sqlite:///{root / 'outputs' / 'mlflow.db'}"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", db]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=root,
        env=kvx_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        done = sweep(root, "press=snapkv,tova", "n_sources=2", "tracing.sample=1")
        assert done.returncode == 0, done.stderr[-3000:]
        wait_healthy(f"{url}/health", server)
    except BaseException:
        server.terminate()
        server.wait(timeout=30)
        raise
    client, exp = store(root)
    yield url, exp, client
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def page(ui, chromium):
    with sync_playwright() as p:
        browser = p.chromium.launch(**chromium)
        page = browser.new_page(viewport={"width": 2400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        browser.close()


def test_the_experiment_opens_as_runs_with_the_sweep_and_its_cells(ui, page):
    """The link kvx prints opens the classic runs table (not MLflow 3's GenAI view) with the sweep
    axes and headline metrics as columns; the sweep row expands to its cells."""
    url, exp, client = ui
    page.goto(f"{url}/{ui_path(exp)}", wait_until="load")
    sweep = client.search_runs([exp], "tags.`kvx.role` = 'sweep'")[0].info.run_name
    expect(page.get_by_text(sweep).first).to_be_visible(timeout=60_000)
    page.get_by_text(sweep).first.locator("xpath=ancestor::*[@role='row'][1]").get_by_role(
        "button"
    ).first.click()
    expect(page.get_by_text("ruler_niah_single|tiny|snapkv@0.5|seed=0").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("ruler_niah_single|tiny|tova@0.5|seed=0").first).to_be_visible()
    # the tiny reader answers nothing right, so cw_rate (undefined without C->* pairs) has no column
    for column in ("accuracy", "n_cw", "press", "setting.value"):
        expect(page.get_by_text(column, exact=True).first).to_be_visible(timeout=30_000)


def test_a_trace_shows_the_pipeline_spans(ui, page):
    """The traces list shows each source's question; a trace opens on its spans."""
    url, exp, client = ui
    page.goto(f"{url}/#/experiments/{exp}/traces", wait_until="load")
    expect(page.get_by_text("ruler_niah_single_000000").first).to_be_visible(timeout=60_000)
    (trace,) = [
        t
        for t in client.search_traces(locations=[exp], max_results=10)
        if t.info.trace_metadata.get("mlflow.sourceRun") and "snapkv" in t.data.spans[0].name
    ][:1]
    page.goto(f"{url}/#/experiments/{exp}/traces?traceId={trace.info.trace_id}", wait_until="load")
    expect(page.get_by_text(trace.data.spans[0].name).first).to_be_visible(timeout=60_000)
    for span in ("encode", "transform", "control", "compress", "prefill", "decode", "evaluate"):
        expect(page.get_by_text(span, exact=True).first).to_be_visible(timeout=30_000)
