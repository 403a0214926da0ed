"""Answer scorers as small pure functions, so tasks share them and tests pin their semantics.

``string_match_all`` and ``string_match_part`` follow NVIDIA RULER's evaluation (case-insensitive
substring containment). ``containment`` follows KVDiagnosis: both sides are normalised first so
punctuation, case and spacing differences do not count as errors.
"""

from __future__ import annotations

import re
import string
import unicodedata
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


def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def normalize_answer(text: str) -> str:
    """KVDiagnosis normalisation: lowercase, punctuation to spaces, whitespace collapsed and trimmed."""
    spaced = "".join(" " if _is_punctuation(char) else char for char in text.lower())
    return _WHITESPACE.sub(" ", spaced).strip()


def containment(prediction: str, references: Sequence[str]) -> float:
    """Fraction of normalised references contained in the normalised prediction (KVDiagnosis QA score).

    A reference that normalises to the empty string would match everything, so it counts as missed.
    """
    _require(references)
    pred = normalize_answer(prediction)
    refs = [normalize_answer(ref) for ref in references]
    return sum(bool(ref) and ref in pred for ref in refs) / len(refs)
