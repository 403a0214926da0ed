"""Where a run's store is: the tracking URI a command resolves before anything opens it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from kvx.stores.tags import tracking_uri


def _cfg(uri: str):
    return OmegaConf.create({"mlflow": {"tracking_uri": uri}})


def test_a_relative_sqlite_path_is_made_absolute_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking_uri(_cfg("sqlite:///outputs/mlflow.db")) == f"sqlite:///{tmp_path}/outputs/mlflow.db"
    # MLflow keeps one open store per URI: a second command elsewhere in this process gets its own
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    assert tracking_uri(_cfg("sqlite:///outputs/mlflow.db")) == f"sqlite:///{tmp_path}/b/outputs/mlflow.db"


def test_other_uris_are_kept_as_written_and_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for uri in (
        f"sqlite:///{tmp_path}/m.db",  # already absolute (four slashes in all)
        "sqlite:///:memory:",
        "sqlite:///m.db?timeout=30",  # query options: MLflow's own reading
        "http://127.0.0.1:5000",
        "postgresql://u@127.0.0.1/db",
    ):
        assert tracking_uri(_cfg(uri)) == uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")
    monkeypatch.chdir(tmp_path)
    assert tracking_uri(_cfg("sqlite:///outputs/mlflow.db")) == f"sqlite:///{Path(tmp_path, 'env.db')}"
