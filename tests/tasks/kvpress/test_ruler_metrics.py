"""kvpress's RULER score per answer, and where it differs from kvx's generated RULER scorer."""

from __future__ import annotations

import pytest

from kvx.tasks.kvpress.ruler_metrics import clean_prediction, metric_name, ruler_score
from kvx.tasks.scoring import string_match_all


@pytest.mark.parametrize(
    ("task", "metric"),
    [
        ("qa_1", "string_match_part"),
        ("qa_2", "string_match_part"),
        ("niah_single_1", "string_match_all"),
        ("niah_multivalue", "string_match_all"),
        ("vt", "string_match_all"),
        ("cwe", "string_match_all"),
        ("fwe", "string_match_all"),
    ],
)
def test_metric_by_task_family(task, metric):
    assert metric_name(task) == metric


def test_control_characters_are_deleted_after_stripping():
    assert clean_prediction("  12\n34\t\x00 ") == "1234"
    assert clean_prediction("\n  a b  \n") == "a b"  # stripped, cleaned, stripped again


def test_niah_multivalue_counts_the_share_of_values():
    values = ["2718281", "3141592", "1414213", "1732050"]
    answer = " 2718281, 3141592 and\n1414213."
    assert ruler_score(answer, values, "niah_multivalue") == 3 / 4


def test_qa_needs_any_one_reference():
    # SQuAD's several annotator answers: any one found scores 1
    assert ruler_score("Denver Broncos", ["Denver Broncos", "The Denver Broncos"], "qa_1") == 1.0
    assert ruler_score("the broncos", ["Denver Broncos", "Broncos"], "qa_1") == 1.0
    assert ruler_score("Carolina", ["Denver Broncos", "Broncos"], "qa_1") == 0.0
    # the same answer under string_match_all would score the share found: 1 of 2
    assert ruler_score("the broncos", ["Denver Broncos", "Broncos"], "niah_single_1") == 0.5


def test_a_value_broken_by_a_newline_is_found_by_kvpress_not_by_kvx():
    answer = "The special magic number is: 27\n18281"
    assert ruler_score(answer, ["2718281"], "niah_single_1") == 1.0
    assert string_match_all(answer, ["2718281"]) == 0.0


def test_otherwise_the_same_as_kvx_string_match_all():
    answer = "The special magic numbers are 2718281 and 3141592."
    for references in (["2718281"], ["2718281", "9999999"], ["A", "b"]):
        assert ruler_score(answer, references, "niah_multikey_1") == string_match_all(answer, references)
