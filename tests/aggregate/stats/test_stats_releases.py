"""The release streams of kvx.aggregate.stats.releases, pinned to the bit.

``upgrade_interval`` (ragscale ``analysis.bootstrap_pair``) is pinned in test_ragscale_release.py and
``seed_weighted_interval`` (TPBench ``score_answers.py`` ``cluster_interval``) in test_tpbench_gaps.py,
each against the release's code step by step; here the row splits (ragscale ``replay.py``) and the
family-by-row draws, which the release does not implement, so their draws are written out."""

from __future__ import annotations

import numpy as np
import pytest

from kvx.aggregate.stats.releases import CHUNK, family_row_draws, spans_families, split_halves

SEED = 20260821  # ragscale's run seed


def test_split_halves_are_the_release_replay_splits() -> None:
    """``replay_audit``: per split ``order = rng.permutation(n)``, ``cut = n // 2``, selection first."""
    n, n_splits = 11, 2 * CHUNK + 5  # odd rows, and splits across three blocks
    rng = np.random.default_rng(SEED)
    masks = np.concatenate([first for first, _ in split_halves(n, n_splits, SEED)])
    for k in range(n_splits):
        order = rng.permutation(n)
        expected = np.zeros(n)
        expected[order[: n // 2]] = 1.0
        assert (masks[k] == expected).all(), k


def test_split_halves_pinned() -> None:
    blocks = list(split_halves(6, 3, SEED))
    assert len(blocks) == 1
    first, second = blocks[0]
    assert first.astype(int).tolist() == [[1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1]]
    assert (second == 1.0 - first).all()


def test_split_halves_by_hand() -> None:
    first, second = next(split_halves(2, 4, 0))
    assert (first.sum(axis=1) == 1).all() and (first + second == 1).all()  # one row each side
    with pytest.raises(ValueError):
        next(split_halves(1, 4, 0))
    with pytest.raises(ValueError):
        next(split_halves(4, 0, 0))


def test_family_row_draws_pinned() -> None:
    [(rows, readers)] = list(family_row_draws(5, ["b", "a", "b", "c"], 4, SEED))
    assert rows.tolist() == [[1, 2, 0, 1, 1], [0, 0, 2, 2, 1], [2, 0, 2, 1, 0], [0, 2, 1, 2, 0]]
    # sorted families (a, b, c): draw 0 took b twice and a once, draw 3 took c twice and a once
    assert readers.tolist() == [[2, 1, 2, 0], [1, 1, 1, 1], [2, 1, 2, 0], [0, 1, 0, 2]]


def test_family_row_draws_follow_the_stated_order() -> None:
    """Rows ``integers(0, n_rows, n_rows)``, then families ``integers(0, k, k)`` over sorted labels."""
    families = ["b", "a", "b", "c"]
    rng = np.random.default_rng(7)
    drawn = [(r.copy(), w.copy()) for r, w in family_row_draws(9, families, CHUNK + 3, 7)]
    rows, readers = np.concatenate([r for r, _ in drawn]), np.concatenate([w for _, w in drawn])
    for k in range(CHUNK + 3):
        assert (rows[k] == np.bincount(rng.integers(0, 9, 9), minlength=9)).all()
        by_family = np.bincount(rng.integers(0, 3, 3), minlength=3)  # a, b, c
        assert (readers[k] == by_family[[1, 0, 1, 2]]).all()


def test_one_family_draws_rows_only_as_bootstrap_pair_does() -> None:
    """With one family the draws are ``bootstrap_pair``'s rows, whatever the family is called."""
    rng = np.random.default_rng(SEED)
    for name in ("x", "y"):
        [(rows, readers)] = list(family_row_draws(6, [name] * 3, 50, SEED))
        assert (readers == 1).all()
    expected = [np.bincount(rng.integers(0, 6, size=6), minlength=6) for _ in range(50)]
    assert (rows == np.stack(expected)).all()


def test_family_row_draws_by_hand() -> None:
    [(rows, readers)] = list(family_row_draws(1, ["a", "a"], 2, 0))
    assert rows.tolist() == [[1], [1]] and readers.tolist() == [[1, 1], [1, 1]]  # one row: drawn once
    assert spans_families(["a", "b"]) and not spans_families(["a", "a"]) and not spans_families([])
    with pytest.raises(ValueError):
        next(family_row_draws(3, ["a"], 0, 0))
