"""KVDiagnosis Figure 9A: the QA C→W rate per reader and tier, pooled the paper's way.

The caption pools "QA C→W rate ... over six position methods and QuantizedCache": Qasper and HotpotQA
together, ThinK left out (it is channel pruning, not position selection, and has no 25% result), as
Σ C→W / Σ FullCache-correct supported pairs (§3.3's source-weighted pooling). On the release this gives
Qwen's 8.9% → 38.7% from the light to the aggressive tier. kvx's own ``kvd_tiers`` keeps every workload
apart and every method in; this table is built from its cells.
"""

from __future__ import annotations

import pandas as pd

from kvx.aggregate.kvdiagnosis.workloads import tier_rank

__all__ = ["LEFT_OUT", "QA_WORKLOADS", "qa_tiers"]

#: the evidence-annotated QA workloads Figure 9A pools (a workload's name before any ``[fields]``)
QA_WORKLOADS = ("qasper", "hotpotqa")
#: the methods Figure 9A leaves out: ThinK prunes key channels, it selects no positions
LEFT_OUT = ("think",)
COUNTS = ["n_cells", "n_records", "n_unsupported", "n_error", "n_supported", "n_fc", "n_cw"]


def _base(label: str) -> str:
    return str(label).partition("[")[0]


def qa_tiers(tiers: pd.DataFrame) -> pd.DataFrame | None:
    """Per reader and tier: the pooled QA C→W rate over the tiered cells of the QA workloads (named in
    ``workloads``) without ThinK (``left_out`` counts its cells there); None without a QA workload."""
    cells = tiers[(tiers["level"] == "cell") & (tiers["tier"] != "")]
    qa = cells[cells["workload"].map(_base).isin(QA_WORKLOADS)]
    if qa.empty:
        return None
    dropped = qa["method"].map(_base).isin(LEFT_OUT)
    kept = qa[~dropped]
    out = []
    for (reader, tier), group in qa.groupby(["reader", "tier"], sort=True):
        part = kept[(kept["reader"] == reader) & (kept["tier"] == tier)]
        sums = part[COUNTS].sum()
        out.append(
            {
                "reader": reader,
                "tier": tier,
                "workloads": ", ".join(sorted(part["workload"].unique())),
                "methods": ", ".join(sorted(part["method"].unique())),
                **{c: int(sums[c]) for c in COUNTS},
                "cw_rate": sums["n_cw"] / sums["n_fc"] if sums["n_fc"] > 0 else float("nan"),
                "left_out": int(dropped[group.index].sum()),
                "reason": "" if sums["n_fc"] > 0 else "no FullCache-correct supported pair in the pool",
            }
        )
    frame = pd.DataFrame(out)
    frame["_tier"] = tier_rank(frame["tier"])
    return frame.sort_values(["reader", "_tier"]).drop(columns="_tier").reset_index(drop=True)
