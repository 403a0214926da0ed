"""String anchors next to the structural metrics they stand in for (kv-exec-bench's contrast).

Tasks declare pairs such as name_substring -> schema_valid or edit_sim -> pass; per cell each
metric's compressed mean is shown with its FullCache mean over the same records and the share it
keeps. An anchor that keeps ~100% while its structural metric falls is exactly the damage a
string-only evaluation reports as lossless.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.analyse.matrix import CELL

COLUMNS = [
    *CELL,
    "ratio",
    "anchor",
    "structural",
    "n",
    "anchor_full",
    "anchor_comp",
    "anchor_kept",
    "structural_full",
    "structural_comp",
    "structural_kept",
]


def _side(group: pd.DataFrame, name: str) -> tuple[int, float, float, float]:
    full, comp = group.get(f"full_m.{name}"), group.get(f"comp_m.{name}")
    if full is None or comp is None:
        return 0, np.nan, np.nan, np.nan
    valid = full.notna() & comp.notna()
    if not valid.any():
        return 0, np.nan, np.nan, np.nan
    f, c = float(full[valid].mean()), float(comp[valid].mean())
    return int(valid.sum()), f, c, (c / f if f > 0 else np.nan)


def contrast(rows: pd.DataFrame, pairs: dict[str, dict[str, str]]) -> pd.DataFrame:
    """One row per cell and declared (anchor, structural) pair of its task; empty without pairs."""
    out = []
    supported = rows[rows["status"] == "supported"]
    for keys, group in supported.groupby(CELL, sort=True):
        for anchor, structural in sorted(pairs.get(keys[0], {}).items()):
            n_a, a_full, a_comp, a_kept = _side(group, anchor)
            n_s, s_full, s_comp, s_kept = _side(group, structural)
            out.append(
                dict(zip(CELL, keys, strict=True))
                | {
                    "ratio": float(group["ratio"].iloc[0]),
                    "anchor": anchor,
                    "structural": structural,
                    "n": min(n_a, n_s),
                    "anchor_full": a_full,
                    "anchor_comp": a_comp,
                    "anchor_kept": a_kept,
                    "structural_full": s_full,
                    "structural_comp": s_comp,
                    "structural_kept": s_kept,
                }
            )
    return pd.DataFrame(out, columns=COLUMNS)
