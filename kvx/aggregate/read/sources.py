"""Where records come from: an MLflow store or a directory of record files.

Both yield the same ``Batch`` stream (one batch per cell run or record file, a large record file cut
into parts at line ends), so validation and analysis never know which it was, and a directory exported
from a store gives identical numbers. Batches are read one at a time: the aggregate never holds every
raw record in memory.
"""

from __future__ import annotations

import gzip
import json
import math
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from kvx.aggregate.read import cache, sqlite_runs
from kvx.aggregate.read.problems import Problem
from kvx.stores.tags import CONTROL_KEY, GRID, MLFLOW_PARENT, PLAN, PLANNED_JOBS, REUSED, ROLE

CONTROL_SUFFIX = ".controls.jsonl"
#: what ``--export-records`` writes beside the records: what the store knew of them (``exported``)
MANIFEST = "kvx-export.json"
_CONTROL_STEM = ".controls"  # <split>.controls.jsonl or <split>.controls.jsonl.gz
#: uncompressed bytes of one part of a large record file: a release's task file (~107 MB, 26,400
#: records) is read as 7 batches, spread over every worker instead of keeping one busy for all of it
PART_BYTES = 16 << 20


class NotRecords(ValueError):
    """A file under a record directory that holds no records (a manifest, a README): skipped, noted."""


@dataclass
class Batch:
    """The records of one cell run (or one file), or one FullCache control ledger: its lines, or the file
    that holds them, read where the batch is validated (a worker process, in parallel)."""

    origin: str  # run id or file path: where a problem points
    sweep: str  # parent sweep run id, or the directory for files
    kind: str  # "records" or "controls"
    lines: list[str] | None = None  # raw JSON lines, parsed by validation so parse errors are located
    logged: dict[str, float] | None = None  # metrics the run logged, checked against the records
    split: str | None = None  # control ledgers: the control group they belong to
    path: Path | None = None  # the file to read when ``lines`` is None (.jsonl, .jsonl.gz or .json)
    #: one part of a large record file (``DirectorySource``): its bytes, whole lines, read by the parent
    data: bytes | None = None
    part: int = 0  # which part of its file (0: the first, or the whole file)
    first_line: int = 1  # the file's line number of the batch's first line, for located problems
    unreadable: str | None = None  # why the rest of a file read in parts could not be read
    parts: int = 1  # how many parts its file is read as
    cached: Path | None = None  # the file's validation kept by an earlier aggregate (``cache``): load it
    store: Path | None = None  # where to keep this batch's validation for later aggregates

    def uncached(self) -> Batch:
        """The batch read from its file after all (its kept validation could not be loaded)."""
        assert self.path is not None
        if self.parts == 1:
            return Batch(
                self.origin,
                self.sweep,
                self.kind,
                logged=self.logged,
                split=self.split,
                path=self.path,
                store=self.cached,
            )
        parts = _part_batches(self.path, self.parts, self.origin, self.sweep)
        part = next(b for b in parts if b.part == self.part)
        part.store = self.cached if part.unreadable is None else None
        return part

    def read(self) -> list[str]:
        """The batch's JSON lines. Raises ``NotRecords`` for a file that holds none, ``json.JSONDecodeError``
        for a ``.json`` file that does not parse, ``OSError`` for one that cannot be read.

        Lines end at ``\\n`` only (JSON Lines): a record may hold U+2028 or other characters
        ``str.splitlines`` would also cut at, and a file's parts must number its lines alike."""
        if self.unreadable is not None:
            raise OSError(self.unreadable)
        if self.lines is not None:
            return self.lines
        if self.data is not None:
            return self.data.decode("utf-8").split("\n")
        assert self.path is not None
        text = _read_text(self.path)
        if self.path.suffix == ".json":
            items = _json_records(text)
            if items is None:
                raise NotRecords(f"skipped {self.path}: a JSON file without records")
            return [json.dumps(item) for item in items]
        lines = text.split("\n")
        if self.kind == "records" and not _looks_like_records(lines):
            raise NotRecords(f"skipped {self.path}: its lines are not records (no key, schema_version)")
        return lines


@dataclass
class Source:
    """A stream of batches plus what listing the store already found wrong."""

    description: dict[str, str]
    problems: list[Problem] = field(default_factory=list)
    sweeps: list[str] = field(default_factory=list)
    planned: dict[str, int] = field(default_factory=dict)  # sweep id -> jobs its sweeper planned
    finished_cells: dict[str, int] = field(default_factory=dict)  # sweep id -> finished cell runs
    #: sweep id -> ids of cells a job of that sweep found finished and reused instead of recomputing
    reused: dict[str, set[str]] = field(default_factory=dict)
    #: unfinished sweep id -> the later sweep of the same grid that finished it
    superseded: dict[str, str] = field(default_factory=dict)
    #: sweep id -> the cells its jobs are (cell id -> run name): what the sweep expects, exactly; a sweep
    #: an earlier kvx logged has none, and validation falls back to the product of its observed axes
    plans: dict[str, dict[str, str]] = field(default_factory=dict)
    #: what was read differently from what was asked, not wrong: files skipped as not records
    notes: list[str] = field(default_factory=list)

    def batches(self) -> Iterator[Batch]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def knowledge(self) -> dict[str, Any]:
        """What reading found beyond the records, as JSON: ``--export-records`` keeps it in ``MANIFEST``
        so that reading the export validates exactly as reading this source did (``learn``)."""
        return {
            "problems": [p.as_dict() for p in self.problems],
            "planned": self.planned,
            "finished_cells": self.finished_cells,
            "reused": {sweep: sorted(cells) for sweep, cells in self.reused.items()},
            "superseded": self.superseded,
            "plans": self.plans,
        }

    def learn(self, known: dict[str, Any]) -> None:
        """Take on what an exported source knew (``knowledge``)."""
        self.problems += [Problem(**p) for p in known.get("problems", [])]
        self.planned.update(known.get("planned", {}))
        self.finished_cells.update(known.get("finished_cells", {}))
        for sweep, cells in known.get("reused", {}).items():
            self.reused.setdefault(sweep, set()).update(cells)
        self._supersede(known.get("superseded", {}))
        for sweep, plan in known.get("plans", {}).items():
            self.plans.setdefault(sweep, {}).update(plan)

    def _supersede(self, by_sweep: dict[str, str]) -> None:
        """Take on unfinished sweeps a later one resumed (old id -> new id), named in the description."""
        self.superseded.update(by_sweep)
        for sweep, by in by_sweep.items():
            self.description[f"superseded {sweep}"] = f"resumed and finished by sweep {by}"


def superseded(sweeps: Iterable[Any]) -> dict[str, str]:
    """Unfinished sweeps whose grid (the same command line) a later sweep ran to FINISHED: that later
    sweep resumed them, reusing their finished cells, so the grid is complete there. Old -> new id."""
    by_grid: dict[str, list[Any]] = {}
    for run in sweeps:
        grid = run.data.tags.get(GRID)
        if grid:
            by_grid.setdefault(grid, []).append(run)
    out = {}
    for runs in by_grid.values():
        runs.sort(key=lambda r: (r.info.start_time, r.info.run_id))
        for i, run in enumerate(runs):
            later = [r for r in runs[i + 1 :] if r.info.status == "FINISHED"]
            if run.info.status != "FINISHED" and later:
                out[run.info.run_id] = later[0].info.run_id
    return out


class MlflowSource(Source):
    """Finished cell runs (and their sweeps' control runs) of one or more experiments."""

    def __init__(
        self, uri: str, experiments: list[str], sweeps: list[str] | None = None, close_stale: bool = False
    ) -> None:
        """``close_stale``: the caller closes the sweeps left RUNNING (``stale``) after reading, through
        ``kvx.stores.tracking.close_stale``; the source itself never writes to the store."""
        super().__init__({"tracking_uri": uri, "experiments": ", ".join(experiments)})
        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
            path = Path(uri.removeprefix("sqlite:///")).absolute()
            raise FileNotFoundError(f"no such store: {path} ({uri}; run a sweep first)")
        self.uri = uri
        self._client: Any = None
        db = uri.removeprefix("sqlite:///")
        self.store_dir = Path(db).resolve().parent if db != uri else None
        found = None
        self.stale: list[str] = []  # sweep runs a crash left RUNNING
        if self.store_dir is not None:  # an embedded store, only read: no MLflow
            try:
                found = sqlite_runs.search(Path(db), experiments)
            except LookupError as exc:
                raise LookupError(f"{exc} in {uri}") from None
        if found is None:
            ids = []
            for name in experiments:
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise LookupError(f"--experiment {name!r} does not exist in {uri}")
                ids.append(exp.experiment_id)
            found = ids, self._search(ids, "")
        _, runs = found
        by_role: dict[str, list[Any]] = {}
        for run in runs:
            by_role.setdefault(run.data.tags.get(ROLE, ""), []).append(run)
        parents = {r.info.run_id: r for r in by_role.get("sweep", [])}
        wanted = set(sweeps or [])
        if "latest" in wanted and parents:
            wanted.discard("latest")
            wanted.add(max(parents.values(), key=lambda r: r.info.start_time).info.run_id)
        missing = wanted - set(parents)
        if missing:
            raise LookupError(
                f"--sweep {', '.join(sorted(missing))}: no such sweep run; sweeps: {sorted(parents)}"
            )

        def selected(run: Any) -> bool:
            return not wanted or run.data.tags.get(MLFLOW_PARENT) in wanted

        reused_runs: set[str] = set()
        for run_id, run in parents.items():
            if wanted and run_id not in wanted:
                continue
            tags = {k.removeprefix(REUSED): v for k, v in run.data.tags.items() if k.startswith(REUSED)}
            if tags:
                self.reused[run_id] = set(tags)
                reused_runs.update(tags.values())
            plan = {k.removeprefix(PLAN): v for k, v in run.data.tags.items() if k.startswith(PLAN)}
            if plan:
                self.plans[run_id] = plan
        self.cells = []
        for run in by_role.get("cell", []):
            if not selected(run) and run.info.run_id not in reused_runs:
                continue
            if run.info.status != "FINISHED":
                self.problems.append(
                    Problem(
                        "unfinished_run",
                        "warning",
                        run.info.run_id,
                        "",
                        f"cell run {run.info.run_name!r} is "
                        f"{run.info.status}; not aggregated (re-run the sweep to finish it)",
                    )
                )
                continue
            self.cells.append(run)
        self.cells.sort(key=lambda r: (r.info.start_time, r.info.run_id))
        # every ledger, not only the selected sweeps': a later sweep reuses an earlier sweep's controls
        self.controls = [r for r in by_role.get("control", []) if r.info.status == "FINISHED"]
        self.controls.sort(key=lambda r: (r.info.start_time, r.info.run_id))
        self._supersede(superseded(parents.values()))
        for run_id, run in parents.items():
            if wanted and run_id not in wanted or run_id in self.superseded:
                continue  # a superseded sweep's grid is checked under the sweep that finished it
            if run.info.status == "RUNNING":
                action = "closed as KILLED" if close_stale else "pass --close-stale to close it"
                self.problems.append(
                    Problem(
                        "stale_parent",
                        "warning",
                        run_id,
                        "",
                        f"sweep run {run.info.run_name!r} is still "
                        f"RUNNING (a crashed or unfinished sweep); {action}",
                    )
                )
                self.stale.append(run_id)
            planned = run.data.tags.get(PLANNED_JOBS)
            if planned is not None:
                self.planned[run_id] = int(planned)
        for run in self.cells:
            parent = run.data.tags.get(MLFLOW_PARENT, "")
            self.finished_cells[parent] = self.finished_cells.get(parent, 0) + 1
        for sweep, cell_ids in self.reused.items():  # a reused cell is a finished job of that sweep
            self.finished_cells[sweep] = self.finished_cells.get(sweep, 0) + len(cell_ids)
        self.sweeps = sorted({r.data.tags.get(MLFLOW_PARENT, "") for r in self.cells} - {""})
        self.description["sweeps"] = ", ".join(self.sweeps) or "(runs outside sweeps)"

    @property
    def client(self) -> Any:
        """MLflow's client, imported and opened only when needed: a tracking server, a download, or
        an embedded store ``sqlite_runs`` cannot read."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _search(self, ids: list[str], filter_string: str) -> list[Any]:
        out, token = [], None
        while True:
            page = self.client.search_runs(ids, filter_string, max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def __len__(self) -> int:
        return len(self.cells) + len(self.controls)

    def _local(self, run: Any) -> Path:
        """Where a run's artifacts are on this machine. An embedded store records absolute paths, so
        a copied outputs folder would silently read the original's: the copy's own folder is read
        instead when it holds them, and reading outside the store's folder is reported."""
        root = run.info.artifact_uri
        local = Path(url2pathname(urlparse(root).path)) if root.startswith("file:") else Path(root)
        if self.store_dir is None or not local.is_absolute() or local.is_relative_to(self.store_dir):
            return local
        for k in range(1, len(local.parts)):
            mine = self.store_dir.joinpath(*local.parts[k:])
            if mine.is_dir():
                self.description["artifacts"] = (
                    f"read from this store's folder {self.store_dir} (recorded: {local})"
                )
                return mine
        if local.is_dir():
            self.problems.append(
                Problem(
                    "artifact_location",
                    "warning",
                    run.info.run_id,
                    "",
                    f"artifacts are read from {local}, outside this store's folder {self.store_dir}",
                )
            )
        return local

    def _lines(self, run: Any, name: str) -> dict[str, Any] | None:
        """The batch fields that give a run's artifact: its path in an embedded store (read where the
        batch is validated), else its lines downloaded from the server; None when it is missing."""
        local = self._local(run)
        if local.is_absolute() and (local / name).is_file():  # embedded store: read in place
            return {"path": local / name}
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = Path(self.client.download_artifacts(run.info.run_id, name, tmp))
            except Exception:
                return None
            return {"lines": path.read_text(encoding="utf-8").split("\n")}

    def batches(self) -> Iterator[Batch]:
        for run in self.cells:
            run_id = run.info.run_id
            lines = self._lines(run, "records.jsonl")
            sweep = run.data.tags.get(MLFLOW_PARENT, "")
            if lines is None:
                self.problems.append(
                    Problem("missing_artifact", "error", run_id, "", "finished cell run has no records.jsonl")
                )
                continue
            yield Batch(run_id, sweep, "records", logged=dict(run.data.metrics), **lines)
        for run in self.controls:
            lines = self._lines(run, "controls.jsonl")
            if lines is not None:
                sweep = run.data.tags.get(MLFLOW_PARENT, "")
                split = run.data.tags.get(CONTROL_KEY)
                yield Batch(run.info.run_id, sweep, "controls", split=split, **lines)


class DirectorySource(Source):
    """Record files under one or more directories (or single files): ``*.jsonl`` and ``*.jsonl.gz`` (one
    record per line) or ``*.json`` (one record or a list); ``*.controls.jsonl[.gz]`` files are FullCache
    control ledgers. Anything else under the directories (a manifest, a README, a JSON file that holds
    no records) is skipped with a note, never parsed as records.

    A directory ``--export-records`` wrote holds ``MANIFEST``: each file's run, sweep, logged metrics and
    control group in the order the store read them, and what the store knew beyond its records (plans,
    reused cells, superseded sweeps, finished counts, problems of listing it), so it validates as the
    store did. Without one (an earlier kvx's export, records from elsewhere) a file's folder is its sweep.

    A record file larger than ``part_bytes`` (uncompressed; default ``PART_BYTES``) is read here in
    parts that end at a line end, one batch each, so its records are validated by every worker at
    once; the batches' rows are the file's, in its order, whatever the parts. With a ``cache`` folder,
    a file whose parts an earlier aggregate validated is not read: its batches load what was kept."""

    def __init__(self, roots: list[Path], part_bytes: int | None = None, cache: Path | None = None) -> None:
        super().__init__({"records": ", ".join(str(r) for r in roots)})
        self.roots = roots  # where release tables written next to imported records are looked for
        self.files: list[Path] = []
        self.exported: dict[Path, dict[str, Any]] = {}  # file -> its entry in its directory's MANIFEST
        self.manifests: list[Path] = []  # exported stores read: one that held no finished cell has no files
        skipped: list[str] = []
        for root in roots:
            if root.is_file():
                found = [root]
            elif root.is_dir():
                found = sorted(p for p in root.rglob("*") if p.is_file() and p != root / MANIFEST)
                found = self._listed(root, found) + found
            else:
                raise FileNotFoundError(f"--records {root}: no such directory or file")
            for path in dict.fromkeys(found):
                if path in self.exported or _record_file(path):
                    self.files.append(path)
                elif not path.name.startswith("."):
                    skipped.append(str(path.relative_to(root)) if path != root else str(path))
        if skipped:
            named = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            files = "file that is" if len(skipped) == 1 else "files that are"
            self.notes.append(f"skipped {len(skipped)} {files} not records: {named}")
        if not self.files and not self.manifests:
            raise FileNotFoundError(
                f"--records {', '.join(map(str, roots))}: no record files (.jsonl, .jsonl.gz or .json)"
            )
        self.sweeps = sorted({str(r) for r in roots})
        size = PART_BYTES if part_bytes is None else part_bytes
        # a run's records are one batch, as read from its store: its logged counts regenerate from all
        self.parts = {
            path: 1 if self.exported.get(path, {}).get("logged") is not None else _parts(path, size)
            for path in self.files
        }
        self.cache = cache

    def _listed(self, root: Path, found: list[Path]) -> list[Path]:
        """The files ``root``'s MANIFEST lists, in its order, with what the store knew taken on."""
        manifest = root / MANIFEST
        if not manifest.is_file():
            return []
        try:
            known = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.problems.append(Problem("parse", "error", str(manifest), "", f"unreadable manifest: {exc}"))
            return []
        self.learn(known)
        self.manifests.append(manifest)
        here, listed = set(found), []
        for entry in known.get("files", []):
            path = root / entry["path"]
            if path in here or "unreadable" in entry:
                self.exported[path] = entry
                listed.append(path)
            else:
                message = f"{entry['path']} is listed in {MANIFEST} but missing: its records are not read"
                self.problems.append(Problem("missing_artifact", "error", entry["origin"], "", message))
        return listed

    def __len__(self) -> int:
        return sum(self.parts.values())

    def batches(self) -> Iterator[Batch]:
        for path in self.files:
            name = stem(path)
            entry = self.exported.get(path, {})
            kind = entry.get("kind") or ("controls" if name.endswith(_CONTROL_STEM) else "records")
            split = entry.get("split", name.removesuffix(_CONTROL_STEM) if kind == "controls" else None)
            origin, sweep = entry.get("origin", str(path)), entry.get("sweep", str(path.parent))
            logged, parts = entry.get("logged"), self.parts[path]
            if "unreadable" in entry:  # the store could not read it either: validation says so again
                yield Batch(origin, sweep, kind, split=split, unreadable=entry["unreadable"])
                continue
            kept = (
                None
                if self.cache is None
                else cache.entries(self.cache, path, parts, [origin, sweep, kind, split, logged])
            )
            if kept is not None and all(done.exists() for done in kept):
                for part, done in enumerate(kept):
                    yield Batch(
                        origin,
                        sweep,
                        kind,
                        logged=logged,
                        split=split,
                        path=path,
                        part=part,
                        parts=parts,
                        cached=done,
                    )
                continue
            read = (
                [Batch(origin, sweep, kind, logged=logged, split=split, path=path)]
                if parts == 1
                else _part_batches(path, parts, origin, sweep)
            )
            for batch in read:
                if kept is not None and batch.unreadable is None:
                    batch.store = kept[batch.part]
                yield batch


def _uncompressed_size(path: Path) -> int:
    """The file's size once decompressed: a gzip file states it (mod 2**32) in its last four bytes; an
    estimate for a file of several gzip members or over 4 GiB, which then only reads in fewer parts."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(0, 2)
        if fh.tell() < 18:  # shorter than a gzip header and trailer: read whole, validation says why
            return 0
        fh.seek(-4, 2)
        return struct.unpack("<I", fh.read(4))[0]


def _parts(path: Path, part_bytes: int) -> int:
    """How many batches a file is read as: one unless it is a JSON Lines record file whose first line is
    a record (anything else is read whole, where it is skipped or reported) and larger than a part."""
    if not path.name.endswith((".jsonl", ".jsonl.gz")) or stem(path).endswith(_CONTROL_STEM):
        return 1
    try:
        size = _uncompressed_size(path)
        if size <= part_bytes:
            return 1
        with _open_binary(path) as fh:
            first = fh.readline().decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error):
        return 1  # unreadable: read whole by a worker, which reports it as it always has
    return math.ceil(size / part_bytes) if _looks_like_records([first]) else 1


def _part_batches(path: Path, parts: int, origin: str, sweep: str) -> Iterator[Batch]:
    """``parts`` batches of whole lines of one record file: part ``i`` ends at the first line end at or
    after byte ``(i + 1) * size / parts``. A file that cannot be read to its end yields one last batch
    that reports why, as for a file read whole (the records of the parts already read stay, located)."""
    size = _uncompressed_size(path)
    target = math.ceil(size / parts)
    first_line, read = 1, 0
    try:
        with _open_binary(path) as fh:
            for part in range(parts):
                if part == parts - 1:
                    data = fh.read()
                else:
                    data = fh.read(max(0, (part + 1) * target - read))
                    if data and not data.endswith(b"\n"):
                        data += fh.readline()
                yield Batch(
                    origin, sweep, "records", data=data, part=part, first_line=first_line, parts=parts
                )
                first_line += data.count(b"\n")
                read += len(data)
    except (OSError, EOFError, zlib.error) as exc:
        reason = f"after line {first_line - 1}: {exc}"
        yield Batch(origin, sweep, "records", part=parts, first_line=first_line, unreadable=reason)


def stem(path: Path) -> str:
    """The name without .jsonl / .jsonl.gz / .json."""
    name = path.name.removesuffix(".gz")
    for suffix in (".jsonl", ".json"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _record_file(path: Path) -> bool:
    return path.name.endswith((".jsonl", ".jsonl.gz", ".json")) and not path.name.startswith(".")


def _open_binary(path: Path) -> Any:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def _read_text(path: Path) -> str:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    return path.read_text(encoding="utf-8")


def _is_record(item: Any) -> bool:
    return isinstance(item, dict) and "key" in item and "schema_version" in item


def _json_records(text: str) -> list[Any] | None:
    """The records of a ``.json`` file, or None when it holds none (a manifest, a config)."""
    data = json.loads(text)
    items = data if isinstance(data, list) else [data]
    return items if any(_is_record(item) for item in items) else None


def _looks_like_records(lines: list[str]) -> bool:
    """A JSON-lines file is records unless its first line parses to an object that is not one; a line that
    does not parse is left to validation, which reports it with its line number."""
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return True
    try:
        item = json.loads(first)
    except json.JSONDecodeError:
        return True
    return _is_record(item)
