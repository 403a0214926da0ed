"""Predefined diagnostic categories for one C→W row (KVDiagnosis Table 4).

Six observational rules; exactly one match names the category, two or more give
``conflicting``, none gives ``ambiguous``. Coverage rules use only *mapped* ECov (status
``measured`` or ``projected``); ``structural`` addressability is a separate state and never
counts as coverage. Missing values (None or NaN) never trigger a rule and are never imputed;
the only clause that is skipped when missing is Top-50 (Table 4: "Top-50 ≥ 0.90 if available").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

__all__ = ["CATEGORIES", "READS", "RULES", "CategoryResult", "categorize", "category_row"]

RULES: tuple[str, ...] = (
    "low_mapped_coverage",
    "partial_mapped_coverage",
    "high_mapped_coverage_drift",
    "structural_position_drift",
    "low_ear_candidate",
    "decoding_scoring_candidate",
)
CATEGORIES: tuple[str, ...] = (*RULES, "conflicting", "ambiguous")

_COVERAGE_STATUSES = ("measured", "projected", "structural", "not_applicable", "error")

# Table 4 thresholds.
LOW_COVERAGE = 0.50
HIGH_COVERAGE = 0.90
DRIFT_NLL = 1.0
LOW_EAR = 0.50
STABLE_NLL = 0.10
STABLE_TOP50 = 0.90


class CategoryResult(TypedDict):
    """The assigned category and every rule that matched (in Table 4 order)."""

    category: str
    matched: list[str]


def _num(row: Mapping[str, Any], key: str) -> float | None:
    """A stored value as float, or None when absent, None or NaN (missing, never imputed)."""
    value = row.get(key)
    if value is None:
        return None
    x = float(value)
    return None if math.isnan(x) else x


def categorize(row: Mapping[str, Any]) -> CategoryResult:
    """Apply Table 4's rules to one row of stored values.

    Keys read: ``ecov``, ``coverage_status``, ``delta_nll``, ``ear``, ``top50``; an absent key is
    the same as None. ECov counts as *mapped* only when ``coverage_status`` is ``measured`` or
    ``projected`` (an ECov under any other or no status is ignored). Raises ``ValueError`` on an
    unknown coverage status.
    """
    status = row.get("coverage_status")
    if status is not None and status not in _COVERAGE_STATUSES:
        raise ValueError(f"coverage_status={status!r} is not one of {_COVERAGE_STATUSES} or None")
    ecov = _num(row, "ecov") if status in ("measured", "projected") else None
    structural = status == "structural"
    dnll = _num(row, "delta_nll")
    ear = _num(row, "ear")
    top50 = _num(row, "top50")

    high_or_structural = structural or (ecov is not None and ecov >= HIGH_COVERAGE)
    rules = {
        "low_mapped_coverage": ecov is not None and ecov < LOW_COVERAGE,
        "partial_mapped_coverage": ecov is not None and LOW_COVERAGE <= ecov < HIGH_COVERAGE,
        "high_mapped_coverage_drift": ecov is not None
        and ecov >= HIGH_COVERAGE
        and dnll is not None
        and dnll >= DRIFT_NLL,
        "structural_position_drift": structural and dnll is not None and dnll >= DRIFT_NLL,
        "low_ear_candidate": high_or_structural and ear is not None and ear < LOW_EAR,
        "decoding_scoring_candidate": high_or_structural
        and dnll is not None
        and abs(dnll) <= STABLE_NLL
        and (top50 is None or top50 >= STABLE_TOP50),
    }
    matched = [name for name in RULES if rules[name]]
    if len(matched) == 1:
        category = matched[0]
    elif matched:
        category = "conflicting"
    else:
        category = "ambiguous"
    return CategoryResult(category=category, matched=matched)


#: the diagnostics whose stored values ``category_row`` reads
READS: tuple[str, ...] = ("coverage", "likelihood", "attention")


def category_row(diagnostics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The stored values Table 4's rules read; absent diagnostics leave their fields None."""
    cov = diagnostics.get("coverage", {})
    lik = diagnostics.get("likelihood", {}).get("values", {})
    att = diagnostics.get("attention", {}).get("values", {})
    return {
        "coverage_status": cov.get("status"),
        "ecov": cov.get("values", {}).get("ecov"),
        "delta_nll": lik.get("delta_nll"),
        "top50": lik.get("top50"),
        "ear": att.get("ear"),
    }
