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


def test_draws_are_fresh_seeded_summaries_and_draw_0_keeps_its_identity() -> None:
    """ragscale B.6: repeated summary artifacts of one compressor; draw K samples with seed K."""
    from kvx.core.identity import fields_of

    assert "draw" not in fields_of(Summary(reader="tiny")) and "draw_temperature" not in fields_of(Summary())
    assert fields_of(Summary(reader="tiny", draw=2))["draw"] == 2  # another cell, another artifact
    texts = {k: Summary(reader="tiny", max_new_tokens=6, draw=k).apply(SOURCE)[1].text for k in (0, 1, 2)}
    assert texts[1] == Summary(reader="tiny", max_new_tokens=6, draw=1).apply(SOURCE)[1].text  # seeded
    assert len(set(texts.values())) == 3  # the random tiny reader's samples differ from its greedy text
    with pytest.raises(ValueError, match="transform.draw=-1"):
        Summary(draw=-1).validate()
    with pytest.raises(ValueError, match="transform.draw_temperature=0"):
        Summary(draw_temperature=0).validate()


def test_a_served_draw_asks_with_its_seed_and_temperature() -> None:
    from kvx.modeling.chat import ChatReply

    asked = []

    class Endpoint:
        def complete(self, requests, progress=False):
            asked.extend(requests)
            return [ChatReply(text=" s ", stop_reason="eos") for _ in requests]

    for draw in (0, 3):
        summary = Summary(reader="openai", draw=draw, draw_temperature=0.7)
        summary._loaded = Endpoint()
        assert summary.summarize("docs", "q?") == "s"
    assert asked[0].options == () and dict(asked[1].options) == {"temperature": "0.7", "seed": "3"}


def test_each_draw_is_stored_apart_for_every_row(tmp_path, tiny) -> None:
    """transform.draw=0,1 in a sweep: two artifacts per row, each replayed to its own cells."""
    import json

    from kvx.compressors.none import NoCompression
    from kvx.pipeline.cell import Cell
    from kvx.pipeline.engine import Engine
    from kvx.tasks.rag import RagJsonl

    rows = [
        {"id": f"q{i}", "question": f"Who is {i}?", "answers": [f"n{i}"],
         "candidates": [{"id": "p", "title": "T", "text": f"Passage of row {i}."}]}
        for i in range(2)
    ]  # fmt: skip
    path = tmp_path / "pools.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def cell(draw: int) -> Cell:
        return Cell(
            task_name="rag_jsonl", task=RagJsonl(path=str(path)), reader_name="tiny", press_name="none",
            compressor=NoCompression(), ratio=0.0, seed=0, n_sources=2, context_tokens=1024,
            max_new_tokens=2, transform_name="summary",
            transform=Summary(reader="tiny", max_new_tokens=4, draw=draw),
        )  # fmt: skip

    runs = Engine(tmp_path / "outputs", 2**28).run_cells([cell(0), cell(1)], tiny, progress=False)
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "artifacts").rglob("*.json")]
    assert len(manifests) == 4 and {m["transform"]["fields"].get("draw", 0) for m in manifests} == {0, 1}
    for records in runs:
        assert all(r.status == "supported" for r in records)
    hashes = [{r.source_id: r.compressed_text_sha256 for r in records} for records in runs]
    assert hashes[0].keys() == hashes[1].keys() and all(hashes[0][k] != hashes[1][k] for k in hashes[0])
