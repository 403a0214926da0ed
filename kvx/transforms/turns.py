"""Dialogue transforms: turn selection (a ``kvx.turn_selectors`` plugin at a turn fraction) and the
matched turn deletions of TPBench §4/§6.3.

Both keep non-turn segments (the ``Context:`` header) and drop or keep whole turns, so the record
names the kept turns and the scorer sees exactly the turns the reader saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.core.checks import check_bool, check_choice
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.source import SPEAKERS, Segment, Source
from kvx.transforms.base import Transform
from kvx.turn_selectors.base import Turn, TurnSelector

if TYPE_CHECKING:
    from kvx.modeling.reader import LoadedReader


def dialogue_turns(source: Source) -> list[tuple[Segment, Turn]]:
    """The source's turns (segments whose role is a speaker) with their marker-free utterances."""
    utterances = source.metadata.get("utterances", {})
    segments = [s for s in source.parts() if s.role in SPEAKERS]
    return [(s, Turn(i, s.role, utterances.get(s.id, s.text))) for i, s in enumerate(segments)]


@dataclass
class TurnSelection(Transform):
    """Keep the turns a selector picks at ``fraction`` of the dialogue's turns. ``markers=False``
    renders the kept turns as bare utterances (the paper's H2O/MMR/LLMLingua-2 inputs)."""

    #: 2: the reader keeps the source's system prompt (TPBench Appendix A); 1 dropped it
    version: ClassVar[str] = "2"

    selector: str
    fraction: float
    markers: bool = True
    #: the selector's own fields (part of the cell identity)
    options: dict[str, Any] = field(default_factory=dict)
    _impl: TurnSelector | None = field(default=None, repr=False, compare=False)

    def validate(self) -> None:
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)):
            raise ConfigError(f"turn_fraction={self.fraction!r} must be a number in (0, 1]")
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"turn_fraction={self.fraction} must be in (0, 1]: the fraction of turns kept")
        check_bool("turn_markers", self.markers)
        if self._impl is not None:
            self._impl.validate()

    def bind(self, reader: LoadedReader) -> None:
        if self._impl is not None:
            self._impl.bind(reader)

    @property
    def uses_reader(self) -> bool:
        return bool(getattr(self._impl, "uses_reader", False))

    def apply(self, source: Source) -> Sequence[Segment]:
        if self._impl is None:
            raise RuntimeError("TurnSelection has no selector (build it with kvx.transforms.turns.selection)")
        pairs = dialogue_turns(source)
        if not pairs:
            raise Unsupported(f"source {source.id} has no dialogue turns to select")
        k = self._impl.budget(len(pairs), float(self.fraction))
        picked = sorted(set(self._impl.select([t for _, t in pairs], k, _dialogue_id(source))))
        if len(picked) != k or picked[0] < 0 or picked[-1] >= len(pairs):
            raise ValueError(f"turn selector {self.selector} gave {picked} for k={k} of {len(pairs)} turns")
        kept = {pairs[i][0].id for i in picked}
        by_id = {s.id: t for s, t in pairs}
        out = []
        for segment in source.parts():
            if segment.role not in SPEAKERS:
                out.append(segment)
            elif segment.id in kept:
                bare = Segment(segment.id, by_id[segment.id].text, segment.role)
                out.append(segment if self.markers else bare)
        return out


def selection(name: str, selector: TurnSelector, fraction: float, markers: bool) -> TurnSelection:
    """The transform a run gets for ``turn_selector=<name> turn_fraction=<fraction>``."""
    from kvx.core.identity import fields_of

    options = fields_of(selector)
    revision = getattr(selector, "revision", 1)
    if revision > 1:  # revision 1 is left out: older cells keep their identity
        options["revision"] = revision
    transform = TurnSelection(name, fraction, markers, options)
    transform._impl = selector
    return transform


def _dialogue_id(source: Source) -> str:
    """The id a selector seeds with: a release probe's ``release_id`` (the string the release's
    ``random_seed42`` hashes, e.g. ``v20_sgd_18_00112__qa_00``), else the dialogue id."""
    meta = source.metadata
    return str(meta.get("release_id") or meta.get("dialogue_id", source.id))


DELETIONS = ("update", "update_control", "answers", "answers_control")


@dataclass
class DeleteTurns(Transform):
    """TPBench's matched deletions: remove the update turn (``update``) or the update turn and every
    answer-bearing turn (``answers``), or their matched controls — same-speaker turns closest in
    length and position that state neither value. A source without a matched control is
    ``unsupported`` for the control, never silently dropped."""

    version: ClassVar[str] = "2"  # as TurnSelection's

    which: str = "update"

    def validate(self) -> None:
        check_choice("transform.which", self.which, DELETIONS)

    def apply(self, source: Source) -> Sequence[Segment]:
        deletions = source.metadata.get("deletions")
        if deletions is None:
            raise Unsupported(f"source {source.id} has no update turn (deletions apply to TPBench P2/P3)")
        removed = deletions.get(self.which)
        if removed is None:
            raise Unsupported(f"no matched control turn for {self.which} in {source.id}")
        return [s for s in source.parts() if s.id not in set(removed)]
