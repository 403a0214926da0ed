"""ragscale's NQ-Open "RECOMP with raw fallback": when RECOMP keeps nothing the reader gets the raw
input, computed by hand on a three-passage miniature with fixed sentence scores (no model loads)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvx.core.errors import Unsupported
from kvx.core.identity import component, fields_of
from kvx.core.source import Segment, Source
from kvx.pipeline.transform import transform_source
from kvx.transforms.recomp import EXTRACTIVE, RecompAbstractive, RecompExtractive

POOL = [
    Segment("preamble", "Answer the question based on the given documents.", role="instruction"),
    Segment("d1", "Document 1:\nFrance\nParis is in France. It is big.", "passage", "France"),
    Segment("d2", "Document 2:\nBanana\nBananas are yellow.", "passage", "Banana"),
    Segment("d3", "Document 3:\nGermany\nBerlin is in Germany.", "passage", "Germany"),
]
#: the scores a RECOMP encoder would give each sentence, by hand
SCORES = {
    "Paris is in France.": 0.4,
    "It is big.": 0.1,
    "Bananas are yellow.": 0.2,
    "Berlin is in Germany.": 0.9,
}


@dataclass
class Fixed(RecompExtractive):
    """RECOMP extractive with the hand-set scores above in place of the checkpoint's."""

    def scores(self, question: str, texts: list[str]) -> list[float]:
        return [SCORES[t] for t in texts]


def source(pool: list[Segment] = POOL) -> Source:
    return Source.from_segments(pool, id="q", question="Where is Berlin?", answers=["Germany"])


def test_min_score_keeps_only_the_best_sentences_that_reach_it():
    # k = 2 best: Berlin (0.9), Paris (0.4); min_score 0.5 drops Paris; supplied order
    out = Fixed(k=2, top_passages=0, min_score=0.5).apply(source())
    assert [s.id for s in out] == ["preamble", "recomp"] and out[1].text == "Berlin is in Germany."
    both = Fixed(k=2, top_passages=0).apply(source())[1].text
    assert both == "Paris is in France. Berlin is in Germany."


def test_nothing_kept_is_an_empty_passage_or_with_the_fallback_the_raw_input():
    empty = Fixed(k=2, top_passages=0, min_score=1.0).apply(source())  # no sentence reaches 1.0
    assert list(empty) == [POOL[0], Segment("recomp", "", "passage", "RECOMP")]
    fallback = Fixed(k=2, top_passages=0, min_score=1.0, raw_fallback=True)
    assert list(fallback.apply(source())) == POOL  # every raw passage, unchanged, in supplied order
    # a row RECOMP compresses is compressed as without the fallback
    kept = Fixed(k=2, top_passages=0, min_score=0.5, raw_fallback=True).apply(source())
    assert kept == Fixed(k=2, top_passages=0, min_score=0.5).apply(source())


def test_the_fallback_passes_the_raw_evidence_through():
    answer = source().context.index("Berlin is in Germany.")
    with_evidence = Source.from_segments(
        POOL, id="q", question="Where is Berlin?", answers=["Germany"], evidence=[(answer, answer + 6)]
    )
    out = transform_source(
        Fixed(k=1, top_passages=0, min_score=1.0, raw_fallback=True), "recomp", with_evidence
    )
    assert out is not None and out.source.context == with_evidence.context
    assert out.info["kept_segment_ids"] == ["preamble", "d1", "d2", "d3"]  # how a record shows a fallback
    assert out.info["evidence_kept"] == out.info["evidence_total"] == 1


def test_a_pool_without_sentences_falls_back_or_is_unsupported():
    blank = [POOL[0], Segment("d1", "Document 1:\nEmpty\n", "passage", "Empty")]
    with pytest.raises(Unsupported, match="no sentences"):
        Fixed(top_passages=0).apply(source(blank))
    assert list(Fixed(top_passages=0, raw_fallback=True).apply(source(blank))) == blank


def test_an_empty_abstractive_summary_falls_back(monkeypatch):
    from kvx.transforms import recomp

    class Tokenizer:
        def __call__(self, *args, **kwargs):
            return {}

        def decode(self, *args, **kwargs):
            return "  "  # RECOMP's selective augmentation: nothing to add

    class Model:
        def generate(self, **kwargs):
            return [[0]]

    monkeypatch.setattr(recomp, "hub_model", lambda *args: (Tokenizer(), Model()))
    assert RecompAbstractive(top_passages=0).apply(source())[1].text == ""
    assert list(RecompAbstractive(top_passages=0, raw_fallback=True).apply(source())) == POOL


def test_unset_options_leave_the_identity_as_it_was():
    before = {"name": "recomp_extractive", "fields": {"k": 2, "top_passages": 5, "model": EXTRACTIVE}}
    ids = {  # the transform part of a cell's identity (``Cell.identity``)
        flag: component("recomp_extractive", t, **t.fingerprint())
        for flag, t in ((False, RecompExtractive()), (True, RecompExtractive(raw_fallback=True)))
    }
    assert ids[False] == before and ids[True] == {
        **before,
        "fields": {**before["fields"], "raw_fallback": True},
    }
    assert set(fields_of(RecompExtractive())) == {"k", "top_passages", "model"}
    assert set(fields_of(RecompAbstractive())) == {"top_passages", "max_new_tokens", "model"}
    assert fields_of(RecompExtractive(raw_fallback=True))["raw_fallback"] is True
    assert fields_of(RecompExtractive(min_score=0.5))["min_score"] == 0.5
    assert fields_of(RecompAbstractive(raw_fallback=True))["raw_fallback"] is True
