"""Qasper in allenai's v0.3 layout: inclusion rule, rendering, evidence mapping, scorer, errors, one run.

The fixture is a hand-made three-paper miniature of ``qasper-{dev,test}-v0.3.json``; the rules it pins
come from the KVDiagnosis release (``data/processed/full_population/fullcache.jsonl.gz``, rows with
``dataset`` ``qasper``), cited where each is tested.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.qasper import INSTRUCTION, Qasper


def words(text: str) -> int:
    return len(text.split())


def answer(evidence=(), spans=(), free="", yes_no=None, unanswerable=False) -> dict:
    return {
        "answer": {
            "unanswerable": unanswerable,
            "extractive_spans": list(spans),
            "yes_no": yes_no,
            "free_form_answer": free,
            "evidence": list(evidence),
            "highlighted_evidence": list(evidence),
        },
        "annotation_id": "x",
    }


PAPERS = {
    "paperA": {
        "title": "Complaints on Twitter",
        "abstract": "We study complaints.",
        "full_text": [
            {
                "section_name": "Introduction",
                "paragraphs": ["Complaining is a speech act.", "We collect 1,971 tweets."],
            },
            {"section_name": "Data ::: Collection", "paragraphs": ["", "The tweets are in English."]},
            {"section_name": None, "paragraphs": ["A paragraph without a section."]},
            {"section_name": "Empty", "paragraphs": []},
        ],
        "qas": [
            {
                "question": "What language is studied?",
                "question_id": "qa1",
                "answers": [
                    answer(["The tweets are in English.", "Complaining is a speech act."], spans=["English"]),
                    answer(["The tweets  are in\nEnglish."], free="English language"),
                    answer([], unanswerable=True),
                ],
            },
            {
                "question": "How many tweets?",
                "question_id": "qa2",
                "answers": [
                    answer(
                        ["We collect 1,971 tweets.", "FLOAT SELECTED: Table 1: Counts."],
                        spans=["1,971", "tweets"],
                    ),
                    answer([], spans=["1,971"]),
                ],
            },
        ],
    },
    "paperB": {
        "title": "Negation",
        "abstract": "Models fail on negation.",
        "full_text": [
            {"section_name": "Method", "paragraphs": ["Same text.", "Same text.", "We insert not."]}
        ],
        "qas": [
            {
                "question": "Do models handle negation?",
                "question_id": "qb1",
                "answers": [
                    answer(["Models fail on negation.", "Same text."], yes_no=False),
                    answer(["Same text."]),
                ],
            },
            {
                "question": "What is inserted?",
                "question_id": "qb2",
                "answers": [answer(["insert not"], free="not")],
            },
        ],
    },
    "paperC": {
        "title": "Encoders",
        "abstract": "",
        "full_text": [{"section_name": "Model", "paragraphs": ["We use BERT."]}],
        "qas": [
            {
                "question": "Which encoder?",
                "question_id": "qc1",
                "answers": [answer(["Not here."], spans=["BERT"])],
            }
        ],
    },
}
ELIGIBLE = {
    "qasper_qa1_0": "English",
    "qasper_qa1_1": "English language",
    "qasper_qa2_0": "1,971; tweets",
    "qasper_qb1_0": "no",
    "qasper_qb2_0": "not",
    "qasper_qc1_0": "BERT",
}


@pytest.fixture
def qasper_file(tmp_path) -> str:
    path = tmp_path / "qasper-test-v0.3.json"
    path.write_text(json.dumps(PAPERS))
    return str(path)


def split(path: str, n: int = 6, seed: int = 0) -> dict:
    return {s.id: s for s in Qasper(path=path).sources(n, seed, 0, words)}


def test_inclusion_rule_one_source_per_answerable_annotator_answer_with_evidence(qasper_file):
    # release: one source per annotator answer (qasper_000001/000002 share a prompt hash, one reference
    # each), spans joined by "; " (qasper_000019), yes/no as "yes"/"no", no unanswerable reference
    sources = split(qasper_file)
    assert {k: s.answers for k, s in sources.items()} == {k: [v] for k, v in ELIGIBLE.items()}
    assert sources["qasper_qa1_0"].question == sources["qasper_qa1_1"].question  # one prompt, two answers
    assert sources["qasper_qa1_0"].context == sources["qasper_qa1_1"].context
    assert sources["qasper_qb1_0"].metadata["answer_type"] == "yes_no"
    manifest = Qasper(path=qasper_file).manifest(6, 0)
    assert manifest["excluded"] == {"no_evidence": 1, "no_reference": 1, "unanswerable": 1}
    assert (manifest["papers"], manifest["questions"], manifest["answers"], manifest["eligible"]) == (
        3,
        5,
        9,
        6,
    )
    assert (manifest["evidence_aligned"], manifest["evidence_unaligned"]) == (6, 3)
    assert manifest["file"] == str(Path(qasper_file).resolve()) and len(manifest["sha256"]) == 64
    assert Qasper.max_new_tokens == 128 and Qasper.family is None  # LongBench's Qasper budget


def test_article_layout_segments_and_prompt(qasper_file):
    source = split(qasper_file)["qasper_qa1_0"]
    assert source.context == (
        f"{INSTRUCTION}\n\nArticle: Complaints on Twitter\n\nAbstract\n\nWe study complaints.\n\n"
        "Introduction\n\nComplaining is a speech act.\n\nWe collect 1,971 tweets.\n\n"
        "Data ::: Collection\n\nThe tweets are in English.\n\nA paragraph without a section."
    )
    roles = [(s.id, s.role) for s in source.segments]
    assert roles == [
        ("preamble", "instruction"),
        ("title", "heading"),
        ("h0", "heading"),
        ("p0.0", "passage"),
        ("h1", "heading"),
        ("p1.0", "passage"),
        ("p1.1", "passage"),
        ("h2", "heading"),
        ("p2.0", "passage"),
        ("p3.0", "passage"),  # no section name: no heading; the empty section is left out
    ]
    assert source.segments[-2].title == "Data ::: Collection"
    assert source.context.startswith("You are given a scientific article and a question.")
    assert source.question.startswith("\n\n Answer the question based on the above article")  # LongBench's
    assert source.question.endswith("Do not provide any explanation.\n\nQuestion: What language is studied?")
    assert source.answer_prefix == "Answer:"
    assert source.metadata["query"] == "What language is studied?"
    assert source.metadata["prompt_tokens"] == words(f"{source.context}\n{source.question}")
    # an empty abstract has no section
    assert [s.id for s in split(qasper_file)["qasper_qc1_0"].segments] == ["preamble", "title", "h1", "p1.0"]


def test_evidence_spans_by_hand(qasper_file):
    sources = split(qasper_file)
    a = sources["qasper_qa1_0"]
    # preamble, title line, "Abstract", its paragraph, "Introduction", then the first paragraph
    start = len(INSTRUCTION) + 2 + len("Article: Complaints on Twitter") + 2 + len("Abstract") + 2
    start += len("We study complaints.") + 2 + len("Introduction") + 2
    english = a.context.index("The tweets are in English.")
    assert a.evidence == [(english, english + 26), (start, start + 28)]
    assert [a.context[s:e] for s, e in a.evidence] == [
        "The tweets are in English.",
        "Complaining is a speech act.",
    ]
    assert [e["match"] for e in a.metadata["evidence"]] == ["exact", "exact"]
    # whitespace differences still map, to the paragraph as rendered
    b = sources["qasper_qa1_1"]
    assert [b.context[s:e] for s, e in b.evidence] == ["The tweets are in English."]
    assert b.metadata["evidence"] == [{"index": 0, "aligned": True, "match": "whitespace", "reason": None}]
    # a part of a paragraph maps to that part
    c = sources["qasper_qb2_0"]
    assert [c.context[s:e] for s, e in c.evidence] == ["insert not"]


def test_unalignable_evidence_is_recorded_and_never_drops_the_source(qasper_file):
    sources = split(qasper_file)
    tweets = sources["qasper_qa2_0"]
    assert [tweets.context[s:e] for s, e in tweets.evidence] == ["We collect 1,971 tweets."]
    caption = tweets.metadata["evidence"][1]
    assert caption["index"] == 1 and not caption["aligned"] and "FLOAT SELECTED" in caption["reason"]
    negation = sources["qasper_qb1_0"]  # the abstract maps; a paragraph present twice is ambiguous
    assert [negation.context[s:e] for s, e in negation.evidence] == ["Models fail on negation."]
    assert negation.metadata["evidence"][1]["reason"] == "ambiguous: found 2 times in the article"
    lost = sources["qasper_qc1_0"]  # nothing maps: kept, with no evidence span (coverage is then N/A)
    assert (
        lost.evidence == [] and lost.metadata["evidence"][0]["reason"] == "not found in the rendered article"
    )


def test_sampling_is_seeded_and_prefix_stable(qasper_file):
    task = Qasper(path=qasper_file)
    ids = {seed: [s.id for s in task.sources(3, seed, 0, words)] for seed in range(6)}
    assert ids[0] == [s.id for s in task.sources(3, 0, 0, words)]
    assert len({tuple(v) for v in ids.values()}) > 1
    assert [s.id for s in task.sources(5, 1, 0, words)][:3] == ids[1]
    with pytest.raises(ValueError, match="only 6 rows"):
        task.sources(7, 0, 0, words)


def test_scorer_is_whole_reference_containment(qasper_file):
    sources = split(qasper_file)
    task = Qasper(path=qasper_file)
    tweets = sources["qasper_qa2_0"]  # reference "1,971; tweets" normalises to "1 971 tweets"
    assert task.evaluate("They collect 1,971 tweets.", tweets).value == 1.0
    # the whole joined reference must be contained, as in the release: qasper_000019 ("Wang et al.;
    # CrowdFlower dataset") scored 0.0 for "...created by Wang et al. and the CrowdFlower dataset."
    assert task.evaluate("1,971 of the tweets", tweets).value == 0.0
    score = task.evaluate("English, mostly.", sources["qasper_qa1_0"])
    assert (score.value, score.correct, score.normalized) == (1.0, True, "english mostly")
    assert task.evaluate("It is French.", sources["qasper_qa1_0"]).correct is False
    assert task.evaluate("No.", sources["qasper_qb1_0"]).metrics == {"em": 1.0, "f1": 1.0}
    assert task.evaluate("Yes", sources["qasper_qb1_0"]).value == 0.0
    # containment is on characters, as the release's ``ref in pred``: "no" is found in "nothing"
    assert task.evaluate("Nothing is said.", sources["qasper_qb1_0"]).value == 1.0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: [d], "is a JSON list"),
        (lambda d: d["paperB"].__delitem__("qas"), "paper 'paperB': field 'qas' is not a list"),
        (
            lambda d: d["paperA"]["qas"][1]["answers"][0]["answer"].update(evidence="x"),
            r"paper 'paperA' qas\[1\] answers\[0\]: answer.evidence is not a list of strings",
        ),
        (lambda d: d["paperC"]["full_text"][0].update(paragraphs=[1]), r"full_text\[0\]: field 'paragraphs'"),
        (lambda d: d["paperC"]["qas"][0].update(question_id="qa1"), "question_id 'qa1' already names"),
    ],
)
def test_bad_layout_names_file_paper_and_field(tmp_path, mutate, message):
    data = json.loads(json.dumps(PAPERS))
    replaced = mutate(data)  # edits in place (None) or returns a replacement
    data = data if replaced is None else replaced
    path = tmp_path / "qasper-dev-v0.3.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as info:
        Qasper(path=str(path)).validate()
    assert str(path) in str(info.value) and "qasper-dataset.s3" in str(info.value)


def test_missing_or_wrong_path_says_where_the_data_lives(tmp_path):
    for path in ("", str(tmp_path / "nope.json")):
        with pytest.raises(ConfigError) as info:
            Qasper(path=path).validate()
        text = str(info.value)
        assert "qasper-test-and-evaluator-v0.3.tgz" in text and "qasper-test-v0.3.json" in text
        assert "https://qasper-dataset.s3.us-west-2.amazonaws.com/qasper-train-dev-v0.3.tgz" in text
    (tmp_path / "qasper-dev-v0.3.json").write_text("{}")
    with pytest.raises(ConfigError, match="did you mean .*qasper-dev-v0.3.json"):
        Qasper(path=str(tmp_path)).validate()
    with pytest.raises(ConfigError, match="no such file; did you mean .*qasper-dev-v0.3.json"):
        Qasper(path=str(tmp_path / "qasper-dev.json")).validate()
    (tmp_path / "qasper-test-and-evaluator-v0.3.tgz").write_bytes(b"\x1f\x8b")
    with pytest.raises(ConfigError, match="is the archive: extract it"):
        Qasper(path=str(tmp_path / "qasper-test-and-evaluator-v0.3.tgz")).validate()
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="is not a JSON file"):
        Qasper(path=str(tmp_path / "broken.json")).validate()
    with pytest.raises(ConfigError, match="holds no papers"):
        Qasper(path=str(tmp_path / "qasper-dev-v0.3.json")).validate()
    only = {
        "p": {
            **PAPERS["paperA"],
            "qas": [PAPERS["paperA"]["qas"][0] | {"answers": [answer(unanswerable=True)]}],
        }
    }
    (tmp_path / "none.json").write_text(json.dumps(only))
    with pytest.raises(ConfigError, match="no answerable question with evidence"):
        Qasper(path=str(tmp_path / "none.json")).validate()


def test_evidence_coverage_by_hand_on_a_rendered_source(tiny, qasper_file):
    """ERR/ECov over a Qasper source's aligned evidence, with hand-chosen kept positions per slot."""
    from kvx.diagnostics.alignment import align_evidence
    from kvx.diagnostics.coverage import slot_coverage

    source = split(qasper_file)["qasper_qa1_0"]
    prompt = tiny.encode(source.context, source.question, source.answer_prefix)
    alignment = align_evidence(tiny.tokenizer, prompt, list(source.evidence))
    assert alignment.ok
    # the tiny reader's tokenizer is one token per byte after "<|im_start|>" (1 token) "user\n" (5)
    shift = 6
    english, act = ((s + shift, e + shift) for s, e in source.evidence)
    assert alignment.spans == [set(range(*english)), set(range(*act))]  # 26 and 28 tokens
    kept = [
        set(range(english[0], english[0] + 13)),  # half of span 1 (13/26 >= 0.5), none of span 2
        set(range(*english)) | set(range(*act)),  # everything
        {0, 1, 2},  # no evidence
    ]
    values = slot_coverage(kept, alignment.spans)
    assert values["ecov"] == pytest.approx((1 + 2 + 0) / (3 * 2))
    assert values["err"] == pytest.approx((13 / 54 + 54 / 54 + 0 / 54) / 3)


@pytest.mark.slow
def test_end_to_end_run_measures_coverage_on_qasper(tmp_path, qasper_file, blank_store):
    """``python -m kvx task=qasper`` (a prestarted process): seed 6 draws one source with a mapped
    paragraph (and an unmapped caption) and one whose only evidence maps nowhere; both are run, coverage
    is measured for the first and not applicable, with its reason, for the second."""
    from mlflow.tracking import MlflowClient

    from kvx.testing import cli

    assert sorted(split(qasper_file, 2, seed=6)) == ["qasper_qa2_0", "qasper_qc1_0"]
    blank_store(tmp_path)
    args = [f"task.path={qasper_file}", "reader=tiny", "n_sources=2", "seed=6", "press=snapkv", "ratio=0.5"]
    done = cli.run("kvx", ["task=qasper", *args, "max_new_tokens=4", "progress=false"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kvx").experiment_id
    (cell,) = client.search_runs([exp], filter_string="tags.`kvx.role` = 'cell'")
    path = client.download_artifacts(cell.info.run_id, "records.jsonl", str(tmp_path / "dl"))
    records = {r["source_id"]: r for r in map(json.loads, Path(path).read_text().splitlines())}
    assert sorted(records) == ["qasper_qa2_0", "qasper_qc1_0"]
    assert all(r["status"] == "supported" for r in records.values())
    measured = records["qasper_qa2_0"]["diagnostics"]["coverage"]
    assert measured["status"] == "measured", measured
    values = measured["values"]
    assert values["n_spans"] == 1 and values["evidence_tokens"] == len("We collect 1,971 tweets.")
    assert 0.0 <= values["ecov"] <= 1.0 and 0.0 <= values["err"] <= 1.0
    lost = records["qasper_qc1_0"]["diagnostics"]["coverage"]
    assert lost["status"] == "not_applicable" and "no evidence spans" in lost["reason"]
