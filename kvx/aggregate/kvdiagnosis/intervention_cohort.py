"""The intervention cohort summary (KVDiagnosis section 5.3, "Low EAR predicts selective repair").

One row per Table 4 signature among the C→W rows the intervention measured, and ``all``. The
paper's cohort is the ``low_ear_candidate`` row: "Of the 104 rows matching only the low-EAR rule,
96 reproduce the failure under the intervention's eager-attention baseline ... repairs 28/96
(29.2%); ... 6/96 (6.3%), a paired difference of 22.9 percentage points (23 evidence-only versus 1
sham-only repair; 95% paired-bootstrap CI, 14.6–32.3 points; two-sided exact McNemar p=2.98e-6).
The same evidence boost degrades only 3/92 (3.3%) matched C→C controls." Other signatures appear
only in records made with ``cohort=all``.

Matched C→C controls (the paper and its release do not say how they were matched; kvx's rule):
per cell (task x reader x compressor x setting) and signature, the C→C rows of that signature the
intervention measured are ordered by ``sha256("<seed>|<record key>")`` and the first ``n`` are
taken, ``n`` = the cell's reproduced C→W rows of that signature (all of them when fewer exist, so
``n_cc_matched`` may fall short of ``n_reproduced``, as 92 < 96 in the paper). The order depends
on the seed and the record only, never on read order.
"""

from __future__ import annotations

import hashlib

import pandas as pd

from kvx.aggregate.kvdiagnosis.intervention import DEGRADATIONS, REPAIRS, degradations, repairs
from kvx.core.records import CC, CELL, CW, SUPPORTED
from kvx.diagnostics.categories import CATEGORIES

ALL = "all"
COLUMNS = ["category", "n_rows", *REPAIRS, "n_cc_candidates", "n_cc_matched", *DEGRADATIONS]


def _draw_key(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}|{key}".encode()).hexdigest()


def matched_controls(failures: pd.DataFrame, controls: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Per cell and signature, as many C→C ``controls`` as ``failures`` has reproduced rows, in the
    seeded order of the module docstring (all of them when fewer)."""
    reproduced = failures[failures["iv_reproduced"] == 1.0]
    wanted = reproduced.groupby([*CELL, "iv_signature"], sort=False).size()
    if wanted.empty or controls.empty:
        return controls.iloc[:0]
    ordered = controls.assign(_draw=[_draw_key(seed, k) for k in controls["key"]]).sort_values(
        ["_draw", "key"], kind="stable"
    )
    rank = ordered.groupby([*CELL, "iv_signature"], sort=False).cumcount()
    index = pd.MultiIndex.from_frame(ordered[[*CELL, "iv_signature"]])
    limit = wanted.reindex(index, fill_value=0).to_numpy()
    return ordered[rank.to_numpy() < limit].drop(columns="_draw")


def _summary(cw: pd.DataFrame, cc: pd.DataFrame, matched: pd.DataFrame, n_boot: int, seed: int) -> dict:
    reproduced = cw[cw["iv_reproduced"] == 1.0]
    return {
        "n_rows": len(cw),
        **repairs(reproduced, n_boot, seed),
        "n_cc_candidates": len(cc),
        "n_cc_matched": len(matched),
        **degradations(matched),
    }


def intervention_cohort(rows: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Per Table 4 signature (Table 4's order) and ``all``; empty when no C→W row ran the intervention.
    A C→W row counts once the intervention measured it (``iv_reproduced`` set); a C→C row is a
    candidate once it measured it (``iv_degraded_evidence`` set)."""
    supported = rows[rows["status"] == SUPPORTED] if not rows.empty else rows
    if supported.empty or "iv_signature" not in supported:
        return pd.DataFrame(columns=COLUMNS)
    cw = supported[(supported["transition"] == CW) & supported["iv_reproduced"].notna()]
    cc = supported[(supported["transition"] == CC) & supported["iv_degraded_evidence"].notna()]
    if cw.empty:
        return pd.DataFrame(columns=COLUMNS)
    matched = matched_controls(cw, cc, seed)
    out = []
    for category in [c for c in CATEGORIES if c in set(cw["iv_signature"])]:
        cw_k, cc_k, matched_k = (f[f["iv_signature"] == category] for f in (cw, cc, matched))
        out.append({"category": category} | _summary(cw_k, cc_k, matched_k, n_boot, seed))
    out.append({"category": ALL} | _summary(cw, cc, matched, n_boot, seed))
    return pd.DataFrame(out, columns=COLUMNS)
