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
        run = client.create_run(
            exp_id,
            run_name=f"sweep {sweep_dir.name}",
            tags={tracking.ROLE: "sweep", "kvx.sweep_dir": str(sweep_dir.resolve())},
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
