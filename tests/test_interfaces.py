"""Contracts of the turn-selector and diagnostic interfaces."""

from __future__ import annotations

import pytest

from kvx.diagnostics.base import DiagnosticResult
from kvx.turn_selectors.base import keep_count


@pytest.mark.parametrize(("n", "r", "k"), [(10, 0.5, 5), (3, 0.1, 1), (7, 0.5, 4), (5, 0.5, 2), (1, 1.0, 1)])
def test_keep_count_is_max_one_round_n_r(n, r, k):
    # Python rounds halves to even: round(3.5) = 4, round(2.5) = 2
    assert keep_count(n, r) == k


@pytest.mark.parametrize(("n", "r"), [(0, 0.5), (4, 0.0), (4, 1.5)])
def test_keep_count_rejects_bad_input(n, r):
    with pytest.raises(ValueError):
        keep_count(n, r)


def test_diagnostic_results_never_carry_values_without_a_measurement():
    assert DiagnosticResult("measured", {"err": 0.5}).values == {"err": 0.5}
    with pytest.raises(ValueError, match="why"):
        DiagnosticResult("not_applicable")
    with pytest.raises(ValueError, match="imputed"):
        DiagnosticResult("not_applicable", {"err": 0.0}, reason="no map")
    with pytest.raises(ValueError, match="status"):
        DiagnosticResult("guessed")  # type: ignore[arg-type]
