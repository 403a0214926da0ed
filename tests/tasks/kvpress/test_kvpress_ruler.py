"""``kvpress_ruler`` on a local copy in ``simonjegou/ruler``'s hub layout (``<length>/test-*.parquet``):
the length folder, the task's rows and budget, and kvpress's RULER score."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.tasks.kvpress.ruler import RULER_TASKS, KvpressRuler


def words(text: str) -> int:
    return len(text.split())


def row(task: str, answer: list[str], budget: int, length: int) -> dict:
    return {
        "context": f"A special magic number is hidden within the following text ({length}).",
        "question": "What is the special magic number for lucky-cat mentioned in the provided text? ",
        "answer_prefix": "The special magic number for lucky-cat mentioned in the provided text is",
        "answer": answer,
        "task": task,
        "max_new_tokens": budget,
    }


@pytest.fixture()
def copy(tmp_path: Path) -> str:
    import datasets

    for length in (4096, 8192):
        rows = [
            row("niah_single_1", ["2718281"], 128, length),
            row("niah_multivalue", ["1", "2", "3", "4"], 128, length),
            row("qa_1", ["Denver Broncos", "Broncos"], 32, length),
            row("qa_1", ["France"], 32, length),
        ]
        (tmp_path / str(length)).mkdir()
        datasets.Dataset.from_list(rows).to_parquet(
            str(tmp_path / str(length) / "test-00000-of-00001.parquet")
        )
    return str(tmp_path)


def test_registered_with_rulers_thirteen_tasks():
    assert registry("task").get("kvpress_ruler") is KvpressRuler
    assert KvpressRuler.hub_id == "simonjegou/ruler"
    assert len(RULER_TASKS) == 13 and RULER_TASKS[-2:] == ("qa_1", "qa_2")


def test_the_length_folder_and_the_tasks_rows(copy):
    task = KvpressRuler(path=copy, data_dir="8192", subset="qa_1")
    task.validate()
    assert task.max_new_tokens == 32
    sources = task.sources(2, 0, 8192, words)
    assert {s.context for s in sources} == {
        "A special magic number is hidden within the following text (8192)."
    }
    assert sorted(s.answers[0] for s in sources) == ["Denver Broncos", "France"]
    assert KvpressRuler(path=copy, subset="niah_single_1").max_new_tokens == 128
    with pytest.raises(ValueError, match="only 2 rows"):
        task.sources(3, 0, 8192, words)


def test_settings_are_checked(copy):
    with pytest.raises(ConfigError, match="task.data_dir='4k' must be a context length"):
        KvpressRuler(path=copy, data_dir="4k").validate()
    with pytest.raises(ConfigError, match="task.subset='qa_3'"):
        KvpressRuler(path=copy, subset="qa_3").validate()
    with pytest.raises(ConfigError, match="no row of subset 'qa_2'"):
        KvpressRuler(path=copy, subset="qa_2").validate()


def test_scored_as_kvpress_scores_each_task(copy):
    niah = KvpressRuler(path=copy, subset="niah_single_1")
    (source,) = niah.sources(1, 0, 4096, words)
    broken = niah.evaluate(" 27182\n81.\n", source)  # kvpress deletes the newline: 2718281 is found
    assert (broken.value, broken.correct, broken.normalized) == (1.0, True, "2718281.")
    multivalue = KvpressRuler(path=copy, subset="niah_multivalue")
    (source,) = multivalue.sources(1, 0, 4096, words)
    assert multivalue.evaluate("1, 2 and 4", source).value == 3 / 4  # string_match_all
    qa = KvpressRuler(path=copy, subset="qa_1")
    broncos = next(s for s in qa.sources(2, 0, 4096, words) if s.answers[0] == "Denver Broncos")
    assert qa.evaluate("the broncos", broncos).value == 1.0  # string_match_part: one reference suffices


def test_hydra_reads_the_length_as_the_folders_name():
    from kvx.cli.sources import instantiate
    from kvx.testing.cli import composed

    cfg = composed("task=kvpress_ruler", "task.data_dir=16384", "task.subset=vt")
    task = instantiate(cfg, "task")
    assert (task.data_dir, task.subset, task.folder()) == ("16384", "vt", "16384")


def test_the_preset_is_kvpress_leaderboard_at_4096_tokens():
    from kvx.testing.cli import composed

    cfg = composed("+experiment=kvpress/ruler", return_hydra=True)
    params = cfg.hydra.sweeper.params
    assert tuple(params["task.subset"].split(",")) == RULER_TASKS
    assert [float(r) for r in params["ratio"].split(",")] == [0.25, 0.5, 0.75, 0.875]
    # evaluation/leaderboard.sh's first loop, less the presses kvx does not have
    leaderboard = [
        "random",
        "knorm",
        "snapkv",
        "expected_attention",
        "streaming_llm",
        "tova",
        "observed_attention",
        "qfilter",
    ]
    leaderboard += ["pyramidkv", "lagkv", "keydiff", "adakv_compactor", "cur", "kvzip"]
    kept = params["press"].split(",")
    assert kept == [p for p in leaderboard if p != "qfilter"]  # its filters come from the hub
    assert (cfg.task.data_dir, cfg.n_sources, cfg.max_new_tokens) == ("4096", 500, None)
