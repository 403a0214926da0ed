"""Passage retrieval in the pool (BM25 and dense top-k): deterministic, budget respected, ties keep
the supplied order; at k >= pool with order=rank, the retriever-swap control drops nothing."""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError, Unsupported
from kvx.core.ranking import top_k
from kvx.core.source import Segment, Source
from kvx.transforms.retrieval import BM25TopK, DenseTopK, bm25_scores

POOL = [
    Segment("preamble", "Answer from the documents.", role="instruction"),
    Segment("d1", "Paris is the capital of France.", role="passage", title="France"),
    Segment("d2", "Bananas are yellow fruit.", role="passage", title="Banana"),
    Segment("d3", "Berlin is the capital of Germany.", role="passage", title="Germany"),
    Segment("d4", "Apples grow on trees.", role="passage", title="Apple"),
]


def source(question: str) -> Source:
    return Source.from_segments(POOL, id="q", question=question, answers=["x"])


def test_top_k_ties_keep_the_supplied_order():
    assert top_k([0.0, 2.0, 2.0, 1.0], 2) == [1, 2]
    assert top_k([0.0, 0.0, 0.0], 2) == [0, 1]


def test_bm25_ranks_the_matching_passage_first():
    scores = bm25_scores("What is the capital of Germany?", [s.text for s in POOL[1:]])
    assert top_k(scores, 1) == [2] and scores[1] == scores[3] == 0.0
    assert scores == bm25_scores("What is the capital of Germany?", [s.text for s in POOL[1:]])


def test_transform_keeps_k_passages_and_the_instruction():
    kept = [s.id for s in BM25TopK(k=2).apply(source("capital of Germany"))]
    assert kept == ["preamble", "d1", "d3"]  # supplied order
    assert [s.id for s in BM25TopK(k=2, order="rank").apply(source("capital of Germany"))] == [
        "preamble",
        "d3",
        "d1",
    ]
    # no query word in any passage: every score ties, the first k in supplied order
    assert [s.id for s in BM25TopK(k=2).apply(source("zebra xylophone"))] == ["preamble", "d1", "d2"]
    assert len(BM25TopK(k=10).apply(source("capital"))) == len(POOL)  # a budget over the pool keeps all


def test_bad_fields_and_passage_free_sources():
    with pytest.raises(ConfigError, match="transform.k"):
        BM25TopK(k=0).validate()
    with pytest.raises(ConfigError, match="transform.order"):
        BM25TopK(order="random").validate()
    with pytest.raises(Unsupported):
        BM25TopK().apply(Source(id="s", context="plain", question="q", answers=["a"]))


def test_dense_ranks_by_meaning_and_keeps_the_budget():
    dense = DenseTopK(k=1)
    dense.validate()
    assert [s.id for s in dense.apply(source("Which city governs the German state?"))] == ["preamble", "d3"]
    assert [s.id for s in dense.apply(source("a yellow tropical fruit"))] == ["preamble", "d2"]
    two = DenseTopK(k=2).apply(source("Which European capital?"))
    assert len(two) == 3 and DenseTopK(k=2).apply(source("Which European capital?")) == two
    with pytest.raises(ConfigError, match="transform.model"):
        DenseTopK(model="").validate()


def test_retriever_swap_reorders_the_whole_pool_and_drops_nothing():
    q = source("Which fruit is yellow?")
    for ranker in (BM25TopK(k=10, order="rank"), DenseTopK(k=10, order="rank")):
        out = ranker.apply(q)
        assert sorted(s.id for s in out) == sorted(s.id for s in POOL)  # same evidence
        assert [s.id for s in out][:2] == ["preamble", "d2"]  # best passage first
        assert {s.text for s in out} == {s.text for s in POOL}  # texts untouched
