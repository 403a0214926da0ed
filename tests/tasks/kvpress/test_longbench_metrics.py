"""LongBench's and LongBench-v2's per-sample metrics, pinned by hand on LongBench-style answers."""

import pytest

from kvx.tasks.kvpress import longbench_metrics as lb
from kvx.tasks.kvpress.longbench_v2_metrics import correct_choice


def test_qa_f1_normalises_and_scores_token_overlap():
    # "the" and punctuation go; 1 shared token of 4 predicted and 1 referenced: P 1/4, R 1 -> F1 0.4
    assert lb.qa_f1("The capital is Paris, France.", "Paris") == pytest.approx(0.4)
    assert lb.qa_f1("Paris", "paris!") == 1.0
    assert lb.qa_f1("", "") == 0.0  # no shared token, unlike SQuAD v2's empty-equals-empty


def test_score_is_the_best_reference():
    # "the city of Paris": P 1, R 1/3 -> 0.5; "Paris" -> 1.0
    assert lb.score("narrativeqa", "Paris", ["the city of Paris"], []) == pytest.approx(0.5)
    assert lb.score("narrativeqa", "Paris", ["the city of Paris", "Paris"], []) == 1.0
    assert lb.score("narrativeqa", "Paris", [], []) == 0.0


def test_rouge_l_counts_distinct_words_and_unions_lcs_words():
    # ref words the,cat,is,on,the,mat: 5 distinct (m); hypothesis 5 distinct (n); the LCS
    # the-cat-on-the-mat holds 4 distinct words -> R = P = 4/5, F = 0.8 (less the 1e-8 smoothing)
    assert lb.rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.8, abs=1e-7)
    assert lb.rouge_l("", "anything") == 0.0  # "Hypothesis is empty": LongBench scores 0
    assert lb.rouge_l("...", "anything") == 0.0  # only sentence separators: nothing left
    identical = lb.rouge_l("a summary. of two sentences", "a summary. of two sentences")
    assert identical == pytest.approx(1 - 5e-9, abs=1e-12)


def test_classification_share_and_substring_classes():
    classes = ["City", "Country", "Other location"]
    assert lb.classification("City", "City", classes) == 1.0
    assert lb.classification("City or Country", "City", classes) == 0.5
    assert lb.classification("Country", "City", classes) == 0.0
    # "Other" is in the reference and not it: dropped, so "Other location" alone is named
    assert lb.classification("Other location", "Other location", ["Other", "Other location"]) == 1.0


def test_classification_keeps_longbenchs_skip_after_a_removal():
    # found = [Other, Oth, Other location]; removing "Other" shifts "Oth" under the loop's next index,
    # which then reads "Other location": "Oth" is never looked at and stays -> 1 / 2
    classes = ["Other", "Oth", "Other location"]
    assert lb.classification("Other location", "Other location", classes) == 0.5


def test_retrieval_and_count_are_shares_of_the_numbers_named():
    assert lb.retrieval("Paragraph 12", "Paragraph 12") == 1.0
    assert lb.retrieval("Paragraph 12 or Paragraph 3", "Paragraph 12") == 0.5
    assert lb.retrieval("Paragraph 120", "Paragraph 12") == 0.0
    assert lb.retrieval("I do not know", "Paragraph 12") == 0.0
    with pytest.raises(ValueError, match="names no 'Paragraph N'"):
        lb.retrieval("1", "12")
    assert lb.count("There are 7 unique paragraphs out of 10", "7") == 0.5
    assert lb.count("7", "7") == 1.0


def test_fuzz_ratio_is_difflib_rounded_half_to_even():
    assert lb.fuzz_ratio("abc", "abc") == 1.0 and lb.fuzz_ratio("", "") == 1.0
    assert lb.fuzz_ratio("", "abc") == 0.0
    # one shared character in 8 + 8: 2 x 1 / 16 = 12.5% -> 12 (half to even) -> 0.12
    assert lb.fuzz_ratio("abbbbbbb", "accccccc") == 0.12
    # "return a + b" inside "    return a + b": 2 x 12 / 28 = 85.71% -> 0.86
    assert lb.fuzz_ratio("return a + b", "    return a + b") == 0.86


def test_code_similarity_reads_the_first_code_line():
    pred = "\n```python\n# the next line\n    return a + b\n```"
    assert lb.code_similarity(pred, "    return a + b") == 1.0
    assert lb.code_similarity("```\n// c\n```", "x = 1") == 0.0  # no code line: "" against the line


def test_longbench_strips_leading_whitespace_and_longbench_e_does_not():
    # LongBench scores the prediction lstripped ("return a + b": 0.86 above); LongBench-E as written
    pred, ref = "    return a + b", "    return a + b"
    assert lb.score("lcc", pred, [ref], []) == 0.86
    assert lb.score("lcc", pred, [ref], [], length_split=True) == 1.0


def test_few_shot_tasks_keep_the_first_line():
    pred = "\n  Human\nQuestion: What is the next one?\nType: Location"
    assert lb.prepare("trec", pred) == "Human"
    assert lb.prepare("trec", pred, length_split=True) == "  Human"
    assert lb.prepare("narrativeqa", "  two\nlines") == "two\nlines"
    classes = ["Human", "Location"]
    assert lb.score("trec", pred, ["Human"], classes) == 1.0  # "Location" of line 3 is not read


@pytest.mark.parametrize(
    ("length", "bucket"), [(0, "0-4k"), (3999, "0-4k"), (4000, "4-8k"), (7999, "4-8k"), (8000, "8k+")]
)
def test_longbench_e_length_buckets(length, bucket):
    assert lb.length_bucket(length) == bucket


def test_every_kvpress_longbench_task_has_a_metric_and_e_tasks_are_among_them():
    assert len(lb.METRIC) == 16 and set(lb.E_TASKS) <= set(lb.METRIC)
    assert lb.METRIC["gov_report"] is lb.rouge_l and lb.METRIC["trec"] is lb.classification


@pytest.mark.parametrize(
    ("answer", "letter", "right"),
    [
        ("The correct answer is (B)", "B", True),
        ("The correct answer is B.", "B", True),
        ("**The correct answer is (B)**", "B", True),  # markdown bold removed first
        ("The correct answer is (C)", "B", False),
        ("the correct answer is (B)", "B", False),  # case-sensitive, as LongBench
        ("B", "B", False),  # the format is required
    ],
)
def test_longbench_v2_choice(answer, letter, right):
    assert correct_choice(answer, letter) is right
