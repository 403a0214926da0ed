"""Per-process state of ``python -m kvx``, in one object that ``kvx.cli.main`` creates and the jobs use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

if TYPE_CHECKING:
    from kvx.cli.compose import Composer
    from kvx.pipeline.engine import Engine


@dataclass
class Session:
    """What one ``python -m kvx`` process keeps across its cells: the engine (controls and captured
    prefills outlive a cell) and how many cells it finished (the interrupt note counts them)."""

    engine: Engine | None = None
    finished: int = 0
    composer: Composer | None = field(default=None, repr=False)

    def engine_for(self, cfg: DictConfig) -> Engine:
        if self.engine is None:
            from kvx.pipeline.engine import Engine

            budget = cfg.get("decode_budget_mb")
            self.engine = Engine(
                Path(str(cfg.outputs_dir)),
                int(cfg.capture_cache_mb) * 2**20,
                int(cfg.memo_cache_mb) * 2**20,
                0 if budget is None else int(budget) * 2**20,
            )
        return self.engine

    def __getstate__(self) -> dict[str, Any]:
        """Parallel launchers pickle the task function to their workers: each starts its own."""
        return {"engine": None, "finished": 0, "composer": None}
