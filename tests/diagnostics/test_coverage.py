"""ERR / ECov (KVDiagnosis section 4): slot-averaged, hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from kvx.diagnostics.coverage import segment_retention, slot_coverage


def _mask(retained: list[set[int]], n_pos: int) -> torch.Tensor:
    m = torch.zeros(len(retained), n_pos, dtype=torch.bool)
    for u, r in enumerate(retained):
        m[u, sorted(r)] = True
    return m


def test_constructed_map_exact() -> None:
    # Spans E_1 = {2,3,4,5}, E_2 = {10,11}; E = 6 positions.
    spans = [{2, 3, 4, 5}, {10, 11}]
    retained = [
        {0, 1, 2, 3, 4, 5, 10, 11},  # u0: |R∩E| = 6 -> 6/6;   c = (4/4, 2/2) -> 2 hits
        {2, 3, 10},  # u1: |R∩E| = 3 -> 3/6;   c = (2/4 = 0.5 >= tau, 1/2) -> 2 hits
        {5, 7, 8},  # u2: |R∩E| = 1 -> 1/6;   c = (1/4, 0/2) -> 0 hits
    ]
    # ERR  = (6/6 + 3/6 + 1/6) / 3 = (10/6) / 3 = 10/18 = 5/9
    # ECov = (2 + 2 + 0) / (3 slots * 2 spans) = 4/6 = 2/3
    out = slot_coverage(retained, spans)
    assert out["err"] == pytest.approx(5 / 9, abs=1e-12)
    assert out["ecov"] == pytest.approx(2 / 3, abs=1e-12)
    assert out["n_slots"] == 3
    assert out["n_spans"] == 2
    assert out["evidence_tokens"] == 6
    tensor_out = slot_coverage(_mask(retained, 12), spans)
    assert tensor_out["err"] == pytest.approx(5 / 9, abs=1e-12)
    assert tensor_out["ecov"] == pytest.approx(2 / 3, abs=1e-12)


def test_slot_average_not_union() -> None:
    # One head keeps all evidence, the other none: the union would say 1.0, slot average 0.5.
    spans = [{3, 4}, {7}]
    retained = [{0, 3, 4, 7}, {0, 1}]
    for form in (retained, _mask(retained, 8)):
        out = slot_coverage(form, spans)
        assert out["err"] == pytest.approx(0.5, abs=1e-12)  # (3/3 + 0/3) / 2
        assert out["ecov"] == pytest.approx(0.5, abs=1e-12)  # (2 + 0) / (2 * 2)


def test_tau_boundary_inclusive() -> None:
    spans = [{0, 1, 2, 3}]
    assert slot_coverage([{0, 1}], spans)["ecov"] == 1.0  # c = 2/4 = 0.5 >= 0.5 counts
    assert slot_coverage([{0}], spans)["ecov"] == 0.0  # c = 1/4 < 0.5
    assert slot_coverage(_mask([{0, 1}], 4), spans)["ecov"] == 1.0
    assert slot_coverage([{0, 1}], spans, tau=0.75)["ecov"] == 0.0  # tau is honored


def test_tensor_and_set_forms_agree_random() -> None:
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(24, 200, generator=g) < 0.4
    spans = [set(range(10, 30)), {50, 51, 52}, set(range(120, 190, 7)), {199}]
    sets = [set(torch.nonzero(row).flatten().tolist()) for row in mask]
    a, b = slot_coverage(mask, spans), slot_coverage(sets, spans)
    assert a["err"] == pytest.approx(b["err"], abs=1e-12)
    assert a["ecov"] == pytest.approx(b["ecov"], abs=1e-12)
    assert a["evidence_tokens"] == b["evidence_tokens"] == 20 + 3 + 10 + 1
    assert 0.0 < a["ecov"] < 1.0  # the case is not degenerate


def test_overlapping_spans_counted_once_in_union() -> None:
    # E_1 = {0,1}, E_2 = {1,2}: E = {0,1,2}, so |E| = 3 (not 4).
    out = slot_coverage([{1}], [{0, 1}, {1, 2}])
    assert out["evidence_tokens"] == 3
    assert out["err"] == pytest.approx(1 / 3, abs=1e-12)
    assert out["ecov"] == 1.0  # c = (1/2, 1/2), both >= 0.5


@pytest.mark.parametrize(
    "retained, spans",
    [
        ([], [{1}]),
        (torch.zeros(0, 4, dtype=torch.bool), [{1}]),
        ([{1}], []),
        ([{1}], [{1}, set()]),
        (torch.ones(1, 4, dtype=torch.bool), [{4}]),  # evidence outside the map
        (torch.ones(1, 4, dtype=torch.int64), [{1}]),  # not a bool mask
        (torch.ones(4, dtype=torch.bool), [{1}]),  # not 2-D
    ],
)
def test_errors(retained, spans) -> None:
    with pytest.raises(ValueError):
        slot_coverage(retained, spans)


def test_segment_retention_by_hand() -> None:
    # two slots over six positions; segment A = tokens 0-1, B = 2-5, C empty
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 0, 1]], dtype=torch.bool)
    a, b, c = segment_retention(mask, [(0, 2), (2, 6), (6, 6)])
    assert a == pytest.approx((2 / 2 + 1 / 2) / 2)  # 0.75: slot-averaged, not a union (which says 1.0)
    assert b == pytest.approx((2 / 4 + 1 / 4) / 2)  # 0.375
    assert c is None
