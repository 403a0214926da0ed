"""RULER-style generators: determinism, sizing, exact evidence spans and answer semantics."""

import collections
import math
import re

import pytest

from kvx.tasks.ruler import (
    CommonWords,
    FrequentWords,
    NiahMultikey,
    NiahMultiquery,
    NiahMultivalue,
    NiahSingle,
    VariableTracking,
    fit_units,
    weave,
)


def words(text: str) -> int:
    return len(text.split())


def essay_or_skip():
    pytest.importorskip("long_context_eval")


ALL = [
    NiahSingle(),
    NiahMultikey(),
    NiahMultivalue(haystack="noise"),
    NiahMultiquery(haystack="noise"),
    NiahSingle(type_needle_k="uuids", type_needle_v="uuids", haystack="needle"),
    VariableTracking(num_chains=2),
    CommonWords(),
    FrequentWords(),
]


@pytest.mark.parametrize("task", ALL, ids=lambda task: type(task).__name__)
def test_deterministic_per_seed_and_seeds_differ(task):
    first = task.sources(3, 7, 1000, words)
    assert [s.digest() for s in first] == [s.digest() for s in task.sources(3, 7, 1000, words)]
    other = task.sources(3, 8, 1000, words)
    assert all(a.context != b.context for a, b in zip(first, other))
    assert len({s.context for s in first}) == 3
    assert [s.digest() for s in task.sources(5, 7, 1000, words)[:3]] == [s.digest() for s in first]


@pytest.mark.parametrize("task", ALL, ids=lambda task: type(task).__name__)
@pytest.mark.parametrize("target", [1000, 4000])
def test_prompt_fills_target_without_exceeding_it(task, target):
    for source in task.sources(3, 0, target, words):
        tokens = words(f"{source.context}\n{source.question}")
        assert tokens == source.metadata["prompt_tokens"]
        assert target - 40 <= tokens <= target
        assert task.evaluate(" ".join(source.answers), source).value == 1.0
        assert task.evaluate("", source).value == 0.0


def test_ids_and_prompt_text():
    source = NiahSingle().sources(4, 0, 500, words)[3]
    assert source.id == "ruler_niah_single_000003"
    key = source.metadata["queries"][0]
    assert source.context.startswith("A special magic number is hidden within the following text.")
    assert source.question == f"What is the special magic number for {key} mentioned in the provided text?"
    assert source.answer_prefix == f"The special magic number for {key} mentioned in the provided text is"
    assert re.fullmatch(r"[a-z]+-[a-z]+", key)
    assert re.fullmatch(r"\d{7}", source.answers[0])


def test_niah_single_evidence_is_the_needle():
    for source in NiahSingle().sources(5, 3, 1000, words):
        key, value = source.metadata["queries"][0], source.answers[0]
        [(start, end)] = source.evidence
        assert source.context[start:end] == f"One of the special magic numbers for {key} is: {value}."
        assert source.context.count(value) == 1
        depth = source.metadata["depths"][0]
        assert 0 <= depth <= 100
        assert abs(start / len(source.context) - depth / 100) < 0.1


def test_depths_vary_across_sources():
    depths = [s.metadata["depths"][0] for s in NiahSingle().sources(8, 0, 1000, words)]
    assert len(set(depths)) == 8


@pytest.mark.parametrize(
    "task", [NiahMultikey(), NiahMultivalue(haystack="noise"), NiahMultiquery(haystack="noise")]
)
def test_multi_needle_evidence_covers_exactly_the_queried_needles(task):
    needle = re.compile(r"One of the special magic numbers for (.+) is: (\d{7})\.")
    for source in task.sources(3, 1, 2000, words):
        found = [needle.fullmatch(source.context[start:end]) for start, end in source.evidence]
        assert all(found)
        assert sorted(m.group(2) for m in found) == sorted(source.answers)
        assert {m.group(1) for m in found} == set(source.metadata["queries"])
        assert len(source.evidence) == task.num_needle_q * task.num_needle_v
        assert len(source.metadata["depths"]) == len(source.evidence)
        for key in source.metadata["queries"]:
            assert source.context.count(f" for {key} is:") == task.num_needle_v


def test_plural_prompt_for_several_answers():
    source = NiahMultiquery(haystack="noise").sources(1, 0, 1000, words)[0]
    assert source.context.startswith("Some special magic numbers are hidden")
    assert source.question.startswith("What are all the special magic numbers for ")
    assert ", and " in source.question


def test_essay_haystack_uses_paul_graham_essays():
    essay_or_skip()
    task = NiahMultivalue()
    source = task.sources(1, 0, 2000, words)[0]
    assert "The grass is green" not in source.context
    assert len(source.evidence) == 4
    for start, end in source.evidence:
        assert source.context[start:end].startswith("One of the special magic numbers for ")
    assert 1960 <= words(f"{source.context}\n{source.question}") <= 2000


def test_uuid_values():
    source = NiahSingle(type_needle_v="uuids").sources(1, 0, 1000, words)[0]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", source.answers[0]
    )
    assert "special magic uuid for" in source.question


def test_variable_tracking_evidence_is_the_queried_chain_in_order():
    for source in VariableTracking(num_chains=2, num_hops=3).sources(3, 2, 1000, words):
        names = source.answers
        assert len(names) == 4
        value = re.search(r"assigned the value (\d{5})", source.question).group(1)
        texts = [source.context[start:end] for start, end in source.evidence]
        assert texts == [f"VAR {names[0]} = {value}"] + [
            f"VAR {b} = VAR {a}" for a, b in zip(names, names[1:])
        ]
        assert [start for start, _ in source.evidence] == sorted(start for start, _ in source.evidence)
        task = source.context.split("they are:  ", 1)[1].split("\n", 1)[1]  # after RULER's example
        assert sum(line.startswith("VAR ") for line in task.splitlines()) == 8


def test_common_words_answer_is_the_most_frequent_words():
    source = CommonWords(num_cw=5, freq_cw=8, freq_ucw=2).sources(1, 0, 1500, words)[0]
    task = source.context.rsplit("Below is a numbered list", 1)[1]  # after RULER's answered example
    listed = re.findall(r"\d+\. (\S+)", task.split("\n", 1)[1])
    counts = collections.Counter(listed)
    assert {word for word, n in counts.items() if n == 8} == set(source.answers)
    assert set(counts.values()) == {8, 2}
    assert len(source.evidence) == 5 * 8  # every occurrence of each common word


def test_common_words_follow_ruler_frequencies_by_length():
    assert CommonWords().sources(1, 0, 1000, words)[0].metadata["freq_cw"] == 6
    assert CommonWords().sources(1, 0, 4096, words)[0].metadata["freq_cw"] == 30


def test_frequent_words_answer_is_the_top_three_coded_words():
    source = FrequentWords().sources(1, 0, 2000, words)[0]
    counts = collections.Counter(source.context.split("coded words. ", 1)[1].split())
    ranked = [word for word, _ in counts.most_common() if word != "..."]
    assert set(ranked[:3]) == set(source.answers)
    assert counts[ranked[2]] > counts[ranked[3]]
    assert len(source.evidence) == sum(counts[word] for word in ranked[:3])


def test_too_small_target_is_an_error():
    with pytest.raises(ValueError, match="too small"):
        CommonWords().sources(1, 0, 50, words)


@pytest.mark.parametrize(
    "make",
    [
        lambda: NiahSingle(haystack="grass"),
        lambda: NiahSingle(type_needle_v="emoji"),
        lambda: FrequentWords(alpha=1),
    ],
)
def test_bad_config_is_rejected(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("hint", [0, 3, 9, 50, 999])
def test_fit_units_finds_largest_fit_in_log_calls(hint):
    calls = []

    def measure(k):
        calls.append(k)
        return 10 * k + 5

    assert fit_units(measure, 100, 0, 1000, hint) == (9, 95)
    assert len(calls) <= 2 * math.log2(1000) + 2


def test_fit_units_respects_bounds():
    assert fit_units(lambda k: k, 10**6, 2, 40, 0) == (40, 40)
    with pytest.raises(ValueError, match="too small"):
        fit_units(lambda k: k + 100, 50, 0, 10, 5)


def test_weave_places_inserts_and_reports_their_spans():
    text, spans, which = weave(["a", "b", "c"], [(3, "Z", True), (1, "X", False), (1, "Y", True)], " ")
    assert text == "a X Y b c Z"
    assert [text[s:e] for s, e in spans] == ["Y", "Z"]
    assert which == [2, 0]
