"""ragscale's benchmark loaders (MuSiQue, NQ-Open, TriviaQA rc.wikipedia, LongMemEval) on miniatures in
their official layouts, the raw policies, fixed slices (``task.ids``), alias-max EM/F1, NQ's
empty-reference exclusion, and one panel of all four through ``python -m kvx`` and its aggregate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from kvx.core.errors import ConfigError
from kvx.core.identity import component
from kvx.judges.longmemeval import LongMemEval as LongMemEvalJudge
from kvx.pipeline.transform import transform_source
from kvx.tasks.hotpotqa import HotpotQA
from kvx.tasks.longmemeval import LongMemEval
from kvx.tasks.musique import MuSiQue
from kvx.tasks.nq_open import NQOpen
from kvx.tasks.rag import PoolRow, RagJsonl, raw_indices, raw_policy
from kvx.tasks.squad import SquadV2
from kvx.tasks.triviaqa import TriviaQA
from kvx.testing.cli import SOLO_LEASE, run_kvx
from kvx.transforms.retrieval import BM25TopK


def count(text: str) -> int:
    return len(text.split())


# --- miniatures in the official layouts ---------------------------------------------------------


def musique_file(folder: Path, n: int = 3) -> str:
    rows = []
    for r in range(n):
        paragraphs = [
            {
                "idx": i,
                "title": f"Title {r}-{i}",
                "paragraph_text": f"Paragraph {i} of row {r} tells filler{i}.",
                "is_supporting": i in (2, 12),
            }
            for i in range(20)
        ]
        paragraphs[12]["paragraph_text"] = f"The river of row {r} flows into Lake{r}."
        rows.append(
            {
                "id": f"2hop__{r}",
                "paragraphs": paragraphs,
                "question": f"Which lake does the river of row {r} flow into?",
                "question_decomposition": [{"id": 1}, {"id": 2}],
                "answer": f"Lake{r}",
                "answer_aliases": [f"Lake {r}", f"Lake{r}"],
                "answerable": r != 1,  # one unanswerable row, as in the full files
            }
        )
    path = folder / "musique_ans_v1.0_dev.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def nq_file(folder: Path) -> str:
    rows = [
        {
            "question": f"who wrote book {i}",
            # row 1's only reference is empty once normalized; row 0 has one empty alias beside real ones
            "answers": [")"] if i == 1 else [f"Author{i}", f"A. Author{i}", *(["?"] if i == 0 else [])],
            "ctxs": [
                {"id": f"w{i}{j}", "title": f"Page {j}", "text": f"Book {j} was written by Author{j}."}
                for j in range(4)
            ],
        }
        for i in range(3)
    ]
    path = folder / "nq-test.json"  # DPR's retriever-results layout: one JSON list
    path.write_text(json.dumps(rows))
    return str(path)


def triviaqa_files(folder: Path) -> str:
    pages = folder / "evidence" / "wikipedia"
    pages.mkdir(parents=True)
    filler = " ".join(f"w{k}" for k in range(99))
    # 250 words: passages #0 (one "zebra"), #1 (none), #2 (50 words, two "zebra")
    (pages / "Zebra.txt").write_text(f"zebra {filler} {filler} x " + "zebra zebra " + " ".join(["y"] * 48))
    (pages / "Other.txt").write_text("Horses are animals.")
    data = [
        {
            "Question": "Which zebra?",
            "QuestionId": "tc_1",
            "Answer": {"Value": "Sun", "Aliases": ["Sol", "The Sun"], "NormalizedAliases": ["sun", "sol"]},
            "EntityPages": [
                {"Filename": "Zebra.txt", "Title": "Zebra"},
                {"Filename": "Other.txt", "Title": "Other"},
            ],
        },
        {"Question": "Nothing?", "QuestionId": "tc_2", "Answer": {"Value": "x"}, "EntityPages": []},
        {
            "Question": "Which horses?",
            "QuestionId": "tc_3",
            "Answer": {"Value": "animals", "Aliases": []},
            "EntityPages": [{"Filename": "Other.txt", "Title": "Other"}],
        },
    ]
    (folder / "qa").mkdir()
    path = folder / "qa" / "wikipedia-dev.json"
    path.write_text(json.dumps({"Data": data, "Domain": "Wikipedia", "Split": "dev", "Version": 1.0}))
    return str(path)


def longmemeval_file(folder: Path, n_sessions: int = 6) -> str:
    questions = []
    for q in range(2):
        sessions, dates, ids = [], [], []
        for s in range(n_sessions):
            said = f"I adopted a puppy named Rex{q}." if s in (1, 4) else f"Let us talk about topic {s}."
            sessions.append(
                [
                    {"role": "user", "content": said, "has_answer": s == 4},
                    {"role": "assistant", "content": f"Reply {s}."},
                ]
            )
            dates.append(f"2023/05/{20 - s:02d} (Sat) 0{s}:00")  # supplied newest first
            ids.append(f"answer_{q}_{s}" if s == 4 else f"sess_{q}_{s}")
        questions.append(
            {
                "question_id": f"q{q}" if q == 0 else f"q{q}_abs",
                "question_type": "single-session-user",
                "question": "What is my puppy named?",
                "answer": f"Rex{q}",
                "question_date": "2023/06/01 (Thu) 10:00",
                "haystack_dates": dates,
                "haystack_session_ids": ids,
                "haystack_sessions": sessions,
                "answer_session_ids": [f"answer_{q}_4"],
            }
        )
    path = folder / "longmemeval_s.json"
    path.write_text(json.dumps(questions))
    return str(path)


# --- loaders ------------------------------------------------------------------------------------


def test_musique_raw_is_the_first_eight_and_compressors_read_all_twenty(tmp_path):
    # ragscale section 4 and B.6: the raw control is the released naive_top_k policy, "supplied order
    # and ... the first eight paragraphs from the fixed candidate pool of up to twenty"
    task = MuSiQue(path=musique_file(tmp_path))
    task.validate()
    sources = task.sources(2, 0, 0, count)
    assert {s.id for s in sources} == {"musique_2hop__0", "musique_2hop__2"}  # unanswerable row dropped
    s = next(s for s in sources if s.id == "musique_2hop__0")
    assert s.metadata["candidate_ids"] == [f"p{i}" for i in range(8)] and s.metadata["n_candidates"] == 20
    assert s.metadata["raw_policy"] == "supplied order, first 8 of 20"
    assert s.answers == ["Lake0", "Lake 0"]  # answer then aliases, deduplicated
    assert [s.context[a:b] for a, b in s.evidence] == ["Paragraph 2 of row 0 tells filler2."]  # p12 is cut
    assert s.pool is not None and len([g for g in s.pool.segments if g.role == "passage"]) == 20
    assert [s.pool.context[a:b] for a, b in s.pool.evidence][1] == "The river of row 0 flows into Lake0."
    # the compressor reads the pool: BM25 top-1 finds p12, beyond the raw input, with its evidence
    out = transform_source(BM25TopK(k=1), "bm25_top_k", s)
    assert out.info["input"] == "pool" and "Lake0" in out.source.context
    assert (out.info["evidence_kept"], out.info["evidence_total"]) == (1, 2)
    assert out.source.metadata is s.metadata  # the raw input's record: its raw policy, its token count
    # the artifact key (the row's digest) covers what the compressor saw
    assert s.digest(reader_free=True) != dataclasses.replace(s, pool=None).digest(reader_free=True)
    matched = MuSiQue(path=task.path, raw="all").sources(1, 0, 0, count)[0]  # the matched-input check
    assert matched.pool is None and matched.metadata["raw_policy"] == "supplied order, all 20"
    assert task.manifest(2, 0)["compress_from"].startswith("pool")


def test_musique_alias_max_em_f1_and_no_yes_no_rule(tmp_path):
    task = MuSiQue(path=musique_file(tmp_path))
    s = task.sources(1, 0, 0, count)[0]
    s = dataclasses.replace(s, answers=["Paris", "City of Paris"])
    score = task.evaluate("Paris city", s)
    # "paris city" vs "paris": P 1/2, R 1 -> 2/3; vs "city of paris": P 2/2, R 2/3 -> 0.8; max 0.8
    assert score.metrics == {"em": 0.0, "f1": pytest.approx(0.8)}
    assert score.value == 0.5  # containment: "paris" is in the answer, "city of paris" is not
    assert task.evaluate("the city of Paris!", s).metrics["em"] == 1.0
    # ragscale's release (src/ragscale/scoring.py, _token_overlap): an empty normalized string scores one
    # only against an empty one ("The" and "a." both normalize to empty)
    assert task.evaluate("The", dataclasses.replace(s, answers=["a."])).metrics == {"em": 1.0, "f1": 1.0}
    assert task.evaluate("The", s).metrics == {"em": 0.0, "f1": 0.0}
    yes = dataclasses.replace(s, answers=["yes"])
    # MuSiQue's SQuAD-style F1 (the release's token_f1 has no yes/no rule; paper A.3 names it for
    # HotpotQA alone): P 1/3, R 1 -> 0.5; HotpotQA's rule gives yes/no no partial credit
    assert task.evaluate("yes it is", yes).metrics["f1"] == pytest.approx(0.5)
    assert HotpotQA().evaluate("yes it is", yes).metrics["f1"] == 0.0


def test_nq_open_excludes_a_row_whose_every_reference_normalizes_to_empty(tmp_path):
    # ragscale A.3 (test2104's ")") and its release (src/ragscale/scoring.py, _references: "Reference
    # answers normalize to empty strings" is refused only when every reference does)
    task = NQOpen(path=nq_file(tmp_path))
    task.validate()
    assert task.row_ids() == ["test0", "test2"]  # ids: the file's split and the 0-based position; test0 kept
    manifest = task.manifest(2, 0)
    assert manifest["excluded"] == [{"id": "test1", "reason": "every reference normalizes to empty: [')']"}]
    s = {x.id: x for x in task.sources(2, 0, 0, count)}["nq_test2"]
    assert s.answers == ["Author2", "A. Author2"] and s.metadata["candidate_ids"] == [
        "w20",
        "w21",
        "w22",
        "w23",
    ]
    assert s.metadata["raw_policy"] == "supplied order, all 4" and s.pool is None
    assert task.evaluate("a author2", s).metrics["em"] == 1.0  # alias-max, articles and punctuation removed
    ids = tmp_path / "slice.txt"
    ids.write_text("test2\ntest1\n")
    with pytest.raises(ConfigError, match="'test1' is excluded before analysis: every reference"):
        NQOpen(path=task.path, ids=str(ids)).validate()
    # the official NQ-open jsonl alone has no pools; a FiD-style JSONL with ids and `answer` reads
    (tmp_path / "NQ-open.dev.jsonl").write_text(json.dumps({"question": "q", "answer": ["a"]}) + "\n")
    with pytest.raises(ConfigError, match="has no ctxs.*DPR/FiD"):
        NQOpen(path=str(tmp_path / "NQ-open.dev.jsonl")).validate()
    fid = tmp_path / "fid.jsonl"
    fid.write_text(
        json.dumps({"id": "x7", "question": "q", "answer": ["Bee"], "ctxs": [{"title": "t", "text": "Bee"}]})
    )
    assert [r.id for r in NQOpen(path=str(fid)).rows()] == ["x7"]


def test_triviaqa_pool_is_the_bm25_top_passages_of_the_rows_own_pages(tmp_path):
    task = TriviaQA(path=triviaqa_files(tmp_path), pool_size=2)
    task.validate()
    assert task.row_ids() == ["tc_1", "tc_3"]
    assert task.manifest(2, 0)["excluded"] == [{"id": "tc_2", "reason": "no Wikipedia evidence page"}]
    s = {x.id: x for x in task.sources(2, 0, 0, count)}["triviaqa_tc_1"]
    # 4 passages (3 of Zebra.txt, 1 of Other.txt); best first: #2 (two "zebra" in 50 words), then #0
    assert s.metadata["candidate_ids"] == ["Zebra.txt#2", "Zebra.txt#0"]
    assert s.metadata["n_passages"] == 4 and s.metadata["raw_policy"] == "supplied order, all 2"
    assert s.answers == ["Sun", "Sol", "The Sun", "sun", "sol"]
    assert task.evaluate("the sun.", s).metrics == {"em": 1.0, "f1": 1.0}
    (tmp_path / "evidence" / "wikipedia" / "Other.txt").unlink()
    with pytest.raises(ConfigError, match="no page .*Other.txt"):
        TriviaQA(path=task.path).sources(2, 0, 0, count)


def test_longmemeval_pool_and_prompt_follow_longmemeval(tmp_path):
    task = LongMemEval(path=longmemeval_file(tmp_path), pool_size=3)
    task.validate()
    s = {x.id: x for x in task.sources(2, 0, 0, count)}["longmemeval_q0"]
    # BM25 over the user turns: the two puppy sessions, then the first of the tied rest (session 0);
    # the pool is then sorted by date (haystack supplied newest first)
    assert s.metadata["candidate_ids"] == ["answer_0_4", "sess_0_1", "sess_0_0"]
    # run_generation.py's direct-reading prompt, JSON history without has_answer, written out by hand
    history = "".join(
        "\n### Session {}:\nSession Date: {}\nSession Content:\n{}\n".format(
            n,
            f"2023/05/{20 - k:02d} (Sat) 0{k}:00",
            "\n"
            + json.dumps(
                [
                    {"role": "user", "content": said},
                    {"role": "assistant", "content": f"Reply {k}."},
                ]
            ),
        )
        for n, (k, said) in enumerate(
            [
                (4, "I adopted a puppy named Rex0."),
                (1, "I adopted a puppy named Rex0."),
                (0, "Let us talk about topic 0."),
            ],
            1,
        )
    )
    template = (
        "I will give you several history chats between you and a user. Please answer the question based on "
        "the relevant chat history.\n\n\nHistory Chats:\n\n{}\n\nCurrent Date: {}\nQuestion: {}\nAnswer:"
    )
    expected = template.format(history, "2023/06/01 (Thu) 10:00", "What is my puppy named?")
    assert s.context + s.question == expected and s.answer_prefix == ""
    # the answer session (session 4 of the haystack) is the evidence, from its date line on
    assert [s.context[a:b].splitlines()[0] for a, b in s.evidence] == ["Session Date: 2023/05/16 (Sat) 04:00"]
    assert s.metadata["question_type"] == "single-session-user" and s.metadata["answer"] == "Rex0"
    judge = LongMemEvalJudge()
    assert judge.applies(s) is None and judge.template(s).startswith("I will give you a question")
    abstain = {x.id: x for x in task.sources(2, 0, 0, count)}["longmemeval_q1_abs"]
    assert judge.template(abstain).startswith("I will give you an unanswerable question")
    assert task.evaluate("It is Rex0.", s).value == 1.0


# --- raw policies, slices, bad input ------------------------------------------------------------


def test_raw_policies_choose_passages_in_supplied_order_and_ties_keep_the_earlier():
    texts = ["cats purr", "the harbour opens", "dogs bark", "the harbour opens", "harbour harbour ships"]
    row = PoolRow(
        "r", "When does the harbour open?", tuple((f"p{i}", "", t) for i, t in enumerate(texts)), ("x",)
    )
    assert raw_indices("all", 0, row) == [0, 1, 2, 3, 4]
    assert raw_indices("first_k", 2, row) == [0, 1] and raw_indices("first_k", 0, row) == [0, 1, 2, 3, 4]
    # "harbour" scores p4 best; p1 and p3 tie: the earlier (p1) is kept; kept in supplied order
    assert raw_indices("bm25_top_k", 2, row) == [1, 4]
    assert raw_indices("bm25_top_k", 9, row) == [0, 1, 2, 3, 4]
    assert raw_policy(2, 5, "bm25_top_k") == "bm25 top 2 of 5, supplied order"
    assert (
        raw_policy(2, 5) == "supplied order, first 2 of 5"
        and raw_policy(0, 5, "all") == "supplied order, all 5"
    )


def test_a_bm25_raw_input_reaches_the_source_and_its_manifest(tmp_path):
    path = tmp_path / "pools.jsonl"
    texts = ["cats purr", "the harbour opens", "harbour harbour ships"]
    row = {"id": "r", "question": "When does the harbour open?", "answers": ["dawn"]}
    row["candidates"] = [{"id": f"p{i}", "text": t} for i, t in enumerate(texts)]
    path.write_text(json.dumps(row))
    task = RagJsonl(path=str(path), raw="bm25_top_k", raw_k=1, compress_from="pool")
    task.validate()
    s = task.sources(1, 0, 0, count)[0]
    assert (
        s.metadata["candidate_ids"] == ["p2"]
        and s.metadata["raw_policy"] == "bm25 top 1 of 3, supplied order"
    )
    assert s.pool is not None and s.pool.metadata["candidate_ids"] == ["p0", "p1", "p2"]
    assert task.manifest(1, 0)["raw_policy"] == ["bm25 top 1 of 3, supplied order"]


def test_raw_policy_fields_are_checked_and_leave_old_identities_alone(tmp_path):
    with pytest.raises(ConfigError, match="task.raw='bm25_topk' is not one of .*did you mean 'bm25_top_k'"):
        MuSiQue(raw="bm25_topk")
    with pytest.raises(ConfigError, match="task.raw='bm25' is not one of .*did you mean 'bm25_top_k'"):
        MuSiQue(raw="bm25")  # too short for difflib: the one choice it begins
    with pytest.raises(ConfigError, match="needs task.raw_k >= 1"):
        NQOpen(path=nq_file(tmp_path), raw="bm25_top_k").validate()
    with pytest.raises(ConfigError, match="task.raw_k=3 is unused by task.raw=all"):
        NQOpen(path=nq_file(tmp_path), raw_k=3).validate()
    with pytest.raises(ConfigError, match="task.compress_from='all' is not one of"):
        SquadV2(compress_from="all")
    # fields added after stores existed stay out of the identity at their defaults
    assert set(component("squad_v2_rag", SquadV2())["fields"]) == {
        "raw_k",
        "unanswerable",
        "path",
        "pool_size",
    }
    assert "raw" in component("squad_v2_rag", SquadV2(raw="bm25_top_k", raw_k=3))["fields"]
    assert set(component("hotpotqa", HotpotQA())["fields"]) == {"path"}
    assert "compress_from" not in component("musique", MuSiQue())["fields"]


def test_task_ids_fix_the_slice_in_file_order(tmp_path):
    path = tmp_path / "pools.jsonl"
    rows = [
        {"id": f"q{i}", "question": "?", "answers": ["a"], "candidates": [{"text": "t"}]} for i in range(5)
    ]
    path.write_text("\n".join(map(json.dumps, rows)))
    ids = tmp_path / "slice.txt"
    ids.write_text("# frozen slice\nq3\n\nq0\nq4\n")
    task = RagJsonl(path=str(path), ids=str(ids))
    task.validate()
    assert [s.id for s in task.sources(2, 0, 0, count)] == ["pools_q3", "pools_q0"]
    assert [s.id for s in task.sources(2, 7, 0, count)] == [
        "pools_q3",
        "pools_q0",
    ]  # the seed chooses nothing
    assert task.manifest(3, 0)["ids_file"] == str(ids) and len(task.manifest(3, 0)["ids_sha256"]) == 64
    with pytest.raises(ConfigError, match="n_sources=4 but task.ids=.* lists only 3 rows"):
        task.sources(4, 0, 0, count)
    ids.write_text("q3\nq33\n")
    with pytest.raises(ConfigError, match="row 'q33' is not in the data; did you mean 'q3'"):
        task.validate()
    ids.write_text("q3\nq3\n")
    with pytest.raises(ConfigError, match=r"lists \['q3'\] more than once"):
        task.validate()
    # HotpotQA (its _id), in the RULER/official format
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(
        json.dumps(
            [
                {
                    "_id": f"h{i}",
                    "question": "?",
                    "answer": "a",
                    "context": [["T", ["s."]]],
                    "supporting_facts": [],
                }
                for i in range(3)
            ]
        )
    )
    ids.write_text("h2\nh0\n")
    task = HotpotQA(path=str(hotpot), ids=str(ids))
    task.validate()
    assert [s.id for s in task.sources(2, 0, 0, count)] == ["hotpotqa_h2", "hotpotqa_h0"]
    assert task.manifest(2, 0)["ids_file"] == str(ids)
    ids.write_text("h9\n")
    with pytest.raises(ConfigError, match="row 'h9' is not in the data"):
        HotpotQA(path=str(hotpot), ids=str(ids)).validate()


@pytest.mark.parametrize(
    ("task", "url"),
    [
        (MuSiQue, "github.com/StonyBrookNLP/musique"),
        (NQOpen, "github.com/google-research-datasets/natural-questions"),
        (TriviaQA, "nlp.cs.washington.edu/triviaqa"),
        (LongMemEval, "huggingface.co/datasets/xiaowu0162/longmemeval-cleaned"),
    ],
)
def test_a_missing_data_path_names_where_the_public_data_lives(tmp_path, task, url):
    with pytest.raises(ConfigError, match=f"task.path is empty.*{url}"):
        task().validate()
    with pytest.raises(ConfigError, match=f"no such file or folder.*{url}"):
        task(path=str(tmp_path / "absent.json")).validate()


# --- all four through python -m kvx and its aggregate ---------------------------------------------


@pytest.mark.slow
def test_all_four_loaders_run_end_to_end_with_one_artifact_per_row(tmp_path, blank_store):
    from kvx.aggregate.__main__ import main

    blank_store(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    # MuSiQue (its compressor reads the stored pool) gets a two-reader panel; one reader each for the
    # others keeps the test's CPU small (artifact sharing across readers is test_rag_panel's subject)
    tasks = {
        "musique": ["task=musique", f"task.path={musique_file(data)}", "reader.seed=0,1"],
        "nq_open": ["task=nq_open", f"task.path={nq_file(data)}", "reader.seed=0"],
        "triviaqa": [
            "task=triviaqa",
            f"task.path={triviaqa_files(data)}",
            "task.pool_size=2",
            "reader.seed=0",
        ],
        "longmemeval": [
            "task=longmemeval",
            f"task.path={longmemeval_file(data)}",
            "task.pool_size=3",
            "reader.seed=0",
        ],
    }
    common = ["reader=tiny", "transform=bm25_top_k", "transform.k=1", "press=none", "n_sources=2"]
    common += ["max_new_tokens=3", "diagnostics=[]", "progress=false", *SOLO_LEASE]
    for args in tasks.values():
        run_kvx(tmp_path, *args, *common)
    artifacts = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "artifacts").rglob("*.json")]
    assert len(artifacts) == 8  # one per row, shared by both readers
    assert sum(a.get("input") == "pool" for a in artifacts) == 2  # MuSiQue's compressor read the pool
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    out = tmp_path / "agg"
    args = ["--tracking-uri", uri, "--out", str(out), "--no-log", "--quiet", "--no-plots", "--strict"]
    assert main([*args, "--boot", "20", "--splits", "20"]) == 0  # --strict: no validation problem
    assert pd.read_csv(out / "problems.csv").empty
    panel = pd.read_csv(out / "audit_panel.csv")
    assert set(panel["task"]) == {"musique"} and (panel["n_readers"] == 2).all()
    assert (panel["artifact_check"] == "identical text artifact").all()
    matrix = pd.read_csv(out / "matrix.csv")
    assert set(matrix["task"]) - {"pooled"} == set(tasks)
    compressed = matrix[matrix["compressor"] != "FullCache"]
    assert (compressed["n_supported"] == compressed["n_sources"]).all() and (compressed["n_error"] == 0).all()
