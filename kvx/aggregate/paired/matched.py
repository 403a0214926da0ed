"""Matched comparisons of two compressors' failure sets (KVDiagnosis section 3.3, Figure 4B).

The basis for comparing two compressors is the same configured setting (kvx's ratio, which HQQ
maps to a bit width). Each pair reports |F_a ∩ F_b|, |F_a ∪ F_b| and their Jaccard; a diagnostic
is compared only on I^g = F_a ∩ F_b ∩ A_a^g ∩ A_b^g, the shared failures where it is valid for both.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from kvx.aggregate.paired.matrix import failure_rows
from kvx.aggregate.read.rows import Metric
from kvx.aggregate.stats.overlap import jaccard
from kvx.core.records import SUPPORTED, TASK_READER

GROUP = [*TASK_READER, "setting"]


def matched(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    supported = rows[rows["status"] == SUPPORTED]
    fails = {k: g.set_index("row_id") for k, g in failure_rows(rows).groupby([*GROUP, "compressor"])}
    empty = failure_rows(rows).iloc[:0].set_index("row_id")
    out = []
    for (task, reader, setting), group in supported.groupby(GROUP, sort=True):
        for a, b in combinations(sorted(group["compressor"].unique()), 2):
            fa = fails.get((task, reader, setting, a), empty)
            fb = fails.get((task, reader, setting, b), empty)
            sa, sb = set(fa.index), set(fb.index)
            both = sorted(sa & sb)
            row = {
                "task": task,
                "reader": reader,
                "setting": setting,
                "compressor_a": a,
                "compressor_b": b,
                "n_a": len(sa),
                "n_b": len(sb),
                "intersection": len(both),
                "union": len(sa | sb),
            }
            jac = jaccard(sa, sb)
            row["jaccard"] = np.nan if jac is None else jac
            # positions of the shared failures, found once per pair (as .loc finds them), then plain
            # arrays per metric: a .loc per metric and pair was most of a release's aggregate
            at_a, at_b = fa.index.get_indexer_for(both), fb.index.get_indexer_for(both)
            for m in metrics:
                va = fa[m.name].to_numpy(dtype=float)[at_a]
                vb = fb[m.name].to_numpy(dtype=float)[at_b]
                valid = ~np.isnan(va) & ~np.isnan(vb)
                row[f"{m.name}_n"] = int(valid.sum())
                row[f"{m.name}_mean_a"] = float(va[valid].mean()) if valid.any() else np.nan
                row[f"{m.name}_mean_b"] = float(vb[valid].mean()) if valid.any() else np.nan
            out.append(row)
    columns = [*GROUP, "compressor_a", "compressor_b", "n_a", "n_b", "intersection", "union", "jaccard"]
    columns += [f"{m.name}_{s}" for m in metrics for s in ("n", "mean_a", "mean_b")]
    return pd.DataFrame(out, columns=columns)
