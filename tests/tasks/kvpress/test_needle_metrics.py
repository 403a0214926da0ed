"""kvpress's needle score (``rouge`` 1.0.1 with the needle as hypothesis), pinned by hand-computed values."""

from __future__ import annotations

import pytest

from kvx.tasks.kvpress.needle_metrics import lcs_words, needle_scores, sentences

# the needle of the Needle-in-a-Haystack test kvpress adapts (gkamradt/LLMTest_NeedleInAHaystack)
NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
# 21 words: The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny
# day; "in" and "a" twice, so 19 distinct words; 20 bigrams, all distinct
NEEDLE_WORDS, NEEDLE_BIGRAMS = 19, 20


def f(p: float, r: float) -> float:
    return 2 * p * r / (p + r + 1e-8)


def test_sentences_cut_at_dots_and_keep_a_blank_piece_as_an_empty_sentence():
    assert sentences(NEEDLE) == [NEEDLE[:-1]]
    assert sentences("Dolores  Park. . sunny\nday") == ["Dolores Park", "", "sunny day"]
    assert sentences("...") == []


def test_an_answer_that_is_the_needles_tail():
    # 12 words, "a" twice: 11 distinct words and 11 distinct bigrams, every one in the needle
    scores = needle_scores(NEEDLE, " eat a sandwich and sit in Dolores Park on a sunny day. ")
    p1, p2 = 11 / NEEDLE_WORDS, 11 / NEEDLE_BIGRAMS
    assert scores["rouge-1"] == pytest.approx({"r": 1.0, "p": p1, "f": f(p1, 1.0)}, abs=1e-15)
    assert scores["rouge-2"] == pytest.approx({"r": 1.0, "p": p2, "f": f(p2, 1.0)}, abs=1e-15)
    # the answer is a subsequence of the needle: its LCS is all of it, 11 distinct words
    assert scores["rouge-l"] == pytest.approx({"r": 1.0, "p": p1, "f": f(p1, 1.0)}, abs=1e-15)


def test_the_whole_needle_scores_p_and_r_one_and_f_just_under_one():
    scores = needle_scores(NEEDLE, NEEDLE)
    for metric in ("rouge-1", "rouge-2", "rouge-l"):
        assert scores[metric]["p"] == scores[metric]["r"] == 1.0
        assert scores[metric]["f"] == pytest.approx(2 / (2 + 1e-8), abs=1e-15) and scores[metric]["f"] < 1.0


def test_a_blank_sentence_is_the_word_empty_string_and_case_counts():
    # "Dolores Park. . sunny": words Dolores, Park, "", sunny (4 distinct); 3 of them in the needle
    scores = needle_scores(NEEDLE, "Dolores Park. . sunny")
    assert scores["rouge-1"] == pytest.approx({"r": 3 / 4, "p": 3 / 19, "f": f(3 / 19, 3 / 4)}, abs=1e-15)
    # "the" is not "The"
    assert needle_scores(NEEDLE, "the")["rouge-1"]["p"] == 0.0
    assert needle_scores(NEEDLE, "The")["rouge-1"]["p"] == 1 / 19


def test_bigrams_run_across_sentence_ends():
    # "Dolores. Park" is the words Dolores, Park: its one bigram (Dolores, Park) is the needle's
    assert needle_scores(NEEDLE, "Dolores. Park")["rouge-2"]["r"] == 1.0


def test_lcs_backtracks_as_rouge_does():
    # LCS length 1 either way; from the end the two table steps tie, so the column step: "b"
    assert lcs_words(["a", "b"], ["b", "a"]) == ["b"]
    assert lcs_words(["b", "c"], ["b", "a"]) == ["b"]
    # so needle "b a" against the answer "a b. b c": the union of LCS words is {b}, over the needle's
    # 2 distinct words (p) and the answer's 3 (r) -- the other tie step would have given {a, b}
    assert needle_scores("b a", "a b. b c")["rouge-l"] == pytest.approx(
        {"r": 1 / 3, "p": 1 / 2, "f": f(1 / 2, 1 / 3)}, abs=1e-15
    )


@pytest.mark.parametrize("answer", ["", "   ", "..."])
def test_an_empty_answer_scores_zero_where_rouge_raises(answer):
    scores = needle_scores(NEEDLE, answer)
    assert all(value == 0.0 for metric in scores.values() for value in metric.values())


def test_dots_around_a_blank_are_one_empty_word_which_rouge_scores_zero():
    # ". ." is the pieces "", " ", "": the blank one stays, as the word "" -- no error, no overlap
    assert sentences(". .") == [""]
    assert needle_scores(NEEDLE, " . . ")["rouge-1"] == {"r": 0.0, "p": 0.0, "f": 0.0}
