"""The tag names kvx puts on MLflow runs: importable without MLflow, so readers of a store (the
aggregate) can start before MLflow's ~2 s import."""

from __future__ import annotations

CONFIG_HASH = "kvx.config_hash"
CELL_ID = "kvx.cell_id"
DIAGNOSTICS = "kvx.diagnostics"
REUSED = "kvx.reused."  # + cell id, on a sweep run: a job of the sweep reused that finished cell run
ROLE = "kvx.role"
CONTROL_KEY = "kvx.control_key"
PLANNED_JOBS = "kvx.planned_jobs"
GRID = "kvx.grid"  # on a sweep run: the identity of its command line's grid
SUPERSEDED_BY = "kvx.superseded_by"  # on a sweep run: the later sweep of the same grid that resumed it
MLFLOW_PARENT = "mlflow.parentRunId"
