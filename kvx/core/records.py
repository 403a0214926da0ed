"""The per-source record: one typed model, one writer, its JSON Schema, transitions and cell metrics.

Every record — from a run, from the synthetic generator, from a test — is a ``Record`` written by
``Record.to_dict``/``dumps``, and tests check the dataclass against ``record.schema.json`` field by
field, so the published schema and what kvx writes cannot drift apart.

Metrics follow KVDiagnosis section 3.3: task quality over the supported sources, the C->W rate
over FullCache-correct supported sources (with its denominator), and the four transitions.
Unsupported and error records are counted, never scored as wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import version
from importlib.resources import files
from typing import Any, Final

from kvx.core.jsonl import json_line

SCHEMA_VERSION = "3"

# The record model's names, each defined here once and imported wherever a record, a row or a table
# uses it (plain strings: records on disk and the aggregate's columns hold exactly these values).

#: a record's ``status``: a supported record is scored; an unsupported one (a setting its compressor
#: cannot run) and an error are counted, never scored as wrong
SUPPORTED: Final = "supported"
UNSUPPORTED: Final = "unsupported"
ERROR: Final = "error"
STATUSES: Final = (SUPPORTED, UNSUPPORTED, ERROR)
#: a supported record's ``transition`` (``transition()``): its FullCache answer correct (C) or wrong
#: (W), then its compressed answer
CC: Final = "C→C"
CW: Final = "C→W"
WC: Final = "W→C"
WW: Final = "W→W"
TRANSITIONS: Final = (CC, CW, WC, WW)
#: the transitions of a FullCache-correct record: the C→W rate's denominator (n_FC)
FULL_CORRECT: Final = (CC, CW)

# The columns the aggregate's rows (one per record) and tables are keyed on. Lists, as pandas takes
# keys (a tuple is one key); never changed in place: a longer key is built, ``[*CELL, "metric"]``.
#: a cell: one setting of one compressor on one task and reader
CELL: Final = ["task", "reader", "compressor", "setting"]
#: one task as one reader reads it (FullCache rows, a figure's panels, judges)
TASK_READER: Final = ["task", "reader"]
#: a source, the same for every reader: the ``row_id`` column
SOURCE: Final = ["task", "seed", "source_id"]
#: a source's FullCache control, one per source and reader revision (the same answer in every cell):
#: the ``unit`` column
CONTROL: Final = ["row_id", "reader", "revision"]
#: a ragscale audit panel: one setting of one compressor under one evidence condition of a task, over
#: every reader; with the metric, a panel's head
PANEL: Final = ["task", "evidence", "compressor", "setting"]
PANEL_METRIC: Final = [*PANEL, "metric"]


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(files("kvx.schemas").joinpath("record.schema.json").read_text())


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


@lru_cache(maxsize=1)
def _compiled() -> Any:
    import jsonschema_rs

    return jsonschema_rs.validator_for(schema())


def is_valid(record: dict[str, Any]) -> bool:
    """The schema check of bulk reading: jsonschema-rs compiles the schema once (~7 us a record, 8x
    fastjsonschema); ``validate`` stays the reference that explains a rejection."""
    return _compiled().is_valid(record)


def validate(record: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when a record breaks the published schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        raise error


def versions() -> dict[str, str]:
    """The packages whose versions every record (and transform manifest) carries."""
    return {d: version(d) for d in ("kvx", "torch", "transformers", "kvpress")}


def transition(full_correct: bool, compressed_correct: bool) -> str:
    return f"{'C' if full_correct else 'W'}→{'C' if compressed_correct else 'W'}"


@dataclass
class Answer:
    """One decoded and evaluated answer (the FullCache control's or the compressed run's)."""

    output: str
    normalized: str | None  # None: unknown, external records only
    score: float
    correct: bool
    token_ids: list[int] | None
    stop_reason: str | None  # "eos" | "max_new_tokens"
    metrics: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    #: what it cost (``kvx.modeling.costs``): KV bytes held when decoding started, timings; measured, so
    #: never part of an identity or a validation check; None for external and older records
    cost: dict[str, Any] | None = None
    #: an answer from a served model (``reader=openai``): endpoint, served model, fingerprint, tokens, money
    served: dict[str, Any] | None = None
    #: judge name -> its judgment of this answer (``kvx.judges``), beside the task's own score
    judgments: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("metrics", "details", "cost", "served", "judgments"):  # tasks without them write none
            if not out[name]:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        return cls(**data)


#: optional fields left out of the JSON when they are None (the schema does not require them)
_OPTIONAL = (
    "query_aware",
    "split",
    "contrast",
    "transform",
    "compressed_text_sha256",
    "reader_family",
    "prompt_format",
    "seconds",
    "diagnostics",
    "category",
    "task_family",
    "provenance",
    "truncation",
)
#: fields an external record (``provenance.origin == "external"``) may leave null, each with a reason in
#: ``provenance.unknown``; kvx's own records always have them
UNKNOWABLE = (
    "references",
    "model_revision",
    "seed",
    "prompt_hash",
    "n_context_tokens",
    "n_question_tokens",
    "config_hash",
    *(
        f"{side}.{field}"
        for side in ("full", "compressed")
        for field in ("normalized", "token_ids", "stop_reason")
    ),
)


_UNKNOWABLE_PARTS = tuple((path, *path.split(".", 1), "")[:3] for path in UNKNOWABLE)  # (path, head, tail)


def unknown_fields(record: dict[str, Any]) -> list[str]:
    """The ``UNKNOWABLE`` fields a record leaves null (a null answer is not an unknown field)."""
    out = []
    for path, head, tail in _UNKNOWABLE_PARTS:
        node = record.get(head)
        if tail:
            if isinstance(node, dict) and node.get(tail, 0) is None:
                out.append(path)
        elif head in record and node is None:
            out.append(path)
    return out


@dataclass
class Record:
    """One source under one cell, paired with its FullCache control."""

    key: str
    status: str  # STATUSES
    reason: str
    task: str
    source_id: str
    references: list[str] | None  # None: unknown, external records only (UNKNOWABLE)
    reader: str
    model_revision: str | None
    compressor: str
    seed: int | None
    setting: dict[str, Any]
    prompt_hash: str | None
    n_context_tokens: int | None
    n_question_tokens: int | None
    config_hash: str | None
    cell: dict[str, Any]
    versions: dict[str, str]
    full: Answer | None = None
    compressed: Answer | None = None
    transition: str | None = None
    #: ``kvx.core.query.stored``: false, true (the prompt mode) or "question"
    query_aware: bool | str | None = None
    split: str | None = None
    contrast: dict[str, str] | None = None
    transform: dict[str, Any] | None = None
    compressed_text_sha256: str | None = None
    reader_family: str | None = None
    prompt_format: str | None = None
    seconds: float | None = None
    diagnostics: dict[str, Any] | None = None
    category: dict[str, Any] | None = None
    task_family: str | None = None
    provenance: dict[str, Any] | None = None  # external records only: origin, source, unknown fields
    #: ``reader.max_prompt_tokens`` set: the limit, ``reader.truncation`` (mode) and the context tokens cut
    truncation: dict[str, Any] | None = None
    schema_version: str = SCHEMA_VERSION

    def pair(self, full: Answer, compressed: Answer) -> None:
        """A supported record: both answers and their transition."""
        self.status, self.reason = SUPPORTED, ""
        self.full, self.compressed = full, compressed
        self.transition = transition(full.correct, compressed.correct)

    def fail(self, status: str, reason: str) -> None:
        """An unsupported setting or an error: never scored, the control kept when there is one."""
        self.status, self.reason = status, reason
        self.compressed, self.transition = None, None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """The record a ``to_dict`` wrote (a cell's spooled records, read back on resume)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for side in ("full", "compressed"):
            if values.get(side) is not None:
                values[side] = Answer.from_dict(values[side])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "schema_version" or (value is None and f.name in _OPTIONAL):
                continue
            out[f.name] = value.to_dict() if isinstance(value, Answer) else value
        return out


def as_dicts(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Records as the JSON objects they are written as (what the aggregate and metrics read)."""
    return [r.to_dict() for r in records]


def dumps(records: Iterable[Record | dict[str, Any]]) -> str:
    """JSON Lines text of records (the ``records.jsonl`` artifact and record directories)."""
    return "".join(json_line(r.to_dict() if isinstance(r, Record) else r) for r in records)


#: the ``Answer.cost`` fields of any answer (``kvx.modeling.costs``), and those only a compressed one has
ANSWER_COSTS = ("kv_bytes", "masked_share", "question_ms", "decode_ms_per_token", "new_tokens", "decode_rows")
#: ``kv_bytes_decode_*``: a press that compresses while decoding, its cache over the decoding steps
COMPRESSION_COSTS = (
    "compress_s",
    "prefill_s",
    "decode_batches",
    "kv_bytes_decode_peak",
    "kv_bytes_decode_mean",
    "kv_bytes_decode_end",
)
#: what a served reader's answer cost (``Answer.served``): tokens as the server billed them, and money
SERVED_COSTS = ("prompt_tokens", "completion_tokens", "price")


def cost_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """What a cell's supported answers cost (``Answer.cost``): medians per record, and the bytes
    its compressed caches held against their FullCache controls (sum over sum, so long sources
    weigh as much as the memory they take) beside the nominal retained share. Values no record
    has are omitted, never imputed; timings are this machine's (compare ratios within one run)."""
    supported = [r for r in records if r["status"] == SUPPORTED]
    out: dict[str, float] = {}
    for side, prefix, fields in (
        ("compressed", "", ANSWER_COSTS + COMPRESSION_COSTS),
        ("full", "full_", ANSWER_COSTS),
    ):
        costs = [r[side]["cost"] for r in supported if (r[side] or {}).get("cost")]
        for name in fields:
            values = [c[name] for c in costs if c.get(name) is not None]
            if values:
                out[f"{prefix}{name}_median"] = float(statistics.median(values))
    paired = [
        (r["compressed"]["cost"]["kv_bytes"], r["full"]["cost"]["kv_bytes"])
        for r in supported
        if (r["compressed"] or {}).get("cost") and (r["full"] or {}).get("cost")
    ]
    if paired and sum(full for _, full in paired):
        out["kv_bytes_ratio"] = sum(kv for kv, _ in paired) / sum(full for _, full in paired)
    shares = [r["setting"].get("retained_share") for r in supported]
    shares = [share for share in shares if share is not None]
    if shares:
        out["retained_share_nominal"] = float(statistics.median(shares))
    return out


def served_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """What a served reader's answers cost (``Answer.served``): prompt and completion tokens and money,
    summed per side over the answers that report them (never imputed), answers replayed from the
    response cache against those requested, retries, and how many system fingerprints answered (more
    than one: the hosted model changed under its name during the cell)."""
    out: dict[str, float] = {}
    fingerprints: set[str] = set()
    for side, prefix in (("compressed", ""), ("full", "full_")):
        served = [r[side]["served"] for r in records if (r.get(side) or {}).get("served")]
        if not served:
            continue
        for name in ("prompt_tokens", "completion_tokens", "price"):
            values = [s[name] for s in served if s.get(name) is not None]
            if values:
                out[f"{prefix}{name}"] = float(sum(values))
        out[f"{prefix}answers_cached"] = float(sum(bool(s.get("cached")) for s in served))
        out[f"{prefix}answers_requested"] = float(sum(not s.get("cached") for s in served))
        out[f"{prefix}retries"] = float(sum(int(s.get("retries") or 0) for s in served))
        fingerprints |= {s["system_fingerprint"] for s in served if s.get("system_fingerprint")}
    if out:
        out["n_system_fingerprints"] = float(len(fingerprints))
    return out


def cell_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Cell summary. Rates over empty denominators are omitted (never imputed as 0). Each answer metric
    of the task (``Answer.metrics``) is a mean: ``m.<name>`` over the supported compressed answers,
    ``full_m.<name>`` over every FullCache control (as ``full_mean_score``)."""
    supported = [r for r in records if r["status"] == SUPPORTED]
    counts = {t: sum(r["transition"] == t for r in supported) for t in TRANSITIONS}
    fc_correct = counts[CC] + counts[CW]
    out: dict[str, float] = {
        "n_records": len(records),
        "n_supported": len(supported),
        "n_unsupported": sum(r["status"] == UNSUPPORTED for r in records),
        "n_error": sum(r["status"] == ERROR for r in records),
        "n_cc": counts[CC],
        "n_cw": counts[CW],
        "n_wc": counts[WC],
        "n_ww": counts[WW],
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
        out["cw_rate"] = counts[CW] / fc_correct
    out.update(answer_metric_means([r["compressed"] for r in supported], "m."))
    out.update(answer_metric_means(controls, "full_m."))
    return out


#: the prefixes of the answer-metric means a cell logs (``m.json_valid``, ``full_m.json_valid``)
METRIC_PREFIXES = ("m.", "full_m.")


def answer_metric_means(answers: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """``prefix + name`` -> the mean of each ``Answer.metrics`` value over the answers that carry it
    (finite numbers only, as the aggregate's rows read them); a metric no answer carries is absent,
    never 0, and one an answer lacks is left out of that mean, never counted as 0."""
    values: dict[str, list[float]] = {}
    for answer in answers:
        for name, value in (answer.get("metrics") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                values.setdefault(name, []).append(float(value))
    return {f"{prefix}{metric_key(name)}": sum(v) / len(v) for name, v in sorted(values.items())}


def metric_key(name: str) -> str:
    """A task's metric name as MLflow accepts it (letters, digits, ``_-. /``): a plugin's ``pass@1``
    is logged as ``pass_1`` instead of failing the cell run when it logs."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", name)
