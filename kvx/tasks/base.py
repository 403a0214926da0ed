"""Task interface: a task turns (seed, size) into a fixed split of sources and scores answers.

A task is a dataclass: its fields are its Hydra config node (``task.<field>=...``) and its
methods generate sources and score predictions. The run engine never looks inside a task.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Source:
    """One task prompt. ``evidence`` holds (start, end) character offsets into ``context``."""

    id: str
    context: str
    question: str
    answers: list[str]
    evidence: list[tuple[int, int]] = field(default_factory=list)
    answer_prefix: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def digest(self) -> str:
        """Content hash: two sources with the same text, answers and evidence hash alike."""
        payload = json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()


class Task(ABC):
    """Base class for task plugins (registered in the ``kvx.tasks`` entry-point group).

    Subclasses are dataclasses. ``scorer_version`` changes whenever scoring semantics change,
    so stored controls scored under another version are never reused.
    """

    scorer_version: ClassVar[str] = "1"

    @abstractmethod
    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        """Return the fixed split: ``n`` sources, deterministic in ``seed``.

        ``count_tokens`` measures text length with the reader's tokenizer, so generated
        haystacks can be sized in tokens. Tasks with natural contexts may ignore it.
        """

    @abstractmethod
    def score(self, prediction: str, source: Source) -> float:
        """Score in [0, 1]; 1.0 means fully correct."""

    #: decoding budget when the run does not set ``max_new_tokens`` (short answers by default)
    max_new_tokens: ClassVar[int] = 24
    #: string anchor -> the structural metric it stands in for (names from ``metrics``); the aggregate
    #: shows each pair side by side with the share each keeps relative to FullCache
    contrast: ClassVar[dict[str, str]] = {}

    def validate(self) -> None:  # noqa: B027 - optional hook, most tasks have nothing to check
        """Raise ``kvx.errors.ConfigError`` for a setting that cannot run, before any model loads."""

    def metrics(self, prediction: str, source: Source) -> dict[str, float]:
        """Per-answer metrics beyond ``score`` (name -> number in [0, 1]), stored with the answer.

        The aggregate tabulates them per cell, e.g. a string anchor next to a structural metric.
        Called once per answer after ``score``; tasks whose evaluation is costly memoize it.
        """
        return {}

    def details(self, prediction: str, source: Source) -> dict[str, Any]:
        """Non-numeric facts about the evaluation (e.g. an execution outcome and its reason)."""
        return {}

    def normalize(self, prediction: str) -> str:
        """The scorer's view of a prediction (stored in records next to the raw output)."""
        return prediction.strip()

    def is_correct(self, score: float) -> bool:
        return score >= 1.0
