"""FullCache controls are stored by what determines them (source, prompt, task, reader, decoding
budget), not by the split that drew the source: a larger or overlapping split reuses them, and a store
written when controls were keyed by their split is still read."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kvx.compressors.presets import TOVA
from kvx.core.records import as_dicts
from kvx.pipeline.cell import Cell
from kvx.pipeline.encode import prompt_hash
from kvx.pipeline.engine import Engine
from kvx.stores.controls import answer_key, split_key
from kvx.tasks.jsonl import JsonlTask, seeded_order
from kvx.tasks.ruler import NiahSingle
from kvx.testing.records import unmeasured
from kvx.transforms.base import Transform

READER = {"name": "tiny", "fields": {"seed": 0}, "revision": "random-seed-0"}
#: the 3 controls of ``cell()`` (reader: the ``tiny`` fixture) as the kvx before controls were keyed by
#: content stored them: ``Engine(outputs).run_cell(cell(), tiny)`` with that kvx (commit 15d562e)
SPLIT_KEYED = Path(__file__).parents[1] / "fixtures" / "controls-split-keyed"


def cell(**kw) -> Cell:
    base = dict(
        task_name="ruler_niah_single",
        task=NiahSingle(),
        reader_name="tiny",
        press_name="tova",
        compressor=TOVA(),
        ratio=0.5,
        seed=0,
        n_sources=3,
        context_tokens=300,
        max_new_tokens=4,
    )
    return Cell(**{**base, **kw})


class Rescored(NiahSingle):
    scorer_version: ClassVar[str] = "2"


def test_one_answer_setting_is_one_control_key_and_another_is_another():
    def key(**kw) -> str:
        reader = kw.pop("reader", READER)
        return answer_key(cell(**kw).identity(reader), "p" * 64, "s" * 64)

    base = key()
    # only which sources are drawn (and how long they are, which their digest holds): one control
    for same in ({"n_sources": 20}, {"seed": 1}, {"context_tokens": 800}, {"ratio": 0.25}):
        assert key(**same) == base, same
    others = {
        "decoding budget": key(max_new_tokens=8),
        "scorer version": key(task=Rescored()),
        "task field": key(task=NiahSingle(num_needle_v=2)),
        "reader": key(reader={**READER, "fields": {"seed": 1}}),
        "precision": key(reader={**READER, "fields": {"seed": 0, "precision": "bf16-true"}}),
        "revision": key(reader={**READER, "revision": "other"}),
    }
    assert base not in others.values() and len(set(others.values())) == len(others), others
    identity = cell().identity(READER)
    assert answer_key(identity, "q" * 64, "s" * 64) != base != answer_key(identity, "p" * 64, "t" * 64)


def test_the_old_split_key_is_the_one_kvx_stored_controls_under():
    """Computed with the kvx before this change: ``content_key(split=identity.split, prompt=p, source=s)``."""
    old = "3330d7949816bcaaf2d605922a83e92c236ead8717bbb5dde84e81fffe9c0ec5"
    assert split_key(cell().identity(READER), "p" * 64, "s" * 64) == old


def test_growing_a_finished_study_computes_only_the_new_sources(tiny, tmp_path):
    """RULER's sampling is prefix-stable: the 10 sources of n_sources=10 are the first 10 of 20."""
    first = Engine(tmp_path, 2**28)
    ten = as_dicts(first.run_cells([cell(n_sources=10)], tiny, progress=False)[0])
    grown = Engine(tmp_path, 2**28)  # a later process on the same outputs
    twenty = as_dicts(grown.run_cells([cell(n_sources=20)], tiny, progress=False)[0])
    assert first.controls.computed == 10
    assert grown.controls.computed == 10 and grown.controls.loaded == 10
    assert len(list((tmp_path / "controls").rglob("*.json"))) == 20
    assert [r["source_id"] for r in twenty[:10]] == [r["source_id"] for r in ten]
    assert [unmeasured(r)["full"] for r in twenty[:10]] == [unmeasured(r)["full"] for r in ten]
    # records keep the split they were drawn in: the aggregate pairs and validates by it
    assert {r["split"] for r in ten} != {r["split"] for r in twenty}


@dataclass
class CountingKeepFirst(Transform):
    """Keeps the first two segments and counts the rows it is asked to transform."""

    calls: ClassVar[int] = 0

    def apply(self, source):
        CountingKeepFirst.calls += 1
        return source.parts()[:2]


def test_an_overlapping_split_reuses_its_shared_controls_and_artifacts(tiny, tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"segments": [f"Row {i} opens.", f"The code of row {i} is {i * 7}.", "Nothing else."],
         "question": f"What is the code of row {i}?", "answers": [str(i * 7)]}
        for i in range(8)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert set(seeded_order(8, 4, 0)) & set(seeded_order(8, 4, 1)) == {1, 5}  # two rows in both draws

    def jsonl(seed: int) -> Cell:
        task = JsonlTask(path=str(path), segments_field="segments")
        return cell(task_name="jsonl", task=task, seed=seed, n_sources=4, transform_name="keep_first",
                    transform=CountingKeepFirst())  # fmt: skip

    CountingKeepFirst.calls = 0
    first = Engine(tmp_path / "outputs", 2**28)
    a = as_dicts(first.run_cells([jsonl(0)], tiny, progress=False)[0])
    second = Engine(tmp_path / "outputs", 2**28)
    b = as_dicts(second.run_cells([jsonl(1)], tiny, progress=False)[0])
    assert first.controls.computed == 4 and second.controls.computed == 2 and second.controls.loaded == 2
    assert CountingKeepFirst.calls == 6  # the transform's artifacts are shared the same way
    shared = {r["source_id"]: unmeasured(r)["full"] for r in a}
    both = [r for r in b if r["source_id"] in shared]
    assert [r["source_id"] for r in both] == ["rows_000001", "rows_000005"]
    assert all(unmeasured(r)["full"] == shared[r["source_id"]] for r in both)


def test_a_store_keyed_by_split_is_read_and_keyed_anew(tiny, tmp_path):
    """Controls stored under their split's key are found there, stored under the new key (loaded, not
    computed) and left where they were."""
    shutil.copytree(SPLIT_KEYED, tmp_path / "controls")
    old = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "controls").rglob("*.json")}
    engine = Engine(tmp_path, 2**28)
    records = as_dicts(engine.run_cells([cell(ratio=0.25)], tiny, progress=False)[0])
    assert engine.controls.computed == 0 and engine.controls.loaded == 3
    identity = cell().identity(tiny.identity)
    sources = engine.sources(cell(), tiny)
    for record, source in zip(records, sources):
        rendered = prompt_hash(tiny.render(source))
        new, before = (
            answer_key(identity, rendered, source.digest()),
            split_key(identity, rendered, source.digest()),
        )
        assert record["full"] == old[before]  # the stored answer as it was, costs included
        assert json.loads(engine.controls.path(new).read_text()) == old[before]
        assert engine.controls.path(before).is_file()  # an older kvx still finds it
    # from now on the store is keyed by content: a larger split computes only its new source
    grown = Engine(tmp_path, 2**28)
    grown.run_cells([cell(n_sources=4)], tiny, progress=False)[0]
    assert grown.controls.computed == 1 and grown.controls.loaded == 3


def test_a_ledger_whose_answer_holds_u2028_is_supplemented(blank_store, tmp_path):
    """A later cell's extra control is added to a ledger whose stored answer holds U+2028: its lines end
    at \\n only (``splitlines`` cut the answer's line in two, and the cell failed on invalid JSON)."""
    from mlflow.tracking import MlflowClient

    from kvx.cli.app import _supplement_controls
    from kvx.core.records import dumps

    blank_store(tmp_path)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    exp = client.create_experiment("kvx", artifact_location=str(tmp_path / "mlruns" / "kvx"))
    stored, later = {"source_id": "s0", "output": "one\u2028two"}, {"source_id": "s1", "output": "three"}
    run = client.create_run(exp).info.run_id
    client.log_metric(run, "n_sources", 1)
    client.log_text(run, dumps([stored]), "controls.jsonl")
    _supplement_controls(client, exp, "split", None, "ledger", [stored, later], [client.get_run(run)])
    (added,) = [r for r in client.search_runs([exp]) if r.info.run_id != run]
    path = client.download_artifacts(added.info.run_id, "controls.jsonl", str(tmp_path))
    assert [json.loads(line) for line in Path(path).read_text(encoding="utf-8").split("\n") if line] == [
        later
    ]
