"""Table 4 diagnostic categories: one crafted row per rule, plus combination and edge cases."""

from __future__ import annotations

import math

import pytest

from kvx.diagnostics.categories import CATEGORIES, RULES, categorize


def cat(**row) -> str:
    return categorize(row)["category"]


def test_names_are_stable() -> None:
    assert RULES == (
        "low_mapped_coverage",
        "partial_mapped_coverage",
        "high_mapped_coverage_drift",
        "structural_position_drift",
        "low_ear_candidate",
        "decoding_scoring_candidate",
    )
    assert CATEGORIES[:6] == RULES
    assert CATEGORIES[6:] == ("conflicting", "ambiguous")


def test_each_rule_alone() -> None:
    assert cat(ecov=0.2, coverage_status="measured", delta_nll=3.0) == "low_mapped_coverage"
    assert cat(ecov=0.7, coverage_status="measured", delta_nll=0.0) == "partial_mapped_coverage"
    assert cat(ecov=0.95, coverage_status="measured", delta_nll=1.5, ear=0.9) == "high_mapped_coverage_drift"
    assert cat(coverage_status="structural", delta_nll=2.0, ear=0.8) == "structural_position_drift"
    assert cat(ecov=1.0, coverage_status="measured", delta_nll=0.5, ear=0.3) == "low_ear_candidate"
    assert cat(coverage_status="structural", delta_nll=0.5, ear=0.3) == "low_ear_candidate"
    assert (
        cat(ecov=0.92, coverage_status="measured", delta_nll=-0.05, top50=0.95, ear=0.8)
        == "decoding_scoring_candidate"
    )
    assert cat(coverage_status="structural", delta_nll=0.05, top50=0.9) == "decoding_scoring_candidate"


def test_conflicting() -> None:
    out = categorize({"coverage_status": "structural", "delta_nll": 2.0, "ear": 0.1})
    assert out == {"category": "conflicting", "matched": ["structural_position_drift", "low_ear_candidate"]}
    out = categorize({"ecov": 0.9, "coverage_status": "projected", "delta_nll": 0.0, "ear": 0.2})
    assert out["category"] == "conflicting"
    assert out["matched"] == ["low_ear_candidate", "decoding_scoring_candidate"]


def test_ambiguous() -> None:
    assert categorize({}) == {"category": "ambiguous", "matched": []}
    none_row = {"ecov": None, "coverage_status": None, "delta_nll": None, "ear": None, "top50": None}
    assert categorize(none_row) == {"category": "ambiguous", "matched": []}
    # High coverage, moderate drift, fine EAR: no signature.
    assert cat(ecov=0.95, coverage_status="measured", delta_nll=0.5, ear=0.9) == "ambiguous"
    assert cat(coverage_status="not_applicable", delta_nll=5.0, ear=0.0) == "ambiguous"


def test_missing_fields_never_trigger() -> None:
    out = categorize({"ecov": 0.95, "coverage_status": "measured", "delta_nll": None, "ear": None})
    assert out == {"category": "ambiguous", "matched": []}
    # NaN is missing too, not a value that happens to fail or pass comparisons.
    assert cat(ecov=0.95, coverage_status="measured", delta_nll=math.nan, ear=math.nan) == "ambiguous"
    # ECov with no status (or an error status) is not mapped coverage.
    assert cat(ecov=0.1, delta_nll=3.0) == "ambiguous"
    assert cat(ecov=0.1, coverage_status="error") == "ambiguous"
    # Measured status without an ECov value is missing, not zero coverage.
    assert cat(coverage_status="measured", delta_nll=3.0, ear=0.1) == "ambiguous"


def test_top50_clause_skipped_only_when_missing() -> None:
    base = {"ecov": 0.95, "coverage_status": "measured", "delta_nll": 0.0}
    assert cat(**base) == "decoding_scoring_candidate"  # top50 absent
    assert cat(**base, top50=None) == "decoding_scoring_candidate"
    assert cat(**base, top50=0.9) == "decoding_scoring_candidate"
    assert cat(**base, top50=0.89) == "ambiguous"  # available and too low
    assert cat(**base, top50=math.nan) == "decoding_scoring_candidate"  # NaN = not available


def test_projected_counts_as_mapped() -> None:
    assert cat(ecov=0.3, coverage_status="projected") == "low_mapped_coverage"
    assert cat(ecov=0.95, coverage_status="projected", delta_nll=1.0) == "high_mapped_coverage_drift"


def test_structural_never_counts_as_mapped_coverage() -> None:
    # A stray ECov under structural status is ignored: no coverage rule, but structural rules apply.
    assert cat(ecov=0.1, coverage_status="structural") == "ambiguous"
    out = categorize({"ecov": 0.95, "coverage_status": "structural", "delta_nll": 1.2})
    assert out["matched"] == ["structural_position_drift"]


@pytest.mark.parametrize(
    "ecov, expected",
    [(0.4999, "low_mapped_coverage"), (0.50, "partial_mapped_coverage"), (0.8999, "partial_mapped_coverage")],
)
def test_coverage_boundaries(ecov: float, expected: str) -> None:
    assert cat(ecov=ecov, coverage_status="measured") == expected


def test_high_coverage_boundary_and_drift_boundary() -> None:
    assert cat(ecov=0.90, coverage_status="measured", delta_nll=1.0) == "high_mapped_coverage_drift"
    assert cat(ecov=0.90, coverage_status="measured", delta_nll=0.9999) == "ambiguous"
    assert cat(coverage_status="structural", delta_nll=1.0) == "structural_position_drift"
    assert cat(coverage_status="structural", delta_nll=0.9999) == "ambiguous"


def test_stable_nll_boundary() -> None:
    for d in (0.10, -0.10):
        assert cat(ecov=0.9, coverage_status="measured", delta_nll=d) == "decoding_scoring_candidate"
    for d in (0.1001, -0.1001):
        assert cat(ecov=0.9, coverage_status="measured", delta_nll=d) == "ambiguous"


def test_ear_boundary() -> None:
    assert cat(coverage_status="structural", delta_nll=0.5, ear=0.4999) == "low_ear_candidate"
    assert cat(coverage_status="structural", delta_nll=0.5, ear=0.50) == "ambiguous"


def test_unknown_status_raises() -> None:
    with pytest.raises(ValueError):
        categorize({"coverage_status": "mapped", "ecov": 0.9})
