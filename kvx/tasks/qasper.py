"""Qasper (placeholder while issue 27 builds it)."""

from __future__ import annotations

from dataclasses import dataclass

from kvx.core.errors import ConfigError
from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score, Task


@dataclass
class Qasper(Task):
    """Not built yet."""

    path: str = ""

    def validate(self) -> None:
        raise ConfigError("task=qasper is not built yet")

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        raise ConfigError("task=qasper is not built yet")

    def evaluate(self, answer: str, source: Source) -> Score:
        raise ConfigError("task=qasper is not built yet")
