"""``python -m kvx.importers kvdiagnosis``: a hand-made miniature of the KVDiagnosis release, converted
and checked record by record, then read by ``python -m kvx.aggregate --records``.

The miniature follows the release's documented layout (docs/data_format.md of ChosenQC/KVDiagnosis):
two datasets, five sources, three methods (SnapKV, ThinK, QuantizedCache) at the 75% and 25% retained
settings, ThinK at 25% an explicit N/A, and the six C->W runs in ``selected_failures`` with their
diagnostic columns. Every expected number below is counted by hand from the tables in this file.
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest

from kvx.core.records import UNKNOWABLE, unknown_fields, validate
from kvx.importers.__main__ import main

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


def _write_gz(path: Path, rows: list[dict]) -> None:
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
    _write_gz(data / "processed/full_population/fullcache.jsonl.gz", fullcache)
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
        _write_gz(data / f"processed/full_population/compressed_runs/{dataset}.jsonl.gz", runs)
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


def _records(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.jsonl.gz")):
        if not path.name.endswith(".controls.jsonl.gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh)
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_release(tmp_path_factory.mktemp("KVDiagnosis"))


@pytest.fixture(scope="module")
def imported(release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("imported") / "kvdiagnosis"
    return out, main(["kvdiagnosis", str(release), "--out", str(out), "--quiet"])


def _by(records: list[dict], sample: str, method: str, retained: float) -> dict:
    [record] = [
        r
        for r in records
        if r["source_id"] == sample
        and r["provenance"]["release"]["method_name"] == method
        and r["provenance"]["release"]["retained_budget"] == retained
    ]
    return record


def test_layout_and_counts(release: Path, imported: tuple[Path, int]) -> None:
    out, code = imported
    assert code == 0
    names = sorted(p.name for p in out.iterdir())
    controls = [n for n in names if n.endswith(".controls.jsonl.gz")]
    assert [n for n in names if n not in controls] == [
        "hotpotqa.jsonl.gz",
        "import_manifest.json",
        "ruler8k.jsonl.gz",
    ]
    assert len(controls) == 2  # one control group per (task, reader)
    records = _records(out)
    assert len(records) == 30  # 5 sources x 3 methods x 2 settings
    assert Counter(r["status"] for r in records) == {"supported": 25, "unsupported": 5}
    assert Counter(r["transition"] for r in records if r["transition"]) == {
        "C→C": 9,
        "C→W": 6,
        "W→C": 2,
        "W→W": 8,
    }
    assert len({r["key"] for r in records}) == 30
    manifest = json.loads((out / "import_manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["records"] == 30 and counts["controls"] == 5 and counts["rejected"] == 0
    assert counts["by_status"] == {"supported": 25, "unsupported": 5}
    assert counts["by_transition"] == {"C→C": 9, "C→W": 6, "W→C": 2, "W→W": 8}
    assert counts["joins"]["c_to_w_with_diagnostic_row"] == 6
    assert counts["joins"].get("c_to_w_without_diagnostic_row", 0) == 0
    assert counts["joins"]["diagnostic_rows_without_a_ledger_run"] == 0
    assert counts["categories"] == {
        "low_mapped_coverage": 1,
        "structural_position_drift": 2,
        "ambiguous": 1,
        "conflicting": 1,
        "decoding_scoring_candidate": 1,
    }
    assert manifest["checks"]["summary_json"] == {"read": True, "differences": []}
    checked = manifest["checks"]["artifact_manifest"]
    assert checked["verified"] == 5 and checked["sha256_mismatch"] == [] and checked["not_listed"] == []
    assert len(manifest["files_read"]) == 7  # fullcache, 2 run files, 2 selected, summary, artifact manifest
    for entry in manifest["files_read"]:
        assert hashlib.sha256((release / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    for entry in manifest["files_written"]:
        assert (out / entry["path"]).is_file()
    assert set(manifest["unknown"]) == {
        "seed",
        "prompt_hash",
        "n_question_tokens",
        "config_hash",
        "full.token_ids",
        "full.stop_reason",
        "compressed.token_ids",
        "compressed.stop_reason",
    }
    assert manifest["unknown"]["seed"]["records"] == 30
    assert manifest["unknown"]["compressed.token_ids"]["records"] == 25  # unsupported runs have no answer


def test_every_record_valid_and_honest(imported: tuple[Path, int]) -> None:
    out, _ = imported
    for record in _records(out):
        validate(record)
        provenance = record["provenance"]
        assert provenance["origin"] == "external"
        assert provenance["source"] == "kvdiagnosis:kvdiagnosis.public_artifact.v0.4"
        # every null UNKNOWABLE field is listed with a reason, and only those
        assert set(unknown_fields(record)) == set(provenance["unknown"]), record["key"]
        assert all(isinstance(why, str) and why for why in provenance["unknown"].values())
        assert set(provenance["unknown"]) <= set(UNKNOWABLE)
        # nothing made up: no zero hashes, no seed, the release's 16-hex prompt hash not passed off as sha256
        text = json.dumps(record)
        assert "0" * 64 not in text
        assert record["seed"] is None and record["cell"]["fields"]["seed"] is None
        assert record["prompt_hash"] is None and len(provenance["release"]["prompt_hash"]) == 16
        assert record["config_hash"] is None and record["n_question_tokens"] is None
        assert record["model_revision"] == REVISION and record["reader"] == MODEL
        dataset = provenance["release"]["dataset"]
        assert record["n_context_tokens"] == (8070 if dataset == "ruler8k" else 1985)
        assert record["task"] == dataset
        assert record.get("task_family") == ("ruler" if dataset == "ruler8k" else None)
        for side in ("full", "compressed"):
            if record[side] is not None:
                assert record[side]["token_ids"] is None and record[side]["stop_reason"] is None
        if record["status"] == "unsupported":
            assert record["full"] is None and record["compressed"] is None and record["transition"] is None
            assert record["reason"] == THINK_NA and "diagnostics" not in record
        else:
            sample = record["source_id"]
            _, full_ok, full_score, _ = FULL[dataset][sample]
            assert record["full"]["correct"] is full_ok and record["full"]["score"] == full_score
            assert record["full"]["normalized"] == f"answer {sample}"


def test_settings_cells_and_keys(imported: tuple[Path, int]) -> None:
    records = _records(imported[0])
    snap = _by(records, "niah_single_1_000000", "SnapKVPress", 0.25)
    assert snap["compressor"] == "snapkv"
    assert snap["setting"] == {
        "kind": "ratio",
        "value": 0.75,  # kvpress ratio: the share removed; the release's 25% is the share kept
        "ratio": 0.75,
        "retained_share": 0.25,
        "method_parameter": {
            "release_method": "SnapKVPress",
            "release_method_family": "attention_observation_pruning",
            "release_label": "25%",
            "compression_ratio": 0.75,
            "retained_budget": 0.25,
        },
    }
    fields = snap["cell"]["fields"]
    assert fields == {
        "origin": "kvdiagnosis",
        "task": "ruler8k",
        "reader": MODEL,
        "press": "snapkv",
        "setting.kind": "ratio",
        "setting.value": 0.75,
        "seed": None,
    }
    assert len(snap["cell"]["id"]) == 16
    assert snap["key"].startswith(f"ruler8k/niah_single_1_000000/{MODEL}@{REVISION}/snapkv/ratio=0.75/")
    for retained, bits in ((0.75, 8), (0.25, 2)):
        q = _by(records, "cwe_000000", "QuantizedCache", retained)
        assert q["compressor"] == "hqq"
        assert q["setting"]["kind"] == "none" and q["setting"]["value"] is None
        assert q["setting"]["method_parameter"]["bits"] == bits
        assert q["setting"]["method_parameter"]["release_label"] == f"{100 * retained:g}%"
        assert q["setting"]["retained_share"] == bits / 16
        assert q["cell"]["fields"]["press.bits"] == bits and q["cell"]["fields"]["setting.kind"] == "none"
    cells = {
        (r["task"], r["compressor"], json.dumps(r["setting"]["value"]), r["cell"]["id"]) for r in records
    }
    assert len(cells) == 12  # 2 tasks x 6 settings (hqq's two bit widths are two cells)
    na = _by(records, "hotpotqa_000000", "ThinKPress", 0.25)
    assert na["status"] == "unsupported" and na["setting"]["retained_share"] is None
    splits = {r["task"]: r["split"] for r in records}
    assert all(r["split"] == splits[r["task"]] for r in records) and len(set(splits.values())) == 2


def test_transitions_and_diagnostics(imported: tuple[Path, int]) -> None:
    records = _records(imported[0])
    for (dataset, sample, method, retained), (ok, score) in COMP.items():
        record = _by(records, sample, method, retained)
        full_ok = FULL[dataset][sample][1]
        assert record["transition"] == ("C" if full_ok else "W") + "→" + ("C" if ok else "W")
        assert record["compressed"]["score"] == score and record["compressed"]["correct"] is ok
    cw = _by(records, "niah_single_1_000000", "SnapKVPress", 0.25)
    diags = cw["diagnostics"]
    assert diags["coverage"]["status"] == "measured"
    assert diags["coverage"]["values"] == {"err": 0.25, "ecov": 0.125, "tau": 0.5}
    assert diags["coverage"]["risk"] == {"err": "lower", "ecov": "lower"}
    lik = diags["likelihood"]
    assert lik["status"] == "measured"
    assert lik["values"] == {
        "nll_full": 0.5,
        "nll_comp": 0.5 + DELTA_NLL,
        "delta_nll": DELTA_NLL,
        "gpr": pytest.approx(math.exp(-DELTA_NLL)),
        "kl": 0.75,
        "top50": 0.62,
    }
    assert diags["attention"] == {
        "status": "measured",
        "values": {"ear": 0.4},
        "reason": "",
        "risk": {"ear": "lower", "eam_comp": "lower", "neae_comp": "lower"},
    }
    assert cw["category"] == {"category": "low_mapped_coverage", "matched": ["low_mapped_coverage"]}
    assert all("seconds" not in d for d in diags.values())  # unknown: left out, never 0
    think = _by(records, "niah_single_1_000001", "ThinKPress", 0.75)
    assert think["diagnostics"]["coverage"]["status"] == "structural"
    assert think["diagnostics"]["coverage"]["values"] == {}
    assert think["diagnostics"]["coverage"]["reason"] == NA_SLOT
    assert think["diagnostics"]["attention"]["status"] == "not_applicable"
    assert think["diagnostics"]["likelihood"]["status"] == "not_applicable"  # the release has no NLL there
    assert think["category"]["category"] == "structural_position_drift"
    both = _by(records, "hotpotqa_000000", "SnapKVPress", 0.25)
    assert both["category"] == {
        "category": "conflicting",
        "matched": ["high_mapped_coverage_drift", "decoding_scoring_candidate"],
    }
    cc = _by(records, "niah_single_1_000000", "SnapKVPress", 0.75)  # C->C: likelihood only
    assert set(cc["diagnostics"]) == {"likelihood"} and "category" not in cc


def test_control_ledgers_pair_with_records(imported: tuple[Path, int]) -> None:
    out, _ = imported
    records = _records(out)
    for path in out.glob("*.controls.jsonl.gz"):
        split = path.name.removesuffix(".controls.jsonl.gz")
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            ledger = {e["source_id"]: e for e in map(json.loads, fh)}
        mine = [r for r in records if r["split"] == split and r["status"] == "supported"]
        assert {r["source_id"] for r in mine} == set(ledger)
        for r in mine:
            entry = ledger[r["source_id"]]
            assert entry["prompt_hash"] == r["prompt_hash"]
            assert (entry["score"], entry["correct"], entry["output"]) == (
                r["full"]["score"],
                r["full"]["correct"],
                r["full"]["output"],
            )


def test_aggregate_reads_the_import(imported: tuple[Path, int], tmp_path: Path) -> None:
    """The matrix of the imported miniature, cell by cell, against the tables above."""
    from kvx.aggregate.__main__ import main as aggregate

    out, _ = imported
    report = tmp_path / "report"
    args = ["--records", str(out), "--out", str(report), "--no-log", "--quiet", "--no-plots"]
    assert aggregate([*args, "--boot", "50", "--splits", "50"]) == 0
    with (report / "problems.csv").open() as fh:
        assert list(csv.DictReader(fh)) == []  # schema, pairing with the control ledgers, complete cells
    with (report / "matrix.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    cells = {(r["task"], r["compressor"], r["setting"]): r for r in rows}

    def check(
        task: str, compressor: str, setting: str, quality: float, cw_rate: float | None, n_fc: int
    ) -> None:
        row = cells[(task, compressor, setting)]
        assert float(row["quality"]) == pytest.approx(quality), (task, compressor, setting)
        assert int(float(row["n_fc"])) == n_fc
        if cw_rate is None:
            assert row["cw_rate"] == "" or math.isnan(float(row["cw_rate"]))
        else:
            assert float(row["cw_rate"]) == pytest.approx(cw_rate)

    check("ruler8k", "FullCache", "", (1 + 1 + 0.6) / 3, None, 2)
    check("ruler8k", "snapkv", "0.25", (1 + 1 + 0.6) / 3, 0 / 2, 2)  # the release's 75%
    check("ruler8k", "snapkv", "0.75", 2 / 3, 1 / 2, 2)  # the release's 25%
    check("ruler8k", "think", "0.25", (1 + 0.5 + 0.2) / 3, 1 / 2, 2)
    check("ruler8k", "hqq[bits=8]", "-", (1 + 1 + 0.6) / 3, 0 / 2, 2)
    check("ruler8k", "hqq[bits=2]", "-", 0.0, 2 / 2, 2)
    check("hotpotqa", "FullCache", "", 1 / 2, None, 1)
    check("hotpotqa", "snapkv", "0.75", 1 / 2, 1 / 1, 1)
    check("hotpotqa", "hqq[bits=2]", "-", 0.0, 1 / 1, 1)
    na = cells[("ruler8k", "think", "0.75")]  # ThinK at 25%: N/A, counted, never scored
    assert int(float(na["n_unsupported"])) == 3 and int(float(na["n_supported"])) == 0
    assert na["quality"] == "" and na["cw_rate"] == ""


def test_subtask_level(tmp_path: Path) -> None:
    root = make_release(tmp_path / "KVDiagnosis")
    out = tmp_path / "sub"
    assert main(["kvdiagnosis", str(root / "data"), "--out", str(out), "--tasks", "subtask", "--quiet"]) == 0
    records = _records(out)
    tasks = Counter((r["task"], r.get("task_family")) for r in records)
    assert tasks == {
        ("ruler8k_niah_single_1", "ruler8k"): 12,
        ("ruler8k_cwe", "ruler8k"): 6,
        ("hotpotqa", None): 12,
    }
    assert len(list(out.glob("*.controls.jsonl.gz"))) == 3


def test_risk_declarations_match_the_diagnostics() -> None:
    """The importer copies the diagnostics' risk declarations (importing them would load torch)."""
    from kvx.importers.kvdiagnosis import RISK

    root = Path(__file__).resolve().parents[1] / "kvx" / "diagnostics"
    for name, module, cls in (
        ("coverage", "cache_coverage.py", "Coverage"),
        ("likelihood", "likelihood.py", "Likelihood"),
        ("attention", "attention_access.py", "Attention"),
    ):
        tree = ast.parse((root / module).read_text())
        [node] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
        [risk] = [
            ast.literal_eval(s.value)
            for s in node.body
            if isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == "risk"
        ]
        assert RISK[name] == risk, name


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kvx.importers: "), err
    return err[0]


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    assert main(["kvdiagnosis", str(tmp_path / "missing"), "--out", out]) == 2
    assert "no such file or directory" in _one_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["kvdiagnosis", str(tmp_path / "empty"), "--out", out]) == 2
    assert "is not a KVDiagnosis release" in _one_line(capsys)
    assert main(["nosuch", str(tmp_path), "--out", out]) == 2
    assert "unknown importer 'nosuch'" in _one_line(capsys)
    assert main(["kvdiagnoses", str(tmp_path), "--out", out]) == 2
    assert "did you mean 'kvdiagnosis'?" in _one_line(capsys)
    assert main(["kvdiagnosis", str(tmp_path)]) == 2  # no --out
    assert "--out" in _one_line(capsys)
    assert main([]) == 2
    assert "give an importer" in _one_line(capsys)
    lfs = tmp_path / "lfs/data/processed/full_population"
    (lfs / "compressed_runs").mkdir(parents=True)
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n"
    (lfs / "fullcache.jsonl.gz").write_bytes(pointer)
    (lfs / "compressed_runs/ruler8k.jsonl.gz").write_bytes(pointer)
    assert main(["kvdiagnosis", str(tmp_path / "lfs"), "--out", out]) == 2
    assert "Git LFS pointer" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_bad_rows_and_folders(release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt line is bad input (nothing written); a row the records cannot hold is rejected and listed."""
    broken = tmp_path / "broken"
    shutil.copytree(release, broken)
    runs = broken / "data/processed/full_population/compressed_runs/hotpotqa.jsonl.gz"
    with gzip.open(runs, "at", encoding="utf-8") as fh:
        fh.write("{not json\n")
    assert main(["kvdiagnosis", str(broken), "--out", str(tmp_path / "o1"), "--quiet"]) == 2
    assert "hotpotqa.jsonl.gz:13: invalid JSON" in _one_line(capsys)
    assert not (tmp_path / "o1").exists() and not list(tmp_path.glob(".o1*"))

    odd = tmp_path / "odd"
    shutil.copytree(release, odd)
    runs = odd / "data/processed/full_population/compressed_runs/hotpotqa.jsonl.gz"
    with gzip.open(runs, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    rows[0]["compressed_score"] = 7.0  # not a score in [0, 1]
    rows[1]["outcome_transition"] = "W->W"  # disagrees with the answers
    _write_gz(runs, rows)
    out = tmp_path / "o2"
    assert main(["kvdiagnosis", str(odd), "--out", str(out), "--quiet"]) == 1
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["counts"]["rejected"] == 2 and manifest["counts"]["records"] == 28
    assert {e["run"] for e in manifest["rejected_examples"]} == {
        f"hotpotqa/{r['sample_id']}/{r['method_name']}/{r['retained_budget']}" for r in rows[:2]
    }
    assert manifest["checks"]["summary_json"]["differences"]  # the counts no longer match the release's
    capsys.readouterr()

    assert main(["kvdiagnosis", str(release), "--out", str(out), "--quiet"]) == 2  # not an empty folder
    assert "not an empty folder" in _one_line(capsys)
