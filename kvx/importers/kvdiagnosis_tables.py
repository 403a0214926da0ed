"""The KVDiagnosis release's per-row side tables that are not runs: context-demand labels and the
PyramidKV adapter audit.

- ``data/context_demand/ruler8k_context_demand_dataset.jsonl`` (or ``.csv``): one row per audited RULER-8K
  C->W run, keyed like the ledger (``sample_id``, ``method_name``, ``retained_budget``), with five
  deterministic task-template labels (``<axis>_score``, 0-3) and two metric-derived demand scores
  (``logit_stability_demand_score``: predictive-distribution demand, ``attention_accessibility_demand_score``:
  access demand, empty without a valid eager-attention trace). The release documents the labels
  (docs/data_format.md, "Context-Demand Rows") but publishes neither the label lookup nor the score
  thresholds, so kvx imports them and cannot recompute them.
- ``data/audits/pyramidkv_adapter_audit.json``: the 7,800-pair SnapKV/PyramidKV equality audit (Table 5).

Written next to the records: ``context_demand.jsonl`` (each row joined to its imported record by
``record_key``; a row without one says why) and the audit copied byte for byte. Neither holds records,
so ``kvx.aggregate --records`` skips them as records and reads them as release tables.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

from kvx.importers import BadInput, finite, sha256_file

DEMAND_DIR = "context_demand"
DEMAND_FILES = ("ruler8k_context_demand_dataset.jsonl", "ruler8k_context_demand_dataset.csv")
DEMAND_DATASET = "ruler8k"  # the release's demand rows are RULER-8K only (data/README.md)
DEMAND_OUT = "context_demand.jsonl"
AUDIT_FILE = "audits/pyramidkv_adapter_audit.json"
AUDIT_OUT = "pyramidkv_adapter_audit.json"
#: the five task-template axes (docs/data_format.md), each read from ``<axis>_score``
LABEL_AXES = (
    "evidence_presence",
    "cue_integrity",
    "long_range_retrieval",
    "exact_token_fidelity",
    "answer_format_alignment",
)
#: kvx name <- release column of the two metric-derived demand scores and the distribution components
SCORES = {
    "distribution_demand": "logit_stability_demand_score",
    "access_demand": "attention_accessibility_demand_score",
    "distribution_delta_nll": "logit_component_delta_NLL_score",
    "distribution_kl": "logit_component_KL_score",
    "distribution_top50": "logit_component_TopK_score",
}

#: context_demand.jsonl field <- release column (written to the import manifest)
MAPPING = {
    "record_key": "the key of the record converted from the run (dataset ruler8k, sample_id, method_name, "
    "retained_budget); null with a reason when no run matches",
    "source_id, method_name, retained_budget, task_name": "sample_id, method_name, retained_budget, "
    "official_task_name",
    **{f"labels.{axis}": f"{axis}_score (0-3)" for axis in LABEL_AXES},
    **SCORES,
    "(not kept)": "the <axis>_label columns (the same values as the scores), the answers and the diagnostic "
    "columns (the records hold them)",
}

ReleaseKey = tuple[str, str, str, float | None]  # dataset, sample_id, method_name, retained_budget


def _number(value: Any) -> float | None:
    """A finite number from JSON or a CSV cell; empty, N/A or text is missing (None), never 0."""
    if isinstance(value, str):
        try:
            value = float(value) if value.strip() else None
        except ValueError:
            return None
    return finite(value)


def _count_check(path: Path, rows: int) -> list[str]:
    """A note when the release's validation report states another row count (or cannot be read)."""
    if not path.is_file():
        return []
    try:
        stated = json.loads(path.read_text(encoding="utf-8")).get("rows")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return [f"{path.name} is not readable JSON: the demand row count is not checked"]
    return [] if stated == rows else [f"{rows} context-demand rows read, {path.name} states {stated}"]


def release_key(dataset: str, sample: Any, method: Any, retained: Any) -> ReleaseKey:
    budget = _number(retained)
    return dataset, str(sample), str(method), None if budget is None else round(budget, 6)


def _demand_rows(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as handle:
                return list(csv.DictReader(handle))
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise BadInput(f"{path}: not readable ({exc})") from exc
    if not all(isinstance(row, dict) for row in rows):
        raise BadInput(f"{path}: every line must be a JSON object")
    return rows


def demand_row(row: dict[str, Any], keys: dict[ReleaseKey, str], path: Path, line: int) -> dict[str, Any]:
    """One release demand row in kvx's form, joined to its record's key."""
    for name in ("sample_id", "method_name", "retained_budget"):
        if row.get(name) in (None, ""):
            raise BadInput(f"{path}:{line}: a context-demand row has no {name}")
    key = release_key(DEMAND_DATASET, row["sample_id"], row["method_name"], row["retained_budget"])
    record = keys.get(key)
    return {
        "record_key": record,
        "reason": "" if record else "no imported run has this (sample_id, method_name, retained_budget)",
        "dataset": DEMAND_DATASET,
        "source_id": key[1],
        "method_name": key[2],
        "retained_budget": key[3],
        "task_name": str(row.get("official_task_name") or ""),
        "labels": {axis: _number(row.get(f"{axis}_score")) for axis in LABEL_AXES},
        **{name: _number(row.get(column)) for name, column in SCORES.items()},
    }


def import_side_tables(data: Path, keys: dict[ReleaseKey, str], out: Path) -> dict[str, Any]:
    """Write the demand table and the audit under ``out``; what was read, written and noted (for the
    manifest). ``data`` is the release's ``data/`` folder; a missing file is a note, not an error."""
    report: dict[str, Any] = {"files_read": [], "files_written": [], "notes": [], "mapping": MAPPING}
    source = next((p for p in (data / DEMAND_DIR / name for name in DEMAND_FILES) if p.is_file()), None)
    if source is None:
        report["notes"].append(
            f"no {DEMAND_DIR}/{DEMAND_FILES[0]} (or .csv) in the release: no context-demand labels imported"
        )
    else:
        rows = [demand_row(r, keys, source, i) for i, r in enumerate(_demand_rows(source), 1)]
        joined = sum(r["record_key"] is not None for r in rows)
        with (out / DEMAND_OUT).open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        report["files_read"].append({"path": source, "rows": len(rows)})
        report["files_written"].append(
            {"path": DEMAND_OUT, "kind": "context_demand", "rows": len(rows), "joined_to_records": joined}
        )
        if joined < len(rows):
            report["notes"].append(f"{len(rows) - joined} context-demand rows match no imported run")
        report["notes"].extend(_count_check(data / DEMAND_DIR / "validation_report.json", len(rows)))
    audit = data / AUDIT_FILE
    if audit.is_file():
        shutil.copyfile(audit, out / AUDIT_OUT)
        report["files_read"].append({"path": audit, "rows": None})
        report["files_written"].append({"path": AUDIT_OUT, "kind": "audit", "sha256": sha256_file(audit)})
    else:
        report["notes"].append(f"no {AUDIT_FILE} in the release: no PyramidKV adapter audit imported")
    return report
