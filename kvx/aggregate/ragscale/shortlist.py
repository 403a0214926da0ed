"""Does compression change which reader a shortlist picks? (ragscale section 6 and Figure 3, right.)

On MuSiQue, "DeepSeek R1 Distill Llama 70B is the raw F1 winner, but GPT-4.1-mini wins the compressed
raw-top-three shortlist. EM, however, keeps its winner." The shortlist is the ``SHORTLIST`` readers with
the highest raw means of the panel (all of them in a smaller panel); the compressed winner is the
shortlisted reader with the highest compressed mean. Readers tied at the top are named together (``A /
B``, in raw order), and the winner has changed when the compressed winner is not the raw winner alone.
Means are ``audit_readers``' (every reader on the panel's shared rows). Shortlist ties at the cut keep
the reader whose name sorts first, so the table never depends on the order rows were read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.core.records import PANEL_METRIC

__all__ = ["COLUMNS", "SHORTLIST", "shortlist"]

#: the paper's raw-top-three shortlist
SHORTLIST = 3
COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "shortlist_size",
    "reader",
    "raw_rank",
    "raw_mean",
    "comp_mean",
    "comp_rank",
    "raw_winner",
    "comp_winner",
    "winner_changed",
]


def shortlist(audit_readers: pd.DataFrame, size: int = SHORTLIST) -> pd.DataFrame:
    """One row per shortlisted reader of each panel x metric with two or more readers scored under both
    evidence conditions: its raw rank in the whole panel and compressed rank within the shortlist (1 =
    best; ties share the better rank), and the panel's raw and compressed winners."""
    if size < 1:
        raise ValueError(f"a shortlist holds at least one reader, got {size}")
    parts = []
    if not audit_readers.empty:
        for _, panel in audit_readers.groupby(PANEL_METRIC, sort=False, dropna=False):
            scored = panel[
                np.isfinite(panel["raw_mean"].astype(float)) & np.isfinite(panel["comp_mean"].astype(float))
            ]
            if len(scored) >= 2:
                parts.append(_panel(scored, size))
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def _panel(panel: pd.DataFrame, size: int) -> pd.DataFrame:
    ranked = panel.assign(raw_rank=panel["raw_mean"].rank(method="min", ascending=False).astype(int))
    ranked = ranked.sort_values(["raw_rank", "reader"], kind="stable")
    short = ranked.head(size).copy()
    short["comp_rank"] = short["comp_mean"].rank(method="min", ascending=False).astype(int)
    raw_winner = _named(ranked[ranked["raw_rank"] == 1])
    comp_winner = _named(short[short["comp_rank"] == 1])
    return short.assign(
        n_readers=len(panel),
        shortlist_size=len(short),
        raw_winner=raw_winner,
        comp_winner=comp_winner,
        winner_changed=comp_winner != raw_winner,
    )


def _named(readers: pd.DataFrame) -> str:
    return " / ".join(readers["reader"].astype(str))
