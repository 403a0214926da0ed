"""``turn_selector=none`` (the default): no turn selection; ``transform`` decides the text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kvx.turn_selectors.base import Turn, TurnSelector


@dataclass
class NoSelection(TurnSelector):
    identity: ClassVar[bool] = True

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return list(range(len(turns)))
