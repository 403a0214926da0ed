"""File-backed QA tasks: HotpotQA in its native format and user JSONL files."""

import json

import pytest

from kvx.tasks.hotpotqa import HotpotQA
from kvx.tasks.jsonl import JsonlTask, seeded_order


def words(text: str) -> int:
    return len(text.split())


HOTPOT = [
    {
        "_id": "a1",
        "question": "Which city is the capital of France?",
        "answer": "Paris",
        "type": "bridge",
        "level": "easy",
        "supporting_facts": [["France", 1], ["Paris", 0]],
        "context": [
            ["Berlin", ["Berlin is in Germany.", " It is large."]],
            ["France", ["France is a country.", " Its capital is Paris.", " It uses the euro."]],
            ["Paris", ["Paris is a city.", " It has a tower."]],
        ],
    },
    {
        "_id": "b2",
        "question": "Were A and B both poets?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": [["A", 0], ["B", 5], ["Missing", 0], ["A", 1]],
        "context": [["A", ["A was a poet.", " "]], ["B", ["B was a poet too."]]],
    },
    {
        "_id": "c3",
        "question": "Q3?",
        "answer": "x",
        "supporting_facts": [["T", 0]],
        "context": [["T", ["Fact."]]],
    },
]


@pytest.fixture
def hotpot_file(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(HOTPOT))
    return str(path)


def by_id(sources):
    return {source.id: source for source in sources}


def test_hotpot_context_layout_and_exact_evidence(hotpot_file):
    source = by_id(HotpotQA(path=hotpot_file).sources(3, 0, 0, words))["hotpotqa_a1"]
    assert (
        "Document 1:\nBerlin\nBerlin is in Germany. It is large.\n\nDocument 2:\nFrance\n" in source.context
    )
    assert source.context.startswith("Answer the question based on the given documents.")
    assert source.question.endswith("Question: Which city is the capital of France?")
    assert [source.context[s:e] for s, e in source.evidence] == ["Its capital is Paris.", "Paris is a city."]
    assert [f["aligned"] for f in source.metadata["supporting_facts"]] == [True, True]
    assert source.answers == ["Paris"]
    assert source.answer_prefix == "Answer:"
    assert source.metadata["prompt_tokens"] == words(f"{source.context}\n{source.question}")
    # one segment per document after the preamble; evidence lies inside the right documents
    assert [s.id for s in source.segments] == ["preamble", "doc1", "doc2", "doc3"]
    assert [s.title for s in source.segments[1:]] == ["Berlin", "France", "Paris"]
    spans = dict(zip([s.id for s in source.segments], source.segment_spans()))
    assert source.context[slice(*spans["doc2"])] == source.segments[2].text
    assert [next(k for k, (a, b) in spans.items() if a <= s and e <= b) for s, e in source.evidence] == [
        "doc2",
        "doc3",
    ]


def test_hotpot_records_unaligned_supporting_facts(hotpot_file):
    source = by_id(HotpotQA(path=hotpot_file).sources(3, 0, 0, words))["hotpotqa_b2"]
    facts = source.metadata["supporting_facts"]
    assert [(f["title"], f["sentence"], f["aligned"]) for f in facts] == [
        ("A", 0, True),
        ("B", 5, False),
        ("Missing", 0, False),
        ("A", 1, False),
    ]
    assert [source.context[s:e] for s, e in source.evidence] == ["A was a poet."]


def test_hotpot_scoring_uses_normalised_containment(hotpot_file):
    task = HotpotQA(path=hotpot_file)
    source = by_id(task.sources(3, 0, 0, words))["hotpotqa_a1"]
    assert task.evaluate("The answer is PARIS, France.", source).value == 1.0
    assert task.evaluate("Lyon", source).value == 0.0
    assert task.evaluate("paris!", source).correct
    assert task.evaluate(" Paris, France. ", source).normalized == "paris france"
    # HotpotQA's official EM/F1 beside it: containment credits the long answer, EM does not
    long = task.evaluate("The answer is PARIS, France.", source).metrics
    assert long["em"] == 0.0 and 0.0 < long["f1"] < 1.0
    assert task.evaluate("the Paris", source).metrics == {"em": 1.0, "f1": 1.0}
    assert source.metadata["query"] and source.metadata["query"] in source.question  # the bare question


def test_hotpot_subsample_is_seeded(hotpot_file):
    task = HotpotQA(path=hotpot_file)
    ids = {seed: [s.id for s in task.sources(2, seed, 0, words)] for seed in range(6)}
    assert ids[0] == [s.id for s in task.sources(2, 0, 0, words)]
    assert len({tuple(v) for v in ids.values()}) > 1
    with pytest.raises(ValueError, match="only 3 rows"):
        task.sources(4, 0, 0, words)


def test_seeded_order_is_a_prefix_stable_permutation():
    assert seeded_order(100, 10, 1) == seeded_order(100, 30, 1)[:10]
    assert seeded_order(100, 10, 1) != seeded_order(100, 10, 2)
    assert sorted(seeded_order(50, 50, 3)) == list(range(50))


def test_hotpot_shipped_file():
    pytest.importorskip("long_context_eval")
    from kvx.tasks.ruler import ruler_data_file

    sources = HotpotQA().sources(20, 0, 0, words)
    rows = {row["_id"]: row for row in json.loads(ruler_data_file("hotpotqa.json").read_text())}
    for source in sources:
        row = rows[source.id.removeprefix("hotpotqa_")]
        paragraphs = {title: sentences for title, sentences in reversed(row["context"])}
        expected = [
            paragraphs[title][i].strip()
            for title, i in row["supporting_facts"]
            if title in paragraphs and i < len(paragraphs[title]) and paragraphs[title][i].strip()
        ]
        assert [source.context[s:e] for s, e in source.evidence] == expected
        assert len(expected) >= 2
        assert source.answers == [row["answer"]]


@pytest.fixture
def jsonl_file(tmp_path):
    rows = [
        {
            "uid": "r0",
            "context": "Alice lives in Rome. Bob lives in Oslo.",
            "question": "Where does Bob live?",
            "answers": ["Oslo"],
            "evidence": ["Bob lives in Oslo."],
        },
        {
            "uid": "r1",
            "context": "The sky is blue.",
            "question": "What colour is the sky?",
            "answers": "blue",
            "evidence": [[0, 16]],
        },
        {
            "uid": "r2",
            "context": "Two and three.",
            "question": "Which numbers?",
            "answers": ["two", "three"],
            "evidence": [],
        },
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_jsonl_fields_evidence_and_ids(jsonl_file):
    task = JsonlTask(path=jsonl_file, evidence_field="evidence", id_field="uid")
    sources = by_id(task.sources(3, 0, 0, words))
    assert set(sources) == {"r0", "r1", "r2"}
    r0, r1 = sources["r0"], sources["r1"]
    assert [r0.context[s:e] for s, e in r0.evidence] == ["Bob lives in Oslo."]
    assert r1.evidence == [(0, 16)] and r1.answers == ["blue"]
    assert task.evaluate("Two, maybe", sources["r2"]).value == 0.5


def test_jsonl_default_ids_and_no_evidence(jsonl_file):
    sources = JsonlTask(path=jsonl_file).sources(3, 1, 0, words)
    assert sorted(s.id for s in sources) == ["mine_000000", "mine_000001", "mine_000002"]
    assert all(s.evidence == [] for s in sources)


def test_jsonl_a_field_named_id_is_the_source_id_unless_id_field_says_otherwise(tmp_path):
    from kvx.core.errors import ConfigError

    rows = [
        {"id": f"q{i}", "uid": f"u{i}", "context": "c", "question": "q", "answers": "a"} for i in range(3)
    ]
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    JsonlTask(path=str(path)).validate()
    assert sorted(s.id for s in JsonlTask(path=str(path)).sources(3, 0, 0, words)) == ["q0", "q1", "q2"]
    explicit = JsonlTask(path=str(path), id_field="uid").sources(3, 0, 0, words)
    assert sorted(s.id for s in explicit) == ["u0", "u1", "u2"]
    rows_ids = JsonlTask(path=str(path), id_field="").sources(3, 0, 0, words)  # the ids before "id" was read
    assert sorted(s.id for s in rows_ids) == ["ids_000000", "ids_000001", "ids_000002"]
    del rows[2]["id"]  # some rows with an id, one without: refused before any model loads
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ConfigError, match=r"line 3 has no field\(s\) \['id'\].*the first row has \['id'\]"):
        JsonlTask(path=str(path)).validate()
    with pytest.raises(ConfigError, match=r"line 1 has no field\(s\) \['key'\]"):
        JsonlTask(path=str(path), id_field="key").validate()  # a named field must exist


@pytest.mark.parametrize(("scorer", "expected"), [("string_match_all", 0.5), ("string_match_part", 1.0)])
def test_jsonl_ruler_scorers(jsonl_file, scorer, expected):
    task = JsonlTask(path=jsonl_file, id_field="uid", scorer=scorer)
    source = by_id(task.sources(3, 0, 0, words))["r2"]
    assert task.evaluate("THREE", source).value == expected
    assert task.evaluate(" THREE. ", source).normalized == "THREE."


def test_jsonl_errors(jsonl_file, tmp_path):
    with pytest.raises(ValueError, match="task.path"):
        JsonlTask().sources(1, 0, 0, words)
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="nope.jsonl"):
        JsonlTask(path=missing).sources(1, 0, 0, words)
    with pytest.raises(ValueError, match="passage"):
        JsonlTask(path=jsonl_file, context_field="passage").sources(1, 0, 0, words)
    with pytest.raises(ValueError, match="scorer"):
        JsonlTask(path=jsonl_file, scorer="bleu")


def test_jsonl_rejects_evidence_outside_the_context(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"context": "abc", "question": "q", "answers": ["a"], "evidence": ["zzz"]}) + "\n"
    )
    with pytest.raises(ValueError, match="not found"):
        JsonlTask(path=str(path), evidence_field="evidence").sources(1, 0, 0, words)


def test_jsonl_segments_make_a_structured_context(tmp_path):
    from kvx.pipeline.transform import transform_source
    from kvx.transforms.base import Transform

    rows = [
        {
            "uid": "d0",
            "turns": [
                {"id": "t0", "speaker": "user", "text": "Book a table for two."},
                {"id": "t1", "speaker": "system", "text": "Which day?"},
                {"id": "t2", "speaker": "user", "text": "Friday, actually make it four people."},
            ],
            "question": "How many people?",
            "answers": ["four"],
            "evidence": ["make it four people"],
        },
    ]
    path = tmp_path / "dialogues.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = JsonlTask(
        path=str(path), segments_field="turns", evidence_field="evidence", id_field="uid", separator="\n"
    )
    task.validate()
    d0 = task.sources(1, 0, 0, words)[0]
    pool = tmp_path / "pool.jsonl"  # plain strings: ids are positions
    pool.write_text(
        json.dumps({"turns": ["Paris is in France.", "Rome is in Italy."], "question": "Q", "answers": "x"})
    )
    p0 = JsonlTask(path=str(pool), segments_field="turns", separator="\n").sources(1, 0, 0, words)[0]
    assert [(s.id, s.role) for s in d0.segments] == [("t0", "user"), ("t1", "system"), ("t2", "user")]
    assert d0.context == "Book a table for two.\nWhich day?\nFriday, actually make it four people."
    assert [d0.context[s:e] for s, e in d0.evidence] == ["make it four people"]
    assert [s.id for s in p0.segments] == [
        "0",
        "1",
    ] and p0.context == "Paris is in France.\nRome is in Italy."

    class UserTurns(Transform):
        def apply(self, source):
            return [s for s in source.parts() if s.role == "user"]

    out = transform_source(UserTurns(), "user_turns", d0)
    assert out.source.context == "Book a table for two.\nFriday, actually make it four people."
    assert [out.source.context[s:e] for s, e in out.source.evidence] == ["make it four people"]
