"""TPBench's position-only turn selectors (§5): they read turn positions and speakers, not text.

Each keeps ``k = max(1, round(n r))`` turns (``TurnSelector.budget``) and returns indices; the
``TurnSelection`` transform renders the kept turns in dialogue order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from kvx.core.checks import check_int
from kvx.turn_selectors.base import Turn, TurnSelector, dialogue_seed


@dataclass
class Recency(TurnSelector):
    """The latest ``k`` turns."""

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return list(range(len(turns) - k, len(turns)))


@dataclass
class Earliest(TurnSelector):
    """The first ``k`` turns (keeps turn 0, so it keeps the P1 reference by rule)."""

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return list(range(k))


@dataclass
class RandomTurns(TurnSelector):
    """``k`` turns drawn uniformly, seeded per dialogue: one dialogue keeps the same turns in every
    probe, probe seed and cell (the paper's fixed ``random_seed42``)."""

    seed: int = 42

    def validate(self) -> None:
        check_int("turn_selector.seed", self.seed)

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return random.Random(dialogue_seed(self.seed, dialogue_id)).sample(range(len(turns)), k)


@dataclass
class UniformStride(TurnSelector):
    """``k`` turns spread evenly: turn ``round(i n / k)`` for i < k (distinct, since n/k >= 1)."""

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        n = len(turns)
        return sorted({min(n - 1, round(i * n / k)) for i in range(k)})


@dataclass
class FirstUserPlusRecent(TurnSelector):
    """The first USER turn and the latest ``k - 1`` other turns (§5, the matched P3 baseline)."""

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        first = next((t.index for t in turns if t.speaker == "user"), 0)
        others = [t.index for t in turns if t.index != first]
        return sorted([first, *others[len(others) - (k - 1) :]] if k > 1 else [first])
