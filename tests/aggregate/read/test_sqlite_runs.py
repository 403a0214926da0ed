"""The embedded store read without MLflow gives what MLflow's client gives, or steps aside."""

from __future__ import annotations

import math
import sqlite3

import pytest
from mlflow.tracking import MlflowClient

from kvx.aggregate.read import sqlite_runs
from kvx.testing.synthetic import Grid, log_sweep


@pytest.mark.slow
def test_runs_tags_and_metrics_equal_mlflows(tmp_path):
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    client.create_experiment("kvx", artifact_location=(tmp_path / "mlruns").as_uri())
    log_sweep(uri, Grid(n_sources=2))
    other = client.create_experiment("other")
    client.create_run(other, run_name="elsewhere")  # another experiment's run is not listed
    deleted = client.create_run(client.get_experiment_by_name("kvx").experiment_id, run_name="gone")
    client.log_metric(deleted.info.run_id, "nan_metric", math.nan)
    client.delete_run(deleted.info.run_id)  # deleted runs are not listed, as in search_runs
    ids, runs = sqlite_runs.search(db, ["kvx"])
    expected = client.search_runs(ids, "", max_results=1000)
    assert ids == [client.get_experiment_by_name("kvx").experiment_id]
    assert len(runs) == len(expected) == 1 + 4 + 1  # the sweep, its 4 cells, one control run

    def view(run):
        info = run.info
        return (
            (info.run_id, info.run_name, info.status, info.start_time, info.artifact_uri),
            run.data.tags,
            run.data.metrics,
        )

    assert sorted(map(view, runs), key=str) == sorted(map(view, expected), key=str)


def test_unknown_experiments_and_foreign_databases(tmp_path):
    db = tmp_path / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").create_experiment("kvx")
    with pytest.raises(LookupError, match="'nope' does not exist"):
        sqlite_runs.search(db, ["nope"])
    foreign = tmp_path / "other.db"
    sqlite3.connect(foreign).execute("create table runs (id integer)").connection.commit()
    assert sqlite_runs.search(foreign, ["kvx"]) is None  # not MLflow's layout: the caller uses MLflow
