"""What a task hands the pipeline: a source (one prompt with its answers and evidence) made of segments.

Every floor reads sources (transforms keep or rewrite segments, readers render them, diagnostics align
evidence), so the type lives below all of them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: the roles of a dialogue's turns (segments with another role, such as an instruction, are not turns)
SPEAKERS = ("user", "system")


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
    #: the stored candidate pool a text compressor reads when it holds more than the raw reader input
    #: (MuSiQue: twenty paragraphs behind a first-eight raw input), as a source of its own with its
    #: evidence; None: compressors read this source
    pool: Source | None = None
    #: the answer prefix runs on from the question as written, with nothing between (RULER's own
    #: prompts, whose prefix starts with a space); False: on a line of its own in a plain-text prompt
    inline_prefix: bool = False

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
        if not self.inline_prefix:  # nor before RULER's own prompts ran the prefix on
            del payload["inline_prefix"]
        if self.pool is None:  # nor before stored pools existed
            del payload["pool"]
        else:
            payload["pool"] = self.pool.digest(reader_free)
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
