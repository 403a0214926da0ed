"""Validate every batch, then run every analysis on the complete, validated matrix.

The order is the paper's: the matrix is complete before any failure set is extracted, and the
rows are sorted by record key first, so an MLflow store and the same records exported to a
directory give identical numbers (the seeded resampling sees the same order).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from kvx.aggregate.kvdiagnosis.intervention import intervention
from kvx.aggregate.kvdiagnosis.intervention_cohort import intervention_cohort
from kvx.aggregate.kvdiagnosis.release import kvdiagnosis_release_tables
from kvx.aggregate.kvdiagnosis.workloads import kvdiagnosis_tables
from kvx.aggregate.kvexec.answer_metrics import paired_answers
from kvx.aggregate.kvexec.contrast import contrast, contrast_by_ratio
from kvx.aggregate.kvexec.onset import DEFAULT_THRESHOLD, onset
from kvx.aggregate.paired.costs import costs, frontier
from kvx.aggregate.paired.judges import agreement, judge_names
from kvx.aggregate.paired.matched import matched
from kvx.aggregate.paired.matrix import categories, failures, matrix
from kvx.aggregate.paired.separation import separation
from kvx.aggregate.ragscale.audit import AuditTables, audit, with_families
from kvx.aggregate.ragscale.controls import AuditControls
from kvx.aggregate.ragscale.draws import audit_draws
from kvx.aggregate.ragscale.outcomes import (
    MIN_SLICE_ROWS,
    RETENTION_ALERT,
    audit_changed,
    audit_slices,
    with_outcomes,
)
from kvx.aggregate.ragscale.predictive import predictive_audit
from kvx.aggregate.ragscale.settings import AuditSettings
from kvx.aggregate.ragscale.swap import swapped
from kvx.aggregate.read.cells import label_cells, with_varying
from kvx.aggregate.read.problems import Problem
from kvx.aggregate.read.release_tables import release_tables
from kvx.aggregate.read.rows import with_ids
from kvx.aggregate.read.sources import CONTROL_SUFFIX, MANIFEST, Batch, Source, stem
from kvx.aggregate.read.validation import Validated, cross_check, validate_batch
from kvx.aggregate.tpbench.budgets import tpbench_gap_tables
from kvx.aggregate.tpbench.paper_tables import paper_tables
from kvx.aggregate.tpbench.probes import tpbench_rows, tpbench_tables
from kvx.aggregate.workers import cpus, forked, imap

PROBLEM_COLUMNS = ["check", "severity", "run", "key", "message"]


@dataclass
class Options:
    n_splits: int = 5000  # ragscale: row splits for excess flips
    n_boot: int = 2000  # bootstrap draws for every interval
    seed: int = 20260821  # ragscale's primary analysis seed
    pairs: list[tuple[str, str]] = field(default_factory=list)  # declared reader upgrades a -> b
    #: evidence swaps audited like compressors: raw = condition a's answers, compressed = b's
    swaps: list[tuple[str, str]] = field(default_factory=list)
    families: dict[str, str] = field(default_factory=dict)  # reader -> model family, over the records'
    export: Path | None = None  # also write every batch as a record directory
    progress: bool = True
    workers: int | None = None  # processes reading batches and drawing figures (None: every CPU)
    cases: int = 1  # KVDiagnosis paired cases (Figure 8 / Table 15) per task and category
    case_sources: list[str] = field(default_factory=list)  # sources whose C→W rows are shown as cases too
    onset_drop: float = DEFAULT_THRESHOLD  # the absolute drop of an answer metric that marks its onset
    # reader-upgrade audit sensitivities (ragscale A.5, B.1): the defaults are the paper's
    min_gap: float = 0.05  # raw upgrade an endpoint ratio and an excess-flip pair need
    mcnemar_filter: bool = False  # excess flips only on McNemar-separated pairs (binary scores)
    ties: str = "not-reversal"  # a scoring-half tie: not a reversal, "exclude"d, or an "adverse" raw reversal
    interval: str = "family-row"  # endpoint retention interval: "family-row" (re-selected) or "row" (fixed)

    retention_alert: float = RETENTION_ALERT  # ragscale: retention below it labels an upgrade attenuated
    slice_by: list[str] | None = None  # row hints the audit is sliced by (None: a scores file's hint columns)
    min_slice_rows: int = MIN_SLICE_ROWS  # ragscale: a slice value with fewer rows is not reported
    null_draws: int = 200  # ragscale A.6: draws of each order-preserving null
    null_splits: int = 250  # ragscale A.6: row splits each null draw is replayed over

    def audit_settings(self) -> AuditSettings:
        return AuditSettings(self.min_gap, self.mcnemar_filter, self.ties, self.interval)


@dataclass
class Result:
    tables: dict[str, pd.DataFrame]
    problems: list[Problem]
    n_records: int
    n_rows: int


class Export:
    """``--export-records``: every batch as a record directory, and what the source knew beyond its
    records in ``MANIFEST`` (each file's run, sweep, logged metrics and control group in reading order,
    the sweeps' plans, reused cells, finished counts, problems of listing the store), so aggregating
    the directory gives the same rows and the same problems as reading the source."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, dict[str, Any]] = {}  # origin -> its manifest entry, in reading order
        self.taken: set[str] = set()

    def batches(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        for batch in batches:
            self.write(batch)
            yield batch

    def write(self, batch: Batch) -> None:
        """The batch's lines as they were read (so problems keep their line numbers), into its sweep's
        folder; a file read in parts is written part after part. A file that cannot be read is listed
        as unreadable, so reading the export reports it as reading the source did."""
        unreadable = None
        try:
            lines = batch.read()
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
            lines, unreadable = [], str(exc)
        except ValueError:  # not records, or a .json that is not JSON: validation says so
            return
        entry = self.files.get(batch.origin)
        if entry is None:
            entry = self.files[batch.origin] = self._entry(batch, self._path(batch))
            if unreadable is not None:
                entry["unreadable"] = unreadable
        if unreadable is not None:
            return
        target = self.root / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a" if batch.part else "w", encoding="utf-8", newline="") as fh:
            fh.write("\n".join(lines))

    def _path(self, batch: Batch) -> str:
        """``<sweep>/<run>.jsonl`` or ``<sweep>/<split>.controls.jsonl``; a name already taken (a
        control group's second ledger) goes into a folder named by its run."""
        folder = Path(Path(batch.sweep).name or "no-sweep")
        kind = batch.kind == "controls"
        name = f"{batch.split}{CONTROL_SUFFIX}" if kind else f"{stem(Path(batch.origin))}.jsonl"
        path = (folder / name).as_posix()
        if path in self.taken:
            path = (folder / stem(Path(batch.origin)) / name).as_posix()
        self.taken.add(path)
        return path

    @staticmethod
    def _entry(batch: Batch, path: str) -> dict[str, Any]:
        entry = {"path": path, "origin": batch.origin, "sweep": batch.sweep, "kind": batch.kind}
        return entry | {"split": batch.split, "logged": batch.logged}

    def finish(self, source: Source) -> None:
        """Write ``MANIFEST``, once the source has been read to its end (its problems are all known)."""
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = {"format": 1, "files": list(self.files.values()), **source.knowledge()}
        (self.root / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def audit_controls(options: Options) -> AuditControls:
    """The audit controls (ragscale A.6-A.7) with this run's splits, seed and null counts."""
    return AuditControls(
        options.n_splits, options.seed, options.null_draws, options.null_splits, options.min_gap
    )


def audit_tables(
    frame: pd.DataFrame,
    audited: AuditTables,
    controls: AuditControls,
    options: Options,
    slice_by: list[str],
) -> tuple[dict[str, pd.DataFrame], list[Problem]]:
    """Every audit table of records or a scores file, once the panels are audited: the audit's own,
    ragscale's outcome labels on its pairs, the controls (A.6-A.7), kvx's predictive audit (after
    B.7), the draw ranges (Table 16, when draws exist), slices by ``slice_by`` and changed answers."""
    pairs = with_outcomes(audited.pairs, options.retention_alert)
    tables = audited.tables() | {"audit_pairs": pairs}
    tables |= controls.tables()
    tables |= predictive_audit(audited.readers, audited.panel, options.n_boot, options.seed)
    draws = audit_draws(frame, pairs, audited.panel)
    if not draws.empty:
        tables["audit_draws"] = draws
    slices, found = audit_slices(frame, pairs, slice_by, options.min_slice_rows, options.min_gap)
    tables |= {"audit_slices": slices, "audit_changed": audit_changed(frame, pairs)}
    return tables, audited.problems + found


def validate(
    source: Source, options: Options, while_reading: Callable[[], object] | None = None
) -> tuple[pd.DataFrame, Validated, list[str]]:
    """Every batch validated (in ``options.workers`` processes, exported as read when asked), then the
    checks across records: the rows the analyses may use, in record-key order, what validation kept,
    and the identity fields that vary between the cells (``label_cells``)."""
    validated = Validated()
    export = None if options.export is None else Export(options.export)
    batches = source.batches() if export is None else export.batches(source.batches())
    workers = min(options.workers or cpus(), max(len(source), 1))
    parts = imap(validate_batch, batches, workers)
    for part in tqdm(parts, total=len(source), desc="records", disable=not options.progress, leave=False):
        validated.merge(part)
        if while_reading is not None:
            while_reading()
            while_reading = None
    if export is not None:
        export.finish(source)
    validated.problems.extend(source.problems)
    source.notes.extend(validated.notes)
    rows = validated.frame()
    keys: list[str] = []
    if not rows.empty:
        rows = rows.sort_values("key", kind="stable").reset_index(drop=True)
        rows, keys = label_cells(rows, validated.cells)
        rows = with_ids(rows)
    return cross_check(rows, validated, source), validated, keys


def analyse(
    source: Source,
    options: Options,
    on_table: Callable[[str, pd.DataFrame], None] | None = None,
    while_reading: Callable[[], object] | None = None,
) -> Result:
    """Validate every batch (in ``options.workers`` processes), then analyse; ``on_table`` is told of each
    table as soon as it exists, so its figures can be drawn while the next tables are computed, and
    ``while_reading`` runs once the workers are reading (work that can overlap them)."""
    rows, validated, keys = validate(source, options, while_reading)
    metrics = validated.metrics()
    tables: dict[str, pd.DataFrame] = {}

    def put(name: str, frame: pd.DataFrame) -> None:
        tables[name] = frame
        if on_table is not None:
            on_table(name, frame)

    if not rows.empty:
        # the bootstraps of the separation table take seconds: computed on another CPU meanwhile
        separated = forked(options.workers or cpus(), separation, rows, metrics, options.n_boot, options.seed)
        put("matched", matched(rows, metrics))  # first: its one small-multiples figure takes longest
        by_cell = matrix(rows)
        put("matrix", with_varying(by_cell, rows, validated.cells, keys))
        if judge_names(rows):  # each judge against the task's scorer: confusion table and Cohen's kappa
            put("judge_agreement", agreement(rows))
        cost = costs(rows, by_cell)
        put("costs", with_varying(cost, rows, validated.cells, keys))
        put("frontier", frontier(cost))
        put("failures", failures(rows, metrics))
        put("categories", categories(rows))
        for name, frame in kvdiagnosis_tables(rows, validated.cells, metrics).items():
            put(name, frame)  # KVDiagnosis's per-workload views: Tables 3, 12, 16, Figures 4A, 5, 7, 10
        put("separation", separated())
        put("intervention", intervention(rows, options.n_boot, options.seed))
        put("intervention_cohort", intervention_cohort(rows, options.n_boot, options.seed))
        paired = paired_answers(rows)  # each answer metric (Score.metrics) paired source by source
        put("contrast", contrast(rows, paired, validated.contrasts))
        put("contrast_by_ratio", contrast_by_ratio(rows, paired, validated.contrasts))  # paper Figure 1
        put("onset", onset(rows, paired, options.onset_drop, options.n_boot, options.seed))
        tp = tpbench_rows(rows, validated.cells)  # the TPBench answers, labelled once for every table
        tpbench = tpbench_tables(tp, options.n_boot, options.seed)
        for name, frame in tpbench.items():
            put(name, frame)  # none without TPBench records
        for name, frame in paper_tables(tp).items():
            put(name, frame)  # Tables 7, 9, 10, 15, 23 and §6.3: each only when its probe or method ran
        for name, frame in tpbench_gap_tables(tp, tpbench).items():
            put(name, frame)  # §6.1.2 crossover, Table 8 gaps, Appendix B token scaling
        release = release_tables(source)  # KVDiagnosis release tables next to imported records
        source.notes.extend(release.notes)
        views = kvdiagnosis_release_tables(rows, release, options.cases, options.case_sources)
        for name, frame in views.items():
            put(name, frame)  # Figures 8, 9B, 12; Tables 5, 13-15
        audit_rows = [rows]
        for before, after in options.swaps:
            swap, found = swapped(rows, before, after)
            audit_rows.append(swap)
            validated.problems.extend(found)
        audit_frame = with_families(pd.concat(audit_rows, ignore_index=True), options.families)
        controls = audit_controls(options)
        audited = audit(
            audit_frame,
            options.pairs,
            options.n_splits,
            options.n_boot,
            options.seed,
            options.audit_settings(),
            controls.visit,
        )
        audit_out, found = audit_tables(audit_frame, audited, controls, options, options.slice_by or [])
        for name, frame in audit_out.items():
            put(name, frame)
        validated.problems.extend(found)
    if validated.unknown:
        put("provenance", validated.provenance())
    tables["problems"] = pd.DataFrame([p.as_dict() for p in validated.problems], columns=PROBLEM_COLUMNS)
    return Result(tables, validated.problems, validated.n_records, len(rows))
