"""Hydra callback: a single run is checked before Hydra writes its run folder, and a sweep under a
sweeper other than kvx's says what it leaves out."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from kvx.cli.errors import Stop
from kvx.core.errors import ConfigError

log = logging.getLogger("kvx")

KVX_SWEEPER = "hydra_plugins.kvx.plugins.KvxSweeper"


class SingleRun(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check the run's cell (``kvx.cli.cells``) before its folder or store exists."""
        from kvx.cli.cells import build_cell, check_fit, choices
        from kvx.cli.preflight import check_services

        try:
            if config.get("suite"):
                parts = ", ".join(str(p) for p in config.suite)
                raise ConfigError(f"this preset is a suite of sweeps ({parts}): run it with -m")
            if config.get("per_job"):
                raise ConfigError(f"per_job={list(config.per_job)} groups the cells of a multirun: add -m")
            built = build_cell(config, choices(config))
            check_services([config])
            check_fit(*built)
        except Exception as exc:  # Hydra would turn it into a warning and run the job anyway
            raise Stop(exc) from exc

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        target = str(config.hydra.sweeper.get("_target_", ""))
        if target != KVX_SWEEPER:
            log.warning(
                "kvx: sweeper %s: each job checks its cell as it starts (not every cell first), runs one "
                "cell (no grouping: one model load and prefill per cell), and no sweep run is logged",
                target,
            )
