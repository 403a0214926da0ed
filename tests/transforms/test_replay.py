"""transform=replay: compressed texts made elsewhere (kvx's JSONL, ragscale's artifact manifest), verified
before any model loads and replayed byte-identically to every reader through the artifact store."""

from __future__ import annotations

import hashlib
import json

import pytest

from kvx.core.errors import ConfigError, Unsupported
from kvx.core.source import Segment, Source
from kvx.transforms.replay import Replay, read_entries, row_keys, text_sha256

HAND = "[Übung] Paris is the capital.\n\n[B] Berlin."
#: ragscale's release, examples/openrouter-hotpotqa/audit/artifact_manifest.jsonl, row hpqa-0000
RELEASE_TEXT = (
    "[Adriana Trigiani] Adriana Trigiani is an Italian American best-selling author of sixteen books, "
    "television writer, film director, and entrepreneur based in Greenwich Village, New York City.  "
    "Trigiani has published a novel a year since 2000.\n\n[Big Stone Gap (film)] Big Stone Gap is a 2014 "
    "American drama romantic comedy film written and directed by Adriana Trigiani and produced by Donna "
    "Gigliotti for Altar Identity Studios, a subsidiary of Media Society.  Based on Trigiani's 2000 "
    "best-selling novel of the same name, the story is set in the actual Virginia town of Big Stone Gap "
    "circa 1970s.  The film had its world premiere at the Virginia Film Festival on November 6, 2014."
)
RELEASE_HASH = "sha256:6819230f95ae4f66e3fcd5485795b61c0dacb219cb6ad6be5855dd2d93ed4121"


def ragscale_line(example_id: str, text: str | None, **extra) -> dict:
    """A line as ragscale.execute.compile_artifacts writes it (the fields it always writes)."""
    return {
        "artifact_reused": False,
        "candidate_pool_id": "sha256:" + "0" * 64,
        "compilation_latency_ms": 1.0,
        "compressed_artifact_hash": "sha256:" + text_sha256(text or ""),
        "compressed_evidence": text,
        "compressor_adapter_hash": "sha256:" + "1" * 64,
        "compressor_id": "llm-summary:qwen/qwen3-14b",
        "compressor_metadata": {},
        "compressor_tokens": 10,
        "example_id": example_id,
        "question_type": "bridge",
        "raw_evidence_hash": "sha256:" + "0" * 64,
        **extra,
    }


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_the_hash_is_sha256_of_the_utf8_text_as_ragscale_digests_it(tmp_path):
    """ragscale.cache.digest: "sha256:" + sha256(value.encode("utf-8")).hexdigest()."""
    assert text_sha256(HAND) == "4f6e4a1fad576a95d71b7328f1e311b8fd7b733acbf52bf1ed57579544c6b207"
    assert text_sha256(HAND) != hashlib.sha256(HAND.encode("latin-1")).hexdigest()  # the encoding matters
    assert "sha256:" + text_sha256(RELEASE_TEXT) == RELEASE_HASH  # the release's own row, its own hash
    line = ragscale_line("hpqa-0000", RELEASE_TEXT)
    line["compressed_artifact_hash"] = RELEASE_HASH
    (entry,) = read_entries(write(tmp_path / "m.jsonl", [line]))
    assert (entry.row_id, entry.compressor, entry.draw, entry.text) == (
        "hpqa-0000", "llm-summary:qwen/qwen3-14b", 0, RELEASE_TEXT
    )  # fmt: skip
    assert entry.pool_sha256 is None and "not checked" in entry.pool_check


def test_a_tampered_text_is_refused_with_its_row_named(tmp_path):
    tampered = ragscale_line("hpqa-0003", "Franco Corelli was a tenor.")
    tampered["compressed_evidence"] += " (edited)"
    path = write(tmp_path / "m.jsonl", [ragscale_line("hpqa-0002", "VCU."), tampered])
    with pytest.raises(ConfigError, match="line 2: the text of row hpqa-0003 does not match its sha256"):
        Replay(path=path).validate()
    kvx = {"row_id": "a", "compressor": "c", "text": "x", "sha256": text_sha256("y")}
    with pytest.raises(ConfigError, match="the text of row a does not match"):
        Replay(path=write(tmp_path / "k.jsonl", [kvx])).validate()


def test_bad_files_and_choices_are_refused_before_anything_loads(tmp_path):
    def kvx(row, compressor="c1", draw=0, text="t"):
        return {
            "row_id": row,
            "compressor": compressor,
            "draw": draw,
            "text": text,
            "sha256": text_sha256(text),
        }

    path = write(tmp_path / "k.jsonl", [kvx("a"), kvx("a", "c2"), kvx("a", draw=1, text="u")])
    with pytest.raises(ConfigError, match=r"several compressors \['c1', 'c2'\]"):
        Replay(path=path).validate()
    with pytest.raises(ConfigError, match="did you mean 'c1'"):
        Replay(path=path, compressor="c11").validate()
    with pytest.raises(ConfigError, match=r"transform.draw=2: .* holds draws \[0, 1\]"):
        Replay(path=path, compressor="c1", draw=2).validate()
    Replay(path=path, compressor="c1", draw=1).validate()
    dup = write(tmp_path / "d.jsonl", [kvx("a"), kvx("a", text="v")])
    with pytest.raises(ConfigError, match=r"row a has two artifacts .* \(lines 1 and 2\)"):
        Replay(path=dup).validate()
    with pytest.raises(ConfigError, match="line 1: neither kvx's layout"):
        Replay(path=write(tmp_path / "x.jsonl", [{"id": "a"}])).validate()
    with pytest.raises(ConfigError, match=r"row a\): missing \['sha256'\]"):
        Replay(path=write(tmp_path / "m.jsonl", [{"row_id": "a", "compressor": "c", "text": "t"}])).validate()
    with pytest.raises(ConfigError, match="transform.path is required"):
        Replay().validate()
    with pytest.raises(ConfigError, match="no such file"):
        Replay(path=str(tmp_path / "absent.jsonl")).validate()


def test_file_rows_name_task_rows_by_source_id_or_its_longest_suffix():
    assert row_keys("hotpotqa_5a8b57f25542995d1e6f1371") == [
        "hotpotqa_5a8b57f25542995d1e6f1371", "5a8b57f25542995d1e6f1371"
    ]  # fmt: skip
    assert row_keys("pools_q_1") == ["pools_q_1", "q_1", "1"]
    # ragscale's example ids are its dataset's running numbers (hpqa-0000 is HotpotQA dev
    # 5a8e3ea95542995a26add48d, not row 0 of any file kvx reads): they name no kvx HotpotQA row by id
    # (transform.dataset matches them by question and passages: see below)
    assert "hpqa-0003" not in row_keys("hotpotqa_5a8b57f25542995d1e6f1371")
    assert "hpqa-0003" in row_keys("demo_hpqa-0003")  # a task whose own row ids are ragscale's


def test_identity_is_the_compressor_and_the_texts_not_where_the_file_lies(tmp_path):
    from kvx.core.identity import fields_of

    rows = [ragscale_line("hpqa-0000", "one"), ragscale_line("hpqa-0001", "two")]
    a, b = write(tmp_path / "a.jsonl", rows), write(tmp_path / "b.jsonl", rows)
    other = write(tmp_path / "c.jsonl", [rows[0], ragscale_line("hpqa-0001", "two!")])
    prints = [Replay(path=p).fingerprint() for p in (a, b, other)]
    assert prints[0] == prints[1] != prints[2]
    assert prints[0]["compressor_id"] == "llm-summary:qwen/qwen3-14b"
    assert fields_of(Replay(path=a)) == {"draw": 0}  # the path is not the identity, its content is


def test_rows_without_text_or_passages_are_unsupported(tmp_path):
    path = write(tmp_path / "m.jsonl", [ragscale_line("q", None)])
    source = Source.from_segments(
        [Segment("preamble", "Answer.", role="instruction"), Segment("d1", "Doc.", role="passage")],
        id="demo_q", question="Q?", answers=["a"],
    )  # fmt: skip
    with pytest.raises(Unsupported, match="no text in .* store_artifact_text: false"):
        Replay(path=path).apply(source)
    with pytest.raises(Unsupported, match="no artifact for row demo_r"):
        Replay(path=path).apply(Source("demo_r", "ctx", "Q?", ["a"]))


# ----------------------------------------------------------------------------- end to end, two readers
HOTPOT = [
    {
        "_id": f"id{i}",
        "question": f"Where is thing {i}?",
        "answer": f"place{i}",
        "context": [
            [f"Title {i}", [f"Thing {i} is in place{i}.", " It is old."]],
            ["Other", ["Nothing here."]],
        ],
        "supporting_facts": [[f"Title {i}", 0]],
        "type": "bridge",
    }
    for i in range(3)
]


def hotpot_cell(task_path: str, transform):
    from kvx.compressors.none import NoCompression
    from kvx.pipeline.cell import Cell
    from kvx.tasks.hotpotqa import HotpotQA

    return Cell(
        task_name="hotpotqa", task=HotpotQA(path=task_path), reader_name="tiny", press_name="none",
        compressor=NoCompression(), ratio=0.0, seed=0, n_sources=3, context_tokens=1024,
        max_new_tokens=2, transform_name="replay", transform=transform,
    )  # fmt: skip


def test_an_external_artifact_set_replays_to_two_readers(tmp_path, tiny):
    from kvx.modeling.reader import load_reader
    from kvx.pipeline.engine import Engine
    from kvx.readers.tiny import TinyLlama

    task = tmp_path / "hotpot.json"
    task.write_text(json.dumps(HOTPOT))
    # ragscale ids keyed as the task's own (HotpotQA _id), one row missing, one stored without text
    path = write(
        tmp_path / "m.jsonl",
        [ragscale_line("id0", "Thing 0 is in place0."), ragscale_line("hotpotqa_id1", None)],
    )
    other = load_reader("tiny", TinyLlama(num_hidden_layers=3, seed=1))
    engine = Engine(tmp_path / "outputs", 2**28)
    runs = [
        engine.run_cells([hotpot_cell(str(task), Replay(path=path))], r, progress=False)[0]
        for r in (tiny, other)
    ]
    for records in runs:
        by_id = {r.source_id: r for r in records}
        assert by_id["hotpotqa_id0"].status == "supported"
        assert by_id["hotpotqa_id0"].transform["candidate_pool_check"].startswith("not checked")
        assert by_id["hotpotqa_id0"].transform["artifact_text_sha256"] == text_sha256("Thing 0 is in place0.")
        assert by_id["hotpotqa_id1"].status == "unsupported" and "no text" in by_id["hotpotqa_id1"].reason
        assert by_id["hotpotqa_id2"].status == "unsupported"
        assert "no artifact for row hotpotqa_id2" in by_id["hotpotqa_id2"].reason
    hashes = [{r.source_id: r.compressed_text_sha256 for r in records} for records in runs]
    assert hashes[0] == hashes[1] and hashes[0]["hotpotqa_id0"]
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "artifacts").rglob("*.json")]
    assert len(manifests) == 1 and manifests[0]["row_id"] == "hotpotqa_id0"
    assert manifests[0]["transform"]["compressor_id"] == "llm-summary:qwen/qwen3-14b"
    assert manifests[0]["segments"][-1]["text"] == "Thing 0 is in place0."


def test_a_pool_hash_is_checked_against_the_row_as_kvx_sees_it(tmp_path, tiny):
    from kvx.pipeline.engine import Engine
    from kvx.transforms.none import Identity

    task = tmp_path / "hotpot.json"
    task.write_text(json.dumps(HOTPOT))
    engine = Engine(tmp_path / "outputs", 2**28)
    sources = {s.id: s for s in engine.sources(hotpot_cell(str(task), Identity()), tiny)}
    pool = sources["hotpotqa_id0"].digest(reader_free=True)

    def kvx(row, pool_sha256):
        return {"row_id": row, "compressor": "mine", "text": "T.", "sha256": text_sha256("T."),
                "candidate_pool_sha256": pool_sha256}  # fmt: skip

    path = write(tmp_path / "k.jsonl", [kvx("id0", pool), kvx("id1", "f" * 64)])
    records = engine.run_cells([hotpot_cell(str(task), Replay(path=path))], tiny, progress=False)[0]
    by_id = {r.source_id: r for r in records}
    assert by_id["hotpotqa_id0"].status == "supported"
    assert by_id["hotpotqa_id0"].transform["candidate_pool_check"] == "match"
    refused = by_id["hotpotqa_id1"]
    assert (
        refused.status == "error"
        and "row hotpotqa_id1: the artifact was compiled for candidate pool ffff" in refused.reason
    )


# ----------------------------------------------------------------------------- ragscale's own example ids
def test_ragscale_pool_ids_follow_its_canonical_evidence_rule():
    """ragscale.config.canonical_evidence joins the pool's documents (a mapping's text, content or
    page_content, else its sorted JSON) with a blank line; ragscale.cache.digest hashes the UTF-8 bytes."""
    from kvx.transforms.ragscale_dataset import canonical_evidence

    pool = [{"id": "a", "text": "[Ä] x"}, "plain", {"content": "c"}, {"k": 1}]
    assert canonical_evidence(pool) == '[Ä] x\n\nplain\n\nc\n\n{"k": 1}'
    assert hashlib.sha256(canonical_evidence(pool).encode("utf-8")).hexdigest() == (
        "cede40417b01367439d5831d054ac9546e886553e8e76f47ba26ea5e74189cbf"
    )


def ragscale_case(i: int, row: dict, edit: str = "") -> dict:
    pool = [
        {"id": f"p{j}", "text": f"[{t}] " + " ".join(s) + edit} for j, (t, s) in enumerate(row["context"])
    ]
    return {"example_id": f"hpqa-{i:04d}", "question": row["question"], "reference_answers": [row["answer"]],
            "candidate_pool": pool}  # fmt: skip


def test_ragscale_ids_match_kvx_rows_by_question_and_passages(tmp_path, tiny):
    from kvx.pipeline.engine import Engine
    from kvx.transforms.ragscale_dataset import canonical_evidence

    task = tmp_path / "hotpot.json"
    task.write_text(json.dumps(HOTPOT))
    # hpqa-0001's pool differs from kvx's row (a passage edited); HOTPOT[2] has no artifact
    cases = [ragscale_case(0, HOTPOT[0]), ragscale_case(1, HOTPOT[1], edit=" Edited.")]
    dataset = write(tmp_path / "dataset.jsonl", cases)

    def line(case, text):
        pool_id = "sha256:" + text_sha256(canonical_evidence(case["candidate_pool"]))
        return ragscale_line(case["example_id"], text, candidate_pool_id=pool_id)

    path = write(tmp_path / "m.jsonl", [line(cases[0], "Thing 0 is in place0."), line(cases[1], "Thing 1.")])
    engine = Engine(tmp_path / "outputs", 2**28)
    replay = Replay(path=path, dataset=dataset)
    replay.validate()
    records = engine.run_cells([hotpot_cell(str(task), replay)], tiny, progress=False)[0]
    by_id = {r.source_id: r for r in records}
    assert by_id["hotpotqa_id0"].status == "supported"
    assert by_id["hotpotqa_id0"].transform["artifact_row_id"] == "hpqa-0000"
    assert (
        by_id["hotpotqa_id0"]
        .transform["candidate_pool_check"]
        .startswith("match: the dataset row's question")
    )
    assert by_id["hotpotqa_id1"].status == "error"
    assert "row hotpotqa_id1: the artifact of ['hpqa-0001'] in" in by_id["hotpotqa_id1"].reason
    assert by_id["hotpotqa_id2"].status == "unsupported" and "by question" in by_id["hotpotqa_id2"].reason
    assert "dataset_sha256" in replay.fingerprint()
    # a row named by its id is still checked against its dataset row: another question is refused
    from kvx.transforms.none import Identity

    source = next(
        s for s in engine.sources(hotpot_cell(str(task), Identity()), tiny) if s.id == "hotpotqa_id0"
    )
    keyed = ragscale_case(0, HOTPOT[0]) | {"example_id": "id0", "question": "Another question?"}
    other = Replay(
        path=write(tmp_path / "m2.jsonl", [line(keyed, "T.")]), dataset=write(tmp_path / "d2.jsonl", [keyed])
    )
    with pytest.raises(
        ValueError, match=r"row hotpotqa_id0: the artifact of \['id0'\] in .* another question"
    ):
        other.apply(source)
    # a manifest whose pool id is not its dataset row's is refused before anything loads
    wrong = ragscale_line("hpqa-0000", "Thing 0 is in place0.", candidate_pool_id="sha256:" + "e" * 64)
    with pytest.raises(ConfigError, match="row hpqa-0000: the artifact was compiled for candidate pool eeee"):
        Replay(path=write(tmp_path / "w.jsonl", [wrong]), dataset=dataset).validate()
    with pytest.raises(ConfigError, match="has no row hpqa-0009"):
        Replay(
            path=write(tmp_path / "x.jsonl", [ragscale_line("hpqa-0009", "t")]), dataset=dataset
        ).validate()
