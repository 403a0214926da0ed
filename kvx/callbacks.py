"""Hydra callback: one MLflow parent run per multirun, ended FINISHED or FAILED in every case.

Hydra skips ``on_multirun_end`` when a job raises, so the parent is also closed from an
``atexit`` hook that marks it FAILED if nothing marked it FINISHED.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from kvx import tracking


def planned_jobs(overrides: list[str]) -> int:
    """How many jobs the basic sweeper launches: the product of every sweep axis's length.

    The aggregate compares it with the finished cell runs it finds, so a sweep that died
    half-way is reported instead of looking like a smaller grid.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    count = 1
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            count *= len(list(override.sweep_string_iterator()))
    return count


class MlflowParentRun(Callback):
    def __init__(self) -> None:
        self.run_id: str | None = None
        self.client: Any = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracking.ensure_experiment(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        client, exp_id = tracking.ensure_experiment(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = [str(o) for o in config.hydra.overrides.task]
        run = client.create_run(
            exp_id,
            run_name=f"sweep {sweep_dir.name}",
            tags={
                tracking.ROLE: "sweep",
                "kvx.sweep_dir": str(sweep_dir.resolve()),
                tracking.PLANNED_JOBS: str(planned_jobs(overrides)),
                "kvx.overrides": " ".join(overrides)[:5000],
            },
        )
        self.client, self.run_id = client, run.info.run_id
        (sweep_dir / tracking.PARENT_FILE).write_text(self.run_id)
        atexit.register(self._close, "FAILED")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close("FINISHED")

    def _close(self, status: str) -> None:
        if self.run_id is None:
            return
        if self.client.get_run(self.run_id).info.status == "RUNNING":
            self.client.set_terminated(self.run_id, status)
        self.run_id = None
