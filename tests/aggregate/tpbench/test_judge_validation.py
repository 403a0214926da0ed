"""The P1 judge's Answer Equivalence validation (TPBench §6.1.1) on a miniature in AE's official format
(one rating per line: qid, gold_index, context, question, reference, candidate, label, score,
raw_rating), hand-counted: pairs and majorities, the release's pair ids, the fixed baselines, the
judge's input row and the command's table."""

from __future__ import annotations

import json

import pytest

from kvx.aggregate.tpbench.judge_validation import build_judge, main, report
from kvx.core.errors import ConfigError
from kvx.judges.tpbench_p1 import PROMPT, TPBenchP1
from kvx.modeling.chat import ChatReply
from kvx.pipeline.judge import judge_texts
from kvx.tasks import answer_equivalence as ae

EQ, NOT = "equivalent", "not equivalent"
Q1, Q2 = "5727b0892ca10214002d93ea", "57293e983f37b3190047818f"


def rating(qid: str, reference: str, candidate: str, label: str, question: str = "Q?") -> dict:
    raw = ["no", "yes", "null", "null"] if label == EQ else ["yes", "null", "null", "null"]
    return {
        "qid": qid,
        "gold_index": 0,
        "context": f"A passage about {reference}.",
        "question": question,
        "reference": reference,
        "candidate": candidate,
        "label": label,
        "score": 1.0 if label == EQ else 0.0,
        "raw_rating": raw,
    }


# pairs: P1 (equivalent), P2 (equivalent), P3 (a 1-1 tie), P4 (1 of 3: not), P5 (not)
RATINGS = [
    rating(Q1, "never", "never affiliated with any particular denomination", EQ),
    rating(Q2, "1.4 and 5.8 °C", "1.4 and 5.8 °C above 1990", EQ),
    rating("q3", "the main hall", "Midlothian County Buildings", EQ),
    rating("q3", "main hall", "The Main Hall", NOT),
    rating("q3", "the main hall", "Midlothian County Buildings", NOT),
    rating("q3", "main hall", "The Main Hall", EQ),
    rating("q3", "main hall", "The Main Hall", NOT),
    rating("q5", "national anthem", "American Sign Language", NOT),
]


@pytest.fixture
def ae_test(tmp_path):
    path = tmp_path / "ae_test.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RATINGS), encoding="utf-8")
    return path


def test_ratings_become_pairs_labelled_by_their_majority(ae_test):
    pairs = ae.load_pairs(str(ae_test))
    assert [(p.qid, p.n_ratings, p.n_positive, p.majority) for p in pairs] == [
        (Q1, 1, 1, True),
        (Q2, 1, 1, True),
        ("q3", 2, 1, None),  # a tie: unresolved
        ("q3", 3, 1, False),
        ("q5", 1, 0, False),
    ]
    # the release's ids (its data/semantic_evaluation/ae_test_inputs.jsonl), non-ASCII kept as is
    assert pairs[0].id == "aac887fd8167e29d18ed" and pairs[1].id == "ab973d2a64b9be26bdae"
    # SQuAD-normalized exact match and token F1: 1/6 precision, 1 recall -> 2/7; "°c" is a token
    assert [p.exact_match for p in pairs] == [False, False, False, True, False]
    assert [round(p.token_f1, 4) for p in pairs] == [0.2857, 0.8, 0.0, 1.0, 0.0]


def test_selection_by_the_releases_ids_or_a_label_blind_sample(ae_test, tmp_path):
    pairs = ae.load_pairs(str(ae_test))
    ids = tmp_path / "ae_test_inputs.jsonl"
    ids.write_text(
        json.dumps({"id": pairs[4].id, "question": "Q?"}) + "\n" + json.dumps({"id": pairs[0].id}) + "\n"
    )
    assert ae.select(pairs, ae.read_ids(str(ids))) == [pairs[4], pairs[0]]
    drawn = ae.select(pairs, sample=3, seed=5)
    assert len(drawn) == 3 and drawn == ae.select(pairs, sample=3, seed=5)
    assert drawn == sorted(drawn, key=lambda p: p.id)
    with pytest.raises(ConfigError, match=r"1 of 2 ids are no pair of the file \(first: 'nope'\)"):
        ae.select(pairs, ["nope", pairs[0].id])
    with pytest.raises(ConfigError, match="--sample=9 must be between 1 and the file's 5 pairs"):
        ae.select(pairs, sample=9)


def test_a_file_that_is_not_ae_names_the_line_and_field(tmp_path):
    bad = tmp_path / "ae_dev.jsonl"
    bad.write_text(
        json.dumps(rating("q", "a", "b", EQ)) + "\n" + json.dumps({"qid": "q", "question": "?"}) + "\n"
    )
    with pytest.raises(ConfigError, match=r"ae_dev.jsonl:2: field 'context' is None, not a str"):
        ae.load_pairs(str(bad))
    with pytest.raises(ConfigError, match="no such AE file.*answer-equivalence-dataset"):
        ae.load_pairs(str(tmp_path / "missing.jsonl"))


class Replies:
    """A judge model answering by candidate; records what it was asked."""

    identity = {"fake": "judge"}

    def __init__(self, by_candidate: dict[str, bool | None]) -> None:
        self.by_candidate, self.asked = by_candidate, []

    def complete(self, requests, desc="", progress=True):
        out = []
        for request in requests:
            row = json.loads(request.messages[-1][1])
            self.asked.append((request.messages[0][1], row))
            verdict = self.by_candidate[row["candidate"]]
            out.append(ChatReply(json.dumps({"id": row["id"], "equivalent": verdict, "reason": "r"}), "eos"))
        return out


def test_the_p1_judge_reads_the_releases_ae_row_and_is_scored_against_the_majority(ae_test):
    pairs = ae.load_pairs(str(ae_test))
    chat = Replies({p.candidate: v for p, v in zip(pairs, [True, None, True, True, False], strict=True)})
    items = [(ae.to_source(p), p.candidate) for p in pairs]
    judgments = judge_texts(items, "tpbench_p1", TPBenchP1(), chat, progress=False)
    system, row = chat.asked[0]
    assert system == PROMPT  # the same prompt as on TPBench
    assert list(row) == ["id", "question", "context", "reference", "candidate"]  # the release's AE row
    assert row["id"] == "aac887fd8167e29d18ed" and row["context"] == "A passage about never."
    assert len(chat.asked) == 5  # one request per pair, labels never sent
    result = report(pairs, "tpbench_p1", judgments, n_boot=100, seed=0)
    # resolved P1 T/T, P2 T/uncertain, P4 F/T, P5 F/F
    judge = result["methods"]["tpbench_p1"]
    assert (judge["tp"], judge["tn"], judge["fp"], judge["fn"], judge["uncertain_positive"]) == (
        1,
        1,
        1,
        0,
        1,
    )
    assert judge["accuracy"] == pytest.approx(0.5) and judge["balanced_accuracy"] == pytest.approx(0.5)
    assert (result["resolved"], result["human_ties"], result["clusters"]) == (4, 1, 4)
    assert result["judgments"] == {"judged": 5, "error": 0, "not_applicable": 0, "uncertain": 1}
    # the baselines: exact match says "equivalent" only for P4 (wrong); token F1 >= 0.5 for P2 and P4
    em, f1 = result["methods"]["exact_match"], result["methods"]["token_f1_ge_half"]
    assert (em["tp"], em["tn"], em["fp"], em["fn"], em["accuracy"]) == (0, 1, 1, 2, 0.25)
    assert (f1["tp"], f1["tn"], f1["fp"], f1["fn"], f1["accuracy"]) == (1, 1, 1, 1, 0.5)


def test_the_command_on_a_rule_judge(ae_test, tmp_path, capsys):
    """fmts_containment: the reference in the candidate or the reverse, lowercased: P1, P2 and P4 yes."""
    out = tmp_path / "validation.json"
    assert main([str(ae_test), "judge=fmts_containment", "--boot", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 pairs, 4 resolved (1 human ties) in 4 questions" in printed
    assert "| fmts_containment | 4 | 2 | 1 | 1 | 0 | 0 | 0.750 [" in printed
    assert "| exact_match | 4 | 0 | 1 | 1 | 2 | 0 | 0.250 [" in printed
    assert "| 50.000 [" in printed  # the judge's gain over exact match, in points
    written = json.loads(out.read_text())
    assert len(written["pairs"]) == 5 and written["report"]["bootstrap"]["resamples"] == 200


def test_bad_judge_settings_fail_before_any_model(ae_test, capsys):
    with pytest.raises(ConfigError, match=r"judge.max_token: .*did you mean judge.max_tokens\?"):
        build_judge(["judge=tpbench_p1", "judge.max_token=5"])
    assert main([str(ae_test), "judge=tpbench_p1", "judge.reader=nosuch"]) == 2
    assert "judge.reader" in capsys.readouterr().err
    assert main([str(ae_test), "reader=tiny"]) == 2
    assert "expected judge=<name> or judge.<field>=<value>" in capsys.readouterr().err
