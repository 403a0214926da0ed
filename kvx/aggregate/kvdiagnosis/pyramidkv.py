"""KVDiagnosis Table 5: the SnapKV / PyramidKV adapter audit.

The paper excluded its PyramidKV rows because every one equalled its SnapKV pair (retained indices,
outputs, scores, gold NLL) - the tracker had bypassed PyramidKV's layer budgets. kvx runs both presses
itself (``press=snapkv,pyramidkv``), so the same check runs on its records: per task, reader and
setting, how many paired answers (same source) are identical. kvx records do not keep the retained
indices, so that column of the paper is N/A here; the coverage ECov (computed from them) stands in.
A real PyramidKV should differ from SnapKV on some pairs; all-equal is the paper's red flag.

The release's own audit (``pyramidkv_adapter_audit.json``, imported next to the records) is shown as
published: its representative pairs (Table 5's rows) and its per-field equality counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvx.core.records import SUPPORTED, TASK_READER

PAIR = ("snapkv", "pyramidkv")
KEYS = ["task", "reader", "revision", "setting", "seed", "source_id"]
#: compared field -> row column
FIELDS = {
    "output": "comp_output_hash",  # a 52-bit hash of the output (kvx.aggregate.read.rows)
    "score": "comp_score",
    "correct": "comp_correct",
    "delta_nll": "delta_nll",
    "ecov": "ecov",
}
NO_INDICES = "kvx records do not keep retained indices; ECov (computed from them) stands in"


def _hex(value: Any) -> str | None:
    return None if pd.isna(value) else f"{int(value):013x}"


def _equal(a: pd.Series, b: pd.Series) -> tuple[int, int]:
    """(pairs where both values are present, pairs where they are also equal)."""
    both = a.notna() & b.notna()
    return int(both.sum()), int((a[both] == b[both]).sum())


def pyramidkv_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Equality of SnapKV and PyramidKV answers on the same source, per task, reader and setting."""
    present = set(rows["compressor"]) if "compressor" in rows else set()
    if not set(PAIR) <= present:
        missing = ", ".join(sorted(set(PAIR) - present))
        reason = f"no {missing} records: run press=snapkv,pyramidkv on the same tasks and settings"
        return pd.DataFrame([{"task": None, "status": "not_applicable", "reason": reason}])
    supported = rows[rows["status"] == SUPPORTED]
    columns = [c for c in FIELDS.values() if c in supported]
    snap = supported[supported["compressor"] == PAIR[0]][KEYS + columns]
    pyr = supported[supported["compressor"] == PAIR[1]][KEYS + columns]
    pairs = snap.merge(pyr, on=KEYS, suffixes=("_snapkv", "_pyramidkv"))
    if pairs.empty:
        reason = "no source was run with both presses at the same task, reader and setting"
        return pd.DataFrame([{"task": None, "status": "not_applicable", "reason": reason}])
    out = []
    for (task, reader, setting), part in pairs.groupby([*TASK_READER, "setting"], sort=True):
        row: dict[str, Any] = {"task": task, "reader": reader, "setting": setting, "n_pairs": len(part)}
        for name, column in FIELDS.items():
            if column not in columns:
                row[f"n_{name}_compared"], row[f"n_{name}_equal"] = 0, 0
                continue
            row[f"n_{name}_compared"], row[f"n_{name}_equal"] = _equal(
                part[f"{column}_snapkv"], part[f"{column}_pyramidkv"]
            )
        first = part.sort_values("source_id").iloc[0]
        row["example_source"] = first["source_id"]
        row["snapkv_output_hash"] = _hex(first.get("comp_output_hash_snapkv"))
        row["pyramidkv_output_hash"] = _hex(first.get("comp_output_hash_pyramidkv"))
        compared, equal = row["n_output_compared"], row["n_output_equal"]
        row["all_outputs_equal"] = compared > 0 and equal == compared
        row["indices"] = "N/A"
        row["status"], row["reason"] = "ok", NO_INDICES
        out.append(row)
    return pd.DataFrame(out)


def release_audit(audit: dict[str, Any] | None) -> pd.DataFrame:
    """The release's audit as published: one row per representative pair (index and output sha256
    prefixes, equal or not), then one per audited field with its equal pairs over all pairs."""
    if audit is None:
        reason = "no pyramidkv_adapter_audit.json next to the records (kvx.importers kvdiagnosis copies it)"
        return pd.DataFrame([{"kind": None, "status": "not_applicable", "reason": reason}])
    out = []
    for pair in audit.get("representative_pairs") or []:
        snap, pyr = pair.get("SnapKVPress") or {}, pair.get("PyramidKVPress") or {}
        budget = pair.get("retained_budget")
        out.append(
            {
                "kind": "pair",
                "dataset": pair.get("dataset"),
                "sample": pair.get("sample_id"),
                "kv": f"{100 * budget:g}%" if isinstance(budget, (int, float)) else None,
                "index_hash": (snap.get("retained_index_sha256") or "")[:10] or None,
                "output_hash": (snap.get("output_sha256") or "")[:10] or None,
                "hashes_identical": snap.get("retained_index_sha256") == pyr.get("retained_index_sha256")
                and snap.get("output_sha256") == pyr.get("output_sha256"),
                "equal": bool(pair.get("retained_indices_equal")) and bool(pair.get("outputs_equal")),
            }
        )
    total = audit.get("pair_count")
    for name, equality in sorted((audit.get("overall_equality") or {}).items()):
        out.append(
            {
                "kind": "field",
                "field": name,
                "n_equal_pairs": equality.get("equal_pairs"),
                "n_pairs": total,
                "rate": equality.get("rate", np.nan),
            }
        )
    frame = pd.DataFrame(out)
    frame["status"], frame["reason"] = "ok", ""
    frame["audit_status"] = audit.get("audit_status")
    return frame
