"""A sweep's MLflow parent run, opened by the sweeper once every cell is checked, closed in every case.

It ends FINISHED when every job finished, KILLED on Ctrl-C and FAILED on an error. The parent beats
like a cell run (``kvx.stores.leases``) and carries the identity of its grid (the set of cells it
plans, whatever spelling of the command line made them), so rerunning an interrupted command
supersedes the earlier sweep: a killed sweep left RUNNING is closed, and the aggregate counts the
grid's cells once, under the sweep that finished it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from omegaconf import DictConfig

from kvx.core.identity import digest
from kvx.stores import leases, tracking

log = logging.getLogger("kvx")


def grid_id(settings: list[str]) -> str:
    """The same cells are the same grid, in any order and however they were typed."""
    return digest({"cells": sorted(set(settings))})


class SweepRun:
    """``with SweepRun(config, arguments, settings):`` around the launch of one sweep's jobs."""

    def __init__(self, config: DictConfig, arguments: list[str], settings: list[str]) -> None:
        self.config, self.arguments, self.settings = config, arguments, settings
        self.client: Any = None
        self.run_id: str | None = None
        self.heartbeat: leases.Heartbeat | None = None
        self.exp_id: str | None = None

    def __enter__(self) -> SweepRun:
        config = self.config
        client, exp_id = tracking.ensure_experiment(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        grid = grid_id(self.settings)
        timing = leases.Timing.from_config(config)
        run = client.create_run(
            exp_id,
            run_name=f"sweep {sweep_dir.name}",
            tags={
                tracking.ROLE: "sweep",
                "kvx.sweep_dir": str(sweep_dir.resolve()),
                tracking.PLANNED_JOBS: str(len(set(self.settings))),
                tracking.GRID: grid,
                "kvx.overrides": " ".join(self.arguments)[:5000],
                leases.OWNER: leases.worker_id(),
                leases.HEARTBEAT: f"{time.time():.3f}",
            },
        )
        self.client, self.run_id, self.exp_id = client, run.info.run_id, exp_id
        self.heartbeat = leases.Heartbeat(client, self.run_id, timing.heartbeat_s)
        (sweep_dir / tracking.PARENT_FILE).write_text(self.run_id)  # the jobs read it (kvx.cli.app)
        tracking.share_view(client, exp_id)
        for old in tracking.runs_with_tag(client, exp_id, tracking.GRID, grid):
            if (
                old.info.run_id != self.run_id
                and old.info.status == "RUNNING"
                and not leases.is_live(old, timing)
            ):
                client.set_tag(old.info.run_id, tracking.SUPERSEDED_BY, self.run_id)
                client.set_terminated(old.info.run_id, "KILLED")  # its worker died; this sweep resumes it
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        status = "FINISHED" if kind is None else "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.run_id is not None and self.client.get_run(self.run_id).info.status == "RUNNING":
            self.client.set_terminated(self.run_id, status)
        if status == "FINISHED":
            uri, path = tracking.tracking_uri(self.config), tracking.ui_path(self.exp_id)
            if uri.startswith("http"):
                log.info("MLflow UI: %s/%s", uri.rstrip("/"), path)
            else:
                log.info(
                    "MLflow UI: mlflow ui --backend-store-uri %s, then open http://127.0.0.1:5000/%s",
                    uri,
                    path,
                )
