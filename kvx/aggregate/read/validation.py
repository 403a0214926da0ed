"""Validation before analysis (KVDiagnosis Table 10): every problem located, nothing dropped silently.

Per record: schema version (an earlier kvx's record is upgraded on read, ``kvx.core.upgrade``, and counted),
JSON Schema, finite numbers. Per run: the logged counts regenerate from the records and sum to their
totals. Across records: unique keys, one prompt hash and one FullCache answer per source, the control
ledger agrees, and every planned cell is present (or explicitly unsupported) for every source of its
split. ``error`` problems leave the offending records (or the whole source, when its pairing is in
doubt) out of the analysis; ``warning`` problems keep them. Both are listed in the report and
``--strict`` fails on either.
"""

from __future__ import annotations

import gc
import json
import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np
import orjson
import pandas as pd

from kvx.aggregate.read import cache, text
from kvx.aggregate.read.problems import Problem
from kvx.aggregate.read.rows import Metric, declared_metrics, project
from kvx.aggregate.read.sources import Batch, NotRecords, Source
from kvx.core.records import (
    METRIC_PREFIXES,
    SCHEMA_VERSION,
    SUPPORTED,
    TASK_READER,
    cell_metrics,
    is_valid,
    schema,
    unknown_fields,
)
from kvx.core.upgrade import IDENTITY, READABLE, upgrade

COUNT_KEYS = (
    "n_records",
    "n_supported",
    "n_unsupported",
    "n_error",
    "n_cc",
    "n_cw",
    "n_wc",
    "n_ww",
    "cw_denominator",
)
SHOWN = 5  # sources named in one message before "and N more"
FIXED = "-"  # the setting label of compressors whose own fields fix what they keep


def schema_error(record: dict[str, Any], nonfinite: bool = False) -> str | None:
    """None for a valid record, else jsonschema's most relevant message with its JSON path.

    A record holding NaN or Infinity (``nonfinite``) is checked by jsonschema alone, which takes them as
    numbers like the JSON they came from, so the non-finite check can say which values they are."""
    if not nonfinite and is_valid(record):
        return None
    import jsonschema

    best = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(record))
    if best is None and nonfinite:
        return None
    if best is None:  # the two validators disagree: say so, never accept silently
        return "rejected by the compiled schema (jsonschema-rs) but not by jsonschema"
    path = "/".join(str(p) for p in best.absolute_path) or "(record)"
    return f"{path}: {best.message}"


def nonfinite_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, float) and not math.isfinite(node):
        return [path or "(value)"]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in nonfinite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in nonfinite_paths(v, f"{path}[{i}]")]
    return []


#: fields whose non-finite value makes the record unusable (a NaN diagnostic value only drops that value)
OUTCOME_PREFIXES = ("full.", "compressed.", "setting.", "seconds")
#: measured costs inside the answers: a non-finite one only drops that value (timings never decide a record)
COST_PREFIXES = ("full.cost.", "compressed.cost.")


Columns = dict[str, Any]  # one batch's rows: column -> numpy array, or Coded text


@dataclass(frozen=True)
class Coded:
    """A text column as each distinct value once and a code per row (-1: missing)."""

    codes: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, column: np.ndarray) -> Coded:
        codes, values = text.factorize(column)
        return cls(codes.astype(np.min_scalar_type(-len(values) - 1)), values)

    def __len__(self) -> int:
        return len(self.codes)


@dataclass
class Validated:
    """What validation keeps: analysis rows, control ledgers and every problem found."""

    rows: list[Columns] = field(default_factory=list)
    ledger: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    versions: Counter = field(default_factory=Counter)
    declared: dict[tuple[str, str], str] = field(default_factory=dict)  # (diagnostic, value) -> direction
    conflicts: set[tuple[str, str]] = field(default_factory=set)
    contrasts: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> anchor -> structural
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> its flat identity fields
    #: (provenance source, field, reason) -> external records that leave the field unknown
    unknown: Counter = field(default_factory=Counter)
    #: (schema version read, fields left unknown) -> records upgraded from that version (kvx.core.upgrade)
    upgraded: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)  # files skipped as not records
    n_records: int = 0

    def merge(self, part: Validated) -> None:
        """Add what another process validated from the next batches, as if validated here in order:
        the first risk direction declared for a value stays, a different later one is a conflict."""
        self.rows += part.rows
        for name, entries in part.ledger.items():
            self.ledger.setdefault(name, {}).update(entries)
        self.problems += part.problems
        self.versions += part.versions
        for key, direction in part.declared.items():
            if self.declared.setdefault(key, direction) != direction:
                self.conflicts.add(key)
        self.conflicts |= part.conflicts
        for task, pairs in part.contrasts.items():
            self.contrasts.setdefault(task, {}).update(pairs)
        for cell, flat in part.cells.items():
            self.cells.setdefault(cell, flat)
        self.unknown += part.unknown
        self.upgraded += part.upgraded
        self.notes += part.notes
        self.n_records += part.n_records

    def provenance(self) -> pd.DataFrame:
        """One row per field an external ledger leaves unknown: the report marks them, nothing fills them."""
        rows = [
            {"source": source, "field": name, "records": n, "reason": reason}
            for (source, name, reason), n in sorted(self.unknown.items())
        ]
        return pd.DataFrame(rows, columns=["source", "field", "records", "reason"])

    def metrics(self) -> list[Metric]:
        return declared_metrics(self.declared)

    def frame(self) -> pd.DataFrame:
        """All rows, metric columns named as the tables show them. The batches' rows are released."""
        if not self.rows:
            return pd.DataFrame()
        frame = _shared(self.rows)
        self.rows = []
        metrics = self.metrics()
        for m in metrics:
            if m.column not in frame:
                frame[m.column] = float("nan")
        return frame.rename(columns={m.column: m.name for m in metrics})


def _compact(rows: pd.DataFrame) -> Columns:
    """A batch's rows as plain arrays, text as codes: each distinct value stored once (a cell repeats
    its task, reader and setting on every row), which also makes the batch small to send from a worker.
    Coded exactly (``text.factorize``): a ``pd.Categorical`` merges answers that differ after a NUL."""
    return {
        c: Coded.of(rows[c].to_numpy()) if rows[c].dtype == object and c != "key" else rows[c].to_numpy()
        for c in rows.columns
    }


def _shared(parts: list[Columns]) -> pd.DataFrame:
    """The batches' rows as one frame whose text columns are plain objects again (what the analyses
    expect) but point at one copy of each distinct value across every batch: a source's prompt hash,
    answer and id appear once, not once per cell, which keeps a million rows in memory."""
    lengths = [len(next(iter(part.values()))) if part else 0 for part in parts]
    order = list(dict.fromkeys(c for part in parts for c in part))
    return pd.DataFrame({c: _column([part.get(c) for part in parts], lengths) for c in order})


def _column(arrays: list[Any], lengths: list[int]) -> np.ndarray:
    """One column from the batches' arrays (absent where a batch lacks it: missing, never 0)."""
    if any(isinstance(a, Coded) for a in arrays):
        return _shared_text(arrays, lengths)
    present = [a for a in arrays if a is not None]
    numeric = all(a.dtype.kind == "f" for a in present)
    filled = [
        a if a is not None else np.full(n, np.nan if numeric else None, dtype=float if numeric else object)
        for a, n in zip(arrays, lengths, strict=True)
    ]
    if len(present) < len(arrays) and not numeric:
        filled = [a.astype(object) for a in filled]  # a bool with gaps stays True/False/None, not 1.0/NaN
    return np.concatenate(filled)


def _shared_text(arrays: list[Any], lengths: list[int]) -> np.ndarray:
    """Every batch's distinct values coded together (exactly), each batch's codes moved onto the result."""
    pieces, codes, offset = [], [], 0
    for array, n in zip(arrays, lengths, strict=True):
        if array is None:
            codes.append(np.full(n, -1))
            continue
        if isinstance(array, Coded):
            values, local = array.values, array.codes.astype(np.int64)
        else:
            values, local = np.asarray(array, dtype=object), np.arange(n)
        codes.append(np.where(local >= 0, local + offset, -1))
        pieces.append(values)
        offset += len(values)
    mapping, uniques = text.factorize(np.concatenate(pieces) if pieces else np.array([], dtype=object))
    objects = np.append(uniques, np.nan)  # -1 (missing) takes the last: NaN
    mapping = np.append(mapping, -1)  # missing values (NaN, None) are coded -1 too
    return objects[mapping[np.concatenate(codes)]]


def validate_batch(batch: Batch) -> Validated:
    """One batch validated on its own: what a worker process returns, merged in order by ``merge``.

    The cycle collector is paused meanwhile: parsed records are acyclic, and its passes over thousands
    of fresh dicts cost more than the parsing. What an earlier aggregate kept for the batch's file is
    loaded instead (``cache``), and a batch read here is kept for the next one unless its file could not
    be read (which may pass)."""
    if batch.cached is not None:
        kept = cache.load(batch.cached)
        if isinstance(kept, Validated):
            return kept
        batch = batch.uncached()
    out = Validated()
    enabled = gc.isenabled()
    gc.disable()
    try:
        read = check_batch(batch, out)
    finally:
        if enabled:
            gc.enable()
    if read and batch.store is not None:
        failed = cache.store(batch.store, out)
        if failed is not None:
            out.notes.append(
                f"{batch.origin}: validated records {failed}"
            )  # after storing: a later aggregate that loads it did not fail
    return out


def check_batch(batch: Batch, out: Validated) -> bool:
    """Read, parse, validate and project one batch into ``out``; False when it could not be read."""
    try:
        lines = batch.read()
    except NotRecords as note:
        out.notes.append(str(note))
        return True
    except json.JSONDecodeError as exc:
        out.problems.append(Problem("parse", "error", batch.origin, "", f"invalid JSON: {exc}"))
        return True
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:  # zlib.error: corrupt gzip data
        out.problems.append(Problem("parse", "error", batch.origin, "", f"unreadable: {exc}"))
        return False
    if batch.kind == "controls":
        _ledger(batch, lines, out)
        return True
    rows, valid_records, valid = [], [], 0
    keep = batch.logged is not None  # the records are kept only to regenerate a run's logged counts
    before = out.n_records
    for lineno, line in enumerate(lines, batch.first_line):
        if not line.strip():
            continue
        out.n_records += 1
        record = _parse(batch, lineno, line, out)
        if record is None:
            continue
        key = str(record.get("key", f"line {lineno}"))
        version = record.get("schema_version")
        out.versions[str(version)] += 1
        if version != SCHEMA_VERSION:  # an earlier kvx's record is upgraded, anything else refused
            unknown = upgrade(record)
            if unknown is None:
                readable = ", ".join(map(repr, READABLE))
                message = f"schema_version={version!r}; this kvx reads versions {readable}"
                out.problems.append(Problem("schema_version", "error", batch.origin, key, message))
                continue
            out.upgraded[(str(version), unknown)] += 1
        odd = "NaN" in line or "Infinity" in line
        message = schema_error(record, odd) or _unexplained(record, out)
        if message is not None:
            out.problems.append(Problem("schema", "error", batch.origin, key, message))
            continue
        bad = nonfinite_paths(record) if odd else []
        fatal = [p for p in bad if p.startswith(OUTCOME_PREFIXES) and not p.startswith(COST_PREFIXES)]
        if bad:
            effect = "record left out" if fatal else "those values are treated as missing, not imputed"
            out.problems.append(
                Problem("nonfinite", "error", batch.origin, key, f"non-finite {', '.join(bad)}; {effect}")
            )
        valid += 1
        if keep:
            valid_records.append(record)
        if not fatal:
            rows.append(project(record, batch.origin, batch.sweep, out.declared, out.conflicts))
            out.cells.setdefault(record["cell"]["id"], record["cell"]["fields"])
            out.contrasts.setdefault(record["task"], {}).update(record.get("contrast") or {})
    if keep and valid == out.n_records - before:
        _check_counts(batch, valid_records, out)  # only when every record could be read
    if rows:
        out.rows.append(_compact(pd.DataFrame(rows)))
    return True


def _unexplained(record: dict[str, Any], out: Validated) -> str | None:
    """An external record may leave a field null only with a reason (the schema already refuses nulls in
    kvx's own records); counted per field so the report can mark what is unknown."""
    if "provenance" not in record:
        return None
    unknown = unknown_fields(record)
    if not unknown:
        return None
    provenance = record["provenance"]
    reasons = provenance.get("unknown") or {}
    missing = [name for name in unknown if name not in reasons]
    if missing:
        return f"provenance.unknown: {', '.join(missing)} null without a reason"
    for name in unknown:
        out.unknown[(provenance.get("source", ""), name, reasons[name])] += 1
    return None


def _loads(line: str) -> Any:
    """orjson where it can (faster); json where the line has NaN or Infinity, which orjson refuses and the
    non-finite check reports value by value."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def _parse(batch: Batch, lineno: int, line: str, out: Validated) -> dict[str, Any] | None:
    try:
        record = _loads(line)
    except json.JSONDecodeError as exc:
        out.problems.append(Problem("parse", "error", batch.origin, f"line {lineno}", f"invalid JSON: {exc}"))
        return None
    if not isinstance(record, dict):
        out.problems.append(
            Problem("parse", "error", batch.origin, f"line {lineno}", "a record must be an object")
        )
        return None
    return record


def _ledger(batch: Batch, lines: list[str], out: Validated) -> None:
    entries = out.ledger.setdefault(batch.split or batch.origin, {})
    for lineno, line in enumerate(lines, batch.first_line):
        if line.strip():
            entry = _parse(batch, lineno, line, out)
            if entry is not None:
                entries[str(entry.get("source_id"))] = entry


def _check_counts(batch: Batch, records: list[dict[str, Any]], out: Validated) -> None:
    """The run's logged counts must regenerate from its records and sum to their totals."""
    counts = cell_metrics(records)
    logged = batch.logged or {}
    found = [
        f"logged {name}={logged[name]:g} but the records give {counts[name]}"
        for name in COUNT_KEYS
        if name in logged and logged[name] != counts[name]
    ]
    found += _check_metric_means(counts, logged)
    transitions = counts["n_cc"] + counts["n_cw"] + counts["n_wc"] + counts["n_ww"]
    if transitions != counts["n_supported"]:
        found.append(f"transitions sum to {transitions}, supported records are {counts['n_supported']}")
    out.problems.extend(Problem("counts", "error", batch.origin, "", message) for message in found)


def _check_metric_means(counts: dict[str, float], logged: dict[str, float]) -> list[str]:
    """The answer-metric means a run logged (``m.<name>``, ``full_m.<name>``) must regenerate from its
    records; runs logged before cells had them log none, and nothing is asked of them."""
    found = []
    for name in sorted(k for k in logged if k.startswith(METRIC_PREFIXES)):
        if name not in counts:
            found.append(f"logged {name}={logged[name]:g} but no record carries that metric")
        elif not math.isclose(logged[name], counts[name], rel_tol=1e-9, abs_tol=1e-12):
            found.append(f"logged {name}={logged[name]:g} but the records give {counts[name]:g}")
    return found


def cross_check(rows: pd.DataFrame, out: Validated, source: Source) -> pd.DataFrame:
    """Checks across records, against what ``source`` knows of its sweeps; returns the rows the
    analysis may use."""
    problems = out.problems
    for diag, value in sorted(out.conflicts):
        problems.append(
            Problem(
                "risk",
                "warning",
                "",
                f"{diag}.{value}",
                "records declare both risk directions for this value; "
                f"the first seen ({out.declared[(diag, value)]}) is used",
            )
        )
    if len({IDENTITY.get(v, v) for v in out.versions}) > 1:  # two ways of identifying one cell
        mix = ", ".join(f"{v}: {n}" for v, n in sorted(out.versions.items()))
        problems.append(Problem("schema_version", "error", "", "", f"mixed schema versions ({mix})"))
    for (version, unknown), n in sorted(out.upgraded.items()):
        message = (
            f"{n} records upgraded from schema {version} to {SCHEMA_VERSION} on read (kvx.core.upgrade); "
            f"unknown in them, never filled: {', '.join(unknown) or 'nothing'}"
        )
        problems.append(Problem("schema_version", "warning", "", "", message))
    finished = source.finished_cells
    for sweep, n in source.planned.items():
        if finished.get(sweep, 0) < n:
            problems.append(
                Problem(
                    "expected_cells",
                    "error",
                    sweep,
                    "",
                    f"the sweep planned {n} jobs; {finished.get(sweep, 0)} finished cell runs were found",
                )
            )
    if rows.empty:
        return rows
    rows = _dedupe(rows, problems)
    rows = _pairing(rows, out.ledger, problems)
    _expected(rows, problems, source)
    # seeds draw different sources by design (each its own control group); one seed with several
    # groups is two sweeps' sizes or budgets pooled
    by_seed = rows.groupby([*TASK_READER, "seed"], dropna=False)["split"].nunique()
    for (task, reader, seed), splits in by_seed.items():
        if splits > 1:
            problems.append(
                Problem(
                    "splits",
                    "warning",
                    "",
                    "",
                    f"{task} x {reader} at seed {seed} mixes {splits} control groups (different "
                    "source counts, context sizes or decoding budgets); select one sweep with --sweep",
                )
            )
    return rows


def _dedupe(rows: pd.DataFrame, problems: list[Problem]) -> pd.DataFrame:
    dup = rows.duplicated("key", keep="first")
    if dup.any():
        first = rows.drop_duplicates("key").set_index("key")["origin"]
        for _, r in rows[dup].iterrows():
            problems.append(
                Problem(
                    "duplicate_key",
                    "error",
                    r["origin"],
                    r["key"],
                    f"key also in {first[r['key']]}; that first copy is analysed, this one is not",
                )
            )
    return rows[~dup]


def _pairing(rows: pd.DataFrame, ledger: dict[str, dict[str, dict]], problems: list[Problem]) -> pd.DataFrame:
    """One prompt hash and one FullCache answer per source; the ledger, where logged, agrees."""
    bad_units: set[str] = set()
    units = text.exact(rows["unit"])  # grouped on exact codes: pandas merges texts that differ after a NUL
    hashes = text.exact(rows["prompt_hash"]).groupby(units).nunique()
    for code in hashes[hashes > 1].index:
        group = rows[units == code]
        unit = group["unit"].iloc[0]
        bad_units.add(unit)
        common = _mode(group["prompt_hash"])
        for _, r in group[group["prompt_hash"].notna() & (group["prompt_hash"] != common)].iterrows():
            problems.append(
                Problem(
                    "prompt_hash",
                    "error",
                    r["origin"],
                    r["key"],
                    f"prompt hash {str(r['prompt_hash'])[:12]} differs "
                    f"from {common[:12]} of the same source in other cells; source left out",
                )
            )
    columns = [
        "key",
        "origin",
        "split",
        "source_id",
        "prompt_hash",
        "full_score",
        "full_correct",
        "full_output",
    ]
    paired = rows.loc[rows["status"] == SUPPORTED, [*columns, "unit"]]
    answers = paired[["full_score", "full_correct"]].assign(full_output=text.exact(paired["full_output"]))
    paired_units = text.exact(paired["unit"])
    distinct = answers.groupby(paired_units).nunique()
    labels = dict(zip(paired_units, paired["unit"], strict=True))
    for unit in [labels[code] for code in distinct[(distinct > 1).any(axis=1)].index]:
        if unit not in bad_units:
            bad_units.add(unit)
            problems.append(
                Problem(
                    "partner",
                    "error",
                    "",
                    unit,
                    "the FullCache answer differs between cells of the same source; source left out",
                )
            )
    missing_ledgers: set[str] = set()
    bad_keys: set[str] = set()
    for key, origin, split, source_id, prompt_hash, score, correct, output in zip(
        *(paired[c].to_numpy() for c in columns), strict=True
    ):  # plain tuples: itertuples costs more than the checks on a large ledger
        entries = ledger.get(split)
        if entries is None:
            missing_ledgers.add(split)
            continue
        entry = entries.get(source_id)
        if entry is None:
            message = "no FullCache partner in the control ledger; record left out"
        elif (
            _known(entry.get("prompt_hash"))
            and _known(prompt_hash)
            and entry.get("prompt_hash") != prompt_hash
        ):
            theirs, mine = str(entry.get("prompt_hash"))[:12], str(prompt_hash)[:12]
            message = f"control prompt hash {theirs} != record's {mine}"
        elif (entry.get("score"), entry.get("correct"), entry.get("output")) != (
            score,
            bool(correct),
            output,
        ):
            message = "the record's FullCache answer differs from the control ledger"
        else:
            continue
        bad_keys.add(key)
        problems.append(Problem("partner", "error", origin, key, message))
    if ledger:
        for split in sorted(missing_ledgers):
            problems.append(
                Problem(
                    "partner",
                    "warning",
                    "",
                    split,
                    "no control ledger for this control group; the FullCache "
                    "answers inside the records are the partners",
                )
            )
    return rows[~rows["unit"].isin(bad_units) & ~rows["key"].isin(bad_keys)]


def _mode(values: pd.Series) -> Any:
    """The most frequent known value, the least of those tied (``Series.mode`` hashes text as pandas does)."""
    counts = Counter(v for v in values if _known(v))
    top = max(counts.values())
    return min(v for v, n in counts.items() if n == top)


def _known(value: Any) -> bool:
    """A field an external record may leave unknown (null, NaN in the rows) is compared only when known."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _expected(rows: pd.DataFrame, problems: list[Problem], source: Source) -> None:
    """Within each sweep: every cell it planned over every source of its split.

    A sweep's plan is the cells its jobs are (``Source.plans``): exactly those, so the settings of
    unrelated runs are never crossed into cells nobody asked for. Cells a sweep reused from an earlier
    run count as that sweep's; a sweep a later one resumed is checked as that one. A run outside any
    sweep (a single ``python -m kvx``) plans its own cell, which it holds whole or its logged counts
    disagree. A sweep that recorded no plan (an earlier kvx's; a record directory without an export's
    manifest: one per folder) is taken to plan the product of the axes it shows, as a Hydra sweep
    does; there a compressor whose own fields fix what it keeps (setting ``-``: press=none, hqq with
    press.bits) is one cell whatever the ratio.
    """
    plans = source.plans
    sweeps = (set(rows["sweep"].unique()) | set(plans)) - set(source.superseded) - {""}
    columns = ["task", "reader", "seed", "compressor", "setting", "source_id", "cell_id"]
    for sweep in sorted(sweeps):
        mine = (rows["sweep"] == sweep) | rows["cell_id"].isin(source.reused.get(sweep, set()))
        group = rows.loc[mine, columns]
        sources = group.groupby([*TASK_READER, "seed"])["source_id"].agg(set)
        cells = _planned(group, plans[sweep]) if sweep in plans else _product(group)
        for label, split, have in cells:
            if have is None:
                problems.append(Problem("expected_cells", "error", sweep, "", f"cell {label} is missing"))
                continue
            lost = sorted(sources[split] - have)
            if lost:
                named = ", ".join(lost[:SHOWN]) + (
                    f" and {len(lost) - SHOWN} more" if len(lost) > SHOWN else ""
                )
                message = f"cell {label} lacks {len(lost)} sources: {named}"
                problems.append(Problem("expected_cells", "error", sweep, "", message))


Expected = tuple[str, tuple[Any, ...] | None, set[str] | None]  # label, its split, the sources present


def _planned(group: pd.DataFrame, plan: dict[str, str]) -> list[Expected]:
    """The cells of a recorded plan, each with the sources its records hold (None: no records)."""
    present = {cid: cell for cid, cell in group.groupby("cell_id")}
    out: list[Expected] = []
    for cid, name in sorted(plan.items(), key=lambda item: (item[1], item[0])):
        cell = present.get(cid)
        if cell is None:
            out.append((name, None, None))
            continue
        first = cell.iloc[0]
        split = (first["task"], first["reader"], first["seed"])
        out.append((_label(*split, first["compressor"], first["setting"]), split, set(cell["source_id"])))
    return out


def _product(group: pd.DataFrame) -> list[Expected]:
    """Every (task, reader, seed) x compressor x setting the rows show: the plan of a sweep that
    recorded none."""
    splits = dict.fromkeys(zip(group["task"], group["reader"], group["seed"], strict=True))
    settings = group.groupby("compressor")["setting"].agg(set)
    swept = sorted(set(group["setting"]) - {FIXED})
    cells = [(c, s) for c in sorted(settings.index) for s in ([FIXED] if settings[c] == {FIXED} else swept)]
    present = group.groupby(["task", "reader", "seed", "compressor", "setting"])["source_id"].agg(set)
    return [
        (_label(*split, comp, setting), split, present.get((*split, comp, setting)))
        for split, (comp, setting) in product(list(splits), cells)
    ]


def _label(task: Any, reader: Any, seed: Any, compressor: Any, setting: Any) -> str:
    """How an expected-cells problem names its cell."""
    return f"{task} x {reader} x seed {seed} x {compressor}@{setting}"


def severity_counts(problems: Iterable[Problem]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for p in problems:
        counts[p.severity] += 1
    return dict(counts)
