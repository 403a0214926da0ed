"""Shared fixtures: a tiny random Llama loaded once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _prestarted():
    """The servers of prestarted ``python -m kvx`` processes (tests/prestarted.py) end with the session."""
    import prestarted

    yield
    prestarted.stop_all()


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
