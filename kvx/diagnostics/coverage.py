"""Cache-retention metrics ERR and ECov (KVDiagnosis section 4, "Cache retention").

Pure functions over a retained-position map; no model code. A slot ``u`` is one layer-KV-head
pair and ``R_u`` is the set of ORIGINAL token positions it still represents after compression.
Both metrics average over slots, so one head that keeps the evidence cannot hide another that
dropped it (a cross-slot union would report artificial perfect coverage).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # imported where used: loading the coverage plugin must not import torch
    import torch

__all__ = ["CoverageValues", "segment_retention", "slot_coverage"]


class CoverageValues(TypedDict):
    """What :func:`slot_coverage` returns (plain Python numbers, JSON-ready)."""

    err: float
    ecov: float
    n_slots: int
    n_spans: int
    evidence_tokens: int


def _check_spans(spans: Sequence[Iterable[int]]) -> list[set[int]]:
    """Spans ``E_j`` as sets; the paper's spans are nonempty, so an empty one is a caller bug."""
    if len(spans) == 0:
        raise ValueError("no evidence spans: ERR/ECov are undefined without evidence")
    out: list[set[int]] = []
    for j, span in enumerate(spans):
        s = {int(p) for p in span}
        if not s:
            raise ValueError(f"evidence span {j} is empty (spans must be nonempty)")
        if min(s) < 0:
            raise ValueError(f"evidence span {j} has a negative position")
        out.append(s)
    return out


def _from_mask(retained: torch.Tensor, spans: list[set[int]], tau: float) -> tuple[float, float]:
    """Vectorized path: ``retained`` is a bool (n_slots, n_positions) mask, True = retained."""
    import torch

    if retained.dtype != torch.bool or retained.dim() != 2:
        raise ValueError(
            f"retained mask must be a 2-D bool tensor (n_slots, n_positions), "
            f"got dtype={retained.dtype} shape={tuple(retained.shape)}"
        )
    n_slots, n_pos = retained.shape
    if n_slots == 0:
        raise ValueError("no slots: ERR/ECov average over a nonempty slot set")
    top = max(max(s) for s in spans)
    if top >= n_pos:
        raise ValueError(f"evidence position {top} lies outside the map's {n_pos} original positions")
    # Span membership matrix M[j, p] = 1 if p in E_j; counts[u, j] = |R_u ∩ E_j| (exact in float64).
    member = torch.zeros(len(spans), n_pos, dtype=torch.float64)
    for j, s in enumerate(spans):
        member[j, torch.tensor(sorted(s), dtype=torch.long)] = 1.0
    mask = retained.to(device="cpu", dtype=torch.float64)
    sizes = member.sum(dim=1)  # |E_j|
    cover = (mask @ member.T) / sizes  # c[u, j]
    union = member.amax(dim=0)  # indicator of E = ∪_j E_j
    err = float(((mask @ union) / union.sum()).mean())
    ecov = float((cover >= tau).to(torch.float64).mean())
    return err, ecov


def _from_sets(retained: Sequence[Iterable[int]], spans: list[set[int]], tau: float) -> tuple[float, float]:
    """Convenience path: one iterable of retained original positions per slot."""
    if len(retained) == 0:
        raise ValueError("no slots: ERR/ECov average over a nonempty slot set")
    union = set().union(*spans)
    err_sum = 0.0
    hits = 0
    for r in retained:
        rs = r if isinstance(r, (set, frozenset)) else set(r)
        err_sum += len(rs & union) / len(union)
        hits += sum(1 for s in spans if len(rs & s) / len(s) >= tau)
    return err_sum / len(retained), hits / (len(retained) * len(spans))


def slot_coverage(
    retained: torch.Tensor | Sequence[Iterable[int]],
    spans: Sequence[Iterable[int]],
    tau: float = 0.5,
) -> CoverageValues:
    """Slot-averaged evidence retention ERR and span coverage ECov (KVDiagnosis section 4).

    ``ERR = (1/|U|) Σ_u |R_u ∩ E| / |E|`` with ``E = ∪_j E_j``, and
    ``ECov = (1/(|U| J)) Σ_u Σ_j 1[c_{u,j} ≥ tau]`` with ``c_{u,j} = |R_u ∩ E_j| / |E_j|``;
    the paper fixes ``tau = 0.5`` (inclusive: ``c = tau`` counts as covered).

    ``retained`` is either a bool tensor (n_slots, n_positions), True where slot ``u`` still
    represents that original position (fast, vectorized), or a sequence of per-slot position
    sets. Raises ``ValueError`` on no slots, no spans, an empty span, or (mask form) an
    evidence position outside the map.
    """
    import torch

    checked = _check_spans(spans)
    if isinstance(retained, torch.Tensor):
        err, ecov = _from_mask(retained, checked, tau)
        n_slots = int(retained.shape[0])
    else:
        err, ecov = _from_sets(retained, checked, tau)
        n_slots = len(retained)
    return CoverageValues(
        err=err,
        ecov=ecov,
        n_slots=n_slots,
        n_spans=len(checked),
        evidence_tokens=len(set().union(*checked)),
    )


def segment_retention(mask: torch.Tensor, spans: Sequence[tuple[int, int]]) -> list[float | None]:
    """Per segment (token span ``[a, b)``), the slot-averaged share of its positions still held:
    mean over slots u of |R_u ∩ S| / |S| (the ERR formula with a segment for the evidence), so a
    turn or passage that one head keeps and another drops counts half. None for an empty span."""
    out: list[float | None] = []
    for start, end in spans:
        out.append(float(mask[:, start:end].float().mean()) if end > start else None)
    return out
