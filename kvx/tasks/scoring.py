"""Answer scorers as small pure functions, so tasks share them and tests pin their semantics.

``string_match_all`` and ``string_match_part`` follow NVIDIA RULER's evaluation (case-insensitive
substring containment). ``containment`` follows KVDiagnosis: both sides are normalised first so
punctuation, case and spacing differences do not count as errors. ``exact_match`` and ``token_f1``
are SQuAD's and HotpotQA's official metrics (ragscale's EM/F1), max over a row's aliases.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_WHITESPACE = re.compile(r"\s+")


def _require(references: Sequence[str]) -> None:
    if not references:
        raise ValueError("cannot score against an empty list of references")


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """Fraction of references found (case-insensitively) in the prediction: RULER's niah/vt/cwe/fwe metric."""
    _require(references)
    pred = prediction.lower()
    return sum(ref.lower() in pred for ref in references) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """1.0 if any reference is found (case-insensitively) in the prediction: RULER's QA metric."""
    _require(references)
    pred = prediction.lower()
    return float(any(ref.lower() in pred for ref in references))


_ASCII_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """KVDiagnosis normalisation: lowercase, ASCII punctuation to spaces, whitespace collapsed and
    trimmed. Only ``string.punctuation`` counts, as in the release's scorer
    (ChosenQC/KVDiagnosis ``src/kvcachebench/scoring.py``): an en dash or a curly quote stays, which
    is what reproduces the release's scores (its Qasper reference ``Skip–gram; CBOW``)."""
    spaced = "".join(" " if char in _ASCII_PUNCTUATION else char for char in text.lower())
    return _WHITESPACE.sub(" ", spaced).strip()


def containment(prediction: str, references: Sequence[str]) -> float:
    """Fraction of normalised references contained in the normalised prediction (KVDiagnosis QA score).

    A reference that normalises to the empty string would match everything, so, as in the release's
    ``string_match_fraction``, it is left out of the fraction; with none left the score is 0.
    """
    _require(references)
    pred = normalize_answer(prediction)
    refs = [ref for ref in map(normalize_answer, references) if ref]
    return sum(ref in pred for ref in refs) / len(refs) if refs else 0.0


_ARTICLES = re.compile(r"\b(a|an|the)\b")
#: HotpotQA's official F1 gives these no partial credit: a yes/no answer is right or wrong
_CLOSED = ("yes", "no", "noanswer")


def squad_normalize(text: str) -> str:
    """SQuAD/HotpotQA official normalisation: lowercase, punctuation removed, articles removed,
    whitespace collapsed."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, references: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised reference (max over aliases). SQuAD v2's
    unanswerable questions have the reference ``""``: only an empty prediction matches it."""
    _require(references)
    pred = squad_normalize(prediction)
    return float(any(pred == squad_normalize(ref) for ref in references))


def token_f1(prediction: str, references: Sequence[str], closed: bool = True) -> float:
    """Best token-multiset F1 over references (SQuAD's official ``f1_score``; ``closed``: with HotpotQA's
    rule that yes/no/noanswer score only when equal)."""
    _require(references)
    return max(_f1(squad_normalize(prediction), squad_normalize(ref), closed) for ref in references)


def _f1(pred: str, ref: str, closed: bool = True) -> float:
    if closed and (pred in _CLOSED or ref in _CLOSED) and pred != ref:
        return 0.0
    p, r = pred.split(), ref.split()
    if not p or not r:
        return float(p == r)  # SQuAD v2: both empty is a match, one empty is not
    common = sum((Counter(p) & Counter(r)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)
