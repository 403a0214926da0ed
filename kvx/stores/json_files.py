"""Content-addressed JSON files: the store under FullCache controls and transform artifacts.

Each object is a small JSON file under ``<root>/<key[:2]>/<key>.json``, where the key is a hash of
everything that determines it; files are replaced atomically, so parallel jobs never read half of
one, and a file that does not parse is moved aside and recomputed, never read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("kvx")


def content_key(**parts: Any) -> str:
    """The key of what ``parts`` determine (a sha256 of their canonical JSON)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class JsonFiles:
    """One small JSON object per key under ``root``, written atomically and read defensively."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.computed = 0  # objects computed (not loaded) by this process
        self.loaded = 0
        self.corrupt = 0  # unreadable files moved aside

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored object, or None; a file that does not parse (a torn copy, a bad disk) is moved
        aside as ``.corrupt`` with a warning and recomputed, never read as one."""
        path = self.path(key)
        try:
            value = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as exc:
            return self._aside(path, f"does not parse ({exc})")
        if not isinstance(value, dict):
            return self._aside(path, f"holds a {type(value).__name__}, not an object")
        self.loaded += 1
        return value

    def _aside(self, path: Path, problem: str) -> None:
        aside = path.with_suffix(".corrupt")
        os.replace(path, aside)
        self.corrupt += 1
        log.warning("%s %s; moved to %s and recomputed", path, problem, aside.name)

    def put(self, key: str, value: dict[str, Any], computed: bool = True) -> None:
        """Store an object; ``computed=False`` when it only completes a stored one (not counted)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)  # atomic: parallel jobs never read half a file
        self.computed += computed
