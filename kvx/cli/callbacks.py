"""Hydra callback: one MLflow parent run per multirun, ended FINISHED or FAILED in every case.

Hydra skips ``on_multirun_end`` when a job raises, so the parent is also closed from an
``atexit`` hook that marks it FAILED if nothing marked it FINISHED. The parent beats like a cell
run (``kvx.stores.leases``) and carries the identity of its grid, so rerunning an interrupted command
supersedes the earlier sweep: a killed sweep left RUNNING is closed, and the aggregate counts the
grid's cells once, under the sweep that finished it.
"""

from __future__ import annotations

import atexit
import json
import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from kvx.core.identity import digest
from kvx.stores import leases, tracking

log = logging.getLogger("kvx")


def planned_jobs(overrides: list[str]) -> int:
    """How many cells the sweep runs: the product of every sweep axis's length, times the cells
    each job runs when ``per_job`` groups them (``cells=``).

    The aggregate compares it with the finished cell runs it finds, so a sweep that died
    half-way is reported instead of looking like a smaller grid.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    count = 1
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            count *= len(list(override.sweep_string_iterator()))
        elif override.key_or_group == "cells" and override.value():
            count *= len(json.loads(override.value()))
    return count


def grid_id(config_name: str, overrides: list[str]) -> str:
    """The same command line (in any order) is the same grid."""
    return digest({"config": config_name, "overrides": sorted(overrides)})


class MlflowParentRun(Callback):
    def __init__(self) -> None:
        self.run_id: str | None = None
        self.client: Any = None
        self.heartbeat: leases.Heartbeat | None = None
        self.exp_id: str | None = None
        self.uri: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Parallel launchers pickle the callbacks to their workers: the sweep run (a store client,
        a heartbeat thread) stays with the process that opened it."""
        return {"run_id": None, "client": None, "heartbeat": None, "exp_id": None, "uri": None}

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracking.ensure_experiment(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        client, exp_id = tracking.ensure_experiment(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = [str(o) for o in config.hydra.overrides.task]
        grid = grid_id(str(config.hydra.job.config_name), overrides)
        timing = leases.Timing.from_config(config)
        run = client.create_run(
            exp_id,
            run_name=f"sweep {sweep_dir.name}",
            tags={
                tracking.ROLE: "sweep",
                "kvx.sweep_dir": str(sweep_dir.resolve()),
                tracking.PLANNED_JOBS: str(planned_jobs(overrides)),
                tracking.GRID: grid,
                "kvx.overrides": " ".join(overrides)[:5000],
                leases.OWNER: leases.worker_id(),
                leases.HEARTBEAT: f"{time.time():.3f}",
            },
        )
        self.client, self.run_id = client, run.info.run_id
        self.heartbeat = leases.Heartbeat(client, self.run_id, timing.heartbeat_s)
        (sweep_dir / tracking.PARENT_FILE).write_text(self.run_id)
        atexit.register(self._close, "FAILED")
        tracking.share_view(client, exp_id)
        self.exp_id, self.uri = exp_id, tracking.tracking_uri(config)
        for old in tracking.runs_with_tag(client, exp_id, tracking.GRID, grid):
            if (
                old.info.run_id != self.run_id
                and old.info.status == "RUNNING"
                and not leases.is_live(old, timing)
            ):
                client.set_tag(old.info.run_id, tracking.SUPERSEDED_BY, self.run_id)
                client.set_terminated(old.info.run_id, "KILLED")  # its worker died; this sweep resumes it

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close("FINISHED")
        path = tracking.ui_path(self.exp_id)
        if self.uri.startswith("http"):
            log.info("MLflow UI: %s/%s", self.uri.rstrip("/"), path)
        else:
            log.info(
                "MLflow UI: mlflow ui --backend-store-uri %s, then open http://127.0.0.1:5000/%s",
                self.uri,
                path,
            )

    def _close(self, status: str) -> None:
        if self.run_id is None:
            return
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.client.get_run(self.run_id).info.status == "RUNNING":
            self.client.set_terminated(self.run_id, status)
        self.run_id = None
