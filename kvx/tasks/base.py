"""Task interface: a task turns (seed, size) into a fixed split of sources and scores answers.

A task is a dataclass: its fields are its Hydra config node (``task.<field>=...``) and its
methods generate sources and score predictions. The run engine never looks inside a task.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Segment:
    """One addressable piece of a context: a dialogue turn (role = speaker), a passage (with its
    title), an instruction block, or a whole plain document. Transforms keep, drop or rewrite
    segments; readers report each segment's token span."""

    id: str
    text: str
    role: str = ""
    title: str = ""


#: metadata keys tasks fill with reader-tokenizer measurements (the prompt's length in its tokens)
READER_MEASURED = ("prompt_tokens",)


@dataclass(frozen=True)
class Source:
    """One task prompt. ``evidence`` holds (start, end) character offsets into ``context``.

    The context is structured as ``segments`` joined by ``separator``; a plain document is one
    segment (the default when a task gives none). Tasks with structure build sources with
    ``Source.from_segments`` so the joined text and the segments can never disagree.
    """

    id: str
    context: str
    question: str
    answers: list[str]
    evidence: list[tuple[int, int]] = field(default_factory=list)
    answer_prefix: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    segments: tuple[Segment, ...] = ()
    separator: str = "\n\n"
    #: the system prompt the reader gets before the context ("": the reader's template default)
    system: str = ""

    def __post_init__(self) -> None:
        if self.segments and self.separator.join(s.text for s in self.segments) != self.context:
            raise ValueError(f"source {self.id}: the segments do not join to the context")
        if len({s.id for s in self.segments}) < len(self.segments):
            raise ValueError(f"source {self.id}: segment ids must be unique")

    @classmethod
    def from_segments(cls, segments: Sequence[Segment], separator: str = "\n\n", **fields: Any) -> Source:
        text = separator.join(s.text for s in segments)
        return cls(context=text, segments=tuple(segments), separator=separator, **fields)

    def parts(self) -> tuple[Segment, ...]:
        """The segments, or the whole context as one segment ``"0"``."""
        return self.segments or (Segment("0", self.context),)

    def segment_spans(self) -> list[tuple[int, int]]:
        """(start, end) character offsets of each segment in ``context``."""
        spans, offset = [], 0
        for segment in self.parts():
            spans.append((offset, offset + len(segment.text)))
            offset += len(segment.text) + len(self.separator)
        return spans

    def digest(self, reader_free: bool = False) -> str:
        """Content hash: two sources with the same text, answers and evidence hash alike.
        ``reader_free``: without what tasks measure with the reader's tokenizer (``READER_MEASURED``
        metadata), so one row has one hash for every reader of a panel (text artifacts are keyed by it)."""
        payload = asdict(self)
        if reader_free:
            payload["metadata"] = {k: v for k, v in self.metadata.items() if k not in READER_MEASURED}
        if not self.segments:  # plain documents hash as they did before segments existed
            del payload["segments"], payload["separator"]
        if not self.system:  # nor before system prompts existed
            del payload["system"]
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


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

    #: decoding budget when the run does not set ``max_new_tokens`` (short answers by default)
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
        """Raise ``kvx.errors.ConfigError`` for a setting that cannot run, before any model loads."""
