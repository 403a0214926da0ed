"""Validate every batch, then run every analysis on the complete, validated matrix.

The order is the paper's: the matrix is complete before any failure set is extracted, and the
rows are sorted by record key first, so an MLflow store and the same records exported to a
directory give identical numbers (the seeded resampling sees the same order).
"""

from __future__ import annotations

import difflib
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from kvx.aggregate.catalogue import Catalogue, Producer, load
from kvx.aggregate.options import Options
from kvx.aggregate.read.cells import label_cells
from kvx.aggregate.read.problems import Problem
from kvx.aggregate.read.rows import with_ids
from kvx.aggregate.read.sources import CONTROL_SUFFIX, MANIFEST, Batch, Source, stem
from kvx.aggregate.read.validation import Validated, cross_check, validate_batch
from kvx.aggregate.workers import cpus, forked, imap

PROBLEM_COLUMNS = ["check", "severity", "run", "key", "message"]


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


def select(catalogue: Catalogue, only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[str]:
    """The tables to build, in report order: every table, or those ``only`` names, less those ``skip``
    names; a name is a table, a section or a family (the entry point that declares tables)."""
    chosen = catalogue.table_names()
    groups: dict[str, list[str]] = {}
    for producer in catalogue.tables():
        for group in (producer.family, producer.section or ""):
            groups.setdefault(group, []).extend(producer.names)

    def named(asked: Iterable[str], flag: str) -> set[str]:
        found: set[str] = set()
        for name in asked:
            if name not in chosen and name not in groups:
                near = difflib.get_close_matches(name, [*chosen, *groups], n=1)
                hint = f"; did you mean {near[0]!r}?" if near else "; --list lists them"
                raise ValueError(f"{flag} {name!r} is not a table, section or family{hint}")
            found.update([name] if name in chosen else groups[name])
        return found

    kept = named(only, "--only") if only else set(chosen)
    dropped = named(skip, "--skip")
    return [name for name in chosen if name in kept and name not in dropped]


def listing(catalogue: Catalogue) -> str:
    """Every table as ``--list`` prints it: name, section, family and the figures drawn from it."""
    lines = []
    for name in catalogue.table_names():
        producer = catalogue.producer(name)
        figures = ", ".join(f.key for f in catalogue.figures_of(name))
        where = f"{producer.section}  [{producer.family}]"
        lines.append(f"{name:<28} {where}" + (f"  figures: {figures}" if figures else ""))
    lines.extend(f"broken: {why}" for why in catalogue.broken)
    return "\n".join(lines) + "\n"


class Resolver:
    """Builds what a table needs by name, each once, in dependency order; tables marked ``background``
    start in a forked process at once and are collected when reached."""

    def __init__(self, catalogue: Catalogue, given: dict[str, Any], workers: int) -> None:
        self.catalogue = catalogue
        self.values = dict(given)
        self.workers = workers
        self.started: dict[int, Callable[[], Any]] = {}  # id(producer) -> the forked result

    def start(self, producer: Producer) -> None:
        args = [self.value(need) for need in producer.needs]
        self.started[id(producer)] = forked(self.workers, producer.build, *args)

    def value(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        producer = self.catalogue.producer(name)  # KeyError: an input this caller does not give
        waiting = self.started.pop(id(producer), None)
        if waiting is not None:
            built = waiting()
        else:
            built = producer.build(*(self.value(need) for need in producer.needs))
        if producer.many:
            self.values.update({each: (built or {}).get(each) for each in producer.names})
        else:
            self.values[name] = built
        return self.values[name]


def build_tables(
    catalogue: Catalogue,
    names: list[str],
    given: dict[str, Any],
    workers: int,
    on_table: Callable[[str, pd.DataFrame], None] | None = None,
    analysed: bool = True,
) -> dict[str, pd.DataFrame]:
    """Each table of ``names`` that applies (its builder gave a frame), in order: those marked ``early``
    first (their figures take longest), those built in the ``background`` last (they had every other
    table's time to finish), ``on_table`` told of each as soon as it exists. Without analysed rows only
    the tables marked ``on_empty`` are built."""
    producers = {name: catalogue.producer(name) for name in names}
    runnable = [n for n in names if analysed or producers[n].on_empty]
    order = sorted(runnable, key=lambda n: _turn(producers[n]))
    resolver = Resolver(catalogue, given, workers)
    for name in order:
        producer = producers[name]
        if producer.background and id(producer) not in resolver.started:
            resolver.start(producer)
    tables: dict[str, pd.DataFrame] = {}
    for name in order:
        frame = resolver.value(name)
        if frame is not None:
            tables[name] = frame
            if on_table is not None:
                on_table(name, frame)
    return tables


def _turn(producer: Producer) -> int:
    return 0 if producer.early else 2 if producer.background else 1


def analyse(
    source: Source,
    options: Options,
    on_table: Callable[[str, pd.DataFrame], None] | None = None,
    while_reading: Callable[[], object] | None = None,
    catalogue: Catalogue | None = None,
) -> Result:
    """Validate every batch (in ``options.workers`` processes), then build every table of the catalogue
    (or those ``options.only``/``options.skip`` select); ``on_table`` is told of each table as soon as
    it exists, so its figures can be drawn while the next tables are built, and ``while_reading`` runs
    once the workers are reading (work that can overlap them)."""
    catalogue = catalogue or load()
    names = select(catalogue, options.only, options.skip)  # a wrong name fails before any record is read
    source.notes.extend(catalogue.broken)
    rows, validated, keys = validate(source, options, while_reading)
    given = {
        "rows": rows,
        "cells": validated.cells,
        "metrics": validated.metrics(),
        "varying": keys,
        "contrasts": validated.contrasts,
        "validated": validated,
        "source": source,
        "options": options,
        "problems": validated.problems,
    }
    workers = options.workers or cpus()
    tables = build_tables(catalogue, names, given, workers, on_table, analysed=not rows.empty)
    tables["problems"] = pd.DataFrame([p.as_dict() for p in validated.problems], columns=PROBLEM_COLUMNS)
    return Result(tables, validated.problems, validated.n_records, len(rows))
