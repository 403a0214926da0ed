"""LongestTurns: a turn-selector plugin that keeps the dialogue's wordiest turns."""

from dataclasses import dataclass

from kvx.turn_selectors.base import TurnSelector


@dataclass
class LongestTurns(TurnSelector):
    """Keep the ``k`` turns with the most words (ties: the later turn), a content-free baseline."""

    rounding = "floor"  # content selectors keep max(1, floor(n r)) turns, as TPBench's do

    def select(self, turns, k, dialogue_id):
        ranked = sorted(turns, key=lambda t: (len(t.text.split()), t.index), reverse=True)
        return [t.index for t in ranked[:k]]
