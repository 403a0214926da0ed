"""KVDiagnosis public release (github.com/ChosenQC/KVDiagnosis) -> kvx records.

What the release holds (``data/`` of the repository, documented in its ``docs/data_format.md``):

- ``processed/full_population/fullcache.jsonl.gz``: one FullCache control per source (``dataset``,
  ``sample_id``, ``fullcache_key``, ``official_task_name``, ``task_key``, ``model_id``, ``model_revision``,
  ``prompt_hash``, ``context_length_tokens``, ``reference_answer``, ``raw_output_full``,
  ``extracted_answer_full``, ``full_score``, ``full_correct``, ``full_gold_NLL``).
- ``processed/full_population/compressed_runs/<dataset>.jsonl.gz``: every planned method-setting run,
  key (dataset, sample_id, method_name, retained_budget); ``compression_ratio`` is kvpress's ratio
  (share removed) and ``retained_budget`` = 1 - ratio is the 75/50/25 label; ``support_status``
  supported/unsupported (ThinK at 25%: an explicit N/A with ``unsupported_reason``); the compressed
  answer, ``outcome_transition``, ``compressed_gold_NLL``, ``delta_NLL``, ``GPR``.
- ``processed/selected_failures/<dataset>.jsonl``: the C->W runs with the diagnostic columns
  (``coverage_type``, ``ERR_slot``/``ECov_slot`` and their statuses, ``KL``, ``TopK``, ``EAR``,
  ``attention_available``, ``topk_available``, ``failure_signature``, ``primitive_flags``).
- ``processed/full_population/summary.json`` and ``metadata/artifact_manifest.json`` (counts and
  sha256 of every file): checked against what was read, when present.
- ``context_demand/`` and ``audits/pyramidkv_adapter_audit.json``: imported as release tables next to
  the records (``kvx.importers.kvdiagnosis_tables``); a missing one is a note, not an error.

Every run becomes one record (streamed: one dataset's controls and diagnostic rows in memory at a
time). ``import_manifest.json`` holds the exact field mapping and every field left unknown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvx import __version__
from kvx.compressors.hqq import RATIO_TO_BITS
from kvx.core.identity import digest
from kvx.core.records import (
    CW,
    STATUSES,
    SUPPORTED,
    UNKNOWABLE,
    UNSUPPORTED,
    Answer,
    Record,
    dumps,
    unknown_fields,
)
from kvx.importers import (
    CONTROLS_SUFFIX,
    MANIFEST,
    RECORDS_SUFFIX,
    BadInput,
    JsonlGzWriter,
    finite,
    manifest_head,
    sha256_file,
    staged,
    unknown_nulls,
    unknown_summary,
)
from kvx.importers.kvdiagnosis_tables import ReleaseKey, import_side_tables, release_key

NAME = "kvdiagnosis"
POPULATION = ("data/processed/full_population", "processed/full_population", "full_population", ".")
FULLCACHE = "fullcache.jsonl.gz"
RUNS = "compressed_runs"
GZIP_MAGIC = b"\x1f\x8b"
LFS_POINTER = b"version https://git-lfs"
SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: release method_name -> kvx compressor (kvx's presets carry the paper's Table 7 parameters)
METHODS = {
    "StreamingLLMPress": "streaming_llm",
    "SnapKVPress": "snapkv",
    "TOVAPress": "tova",
    "KeyDiffPress": "keydiff",
    "ThinKPress": "think",
    "ChunkKVPress_Knorm": "chunkkv",
    "AdaKVPress": "adakv",
    "QuantizedCache": "hqq",
}
#: the base press each of the release's wrappers ran over (ChunkKVPress_Knorm; AdaKV over SnapKV)
BASES = {"chunkkv": "knorm", "adakv": "snapkv"}
QUANTIZED = "QuantizedCache"
#: release coverage_type -> kvx diagnostic status
COVERAGE_STATUS = {
    "measured_token_coverage": "measured",
    "projected_token_coverage": "projected",
    "structural_position_addressability": "structural",
    "not_applicable": "not_applicable",
}
#: release failure_signature / primitive flag -> kvx Table 4 category
CATEGORIES = {
    "low_mapped_coverage": "low_mapped_coverage",
    "partial_mapped_coverage": "partial_mapped_coverage",
    "high_mapped_coverage_likelihood_drift": "high_mapped_coverage_drift",
    "structural_position_likelihood_drift": "structural_position_drift",
    "low_ear_candidate": "low_ear_candidate",
    "decode_scorer_candidate": "decoding_scoring_candidate",
    "conflicting_diagnostic_signals": "conflicting",
    "ambiguous": "ambiguous",
}
#: the risk directions kvx's diagnostics declare (kvx.diagnostics.{cache_coverage,likelihood,
#: attention_access}); copied, not imported, so an import does not load torch (a test keeps them equal)
RISK = {
    "coverage": {"err": "lower", "ecov": "lower"},
    "likelihood": {
        "delta_nll": "higher",
        "gpr": "lower",
        "kl": "higher",
        "top50": "lower",
        "rank_shift_first": "higher",
        "rank_shift_mean": "higher",
    },
    "attention": {"ear": "lower", "eam_comp": "lower", "neae_comp": "lower"},
}
#: the diagnostic columns of a selected-failure row kept while its dataset's runs stream by
DIAGNOSTIC_FIELDS = (
    "coverage_type",
    "ERR_slot",
    "ERR_slot_reason",
    "ECov_slot",
    "ECov_slot_reason",
    "ECov_slot_threshold",
    "delta_NLL",
    "GPR",
    "KL",
    "TopK",
    "EAR",
    "attention_available",
    "topk_available",
    "failure_signature",
    "primitive_flags",
    "compressed_gold_NLL",
)

#: why a field every imported record leaves null is unknown
REASONS = {
    "seed": "the release records no seed, neither for building its samples nor for decoding (which was "
    "deterministic)",
    "n_question_tokens": "the release gives one context_length_tokens per source and no question token count",
    "config_hash": "no kvx run configuration: the record was converted from the release, not run by kvx",
    "token_ids": "the release publishes decoded text only, no token ids",
    "stop_reason": "the release does not record whether decoding stopped at EOS or at the token budget",
    "normalized": "the release gives no extracted answer for this output",
    "references": "the release gives no reference_answer for this source",
    "model_revision": "the release gives no model_revision for this run",
    "n_context_tokens": "the release gives no context_length_tokens for this source",
    "prompt_hash": "the release gives no prompt_hash for this source",
}

#: kvx field <- release field (written to the manifest)
FIELD_MAPPING = {
    "task": "dataset (--tasks dataset: the paper's unit) or <dataset>_<official_task_name> (--tasks subtask)",
    "task_family": "ruler for ruler8k/ruler16k (--tasks dataset), the dataset (--tasks subtask), none for QA",
    "source_id": "sample_id (unique within a dataset)",
    "references": "FullCache reference_answer (a list of strings; a string becomes a one-item list)",
    "reader": "model_id",
    "model_revision": "model_revision (the run row, else its FullCache row, else summary.json)",
    "compressor": "method_name renamed by METHODS (StreamingLLMPress -> streaming_llm, ...)",
    "setting (token methods)": "kind ratio; value = ratio = compression_ratio (kvpress: the share removed); "
    "retained_share = retained_budget (the configured share kept; null when unsupported)",
    "setting (QuantizedCache)": "kind none, value null, ratio 0.0; bits from compression_ratio "
    "0.25/0.5/0.75 -> 8/4/2 (the release's QuantizedCache mapping, kvx hqq's RATIO_TO_BITS); "
    "retained_share = bits/16",
    "setting.method_parameter": "release_method, release_method_family, release_label (retained_budget "
    "in %), compression_ratio, retained_budget; bits (QuantizedCache)",
    "cell.fields": "origin, task, reader, press, setting.kind, setting.value, seed (null), press.bits (hqq)",
    "split": "sha256 of (origin, task, reader, model_revision): one control group per task and reader",
    "status / reason": "support_status (supported | unsupported | error); reason = unsupported_reason",
    "prompt_hash": "prompt_hash when it is a 64-hex sha256, else null (the release's value is kept in "
    "provenance.release.prompt_hash)",
    "n_context_tokens": "context_length_tokens",
    "full": "output = raw_output_full, normalized = extracted_answer_full, score = full_score, "
    "correct = full_correct",
    "compressed": "output = raw_output_compressed, normalized = extracted_answer_compressed, "
    "score = compressed_score, correct = compressed_correct",
    "transition": "from full_correct and compressed_correct (a run whose outcome_transition disagrees is "
    "rejected)",
    "diagnostics.likelihood": "every supported run: nll_full = full_gold_NLL, nll_comp = "
    "compressed_gold_NLL, delta_nll = delta_NLL, gpr = GPR; C->W runs also kl = KL, top50 = TopK",
    "diagnostics.coverage": "C->W runs: status from coverage_type (measured / projected / structural / "
    "not_applicable), err = ERR_slot, ecov = ECov_slot, tau = ECov_slot_threshold, reason = ECov_slot_reason",
    "diagnostics.attention": "C->W runs: ear = EAR when attention_available is true, else not_applicable",
    "category": "C->W runs: failure_signature and primitive_flags, renamed by CATEGORIES",
    "provenance.release": "dataset, sample_id, fullcache_key, compressed_run_id, full_run_id, experiment_id, "
    "official_task_name, task_key, method_name, method_family, method_display, compression_ratio, "
    "retained_budget, prompt_hash and schema_version of the run",
}
#: mappings whose equivalence rests on the release's documentation, not on a stated definition
CAVEATS = {
    "n_context_tokens": "the release does not say whether context_length_tokens counts the question and the "
    "prompt template; it is the release's length of the prompt its cache was built from",
    "kl": "kvx's kl is KL(FullCache || compressed); the release documents KL as a paired divergence of the "
    "predictive distributions without naming its direction",
    "top50": "the release's TopK is applied where KVDiagnosis Table 4 applies Top-50 overlap; the release "
    "does not restate k",
    "hqq bits": "the bit width is not a column of the release: it follows from compression_ratio by the "
    "release's QuantizedCache mapping (2 bits from 0.75, 4 from 0.5, else 8; HQQ backend)",
    "category": "taken from the release's frozen signature rules, which match kvx's Table 4 rules except "
    "that low_ear_candidate also needs attention_available",
}
#: release fields not carried into the records, and why
LEFT_OUT = {
    "gold_rank_shift": "kvx records rank_shift_first and rank_shift_mean; the release does not say which "
    "(if either) its gold_rank_shift is",
    "CIF, correct_to_wrong_flip, wrong_to_correct_flip, score_drop": "derived from the two answers; the "
    "aggregate recomputes them",
    "ERR_slot_status, ECov_slot_status, structural_position_addressability, retention_semantics": (
        "restated by the coverage diagnostic's status and reason"
    ),
    "summaries/, audits/slot_ecov_execution_audit.json, examples/": "derived tables and samples, not "
    "per-run records (context_demand/ and audits/pyramidkv_adapter_audit.json: see release_tables)",
}


@dataclass
class Release:
    root: Path  # the folder given
    population: Path  # .../full_population
    runs: list[Path]
    selected: Path | None
    summary: dict[str, Any] | None
    artifacts: dict[str, Any] | None  # metadata/artifact_manifest.json, when there is one
    artifacts_path: Path
    base: Path  # the folder the artifact manifest's paths are relative to (the repository)
    version: str

    @property
    def fullcache(self) -> Path:
        return self.population / FULLCACHE


@dataclass
class Control:
    """One source's FullCache control, as the records and the control ledger need it."""

    answer: Answer | None
    problem: str  # why the control cannot pair (empty when it can)
    references: list[str] | None
    prompt_hash: str | None  # the release's value, whatever its form
    reader: str | None
    revision: str | None
    n_context: int | None
    nll: float | None
    task_name: str | None
    task_key: str | None
    run_id: str | None
    key: str | None


@dataclass
class Counts:
    records: int = 0
    status: Counter = field(default_factory=Counter)
    transitions: Counter = field(default_factory=Counter)
    tasks: dict[str, Counter] = field(default_factory=dict)
    datasets: dict[str, Counter] = field(default_factory=dict)
    diagnostics: dict[str, Counter] = field(default_factory=dict)
    categories: Counter = field(default_factory=Counter)
    joins: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    examples: list[dict[str, str]] = field(default_factory=list)
    controls: int = 0
    unknown: Counter = field(default_factory=Counter)  # (field, reason) -> records

    def unknown_total(self, name: str) -> int:
        return sum(n for (field_, _), n in self.unknown.items() if field_ == name)


class Reject(Exception):
    """A run that cannot become a valid record: left out, counted and listed in the manifest."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", type=Path, help="the KVDiagnosis repository (or its data/ or full_population/)"
    )
    parser.add_argument("--out", type=Path, required=True, help="new (or empty) folder for the records")
    parser.add_argument(
        "--tasks",
        choices=("dataset", "subtask"),
        default="dataset",
        help="one task per dataset (ruler8k, ruler16k, qasper, hotpotqa: the paper's cells; default) or "
        "per dataset and official task (ruler8k_niah_single_1, ...: task_family = the dataset)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


# ----------------------------------------------------------------------------------------------- reading


def locate(path: Path) -> Release:
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if not path.is_dir():
        raise BadInput(f"{path} is not a folder (give the KVDiagnosis repository or its data/ folder)")
    population = next(
        (
            path / sub
            for sub in POPULATION
            if (path / sub / FULLCACHE).is_file() and any((path / sub / RUNS).glob("*.jsonl.gz"))
        ),
        None,
    )
    if population is None:
        raise BadInput(
            f"{path} is not a KVDiagnosis release: no data/processed/full_population/{FULLCACHE} "
            f"with {RUNS}/*.jsonl.gz"
        )
    population = population.resolve()
    runs = sorted((population / RUNS).glob("*.jsonl.gz"))
    for file in [population / FULLCACHE, *runs]:
        _check_gzip(file)
    selected = population.parent / "selected_failures"
    data = population.parent.parent  # data/ (paths in the artifact manifest start at the repository)
    summary = _json_file(population / "summary.json")
    artifacts_path = data / "metadata" / "artifact_manifest.json"
    artifacts = _json_file(artifacts_path)
    version = str(
        (artifacts or {}).get("schema_version")
        or (summary or {}).get("schema_version")
        or path.resolve().name
    )
    return Release(
        path,
        population,
        runs,
        selected if selected.is_dir() else None,
        summary,
        artifacts,
        artifacts_path,
        data.parent,
        version,
    )


def _check_gzip(path: Path) -> None:
    with path.open("rb") as handle:
        head = handle.read(len(LFS_POINTER))
    if head.startswith(LFS_POINTER):
        raise BadInput(f"{path} is a Git LFS pointer, not the data: run `git lfs pull` in the release first")
    if not head.startswith(GZIP_MAGIC):
        raise BadInput(f"{path} is not a gzip file")


def _json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not readable JSON ({exc})") from exc
    return data if isinstance(data, dict) else None


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a (gzip) JSON Lines file, one at a time; a bad line is bad input."""
    opener = gzip.open if path.name.endswith(".gz") else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):  # noqa: B007 - used in the error message
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise BadInput(f"{path}:{lineno}: a row must be a JSON object")
                yield row
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: unreadable after line {lineno} ({exc})") from exc


def _budget(value: Any) -> float | None:
    number = finite(value)
    return None if number is None else round(number, 6)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _references(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    return None


def _answer(row: dict[str, Any], side: str) -> Answer:
    """The FullCache (``full``) or compressed answer of a row; Reject when the release lacks its outcome."""
    output, score, correct = (
        row.get(f"raw_output_{side}"),
        finite(row.get(f"{side}_score")),
        row.get(f"{side}_correct"),
    )
    if not isinstance(correct, bool):
        raise Reject(f"{side}_correct is not a boolean ({correct!r})")
    if score is None or not 0.0 <= score <= 1.0:
        raise Reject(f"{side}_score is not a number in [0, 1] ({row.get(f'{side}_score')!r})")
    if not isinstance(output, str):
        raise Reject(f"raw_output_{side} is missing")
    return Answer(output, _text(row.get(f"extracted_answer_{side}")), score, correct, None, None)


def read_controls(release: Release, dataset: str, files: dict[Path, int]) -> dict[str, Control]:
    """The dataset's FullCache controls (one streamed pass over fullcache.jsonl.gz)."""
    out: dict[str, Control] = {}
    rows = 0
    for row in iter_rows(release.fullcache):
        rows += 1
        if (row.get("dataset") or str(row.get("fullcache_key", "")).split("::")[0]) != dataset:
            continue
        sample = row.get("sample_id")
        if not isinstance(sample, str) or not sample:
            raise BadInput(f"{release.fullcache}: a {dataset} FullCache row has no sample_id")
        try:
            answer, problem = _answer(row, "full"), ""
        except Reject as exc:
            answer, problem = None, f"FullCache control unusable: {exc}"
        if sample in out:
            answer, problem = None, "two FullCache rows for this source"
        out[sample] = Control(
            answer=answer,
            problem=problem,
            references=_references(row.get("reference_answer")),
            prompt_hash=_text(row.get("prompt_hash")),
            reader=_text(row.get("model_id")),
            revision=_text(row.get("model_revision")),
            n_context=_tokens(row.get("context_length_tokens")),
            nll=finite(row.get("full_gold_NLL")),
            task_name=_text(row.get("official_task_name")),
            task_key=_text(row.get("task_key")),
            run_id=_text(row.get("full_run_id")),
            key=_text(row.get("fullcache_key")),
        )
    files[release.fullcache] = rows
    return out


def read_diagnostics(release: Release, dataset: str, files: dict[Path, int]) -> dict[tuple, dict[str, Any]]:
    """The dataset's selected C->W rows, keyed like the ledger's runs, with their diagnostic columns only."""
    if release.selected is None:
        return {}
    path = release.selected / f"{dataset}.jsonl"
    if not path.is_file():
        path = release.selected / "all_selected_failures.jsonl"
        if not path.is_file():
            return {}
    out: dict[tuple, dict[str, Any]] = {}
    rows = 0
    for row in iter_rows(path):
        rows += 1
        if row.get("dataset") != dataset:
            continue
        key = (row.get("sample_id"), row.get("method_name"), _budget(row.get("retained_budget")))
        out[key] = {name: row.get(name) for name in DIAGNOSTIC_FIELDS}
    files[path] = max(files.get(path, 0), rows)
    return out


# -------------------------------------------------------------------------------------------- converting


def task_of(dataset: str, control: Control, level: str) -> tuple[str, str | None]:
    """(task, task_family) of a source."""
    if level == "subtask" and control.task_name and control.task_name != dataset:
        return f"{dataset}_{control.task_name}", dataset
    return dataset, ("ruler" if dataset.startswith("ruler") else None)


def split_of(task: str, reader: str, revision: str | None) -> str:
    return digest({"origin": NAME, "task": task, "reader": reader, "model_revision": revision}, 64)


def setting_of(method: str, row: dict[str, Any], supported: bool) -> tuple[dict[str, Any], int | None]:
    """The record's setting and, for QuantizedCache, its bit width."""
    ratio, retained = _budget(row.get("compression_ratio")), _budget(row.get("retained_budget"))
    if ratio is None or retained is None or not 0.0 <= ratio < 1.0:
        raise Reject(f"compression_ratio/retained_budget missing or out of range ({ratio!r}, {retained!r})")
    if abs(ratio + retained - 1.0) > 1e-6:
        raise Reject(f"compression_ratio {ratio} + retained_budget {retained} != 1")
    params: dict[str, Any] = {
        "release_method": method,
        "release_method_family": row.get("method_family"),
        "release_label": f"{100 * retained:g}%",
        "compression_ratio": ratio,
        "retained_budget": retained,
    }
    if method != QUANTIZED:
        share = retained if supported else None
        return {
            "kind": "ratio",
            "value": ratio,
            "ratio": ratio,
            "retained_share": share,
            "method_parameter": params,
        }, None
    bits = RATIO_TO_BITS.get(ratio)
    if bits is None:
        raise Reject(
            f"QuantizedCache at compression_ratio {ratio} has no bit width (known: {sorted(RATIO_TO_BITS)})"
        )
    share = bits / 16 if supported else None
    setting = {"kind": "none", "value": None, "ratio": 0.0, "retained_share": share}
    return setting | {"method_parameter": {"bits": bits, **params}}, bits


def diagnostics_of(
    row: dict[str, Any], control: Control, selected: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(diagnostics, category) of a supported run: likelihood from the ledger, the rest from its C->W row."""
    sel = selected or {}

    def pick(name: str) -> float | None:
        value = finite(row.get(name))
        return value if value is not None else finite(sel.get(name))

    values = {
        "nll_full": control.nll,
        "nll_comp": pick("compressed_gold_NLL"),
        "delta_nll": pick("delta_NLL"),
        "gpr": pick("GPR"),
        "kl": finite(sel.get("KL")),
        "top50": finite(sel.get("TopK")),
    }
    values = {k: v for k, v in values.items() if v is not None}
    likelihood = (
        {"status": "measured", "values": values, "reason": ""}
        if any(k in values for k in ("nll_comp", "delta_nll", "gpr", "kl", "top50"))
        else {
            "status": "not_applicable",
            "values": {},
            "reason": "the release gives no gold-answer likelihood for this run",
        }
    )
    out = {"likelihood": likelihood | {"risk": dict(RISK["likelihood"])}}
    if selected is None:
        return out, None
    status = COVERAGE_STATUS.get(str(sel.get("coverage_type")))
    if status is not None:
        out["coverage"] = _coverage(sel, status) | {"risk": dict(RISK["coverage"])}
    ear = finite(sel.get("EAR"))
    if sel.get("attention_available") is True and ear is not None:
        kind = status if status in ("measured", "projected", "structural") else "measured"
        attention = {"status": kind, "values": {"ear": ear}, "reason": ""}
    else:
        why = (
            "no valid eager-attention replay in the release (attention_available is not true or EAR is null)"
        )
        attention = {"status": "not_applicable", "values": {}, "reason": why}
    out["attention"] = attention | {"risk": dict(RISK["attention"])}
    category = None
    signature = CATEGORIES.get(str(sel.get("failure_signature")))
    flags = sel.get("primitive_flags")
    if signature is not None and isinstance(flags, list) and all(f in CATEGORIES for f in flags):
        category = {"category": signature, "matched": [CATEGORIES[f] for f in flags]}
    return out, category


def _coverage(sel: dict[str, Any], status: str) -> dict[str, Any]:
    reason = str(sel.get("ECov_slot_reason") or sel.get("ERR_slot_reason") or "")
    if status not in ("measured", "projected"):
        return {
            "status": status,
            "values": {},
            "reason": reason or f"release coverage_type={sel.get('coverage_type')}",
        }
    values = {"err": finite(sel.get("ERR_slot")), "ecov": finite(sel.get("ECov_slot"))}
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return {
            "status": "not_applicable",
            "values": {},
            "reason": reason or "the release gives no slot coverage value",
        }
    tau = finite(sel.get("ECov_slot_threshold"))
    return {"status": status, "values": values | ({"tau": tau} if tau is not None else {}), "reason": ""}


def unknown_of(record: Record, release_hash: str | None) -> dict[str, str]:
    """Why each UNKNOWABLE field the record leaves null is unknown (the record's own nulls only)."""
    out = unknown_nulls(record, REASONS)
    if "prompt_hash" in out and release_hash:
        out["prompt_hash"] = (
            f"the release's prompt_hash is a {len(release_hash)}-character digest of its own prompt "
            "rendering, not a sha256 of the prompt (kept in provenance.release.prompt_hash)"
        )
    return out


def check(record: dict[str, Any]) -> None:
    """Reject a record the published schema refuses (with jsonschema's message)."""
    from kvx.core.records import is_valid

    if not is_valid(record):
        import jsonschema

        from kvx.core.records import validate

        try:
            validate(record)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(record)"
            raise Reject(f"schema: {where}: {exc.message}") from None
        raise Reject("schema: the record fails the published schema") from None


@dataclass
class Converter:
    release: Release
    level: str
    out: Path
    counts: Counts = field(default_factory=Counts)
    writers: dict[str, JsonlGzWriter] = field(default_factory=dict)
    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[Path, int] = field(default_factory=dict)  # release file read -> its rows
    hashes: dict[Path, str] = field(default_factory=dict)  # release file read -> sha256
    keys: set[str] = field(default_factory=set)
    release_keys: dict[ReleaseKey, str] = field(default_factory=dict)  # the release's run key -> record key

    @property
    def source(self) -> str:
        return f"{NAME}:{self.release.version}"

    def reader_of(self, row: dict[str, Any], control: Control) -> tuple[str, str | None]:
        reader = (
            _text(row.get("model_id")) or control.reader or _text((self.release.summary or {}).get("model"))
        )
        if not reader:
            raise Reject("no model_id")
        revision = (
            _text(row.get("model_revision"))
            or control.revision
            or _text((self.release.summary or {}).get("model_revision"))
        )
        return reader, revision

    def write_controls(self, dataset: str, controls: dict[str, Control]) -> None:
        ledgers: dict[str, JsonlGzWriter] = {}
        summary = self.release.summary or {}
        for sample, control in sorted(controls.items()):
            if control.answer is None:
                continue
            task, _ = task_of(dataset, control, self.level)
            reader = control.reader or _text(summary.get("model"))
            if not reader:
                continue  # no reader, no control group: its runs are rejected for the same reason
            split = split_of(task, reader, control.revision or _text(summary.get("model_revision")))
            if split not in ledgers:
                ledgers[split] = JsonlGzWriter(self.out / f"{split}{CONTROLS_SUFFIX}")
            hash_ = control.prompt_hash if control.prompt_hash and SHA256.match(control.prompt_hash) else None
            ledgers[split].write({"source_id": sample, "prompt_hash": hash_, **control.answer.to_dict()})
        for split, writer in ledgers.items():
            writer.close()
            self.counts.controls += writer.count
            self.written[writer.path.name] = {"kind": "controls", "split": split, "rows": writer.count}

    def convert(self, dataset: str, row: dict[str, Any], controls: dict[str, Control], diags: dict) -> None:
        sample = row.get("sample_id")
        if row.get("dataset", dataset) != dataset:
            raise Reject(f"dataset {row.get('dataset')!r} in the {dataset} file")
        if not isinstance(sample, str) or sample not in controls:
            raise Reject(f"no FullCache control for sample_id {sample!r}")
        control = controls[sample]
        if control.answer is None:
            raise Reject(control.problem)
        method = row.get("method_name")
        if method not in METHODS:
            raise Reject(f"unknown method_name {method!r}")
        status = row.get("support_status", SUPPORTED)
        if status not in STATUSES:
            raise Reject(f"unknown support_status {status!r}")
        setting, bits = setting_of(method, row, status == SUPPORTED)
        task, family = task_of(dataset, control, self.level)
        reader, revision = self.reader_of(row, control)
        compressor = METHODS[method]
        fields = {
            "origin": NAME,
            "task": task,
            "reader": reader,
            "press": compressor,
            "setting.kind": setting["kind"],
            "setting.value": setting["value"],
            "seed": None,
        }
        if bits is not None:
            fields["press.bits"] = bits
        cell_id = digest(fields)
        if compressor in BASES:  # named after the id, which imports before schema 3 hashed without it
            fields["press.base"] = BASES[compressor]
        at = f"ratio={setting['value']}" if setting["kind"] == "ratio" else "setting=none"
        key = f"{task}/{sample}/{reader}@{revision or 'unknown'}/{compressor}/{at}/seed=unknown/{cell_id}"
        if key in self.keys:
            raise Reject("a second run with the same (dataset, sample_id, method_name, retained_budget)")
        release_hash = _text(row.get("prompt_hash")) or control.prompt_hash
        provenance_release = {
            "dataset": dataset,
            "sample_id": sample,
            "fullcache_key": row.get("fullcache_key") or control.key,
            "compressed_run_id": row.get("compressed_run_id"),
            "full_run_id": control.run_id,
            "experiment_id": row.get("experiment_id"),
            "official_task_name": row.get("official_task_name") or control.task_name,
            "task_key": row.get("task_key") or control.task_key,
            "method_name": method,
            "method_family": row.get("method_family"),
            "method_display": row.get("method_display"),
            "compression_ratio": row.get("compression_ratio"),
            "retained_budget": row.get("retained_budget"),
            "prompt_hash": release_hash,
            "schema_version": row.get("schema_version"),
        }
        n_context = control.n_context or _tokens(row.get("context_length_tokens"))
        record = Record(
            key=key,
            status=SUPPORTED,
            reason="",
            task=task,
            source_id=sample,
            references=control.references,
            reader=reader,
            model_revision=revision,
            compressor=compressor,
            seed=None,
            setting=setting,
            prompt_hash=release_hash if release_hash and SHA256.match(release_hash) else None,
            n_context_tokens=n_context,
            n_question_tokens=None,
            config_hash=None,
            cell={"id": cell_id, "fields": fields},
            versions={"kvx": __version__, NAME: self.release.version},
            split=split_of(task, reader, revision),
            task_family=family,
            provenance={"origin": "external", "source": self.source, "unknown": {}},
        )
        if status == SUPPORTED:
            record.pair(control.answer, _answer(row, "compressed"))
            stated = str(row.get("outcome_transition") or "").replace("->", "→")
            if stated and stated != record.transition:
                given = row.get("outcome_transition")
                raise Reject(f"outcome_transition {given} but the answers give {record.transition}")
            selected = diags.pop((sample, method, _budget(row.get("retained_budget"))), None)
            record.diagnostics, category = diagnostics_of(row, control, selected)
            if record.transition == CW:
                record.category = category
                self.counts.joins[
                    "c_to_w_with_diagnostic_row" if selected else "c_to_w_without_diagnostic_row"
                ] += 1
            elif selected is not None:
                self.counts.joins["diagnostic_row_for_a_run_that_is_not_c_to_w"] += 1
        else:
            reason = _text(row.get("unsupported_reason")) or _text(row.get("reason"))
            record.fail(status, reason or f"support_status={status} in the release")
        record.provenance["unknown"] = unknown_of(record, release_hash)  # type: ignore[index]
        record.provenance["release"] = provenance_release  # type: ignore[index]
        data = record.to_dict()
        if set(unknown_fields(data)) != set(record.provenance["unknown"]):  # type: ignore[index]
            raise RuntimeError(f"{key}: unknown fields and their reasons disagree")  # an importer bug
        check(data)
        self.keys.add(key)
        self.release_keys[release_key(dataset, sample, method, row.get("retained_budget"))] = key
        self.emit(task, data)

    def emit(self, task: str, data: dict[str, Any]) -> None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", task)
        if name not in self.writers:
            self.writers[name] = JsonlGzWriter(self.out / f"{name}{RECORDS_SUFFIX}")
        self.writers[name].write_line(dumps([data]))
        c = self.counts
        c.records += 1
        c.status[data["status"]] += 1
        c.tasks.setdefault(task, Counter())[data["status"]] += 1
        if data["transition"]:
            c.transitions[data["transition"]] += 1
            c.tasks[task][data["transition"]] += 1
        for diag, result in (data.get("diagnostics") or {}).items():
            c.diagnostics.setdefault(diag, Counter())[result["status"]] += 1
        if data.get("category"):
            c.categories[data["category"]["category"]] += 1
        for name_, reason in data["provenance"]["unknown"].items():
            c.unknown[(name_, reason)] += 1

    def run(self, progress: bool) -> None:
        from tqdm.auto import tqdm

        total = self._planned()
        bar = tqdm(total=total, unit="run", desc="kvdiagnosis", disable=not progress, leave=False)
        try:
            for path in self.release.runs:
                dataset = path.name.removesuffix(".jsonl.gz")
                controls = read_controls(self.release, dataset, self.files)
                diags = read_diagnostics(self.release, dataset, self.files)
                self.write_controls(dataset, controls)
                rows = 0
                for row in iter_rows(path):
                    rows += 1
                    bar.update(1)
                    try:
                        self.convert(dataset, row, controls, diags)
                    except Reject as exc:
                        self._reject(dataset, row, str(exc))
                self.files[path] = rows
                self.counts.joins["diagnostic_rows_without_a_ledger_run"] += len(diags)
                self.counts.datasets[dataset] = Counter(
                    sources=len(controls),
                    fullcache_correct_sources=sum(
                        bool(c.answer and c.answer.correct) for c in controls.values()
                    ),
                    planned_runs=rows,
                )
        finally:
            bar.close()
            for writer in self.writers.values():
                writer.close()
        for writer in self.writers.values():
            self.written[writer.path.name] = {"kind": "records", "rows": writer.count}

    def _planned(self) -> int | None:
        listed = {f.get("path"): f.get("rows") for f in (self.release.artifacts or {}).get("files", [])}
        rows = [listed.get(self._relative(p)) for p in self.release.runs]
        return sum(rows) if all(isinstance(r, int) for r in rows) else None

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.release.base.resolve()).as_posix()
        except ValueError:
            return str(path)

    def _reject(self, dataset: str, row: dict[str, Any], reason: str) -> None:
        self.counts.rejected[reason.split(" (")[0]] += 1
        if len(self.counts.examples) < 20:
            run = f"{dataset}/{row.get('sample_id')}/{row.get('method_name')}/{row.get('retained_budget')}"
            self.counts.examples.append({"run": run, "reason": reason})


# -------------------------------------------------------------------------------------------- reporting


def _checks(conv: Converter) -> dict[str, Any]:
    """What was read against the release's own summary.json and artifact manifest."""
    out: dict[str, Any] = {}
    summary = conv.release.summary or {}
    per_dataset = summary.get("datasets") or {}
    differences = []
    for dataset, counts in sorted(conv.counts.datasets.items()):
        stated = per_dataset.get(dataset) or {}
        records = conv.counts.tasks
        mine = {
            "sources": counts["sources"],
            "planned_runs": counts["planned_runs"],
            "fullcache_correct_sources": counts["fullcache_correct_sources"],
            "supported_runs": sum(
                c[SUPPORTED] for t, c in records.items() if _dataset_of(t, conv) == dataset
            ),
            "unsupported_runs": sum(
                c[UNSUPPORTED] for t, c in records.items() if _dataset_of(t, conv) == dataset
            ),
            "C_to_W_rows": sum(c[CW] for t, c in records.items() if _dataset_of(t, conv) == dataset),
        }
        for name, value in mine.items():
            if name in stated and stated[name] != value:
                differences.append(f"{dataset}.{name}: release {stated[name]}, imported {value}")
    if set(per_dataset) and set(per_dataset) == set(conv.counts.datasets):
        stated = summary.get("transitions") or {}
        for arrow, n in sorted(stated.items()):
            mine_n = conv.counts.transitions.get(arrow.replace("->", "→"), 0)
            if mine_n != n:
                differences.append(f"transitions {arrow}: release {n}, imported {mine_n}")
    out["summary_json"] = {"read": bool(summary), "differences": differences}
    listed = {f.get("path"): f for f in (conv.release.artifacts or {}).get("files", [])}
    verified, mismatched, unlisted = 0, [], []
    for path in conv.files:
        entry = listed.get(conv._relative(path))
        if entry is None:
            unlisted.append(conv._relative(path))
        elif entry.get("sha256") == conv.hashes[path]:
            verified += 1
        else:
            mismatched.append(conv._relative(path))
    out["artifact_manifest"] = {
        "read": bool(listed),
        "verified": verified,
        "sha256_mismatch": mismatched,
        "not_listed": unlisted,
    }
    return out


def _dataset_of(task: str, conv: Converter) -> str:
    datasets = sorted(conv.counts.datasets, key=len, reverse=True)
    return next((d for d in datasets if task == d or task.startswith(f"{d}_")), task)


def manifest(conv: Converter, seconds: float) -> dict[str, Any]:
    c = conv.counts
    files = [
        {"path": conv._relative(p), "bytes": p.stat().st_size, "sha256": conv.hashes[p], "rows": n}
        for p, n in sorted(conv.files.items())
    ]
    for path in (conv.release.population / "summary.json", conv.release.artifacts_path):
        if path.is_file():
            files.append(
                {
                    "path": conv._relative(path),
                    "bytes": path.stat().st_size,
                    "sha256": sha256_file(path),
                    "rows": None,
                }
            )
    return {
        **manifest_head(NAME, seconds),
        "release": {
            "path": str(conv.release.root.resolve()),
            "version": conv.release.version,
            "source": conv.source,
            "model": (conv.release.summary or {}).get("model"),
            "model_revision": (conv.release.summary or {}).get("model_revision"),
        },
        "tasks_level": conv.level,
        "files_read": files,
        "files_written": [{"path": name, **info} for name, info in sorted(conv.written.items())],
        "checks": _checks(conv),
        "counts": {
            "records": c.records,
            "controls": c.controls,
            "by_status": dict(sorted(c.status.items())),
            "by_transition": dict(sorted(c.transitions.items())),
            "by_task": {t: dict(sorted(v.items())) for t, v in sorted(c.tasks.items())},
            "by_dataset": {d: dict(v) for d, v in sorted(c.datasets.items())},
            "diagnostics": {d: dict(sorted(v.items())) for d, v in sorted(c.diagnostics.items())},
            "categories": dict(sorted(c.categories.items())),
            "joins": dict(sorted(c.joins.items())),
            "rejected": sum(c.rejected.values()),
            "rejected_by_reason": dict(c.rejected.most_common()),
        },
        "rejected_examples": c.examples,
        "field_mapping": FIELD_MAPPING,
        "methods": METHODS,
        "categories": CATEGORIES,
        "unknown": unknown_summary(c.unknown),
        "caveats": CAVEATS,
        "left_out": LEFT_OUT,
    }


def summary_lines(conv: Converter, out: Path, checks: dict[str, Any]) -> list[str]:
    c = conv.counts
    status = ", ".join(f"{n} {s}" for s, n in sorted(c.status.items())) or "none"
    transitions = ", ".join(f"{t} {n}" for t, n in sorted(c.transitions.items())) or "none"
    diags = "; ".join(
        f"{d} " + ", ".join(f"{n} {s}" for s, n in sorted(v.items()))
        for d, v in sorted(c.diagnostics.items())
    )
    datasets = ", ".join(f"{d} {v['sources']}" for d, v in sorted(c.datasets.items()))
    lines = [
        f"kvx.importers: {NAME} {conv.release.root} ({conv.release.version}) -> {out}",
        f"  sources: {datasets} ({c.controls} FullCache controls in control ledgers)",
        f"  records: {c.records} ({status}) in {len(conv.writers)} task files",
        f"  transitions: {transitions}",
        f"  diagnostics: {diags or 'none'}; categories on {sum(c.categories.values())} C→W records",
        "  unknown (null, reason in provenance.unknown): "
        + (", ".join(f"{name} {c.unknown_total(name)}" for name in _unknown_names(c)) or "none"),
    ]
    if c.rejected:
        top = "; ".join(f"{n}x {reason}" for reason, n in c.rejected.most_common(3))
        lines.append(f"  REJECTED {sum(c.rejected.values())} runs (not written): {top}")
    for difference in checks["summary_json"]["differences"][:5]:
        lines.append(f"  differs from summary.json: {difference}")
    mismatch = checks["artifact_manifest"]["sha256_mismatch"]
    if mismatch:
        lines.append(f"  sha256 differs from the release's artifact manifest: {', '.join(mismatch)}")
    lines.append(f"  manifest: {out / MANIFEST}")
    lines.append(f"  next: python -m kvx.aggregate --records {out}")
    return lines


def _unknown_names(counts: Counts) -> list[str]:
    names = {name for name, _ in counts.unknown}
    return [path for path in UNKNOWABLE if path in names]


# ------------------------------------------------------------------------------------------------- entry


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    release = locate(args.path)
    out: Path = args.out
    with staged(out) as tmp:
        conv = Converter(release, args.tasks, tmp)
        conv.run(progress=not args.quiet)
        tables = import_side_tables(release.population.parent.parent, conv.release_keys, tmp)
        conv.files.update({item.pop("path"): item["rows"] for item in tables["files_read"]})
        conv.hashes = {p: sha256_file(p) for p in conv.files}
        data = manifest(conv, time.perf_counter() - started)
        data["release_tables"] = {k: tables[k] for k in ("files_written", "notes", "mapping")}
        (tmp / MANIFEST).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for line in summary_lines(conv, out, data["checks"]):
        print(line, file=sys.stdout)
    for note in tables["notes"]:
        print(f"  note: {note}", file=sys.stdout)
    return 1 if conv.counts.rejected else 0
