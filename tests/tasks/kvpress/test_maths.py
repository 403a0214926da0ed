"""``aime25`` and ``math500`` on local copies in kvpress's format: rows as sources, the rows' long
budget, the boxed-answer score and the ``answered`` metric."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvx.core.registry import registry
from kvx.tasks.kvpress.maths import Aime25, Math500

AIME = "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$."
MATH = "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates."


def words(text: str) -> int:
    return len(text.split())


def write(path: Path, rows: list[dict]) -> str:
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return str(path)


def row(question: str, answer: object, budget: int = 4096) -> dict:
    return {
        "context": "",
        "question": question,
        "answer_prefix": "",
        "answer": answer,
        "max_new_tokens": budget,
    }


@pytest.fixture()
def aime(tmp_path: Path) -> str:
    # AIME answers are integers; the table may store them as numbers
    return write(tmp_path / "aime25.parquet", [row(AIME, 70), row("Another problem.", 588)])


@pytest.fixture()
def math500(tmp_path: Path) -> str:
    return write(
        tmp_path / "math500.parquet", [row(MATH, r"\left( 3, \frac{\pi}{2} \right)"), row("1+1?", "2")]
    )


def test_registered_with_kvpress_hub_ids():
    assert registry("task").get("aime25") is Aime25 and Aime25.hub_id == "alessiodevoto/aime25"
    assert registry("task").get("math500") is Math500 and Math500.hub_id == "alessiodevoto/math500"


def test_rows_become_sources_with_the_rows_budget(aime):
    task = Aime25(path=aime)
    task.validate()
    assert task.max_new_tokens == 4096
    sources = task.sources(2, 0, 1024, words)
    assert sorted(s.answers[0] for s in sources) == ["588", "70"]
    first = next(s for s in sources if s.answers == ["70"])
    assert (first.context, first.question, first.id) == ("", AIME, "aime25_all_000000")


def test_aime25_reads_the_last_box(aime):
    task = Aime25(path=aime)
    source = next(s for s in task.sources(2, 0, 1024, words) if s.answers == ["70"])
    score = task.evaluate(r"First \boxed{16}, then b = 21, 49: \boxed{70}.", source)
    assert (score.value, score.correct, score.normalized, score.metrics) == (
        1.0,
        True,
        "70",
        {"answered": 1.0},
    )
    bare = task.evaluate("70", source)  # no box: the whole text up to a "}" is read, and it is right
    assert bare.correct and bare.metrics == {"answered": 0.0}
    wrong = task.evaluate(r"\boxed{70} or maybe \boxed{16}", source)
    assert (wrong.value, wrong.correct, wrong.normalized) == (0.0, False, "16")


def test_math500_reads_the_first_box(math500):
    task = Math500(path=math500)
    sources = task.sources(2, 0, 1024, words)
    simple = next(s for s in sources if s.answers == ["2"])
    assert task.evaluate(r"\boxed{2}, not \boxed{3}", simple).correct
    missing = task.evaluate("2", simple)
    assert (missing.value, missing.normalized, missing.metrics) == (0.0, "", {"answered": 0.0})
    # kvpress cuts the box at its first "}", so an answer with braces is never right
    polar = next(s for s in sources if s.question == MATH)
    cut = task.evaluate(r"\boxed{\left( 3, \frac{\pi}{2} \right)}", polar)
    assert (cut.correct, cut.normalized) == (False, r"\left( 3, \frac{\pi")


@pytest.mark.parametrize(("name", "rows"), [("aime25", 30), ("math500", 500)])
def test_presets_run_every_problem_with_the_rows_budget(name, rows):
    from kvx.testing.cli import composed

    cfg = composed(f"+experiment=kvpress/{name}", return_hydra=True)
    assert (cfg.n_sources, cfg.max_new_tokens, cfg.ratio) == (rows, None, 0.5)
    assert cfg.hydra.runtime.choices["press"] == "knorm" and cfg.hydra.runtime.choices["task"] == name
