"""Fixed text artifacts: each (row, transform config) output is computed once, stored with a manifest,
and replayed byte-identically to every reader of a panel and to later processes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from kvx.compressors.none import NoCompression
from kvx.modeling.reader import load_reader
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.tiny import TinyLlama
from kvx.tasks.tpbench.task import CurrentValue
from kvx.transforms.base import Transform


@dataclass
class CountingKeepFirst(Transform):
    """Keeps the first ``n`` segments and counts how often it is asked to."""

    n: int = 3
    calls: ClassVar[int] = 0

    def apply(self, source):
        CountingKeepFirst.calls += 1
        return source.parts()[: self.n]


def cell(transform: Transform) -> Cell:
    return Cell(
        task_name="tpbench_p2", task=CurrentValue(synthetic_dialogues=20), reader_name="tiny",
        press_name="none", compressor=NoCompression(), ratio=0.0, seed=0, n_sources=3,
        context_tokens=1024, max_new_tokens=2, transform_name="keep_first", transform=transform,
    )  # fmt: skip


def test_artifacts_are_computed_once_per_row_across_a_reader_panel(tmp_path, tiny):
    other = load_reader("tiny", TinyLlama(num_hidden_layers=3, seed=1))
    engine = Engine(tmp_path / "outputs", 2**28)
    CountingKeepFirst.calls = 0
    runs = {
        r.name + r.key: engine.run_cells([cell(CountingKeepFirst())], r, progress=False)[0]
        for r in (tiny, other)
    }
    n_rows = len(next(iter(runs.values())))
    assert n_rows and CountingKeepFirst.calls == n_rows  # once per row, not once per reader
    first, second = runs.values()
    assert [r.compressed_text_sha256 for r in first] == [r.compressed_text_sha256 for r in second]
    # a later process (a fresh engine on the same outputs) replays them without computing
    Engine(tmp_path / "outputs", 2**28).run_cells([cell(CountingKeepFirst())], tiny, progress=False)[0]
    assert CountingKeepFirst.calls == n_rows
    # another config of the transform is another artifact
    engine.run_cells([cell(CountingKeepFirst(n=2))], tiny, progress=False)[0]
    assert CountingKeepFirst.calls == 2 * n_rows
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "artifacts").rglob("*.json")]
    assert len(manifests) == 2 * n_rows
    by_text = {m["text_sha256"] for m in manifests}
    assert {r.compressed_text_sha256 for r in first} <= by_text
    assert all({"row_id", "pool_sha256", "transform", "versions", "segments"} <= m.keys() for m in manifests)


def test_reader_dependent_selections_are_kept_per_reader():
    from kvx.transforms.turns import selection
    from kvx.turn_selectors.attention_proxy import AttentionProxy
    from kvx.turn_selectors.positional import Recency

    assert selection("attention_proxy", AttentionProxy(), 0.3, True).uses_reader
    assert not selection(
        "attention_proxy", AttentionProxy(model="/some/feature/model"), 0.3, True
    ).uses_reader
    assert not selection("recency", Recency(), 0.3, True).uses_reader


def test_an_edited_artifact_is_refused_not_replayed(tmp_path, tiny):
    engine = Engine(tmp_path / "outputs", 2**28)
    engine.run_cells([cell(CountingKeepFirst())], tiny, progress=False)[0]
    path = next((tmp_path / "outputs" / "artifacts").rglob("*.json"))
    manifest = json.loads(path.read_text())
    manifest["segments"][-1]["text"] += " (edited)"
    path.write_text(json.dumps(manifest))
    records = Engine(tmp_path / "outputs", 2**28).run_cells(
        [cell(CountingKeepFirst())], tiny, progress=False
    )[0]
    refused = [r for r in records if r.status == "error"]
    assert len(refused) == 1 and "fails its sha256 check" in refused[0].reason
    assert all(r.status == "supported" for r in records if r not in refused)


def test_readers_that_measure_the_prompt_differently_share_one_artifact_per_row(tmp_path, tiny):
    """RAG tasks record the prompt's length in the reader's tokens; the artifact key must not see it."""
    from kvx.tasks.rag import RagJsonl

    rows = [
        {
            "id": f"q{i}",
            "question": f"Who is {i}?",
            "answers": [f"n{i}"],
            "candidates": [
                {"id": f"p{j}", "title": f"T{j}", "text": f"Passage {j} of row {i}."} for j in range(4)
            ],
        }
        for i in range(3)
    ]
    path = tmp_path / "pools.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = load_reader("tiny", TinyLlama(num_hidden_layers=3, seed=1))
    other.count_tokens = lambda text: len(text) // 3  # another tokenizer: other prompt_tokens
    engine = Engine(tmp_path / "outputs", 2**28)
    CountingKeepFirst.calls = 0
    hashes = []
    for reader in (tiny, other):
        task_cell = dataclasses.replace(
            cell(CountingKeepFirst()), task_name="rag_jsonl", task=RagJsonl(path=str(path))
        )
        records = engine.run_cells([task_cell], reader, progress=False)[0]
        hashes.append([r.compressed_text_sha256 for r in records])
    prompt_tokens = [
        {s.metadata["prompt_tokens"] for s in engine.sources(task_cell, r)} for r in (tiny, other)
    ]
    assert prompt_tokens[0] != prompt_tokens[1]  # the sources' digests differ ...
    assert CountingKeepFirst.calls == 3 and hashes[0] == hashes[1]  # ... the artifacts do not
