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

from typing import Any

from kvx.core.identity import CellIdentity
from kvx.stores.json_files import JsonFiles, content_key


def answer_key(identity: CellIdentity, prompt_hash: str, source_digest: str) -> str:
    """A control's key: the source, its rendered prompt and what else determines the answer."""
    return content_key(answer=identity.answer_fields(), prompt=prompt_hash, source=source_digest)


def split_key(identity: CellIdentity, prompt_hash: str, source_digest: str) -> str:
    """The key kvx stored a control under before, with the split (seed, ``n_sources``) it was drawn in."""
    return content_key(split=identity.split, prompt=prompt_hash, source=source_digest)


class ControlStore(JsonFiles):
    """FullCache answers by ``answer_key``."""

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
