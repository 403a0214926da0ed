"""MLflow bookkeeping: the store, the experiment, parent/child/control runs and reuse of finished cells.

The default store is an embedded sqlite file under ``outputs/``; ``MLFLOW_TRACKING_URI`` (a
tracking server, Postgres) wins when set. The store is created once before any job starts,
because concurrent first opens of a fresh sqlite store race on its schema migration.
"""

from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from mlflow.entities import Run, RunStatus
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from kvx.preflight import tracking_uri

CONFIG_HASH = "kvx.config_hash"
CELL_ID = "kvx.cell_id"
DIAGNOSTICS = "kvx.diagnostics"
REUSED = "kvx.reused."  # + cell id, on a sweep run: a job of the sweep reused that finished cell run
ROLE = "kvx.role"
CONTROL_KEY = "kvx.control_key"
PLANNED_JOBS = "kvx.planned_jobs"
PARENT_FILE = "kvx_parent_run_id"
MLFLOW_PARENT = "mlflow.parentRunId"


def ensure_experiment(cfg: DictConfig) -> tuple[MlflowClient, str]:
    """Create the store (sqlite: its folder and schema) and the experiment; return both ids."""
    uri = tracking_uri(cfg)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=uri)
    name = str(cfg.mlflow.experiment)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return client, exp.experiment_id
    location = None
    if uri.startswith("sqlite:") and cfg.mlflow.artifact_location:
        location = Path(str(cfg.mlflow.artifact_location)).resolve().as_uri()
    try:
        return client, client.create_experiment(name, artifact_location=location)
    except Exception:  # created meanwhile by another process
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return client, exp.experiment_id


def runs_with_tag(client: MlflowClient, exp_id: str, key: str, value: str) -> list[Run]:
    return client.search_runs([exp_id], filter_string=f"tags.`{key}` = '{value}'", max_results=1000)


def finished_run_with(client: MlflowClient, exp_id: str, key: str, value: str) -> Run | None:
    for run in runs_with_tag(client, exp_id, key, value):
        if run.info.status == RunStatus.to_string(RunStatus.FINISHED):
            return run
    return None


def delete_unfinished(client: MlflowClient, exp_id: str, key: str, value: str) -> int:
    """Delete runs of the same cell left RUNNING/FAILED/KILLED by an interrupted sweep."""
    stale = [
        r
        for r in runs_with_tag(client, exp_id, key, value)
        if r.info.status != RunStatus.to_string(RunStatus.FINISHED)
    ]
    for run in stale:
        client.delete_run(run.info.run_id)
    return len(stale)


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """Versions every run records: kvx, its stack and each plugin distribution."""
    from kvx.registry import plugin_versions

    tags = {f"version.{d}": _version(d) for d in ("kvx", "torch", "transformers", "kvpress", "hqq", "mlflow")}
    tags.update({f"plugin.{dist}": v for dist, v in plugin_versions().items()})
    tags["git_sha"] = git_sha()
    tags["python"] = platform.python_version()
    return tags
