"""Importers: convert results published elsewhere into a kvx record directory.

``python -m kvx.importers NAME PATH --out DIR`` writes what ``python -m kvx.aggregate --records DIR``
reads: ``<task>.jsonl.gz`` record files, ``<split>.controls.jsonl.gz`` FullCache control ledgers and an
``import_manifest.json`` saying what was read, how each field was mapped and what stayed unknown.
Imported records are external (``provenance.origin == "external"``): a field the source does not
have is null and named, with the reason, in ``provenance.unknown``; nothing is filled in.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kvx import __version__
from kvx.core.records import UNKNOWABLE, Answer, Record

#: importer name -> module with ``add_arguments(parser)`` and ``run(args) -> int``
IMPORTERS = {
    "kvdiagnosis": "kvx.importers.kvdiagnosis",
    "kvpress": "kvx.importers.kvpress",
    "tpbench": "kvx.importers.tpbench",
}
MANIFEST = "import_manifest.json"
RECORDS_SUFFIX = ".jsonl.gz"
CONTROLS_SUFFIX = ".controls.jsonl.gz"


def finite(value: Any) -> float | None:
    """A finite JSON number, else None (null, an N/A object, a bool or a string are missing, never 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class BadInput(Exception):
    """Input that cannot be imported: reported as one ``kvx.importers: ...`` line, exit code 2."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class JsonlGzWriter:
    """One gzip JSON Lines file written line by line (mtime 0: the same input gives the same bytes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._raw = path.open("wb")
        self._zip = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
        self._text = io.TextIOWrapper(self._zip, encoding="utf-8", newline="\n")

    def write_line(self, line: str) -> None:
        """One JSON text, already serialized (``kvx.core.records.dumps`` for records)."""
        self._text.write(line if line.endswith("\n") else line + "\n")
        self.count += 1

    def write(self, obj: dict[str, Any]) -> None:
        self.write_line(json.dumps(obj, ensure_ascii=False))

    def close(self) -> None:
        self._text.close()  # closes the gzip stream and the file under it
        self._raw.close()


def manifest_head(importer: str, seconds: float) -> dict[str, Any]:
    """What every import manifest opens with: the importer, kvx's version, when and how long."""
    return {
        "importer": importer,
        "kvx": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 3),
    }


def unknown_summary(unknown: Counter) -> dict[str, dict[str, Any]]:
    """``(field, reason) -> records`` as a manifest lists it: per field, its records and each reason's."""
    out: dict[str, dict[str, Any]] = {}
    for (name, reason), n in sorted(unknown.items()):
        out.setdefault(name, {"records": 0, "reasons": {}})
        out[name]["records"] += n
        out[name]["reasons"][reason] = n
    return out


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A hidden sibling folder to write the import into, renamed to ``out`` (which must be new or
    empty) only when the block finishes: a failed or killed import leaves no half-written folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out} exists and is not an empty folder; give a new one")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def unknown_nulls(record: Record, reasons: Mapping[str, str]) -> dict[str, str]:
    """Why each ``UNKNOWABLE`` field the record leaves null is unknown (``reasons`` by the field's
    last name: ``model_revision``, ``token_ids``); the record's own nulls only."""
    out: dict[str, str] = {}
    for path in UNKNOWABLE:
        head, _, tail = path.partition(".")
        node = getattr(record, head)
        if tail:
            if isinstance(node, Answer) and getattr(node, tail) is None:
                out[path] = reasons[tail]
        elif node is None:
            out[path] = reasons[head]
    return out
