"""One flat row per valid record: the fields every analysis reads, nothing else.

Raw records carry token ids, outputs and every diagnostic value; the analyses need a few dozen
numbers per record. Projecting each batch as it is read keeps memory bounded on large stores.
A diagnostic value enters a row only when its diagnostic says it is valid (measured, projected
or structural) and the value is a finite number; everything else is NaN, never imputed.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from kvx.aggregate.read import text
from kvx.core.records import ANSWER_COSTS, COMPRESSION_COSTS, CONTROL, CW, SERVED_COSTS, SOURCE
from kvx.diagnostics.categories import READS, categorize, category_row

VALID = ("measured", "projected", "structural")
INTERVENTION_FIELDS = (
    "reproduced",
    "repaired_evidence",
    "repaired_sham",
    "degraded_evidence",
    "degraded_sham",
)
NAN = float("nan")
_COMP_COSTS = ANSWER_COSTS + COMPRESSION_COSTS
UNKNOWN = "unknown"  # the label of a field an external record leaves unknown (never a made-up value)
#: a row's judge columns, per answer side (``full_``, ``comp_``) and judge name (kvx.aggregate.paired.judges)
JUDGE_CORRECT, JUDGE_STATUS, JUDGE_UNCERTAIN = "j.", "j_status.", "j_uncertain."


@dataclass(frozen=True)
class Metric:
    """A diagnostic value with a declared failure-risk direction."""

    name: str  # column name in the tables
    diagnostic: str
    value: str
    direction: str  # "higher" or "lower": which side means more failure risk

    @property
    def column(self) -> str:
        return f"{self.diagnostic}.{self.value}"


def declared_metrics(declared: dict[tuple[str, str], str]) -> list[Metric]:
    """Metrics from the risk directions the records declare; a value name shared by two
    diagnostics is qualified with the diagnostic's name in the tables."""
    counts: dict[str, int] = {}
    for _, value in declared:
        counts[value] = counts.get(value, 0) + 1
    return [
        Metric(value if counts[value] == 1 else f"{diag}.{value}", diag, value, direction)
        for (diag, value), direction in sorted(declared.items())
    ]


def setting_label(setting: dict[str, Any]) -> str:
    """The setting as asked for: ``0.5`` (ratio), ``128 tok`` (token budget), ``-`` (the compressor's
    own fields fix it: press=none, hqq with press.bits)."""
    return _label(setting["kind"], setting["value"])


@lru_cache(maxsize=4096)
def _label(kind: str, value: Any) -> str:  # a sweep has few settings and many records each
    from kvx.core.identity import SettingSpec

    return SettingSpec(kind, value).label()


def _number(value: Any) -> float:
    kind = type(value)  # the exact JSON types first: this runs a few dozen times a record
    if kind is float:
        return value if math.isfinite(value) else NAN
    if kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    value = float(value)
    return value if math.isfinite(value) else NAN


def _flag(value: Any) -> float:
    return float(value) if isinstance(value, bool) else NAN


CASE_CHARS = 1000  # a case shows this much of a compressed output; the record keeps all of it


def case_text(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    return text if len(text) <= CASE_CHARS else f"{text[:CASE_CHARS]} … [+{len(text) - CASE_CHARS} chars]"


def _text_hash(text: Any) -> float:
    """A stable 52-bit hash of a text as a float (exact, NaN when there is none): 8 bytes a row where
    the text would take a kilobyte, enough to tell two outputs apart."""
    if not isinstance(text, str):
        return NAN
    # surrogatepass: a lone surrogate (a record's JSON may escape one) is hashed, not an error; any other
    # text encodes as in UTF-8
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return float(int.from_bytes(digest, "big") >> 12)


def _detail(value: Any) -> Any:
    """An answer detail as a row value: booleans as 0/1, numbers as floats, strings as they are;
    anything else (lists, mappings, null) is NaN."""
    if isinstance(value, bool):
        return float(value)
    return value if isinstance(value, str) else _number(value)


def judge_fields(prefix: str, judgments: dict[str, Any]) -> dict[str, Any]:
    """One answer's judgments as row columns: ``<prefix>j.<name>`` (1 correct, 0 not, NaN when the answer
    was not judged: an error, or a source the judge does not apply to), ``<prefix>j_status.<name>`` and
    ``<prefix>j_uncertain.<name>`` (1 when the judge left the answer undecided: no credit)."""
    out: dict[str, Any] = {}
    for name, j in judgments.items():
        judged = j.get("status") == "judged" and isinstance(j.get("correct"), bool)
        out[f"{prefix}{JUDGE_CORRECT}{name}"] = float(j["correct"]) if judged else NAN
        out[f"{prefix}{JUDGE_STATUS}{name}"] = str(j.get("status"))
        out[f"{prefix}{JUDGE_UNCERTAIN}{name}"] = float(j.get("verdict") == "uncertain") if judged else NAN
    return out


def _category(record: dict[str, Any], diags: dict[str, Any]) -> dict[str, Any]:
    """The Table 4 category of a C→W row: the recorded one, else derived from the stored diagnostic values
    by the same rules (records from elsewhere often carry values but no category); None (N/A) when no
    diagnostic the rules read has a valid value, or when the coverage state is unknown: every rule needs
    it (mapped ECov or structural addressability), so without it each row would be "ambiguous" for want
    of a measurement (the KVDiagnosis release's RULER runs carry likelihood values but no coverage)."""
    recorded = (record.get("category") or {}).get("category")
    if recorded is not None:
        return {"category": recorded, "category_derived": False}
    measured = any((diags.get(name) or {}).get("status") in VALID for name in READS)
    coverage = (diags.get("coverage") or {}).get("status") in (*VALID, "not_applicable")
    if record.get("transition") != CW or not measured or not coverage:
        return {"category": None, "category_derived": False}
    return {"category": categorize(category_row(diags))["category"], "category_derived": True}


def _transform_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The text transform of the record's cell: its name (``turns:<selector>``, ``delete_turns``,
    ``none``), the turn fraction kept by a turn selector and the deletion of ``delete_turns``. The cell
    id names its fields, so each cell is worked out once (a cell has hundreds of records)."""
    name = (record.get("transform") or {}).get("name")
    key = (record["cell"]["id"], name)
    if key not in _TRANSFORMS:
        if len(_TRANSFORMS) > 100_000:
            _TRANSFORMS.clear()
        _TRANSFORMS[key] = _transform_of(record["cell"].get("fields") or {}, name)
    return _TRANSFORMS[key]


_TRANSFORMS: dict[tuple[str, str | None], dict[str, Any]] = {}


def _transform_of(flat: dict[str, Any], recorded: str | None) -> dict[str, Any]:
    name = flat.get("transform") or recorded or "none"
    fraction = flat.get("transform.fraction") if str(name).startswith("turns:") else None
    which = flat.get("transform.which") if name == "delete_turns" else None
    shown = ",".join(f"{k[10:]}={v}" for k, v in sorted(flat.items()) if k.startswith("transform."))
    return {
        "transform": str(name),
        # one evidence condition per transform configuration (bm25_top_k[k=3] is not bm25_top_k[k=5])
        "evidence": f"{name}[{shown}]" if shown else str(name),
        "turn_fraction": _number(fraction),
        "deletion": "" if which is None else str(which),
        "corpus": str(flat.get("task.corpus") or ""),
    }


def project(
    record: dict[str, Any],
    origin: str,
    sweep: str,
    declared: dict[tuple[str, str], str],
    conflicts: set[tuple[str, str]],
) -> dict[str, Any]:
    """The analysis row of one schema-valid record; its risk declarations are added to ``declared``.

    Records are self-describing: each diagnostic result carries the risk directions its
    diagnostic declares, so records produced elsewhere are analysed without the plugin installed.
    """
    full = record.get("full") or {}
    comp = record.get("compressed") or {}
    diags = record.get("diagnostics") or {}
    category = _category(record, diags)
    setting = record["setting"]
    ratio = float(setting["value"]) if setting["kind"] == "ratio" else NAN
    reader = f"{record['reader']}"
    row: dict[str, Any] = {
        "origin": origin,
        "sweep": sweep,
        "key": record["key"],
        "task": record["task"],
        "task_family": str(record.get("task_family") or ""),
        # the length the split's prompts were sized to (cell identity); external records may give none
        "context_tokens": _number((record["cell"].get("fields") or {}).get("context_tokens")),
        "reader": reader,
        "revision": record["model_revision"] or UNKNOWN,
        "family": str(record.get("reader_family") or reader),  # unknown: a family of its own
        "prompt_format": str(record.get("prompt_format") or ""),
        "split": record.get("split", ""),
        "compressor": record["compressor"],
        "ratio": ratio,
        "retained_share": _number(setting.get("retained_share")),
        "setting": setting_label(setting),
        "cell_id": record["cell"]["id"],
        "seed": UNKNOWN if record["seed"] is None else str(record["seed"]),
        "source_id": record["source_id"],
        "status": record["status"],
        "prompt_hash": record["prompt_hash"],
        "full_score": _number(full.get("score")),
        "full_correct": _flag(full.get("correct")),
        "full_output": full.get("output"),
        "comp_score": _number(comp.get("score")),
        "comp_correct": _flag(comp.get("correct")),
        "transition": record.get("transition"),
        # KVDiagnosis paired cases (Figure 8 / Table 15), the PyramidKV audit (Table 5) and structural N/A
        # (Table 14): the compressed output of C→W rows only (the cases), a 52-bit hash of every one
        "comp_output": case_text(comp.get("output")) if record.get("transition") == CW else None,
        "comp_output_hash": _text_hash(comp.get("output")),
        "references": " | ".join(map(str, record.get("references") or [])) or None,
        "coverage_status": (diags.get("coverage") or {}).get("status"),
        **category,
        "text_hash": record.get("compressed_text_sha256"),
        # prompt sizes of the untransformed prompt, and the transformed context's share of it
        "n_context_tokens": _number(record.get("n_context_tokens")),
        "n_question_tokens": _number(record.get("n_question_tokens")),
        "retained_token_share": _number((record.get("transform") or {}).get("retained_token_share")),
    }
    for diag, result in diags.items():
        values = result.get("values", {}) if result.get("status") in VALID else None
        for value, direction in (result.get("risk") or {}).items():
            if declared.setdefault((diag, value), direction) != direction:
                conflicts.add((diag, value))
            row[f"{diag}.{value}"] = NAN if values is None else _number(values.get(value))
    row.update(_transform_fields(record))
    for prefix, answer, fields in (("full_", full, ANSWER_COSTS), ("comp_", comp, _COMP_COSTS)):
        cost = answer.get("cost") or {}  # absent in older and external records: NaN, never imputed
        for name in fields:
            row[f"{prefix}{name}"] = _number(cost.get(name))
        served = answer.get("served") or {}  # a served reader's tokens and money; NaN elsewhere
        for name in SERVED_COSTS:
            row[f"{prefix}{name}"] = _number(served.get(name))
        for name, value in (answer.get("metrics") or {}).items():
            row[f"{prefix}m.{name}"] = _number(value)
        for name, value in (answer.get("details") or {}).items():
            row[f"{prefix}d.{name}"] = _detail(value)
        row.update(judge_fields(prefix, answer.get("judgments") or {}))
    # an external record's own answer kvx could not pair (no control; never scored by kvx): a paper
    # whose rule scores it anyway reads its metrics (TPBench's denominators)
    unpaired = (record.get("provenance") or {}).get("unpaired_answer") or {}
    for name, value in (unpaired.get("metrics") or {}).items():
        row[f"unpaired_m.{name}"] = _number(value)
    iv = diags.get("intervention") or {}
    iv_ok = iv.get("status") in VALID
    for name in INTERVENTION_FIELDS:
        row[f"iv_{name}"] = _flag(iv.get("values", {}).get(name)) if iv_ok else NAN
    # the Table 4 signature of a row the intervention measured, C→C rows too: its cohort and controls
    if not iv_ok:
        row["iv_signature"] = None
    elif category["category_derived"]:  # the same rules on the same values: worked out once
        row["iv_signature"] = category["category"]
    else:
        row["iv_signature"] = categorize(category_row(diags))["category"]
    return row


def with_ids(rows: pd.DataFrame) -> pd.DataFrame:
    """``row_id`` (the same source for every reader) and ``unit`` (the same source and reader: one
    FullCache control), built from the final task and reader labels. Each distinct id is built once and
    shared by the rows that have it (a source recurs in every cell). Adds the columns in place."""
    rows["row_id"] = _joined(
        rows,
        SOURCE,
        lambda f: f["task"] + "|seed=" + f["seed"].astype(str) + "|" + f["source_id"],
    )
    rows["unit"] = _joined(
        rows,
        CONTROL,
        lambda f: f["row_id"] + "|" + f["reader"] + "@" + f["revision"],
    )
    return rows


def _joined(rows: pd.DataFrame, columns: list[str], build: Any) -> np.ndarray:
    # exact: pandas' groupby and drop_duplicates on several columns merge ids that differ after a NUL
    codes = text.group_codes(rows, columns)
    labels = build(text.drop_duplicates(rows, columns)).to_numpy(object)
    return labels[codes]
