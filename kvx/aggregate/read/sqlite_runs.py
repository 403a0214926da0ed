"""The runs of an embedded (sqlite) MLflow store, read with the standard library.

Importing MLflow and opening its store takes ~3 s, a third of an aggregate of a whole release; the
aggregate only lists runs with their tags, latest metrics and artifact locations. kvx pins MLflow, so
its store layout is known; a store that does not look like it (other tables, several experiments of one
name) returns None and the caller uses MLflow's client. Results equal ``MlflowClient.search_runs``'s
for what the aggregate reads (tested).
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_COLUMNS = {
    "experiments": {"experiment_id", "name", "lifecycle_stage"},
    "runs": {"run_uuid", "name", "status", "start_time", "lifecycle_stage", "artifact_uri", "experiment_id"},
    "tags": {"key", "value", "run_uuid"},
    "latest_metrics": {"key", "value", "is_nan", "run_uuid"},
}


def search(db: Path, experiments: list[str]) -> tuple[list[str], list[Any]] | None:
    """(experiment ids, active runs) shaped like MLflow's ``Run`` where the aggregate reads them
    (``info.run_id``, ``run_name``, ``status``, ``start_time``, ``artifact_uri``; ``data.tags``,
    ``data.metrics``); None when the store is not laid out as this MLflow writes it. Raises
    ``LookupError`` for an experiment the store does not have."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        return _search(con, experiments)
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _search(con: sqlite3.Connection, experiments: list[str]) -> tuple[list[str], list[Any]] | None:
    for table, needed in _COLUMNS.items():
        if not needed <= {row[1] for row in con.execute(f"pragma table_info({table})")}:
            return None
    ids = []
    for name in experiments:
        found = con.execute(
            "select experiment_id from experiments where name = ? and lifecycle_stage = 'active'", (name,)
        ).fetchall()
        if len(found) > 1:
            return None  # one name in several workspaces: MLflow's client knows which is meant
        if not found:
            raise LookupError(f"--experiment {name!r} does not exist")
        ids.append(str(found[0][0]))
    marks = ",".join("?" * len(ids))
    runs = {
        run_id: SimpleNamespace(
            info=SimpleNamespace(
                run_id=run_id, run_name=name, status=status, start_time=start, artifact_uri=artifacts
            ),
            data=SimpleNamespace(tags={}, metrics={}),
        )
        for run_id, name, status, start, artifacts in con.execute(
            "select run_uuid, name, status, start_time, artifact_uri from runs "
            f"where lifecycle_stage = 'active' and experiment_id in ({marks})",
            ids,
        )
    }
    for key, value, run_id in con.execute("select key, value, run_uuid from tags"):
        if run_id in runs:
            runs[run_id].data.tags[key] = value
    for key, value, is_nan, run_id in con.execute("select key, value, is_nan, run_uuid from latest_metrics"):
        if run_id in runs:
            runs[run_id].data.metrics[key] = math.nan if is_nan else float(value)
    return ids, list(runs.values())
