"""Top-k by score with a stable tie rule, shared by every selector that ranks (passages, sentences,
dialogue turns): ties keep the earlier item, so a ranking never depends on sort internals."""

from __future__ import annotations

from collections.abc import Sequence


def top_k(scores: Sequence[float], k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first; ties keep the earlier index."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
