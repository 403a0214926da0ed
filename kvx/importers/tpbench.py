"""TPBench public release (github.com/kentech-sail/TPBench) -> kvx records.

What is read (the release's ``README.md`` and ``RESULTS_MAP.md`` name the files; its scorers
``scripts/scorer/scorer_p1.py`` and ``scorer_p3.py`` wrote them):

- ``results/p1_saved/<sgd|mw>_r30_s<seed>_scored.jsonl``: paper P1 (initial goal), one row per probe
  and method: ``dialogue_id`` (the probe id), ``dataset``, ``method``, ``probe_type`` "P1", ``gold``,
  ``pred_value`` (the parsed answer), ``abstain``, ``p1_correct`` (strict), ``p1_correct_loose``.
- ``results/main/<sgd|mw>_r<rr>_s<seed>_p3_scored.jsonl``: paper P2 (current value; the release's
  serialized tag is ``p3`` / ``probe_type`` "P3"), with ``p3_correct`` (strict), ``p3_correct_loose``,
  the auxiliary ``p3_overlap_strict``/``p3_overlap_loose``, ``abstain``, ``support_in_ctx``,
  ``pred_value``/``norm_pred``, ``gold_value``/``norm_gold``, ``err`` (a reader error, scored 0 by the
  release), ``meta`` (turns, update turn, evidence turns) and ``p2_loose_matcher``; corrected LLMLingua
  rows add ``error`` and ``format_error``. ``chunkkv_<sgd|mw>_r30_p3_scored.jsonl`` holds ChunkKV's.
- ``results/diagnostics/mistral_128/<sgd|mw>_r<rr>_s<seed>_p3_scored.jsonl``: Mistral's P2, the
  main files' layout (reader ``mistralai/Mistral-7B-Instruct-v0.3``).
- ``results/diagnostics/update_evidence/p3_<sgd|multiwoz>_s<seed>_scored_<llama|mistral|chunkkv>.jsonl``:
  the paper's P3 (serialized ``P1_LATE``, ``scripts/scorer/scorer_paper_p3.py``): ``p3_joint_strict`` /
  ``p3_joint_loose`` (segment-local), ``p3_goal_correct``, ``p3_value_*``, ``p3_segment_parse``, the
  whole-field ``p1late_combined*``, ``gold_story_label`` and ``gold_value``, ``error``. ChunkKV's file
  (on Llama) has no full_context rows: it pairs with Llama's file of its seed.
- ``results/diagnostics/update_evidence/p2_scored_llama.jsonl``: the paired deletions (paper Tables
  11-13), both corpora in one file, seed 42, methods ``full_context`` and ``cf_origin_minus_*``.
- ``<same stem>_aggregate.json`` beside a scored file (``_scored`` -> ``_aggregate``): the release's
  per-method means, checked against what was read (the release counts a reader error as a wrong
  answer, in n: the paper's rule, which the aggregate's paper tables follow; kvx's own columns do not).

The release's ``full_context`` method is the FullCache control of its file: it becomes the control
ledger and the full answer of every record of the same probe, seed and budget; every other method
becomes a record. A reader error is a record with status ``error`` and its reason, never a wrong
answer; a probe whose full-context answer is a reader error has no control, so its records are errors
too (kvx's rule: no control, no pair). The release's scores are imported as they are, not rescored.
"""

from __future__ import annotations

import argparse
import difflib
import functools
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
from kvx.core.identity import digest
from kvx.core.records import (
    ERROR,
    SUPPORTED,
    UNKNOWABLE,
    Answer,
    Record,
    dumps,
    is_valid,
    unknown_fields,
    validate,
)
from kvx.importers import (
    CONTROLS_SUFFIX,
    MANIFEST,
    RECORDS_SUFFIX,
    BadInput,
    JsonlGzWriter,
    manifest_head,
    sha256_file,
    staged,
    unknown_nulls,
    unknown_summary,
)
from kvx.tasks.tpbench import text

NAME = "tpbench"
#: the reader of every Llama answer (README: "Main Llama P1/P2", "Llama P3 and paired deletion")
READER = "meta-llama/Llama-3.1-8B-Instruct"
#: the replication reader (README: "Mistral P2", "Mistral P3"; paper §6.5.1)
MISTRAL = "mistralai/Mistral-7B-Instruct-v0.3"
#: the seed of the deletion runs (paper Table 11: "on the seed-42 P2 sets"; the file name has none)
DELETION_SEED = 42


@dataclass(frozen=True)
class Layout:
    """One kind of scored file of the release: where it lies, how it is named, what it holds."""

    folder: str  # under results/
    pattern: re.Pattern[str]  # groups: dataset, budget, seed, press, reader (each optional)
    task: str
    probe_type: str  # the release's serialized probe type
    #: cell fields the release's README gives this run (its reader settings where they set it apart)
    fields: tuple[tuple[str, Any], ...] = ()
    reader: str = "llama"  # llama | mistral, unless the file name says (its reader group)


LAYOUTS = (
    Layout(
        "p1_saved",
        re.compile(r"^(?P<dataset>sgd|mw)_r(?P<budget>\d+)_s(?P<seed>\d+)_scored\.jsonl$"),
        "tpbench_p1",
        "P1",
    ),
    Layout(  # the p3 tag is the paper's P2; ChunkKV's file names no seed
        "main",
        re.compile(
            r"^(?:(?P<press>chunkkv)_)?(?P<dataset>sgd|mw)_r(?P<budget>\d+)(?:_s(?P<seed>\d+))?_p3_scored\.jsonl$"
        ),
        "tpbench_p2",
        "P3",
    ),
    Layout(  # Mistral's P2 (paper Tables 17, 24's Mistral columns)
        "diagnostics/mistral_128",
        re.compile(r"^(?P<dataset>sgd|mw)_r(?P<budget>\d+)_s(?P<seed>\d+)_p3_scored\.jsonl$"),
        "tpbench_p2",
        "P3",
        reader="mistral",
    ),
    Layout(  # the paper's P3 (serialized P1_LATE), Llama, Mistral and ChunkKV (on Llama), r = 0.30
        "diagnostics/update_evidence",
        re.compile(
            r"^p3_(?P<dataset>sgd|multiwoz)_s(?P<seed>\d+)_scored_(?P<reader>llama|mistral|chunkkv)\.jsonl$"
        ),
        "tpbench_p3",
        "P1_LATE",
    ),
    Layout(  # the paired deletions (paper Tables 11-13), both corpora in one file, 128 output tokens
        "diagnostics/update_evidence",
        re.compile(r"^p2_scored_(?P<reader>llama)\.jsonl$"),
        "tpbench_p2",
        "P3",
        (("max_new_tokens", 128),),
    ),
)
#: file-name (or row) dataset -> kvx corpus (the paper's MultiWOZ is 2.2)
CORPORA = {"sgd": "sgd", "mw": "multiwoz22"}
FULL = "full_context"
#: release method -> kvx turn selector (RESULTS_MAP.md: earliest turns is first_n, random selection
#: random_seed42, H2O / MMR / LLMLingua-2 the *_cache names)
SELECTORS = {
    "recency": "recency",
    "random_seed42": "random",
    "first_n": "earliest",
    "uniform_stride": "uniform_stride",
    "attention_h2o_cache": "attention_proxy",
    "embedding_mmr_cache": "mmr",
    "llmlingua2_cache": "llmlingua2",
    "first_user_recent": "first_user_recent",
}
#: release deletion condition -> kvx ``transform.which`` (README: ``s_origin`` is the update turn,
#: ``s_transition_support`` the update and answer-bearing turns; ``control_*`` their matched controls)
DELETIONS = {
    "cf_origin_minus_origin": "update",
    "cf_origin_minus_control_origin": "update_control",
    "cf_origin_minus_transition_support": "answers",
    "cf_origin_minus_control_support": "answers_control",
}
#: release method -> kvx press (ChunkKV through kvpress, keeping the file's fraction of the cache)
PRESSES = {re.compile(r"^chunkkv_r\d+_kvpress$"): "chunkkv"}
#: kvx task -> (strict field, loose field, the release scorer that wrote them)
SCORES = {
    "tpbench_p1": ("p1_correct", "p1_correct_loose", "scripts/scorer/scorer_p1.py"),
    "tpbench_p2": ("p3_correct", "p3_correct_loose", "scripts/scorer/scorer_p3.py"),
    "tpbench_p3": ("p3_joint_strict", "p3_joint_loose", "scripts/scorer/scorer_paper_p3.py"),
}
#: kvx task -> the strict mean in the release's ``*_aggregate.json``
MEANS = {"tpbench_p1": "p1_em_strict", "tpbench_p2": "p3_em_strict", "tpbench_p3": "p3_joint_strict"}
#: further release score fields -> kvx metric, taken when the row has them
EXTRA_METRICS = {
    "p1_token_f1": "f1",
    "p3_overlap_strict": "overlap_strict",
    "p3_overlap_loose": "overlap_loose",
    # paper P3 (scorer_paper_p3.py: segment-local; scorer_p1_late.py: the whole-field sensitivity)
    "p3_goal_correct": "goal",
    "p3_value_strict": "value_strict",
    "p3_value_loose": "value_loose",
    "p3_segment_parse": "segments_parsed",
    "p1late_combined_strict": "whole_strict",
    "p1late_combined": "whole_loose",
}

#: why a field every imported record leaves null is unknown
REASONS = {
    "model_revision": "the release's scored files name no model revision",
    "seed": "the file name gives no probe seed and no seed's probe set holds exactly its probes",
    "prompt_hash": "the scored files hold no prompt (the prompts are in the release's data/probes/)",
    "n_context_tokens": "the scored files give no token counts",
    "n_question_tokens": "the scored files give no token counts",
    "config_hash": "no kvx run configuration: the record was converted from the release, not run by kvx",
    "token_ids": "the release publishes the parsed answer only, no token ids",
    "stop_reason": "the release does not record whether decoding stopped at EOS or at the token budget",
    "normalized": "the release gives no normalized answer for this probe (P1 rows, or no value)",
    "references": "no row of this probe gives its reference (gold)",
}
#: kvx field <- release field (written to the manifest)
FIELD_MAPPING = {
    "task": "tpbench_p1 for results/p1_saved (probe_type P1), tpbench_p2 for results/main (the release's "
    "serialized p3 / probe_type P3 is the paper's P2)",
    "cell.fields.task.corpus": "the file name's dataset: sgd -> sgd, mw -> multiwoz22",
    "source_id": "dialogue_id (the probe id, <dialogue>__qa_<k>)",
    "seed": "the file name's s<seed>; ChunkKV files (no seed in the name): the one seed whose probe set of "
    "the same dataset and budget holds all of its probes",
    "reader": f"{READER} (the README's main reader; --reader overrides)",
    "compressor / transform": "method: full_context = the FullCache control; turn selectors by SELECTORS "
    "(transform turns:<selector>, transform.fraction = the file's r); chunkkv_r<k>_kvpress -> press "
    "chunkkv at kvpress ratio 1 - r (keeps r of the cache)",
    "references": "[gold] (P1) or [gold_value] (P2), from the row or another row of the same probe",
    "full / compressed": "output = pred_value (the parsed answer; no raw reader text in these files), "
    "normalized = norm_pred (P2), score = correct = strict",
    "metrics": "strict = p1_correct | p3_correct, loose = p1_correct_loose | p3_correct_loose, abstain, "
    "parsed = 1 - format_error (when given), f1 = p1_token_f1, overlap_strict/overlap_loose = "
    "p3_overlap_strict/p3_overlap_loose (when given)",
    "details": "dialogue_id (the probe id before __qa_: the bootstrap's cluster), release_probe_id, "
    "scorer (the release script), loose_matcher = p2_loose_matcher, support_in_context = support_in_ctx; "
    "P2 from meta: turns_total = n_turns, turns_kept = k_turns (compressed), "
    "update_turn = T<origin_turn_id>, "
    "update_position = origin_turn_id / (n_turns - 1), answer_turns = T<s_evidence>",
    "status / reason": "error when err is 1 or error is set (reason: the release's error, else err=1), or "
    "when the probe's full_context answer is one; else supported",
    "split": "sha256 of (origin, task, corpus, reader, seed): one control group per probe set, as kvx's",
    "record files": "<file stem>/<task>.jsonl.gz: one folder (one sweep to the aggregate) per release file",
}
CAVEATS = {
    "output": "the scored files keep the parsed value (pred_value), not the reader's raw reply",
    "reader errors": "the release scores a reader error as wrong (0) and keeps it in n; kvx counts it as an "
    "error, so kvx's own n is smaller; the aggregate's paper_* columns and paper tables follow the release",
    "unpaired answers": "a probe whose full_context answer is a reader error has no control (an error in "
    "kvx); the release scored its other answers, kept in provenance.unpaired_answer for the paper's rule",
    "deletion runs": "128 output tokens and SDPA (README's reader settings): max_new_tokens=128 in their "
    "cells, so their full-context answers are a control group apart from the main P2 files'",
    "superseded (P2)": "normalized equality with the labels' old_value (paper Table 13), not "
    "alias-equivalent to the reference; absent where the labels give no old value",
    "chunkkv seed": "inferred from the probe ids (the README says ChunkKV uses seed 42)",
    "chunkkv budget": "chunkkv_r03_kvpress keeps 30% of the cache (kvpress ratio 0.7), as the paper's "
    "'a KV method keeps the fraction r of the KV cache'",
}
LEFT_OUT = {
    "meta (other fields)": "kept whole in provenance.release.meta",
    "correction_provenance, correction_check_id": "kept in provenance.release",
    "f1 (P1, results/p1_saved)": "the rows give no token F1 (seed_summary.json has the release's means)",
}


@dataclass
class Control:
    """One probe's full-context answer, as the records and the control ledger need it."""

    answer: Answer | None
    problem: str  # why the control cannot pair (empty when it can)
    references: list[str] | None


@dataclass
class ScoredFile:
    path: Path
    task: str
    probe_type: str
    corpus: str
    dataset: str  # sgd | mw: the rows read (a deletion file holds both, read once for each)
    budget: float | None  # the fraction of turns (or of the cache) kept; None for the deletions
    seed: int | None
    chunkkv: bool
    reader: str  # llama | mistral
    fields: dict[str, Any] = field(default_factory=dict)  # the run's own cell fields (Layout.fields)

    @property
    def stem(self) -> str:
        """The folder of its records: the file's name, with the corpus when the file holds two."""
        name = self.path.name.removesuffix(".jsonl").replace("_scored", "")
        folder = self.path.parent.name  # the Mistral runs reuse the main files' names
        name = name if folder in ("main", "p1_saved", "update_evidence") else f"{folder}_{name}"
        return f"{name}_{self.dataset}" if self.budget is None else name

    @property
    def run(self) -> tuple:
        """What sets one run's full-context answers apart from another's (reader, settings)."""
        return (self.task, self.corpus, self.reader, tuple(sorted(self.fields.items())))


@dataclass
class Counts:
    records: int = 0
    controls: int = 0
    status: Counter = field(default_factory=Counter)
    cells: Counter = field(default_factory=Counter)  # "task corpus seed method budget" -> records
    unknown: Counter = field(default_factory=Counter)  # (field, reason) -> records
    no_control: int = 0
    unused_controls: int = 0  # full_context rows of a file whose seed is unknown: no control group


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="the TPBench repository (or its results/ folder)")
    parser.add_argument("--out", type=Path, required=True, help="new (or empty) folder for the records")
    parser.add_argument("--reader", default=READER, help=f"the reader of the answers (default {READER})")
    parser.add_argument("--quiet", action="store_true", help="no summary lines")


# ----------------------------------------------------------------------------------------------- reading


def _scored_file(file: Path, layout: Layout, match: re.Match[str], dataset: str) -> ScoredFile:
    groups = match.groupdict()
    budget, seed, reader = groups.get("budget"), groups.get("seed"), groups.get("reader") or layout.reader
    deletion = "budget" not in layout.pattern.groupindex and layout.task == "tpbench_p2"
    if deletion:
        seed = str(DELETION_SEED)
    return ScoredFile(
        file,
        layout.task,
        layout.probe_type,
        CORPORA[dataset],
        dataset,
        None if deletion else 0.3 if budget is None else int(budget) / 100,  # P3 ran at r = 0.30 only
        None if seed is None else int(seed),
        bool(groups.get("press")) or reader == "chunkkv",
        "mistral" if reader == "mistral" else "llama",
        dict(layout.fields),
    )


def locate(path: Path) -> tuple[list[ScoredFile], list[str]]:
    """The release's scored answer files (and the names of files in its folders that are not)."""
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if not path.is_dir():
        raise BadInput(f"{path} is not a folder (give the TPBench repository or its results/ folder)")
    found: list[ScoredFile] = []
    skipped: list[str] = []
    for base in (path / "results", path):
        for folder in dict.fromkeys(layout.folder for layout in LAYOUTS):
            layouts = [layout for layout in LAYOUTS if layout.folder == folder]
            for file in sorted((base / folder).glob("*_scored*.jsonl")):
                hits = [(layout, m) for layout in layouts if (m := layout.pattern.match(file.name))]
                if not hits:
                    skipped.append(file.relative_to(path).as_posix())
                    continue
                layout, match = hits[0]
                named = match.groupdict().get("dataset")
                for dataset in [named] if named else list(CORPORA):
                    found.append(
                        _scored_file(file, layout, match, "mw" if dataset == "multiwoz" else dataset)
                    )
        if found:
            break
    if not found:
        raise BadInput(
            f"{path} is not a TPBench release: no results/main/*_p3_scored.jsonl, "
            "results/p1_saved/*_scored.jsonl or other scored answer file of the release"
        )
    return found, skipped


def rows_of(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) of a JSON Lines file; a bad line is bad input."""
    lineno = 0
    try:
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):  # noqa: B007 - used in the error message
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise BadInput(f"{path}:{lineno}: a row must be a JSON object")
                    yield lineno, row
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: unreadable after line {lineno} ({exc})") from exc


def _flag(row: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    """A 0/1 field (int or bool); anything else is bad input naming the field."""
    value = row.get(name, default)
    if isinstance(value, bool) or value in (0, 1):
        return int(value)
    raise BadInput(f"{where}: field {name!r} must be 0/1 or a boolean, not {value!r}")


def method_of(name: Any, where: str) -> tuple[str, str]:
    """(kind, kvx name) of a release method: ("full", ""), ("turns", selector), ("press", press) or
    ("delete", which turns)."""
    if name == FULL:
        return "full", ""
    if name in SELECTORS:
        return "turns", SELECTORS[name]
    if name in DELETIONS:
        return "delete", DELETIONS[name]
    for pattern, press in PRESSES.items():
        if isinstance(name, str) and pattern.match(name):
            return "press", press
    known = [FULL, *SELECTORS, *DELETIONS]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise BadInput(f"{where}: field 'method' is {name!r}, not a release method ({', '.join(known)}){hint}")


@dataclass
class Row:
    """One release answer, checked."""

    line: int
    probe: str
    method: str
    kind: str  # full | turns | press
    kvx: str
    raw: dict[str, Any]
    error: str  # the reader error ("" when none)


def _dataset(name: Any) -> str:
    """A row's dataset as the file names spell it: mw for any MultiWOZ, else sgd."""
    text = str(name).lower()
    return "mw" if "multi" in text or text.startswith("mw") else "sgd"


@functools.lru_cache(maxsize=4)
def labels_of(path: Path) -> dict[str, dict[str, Any]]:
    """The release's per-probe labels (``<dataset>_goal_labels.jsonl``) by probe id: the slot, old and
    new value the scored files do not repeat. Empty when the folder has no labels file."""
    if not path.is_file():
        return {}
    return {row["dialogue_id"]: row for _, row in rows_of(path) if isinstance(row.get("dialogue_id"), str)}


def read_file(scored: ScoredFile) -> list[Row]:
    """Every row of a scored file, each field the import needs checked (file, line and field named);
    the probe's slot and values joined from the release's labels where the folder has them."""
    strict, loose, _ = SCORES[scored.task]
    dataset = "sgd" if scored.dataset == "sgd" else "multiwoz"
    results = scored.path.parents[1 if scored.path.parent.name in ("main", "p1_saved") else 2]
    labels = labels_of(results / "diagnostics" / "update_evidence" / f"{dataset}_goal_labels.jsonl")
    out, seen = [], {}
    for lineno, row in rows_of(scored.path):
        if scored.budget is None and _dataset(row.get("dataset")) != scored.dataset:
            continue  # a deletion file holds both corpora: this pass reads one
        label = labels.get(str(row.get("dialogue_id")), {})
        for name in ("slot", "old_value", "new_value"):
            if name not in row and isinstance(label.get(name), str):
                row[name] = label[name]
        where = f"{scored.path}:{lineno}"
        probe = row.get("dialogue_id")
        if not isinstance(probe, str) or not probe:
            raise BadInput(f"{where}: field 'dialogue_id' is missing or not a string")
        if row.get("probe_type") != scored.probe_type:
            raise BadInput(
                f"{where}: field 'probe_type' is {row.get('probe_type')!r}, expected {scored.probe_type!r} "
                f"in {scored.path.parent.name}/"
            )
        if _dataset(row.get("dataset", scored.dataset)) != scored.dataset:
            raise BadInput(f"{where}: field 'dataset' is {row.get('dataset')!r} in a {scored.dataset} file")
        kind, kvx = method_of(row.get("method"), where)
        key = (probe, row["method"])
        if key in seen:
            raise BadInput(
                f"{where}: a second row for probe {probe!r} and method {row['method']!r} "
                f"(first at line {seen[key]})"
            )
        seen[key] = lineno
        error = row.get("error")
        if error is not None and not isinstance(error, str):
            raise BadInput(f"{where}: field 'error' must be null or a string, not {error!r}")
        err = _flag(row, "err", where, default=0)
        message = error or ("err=1 in the release" if err else "")
        if not message:
            for name in (strict, loose, "abstain"):
                if name not in row:
                    raise BadInput(f"{where}: field {name!r} is missing")
                _flag(row, name, where)
            if "format_error" in row:
                _flag(row, "format_error", where)
        out.append(Row(lineno, probe, row["method"], kind, kvx, row, message))
    return out


# -------------------------------------------------------------------------------------------- converting


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def gold_of(row: dict[str, Any], task: str) -> str | None:
    """The reference: P1's goal sentence, P2's value, P3's ``<goal>; <value>`` (its two parts)."""
    if task == "tpbench_p3":
        goal, value = _text(row.get("gold_story_label")), _text(row.get("gold_value"))
        return f"{goal}; {value}" if goal is not None and value is not None else None
    return _text(row.get("gold" if task == "tpbench_p1" else "gold_value"))


def superseded(raw: dict[str, Any], corpus: str) -> float | None:
    """P2: the answer is the value the user replaced (paper Table 13: "old value uses normalized exact
    matching against the replaced value"); None when the release's labels give no old value."""
    old, new, answer = _text(raw.get("old_value")), _text(raw.get("gold_value")), _text(raw.get("pred_value"))
    if old is None or new is None:
        return None
    given = "" if _flag(raw, "abstain", "") else (answer or "")
    return float(text.same_value(given, old, corpus) and not text.alias_equivalent(old, new, corpus))


def answer_of(row: Row, task: str, corpus: str, full: bool) -> Answer:
    """The release's answer with its own scores (strict is the record's score and correctness); P2's
    ``superseded`` from the release's labels where they give the replaced value."""
    strict_name, loose_name, scorer = SCORES[task]
    raw = row.raw
    strict = _flag(raw, strict_name, "")
    metrics = {
        "strict": float(strict),
        "loose": float(_flag(raw, loose_name, "")),
        "abstain": float(_flag(raw, "abstain", "")),
    }
    if "format_error" in raw:  # checked on reading
        metrics["parsed"] = 1.0 - _flag(raw, "format_error", "")
    for name, metric in EXTRA_METRICS.items():
        value = raw.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[metric] = float(value)
    replaced = superseded(raw, corpus) if task == "tpbench_p2" else None
    if replaced is not None:
        metrics["superseded"] = replaced
    details: dict[str, Any] = {
        "dialogue_id": row.probe.split("__qa_")[0],
        "release_probe_id": row.probe,
        "release_method": row.method,
        "scorer": f"{NAME}-release:{scorer}",
    }
    if isinstance(raw.get("p2_loose_matcher"), str):
        details["loose_matcher"] = raw["p2_loose_matcher"]
    if "support_in_ctx" in raw:
        details["support_in_context"] = bool(raw["support_in_ctx"])
    meta = raw.get("meta") if isinstance(raw.get("meta"), dict) else {}
    turns, kept, origin = meta.get("n_turns"), meta.get("k_turns"), meta.get("origin_turn_id")
    if isinstance(turns, int):
        details["turns_total"] = turns
        if isinstance(kept, int) and not full:
            details["turns_kept"] = kept
    if isinstance(origin, int):
        details["update_turn"] = f"T{origin}"
        if isinstance(turns, int):
            details["update_position"] = origin / max(1, turns - 1)
    if isinstance(meta.get("s_evidence"), list):
        details["answer_turns"] = [f"T{i}" for i in meta["s_evidence"]]
        if isinstance(origin, int):  # the paper tables' evidence location (who stated it stays unknown)
            details["update_states_value"] = origin in meta["s_evidence"]
            details["evidence_turns"] = len({origin, *meta["s_evidence"]})
    for name, key in (("slot", "slot"), ("old_value", "old_value"), ("current_value", "new_value")):
        if isinstance(raw.get(key), str):
            details[name] = raw[key]
    value = raw.get("pred_value")
    output = value if isinstance(value, str) else ("" if value is None else json.dumps(value))
    normalized = _text(raw.get("norm_pred")) if task == "tpbench_p2" and value is not None else None
    return Answer(output, normalized, float(strict), bool(strict), None, None, metrics, details)


@dataclass
class Converter:
    out: Path
    reader: str
    source: str
    counts: Counts = field(default_factory=Counts)
    writers: dict[str, JsonlGzWriter] = field(default_factory=dict)
    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[Path, int] = field(default_factory=dict)  # release file read -> its rows
    checks: list[str] = field(default_factory=list)  # differences from the release's aggregates
    #: (run, seed, budget) -> probe id -> control
    controls: dict[tuple, dict[str, Control]] = field(default_factory=dict)
    #: split -> probe -> (ledger entry, the file it came from)
    ledgers: dict[str, dict[str, tuple[dict[str, Any], str]]] = field(default_factory=dict)
    #: full_context answers of one probe and seed that differ between two budgets' files
    conflicts: list[str] = field(default_factory=list)

    def reader_of(self, scored: ScoredFile) -> str:
        return MISTRAL if scored.reader == "mistral" else self.reader

    def split_of(self, scored: ScoredFile, seed: int | None) -> str:
        """One control group per run and seed: task, corpus, reader and the run's own settings."""
        payload = {
            "origin": NAME,
            "task": scored.task,
            "corpus": scored.corpus,
            "reader": self.reader_of(scored),
        }
        return digest(payload | scored.fields | {"seed": seed}, 64)

    def read_controls(self, scored: ScoredFile, rows: list[Row], seed: int) -> dict[str, Control]:
        """The file's full_context answers, written to its control ledger; references from any row."""
        golds: dict[str, str] = {}
        for row in rows:
            gold = gold_of(row.raw, scored.task)
            if gold is not None:
                golds.setdefault(row.probe, gold)
        controls: dict[str, Control] = {}
        for row in rows:
            gold = golds.get(row.probe)
            refs = None if gold is None else [gold]
            if row.kind != "full":
                controls.setdefault(row.probe, Control(None, "the release has no full_context answer", refs))
            elif row.error:
                controls[row.probe] = Control(
                    None, f"its full_context answer is a reader error ({row.error})", refs
                )
            else:
                controls[row.probe] = Control(answer_of(row, scored.task, scored.corpus, True), "", refs)
        known = self.controls.setdefault((scored.run, seed, scored.budget), {})
        for probe, control in controls.items():
            known.setdefault(probe, control)  # a seedless file never replaces its seed's controls
        ledger = self.ledgers.setdefault(self.split_of(scored, seed), {})
        for probe, control in controls.items():
            if control.answer is None:
                continue
            entry = {"source_id": probe, "prompt_hash": None, **control.answer.to_dict()}
            first, source = ledger.setdefault(probe, (entry, scored.path.name))
            if first != entry:  # another budget's file answered it otherwise: the first one stays
                self.conflicts.append(f"{probe}: {source} and {scored.path.name}")
        return controls

    def write_ledgers(self) -> None:
        """One control ledger per control group (task, corpus, reader, seed), as kvx's own runs."""
        for split, entries in sorted(self.ledgers.items()):
            writer = JsonlGzWriter(self.out / f"{split}{CONTROLS_SUFFIX}")
            for _, (entry, _) in sorted(entries.items()):
                writer.write(entry)
            writer.close()
            self.counts.controls += writer.count
            self.written[writer.path.name] = {"kind": "controls", "split": split, "rows": writer.count}

    def seed_of(self, scored: ScoredFile, probes: set[str]) -> int | None:
        """A file without a seed in its name (ChunkKV): the one seed whose probe set holds all its probes."""
        if scored.seed is not None:
            return scored.seed
        seeds = [
            seed
            for (run, seed, budget), controls in self.controls.items()
            if (run, budget) == (scored.run, scored.budget) and probes <= set(controls)
        ]
        return seeds[0] if len(seeds) == 1 else None

    def convert_file(self, scored: ScoredFile) -> None:
        rows = read_file(scored)
        self.files[scored.path] = len(rows)
        self._check_aggregate(scored, rows)
        seed = self.seed_of(scored, {r.probe for r in rows})
        key = (scored.run, seed, scored.budget)
        if seed is not None and any(r.kind == "full" for r in rows):
            controls = self.read_controls(scored, rows, seed)
        else:  # a file without full-context answers (ChunkKV) pairs with its seed's file of the run
            controls = self.controls.get(key, {}) if seed is not None else {}
            self.counts.unused_controls += sum(r.kind == "full" for r in rows)
        for row in rows:
            if row.kind != "full":
                self.convert(scored, seed, row, controls.get(row.probe))

    def convert(self, scored: ScoredFile, seed: int | None, row: Row, control: Control | None) -> None:
        task, budget, reader = scored.task, scored.budget, self.reader_of(scored)
        fields: dict[str, Any] = {
            "origin": NAME,
            "task": task,
            "task.corpus": scored.corpus,
            "reader": reader,
            "seed": seed,
            **scored.fields,
        }
        params: dict[str, Any] = {"release_method": row.method, "release_budget": budget}
        if row.kind == "turns":
            fields |= {
                "press": "none",
                "transform": f"turns:{row.kvx}",
                "transform.selector": row.kvx,
                "transform.fraction": budget,
            }
            setting = {"kind": "none", "value": None, "ratio": 0.0, "retained_share": 1.0}
            at = f"turns={budget:g}"
        elif row.kind == "delete" or budget is None:
            fields |= {"press": "none", "transform": "delete_turns", "transform.which": row.kvx}
            setting = {"kind": "none", "value": None, "ratio": 0.0, "retained_share": 1.0}
            at = f"delete={row.kvx}"
        else:
            ratio = round(1.0 - budget, 6)
            fields |= {"press": row.kvx, "transform": "none"}
            setting = {"kind": "ratio", "value": ratio, "ratio": ratio, "retained_share": budget}
            at = f"ratio={ratio:g}"
        fields |= {"setting.kind": setting["kind"], "setting.value": setting["value"]}
        cell_id = digest(fields)
        if fields.get("press") == "chunkkv":  # the paper's ChunkKV: over SnapKV, window 64, kernel 5 (§6.4)
            fields |= {"press.base": "snapkv", "press.base.window_size": 64, "press.base.kernel_size": 5}
        compressor = row.kvx if row.kind == "press" else "none"
        name = {"press": row.kvx, "delete": "delete_turns"}.get(row.kind, f"turns:{row.kvx}")
        seed_label = "unknown" if seed is None else seed
        key = f"{task}/{row.probe}/{reader}@unknown/{name}/{at}/seed={seed_label}/{cell_id}"
        references = control.references if control else None
        if references is None and gold_of(row.raw, task) is not None:
            references = [gold_of(row.raw, task)]  # type: ignore[list-item]
        record = Record(
            key=key,
            status=SUPPORTED,
            reason="",
            task=task,
            source_id=row.probe,
            references=references,
            reader=reader,
            model_revision=None,
            compressor=compressor,
            seed=seed,
            setting=setting | {"method_parameter": params},
            prompt_hash=None,
            n_context_tokens=None,
            n_question_tokens=None,
            config_hash=None,
            cell={"id": cell_id, "fields": fields},
            versions={"kvx": __version__, NAME: self.source.split(":", 1)[1]},
            split=self.split_of(scored, seed),
            provenance={"origin": "external", "source": self.source, "unknown": {}},
        )
        record.full = control.answer if control else None
        if control is None or control.answer is None:
            why = control.problem if control else "no seed's full_context answers hold this probe"
            record.fail(ERROR, f"no FullCache control: {why}")
            self.counts.no_control += 1
            if not row.error:  # the release scored it: kept for the paper's rule (an error is wrong)
                record.provenance["unpaired_answer"] = answer_of(row, task, scored.corpus, False).to_dict()  # type: ignore[index]
        elif row.error:
            record.fail(ERROR, f"reader error in the release: {row.error}")
        else:
            record.pair(control.answer, answer_of(row, task, scored.corpus, False))
        release = {
            "file": scored.path.name,
            "line": row.line,
            "dialogue_id": row.probe,
            "method": row.method,
            "probe_type": scored.probe_type,
            **{
                k: row.raw[k]
                for k in ("meta", "correction_provenance", "correction_check_id")
                if k in row.raw
            },
        }
        record.provenance["unknown"] = unknown_nulls(record, REASONS)  # type: ignore[index]
        record.provenance["release"] = release  # type: ignore[index]
        data = record.to_dict()
        if set(unknown_fields(data)) != set(record.provenance["unknown"]):  # type: ignore[index]
            raise RuntimeError(f"{key}: unknown fields and their reasons disagree")  # an importer bug
        at = "deletion" if budget is None else f"r={budget:g}"
        self.emit(data, scored, f"{task} {scored.corpus} {reader} seed={seed_label} {row.method} {at}")

    def emit(self, data: dict[str, Any], scored: ScoredFile, cell: str) -> None:
        """Each release file's records in a folder of their own: the aggregate checks each folder as
        one sweep (every cell over every source), and the release ran each file as one."""
        if not is_valid(data):  # an importer bug: every field was checked on reading
            validate(data)  # raises jsonschema's explanation
        name = f"{scored.stem}/{data['task']}{RECORDS_SUFFIX}"
        if name not in self.writers:
            (self.out / name).parent.mkdir(exist_ok=True)
            self.writers[name] = JsonlGzWriter(self.out / name)
        self.writers[name].write_line(dumps([data]))
        c = self.counts
        c.records += 1
        c.status[data["status"]] += 1
        c.cells[cell] += 1
        for name, reason in data["provenance"]["unknown"].items():
            c.unknown[(name, reason)] += 1

    def _check_aggregate(self, scored: ScoredFile, rows: list[Row]) -> None:
        """The release's per-method n and strict mean (errors counted as 0, its rule) against the rows."""
        name = scored.path.name.replace("_scored", "_aggregate").removesuffix(".jsonl") + ".json"
        path = scored.path.with_name(name)
        if not path.is_file():
            return
        try:
            stated = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"{path}: not readable JSON ({exc})") from exc
        self.files[path] = 0
        corpora = {"sgd": "sgd", "mw": "multiwoz"}
        if isinstance(stated, dict) and corpora[scored.dataset] in stated:  # the deletions: one per corpus
            stated = stated[corpora[scored.dataset]]
        stated = next(iter(stated.values())) if len(stated) == 1 and FULL not in stated else stated
        strict, mean_name = SCORES[scored.task][0], MEANS[scored.task]
        by_method: dict[str, list[int]] = {}
        for row in rows:
            by_method.setdefault(row.method, []).append(0 if row.error else int(row.raw[strict]))
        for method, values in sorted(by_method.items()):
            entry = stated.get(method) if isinstance(stated, dict) else None
            if not isinstance(entry, dict):
                self.checks.append(f"{path.name}: no entry for {method}")
                continue
            if entry.get("n") != len(values):
                self.checks.append(
                    f"{path.name}: {method} n {entry.get('n')} in the release, {len(values)} read"
                )
            mean = sum(values) / len(values)
            if isinstance(entry.get(mean_name), (int, float)) and abs(entry[mean_name] - mean) > 1e-4:
                self.checks.append(
                    f"{path.name}: {method} {mean_name} {entry[mean_name]} in the release, {mean:.6f} read"
                )


# -------------------------------------------------------------------------------------------- reporting


def manifest(conv: Converter, root: Path, skipped: list[str], seconds: float) -> dict[str, Any]:
    c = conv.counts
    files = [
        {
            "path": p.resolve().relative_to(root.resolve()).as_posix(),
            "bytes": p.stat().st_size,
            "sha256": sha256_file(p),
            "rows": n if p.name.endswith(".jsonl") else None,
        }
        for p, n in sorted(conv.files.items())
    ]
    return {
        **manifest_head(NAME, seconds),
        "release": {"path": str(root.resolve()), "source": conv.source, "reader": conv.reader},
        "files_read": files,
        "files_skipped": skipped,
        "files_written": [{"path": name, **info} for name, info in sorted(conv.written.items())],
        "checks": {
            "release_aggregates": {"differences": conv.checks},
            "full_context_differs_between_budgets": conv.conflicts,
        },
        "counts": {
            "records": c.records,
            "controls": c.controls,
            "by_status": dict(sorted(c.status.items())),
            "records_without_control": c.no_control,
            "full_context_rows_without_seed": c.unused_controls,
            "by_cell": dict(sorted(c.cells.items())),
        },
        "field_mapping": FIELD_MAPPING,
        "selectors": SELECTORS,
        "scorers": {task: scorer for task, (_, _, scorer) in SCORES.items()},
        "unknown": unknown_summary(c.unknown),
        "caveats": CAVEATS,
        "left_out": LEFT_OUT,
    }


def summary_lines(conv: Converter, root: Path, out: Path, skipped: list[str]) -> list[str]:
    c = conv.counts
    status = ", ".join(f"{n} {s}" for s, n in sorted(c.status.items())) or "none"
    names = [path for path in UNKNOWABLE if any(name == path for name, _ in c.unknown)]
    lines = [
        f"kvx.importers: {NAME} {root} -> {out}",
        f"  files: {sum(p.name.endswith('.jsonl') for p in conv.files)} scored answer files "
        f"({sum(conv.files.values())} rows); {c.controls} full-context answers in control ledgers",
        f"  records: {c.records} ({status}; {c.no_control} without a FullCache control)",
        "  unknown (null, reason in provenance.unknown): " + (", ".join(names) or "none"),
    ]
    if skipped:
        lines.append(f"  skipped (not a known scored file): {', '.join(skipped)}")
    if c.unused_controls:
        lines.append(
            f"  full_context rows in files without a known seed (no control group): {c.unused_controls}"
        )
    if conv.conflicts:
        lines.append(f"  full_context answers differ between budgets' files: {len(conv.conflicts)} probes")
    for difference in conv.checks[:5]:
        lines.append(f"  differs from the release's aggregate: {difference}")
    lines.append(f"  manifest: {out / MANIFEST}")
    lines.append(f"  next: python -m kvx.aggregate --records {out}")
    return lines


# ------------------------------------------------------------------------------------------------- entry


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    scored, skipped = locate(args.path)
    out: Path = args.out
    with staged(out) as tmp:
        conv = Converter(tmp, args.reader, f"{NAME}:{args.path.resolve().name}")
        try:
            for file in sorted(scored, key=lambda f: (f.seed is None, f.chunkkv)):  # controls first
                conv.convert_file(file)
        finally:
            for writer in conv.writers.values():
                writer.close()
        conv.write_ledgers()
        for name, writer in conv.writers.items():
            conv.written[name] = {"kind": "records", "rows": writer.count}
        data = manifest(conv, args.path, skipped, time.perf_counter() - started)
        (tmp / MANIFEST).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.quiet:
        for line in summary_lines(conv, args.path, out, skipped):
            print(line, file=sys.stdout)
    return 0
