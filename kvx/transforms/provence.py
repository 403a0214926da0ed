"""Provence (Chirkova et al., 2025): query-aware context pruning by a DeBERTa reranker-pruner, for
users with a model hub.

Each passage is pruned by the model's own ``process(question, passage)`` (its hub repository ships
that code, so ``transform.trust_remote_code=true`` must allow it); passages pruned to nothing are
dropped, the rest kept in supplied order. Offline every row is ``Unsupported``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kvx.core.checks import check_number
from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.modeling.hub import check_model, hub_model
from kvx.transforms.base import Transform, query
from kvx.transforms.extractive import rewrite_passages

MODEL = "naver/provence-reranker-debertav3-v1"


def _load(model: str, trust_remote_code: bool) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(model, trust_remote_code=trust_remote_code).eval()


@dataclass
class Provence(Transform):
    """``transform=provence transform.trust_remote_code=true transform.threshold=0.1``."""

    threshold: float = 0.1
    model: str = MODEL
    trust_remote_code: bool = False

    def validate(self) -> None:
        check_number("transform.threshold", self.threshold, 0.0, 1.0)
        check_model("transform.model", self.model)
        if self.trust_remote_code is not True:
            raise ConfigError(
                "transform=provence runs the pruning code shipped in the model's repository: "
                "set transform.trust_remote_code=true to allow it"
            )

    def apply(self, source: Source) -> Sequence[Segment]:
        question = query(source)
        load = partial(_load, trust_remote_code=self.trust_remote_code)

        def prune(_: Segment, body: str) -> str:
            # the model loads at the first passage, never for a passage-free row
            out = hub_model("Provence", self.model, load).process(
                question, body, threshold=self.threshold, always_select_title=False
            )
            return str(out["pruned_context"])

        return rewrite_passages(source, prune)
