"""A hand-made miniature of the KVDiagnosis release, for ``python -m kvx.importers kvdiagnosis`` and
what reads its import.

The miniature follows the release's documented layout (docs/data_format.md of ChosenQC/KVDiagnosis):
two datasets, five sources, three methods (SnapKV, ThinK, QuantizedCache) at the 75% and 25% retained
settings, ThinK at 25% an explicit N/A, and the six C->W runs in ``selected_failures`` with their
diagnostic columns. The tables below are what a test counts its expected numbers from by hand.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections import Counter
from pathlib import Path

REVISION = "b968826d9c46dd6066d109eabc6255188de91218"
MODEL = "Qwen/Qwen3-8B"
RETAINED = (0.75, 0.25)  # the release's labels; compression_ratio = 1 - retained
METHOD_FAMILY = {
    "SnapKVPress": "attention_observation_pruning",
    "ThinKPress": "key_channel_pruning",
    "QuantizedCache": "hf_kv_cache_quantization",
}
THINK_NA = "N/A: ThinKPress cannot realize overall KV compression_ratio > 0.5 because it prunes key channels"
# dataset -> sample_id -> (official_task_name, FullCache correct, FullCache score, gold NLL)
FULL = {
    "ruler8k": {
        "niah_single_1_000000": ("niah_single_1", True, 1.0, 0.5),
        "niah_single_1_000001": ("niah_single_1", True, 1.0, 0.25),
        "cwe_000000": ("cwe", False, 0.6, 2.0),
    },
    "hotpotqa": {
        "hotpotqa_000000": ("hotpotqa", True, 1.0, 1.5),
        "hotpotqa_000001": ("hotpotqa", False, 0.0, 3.0),
    },
}
# (dataset, sample, method, retained) -> (compressed correct, compressed score); ThinK at 25% is N/A
COMP = {
    ("ruler8k", "niah_single_1_000000", "SnapKVPress", 0.75): (True, 1.0),
    ("ruler8k", "niah_single_1_000001", "SnapKVPress", 0.75): (True, 1.0),
    ("ruler8k", "cwe_000000", "SnapKVPress", 0.75): (False, 0.6),
    ("ruler8k", "niah_single_1_000000", "SnapKVPress", 0.25): (False, 0.0),  # C->W
    ("ruler8k", "niah_single_1_000001", "SnapKVPress", 0.25): (True, 1.0),
    ("ruler8k", "cwe_000000", "SnapKVPress", 0.25): (True, 1.0),  # W->C
    ("ruler8k", "niah_single_1_000000", "ThinKPress", 0.75): (True, 1.0),
    ("ruler8k", "niah_single_1_000001", "ThinKPress", 0.75): (False, 0.5),  # C->W
    ("ruler8k", "cwe_000000", "ThinKPress", 0.75): (False, 0.2),
    ("ruler8k", "niah_single_1_000000", "QuantizedCache", 0.75): (True, 1.0),
    ("ruler8k", "niah_single_1_000001", "QuantizedCache", 0.75): (True, 1.0),
    ("ruler8k", "cwe_000000", "QuantizedCache", 0.75): (False, 0.6),
    ("ruler8k", "niah_single_1_000000", "QuantizedCache", 0.25): (False, 0.0),  # C->W
    ("ruler8k", "niah_single_1_000001", "QuantizedCache", 0.25): (False, 0.0),  # C->W
    ("ruler8k", "cwe_000000", "QuantizedCache", 0.25): (False, 0.0),
    ("hotpotqa", "hotpotqa_000000", "SnapKVPress", 0.75): (True, 1.0),
    ("hotpotqa", "hotpotqa_000001", "SnapKVPress", 0.75): (False, 0.0),
    ("hotpotqa", "hotpotqa_000000", "SnapKVPress", 0.25): (False, 0.0),  # C->W
    ("hotpotqa", "hotpotqa_000001", "SnapKVPress", 0.25): (True, 1.0),  # W->C
    ("hotpotqa", "hotpotqa_000000", "ThinKPress", 0.75): (True, 1.0),
    ("hotpotqa", "hotpotqa_000001", "ThinKPress", 0.75): (False, 0.0),
    ("hotpotqa", "hotpotqa_000000", "QuantizedCache", 0.75): (True, 1.0),
    ("hotpotqa", "hotpotqa_000001", "QuantizedCache", 0.75): (False, 0.0),
    ("hotpotqa", "hotpotqa_000000", "QuantizedCache", 0.25): (False, 0.0),  # C->W
    ("hotpotqa", "hotpotqa_000001", "QuantizedCache", 0.25): (False, 0.0),
}
# the selected C->W rows' diagnostic columns (one of each coverage type, one with EAR and TopK)
MEASURED = "measured_token_coverage"
STRUCTURAL = "structural_position_addressability"
NA_SLOT = (
    "N/A: token positions remain addressable by construction; no measured or projected retained-token map"
)
DIAG = {
    ("ruler8k", "niah_single_1_000000", "SnapKVPress", 0.25): {
        "coverage_type": MEASURED,
        "ERR_slot": 0.25,
        "ECov_slot": 0.125,
        "KL": 0.75,
        "TopK": 0.62,
        "EAR": 0.4,
        "attention_available": True,
        "topk_available": True,
        "failure_signature": "low_mapped_coverage",
        "primitive_flags": ["low_mapped_coverage"],
    },
    ("ruler8k", "niah_single_1_000001", "ThinKPress", 0.75): {
        "coverage_type": STRUCTURAL,
        "failure_signature": "structural_position_likelihood_drift",
        "primitive_flags": ["structural_position_likelihood_drift"],
    },
    ("ruler8k", "niah_single_1_000000", "QuantizedCache", 0.25): {
        "coverage_type": STRUCTURAL,
        "failure_signature": "structural_position_likelihood_drift",
        "primitive_flags": ["structural_position_likelihood_drift"],
    },
    ("ruler8k", "niah_single_1_000001", "QuantizedCache", 0.25): {
        "coverage_type": STRUCTURAL,
        "failure_signature": "ambiguous",
        "primitive_flags": [],
    },
    ("hotpotqa", "hotpotqa_000000", "SnapKVPress", 0.25): {
        "coverage_type": MEASURED,
        "ERR_slot": 0.95,
        "ECov_slot": 0.92,
        "failure_signature": "conflicting_diagnostic_signals",
        "primitive_flags": ["high_mapped_coverage_likelihood_drift", "decode_scorer_candidate"],
    },
    ("hotpotqa", "hotpotqa_000000", "QuantizedCache", 0.25): {
        "coverage_type": STRUCTURAL,
        "failure_signature": "decode_scorer_candidate",
        "primitive_flags": ["decode_scorer_candidate"],
    },
}
DELTA_NLL = 1.25  # every supported run but ThinK's has delta_NLL, GPR and compressed_gold_NLL


def _transition(full: bool, comp: bool) -> str:
    return ("C" if full else "W") + "->" + ("C" if comp else "W")


def write_release_gz(path: Path, rows: list[dict]) -> None:
    """``rows`` as a release writes a table: gzipped JSON lines, keys sorted (folders made if absent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def _prompt_hash(dataset: str, sample: str) -> str:
    return hashlib.sha256(f"{dataset}/{sample}".encode()).hexdigest()[:16]  # the release's 16-hex form


def _task_key(task: str) -> str:
    return {"niah_single_1": "ruler_single_niah", "cwe": "ruler_common_words_extraction"}.get(
        task, f"longbench_{task}"
    )


def _rows(path: Path) -> int | None:
    if path.name.endswith(".jsonl.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return sum(1 for _ in fh)
    return sum(1 for _ in path.open()) if path.suffix == ".jsonl" else None


def make_release(root: Path) -> Path:
    """The miniature release under ``root`` (the repository folder)."""
    data = root / "data"
    fullcache = []
    for dataset, sources in FULL.items():
        for sample, (task, correct, score, nll) in sources.items():
            fullcache.append(
                {
                    "schema_version": "kvcachebench.fullcache_run.v1",
                    "dataset": dataset,
                    "fullcache_key": f"{dataset}::{sample}",
                    "sample_id": sample,
                    "official_task_name": task,
                    "task_key": _task_key(task),
                    "context_length_tokens": 8070 if dataset == "ruler8k" else 1985,
                    "model_id": MODEL,
                    "model_revision": REVISION,
                    "full_run_id": f"{sample}::FullCache::0.00",
                    "prompt_hash": _prompt_hash(dataset, sample),
                    "reference_answer": ["4963732"] if dataset == "ruler8k" else ["Afghanistan"],
                    "raw_output_full": f"full answer of {sample}",
                    "extracted_answer_full": f"answer {sample}",
                    "full_score": score,
                    "full_correct": correct,
                    "full_gold_NLL": nll,
                }
            )
    write_release_gz(data / "processed/full_population/fullcache.jsonl.gz", fullcache)
    selected: dict[str, list[dict]] = {}
    transitions: Counter = Counter()
    per_dataset: dict[str, dict] = {}
    for dataset, sources in FULL.items():
        runs = []
        for sample, (task, full_ok, full_score, nll) in sources.items():
            for method in METHOD_FAMILY:
                for retained in RETAINED:
                    ratio = round(1 - retained, 6)
                    row = {
                        "schema_version": "kvcachebench.compressed_run.v1",
                        "experiment_id": f"{dataset}_kvdench_qwen3_8b",
                        "dataset": dataset,
                        "sample_id": sample,
                        "fullcache_key": f"{dataset}::{sample}",
                        "official_task_name": task,
                        "task_key": _task_key(task),
                        "context_length_tokens": 8070 if dataset == "ruler8k" else 1985,
                        "model_id": MODEL,
                        "model_revision": REVISION,
                        "method_name": method,
                        "method_family": METHOD_FAMILY[method],
                        "method_display": method.removesuffix("Press"),
                        "compression_ratio": ratio,
                        "retained_budget": retained,
                        "compressed_run_id": f"{sample}::{method}::{ratio:.2f}",
                        "prompt_hash": _prompt_hash(dataset, sample),
                    }
                    if method == "ThinKPress" and retained == 0.25:  # the ledger writes N/A objects as null
                        row |= {
                            "support_status": "unsupported",
                            "unsupported_reason": THINK_NA,
                            "outcome_transition": None,
                            **dict.fromkeys(
                                ("raw_output_compressed", "extracted_answer_compressed", "compressed_score"),
                                None,
                            ),
                            "compressed_correct": None,
                            "delta_NLL": None,
                            "GPR": None,
                        }
                        runs.append(row)
                        continue
                    ok, score = COMP[(dataset, sample, method, retained)]
                    arrow = _transition(full_ok, ok)
                    transitions[arrow] += 1
                    has_nll = method != "ThinKPress"
                    row |= {
                        "support_status": "supported",
                        "unsupported_reason": None,
                        "raw_output_compressed": f"{method} {retained} answer of {sample}",
                        "extracted_answer_compressed": f"{method} answer",
                        "compressed_score": score,
                        "compressed_correct": ok,
                        "score_drop": full_score - score,
                        "CIF": int(arrow == "C->W"),
                        "outcome_transition": arrow,
                        "compressed_gold_NLL": nll + DELTA_NLL if has_nll else None,
                        "delta_NLL": DELTA_NLL if has_nll else None,
                        "GPR": math.exp(-DELTA_NLL) if has_nll else None,
                    }
                    runs.append(row)
                    key = (dataset, sample, method, retained)
                    if key in DIAG:
                        assert arrow == "C->W"
                        diag = {
                            "ERR_slot": None,
                            "ECov_slot": None,
                            "ERR_slot_reason": None,
                            "ECov_slot_reason": None,
                            "KL": None,
                            "TopK": None,
                            "EAR": None,
                            "gold_rank_shift": None,
                            "attention_available": False,
                            "topk_available": False,
                        } | DIAG[key]
                        if diag["coverage_type"] == STRUCTURAL:
                            diag |= {"ERR_slot_reason": NA_SLOT, "ECov_slot_reason": NA_SLOT}
                        status = "available" if diag["coverage_type"] == MEASURED else "not_applicable"
                        selected.setdefault(dataset, []).append(
                            row
                            | diag
                            | {
                                "full_correct": full_ok,
                                "full_score": full_score,
                                "raw_output_full": f"full answer of {sample}",
                                "ECov_slot_threshold": 0.5,
                                "ERR_slot_status": status,
                                "ECov_slot_status": status,
                                "coverage_applicability_schema": "kvdiagnosis.coverage.v2",
                                "retention_metric_schema": "kvbench.slot_ecov.v1",
                            }
                        )
        write_release_gz(data / f"processed/full_population/compressed_runs/{dataset}.jsonl.gz", runs)
        supported = [r for r in runs if r["support_status"] == "supported"]
        per_dataset[dataset] = {
            "sources": len(sources),
            "planned_runs": len(runs),
            "supported_runs": len(supported),
            "unsupported_runs": len(runs) - len(supported),
            "fullcache_correct_sources": sum(v[1] for v in sources.values()),
            "C_to_W_rows": sum(r["outcome_transition"] == "C->W" for r in supported),
        }
    for dataset, rows in selected.items():
        _write_jsonl(data / f"processed/selected_failures/{dataset}.jsonl", rows)
    summary = {
        "schema_version": "kvcachebench.full_population_summary.v1",
        "model": MODEL,
        "model_revision": REVISION,
        "datasets": per_dataset,
        "transitions": dict(sorted(transitions.items())),
        "methods": list(METHOD_FAMILY),
        "retained_budgets": list(RETAINED),
    }
    (data / "processed/full_population/summary.json").write_text(json.dumps(summary, indent=2))
    files = [
        {
            "path": p.relative_to(root).as_posix(),
            "bytes": p.stat().st_size,
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            "rows": _rows(p),
        }
        for p in sorted(data.rglob("*"))
        if p.is_file()
    ]
    manifest = {
        "schema_version": "kvdiagnosis.public_artifact.v0.4",
        "model_revision": REVISION,
        "files": files,
    }
    (data / "metadata").mkdir()
    (data / "metadata/artifact_manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def imported_records(folder: Path) -> list[dict]:
    """The records an import wrote to ``folder``: its .jsonl.gz files but the controls ledgers, in order."""
    out = []
    for path in sorted(folder.glob("*.jsonl.gz")):
        if not path.name.endswith(".controls.jsonl.gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh)
    return out
