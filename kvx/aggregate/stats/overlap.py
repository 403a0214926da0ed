"""Overlap of failure sets (KVDiagnosis 3.3): do two methods fail on the same sources?"""

from __future__ import annotations

__all__ = ["jaccard"]


def jaccard(a: set, b: set) -> float | None:
    """|a & b| / |a | b|: low overlap shows methods fail on different sources; None if both empty."""
    union = len(a | b)
    return len(a & b) / union if union else None
