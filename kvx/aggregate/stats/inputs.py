"""The argument checks the estimators share: a bad input fails before any resampling, by its name."""

from __future__ import annotations

import numpy as np

__all__ = [
    "BLOCK_CELLS",
    "binary",
    "check_bootstrap",
    "check_count",
    "finite",
    "outcome_pair",
    "paired_panels",
]

#: upper bound on the cells of one vectorized block (draws x rows), to bound memory on big inputs
BLOCK_CELLS = 1 << 21


def finite(a: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """A finite float array of ``ndim`` dimensions (2: readers x rows); NaN scores are a caller bug."""
    arr = np.asarray(a, dtype=float)
    if arr.ndim != ndim:
        shape = "1-D" if ndim == 1 else "2-D (readers x rows)"
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values")
    return arr


def paired_panels(x: np.ndarray, y: np.ndarray, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Two same-shape (readers x rows) panels with at least 2 of each: paired designs need both."""
    a, b = finite(x, names[0], 2), finite(y, names[1], 2)
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} differ in shape: {a.shape} vs {b.shape}")
    if a.shape[0] < 2 or a.shape[1] < 2:
        raise ValueError(f"need at least 2 readers and 2 rows, got shape {a.shape}")
    return a, b


def binary(a: np.ndarray, name: str) -> np.ndarray:
    """Booleans from a bool or 0/1 array; any other value is a scoring bug."""
    arr = np.asarray(a)
    if arr.dtype != bool:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must be boolean or 0/1")
        arr = arr.astype(bool)
    return arr


def outcome_pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two same-length boolean outcome vectors over the same rows."""
    xs, ys = binary(x, "x"), binary(y, "y")
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"need two same-length 1-D outcome vectors, got {xs.shape} and {ys.shape}")
    return xs, ys


def check_count(value: int, name: str) -> None:
    """A count of draws or splits is at least 1."""
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_bootstrap(n_boot: int, level: float) -> None:
    """Fail before resampling, not after: at least one draw and a level strictly inside (0, 1)."""
    check_count(n_boot, "n_boot")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
