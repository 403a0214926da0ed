"""Per-source records, their JSON Schema, correctness transitions and cell metrics.

Metrics follow KVDiagnosis section 3.3: task quality over the supported sources, the C->W rate
over FullCache-correct supported sources (with its denominator), and the four transitions.
Unsupported and error records are counted, never scored as wrong.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

import jsonschema

SCHEMA_VERSION = "1"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(files("kvx.schemas").joinpath("record.schema.json").read_text())


def validate(record: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when a record breaks the published schema."""
    jsonschema.validate(record, schema())


def transition(full_correct: bool, compressed_correct: bool) -> str:
    return f"{'C' if full_correct else 'W'}→{'C' if compressed_correct else 'W'}"


def cell_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Cell summary. Rates over empty denominators are omitted (never imputed as 0)."""
    supported = [r for r in records if r["status"] == "supported"]
    counts = {t: sum(r["transition"] == t for r in supported) for t in ("C→C", "C→W", "W→C", "W→W")}
    fc_correct = counts["C→C"] + counts["C→W"]
    out: dict[str, float] = {
        "n_records": len(records),
        "n_supported": len(supported),
        "n_unsupported": sum(r["status"] == "unsupported" for r in records),
        "n_error": sum(r["status"] == "error" for r in records),
        "n_cc": counts["C→C"],
        "n_cw": counts["C→W"],
        "n_wc": counts["W→C"],
        "n_ww": counts["W→W"],
        "cw_denominator": fc_correct,
    }
    if supported:
        out["mean_score"] = sum(r["compressed"]["score"] for r in supported) / len(supported)
        out["accuracy"] = sum(r["compressed"]["correct"] for r in supported) / len(supported)
    controls = [r["full"] for r in records if r["full"] is not None]
    if controls:
        out["full_mean_score"] = sum(c["score"] for c in controls) / len(controls)
        out["full_accuracy"] = sum(c["correct"] for c in controls) / len(controls)
    if fc_correct:
        out["cw_rate"] = counts["C→W"] / fc_correct
    return out
