"""MLflow bookkeeping: the store, the experiment, parent/child/control runs and reuse of finished cells.

The default store is an embedded sqlite file under ``outputs/``; ``MLFLOW_TRACKING_URI`` (a
tracking server, Postgres) wins when set. The store is created once before any job starts,
because concurrent first opens of a fresh sqlite store race on its schema migration.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import platform
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from mlflow.entities import Run, RunStatus
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from kvx.stores.tags import (  # noqa: F401 - the tag names, re-exported where runs are written
    CELL_ID,
    CONFIG_HASH,
    CONTROL_KEY,
    DIAGNOSTICS,
    GRID,
    JUDGE,
    MLFLOW_PARENT,
    PLAN,
    PLANNED_JOBS,
    REUSED,
    ROLE,
    SUPERSEDED_BY,
    tracking_uri,
)

log = logging.getLogger("kvx")

PARENT_FILE = "kvx_parent_run_id"
#: the MLflow UI opens an experiment with this kind as a classic ML experiment (runs table with params
#: and metrics) instead of its GenAI view
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
#: MLflow 3's UI opens experiments in its GenAI view unless the link (or the user's last choice) says
#: otherwise; this query string opens the classic runs table, in the view kvx stores on the experiment
VIEW_KEY = "kvx"
UI_QUERY = f"viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"
#: the runs table's columns in that view: the headline metrics, then the sweep axes
VIEW_COLUMNS = [
    *(f"metrics.`{m}`" for m in ("accuracy", "cw_rate", "n_cw", "n_error")),
    *(f"params.`{p}`" for p in ("press", "setting.value", "task", "reader", "seed", "transform")),
]
_LOCKED = ("database is locked", "database table is locked")


class Store:
    """An MlflowClient whose calls retry, with jittered exponential backoff, while an sqlite store
    says "database is locked": several local workers writing at once is normal, not a failure."""

    def __init__(self, client: MlflowClient, tries: int = 12) -> None:
        self._client, self._tries = client, tries

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: object, **kwargs: object) -> object:
            return retry_locked(lambda: attr(*args, **kwargs), self._tries)

        return call


def retry_locked(call: Callable[[], object], tries: int = 12) -> object:
    delay = 0.05
    for attempt in range(tries):
        try:
            return call()
        except Exception as exc:
            if attempt == tries - 1 or not any(m in str(exc) for m in _LOCKED):
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")


@contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise the first open of a local sqlite store: concurrent first opens race on its schema
    migration ("duplicate column name"). Other stores need no lock."""
    if not uri.startswith("sqlite:///") or uri.endswith(":memory:"):
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_experiment(cfg: DictConfig) -> tuple[Store, str]:
    """Create the store (sqlite: its folder and schema) and the experiment; return both ids."""
    uri = tracking_uri(cfg)
    name = str(cfg.mlflow.experiment)
    with _store_lock(uri):
        client = Store(MlflowClient(tracking_uri=uri))
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            _check_experiment(client, exp, cfg, uri)
            return client, exp.experiment_id
        location = None
        if uri.startswith("sqlite:") and cfg.mlflow.artifact_location:
            location = Path(str(cfg.mlflow.artifact_location)).resolve().as_uri()
        try:
            return client, client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)
        except Exception:  # created meanwhile by another process (a server store takes no local lock)
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return client, exp.experiment_id


_WARNED: set[str] = set()


def _check_experiment(client: Store, exp: object, cfg: DictConfig, uri: str) -> None:
    """An experiment made before kvx tagged its kind opens as a classic ML experiment too; one whose
    artifacts live outside this outputs folder (a copied store) is said loudly, since new runs write
    their artifacts there."""
    tags = getattr(exp, "tags", {}) or {}
    if "mlflow.experimentKind" not in tags:
        for key, value in EXPERIMENT_KIND.items():
            client.set_experiment_tag(exp.experiment_id, key, value)
    location = getattr(exp, "artifact_location", "") or ""
    if uri.startswith("sqlite:///") and location.startswith("file:") and cfg.mlflow.artifact_location:
        recorded = Path(url2pathname(urlparse(location).path))
        here = Path(str(cfg.mlflow.artifact_location)).resolve()
        if recorded != here and str(recorded) not in _WARNED:
            _WARNED.add(str(recorded))
            log.warning(
                "experiment %s keeps its artifacts in %s, not in this outputs folder's %s (a copied "
                "store?): new runs write there; python -m kvx.aggregate reads the copy's own folder",
                exp.name,
                recorded,
                here,
            )


def share_view(client: Store, experiment_id: str) -> None:
    """Store the runs-table view the UI link opens: sweep axes and headline metrics as columns
    (MLflow's shared-view experiment tag)."""
    import json

    state = json.dumps({"selectedColumns": VIEW_COLUMNS})
    client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{VIEW_KEY}", state)


def ui_path(experiment_id: str) -> str:
    """The UI route of an experiment's runs table (append to the server's address)."""
    return f"#/experiments/{experiment_id}/runs?{UI_QUERY}"


def close_stale(uri: str, run_ids: list[str]) -> None:
    """Mark sweep runs a crash left RUNNING as KILLED (``python -m kvx.aggregate --close-stale``):
    the aggregate only reads, so closing them is asked for explicitly and done here."""
    client = MlflowClient(tracking_uri=uri)
    for run_id in run_ids:
        client.set_terminated(run_id, "KILLED")


def runs_with_tag(client: MlflowClient, exp_id: str, key: str, value: str) -> list[Run]:
    return client.search_runs([exp_id], filter_string=f"tags.`{key}` = '{value}'", max_results=1000)


def finished_run_with(client: MlflowClient, exp_id: str, key: str, value: str) -> Run | None:
    for run in runs_with_tag(client, exp_id, key, value):
        if run.info.status == RunStatus.to_string(RunStatus.FINISHED):
            return run
    return None


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
    from kvx.core.registry import plugin_versions

    tags = {f"version.{d}": _version(d) for d in ("kvx", "torch", "transformers", "kvpress", "hqq", "mlflow")}
    tags.update({f"plugin.{dist}": v for dist, v in plugin_versions().items()})
    tags["git_sha"] = git_sha()
    tags["python"] = platform.python_version()
    return tags
