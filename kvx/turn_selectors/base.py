"""Turn-selector interface (TPBench): which dialogue turns a compressed context keeps.

A selector is a dataclass registered in the ``kvx.turn_selectors`` entry-point group. Built-in
selectors (recency, uniform stride, random, ...) arrive with the dialogue tasks; this module fixes
the contract they and third-party selectors implement.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


def keep_count(n_turns: int, keep_ratio: float) -> int:
    """TPBench positional selectors keep ``k = max(1, round(n * r))`` of ``n`` turns."""
    if n_turns < 1:
        raise ValueError(f"a dialogue needs at least one turn, got n_turns={n_turns}")
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio={keep_ratio} must be in (0, 1]")
    return max(1, round(n_turns * keep_ratio))


class TurnSelector(ABC):
    """Chooses turns to keep; deterministic given ``seed`` (random selectors seed per dialogue)."""

    @abstractmethod
    def select(self, turns: Sequence[str], keep_ratio: float, seed: int) -> list[int]:
        """Indices of the kept turns, ascending, ``keep_count(len(turns), keep_ratio)`` of them."""
