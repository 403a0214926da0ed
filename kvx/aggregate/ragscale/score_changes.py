"""Rescue and damage of graded scores (ragscale Table 4's F1 columns).

Table 4: "The F1 columns report average positive and negative score changes in percentage points".
Over all (reader, row) pairs, each pair's change is its compressed minus its raw score; the positive
mass is the mean of max(change, 0) and the negative mass the mean of min(change, 0), both over every
pair (unchanged pairs count as 0), so positive + negative = the mean gain. For binary scores the
positive mass is the rescue share; the negative mass is minus the damaged share of all pairs (Table 4's
EM damage divides by raw-correct pairs instead: ``kvx.aggregate.stats.upgrades.rescue_damage``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["score_changes"]


def score_changes(raw: np.ndarray, comp: np.ndarray) -> tuple[float, float]:
    """(mean positive change, mean negative change) over every pair of two same-shape score arrays."""
    r, c = np.asarray(raw, dtype=float), np.asarray(comp, dtype=float)
    if r.shape != c.shape or r.size == 0:
        raise ValueError(f"need two same-shape, non-empty score arrays, got {r.shape} and {c.shape}")
    change = c - r
    return float(np.maximum(change, 0.0).mean()), float(np.minimum(change, 0.0).mean())
