"""The FullCache control store: each control is computed once per (source content, prompt as the
reader rendered it, task and scorer version, reader, decoding budget) and reused by every cell, in
this sweep and in later ones, whatever split drew the source.

Controls live as small JSON files under ``<outputs_dir>/controls/`` keyed by a hash of
everything that determines them, so a different prompt, scorer version, model revision or
decoding budget never reuses a stale answer, and a larger ``n_sources`` or another seed that draws
a source again never recomputes it. Stores written before keyed each control by its split too:
those keys are still read (``split_key``) and the answer found there is stored under the new key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from kvx.core.identity import CellIdentity

log = logging.getLogger("kvx")


def control_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def answer_key(identity: CellIdentity, prompt_hash: str, source_digest: str) -> str:
    """A control's key: the source, its rendered prompt and what else determines the answer."""
    return control_key(answer=identity.answer_fields(), prompt=prompt_hash, source=source_digest)


def split_key(identity: CellIdentity, prompt_hash: str, source_digest: str) -> str:
    """The key kvx stored a control under before, with the split (seed, ``n_sources``) it was drawn in."""
    return control_key(split=identity.split, prompt=prompt_hash, source=source_digest)


class ControlStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.computed = 0  # controls computed (not loaded) by this process
        self.loaded = 0
        self.corrupt = 0  # unreadable files moved aside

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored answer, or None; a file that does not parse (a torn copy, a bad disk) is moved
        aside as ``.corrupt`` with a warning and recomputed, never read as an answer."""
        path = self.path(key)
        try:
            answer = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as exc:
            return self._aside(path, f"does not parse ({exc})")
        if not isinstance(answer, dict):
            return self._aside(path, f"holds a {type(answer).__name__}, not an object")
        self.loaded += 1
        return answer

    def find(self, key: str, *older: str) -> dict[str, Any] | None:
        """The answer under ``key``, or else under the first of the ``older`` keys that holds one;
        one found there is stored under ``key`` (loaded, not computed) and left where it was, so a
        kvx that still reads the older key finds it too."""
        for candidate in (key, *older):
            answer = self.get(candidate)
            if answer is not None:
                if candidate != key:
                    self.put(key, answer, computed=False)
                return answer
        return None

    def _aside(self, path: Path, problem: str) -> None:
        aside = path.with_suffix(".corrupt")
        os.replace(path, aside)
        self.corrupt += 1
        log.warning("%s %s; moved to %s and recomputed", path, problem, aside.name)

    def put(self, key: str, answer: dict[str, Any], computed: bool = True) -> None:
        """Store an answer; ``computed=False`` when it only completes a stored one (not counted)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(answer, fh)
        os.replace(tmp, path)  # atomic: parallel jobs never read half a file
        self.computed += computed
