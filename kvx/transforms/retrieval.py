"""Passage retrieval inside the candidate pool: BM25 (ragscale's lexical text compressor, via
``bm25s``) and dense (all-MiniLM-L6-v2 cosine similarity) top-k.

The pool is the source's ``passage`` segments; the query is the question. Passages are ranked over
the pool itself, so the ranking depends on nothing but the row. Ties keep the supplied order; kept
passages stay in supplied order unless ``order=rank``. Non-passage segments (instructions) are
always kept. With ``k`` at least the pool size and ``order=rank`` nothing is dropped: swapping
``bm25_top_k`` for ``dense_top_k`` is then the retriever-swap control, a non-compressing change
of the evidence (its order only) audited like any compressor.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from kvx.core.checks import check_choice, check_int
from kvx.core.errors import Unsupported
from kvx.core.ranking import bm25_scores, top_k
from kvx.core.source import Segment, Source
from kvx.modeling.embeddings import MINILM, check_encoder
from kvx.transforms.base import Transform, query


@dataclass
class TopPassages(Transform):
    """The ``k`` passages a ranker scores highest for the question."""

    k: int = 5
    order: str = "supplied"  # "supplied": kept passages in pool order; "rank": best first

    def validate(self) -> None:
        check_int("transform.k", self.k, 1)
        check_choice("transform.order", self.order, ("supplied", "rank"))

    @abstractmethod
    def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage (title line and text)."""

    def apply(self, source: Source) -> Sequence[Segment]:
        parts = source.parts()
        pool = [s for s in parts if s.role == "passage"]
        if not pool:
            raise Unsupported(f"source {source.id} has no passage segments to rank")
        ranked = top_k(self.scores(query(source), [f"{s.title}\n{s.text}" for s in pool]), self.k)
        kept = [pool[i] for i in (ranked if self.order == "rank" else sorted(ranked))]
        rest = [s for s in parts if s.role != "passage"]
        if self.order == "rank":
            return rest + kept
        keep = {s.id for s in kept}
        return [s for s in parts if s.role != "passage" or s.id in keep]


@dataclass
class BM25TopK(TopPassages):
    """``transform=bm25_top_k transform.k=5``: BM25 (Lucene variant, English stopwords)."""

    def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        return bm25_scores(query, passages)


@dataclass
class DenseTopK(TopPassages):
    """``transform=dense_top_k transform.k=5``: cosine similarity of sentence embeddings."""

    model: str = MINILM

    def validate(self) -> None:
        super().validate()
        check_encoder("transform.model", self.model)

    def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        from kvx.transforms.extractive import similarities

        return similarities(query, passages, self.model)
