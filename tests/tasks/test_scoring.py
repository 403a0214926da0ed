"""Scorer semantics pinned with hand-computed cases (RULER string match, KVDiagnosis containment)."""

import pytest

from kvx.tasks.scoring import containment, normalize_answer, string_match_all, string_match_part


def test_string_match_all_is_fraction_of_references_found():
    assert string_match_all("1234567 and 7654321", ["1234567", "7654321"]) == 1.0
    assert string_match_all("only 1234567 here", ["1234567", "7654321"]) == 0.5
    assert string_match_all("nothing", ["1234567", "7654321", "x"]) == 0.0
    assert string_match_all("Words: ALPHA, beta", ["alpha", "Beta", "gamma", "delta"]) == 0.5


def test_string_match_part_is_any_reference_found():
    assert string_match_part("It is PARIS.", ["Lyon", "paris"]) == 1.0
    assert string_match_part("It is Nice.", ["Lyon", "paris"]) == 0.0


@pytest.mark.parametrize("scorer", [string_match_all, string_match_part, containment])
def test_empty_references_are_an_error(scorer):
    with pytest.raises(ValueError):
        scorer("anything", [])


def test_normalize_answer_lowercases_strips_punctuation_and_collapses_spaces():
    assert normalize_answer("  The Answer:  Paris,\tFrance! ") == "the answer paris france"
    # only ASCII punctuation (the release's string.punctuation): curly quotes and dashes stay
    assert normalize_answer("\u201cParis\u201d\u2014France") == "\u201cparis\u201d\u2014france"
    assert normalize_answer("Skip\u2013gram; CBOW") == "skip\u2013gram cbow"
    assert normalize_answer("New-York's") == "new york s"


def test_containment_paper_examples():
    assert containment("The answer is Paris, France.", ["paris"]) == 1.0
    assert containment("The answer is Paris, France.", ["Paris", "Lyon"]) == 0.5
    assert containment("It was in New York City.", ["New-York"]) == 1.0
    assert containment("Lyon", ["Paris"]) == 0.0


def test_containment_is_plain_substring_after_normalisation():
    assert containment("nothing", ["no"]) == 1.0
    assert containment("anything", ["!!!"]) == 0.0
    # an empty normalised reference leaves the fraction (the release's string_match_fraction)
    assert containment("It is Paris.", ["Paris", "!!!"]) == 1.0
    assert containment("It is Lyon.", ["Paris", "?", "Lyon"]) == 0.5
