"""Task interface: a task turns (seed, size) into a fixed split of sources and scores answers.

A task is a dataclass: its fields are its Hydra config node (``task.<field>=...``) and its
methods generate sources and score predictions. The run engine never looks inside a task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvx.core.source import READER_MEASURED as READER_MEASURED  # re-exported: the task API
from kvx.core.source import Segment as Segment
from kvx.core.source import Source

CountTokens = Callable[[str], int]


@dataclass
class Score:
    """One evaluated answer: the score in [0, 1], correctness, the scorer's view of the text,
    per-answer metrics (name -> number in [0, 1]) and non-numeric facts (an execution outcome)."""

    value: float
    correct: bool
    normalized: str
    metrics: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: float, normalized: str, **kw: Any) -> Score:
        """A score that is correct exactly when it is 1.0 (every built-in scorer's rule)."""
        return cls(float(value), float(value) >= 1.0, normalized, **kw)


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
    def evaluate(self, answer: str, source: Source) -> Score:
        """Evaluate one answer once: score, correctness, normalized text, metrics and details.

        Called once per answer; tasks whose evaluation is costly (code execution) may memoize.
        """

    #: decoding budget when the run does not set ``max_new_tokens`` (short answers by default); read from
    #: the instance, so a field can choose it in ``__post_init__`` (``tool_call task.catalog=kv_exec_bench``)
    max_new_tokens: ClassVar[int] = 24
    #: the fewest reader tokens any prompt of this task takes, whatever the tokenizer and fields: a
    #: smaller ``context_tokens`` is refused before any model loads (1: the task does not size prompts)
    min_context_tokens: ClassVar[int] = 1
    #: string anchor -> the structural metric it stands in for (names from ``metrics``); the aggregate
    #: shows each pair side by side with the share each keeps relative to FullCache
    contrast: ClassVar[dict[str, str]] = {}
    #: the family the task belongs to (RULER's subtasks are ``ruler``): the aggregate's matrix pools each
    #: family between its tasks and the pooled row; None: a task of its own
    family: ClassVar[str | None] = None

    def manifest(self, n: int, seed: int) -> dict[str, Any] | None:
        """What the split is made of (files read, construction counts, hashes), logged with each run;
        None for tasks with nothing to add."""
        return None

    def validate(self) -> None:  # noqa: B027 - optional hook, most tasks have nothing to check
        """Raise ``kvx.core.errors.ConfigError`` for a setting that cannot run, before any model loads."""

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:  # noqa: B027
        """Raise ``ValueError`` exactly when ``sources(n, seed, context_tokens, count_tokens)`` would
        fail for lack of room (``context_tokens`` too small for this task's shortest prompt), with the
        message ``sources`` would give. ``count_tokens`` is the reader's own counter, built from its
        tokenizer before any weights load (``kvx.pipeline.fit.check_fits``, which the sweep calls for
        every cell before the first model loads). Cheap: no split beyond what the check needs, no
        download. The default checks nothing: tasks whose prompts are not sized to a budget."""
