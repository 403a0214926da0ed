"""kvpress's needle-in-a-haystack score: the ``rouge`` package's ROUGE-1, ROUGE-2 and ROUGE-L (summary
level), reimplemented so that kvx needs no extra dependency and the rules are pinned by tests.

kvpress (``evaluation/benchmarks/needle_in_haystack/calculate_metrics.py``) calls
``Rouge().get_scores(needle.strip(), prediction.strip())``: the needle is the *hypothesis* and the
model's answer the *reference*, so its ``p`` is the share of the needle's n-grams found in the answer
and its ``r`` the share of the answer's n-grams found in the needle. The rules of ``rouge`` 1.0.1
(``exclusive=True``, its default) reproduced here:

- a text is cut at every ``"."``; empty pieces are dropped, the rest have their whitespace collapsed
  (a piece of blanks stays, as the empty sentence ``""``);
- words are each sentence split on ``" "``, all sentences flattened; n-grams run across sentence
  ends; case and punctuation other than ``"."`` are kept;
- ROUGE-N counts *distinct* n-grams: ``p = |H & R| / |H|``, ``r = |H & R| / |R|`` (0 for an empty
  side), ``f = 2pr / (p + r + 1e-8)``;
- ROUGE-L: for each answer sentence and each needle sentence, one longest common subsequence of
  their words (backtracked from the end: a match is taken, else the step that keeps the longer
  table entry, the column step on ties); the union of the words of all of them, as a set, over the
  distinct words of the needle (``p``) and of the answer (``r``); ``f`` as above.

``rouge`` raises on an empty hypothesis or reference (an answer of only dots or blanks); kvpress's
whole metric computation then fails. kvx scores such an answer 0 on every number instead.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the metrics ``rouge`` returns, in its order, with their three statistics
ROUGE_METRICS = ("rouge-1", "rouge-2", "rouge-l")
ROUGE_STATS = ("r", "p", "f")


def sentences(text: str) -> list[str]:
    """``rouge``'s sentences: pieces between dots, empty ones dropped, whitespace collapsed."""
    return [" ".join(piece.split()) for piece in text.split(".") if piece]


def _words(sents: Sequence[str]) -> list[str]:
    return [word for sentence in sents for word in sentence.split(" ")]


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _f(p: float, r: float) -> float:
    return 2.0 * (p * r / (p + r + 1e-8))


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def rouge_n(hyp: Sequence[str], ref: Sequence[str], n: int) -> dict[str, float]:
    """ROUGE-N of hypothesis sentences against reference sentences, over distinct n-grams."""
    h, r = _ngrams(_words(hyp), n), _ngrams(_words(ref), n)
    overlap = len(h & r)
    p, rec = _share(overlap, len(h)), _share(overlap, len(r))
    return {"r": rec, "p": p, "f": _f(p, rec)}


def lcs_words(x: Sequence[str], y: Sequence[str]) -> list[str]:
    """One longest common subsequence of ``x`` and ``y``, the one ``rouge`` backtracks to."""
    table = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            if x[i - 1] == y[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    out: list[str] = []
    i, j = len(x), len(y)
    while i and j:
        if x[i - 1] == y[j - 1]:
            out.append(x[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return out[::-1]


def rouge_l(hyp: Sequence[str], ref: Sequence[str]) -> dict[str, float]:
    """Summary-level ROUGE-L as ``rouge`` computes it: the union of the LCS words, as a set."""
    union: set[str] = set()
    for ref_sentence in ref:
        for hyp_sentence in hyp:
            union.update(lcs_words(ref_sentence.split(" "), hyp_sentence.split(" ")))
    p, r = _share(len(union), len(set(_words(hyp)))), _share(len(union), len(set(_words(ref))))
    return {"r": r, "p": p, "f": _f(p, r)}


def needle_scores(needle: str, prediction: str) -> dict[str, dict[str, float]]:
    """kvpress's per-answer needle score: ``{"rouge-1": {"r", "p", "f"}, "rouge-2": ..., "rouge-l": ...}``
    with the needle as hypothesis and the stripped answer as reference; all 0 for an empty side."""
    hyp, ref = sentences(needle.strip()), sentences(prediction.strip())
    if not hyp or not ref:
        return {metric: dict.fromkeys(ROUGE_STATS, 0.0) for metric in ROUGE_METRICS}
    return {"rouge-1": rouge_n(hyp, ref, 1), "rouge-2": rouge_n(hyp, ref, 2), "rouge-l": rouge_l(hyp, ref)}
