"""EM and token F1 with SQuAD/HotpotQA's official normalisation, on their scripts' own cases."""

from __future__ import annotations

import pytest

from kvx.tasks.scoring import exact_match, squad_normalize, token_f1


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Cat!", "cat"),
        ("  Denver   Broncos. ", "denver broncos"),
        ("an apple a day", "apple day"),
        ("Theatre", "theatre"),  # "the" only as a word
        ("Saint-Denis", "saintdenis"),  # punctuation is removed, not spaced (official behaviour)
    ],
)
def test_official_normalization(raw, normalized):
    assert squad_normalize(raw) == normalized


def test_exact_match_is_max_over_aliases():
    assert exact_match("the Denver Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("Denver", ["Denver Broncos"]) == 0.0
    assert exact_match("", [""]) == 1.0 and exact_match("Paris", [""]) == 0.0  # SQuAD v2 no-answer


def test_token_f1_by_hand():
    # pred {broncos, win}, ref {denver, broncos}: one shared token, P = R = 1/2
    assert token_f1("Broncos win", ["Denver Broncos"]) == pytest.approx(0.5)
    # pred {denver, broncos, denver}, ref {denver, broncos}: multiset overlap 2, P = 2/3, R = 1
    assert token_f1("Denver Broncos Denver", ["Denver Broncos"]) == pytest.approx(0.8)
    assert token_f1("Broncos", ["Carolina Panthers", "Denver Broncos"]) == pytest.approx(2 / 3)
    assert token_f1("yes it is", ["yes"]) == 0.0  # HotpotQA: yes/no only when equal
    assert token_f1("no", ["no"]) == 1.0
    assert token_f1("", ["Paris"]) == 0.0 and token_f1("", [""]) == 1.0
    with pytest.raises(ValueError):
        token_f1("x", [])
