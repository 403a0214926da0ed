"""The typed root config: ``conf/config.yaml`` fills it, Hydra type-checks every override against it.

An unknown top-level key or a value of the wrong type is refused by Hydra's composition itself (and
reported in one line by ``kvx.cli.errors``); the checks that need several fields or a range
(``kvx.cli.preflight.check_job``) run on every cell before anything is written. The plugin groups are
``Any`` here: each option's own dataclass types its fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvx.stores.leases import Timing


@dataclass
class Tracing:
    sample: float = 0.05


@dataclass
class Mlflow:
    tracking_uri: str = "sqlite:///${outputs_dir}/mlflow.db"
    artifact_location: str = "${outputs_dir}/mlartifacts"
    experiment: str = "kvx"


@dataclass
class RunConfig:
    task: Any = None
    reader: Any = None
    transform: Any = None
    turn_selector: Any = None
    press: Any = None
    judge: Any = None
    ratio: float = 0.5
    budget_tokens: Any = None
    turn_fraction: Any = None
    turn_markers: bool = True
    seed: int = 0
    n_sources: int = 10
    context_tokens: int = 1024
    max_new_tokens: Any = None
    query_aware: Any = False  # false | prompt | question (true: prompt): kvx.core.query
    diagnostics: Any = field(default_factory=lambda: ["coverage", "likelihood", "decoding"])
    diagnostic_fields: dict[str, Any] = field(default_factory=dict)
    force: bool = False
    progress: bool = True
    capture_cache_mb: int = 4096
    memo_cache_mb: int = 1024
    decode_budget_mb: Any = None
    outputs_dir: str = "outputs"
    per_job: list[str] = field(default_factory=list)
    #: set by the sweeper: the cells one grouped job runs (JSON), never by hand
    cells: Any = None
    #: a suite preset: the presets it runs one after another, and the overrides it adds to each
    suite: list[str] = field(default_factory=list)
    suite_overrides: list[str] = field(default_factory=list)
    lease: Timing = field(default_factory=Timing)
    tracing: Tracing = field(default_factory=Tracing)
    mlflow: Mlflow = field(default_factory=Mlflow)
