"""Repeated artifact draws (ragscale Table 16 and B.6): several stored artifacts of one compressor per row,
each its own evidence condition, read side by side.

Evidence conditions that differ only by their draw (``summary[draw=K]``, ``replay[draw=K]``; the draw's
sampling temperature and a replayed file's text digest are part of the draw) form one group. Per task x
group x compressor x setting x metric it reports the range over draws of the endpoint retention
(``audit_pairs``) and the excess flips (``audit_panel``), and the artifacts' integrity as B.6 reports it:
the share of rows whose text is byte-identical across every draw and the lowest and highest share of
rows two draws share byte for byte, on the rows every draw has a text for.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd

from kvx.aggregate.read import text
from kvx.core.records import PANEL_METRIC, SUPPORTED

#: transform fields that tell draws of one artifact apart (a replayed file's digest covers its draw's texts)
DRAW_FIELDS = ("draw", "draw_temperature", "artifacts_sha256")
_PART = re.compile(r"^(transform\.)?(" + "|".join(DRAW_FIELDS) + ")=")
_DRAW = re.compile(r"(?<=[\[,])\s*(?:transform\.)?draw=(\d+)")

COLUMNS = [
    "task",
    "evidence",
    "compressor",
    "setting",
    "metric",
    "n_draws",
    "draws",
    "retention_min",
    "retention_max",
    "excess_flips_min",
    "excess_flips_max",
    "n_rows",
    "identical_share",
    "pairwise_share_min",
    "pairwise_share_max",
]


def without_draw(label: str, separator: str = ",") -> str:
    """A label without its draw fields: the evidence ``summary[draw=2,reader=x]`` -> ``summary[reader=x]``;
    the compressor label the matrix suffixes with varying fields, ``none[transform.draw=2]`` -> ``none``
    (``separator=", "``)."""
    if "[" not in label or not label.endswith("]"):
        return label
    head, inner = label[: label.index("[")], label[label.index("[") + 1 : -1]
    kept = [p for p in inner.split(separator) if not _PART.match(p.strip())]
    return f"{head}[{separator.join(kept)}]" if kept else head


def draw_of(evidence: str) -> int:
    """The draw an evidence condition names (0 when it names none: draw 0 keeps its old label)."""
    found = _DRAW.search(evidence)
    return int(found.group(1)) if found else 0


def integrity(hashes: pd.DataFrame) -> tuple[int, float, float, float]:
    """(rows, byte-identical share across all draws, min and max pairwise identity) of a row x draw
    frame of text hashes; only rows every draw has a text for count."""
    complete = hashes.dropna()
    if complete.empty or complete.shape[1] < 2:
        return len(complete), np.nan, np.nan, np.nan
    values = complete.to_numpy()
    identical = float((values == values[:, :1]).all(axis=1).mean())
    pairs = [
        float((values[:, a] == values[:, b]).mean())
        for a, b in itertools.combinations(range(values.shape[1]), 2)
    ]
    return len(complete), identical, min(pairs), max(pairs)


def audit_draws(rows: pd.DataFrame, pairs: pd.DataFrame, panel: pd.DataFrame) -> pd.DataFrame:
    """One row per task x draw group x compressor x setting x metric with two or more draws."""
    panel = panel[~panel["evidence"].str.contains(" -> ", regex=False)]  # a --swap is no draw
    if panel.empty:
        return pd.DataFrame(columns=COLUMNS)
    panel = panel.assign(
        group=panel["evidence"].map(without_draw),
        by=panel["compressor"].map(lambda c: without_draw(c, ", ")),
        draw=panel["evidence"].map(draw_of),
    )
    ends = pairs[pairs["kind"] == "endpoints"]
    keys = PANEL_METRIC
    retention = ends.set_index(keys)["retention"] if not ends.empty else pd.Series(dtype=float)
    texts = rows[(rows["status"] == SUPPORTED) & rows["text_hash"].notna()]
    out = []
    for (task, group, compressor, setting, metric), part in panel.groupby(
        ["task", "group", "by", "setting", "metric"], sort=True
    ):
        part = part.sort_values("draw", kind="stable")
        if len(part) < 2:
            continue
        conditions = list(part["evidence"])
        kept = np.array([retention.get(tuple(r), np.nan) for r in part[keys].itertuples(index=False)], float)
        flips = part["excess_flips"].to_numpy(float)
        mine = texts[(texts["task"] == task) & texts["evidence"].isin(conditions)]
        mine = mine.assign(row_id=text.exact(mine["row_id"]))  # exact codes: ids may differ after a NUL
        per_row = mine.groupby(["row_id", "evidence"])["text_hash"].agg(
            lambda h: h.iloc[0] if h.nunique() == 1 else None
        )
        hashes = per_row.unstack("evidence").reindex(columns=conditions)
        n_rows, identical, low, high = integrity(hashes)
        out.append(
            {
                "task": task,
                "evidence": group,
                "compressor": compressor,
                "setting": setting,
                "metric": metric,
                "n_draws": len(conditions),
                "draws": ",".join(str(d) for d in part["draw"]),
                "retention_min": np.nanmin(kept) if np.isfinite(kept).any() else np.nan,
                "retention_max": np.nanmax(kept) if np.isfinite(kept).any() else np.nan,
                "excess_flips_min": np.nanmin(flips) if np.isfinite(flips).any() else np.nan,
                "excess_flips_max": np.nanmax(flips) if np.isfinite(flips).any() else np.nan,
                "n_rows": n_rows,
                "identical_share": identical,
                "pairwise_share_min": low,
                "pairwise_share_max": high,
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)
