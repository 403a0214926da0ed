"""An aggregate table from a plugin: which sources break most often across the compressed cells.

kvx finds this module through the ``kvx.aggregate.tables`` entry point; the table appears in
``python -m kvx.aggregate``'s CSV/Markdown output and in ``report.html`` (its section's explanation is
``fragile.md`` beside this file), with no change to kvx.
"""

from __future__ import annotations

import pandas as pd

from kvx.aggregate.catalogue import Section, table
from kvx.core.records import CC, CW

FRAGILE = Section(
    "fragile",
    "Fragile sources (example plugin)",
    200,
    "no FullCache-correct sources",
    optional=True,
    prose_package="kvx_plugin_example",
)


@table("fragile_sources", "fragile", display={"broken_share": "percent"})
def fragile_sources(rows: pd.DataFrame) -> pd.DataFrame | None:
    """Per task and source: the cells whose FullCache answer was right (n_cells) and how many of them the
    compression broke (n_broken, C→W), the most often broken first."""
    correct = rows[rows["transition"].isin([CC, CW])]
    if correct.empty:
        return None
    grouped = correct.groupby(["task", "source_id"], sort=True)["transition"]
    out = pd.DataFrame({"n_cells": grouped.size(), "n_broken": grouped.agg(lambda t: int((t == CW).sum()))})
    out["broken_share"] = out["n_broken"] / out["n_cells"]
    out = out.reset_index().sort_values(["n_broken", "task", "source_id"], ascending=[False, True, True])
    return out.reset_index(drop=True)
