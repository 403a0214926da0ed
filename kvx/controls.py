"""The FullCache control store: each control is computed once per (task split, reader, decoding
config, prompt) and reused by every cell, in this sweep and in later ones.

Controls live as small JSON files under ``<outputs_dir>/controls/`` keyed by a hash of
everything that determines them, so a different prompt, scorer version, model revision or
decoding budget never reuses a stale answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def control_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class ControlStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.computed = 0  # controls computed (not loaded) by this process
        self.loaded = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.path(key)
        if not path.exists():
            return None
        self.loaded += 1
        return json.loads(path.read_text())

    def put(self, key: str, answer: dict[str, Any]) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(answer, fh)
        os.replace(tmp, path)  # atomic: parallel jobs never read half a file
        self.computed += 1
