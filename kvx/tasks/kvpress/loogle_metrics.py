"""LooGLE's per-sample metrics, as kvpress's ``evaluation/benchmarks/loogle/calculate_metrics.py``
(LooGLE's ``Evaluation/automatic_metrics.py``) computes them.

QA and summaries: BLEU-1 and BLEU-4 (nltk's ``sentence_bleu`` on whitespace tokens) and ROUGE-1/2/L
recall (the ``rouge`` package); a metric that raises scores 0 for all its values. METEOR and BERTScore
are not computed: they need WordNet and a RoBERTa-large checkpoint from the hub.

Cloze: the reference and the answer are Python dict literals mapping each ``<mask-n>`` to an entity.
Exact match counts the masks whose entity is equal; partial match the masks whose entity shares a word.
kvpress ``eval``-uates the model's answer; kvx reads it with ``ast.literal_eval``, which gives the
same dict for every literal and never runs the answer as code.
"""

from __future__ import annotations

import ast
import warnings
from typing import Any

from kvx.tasks.kvpress.longbench_metrics import rouge_scores


def bleu(reference: str, prediction: str) -> dict[str, float]:
    """BLEU-1 and BLEU-4 of the prediction against the one reference, newlines as spaces."""
    from nltk.translate.bleu_score import sentence_bleu

    ref, hyp = reference.replace("\n", " ").split(), prediction.replace("\n", " ").split()
    try:
        with warnings.catch_warnings():  # nltk warns on every n-gram order without overlap
            warnings.simplefilter("ignore")
            return {
                "bleu1": float(sentence_bleu([ref], hyp, weights=(1, 0, 0, 0))),
                "bleu4": float(sentence_bleu([ref], hyp, weights=(0, 0, 0, 1))),
            }
    except Exception:  # LooGLE scores a metric that raises as 0
        return {"bleu1": 0.0, "bleu4": 0.0}


def rouge_recall(reference: str, prediction: str) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L recall (LooGLE's ``metric="r"``)."""
    return rouge_scores(prediction, reference, "r")


def cloze_reference(reference: str) -> dict[Any, Any]:
    """The reference's mask -> entity dict; ValueError for one that is not a dict (kvpress fails)."""
    value = ast.literal_eval(reference)
    if not isinstance(value, dict):
        raise ValueError(f"LooGLE cloze reference {reference!r} is not a dict of masks")
    return value


def _answer(prediction: str) -> dict[Any, Any] | None:
    """The answer's dict, or None when it is not a dict literal."""
    try:
        value = ast.literal_eval(prediction)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def exact_match(reference: str, prediction: str) -> tuple[int, int]:
    """(masks whose entity is equal, masks counted). An answer that is not a dict counts as one mask
    missed, whatever the number of masks (LooGLE's ``(0, 1)``)."""
    truth, answer = cloze_reference(reference), _answer(prediction)
    if answer is None:
        return 0, 1
    return sum(answer.get(key) == value for key, value in truth.items()), len(truth)


def partial_match(reference: str, prediction: str) -> tuple[int, int]:
    """(masks whose predicted entity shares a word with the reference's, masks). An answer that is not
    a dict, or whose entity for a mask is not text, scores 0 for every mask."""
    truth, answer = cloze_reference(reference), _answer(prediction)
    if answer is None:
        return 0, len(truth)
    matched = 0
    for key in truth:
        if key in answer:
            if not isinstance(truth[key], str) or not isinstance(answer[key], str):
                return 0, len(truth)  # LooGLE's .split() raises there, and the whole answer scores 0
            matched += bool(set(truth[key].split()) & set(answer[key].split()))
    return matched, len(truth)
