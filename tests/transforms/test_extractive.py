"""Extractive sentence selection with MiniLM: deterministic, k sentences kept, supplied order."""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.transforms.extractive import ExtractiveSentences, sentences

POOL = [
    Segment("preamble", "Answer from the documents.", role="instruction"),
    Segment(
        "doc1",
        "Document 1:\nFrance\nParis is the capital of France. It has many museums.",
        "passage",
        "France",
    ),
    Segment("doc2", "Document 2:\nBanana\nBananas are yellow. Monkeys eat them.", "passage", "Banana"),
    Segment(
        "doc3", "Document 3:\nGermany\nBerlin is the capital of Germany. It is large.", "passage", "Germany"
    ),
]
SOURCE = Source.from_segments(POOL, id="q", question="What is the capital of Germany?", answers=["Berlin"])


def test_regex_sentences():
    assert sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert sentences("") == []


def test_keeps_the_k_closest_sentences_in_supplied_order():
    out = ExtractiveSentences(k=2).apply(SOURCE)
    texts = {s.id: s.text for s in out}
    assert list(texts) == ["preamble", "doc1", "doc3"]  # the banana passage lost every sentence
    kept = [t for s in out if s.role == "passage" for t in sentences(s.text.split("\n", 2)[2])]
    assert kept == ["Paris is the capital of France.", "Berlin is the capital of Germany."]
    assert texts["doc3"].startswith("Document 3:\nGermany\n")  # the title line stays with its sentences
    assert [s.text for s in ExtractiveSentences(k=2).apply(SOURCE)] == [s.text for s in out]  # deterministic
    assert (
        sum(len(sentences(s.text.split("\n", 2)[2])) for s in ExtractiveSentences(k=4).apply(SOURCE)[1:]) == 4
    )


def test_bad_fields():
    with pytest.raises(ConfigError, match="transform.k"):
        ExtractiveSentences(k=0).validate()
    with pytest.raises(ConfigError, match="transform.model"):
        ExtractiveSentences(model="").validate()
