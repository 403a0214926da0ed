"""Figures kept between aggregates: a table that did not change is not drawn again.

Drawing is a third of an aggregate's CPU (matplotlib lays out and renders every label), and aggregating
the same records again with other options redraws mostly the same tables. A figure is kept under the
user cache, keyed by its table (pickled), the function that draws it, the drawing code, and matplotlib's
version and settings; a hit writes the kept PNGs, byte for byte what drawing them would write.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import matplotlib
import pandas as pd

from kvx.aggregate.read import cache

DRAWING_CODE = ("aggregate/publish",)

Plot = Callable[[pd.DataFrame, Path], list[Path]]


@lru_cache(maxsize=1)
def _style() -> str:
    return repr([matplotlib.__version__, sorted((k, repr(v)) for k, v in matplotlib.rcParams.items())])


def draw(plot: Plot, frame: pd.DataFrame, out: Path, root: Path | None) -> list[Path]:
    """``plot(frame, out)``, or the PNGs it wrote for the same table last time (``root``: the cache)."""
    if root is None:
        return plot(frame, out)
    try:
        table = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a table that does not pickle is drawn, never kept
        return plot(frame, out)
    code = cache.fingerprint(DRAWING_CODE)
    entry = cache.key_path(root / "figures", code, _style(), plot.__module__, plot.__qualname__, table)
    kept = cache.load(entry)
    if isinstance(kept, list):
        return [_write(out / name, data) for name, data in kept]
    paths = plot(frame, out)
    if all(path.is_relative_to(out) for path in paths):
        cache.store(entry, [(str(path.relative_to(out)), path.read_bytes()) for path in paths])
    return paths


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
