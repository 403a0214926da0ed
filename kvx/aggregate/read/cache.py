"""Validated record files kept between aggregates, so an unchanged file is not read twice.

Reading, validating and projecting records is most of an aggregate's CPU (the imported KVDiagnosis
release: ~12 of ~35 CPU-seconds), and a researcher aggregates the same record directory again and again
with other options. What validation made of each part of a file (its rows, problems and counts) is kept
under the user cache folder, keyed by the file (resolved path, size, modification and change times,
inode), the part, and a fingerprint of every module that reads records plus the libraries its pickles
need. Any change to the file or to that code is a miss, read afresh; an entry that cannot be read is a
miss too. Entries are written whole (a temporary file renamed), so a killed aggregate or two at once
never leave half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
import tempfile
import time
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvx.core.cache import cache_dir

#: the folders of kvx whose code decides what a record file validates to (schema, upgrade, rows, categories)
READING_CODE = ("aggregate/read", "core", "diagnostics", "schemas")
#: the cache is pruned to this size after each aggregate, least recently used entries first
CACHE_BYTES = 1 << 30
SUFFIX = ".kept"


def default_root() -> Path:
    """Where an aggregate keeps what it may reuse: validated record files, and drawn figures."""
    return cache_dir() / "aggregate"


def key_path(root: Path, *parts: Any) -> Path:
    """The entry of a key made of JSON-able ``parts`` (bytes hashed as they are)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, default=str).encode())
        digest.update(b"\0")
    key = digest.hexdigest()
    return root / key[:2] / f"{key}{SUFFIX}"


@lru_cache(maxsize=4)
def fingerprint(folders: tuple[str, ...] = READING_CODE) -> str:
    """The sources under ``folders`` of kvx (the reading code by default) and the versions a pickle
    depends on, hashed."""
    digest = hashlib.sha256(json.dumps([sys.version, np.__version__, pd.__version__]).encode())
    kvx = Path(__file__).parents[2]  # kvx/aggregate/read/cache.py
    for name in folders:
        folder = kvx / name
        for path in sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".json")):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def entries(root: Path, path: Path, parts: int, identity: list[Any]) -> list[Path] | None:
    """Where each part of ``path`` is kept; None when the file cannot be stat'ed (validation says why).
    ``identity`` is whatever else the rows carry (origin, sweep, kind): other values, other entries."""
    try:
        stat = path.stat()
        resolved = str(path.resolve())
    except OSError:
        return None
    file = [resolved, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, parts, *identity]
    return [key_path(root / "records", fingerprint(), file, part) for part in range(parts)]


def load(entry: Path) -> Any | None:
    """The kept validation, or None when the entry is gone or unreadable (then read the file)."""
    try:
        value = pickle.loads(zlib.decompress(entry.read_bytes()))
        os.utime(entry)  # used now: pruned last
    except Exception:  # noqa: BLE001 - any damaged entry is a miss, never an error
        return None
    return value


def store(entry: Path, value: Any) -> str | None:
    """Keep ``value`` at ``entry``; the reason when it could not be written (the aggregate goes on)."""
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        data = zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, entry)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return f"not cached at {entry.parent}: {exc}"
    return None


def prune(root: Path, keep_bytes: int = CACHE_BYTES) -> None:
    """Delete the least recently used entries until the cache holds at most ``keep_bytes``, and what a
    killed aggregate left half-written an hour ago or more."""
    stale = time.time() - 3600
    for path in root.glob("*/*/*.tmp"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < stale:
                path.unlink()
    found = []
    for path in root.glob(f"*/*/*{SUFFIX}"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append((stat.st_mtime_ns, stat.st_size, path))
    total = sum(size for _, size, _ in found)
    for _, size, path in sorted(found):
        if total <= keep_bytes:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
