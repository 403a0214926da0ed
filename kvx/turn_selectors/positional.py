"""TPBench's position-only turn selectors (§5): they read turn positions and speakers, not text.

Each keeps ``k = max(1, round(n r))`` turns (``TurnSelector.budget``) and returns indices; the
``TurnSelection`` transform renders the kept turns in dialogue order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

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
    probe, probe seed and cell (the paper's fixed ``random_seed42``).

    ``random.Random(dialogue_seed(seed, id)).sample(range(n), k)``, as the release draws them: for
    the release's id strings (``v20_sgd_18_00112__qa_00``, which the transform reads from a source's
    ``release_id``) the default seed 42 keeps exactly the turns of its saved contexts."""

    #: 2: the release's hash and draw (revision 1 hashed ``f"{seed}:{id}"``, 64-bit seeds)
    revision: ClassVar[int] = 2

    seed: int = 42

    def validate(self) -> None:
        check_int("turn_selector.seed", self.seed)

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        n = len(turns)
        return sorted(random.Random(dialogue_seed(self.seed, dialogue_id)).sample(range(n), min(k, n)))


@dataclass
class UniformStride(TurnSelector):
    """``k`` turns spread evenly: turn ``round(i * (n / k))`` for i < k (distinct, since n/k >= 1).

    The release's rule (``scripts/builders/construction.py``) to the bit: the float step ``n / k``
    times ``i``, rounded half to even. The product is not always the exact ``i n / k``: at n = 29,
    k = 14, i = 7 it is 14.500000000000002, so turn 15 is kept where the exact 14.5 would keep 14."""

    #: 2: the float step (revision 1 rounded the exact ``i * n / k``; 12 (n, k) pairs up to 60 differ)
    revision: ClassVar[int] = 2

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        n = len(turns)
        if k >= n:
            return list(range(n))
        step = n / k
        return sorted({min(n - 1, round(i * step)) for i in range(k)})


@dataclass
class FirstUserPlusRecent(TurnSelector):
    """The first USER turn and the latest ``k - 1`` other turns (§5, the matched P3 baseline)."""

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        first = next((t.index for t in turns if t.speaker == "user"), 0)
        others = [t.index for t in turns if t.index != first]
        return sorted([first, *others[len(others) - (k - 1) :]] if k > 1 else [first])
