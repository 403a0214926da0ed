"""Encode stage: the reader renders a source into token ids (with segment spans) and its hashes."""

from __future__ import annotations

import hashlib

import torch

from kvx.readers.base import LoadedReader, Prompt
from kvx.tasks.base import Source


def ids_digest(ids: torch.Tensor) -> str:
    """Content key of a token-id tensor (captured prefills, shared compressed contexts)."""
    return hashlib.sha256(ids.detach().cpu().to(torch.int64).numpy().tobytes()).hexdigest()


def prompt_hash(prompt: Prompt) -> str:
    digest = hashlib.sha256()
    for ids in (prompt.context_ids, prompt.question_ids):
        digest.update(ids.detach().cpu().to(torch.int64).numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def encode(reader: LoadedReader, source: Source) -> Prompt:
    return reader.render(source)
