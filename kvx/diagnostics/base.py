"""Diagnostic interface (KVDiagnosis section 4): measurements attached to compressed records.

A diagnostic is a dataclass registered in the ``kvx.diagnostics`` entry-point group. It never
guesses: a value it cannot measure validly comes back with a status other than ``measured`` and
a reason, and a failure is an ``error`` result, not a missing field.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kvx.core.errors import ConfigError

Status = Literal["measured", "projected", "structural", "not_applicable", "error"]
STATUSES: tuple[str, ...] = ("measured", "projected", "structural", "not_applicable", "error")


@dataclass
class DiagnosticResult:
    """One diagnostic's outcome for one record: values, applicability and what it cost."""

    status: Status
    values: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {STATUSES}")
        if self.status in ("not_applicable", "error") and not self.reason:
            raise ValueError(f"a {self.status} result must say why")
        if self.status in ("not_applicable", "error") and self.values:
            raise ValueError("a result without a valid measurement carries no values (never imputed)")


class Diagnostic(ABC):
    """Base class for ``kvx.diagnostics`` plugins.

    ``measure`` receives the run context the engine already built (reader, prompt, caches,
    record) so a diagnostic never repeats the prefill.

    ``risk`` declares, per value name, which side means more failure risk ("higher" or
    "lower"); the aggregate tests exactly these values for C→W vs C→C separation (AUROC) and
    reports their means over failure sets.
    """

    risk: ClassVar[dict[str, str]] = {}

    def requires(self) -> tuple[str, ...]:
        """Diagnostics whose results on the same record this one reads: they must run before it."""
        return ()

    def restore(self, result: dict[str, Any], context: Any) -> None:
        """Put back what this diagnostic hands later ones (``context.shared``) from its stored
        ``result``, where that result stands instead of being measured again (diagnostics added to a
        finished cell, ``kvx.pipeline.rediagnose``). Most hand nothing on."""
        return None

    @abstractmethod
    def measure(self, context: Any) -> DiagnosticResult:
        """Measure one supported compressed record, or say why it does not apply."""


def check_order(diagnostics: Sequence[tuple[str, Diagnostic]]) -> None:
    """Refuse a run order in which a diagnostic would read results that are not there yet: its
    records would silently fall outside what it measures. Raises ConfigError naming a working order."""
    names = [name for name, _ in diagnostics]
    for i, (name, diagnostic) in enumerate(diagnostics):
        needed = diagnostic.requires() if isinstance(diagnostic, Diagnostic) else ()  # duck-typed: reads none
        missing = [n for n in needed if n not in names[:i]]
        if missing:
            order = list(dict.fromkeys([*needed, *(n for n in names if n not in needed)]))
            raise ConfigError(
                f"diagnostics=[{','.join(names)}]: {name} reads the results of {', '.join(needed)} on the "
                f"same record, so they must run before it (missing before it: {', '.join(missing)}); "
                f"e.g. diagnostics=[{','.join(order)}]"
            )
