"""Fixtures every test folder shares: a tiny random Llama, a blank MLflow store and a headless Chromium,
each built once per test process (one per pytest-xdist worker) and shared read-only."""

from __future__ import annotations

import os

import pytest


def _threads_per_worker() -> None:
    """N xdist workers on N cores: each worker's torch and BLAS (and the processes it starts) take their
    share of the cores instead of all of them; oversubscribed OpenMP threads spin and slow every worker
    down. Set before torch is imported (it reads the variables once)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    share = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(name, str(share))


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_threads_per_worker()


@pytest.fixture(autouse=True)
def _own_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a tracking URI in the environment, whatever an earlier test of this
    worker left there: a run in the test's folder writes to that folder's store."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="session")
def tiny():
    from kvx.modeling.reader import load_reader
    from kvx.readers.tiny import TinyLlama

    return load_reader("tiny", TinyLlama(num_hidden_layers=3))


@pytest.fixture()
def engine(tmp_path):
    from kvx.pipeline.engine import Engine

    return Engine(tmp_path / "outputs", 512 * 2**20)


@pytest.fixture(scope="session")
def blank_store(tmp_path_factory):
    """``blank_store(folder)`` puts at ``folder/outputs/mlflow.db`` the store a first run in ``folder``
    would create (MLflow's Default experiment rooted in ``folder``; no kvx experiment yet), copied from
    one made once per session instead of migrated again (~2 s each). For tests whose subject is not a
    store's first open: those that are (several workers opening one new store at once) go without."""
    import shutil
    import sqlite3

    from mlflow.tracking import MlflowClient

    template = tmp_path_factory.mktemp("blank-store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()

    def put(folder):
        db = folder / "outputs" / "mlflow.db"
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, db)
        with sqlite3.connect(db) as con:
            con.execute(
                "update experiments set artifact_location = ? where experiment_id = 0",
                (str(folder.resolve() / "mlruns" / "0"),),
            )
        con.close()

    return put


@pytest.fixture(scope="session")
def chromium() -> dict:
    """How Playwright launches Debian's headless Chromium (its own browser download is not reachable
    here): ``p.chromium.launch(**chromium)``. The test is skipped, saying what to install, where the
    binary is missing."""
    import shutil

    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    return {"executable_path": path, "args": args}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on a real embedded reader are ``slow``, and files holding ``slow`` tests run first.
    pytest-xdist hands each worker one file at a time (``--dist loadfile``), in this order: the long
    files start at once and the many short ones fill in around them, instead of one long file left to
    end the run alone on one core."""
    for item in items:  # a real embedded reader is an end-to-end test too: the fast layer runs neither
        if item.get_closest_marker("embedded") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)
