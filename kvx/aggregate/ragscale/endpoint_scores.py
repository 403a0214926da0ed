"""The endpoint readers' own scores beside their upgrade (ragscale Figure 1): for the lowest- and
highest-scoring raw readers of a panel, each one's raw and compressed mean and compression gain, the raw
and compressed upgrade between them, its retention and the share of the upgrade that disappears.

Figure 1 says it for HotpotQA RECOMP: the lower reader gains 23.8 pp, the higher one -0.2 pp, the
upgrade falls from 31.8 to 7.8 pp, "so 75% disappears" (1 - retention). The pair and its upgrade are
``audit_pairs``' endpoint row; the scores are ``audit_readers``' means over the same shared rows, so the
two tables never name different readers or numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.core.records import PANEL_METRIC

__all__ = ["COLUMNS", "endpoint_scores"]

COLUMNS = [
    *PANEL_METRIC,
    "reader_low",
    "reader_high",
    "low_raw_mean",
    "low_comp_mean",
    "low_gain",
    "high_raw_mean",
    "high_comp_mean",
    "high_gain",
    "raw_upgrade",
    "comp_upgrade",
    "retention",
    "lost_share",
]


def endpoint_scores(audit_readers: pd.DataFrame, audit_pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per panel x metric with an endpoint pair: the two readers' scores and their upgrade;
    ``lost_share`` = 1 - retention (N/A where retention is: a raw upgrade under the minimum gap)."""
    if audit_pairs.empty or audit_readers.empty:
        return pd.DataFrame(columns=COLUMNS)
    pairs = audit_pairs[audit_pairs["kind"] == "endpoints"]
    scores = audit_readers[[*PANEL_METRIC, "reader", "raw_mean", "comp_mean", "gain"]]
    out = pairs[[*PANEL_METRIC, "reader_a", "reader_b", "raw_upgrade", "comp_upgrade", "retention"]]
    out = out.rename(columns={"reader_a": "reader_low", "reader_b": "reader_high"})
    for end in ("low", "high"):
        named = scores.rename(
            columns={
                "reader": f"reader_{end}",
                "raw_mean": f"{end}_raw_mean",
                "comp_mean": f"{end}_comp_mean",
                "gain": f"{end}_gain",
            }
        )
        out = out.merge(named, on=[*PANEL_METRIC, f"reader_{end}"], how="left")
    retention = pd.to_numeric(out["retention"], errors="coerce").to_numpy(float)
    out["lost_share"] = np.where(np.isfinite(retention), 1.0 - retention, np.nan)
    return out[COLUMNS].reset_index(drop=True)
