"""``needle_in_haystack`` on a local copy in kvpress's format: kvpress's construction (reserve, depth,
wrapper) reproduced exactly with a tokenizer whose tokens are words, the one-source-per-point rule
and the ROUGE score."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.tasks.kvpress.needle import RESERVE, WRAPPER, NeedleInHaystack
from kvx.tasks.kvpress.needle_metrics import needle_scores

NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
QUESTION = "What is the best thing to do in San Francisco?"
PREFIX = "Answer: The best thing to do in San Francisco is"
ESSAYS = " ".join(f"word{i}." if i % 9 == 8 else f"word{i}" for i in range(900))


def words(text: str) -> int:
    return len(text.split())


def write(folder: Path, **changes: object) -> str:
    """The dataset's one row, as a parquet file in kvpress's columns."""
    import datasets

    row = {
        "context": ESSAYS,
        "needle": NEEDLE,
        "question": QUESTION,
        "answer_prefix": PREFIX,
        "max_new_tokens": 100,
        **changes,
    }
    path = folder / "test.parquet"
    datasets.Dataset.from_list([row]).to_parquet(str(path))
    return str(path)


def kvpress_context(max_context_length: int, depth: int) -> str:
    """kvpress's ``insert_needle_in_haystack`` with a tokenizer whose tokens are words (encode: split,
    decode: join with spaces)."""
    needle_tokens, essay_tokens = NEEDLE.split(), ESSAYS.split()
    kept = essay_tokens[: max_context_length - len(needle_tokens) - 150]
    at = int(len(kept) * depth / 100)
    return WRAPPER.format(context=" ".join(kept[:at] + needle_tokens + kept[at:]))


@pytest.fixture()
def path(tmp_path: Path) -> str:
    return write(tmp_path)


def test_registered():
    assert registry("task").get("needle_in_haystack") is NeedleInHaystack
    assert NeedleInHaystack.hub_id == "alessiodevoto/paul_graham_essays"


@pytest.mark.parametrize("depth", [0, 10, 33, 50, 77, 100])
@pytest.mark.parametrize("length", [300, 700, 1500])
def test_kvpress_construction_word_for_word(path, depth, length):
    task = NeedleInHaystack(path=path, needle_depth=depth)
    task.validate()
    (source,) = task.sources(1, 0, length, words)
    assert source.context == kvpress_context(length, depth)
    (start, end) = source.evidence[0]
    assert source.context[start:end] == NEEDLE
    assert (source.question, source.answer_prefix, source.answers) == (QUESTION, PREFIX, [NEEDLE])
    haystack = min(length - words(NEEDLE) - RESERVE, words(ESSAYS))
    assert source.metadata["haystack_tokens"] == haystack
    assert source.metadata["needle_at_tokens"] == int(haystack * depth / 100)
    assert source.id == f"needle_in_haystack_{length}_{depth:03d}"


def test_a_tokenizer_with_several_tokens_a_word_cuts_at_a_word(path):
    def chars(text: str) -> int:  # one token per 3 characters
        return -(-len(text) // 3)

    (source,) = NeedleInHaystack(path=path, needle_depth=40).sources(1, 0, 1000, chars)
    body = source.context.removeprefix("This is a very long story book: <book> ").removesuffix(" </book>.")
    before, after = body.split(f" {NEEDLE} ")
    room = 1000 - chars(NEEDLE) - RESERVE
    haystack = f"{before} {after}"
    assert chars(haystack) <= room and ESSAYS.startswith(haystack)
    assert chars(ESSAYS[: len(haystack) + 8]) > room  # the next word does not fit
    assert chars(before) <= int(source.metadata["haystack_tokens"] * 40 / 100)


def test_one_source_per_point_and_the_reserve(path):
    task = NeedleInHaystack(path=path)
    with pytest.raises(ValueError, match="n_sources=1"):
        task.sources(2, 0, 1000, words)
    with pytest.raises(ValueError, match="n_sources=1"):
        task.check_budget(2, 0, 1000, words)
    # the needle (21 words) and kvpress's 150-token reserve need 171 tokens
    with pytest.raises(
        ValueError, match="context_tokens=170 is too small: the shortest prompt of this task has 171"
    ):
        task.check_budget(1, 0, 170, words)
    with pytest.raises(ValueError, match="170 is too small"):
        task.sources(1, 0, 170, words)
    (source,) = task.sources(1, 0, 171, words)
    assert source.context == WRAPPER.format(context=NEEDLE)


def test_budget_and_settings(tmp_path, path):
    assert NeedleInHaystack(path=path).max_new_tokens == 100
    with pytest.raises(ConfigError, match=r"task.needle_depth=101 must be a percentage"):
        NeedleInHaystack(path=path, needle_depth=101).validate()
    with pytest.raises(ConfigError, match=r"task.needle_depth=-1"):
        NeedleInHaystack(path=path, needle_depth=-1).validate()
    other = tmp_path / "other"
    other.mkdir()
    import datasets

    datasets.Dataset.from_list([{"context": ESSAYS, "question": QUESTION}]).to_parquet(
        str(other / "t.parquet")
    )
    with pytest.raises(ConfigError, match="needle"):
        NeedleInHaystack(path=str(other / "t.parquet")).validate()


def test_scored_by_kvpress_rouge(path):
    task = NeedleInHaystack(path=path)
    (source,) = task.sources(1, 0, 1000, words)
    whole = task.evaluate(f" {NEEDLE}\n", source)
    assert whole.correct and whole.value == 1.0
    assert sorted(whole.metrics) == sorted(f"rouge-{m}_{s}" for m in ("1", "2", "l") for s in "rpf")
    # the needle's tail: 11 of its 19 distinct words (hand-computed in test_needle_metrics)
    tail = task.evaluate("eat a sandwich and sit in Dolores Park on a sunny day.", source)
    assert tail.value == 11 / 19 and not tail.correct
    assert tail.metrics["rouge-1_r"] == 1.0 and tail.metrics["rouge-2_p"] == 11 / 20
    assert task.evaluate("", source).value == 0.0


def test_the_same_numbers_as_the_rouge_package():
    """kvpress's own scorer, where installed: ``Rouge().get_scores(needle, answer)`` on random answers."""
    rouge = pytest.importorskip("rouge")
    rng = random.Random(0)
    pool = [*NEEDLE.split(), "the", "park.", ".", "Park", "sandwich,", "sunny"]
    for _ in range(300):
        answer = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 25)))
        if not answer.strip(" ."):
            continue
        want = rouge.Rouge().get_scores(NEEDLE, answer.strip())[0]
        got = needle_scores(NEEDLE, answer)
        for metric, stats in want.items():
            assert got[metric] == pytest.approx(stats, abs=1e-12), (answer, metric)


def test_the_preset_sweeps_the_depth_by_length_grid_and_every_point_passes_preflight(path, tmp_path):
    from kvx.testing.cli import composed, plan

    cfg = composed("+experiment=kvpress/needle_in_haystack", return_hydra=True)
    params = cfg.hydra.sweeper.params
    assert params["task.needle_depth"] == ",".join(str(d) for d in range(0, 101, 10))
    assert params["context_tokens"] == "1024,2048,4096,8192,16384,32768"
    # kvpress's evaluate_config.yaml: knorm at 0.5, the dataset's budget; one source per point
    assert (cfg.task.needle_depth, cfg.ratio, cfg.n_sources, cfg.max_new_tokens) == (50, 0.5, 1, None)
    assert cfg.hydra.runtime.choices["press"] == "knorm"
    (sweep,) = plan(
        "+experiment=kvpress/needle_in_haystack",
        "reader=tiny",
        f"task.path={path}",
        f"outputs_dir={tmp_path}",
    )
    assert len(sweep["cells"]) == 11 * 6
