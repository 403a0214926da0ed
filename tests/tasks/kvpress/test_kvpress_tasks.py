"""kvpress's datasets as tasks: the loader on local copies in the official format (hub layout,
``save_to_disk``, single files, a cached hub snapshot), its refusals, and the tasks' sources and scores."""

import json
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.kvpress.dataset import PERFECT, load_rows
from kvx.tasks.kvpress.infinitebench import InfiniteBench
from kvx.tasks.kvpress.longbench import LongBench, LongBenchE, LongBenchV2
from kvx.tasks.kvpress.loogle import LooGLE


def words(text: str) -> int:
    return len(text.split())


def longbench_rows(task: str, n: int, budget: int = 52, lengths=None) -> dict:
    """Rows as kvpress's longbench/create_huggingface_dataset.py writes them."""
    return {
        "context": [f"Story {i}: the hero goes to Paris.\n\nNow, answer the question.\n\n" for i in range(n)],
        "question": [f"Question: where does hero {i} go?\n\n" for i in range(n)],
        "answer_prefix": ["Answer:"] * n,
        "answers": [["Paris", "to Paris"] for _ in range(n)],
        "all_classes": [None] * n,
        "length": list(lengths or range(n)),
        "_id": [f"id{i}" for i in range(n)],
        "task": [task] * n,
        "max_new_tokens": [budget] * n,
    }


def save(rows: dict, folder: Path) -> str:
    import datasets

    datasets.Dataset.from_dict(rows).save_to_disk(str(folder))
    return str(folder)


@pytest.fixture
def hub_layout(tmp_path) -> str:
    """Xnhyacinth/LongBench's layout: one folder of test parquet files per task."""
    import datasets

    root = tmp_path / "LongBench"
    for task, n, budget in (("narrativeqa", 5, 148), ("hotpotqa", 3, 52)):
        (root / task).mkdir(parents=True)
        table = datasets.Dataset.from_dict(longbench_rows(task, n, budget))
        table.to_parquet(str(root / task / "test-00000-of-00001.parquet"))
    return str(root)


def test_hub_layout_reads_the_subsets_folder_and_its_budget(hub_layout):
    task = LongBench(path=hub_layout, subset="hotpotqa")
    task.validate()
    assert len(task.rows()) == 3 and task.max_new_tokens == 52
    assert LongBench(path=hub_layout).max_new_tokens == 148  # narrativeqa, the default subset


def test_sources_keep_kvpress_prompt_and_are_seeded(hub_layout):
    task = LongBench(path=hub_layout)
    first = task.sources(3, 0, 0, words)
    assert [s.id for s in first] == [s.id for s in task.sources(3, 0, 0, words)]
    assert [s.id for s in task.sources(2, 0, 0, words)] == [s.id for s in first[:2]]  # a prefix
    source = first[0]
    row = int(source.id.rsplit("_", 1)[1])
    assert source.id == f"longbench_narrativeqa_{row:06d}"
    assert source.context == f"Story {row}: the hero goes to Paris.\n\nNow, answer the question.\n\n"
    assert source.question == f"Question: where does hero {row} go?\n\n"
    assert source.answer_prefix == "Answer:" and source.answers == ["Paris", "to Paris"]
    assert source.metadata["_id"] == f"id{row}" and source.metadata["task"] == "narrativeqa"
    assert source.metadata["prompt_tokens"] == words(f"{source.context}\n{source.question}")
    with pytest.raises(ValueError, match="only 5 rows"):
        task.sources(6, 0, 0, words)


def test_manifest_names_the_data(hub_layout):
    manifest = LongBench(path=hub_layout).manifest(2, 0)
    assert manifest["path"] == str(Path(hub_layout).resolve()) and manifest["snapshot"] is None
    assert manifest["data_dir"] == "narrativeqa" and manifest["rows"] == 5
    assert manifest["max_new_tokens"] == 148 and manifest["fingerprint"]


@pytest.mark.parametrize("layout", ["save_to_disk", "dataset_dict", "jsonl", "parquet"])
def test_other_local_formats_are_narrowed_by_the_task_column(tmp_path, layout):
    import datasets

    rows = {
        k: a + b
        for (k, a), b in zip(longbench_rows("trec", 2, 84).items(), longbench_rows("qasper", 3, 148).values())
    }
    table = datasets.Dataset.from_dict(rows)
    path = (
        tmp_path
        / {"save_to_disk": "saved", "dataset_dict": "dict", "jsonl": "rows.jsonl", "parquet": "rows.parquet"}[
            layout
        ]
    )
    if layout == "save_to_disk":
        table.save_to_disk(str(path))
    elif layout == "dataset_dict":
        datasets.DatasetDict({"test": table}).save_to_disk(str(path))
    elif layout == "jsonl":
        table.to_json(str(path))
    else:
        table.to_parquet(str(path))
    trec = LongBench(path=str(path), subset="trec")
    trec.validate()
    assert len(trec.rows()) == 2 and trec.max_new_tokens == 84
    assert len(LongBench(path=str(path), subset="qasper").rows()) == 3


def test_cached_hub_snapshot_is_read_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "datasets--Xnhyacinth--LongBench"
    save(longbench_rows("trec", 2, 84), repo / "snapshots" / "abc123" / "trec")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    task = LongBench(subset="trec")
    task.validate()
    assert len(task.rows()) == 2
    assert task.manifest(1, 0)["snapshot"] == str(repo / "snapshots" / "abc123")


def test_uncached_hub_id_offline_is_refused_at_once(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        LongBench().validate()


def test_refusals_name_the_path_and_what_is_wrong(tmp_path, hub_layout):
    with pytest.raises(ConfigError, match="no such file or folder"):
        LongBench(path=str(tmp_path / "missing")).validate()
    with pytest.raises(ConfigError, match="'narrativeq' is not one of .* did you mean 'narrativeqa'"):
        LongBench(path=hub_layout, subset="narrativeq").validate()
    with pytest.raises(
        ConfigError, match=r"no row of subset 'qasper'; its 'task' column holds \['hotpotqa', 'narrativeqa'\]"
    ):
        LongBench(path=hub_layout, subset="qasper").validate()
    rows = longbench_rows("trec", 2)
    del rows["answers"]
    with pytest.raises(ConfigError, match=r"no column\(s\) \['answers'\]"):
        LongBench(path=save(rows, tmp_path / "noanswers"), subset="trec").validate()
    rows = longbench_rows("trec", 2)
    rows["max_new_tokens"] = [84, 52]
    with pytest.raises(ConfigError, match=r"max_new_tokens \[52, 84\]; a cell decodes with one budget"):
        LongBench(path=save(rows, tmp_path / "mixed"), subset="trec").validate()
    (tmp_path / "rows.csv").write_text("context\nx\n")
    with pytest.raises(ConfigError, match="a .csv file"):
        LongBench(path=str(tmp_path / "rows.csv")).validate()
    rows = longbench_rows("trec", 2)
    del rows["task"]
    with pytest.raises(ConfigError, match="cannot tell the rows of subset 'trec'"):
        LongBench(path=save(rows, tmp_path / "notask"), subset="trec").validate()


def test_longbench_scores_with_the_tasks_metric(hub_layout):
    task = LongBench(path=hub_layout)
    source = task.sources(1, 0, 0, words)[0]
    right = task.evaluate(" to Paris.", source)
    assert (right.value, right.correct, right.normalized, right.metrics) == (
        1.0,
        True,
        "to Paris.",
        {"qa_f1": 1.0},
    )
    partial = task.evaluate("He goes to Paris", source)  # "to Paris": P 2/4, R 1 -> 2/3
    assert partial.value == pytest.approx(2 / 3) and not partial.correct


def test_rouge_tasks_count_an_identical_answer_correct(tmp_path):
    rows = longbench_rows("gov_report", 1, 532)
    rows["answers"] = [["The report finds two problems. It recommends a fix."]]
    task = LongBench(path=save(rows, tmp_path / "gov"), subset="gov_report")
    score = task.evaluate(
        "The report finds two problems. It recommends a fix.", task.sources(1, 0, 0, words)[0]
    )
    assert PERFECT <= score.value < 1.0 and score.correct and set(score.metrics) == {"rouge_l"}


def test_longbench_e_folder_buckets_and_unstripped_scoring(tmp_path):
    rows = longbench_rows("lcc", 3, 84, lengths=[3999, 4000, 9000])
    rows["answers"] = [["    return a + b"]] * 3
    root = tmp_path / "LongBench"
    save(rows, root / "lcc_e")
    task = LongBenchE(path=str(root), subset="lcc")
    task.validate()
    sources = {s.metadata["length"]: s for s in task.sources(3, 0, 0, words)}
    assert {k: s.metadata["length_bucket"] for k, s in sources.items()} == {
        3999: "0-4k",
        4000: "4-8k",
        9000: "8k+",
    }
    assert sources[3999].id.startswith("longbench_e_lcc_")
    assert task.evaluate("    return a + b", sources[3999]).value == 1.0  # LongBench would lstrip: 0.86
    assert LongBench(path=str(root), subset="lcc").folder() == "lcc"


def test_longbench_v2_reads_0shot_and_scores_the_letter(tmp_path):
    rows = {
        "context": ["Please read the following text and answer the question below.\n<text>\nT\n</text>\n\n"],
        "question": [
            "What is the correct answer to this question: Q\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\n\n"
            'Format your response as follows: "The correct answer is (insert answer here)."'
        ],
        "answer_prefix": [""],
        "answer": ["B"],
        "difficulty": ["hard"],
        "length": ["short"],
        "domain": ["Single-Document QA"],
        "_id": ["x"],
        "max_new_tokens": [16],
    }
    root = tmp_path / "v2"
    save(rows, root / "0shot")
    task = LongBenchV2(path=str(root))
    task.validate()
    source = task.sources(1, 0, 0, words)[0]
    assert source.id == "longbench_v2_all_000000" and source.metadata["difficulty"] == "hard"
    assert task.max_new_tokens == 16
    assert task.evaluate("**The correct answer is (B)**", source).correct
    assert not task.evaluate("The correct answer is (A)", source).correct


def loogle_rows(task: str, answers: list[str], budget: int) -> dict:
    n = len(answers)
    return {
        "context": ["Please answer the question based on the long texts below. \nText"] * n,
        "question": ["\nQuestion: Q?\n"] * n,
        "answer_prefix": ["Answer: "] * n,
        "answer": answers,
        "task": [task] * n,
        "max_new_tokens": [budget] * n,
    }


def test_loogle_qa_and_cloze(tmp_path):
    root = tmp_path / "loogle"
    save(loogle_rows("shortdep_qa", ["the cat sat on the mat"], 300), root / "shortdep_qa")
    cloze = json.dumps({"<mask-0>": "Bob Smith", "<mask-1>": "Paris"})
    save(loogle_rows("shortdep_cloze", [cloze], 50), root / "shortdep_cloze")
    qa = LooGLE(path=str(root))
    qa.validate()
    score = qa.evaluate("the cat sat on a mat", qa.sources(1, 0, 0, words)[0])
    assert score.value == 1.0 and score.metrics["rouge-2"] == pytest.approx(0.6)
    assert score.metrics["bleu1"] == pytest.approx(5 / 6)
    task = LooGLE(path=str(root), subset="shortdep_cloze")
    assert task.max_new_tokens == 50
    score = task.evaluate("{'<mask-0>': 'Bob', '<mask-1>': 'Paris'}", task.sources(1, 0, 0, words)[0])
    assert score.value == 0.5 and score.metrics == {"exact_match": 0.5, "partial_match": 1.0}
    assert score.details == {"exact": 1, "exact_count": 2, "partial": 2, "partial_count": 2}


def test_infinitebench_task(tmp_path):
    rows = {
        "context": [
            "There is an important info hidden inside a lot of irrelevant text.\n\nThe pass key is 71432.\n\n"
        ],
        "question": ["What is the pass key?"],
        "answer_prefix": ["The pass key is:"],
        "answer": [["71432"]],
        "task": ["passkey"],
        "max_new_tokens": [26],
    }
    task = InfiniteBench(path=save(rows, tmp_path / "ib"))
    task.validate()
    source = task.sources(1, 0, 0, words)[0]
    assert task.max_new_tokens == 26
    assert task.evaluate(" 71432", source).correct and not task.evaluate(" 7143", source).correct
    with pytest.raises(ConfigError, match="'longbook_sum_eng' is not one of"):
        InfiniteBench(path=str(tmp_path / "ib"), subset="longbook_sum_eng").validate()


def test_loader_reads_a_rewritten_copy_again(tmp_path):
    path = tmp_path / "rows"
    save(longbench_rows("trec", 2), path)
    assert len(load_rows(str(path), "trec", "trec", 1)) == 2
    assert len(LongBench(path=str(path), subset="trec").rows()) == 2


@pytest.mark.slow
def test_end_to_end_run_on_a_local_copy(tmp_path, hub_layout, blank_store):
    """``python -m kvx task=longbench task.path=<copy> reader=tiny press=knorm n_sources=2``: two
    records, each scored with LongBench's qa F1, the task's budget from the data unless overridden."""
    from mlflow.tracking import MlflowClient

    from kvx.testing import cli

    blank_store(tmp_path)
    args = ["task=longbench", f"task.path={hub_layout}", "reader=tiny", "press=knorm", "n_sources=2"]
    done = cli.run("kvx", [*args, "max_new_tokens=4", "progress=false"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kvx").experiment_id
    (cell,) = client.search_runs([exp], filter_string="tags.`kvx.role` = 'cell'")
    path = client.download_artifacts(cell.info.run_id, "records.jsonl", str(tmp_path / "dl"))
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert sorted(r["source_id"] for r in records) == sorted(
        s.id for s in LongBench(path=hub_layout).sources(2, 0, 0, words)
    )
    assert all(r["status"] == "supported" and set(r["full"]["metrics"]) == {"qa_f1"} for r in records)
