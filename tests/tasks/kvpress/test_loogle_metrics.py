"""LooGLE's per-sample metrics, pinned by hand."""

import json

import pytest

from kvx.tasks.kvpress import loogle_metrics as lg

REF = "the cat sat on the mat"
HYP = "the cat sat on a mat"


def test_bleu_1_and_4_by_hand():
    # unigrams: the, cat, sat, on, mat of 6 predicted are in the reference -> 5/6, same length (BP 1);
    # 4-grams: "the cat sat on" of 3 -> 1/3
    scores = lg.bleu(REF, HYP)
    assert scores["bleu1"] == pytest.approx(5 / 6)
    assert scores["bleu4"] == pytest.approx(1 / 3)
    assert lg.bleu(REF, "")["bleu1"] == 0.0


def test_rouge_recall_by_hand():
    # distinct reference unigrams the, cat, sat, on, mat all predicted -> 1; reference bigrams the-cat,
    # cat-sat, sat-on, on-the, the-mat: 3 predicted -> 0.6; the LCS the-cat-sat-on-mat covers all 5
    # distinct reference words -> 1
    scores = lg.rouge_recall(REF, HYP)
    assert scores == pytest.approx({"rouge-1": 1.0, "rouge-2": 0.6, "rouge-l": 1.0})
    assert lg.rouge_recall(REF, "") == {"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}


CLOZE = json.dumps({"<mask-0>": "Bob Smith", "<mask-1>": "Paris"})


def test_cloze_exact_and_partial_match():
    answer = " {'<mask-0>': 'Bob', '<mask-1>': 'Paris'}"
    assert lg.exact_match(CLOZE, answer) == (1, 2)  # Paris exactly
    assert lg.partial_match(CLOZE, answer) == (2, 2)  # "Bob" shares a word with "Bob Smith"


def test_cloze_answer_that_is_not_a_dict():
    assert lg.exact_match(CLOZE, "I do not know") == (0, 1)  # one mask missed, whatever the masks
    assert lg.partial_match(CLOZE, "I do not know") == (0, 2)
    assert lg.exact_match(CLOZE, "['Bob', 'Paris']") == (0, 1)


def test_cloze_non_text_entity_scores_zero_partial():
    answer = "{'<mask-0>': 1, '<mask-1>': 'Paris'}"
    assert lg.exact_match(CLOZE, answer) == (1, 2)
    assert lg.partial_match(CLOZE, answer) == (0, 2)  # LooGLE's .split() fails on 1: the whole answer 0


def test_cloze_answer_is_never_run_as_code():
    assert lg.exact_match(CLOZE, "__import__('os').system('true')") == (0, 1)


def test_cloze_reference_must_be_a_dict():
    with pytest.raises(ValueError, match="not a dict of masks"):
        lg.exact_match('"Bob"', "{}")
