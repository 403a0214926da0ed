"""The shared loader and base task for kvpress's evaluation datasets.

kvpress (``evaluation/evaluate.py``) reads each benchmark as a Hugging Face dataset,
``load_dataset(hub_id, data_dir=<subset>, split="test")``, whose rows hold ``context``, ``question``,
``answer_prefix``, the reference(s) and ``max_new_tokens`` (the prompts are already rendered by the
benchmark's ``create_huggingface_dataset.py``), and prompts the model with the chat template around
``context + question`` and ``answer_prefix`` after it, as kvx's readers do. A task here reads the same
rows: ``task.path`` is the hub id (its snapshot in the local Hugging Face cache when there is one,
else the hub) or a local copy in the same format (a folder in the hub's layout,
``<subset>/test-*.parquet``; a folder written by ``save_to_disk``; or one parquet / JSONL / arrow
file), and ``task.subset`` picks the benchmark's subset: its hub folder, and the rows whose ``task``
column names it.

Each row is one source, its prompt unchanged. kvpress decodes each row with the row's own
``max_new_tokens``; in kvx the budget belongs to the cell, so a subset's rows must share one budget (every
kvpress subset does), which becomes the task's ``max_new_tokens``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError, one_line
from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import seeded_order

#: the columns every kvpress dataset has (each benchmark adds its reference column and what its metric reads)
COLUMNS = ("context", "question", "answer_prefix", "max_new_tokens")
#: the split kvpress evaluates (``evaluate.py``: ``split="test"``)
SPLIT = "test"
#: a graded score this close to 1 is a perfect answer: the ``rouge`` package's F of identical texts is
#: 1 - 5e-9 (its 1e-8 smoothing)
PERFECT = 1 - 1e-6
#: the ``datasets`` builder of each single-file format
BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".arrow": "arrow"}


def graded(value: float, normalized: str, **kw: Any) -> Score:
    """A score in [0, 1] that is correct when perfect (``PERFECT``)."""
    return Score(float(value), float(value) >= PERFECT, normalized, **kw)


def is_local(path: str) -> bool:
    """A filesystem path, not a hub id: it exists, or is spelled as one (absolute, ``./``, ``~``)."""
    return Path(path).expanduser().exists() or path.startswith(("/", ".", "~"))


def _saved(folder: Path) -> bool:
    """A folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def _split(loaded: Any, where: str) -> Any:
    """The test split of a DatasetDict (or its only split); a Dataset as it is."""
    import datasets

    if isinstance(loaded, datasets.Dataset):
        return loaded
    if SPLIT in loaded:
        return loaded[SPLIT]
    if len(loaded) == 1:
        return next(iter(loaded.values()))
    raise ConfigError(
        f"{where} has splits {sorted(loaded)} and no {SPLIT!r} split (kvpress evaluates {SPLIT!r})"
    )


def hub_snapshot(hub_id: str) -> Path | None:
    """The hub dataset's snapshot in the local Hugging Face cache (the one ``refs/main`` names, else the
    only one): the hub's own layout, read offline like any local copy. None when it is not cached."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / f"datasets--{hub_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if ref.is_file() and (repo / "snapshots" / ref.read_text().strip()).is_dir():
        return repo / "snapshots" / ref.read_text().strip()
    snapshots = [p for p in (repo / "snapshots").glob("*") if p.is_dir()]
    return snapshots[0] if len(snapshots) == 1 else None


def _read(path: str, data_dir: str | None) -> tuple[Any, bool]:
    """(rows, narrowed): the dataset at ``path``, and whether ``data_dir`` narrowed it to one subset."""
    import datasets
    from huggingface_hub import constants

    where = f"task.path={path}"
    if is_local(path):
        local = Path(path).expanduser()
    elif (snapshot := hub_snapshot(path)) is not None:
        local = snapshot
    elif constants.HF_HUB_OFFLINE:
        raise ConfigError(
            f"{where}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; download it "
            f"(huggingface-cli download --repo-type dataset {path}) or give task.path=<a local copy>"
        )
    else:
        return datasets.load_dataset(path, data_dir=data_dir, split=SPLIT), data_dir is not None
    if not local.exists():
        raise ConfigError(f"{where}: no such file or folder (a kvpress dataset: its hub id or a local copy)")
    if local.is_file():
        builder = BUILDERS.get(local.suffix)
        if builder is None:
            raise ConfigError(f"{where}: a {local.suffix or 'suffixless'} file; kvx reads {sorted(BUILDERS)}")
        return _split(datasets.load_dataset(builder, data_files=str(local.resolve())), where), False
    folder = local / data_dir if data_dir and (local / data_dir).is_dir() else local
    if _saved(folder):
        return _split(datasets.load_from_disk(str(folder)), where), folder != local
    return _split(datasets.load_dataset(str(folder.resolve())), where), folder != local


@functools.lru_cache(maxsize=8)
def load_rows(path: str, data_dir: str | None, subset: str, stamp: int) -> Any:
    """The rows of one subset as a ``datasets.Dataset``, read once per (path, subset, version).

    ``data_dir`` is the subset's folder (the hub's ``data_dir``; a local copy without it is read
    whole); rows whose ``task`` column is not ``subset`` are then left out ("" keeps every row).
    Any failure to read is a ConfigError naming the path, raised before any model loads."""
    try:
        rows, narrowed = _read(path, data_dir)
    except ConfigError:
        raise
    except Exception as exc:  # datasets raises many types: a missing hub dataset offline, a bad file
        hint = "" if is_local(path) else " (kvx runs offline: download the dataset and give its local copy)"
        raise ConfigError(
            f"task.path={path} (data_dir {data_dir}): cannot read it: {one_line(exc)}{hint}"
        ) from None
    if subset and "task" in rows.column_names:
        found = sorted(set(rows["task"]))
        rows = rows.filter(lambda task: task == subset, input_columns="task")
        if not len(rows):
            raise ConfigError(
                f"task.path={path}: no row of subset {subset!r}; its 'task' column holds {found}"
            )
    elif subset and not narrowed:
        raise ConfigError(
            f"task.path={path}: cannot tell the rows of subset {subset!r}: no folder {data_dir!r} in it "
            "and no 'task' column"
        )
    if not len(rows):
        raise ConfigError(f"task.path={path}: the dataset holds no rows")
    return rows


def _stamp(path: str) -> int:
    """The local copy's (or cached snapshot's) modification time, so a rewritten copy is read again;
    0 for a hub id read from the hub."""
    local = Path(path).expanduser() if is_local(path) else hub_snapshot(path)
    return local.stat().st_mtime_ns if local is not None and local.exists() else 0


@dataclass
class KvpressTask(Task):
    """One kvpress benchmark: ``task.path`` (hub id or local copy) and ``task.subset``.

    Subclasses set ``hub_id`` (the default path), ``subsets`` (``""`` among them when the whole
    dataset is one subset), ``answer_column`` and ``metadata_columns`` (the row's fields their metric
    reads), and implement ``evaluate``. ``folder`` and ``row_source`` are the hooks for datasets
    whose folder is not the subset's name or whose rows need more than kvpress's columns.
    """

    path: str = ""  # "": the benchmark's hub id
    subset: str = ""

    #: the dataset's id in kvpress's ``DATASET_REGISTRY``
    hub_id: ClassVar[str] = ""
    #: the benchmark's name in source ids (``longbench_narrativeqa_000012``)
    benchmark: ClassVar[str] = ""
    subsets: ClassVar[tuple[str, ...]] = ("",)
    #: the column of the reference(s): a string or a list of strings
    answer_column: ClassVar[str] = "answer"
    #: columns copied into each source's metadata for the metric (LongBench's ``all_classes``)
    metadata_columns: ClassVar[tuple[str, ...]] = ()

    def location(self) -> str:
        return self.path or self.hub_id

    def folder(self) -> str | None:
        """The subset's folder in the hub dataset (kvpress's ``data_dir``); None: the dataset's root."""
        return self.subset or None

    def validate(self) -> None:
        check_choice("task.subset", self.subset, self.subsets)
        rows = self.rows()
        needed = [*COLUMNS, self.answer_column, *self.metadata_columns]
        missing = [name for name in needed if name not in rows.column_names]
        if missing:
            raise ConfigError(
                f"task.path={self.location()}: no column(s) {missing} (kvpress's format has {needed}); "
                f"it has {rows.column_names}"
            )
        self.budget()

    def rows(self) -> Any:
        """The subset's rows (``datasets.Dataset``), cached per file version."""
        path = self.location()
        return load_rows(path, self.folder(), self.subset, _stamp(path))

    def budget(self) -> int:
        """The subset's decoding budget: the ``max_new_tokens`` its rows share (kvpress decodes each row
        with its own; a cell has one)."""
        budgets = sorted({int(b) for b in self.rows()["max_new_tokens"]})
        if len(budgets) > 1:
            choices = [s for s in self.subsets if s]
            raise ConfigError(
                f"task.path={self.location()} subset {self.subset!r}: rows with max_new_tokens {budgets}; "
                f"a cell decodes with one budget: choose task.subset= one of {choices}"
            )
        return budgets[0]

    @property
    def max_new_tokens(self) -> int:  # type: ignore[override]  # the data's, not a class constant
        return self.budget()

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        """Where the rows came from (hub id or resolved local path), the subset and its size, and the
        fingerprint ``datasets`` gives the table read."""
        rows, path = self.rows(), self.location()
        snapshot = None if is_local(path) else hub_snapshot(path)
        return {
            "path": str(Path(path).expanduser().resolve()) if is_local(path) else path,
            "snapshot": str(snapshot) if snapshot is not None else None,
            "data_dir": self.folder(),
            "subset": self.subset,
            "rows": len(rows),
            "fingerprint": getattr(rows, "_fingerprint", None),
            "max_new_tokens": self.budget(),
            "sources": n,
        }

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        rows = self.rows()
        return [
            self.row_source(index, rows[index], count_tokens) for index in seeded_order(len(rows), n, seed)
        ]

    def answers(self, row: dict[str, Any]) -> list[str]:
        """The row's references as strings (one string or a list)."""
        value = row[self.answer_column]
        items: Sequence[Any] = [value] if isinstance(value, str) else list(value or [])
        return [str(item) for item in items]

    def row_source(self, index: int, row: dict[str, Any], count_tokens: CountTokens) -> Source:
        """One row as a source: kvpress's context, question and answer prefix unchanged."""
        metadata: dict[str, Any] = {"row": index, "task": row.get("task", self.subset)}
        if row.get("_id") is not None:
            metadata["_id"] = row["_id"]
        metadata.update({name: row[name] for name in self.metadata_columns})
        metadata["prompt_tokens"] = count_tokens(f"{row['context']}\n{row['question']}")
        return Source(
            id=f"{self.benchmark}_{self.subset or 'all'}_{index:06d}",
            context=row["context"],
            question=row["question"],
            answers=self.answers(row),
            answer_prefix=row["answer_prefix"] or "",
            metadata=metadata,
        )
