"""The evidence-boost intervention report (KVDiagnosis section 5.3, "Low EAR predicts selective repair").

Over C→W rows whose failure the eager baseline reproduces: repair rate under the evidence boost
and under the count-matched sham, their paired difference with a paired-bootstrap interval and
the exact McNemar p on the discordant repairs; over C→C controls: how often each boost degrades.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.stats.paired_tests import pair_mcnemar
from kvx.aggregate.stats.resampling import paired_bootstrap_difference
from kvx.core.records import CC, CELL, CW, SUPPORTED

#: what ``repairs`` and ``degradations`` return, in the tables' order
REPAIRS = [
    "n_reproduced",
    "repaired_evidence",
    "repaired_sham",
    "repair_rate_evidence",
    "repair_rate_sham",
    "paired_diff",
    "diff_ci_low",
    "diff_ci_high",
    "evidence_only",
    "sham_only",
    "mcnemar_p",
]
DEGRADATIONS = ["degraded_evidence", "degraded_sham", "degradation_rate_evidence", "degradation_rate_sham"]
COLUMNS = [*CELL, "n_cw_rows", *REPAIRS, "n_cc_controls", *DEGRADATIONS]


def repairs(reproduced: pd.DataFrame, n_boot: int, seed: int) -> dict[str, float]:
    """Over C→W rows whose failure the eager baseline reproduces: repairs under the evidence boost and
    the sham, their rates, the paired difference with its paired-bootstrap interval, the discordant
    counts and the exact McNemar p (N/A without rows)."""
    ev = reproduced["iv_repaired_evidence"].to_numpy() == 1.0
    sh = reproduced["iv_repaired_sham"].to_numpy() == 1.0
    n = len(reproduced)
    out: dict[str, float] = {
        "n_reproduced": n,
        "repaired_evidence": int(ev.sum()),
        "repaired_sham": int(sh.sum()),
        "repair_rate_evidence": ev.mean() if n else np.nan,
        "repair_rate_sham": sh.mean() if n else np.nan,
        "paired_diff": np.nan,
        "diff_ci_low": np.nan,
        "diff_ci_high": np.nan,
        "evidence_only": int((ev & ~sh).sum()),
        "sham_only": int((~ev & sh).sum()),
        "mcnemar_p": np.nan,
    }
    if n:
        diff, low, high = paired_bootstrap_difference(ev, sh, n_boot=n_boot, seed=seed)
        out.update(
            paired_diff=diff,
            diff_ci_low=np.nan if low is None else low,
            diff_ci_high=np.nan if high is None else high,
            mcnemar_p=pair_mcnemar(ev, sh)[2],
        )
    return out


def degradations(controls: pd.DataFrame) -> dict[str, float]:
    """Over C→C controls: how many each boost turned wrong, and the rates (N/A without controls)."""
    n = len(controls)
    out: dict[str, float] = {
        "degraded_evidence": int((controls["iv_degraded_evidence"] == 1.0).sum()),
        "degraded_sham": int((controls["iv_degraded_sham"] == 1.0).sum()),
    }
    out["degradation_rate_evidence"] = out["degraded_evidence"] / n if n else np.nan
    out["degradation_rate_sham"] = out["degraded_sham"] / n if n else np.nan
    return out


def _summary(group: pd.DataFrame, n_boot: int, seed: int) -> dict[str, float]:
    cw = group[(group["transition"] == CW) & group["iv_reproduced"].notna()]
    cc = group[(group["transition"] == CC) & group["iv_degraded_evidence"].notna()]
    reproduced = cw[cw["iv_reproduced"] == 1.0]
    return {
        "n_cw_rows": len(cw),
        **repairs(reproduced, n_boot, seed),
        "n_cc_controls": len(cc),
        **degradations(cc),
    }


def intervention(rows: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Per cell and over all cells; empty when no record ran the intervention."""
    measured = rows[
        (rows["status"] == SUPPORTED) & (rows["iv_reproduced"].notna() | rows["iv_degraded_evidence"].notna())
    ]
    if measured.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = [
        dict(zip(CELL, keys, strict=True)) | _summary(g, n_boot, seed)
        for keys, g in measured.groupby(CELL, sort=True)
    ]
    out.append(dict.fromkeys(CELL, "all") | _summary(measured, n_boot, seed))
    return pd.DataFrame(out, columns=COLUMNS)
