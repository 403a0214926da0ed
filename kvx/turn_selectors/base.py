"""Turn-selector interface (TPBench §5): which whole dialogue turns a compressed context keeps.

A selector is a dataclass registered in the ``kvx.turn_selectors`` entry-point group (built-ins
too); its fields are the ``turn_selector.<field>`` Hydra node. It sees the dialogue's turns (speaker
and utterance, no markers) and a turn budget ``k``, and returns the indices it keeps. Budgets follow
the paper: positional selectors keep ``max(1, round(n r))`` turns, content selectors (attention
proxy, MMR, LLMLingua) ``max(1, floor(n r))``. The ``TurnSelection`` transform renders the kept turns.

Budgets and per-dialogue seeds reproduce the public release (kentech-sail/TPBench) to the bit: its
saved contexts (``data/construction/*_compressed_r{10,30}.jsonl``: ``n_turns``, ``k_turns``) keep
``round(n r)`` turns for the position-only methods (n = 18, r = 0.1 keeps 2, floor would keep 1) and
``int(n r)`` for its content selectors (their ``kept_turn_ids``; the rule of
``scripts/fmts_refpool/core/compression_methods.py``), both on the float product ``n * r``, with
Python's half-to-even ``round``.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.core.errors import Unsupported

__all__ = ["Turn", "TurnSelector", "Unsupported", "dialogue_seed", "keep_count"]

if TYPE_CHECKING:
    from kvx.modeling.reader import LoadedReader


@dataclass(frozen=True)
class Turn:
    """One dialogue turn as a selector sees it."""

    index: int
    speaker: str  # "user" | "system"
    text: str  # the utterance without any [Tn] marker


def keep_count(n_turns: int, fraction: float, rounding: str = "round") -> int:
    """Turns kept of ``n_turns`` at turn fraction ``fraction``: ``max(1, round(n r))`` (positional
    selectors) or ``max(1, floor(n r))`` (content selectors), never more than ``n_turns``.

    Like the release, on the float product: ``round(45 * 0.7)`` is 31 (the product is 31.4999...),
    ``int(50 * 0.58)`` is 28; ties round half to even (``round(15 * 0.3)`` is 4)."""
    if n_turns < 1:
        raise ValueError(f"a dialogue needs at least one turn, got n_turns={n_turns}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"turn_fraction={fraction} must be in (0, 1]")
    raw = n_turns * fraction
    k = math.floor(raw) if rounding == "floor" else round(raw)
    return min(n_turns, max(1, k))


def dialogue_seed(seed: int, dialogue_id: str) -> int:
    """A per-dialogue seed: the same dialogue gets the same random turns in every probe and cell.

    The release's ``random_seed42`` (``scripts/builders/construction.py``): the first 16 hex digits
    of ``sha256(f"{seed}|{dialogue_id}")`` as an integer, modulo 2**32."""
    return int(hashlib.sha256(f"{seed}|{dialogue_id}".encode()).hexdigest()[:16], 16) % 2**32


class TurnSelector(ABC):
    """Base class for ``kvx.turn_selectors`` plugins (dataclasses)."""

    #: "round" (positional selectors) or "floor" (content selectors), as TPBench §5 states
    rounding: ClassVar[str] = "round"
    #: raised when a selector's picks change; above 1 it joins the cell identity (``revision``), so
    #: the cells and stored artifacts of an older rule never pass for the new one
    revision: ClassVar[int] = 1

    def validate(self) -> None:  # noqa: B027 - optional hook
        """Raise ``kvx.core.errors.ConfigError`` for invalid fields, before any model loads."""

    def bind(self, reader: LoadedReader) -> None:  # noqa: B027 - optional hook
        """Called once with the loaded reader before any source; selectors scoring turns with the
        reader's own attention keep it, the others ignore it."""

    def budget(self, n_turns: int, fraction: float) -> int:
        return keep_count(n_turns, fraction, self.rounding)

    @abstractmethod
    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        """Indices of the ``k`` kept turns (any order; the transform sorts them). Raise
        ``Unsupported`` when the selector cannot run here."""
