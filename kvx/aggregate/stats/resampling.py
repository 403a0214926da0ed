"""The draws every family-by-row interval of the audit shares (ragscale section 4, "Scores and uncertainty").

A draw resamples rows (questions) with replacement and, when the panel spans several families,
reader families with replacement too; a drawn family brings all of its readers, so a family drawn
twice puts each of its readers in the draw twice. Draws are returned as counts, so estimators stay
vectorized: ``rows[k, i]`` is how often row ``i`` is in draw ``k`` and ``readers[k, r]`` how often
reader ``r`` is. Draw ``k`` calls ``rng.integers(0, n_rows, n_rows)`` and then, with families,
``rng.integers(0, n_families, n_families)`` over the sorted family labels: the order
:func:`kvx.aggregate.stats.estimators.eiv_bootstrap` draws in, so with the same seed every
family-by-row interval of a panel (retention, EIV, slope, headroom) sees the same resamples.

Row splits (:func:`split_halves`) are the release's: split ``k`` is the ``k``-th
``rng.permutation(n_rows)``, its first ``n_rows // 2`` entries one half and the rest the other
(ragscale ``replay.py``), the order :func:`~kvx.aggregate.stats.estimators.excess_flips` splits in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np

__all__ = ["CHUNK", "family_row_draws", "interval", "split_halves", "spans_families"]

#: draws or splits per vectorized block (memory: CHUNK x rows floats per array)
CHUNK = 512


def spans_families(families: Sequence[str]) -> bool:
    """Whether family resampling applies: with one family it is the identity and only rows are drawn."""
    return len(set(families)) > 1


def family_row_draws(
    n_rows: int, families: Sequence[str], n_boot: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of (row counts (draws x rows), reader counts (draws x readers)) for ``n_boot`` draws.

    With a single family every reader is in every draw once (rows only). The blocks of the last
    request up to ``KEPT_CELLS`` row counts are kept (read-only), so the several family-by-row
    intervals of one panel draw once."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if n_boot * n_rows > KEPT_CELLS:
        yield from _draws.__wrapped__(n_rows, tuple(families), n_boot, seed)
    else:
        yield from _draws(n_rows, tuple(families), n_boot, seed)


#: the largest draw set kept for the next interval: 64 MiB of int32 row counts (5,000 draws x 3,355 rows)
KEPT_CELLS = 1 << 24


@lru_cache(maxsize=1)
def _draws(
    n_rows: int, families: tuple[str, ...], n_boot: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    labels = np.asarray(families)
    rng = np.random.default_rng(seed)
    by_family = spans_families(families)
    names = sorted(set(families))
    family_of = np.searchsorted(names, labels)  # each reader's family index
    blocks = []
    for start in range(0, n_boot, CHUNK):
        size = min(CHUNK, n_boot - start)
        rows = np.empty((size, n_rows), dtype=np.int32)
        readers = np.ones((size, labels.size), dtype=np.int32)
        for k in range(size):
            rows[k] = np.bincount(rng.integers(0, n_rows, n_rows), minlength=n_rows)
            if by_family:
                drawn = np.bincount(rng.integers(0, len(names), len(names)), minlength=len(names))
                readers[k] = drawn[family_of]
        rows.flags.writeable = readers.flags.writeable = False
        blocks.append((rows, readers))
    return blocks


def split_halves(n_rows: int, n_splits: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of (first-half, second-half) 0/1 row masks (splits x rows), the release's split rule."""
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    if n_rows < 2:
        raise ValueError(f"need at least 2 rows to split, got {n_rows}")
    rng = np.random.default_rng(seed)
    half = n_rows // 2
    for start in range(0, n_splits, CHUNK):
        size = min(CHUNK, n_splits - start)
        perms = np.stack([rng.permutation(n_rows) for _ in range(size)])
        first = np.zeros((size, n_rows))
        np.put_along_axis(first, perms[:, :half], 1.0, axis=1)
        yield first, 1.0 - first


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """Central percentile interval (2.5-97.5 at 0.95), (None, None) with no value."""
    if values.size == 0:
        return None, None
    low, high = np.percentile(values, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(low), float(high)
