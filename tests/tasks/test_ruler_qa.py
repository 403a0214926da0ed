"""RULER's QA subtasks ``qa_1`` (SQuAD) and ``qa_2`` (HotpotQA), on tiny files in the official formats:
RULER's documents, question order, distractor rule and template, kvpress's split of the prompt, the
sizing, the evidence and ``string_match_part``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.tasks.rag import INSTRUCTION, PREAMBLE
from kvx.tasks.ruler_qa import QaHotpot, QaSquad, hotpot_corpus, squad_corpus


def words(text: str) -> int:
    return len(text.split())


def qa(question: str, *answers: tuple[str, int], impossible: bool = False) -> dict:
    listed = [{"text": text, "answer_start": start} for text, start in answers]
    return {"question": question, "id": question[:8], "answers": listed, "is_impossible": impossible}


NORMANDY = "The Normans gave their name to Normandy, a region in France."
ROLLO = "Rollo was a Viking leader who founded Normandy in 911."
CONQUEST = "The Norman conquest of England took place in 1066."
FORCE = "Force is a push or a pull on an object."
MASS = "Mass measures the inertia of a body."
SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Normans",
            "paragraphs": [
                {
                    "context": NORMANDY,
                    "qas": [
                        qa("In what country is Normandy located?", ("France", 53), ("France", 53)),
                        qa("Who gave their name to France?", impossible=True),
                    ],
                },
                {"context": ROLLO, "qas": [qa("When was Normandy founded?", ("911", 50), ("in 911", 47))]},
                {"context": CONQUEST, "qas": []},
            ],
        },
        {
            "title": "Force",
            "paragraphs": [
                {"context": FORCE, "qas": [qa("What is a force?", ("a push or a pull", 9))]},
                {"context": MASS, "qas": []},
            ],
        },
    ],
}

ED_WOOD = ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker.", " He made Plan 9."]]
DERRICKSON = ["Scott Derrickson", ["Scott Derrickson is an American director.", " He directed Sinister."]]
BATES = ["Tyler Bates", ["Tyler Bates is an American musician."]]
ALPS = ["Alps", ["The Alps are a mountain range.", " They span eight countries."]]
HOTPOT = [
    {
        "_id": "a1",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0], ["Nowhere", 0], ["Ed Wood", 9]],
        "context": [ED_WOOD, DERRICKSON, BATES],
        "type": "comparison",
        "level": "hard",
    },
    {
        "_id": "b2",
        "question": "How many countries do the Alps span?",
        "answer": "eight",
        "supporting_facts": [["Alps", 1]],
        "context": [ALPS, BATES],
        "type": "bridge",
        "level": "easy",
    },
]


@pytest.fixture()
def squad(tmp_path: Path) -> str:
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(SQUAD))
    return str(path)


@pytest.fixture()
def hotpot(tmp_path: Path) -> str:
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(HOTPOT))
    return str(path)


def test_registered_as_rulers_qa_subtasks():
    for name, cls in (("ruler_qa_1", QaSquad), ("ruler_qa_2", QaHotpot)):
        task = registry("task").get(name)
        assert task is cls and task.family == "ruler"
        assert task.max_new_tokens == 32  # RULER's tokens_to_generate for qa (constants.py)


def test_squad_reads_as_rulers_read_squad(squad):
    corpus = squad_corpus(squad)
    # every distinct paragraph, sorted
    assert corpus.documents == tuple(sorted([NORMANDY, ROLLO, CONQUEST, FORCE, MASS]))
    # answerable questions in file order, every annotator's answer kept
    assert [(q.query, q.answers) for q in corpus.questions] == [
        ("In what country is Normandy located?", ("France", "France")),
        ("When was Normandy founded?", ("911", "in 911")),
        ("What is a force?", ("a push or a pull",)),
    ]
    first = corpus.questions[0]
    assert [corpus.documents[i] for i in first.gold] == [NORMANDY]
    assert sorted(corpus.documents[i] for i in first.more) == sorted([ROLLO, CONQUEST])
    assert first.evidence == ((first.gold[0], 53, 59),)  # duplicate answers, one span
    assert NORMANDY[53:59] == "France"


def test_hotpot_reads_as_rulers_read_hotpotqa(hotpot):
    corpus = hotpot_corpus(hotpot)
    # "<title>\n<sentences joined as stored>", each once (Tyler Bates is in both rows), sorted
    expected = {f"{t}\n{''.join(s)}" for t, s in (ED_WOOD, DERRICKSON, BATES, ALPS)}
    assert corpus.documents == tuple(sorted(expected))
    first, second = corpus.questions
    assert (first.answers, second.answers) == (("yes",), ("eight",))
    assert [corpus.documents[i].split("\n")[0] for i in first.gold] == [
        "Ed Wood",
        "Scott Derrickson",
        "Tyler Bates",
    ]
    assert first.more == ()
    # the two supporting facts that exist; an unknown title and a sentence out of range are left out
    texts = [corpus.documents[d][s:e] for d, s, e in first.evidence]
    assert texts == [
        "Scott Derrickson is an American director.",
        "Edward Davis Wood Jr. was an American filmmaker.",
    ]
    ((doc, start, end),) = second.evidence
    assert corpus.documents[doc][start:end] == "They span eight countries."  # without its leading space


def test_the_prompt_is_rulers_template_split_as_kvpress_splits_it(squad):
    (source,) = QaSquad(path=squad).sources(1, 0, 10_000, words)
    documents = source.context.removeprefix(PREAMBLE + "\n\n")
    # RULER's input: its template around the documents and the query, then " Answer:"
    ruler_input = (
        f"{INSTRUCTION}\n\nThe following are given documents.\n\n{documents}\n\n{INSTRUCTION}\n\n"
        "Question: In what country is Normandy located? Answer:"
    )
    # kvpress's create_huggingface_dataset.py: the question from the last instruction, then "Answer:"
    at = list(re.finditer(r"Answer the question based on the given documents\.", ruler_input))[-1].start()
    context, rest = ruler_input[:at], ruler_input[at:]
    question, prefix = rest[: rest.index("Answer:")], rest[rest.index("Answer:") :]
    assert (source.context + "\n\n", source.question + " ", source.answer_prefix) == (
        context,
        question,
        prefix,
    )
    assert re.findall(r"Document (\d+):\n", documents) == [str(i) for i in range(1, 6)]
    assert [s.role for s in source.segments] == ["instruction"] + ["passage"] * 5


def test_every_document_fits_a_large_budget_and_the_evidence_is_the_answer(squad):
    sources = QaSquad(path=squad).sources(3, 0, 10_000, words)
    assert [s.id for s in sources] == ["ruler_qa_1_000000", "ruler_qa_1_000001", "ruler_qa_1_000002"]
    for source in sources:
        assert source.metadata["documents"] == 5 and source.metadata["haystack_units"] == 4
        # in text order: "in 911" starts before "911"
        spans = [source.context[a:b] for a, b in source.evidence]
        assert spans in (["France"], ["in 911", "911"], ["a push or a pull"])
        (gold,) = source.metadata["gold_documents"]
        assert source.segments[gold].text.startswith(f"Document {gold}:\n")
        assert source.evidence[0][0] >= source.segment_spans()[gold][0]
    assert sources[1].answers == ["911", "in 911"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distractors_come_from_the_questions_article_first(squad, seed):
    task = QaSquad(path=squad)
    shortest = words(task.sources(1, seed, 10_000, words)[0].context)  # an upper bound, to scan from
    article = {ROLLO, CONQUEST}
    seen = set()
    for budget in range(60, shortest + 60):
        try:
            (source,) = task.sources(1, seed, budget, words)
        except ValueError:
            continue
        assert words(f"{source.context}\n{source.question}") == source.metadata["prompt_tokens"] <= budget
        distractors = {s.text.split("\n", 1)[1] for s in source.segments[1:]} - {NORMANDY}
        seen.add(len(distractors))
        if len(distractors) <= len(article):
            assert distractors <= article
        else:
            assert article <= distractors
    assert seen == {0, 1, 2, 3, 4}


def test_seeded_deterministic_and_extending(squad):
    task = QaSquad(path=squad)
    three = task.sources(3, 7, 10_000, words)
    assert task.sources(3, 7, 10_000, words) == three
    assert task.sources(2, 7, 10_000, words) == three[:2]
    # the seed draws the order; source i asks question i whatever the seed
    orders = {tuple(s.text for s in task.sources(1, seed, 10_000, words)[0].segments) for seed in range(6)}
    assert len(orders) > 1
    assert {task.sources(1, seed, 10_000, words)[0].metadata["query"] for seed in range(3)} == {
        "In what country is Normandy located?"
    }


def test_hotpot_sources_keep_the_rows_paragraphs_and_the_supporting_sentences(hotpot):
    (first, second) = QaHotpot(path=hotpot).sources(2, 0, 10_000, words)
    assert [s.title for s in first.segments[1:]].count("Alps") == 1  # the one other document
    assert len(first.metadata["gold_documents"]) == 3
    assert [first.context[a:b] for a, b in first.evidence] == sorted(
        ["Scott Derrickson is an American director.", "Edward Davis Wood Jr. was an American filmmaker."],
        key=first.context.index,
    )
    assert [second.context[a:b] for a, b in second.evidence] == ["They span eight countries."]
    assert second.question == f"{INSTRUCTION}\n\nQuestion: How many countries do the Alps span?"


def test_scored_by_string_match_part(squad):
    task = QaSquad(path=squad)
    source = task.sources(2, 0, 10_000, words)[1]  # references "911", "in 911"
    assert task.evaluate(" It was founded In 911.", source).value == 1.0
    assert task.evaluate("in the year 911", source).correct  # one reference is enough
    assert task.evaluate("nine hundred eleven", source).value == 0.0


def test_too_small_and_too_many(squad):
    task = QaSquad(path=squad)
    with pytest.raises(ValueError, match="too small") as raised:
        task.sources(1, 0, 30, words)
    with pytest.raises(ValueError) as checked:
        task.check_budget(1, 0, 30, words)
    assert str(checked.value) == str(raised.value)
    task.check_budget(3, 0, 10_000, words)
    with pytest.raises(ValueError, match="has 3 questions"):
        task.sources(4, 0, 10_000, words)


def test_bad_paths_are_refused_before_any_model_loads(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        QaSquad(path=str(tmp_path / "absent.json")).validate()
    wrong = tmp_path / "list.json"
    wrong.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not the SQuAD format"):
        QaSquad(path=str(wrong)).validate()
    with pytest.raises(ConfigError, match="not the HotpotQA format"):
        QaHotpot(path=str(wrong)).validate()
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="cannot read it as SQuAD JSON"):
        QaSquad(path=str(broken)).validate()


def test_the_shipped_squad_asks_rulers_first_question():
    pytest.importorskip("long_context_eval")
    task = QaSquad()
    task.validate()
    (source,) = task.sources(1, 0, 1024, words)
    assert source.metadata["query"] == "In what country is Normandy located?"
    assert [source.context[a:b] for a, b in source.evidence] == ["France"]
    assert source.metadata["prompt_tokens"] <= 1024 and source.metadata["documents"] > 1
