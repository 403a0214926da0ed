"""KVDiagnosis RQ4 (§5.5, "Fidelity drift is model-dependent"): each method's failure-row ΔNLL, pooled
over its supported settings, per workload and reader.

The paper reports, on RULER-16K, the mean ΔNLL of a method's C→W rows pooled over every setting it
supports (rows, not settings, weighted: StreamingLLM 2.113, ThinK 7.819, QuantizedCache 2.153 on Qwen),
and compares readers with it; the release's compressed-run ledger gives exactly these means. Beside the
mean: the median, a descriptive 95% interval resampling sources (a source recurs across a method's
settings, so rows are not independent: ``cluster_interval``), the same method's C→C rows' ΔNLL and the
AUROC of ΔNLL between C→W and C→C rows (does the drift separate failures from successes, as in Figure 6).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.kvdiagnosis.workloads import TIERS
from kvx.aggregate.read.rows import Metric
from kvx.aggregate.stats.ranks import auroc
from kvx.aggregate.stats.resampling import cluster_interval
from kvx.core.records import CC, CW, SUPPORTED

__all__ = ["delta_nll"]

_KEYS = ["workload", "reader", "method"]
COLUMNS = [
    *_KEYS, "settings", "n_supported", "n_cw", "n", "mean", "median", "low", "high",
    "cc_n", "cc_mean", "cc_median", "auroc", "reason",
]  # fmt: skip


def _values(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy(dtype=float)


def _settings(group: pd.DataFrame) -> str:
    """The settings pooled, as tiers (light, intermediate, aggressive) and any setting in no tier."""
    tiers = [t for t in TIERS if (group["tier"] == t).any()]
    other = sorted(group.loc[group["tier"] == "", "setting"].astype(str).unique())
    return ", ".join([*tiers, *other])


def delta_nll(rows: pd.DataFrame, metrics: list[Metric], n_boot: int, seed: int) -> pd.DataFrame | None:
    """One row per workload, reader and method with supported records: ΔNLL over its C→W rows where
    ΔNLL is valid (``n`` of ``n_cw``), pooled over ``settings``; None when no record has a ΔNLL."""
    metric = next((m for m in metrics if (m.diagnostic, m.value) == ("likelihood", "delta_nll")), None)
    if metric is None:
        return None
    supported = rows[rows["status"] == SUPPORTED]
    out = []
    for (name, reader, method), group in supported.groupby(_KEYS, sort=True):
        cw = group[group["transition"] == CW]
        valid = cw[cw[metric.name].notna()]
        cc = group[(group["transition"] == CC) & group[metric.name].notna()]
        x, y = _values(valid, metric.name), _values(cc, metric.name)
        row = {
            "workload": name,
            "reader": reader,
            "method": method,
            "settings": _settings(group),
            "n_supported": len(group),
            "n_cw": len(cw),
            "n": len(valid),
            "mean": float(x.mean()) if x.size else np.nan,
            "median": float(np.median(x)) if x.size else np.nan,
            "low": np.nan,
            "high": np.nan,
            "cc_n": len(cc),
            "cc_mean": float(y.mean()) if y.size else np.nan,
            "cc_median": float(np.median(y)) if y.size else np.nan,
            "auroc": np.nan,
            "reason": "",
        }
        if x.size:
            row["low"], row["high"] = cluster_interval(x, valid["unit"], n_boot, seed)
            found = auroc(x, y) if y.size else None
            row["auroc"] = np.nan if found is None else found
            row["reason"] = "" if y.size else "no C→C row with a valid ΔNLL: no AUROC"
        else:
            row["reason"] = "no C→W row" if cw.empty else "no C→W row with a valid ΔNLL"
        out.append(row)
    return pd.DataFrame(out, columns=COLUMNS)
