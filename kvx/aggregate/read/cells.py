"""Cells by identity: every distinct setting is its own matrix row, named by what varies.

Records carry their cell's identity (an id and its flat fields). Fields that differ between the
cells of a selection are appended to the task, reader or compressor label they belong to
(``snapkv[window_size=16]``, ``hf:org/model[precision=16-true]``, ``ruler_niah_single[context_tokens=4096]``),
so every analysis that groups by task x reader x compressor x setting keeps two settings apart, and
the matrix shows each varying field as a column of its own.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvx.core.identity import varying
from kvx.core.records import CELL

#: label column -> the flat-field prefixes it absorbs when they vary
OWNERS = {
    "task": ("task", "n_sources", "context_tokens", "max_new_tokens"),
    "reader": ("reader",),
    "compressor": ("transform", "press", "query_aware"),
}
_SHORT = ("task.", "reader.", "press.")


def owner(key: str) -> str | None:
    head = key.split(".", 1)[0]
    return next((column for column, prefixes in OWNERS.items() if head in prefixes), None)


def _part(key: str, value: Any) -> str:
    name = next((key.removeprefix(p) for p in _SHORT if key.startswith(p)), key)
    return f"{name}={value}"


def label_cells(rows: pd.DataFrame, cells: dict[str, dict[str, Any]]) -> tuple[pd.DataFrame, list[str]]:
    """Rows with varying identity fields appended to their labels, and those fields' names."""
    present = {cid: cells[cid] for cid in rows["cell_id"].unique() if cid in cells}
    keys = [k for k in varying(present) if owner(k)]
    if not keys:
        return rows, []
    rows = rows.copy()
    for column in OWNERS:
        mine = [k for k in keys if owner(k) == column]
        if not mine:
            continue
        parts = {
            cid: ", ".join(_part(k, flat[k]) for k in mine if k in flat) for cid, flat in present.items()
        }
        suffix = {cid: f"[{text}]" if text else "" for cid, text in parts.items()}
        rows[column] = rows[column] + rows["cell_id"].map(suffix).fillna("")
    return rows, keys


def with_varying(
    matrix: pd.DataFrame, rows: pd.DataFrame, cells: dict[str, dict[str, Any]], keys: list[str]
) -> pd.DataFrame:
    """The matrix with one column per varying field, right after ``setting`` (FullCache rows get
    their task and reader fields; pooled rows none)."""
    if not keys or matrix.empty:
        return matrix
    firsts = rows.drop_duplicates(CELL)
    values = {
        (r.task, r.reader, r.compressor, r.setting): cells.get(r.cell_id, {}) for r in firsts.itertuples()
    }
    split = {(t, rd): flat for (t, rd, _, _), flat in values.items()}
    out = matrix.copy()
    at = list(out.columns).index("setting") + 1
    for offset, key in enumerate(keys):
        column = []
        for r in out.itertuples():
            flat = values.get((r.task, r.reader, r.compressor, r.setting))
            if flat is None and owner(key) in ("task", "reader"):
                flat = split.get((r.task, r.reader))
            value = (flat or {}).get(key)
            column.append("" if value is None else str(value))  # shown as typed: 16, not 16.000
        # a field named like a matrix column (n_sources: the split size vs the records counted)
        out.insert(at + offset, f"cell.{key}" if key in out.columns else key, column)
    return out
