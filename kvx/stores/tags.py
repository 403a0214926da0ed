"""What reaching a tracking store takes without importing MLflow: the tag names kvx puts on runs and
the store's URI, so readers of a store (the aggregate, the preflight) start before MLflow's ~2 s import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kvx.core.conf import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONFIG_HASH = "kvx.config_hash"
CELL_ID = "kvx.cell_id"
DIAGNOSTICS = "kvx.diagnostics"
JUDGE = "kvx.judge"  # the judge a cell's answers were judged by (name and fields set away from defaults)
REUSED = "kvx.reused."  # + cell id, on a sweep run: a job of the sweep reused that finished cell run
PLAN = "kvx.plan."  # + cell id, on a sweep run: a job of the sweep is that cell (the value names it)
ROLE = "kvx.role"
CONTROL_KEY = "kvx.control_key"
PLANNED_JOBS = "kvx.planned_jobs"
GRID = "kvx.grid"  # on a sweep run: the identity of its command line's grid
SUPERSEDED_BY = "kvx.superseded_by"  # on a sweep run: the later sweep of the same grid that resumed it
MLFLOW_PARENT = "mlflow.parentRunId"


def tracking_uri(cfg: DictConfig) -> str:
    """``MLFLOW_TRACKING_URI`` wins over ``mlflow.tracking_uri`` (read without importing mlflow). A
    relative sqlite path (the default, ``sqlite:///outputs/mlflow.db``) is made absolute against the
    working directory now, as MLflow would open it: the store stays the one this command meant even
    where a later command in the same process (a notebook, a test) works elsewhere, since MLflow keeps
    one open store per URI."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or str(cfg.mlflow.tracking_uri)
    path = uri.removeprefix("sqlite:///")
    if path != uri and path and not path.startswith(("/", ":memory:")) and "?" not in path:
        return f"sqlite:///{Path(path).absolute()}"
    return uri


def _store_config(outputs_dir: str | None) -> DictConfig:
    """The run config's ``outputs_dir`` and ``mlflow`` groups, with ``outputs_dir=...`` applied."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(conf_dir()) / "config.yaml")
    if outputs_dir is not None:
        cfg.outputs_dir = outputs_dir
    return cfg


def run_store(outputs_dir: str | None = None) -> tuple[str, str]:
    """The ``outputs_dir`` and tracking URI of a run given ``outputs_dir=...`` (None: the default), read
    from the run's own config, so that readers of a store (the aggregate) find what the runs wrote."""
    cfg = _store_config(outputs_dir)
    return str(cfg.outputs_dir), tracking_uri(cfg)


def embedded_store(outputs_dir: str | None = None) -> tuple[str, str]:
    """The database and artifact folder a run with ``outputs_dir=...`` keeps when it logs to no server
    (``MLFLOW_TRACKING_URI`` aside): what a tracking server serves for those runs' folder."""
    cfg = _store_config(outputs_dir)
    return str(cfg.mlflow.tracking_uri), str(cfg.mlflow.artifact_location)
