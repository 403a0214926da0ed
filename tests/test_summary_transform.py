"""The abstractive summary transform: one summary per row by a designated compressor reader."""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError
from kvx.core.registry import RegistryError
from kvx.core.source import Segment, Source
from kvx.transforms.summary import Summary

POOL = [
    Segment("preamble", "Answer from the documents.", role="instruction"),
    Segment("d1", "Document 1:\nFrance\nParis is the capital of France.", role="passage", title="France"),
    Segment("d2", "Document 2:\nGermany\nBerlin is the capital of Germany.", role="passage", title="Germany"),
]
SOURCE = Source.from_segments(POOL, id="q", question="Capital of Germany?", answers=["Berlin"])


def test_one_summary_replaces_the_pool_within_the_token_budget(monkeypatch):
    from kvx.modeling import generation

    lengths = []
    original = generation.greedy_decode

    def recording(*args):
        gen = original(*args)
        lengths.append(len(gen.token_ids))
        return gen

    monkeypatch.setattr(generation, "greedy_decode", recording)
    out = Summary(reader="tiny", max_new_tokens=6).apply(SOURCE)
    assert [s.id for s in out] == ["preamble", "summary"] and out[1].role == "passage"
    assert lengths == [6] and out[1].text  # the random tiny reader never stops early: exactly the budget
    assert Summary(reader="tiny", max_new_tokens=6).apply(SOURCE)[1].text == out[1].text  # deterministic


def test_bad_fields():
    with pytest.raises(RegistryError, match="Did you mean 'smollm2'"):
        Summary(reader="smolm2").validate()
    with pytest.raises(ValueError, match="transform.max_new_tokens"):
        Summary(max_new_tokens=0).validate()


def test_a_served_compressor_is_checked_before_anything_loads_and_keeps_old_identities() -> None:
    from kvx.core.identity import fields_of

    assert "reader_fields" not in fields_of(Summary(reader="tiny"))  # summary cells keep their ids
    fields = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    assert fields_of(Summary(reader="openai", reader_fields=fields))["reader_fields"] == fields
    with pytest.raises(ConfigError, match="nothing answers at http://127.0.0.1:9/v1"):
        Summary(reader="openai", reader_fields=fields).validate()
    with pytest.raises(ConfigError, match="transform.reader_fields=.*unexpected keyword argument 'modle'"):
        Summary(reader="openai", reader_fields={"modle": "m"}).validate()
