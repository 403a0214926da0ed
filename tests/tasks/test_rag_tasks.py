"""RAG pool tasks: SQuAD v2 paragraph pools, the user JSONL pool format, the raw policy, alias-max
EM/F1 and SQuAD v2's unanswerable rule."""

from __future__ import annotations

import json

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.rag import RagJsonl, raw_policy
from kvx.tasks.squad import SquadV2


def count(text: str) -> int:
    return len(text.split())


def squad_file(tmp_path, n_paragraphs: int = 6):
    paragraphs = []
    for i in range(n_paragraphs):
        context = f"Paragraph {i} says the river number {i} is called River{i}."
        qas = [
            {
                "id": f"q{i}",
                "question": f"What is river number {i} called?",
                "answers": [{"text": f"River{i}", "answer_start": context.index(f"River{i}")}] * 2,
                "is_impossible": False,
            }
        ]
        if i == 0:
            qas.append(
                {
                    "id": "impossible",
                    "question": "What is the sea called?",
                    "answers": [],
                    "is_impossible": True,
                }
            )
        paragraphs.append({"context": context, "qas": qas})
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "Rivers", "paragraphs": paragraphs}]}))
    return str(path)


def test_squad_pools_hold_the_home_paragraph_and_seeded_article_distractors(tmp_path):
    task = SquadV2(path=squad_file(tmp_path), pool_size=3)
    task.validate()
    sources = task.sources(6, 0, 0, count)
    assert len(sources) == 6 and all(not s.metadata["unanswerable"] for s in sources)  # dropped by default
    for s in sources:
        home = int(s.id.removeprefix("squad_q"))
        ids = s.metadata["candidate_ids"]
        assert len(ids) == 3 and f"p{home}" in ids and ids == sorted(ids)  # article order
        assert [s.context[a:b] for a, b in s.evidence] == [f"River{home}"]  # one span, deduplicated
        assert s.answers == [f"River{home}"] and s.metadata["raw_policy"] == "supplied order, all 3"
        assert sum(seg.role == "passage" for seg in s.segments) == 3
    again = {
        s.id: s.metadata["candidate_ids"]
        for s in SquadV2(path=task.path, pool_size=3).sources(6, 1, 0, count)
    }
    assert all(again[s.id] == s.metadata["candidate_ids"] for s in sources)  # a row's pool is the row's own
    whole = SquadV2(path=task.path, pool_size=0).sources(1, 0, 0, count)[0]
    assert len(whole.metadata["candidate_ids"]) == 6


def test_squad_unanswerable_rows_are_flagged_and_scored_as_squad_v2_does(tmp_path):
    task = SquadV2(path=squad_file(tmp_path), unanswerable="keep", pool_size=2)
    sources = {s.id: s for s in task.sources(7, 0, 0, count)}
    impossible = sources["squad_impossible"]
    assert impossible.metadata["unanswerable"] and impossible.answers == [""] and not impossible.evidence
    assert task.evaluate("", impossible).value == 1.0 and task.evaluate("", impossible).metrics["em"] == 1.0
    assert task.evaluate("The sea", impossible).value == 0.0  # only an empty answer is right
    assert task.manifest(7, 0)["n_unanswerable"] == 1
    with pytest.raises(ConfigError, match="task.unanswerable"):
        SquadV2(unanswerable="maybe")


def test_raw_k_takes_the_first_passages_and_loses_evidence_outside_them(tmp_path):
    sources = SquadV2(path=squad_file(tmp_path), pool_size=4, raw_k=1).sources(6, 0, 0, count)
    for s in sources:
        assert (
            len(s.metadata["candidate_ids"]) == 1
            and s.metadata["raw_policy"] == "supplied order, first 1 of 4"
        )
        home = f"p{s.id.removeprefix('squad_q')}"
        assert bool(s.evidence) == (s.metadata["candidate_ids"] == [home])
    assert raw_policy(0, 10) == "supplied order, all 10" and raw_policy(12, 10) == "supplied order, all 10"
    with pytest.raises(ConfigError, match="task.raw_k"):
        SquadV2(raw_k=-1).validate()


def pools(tmp_path, rows) -> str:
    path = tmp_path / "pools.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [
    {
        "id": "a",
        "question": "Who wrote Hamlet?",
        "answers": ["William Shakespeare"],
        "aliases": ["Shakespeare"],
        "candidates": [
            {"id": "x1", "title": "Hamlet", "text": "Hamlet is a tragedy by Shakespeare."},
            {"id": "x2", "title": "Macbeth", "text": "Macbeth is another play."},
        ],
    },
    {
        "id": "b",
        "question": "What colour is the sky on Mars?",
        "unanswerable": True,
        "candidates": [{"text": "Mars is a planet."}],
    },
]


def test_jsonl_pools_score_em_and_f1_max_over_aliases(tmp_path):
    task = RagJsonl(path=pools(tmp_path, ROWS))
    task.validate()
    (src,) = task.sources(1, 0, 0, count)
    assert src.id == "pools_a" and src.answers == ["William Shakespeare", "Shakespeare"]
    assert src.metadata["candidate_ids"] == ["x1", "x2"] and src.metadata["query"] == "Who wrote Hamlet?"
    assert "Document 1:\nHamlet\nHamlet is a tragedy" in src.context
    score = task.evaluate("Shakespeare.", src)
    assert score.metrics == {"em": 1.0, "f1": 1.0}  # the alias matches exactly
    partial = task.evaluate("by William", src)
    assert partial.metrics["em"] == 0.0 and partial.metrics["f1"] == pytest.approx(
        0.5
    )  # 1 of 2 tokens, P 1/2
    keep = RagJsonl(path=task.path, unanswerable="keep").sources(2, 0, 0, count)
    assert sorted(s.metadata["unanswerable"] for s in keep) == [False, True]


def test_jsonl_pool_errors_name_the_file_and_row(tmp_path):
    with pytest.raises(ConfigError, match="has no field"):
        RagJsonl(path=pools(tmp_path, [{"question": "q"}])).validate()
    bad = [dict(ROWS[0], candidates=[{"title": "no text"}])]
    with pytest.raises(ConfigError, match="row 0 candidate 0 has no text"):
        RagJsonl(path=pools(tmp_path, bad)).sources(1, 0, 0, count)
    with pytest.raises(ConfigError, match="no rows left"):
        RagJsonl(path=pools(tmp_path, ROWS[1:])).sources(1, 0, 0, count)
    with pytest.raises(ConfigError, match="no such file"):
        RagJsonl(path=str(tmp_path / "missing.jsonl")).validate()


def test_hotpotqa_records_its_raw_policy(tmp_path):
    from kvx.tasks.hotpotqa import HotpotQA

    rows = [
        {
            "_id": f"h{i}",
            "question": "q",
            "answer": "a",
            "context": [[f"T{j}", [f"S{j}."]] for j in range(10)],
            "supporting_facts": [["T0", 0]],
        }
        for i in range(3)
    ]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows))
    assert HotpotQA(path=str(path)).manifest(2, 0)["raw_policy"] == ["supplied order, all 10"]
