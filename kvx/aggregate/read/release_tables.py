"""Release tables an importer writes next to its records (``kvx.importers.kvdiagnosis_tables``): the
KVDiagnosis context-demand labels and its PyramidKV adapter audit. They hold no records, so the record
reader skips them; the analyses that need them read them here. Only a record directory has them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvx.aggregate.read.sources import Source
from kvx.core.jsonl import json_lines

DEMAND_FILE = "context_demand.jsonl"
AUDIT_FILE = "pyramidkv_adapter_audit.json"


@dataclass
class ReleaseTables:
    demand: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per demand row, labels flattened
    audit: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _demand(path: Path) -> pd.DataFrame:
    rows = []
    for number, row in json_lines(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        labels = row.pop("labels", None) or {}
        rows.append({**row, **{f"label.{axis}": value for axis, value in labels.items()}})
    return pd.DataFrame(rows)


def release_tables(source: Source) -> ReleaseTables:
    """The release tables under the source's record directories (none for an MLflow store)."""
    out = ReleaseTables()
    demands = []
    for root in getattr(source, "roots", []):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob(DEMAND_FILE)):
            try:
                demands.append(_demand(path))
            except (ValueError, OSError, UnicodeDecodeError) as exc:
                out.notes.append(f"{path} not read, its demand labels are N/A: {exc}")
        for path in sorted(root.rglob(AUDIT_FILE)):
            if out.audit is not None:
                out.notes.append(f"a second {AUDIT_FILE} ({path}) was not read")
                continue
            try:
                audit = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, OSError) as exc:
                out.notes.append(f"{path} not read: {exc}")
                continue
            out.audit = audit if isinstance(audit, dict) else None
    if demands:
        out.demand = pd.concat(demands, ignore_index=True)
    return out
