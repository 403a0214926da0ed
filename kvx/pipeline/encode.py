"""Encode stage: the reader renders a source into token ids (with segment spans) and its hashes."""

from __future__ import annotations

import hashlib

import torch

from kvx.core.source import Source
from kvx.modeling.reader import LoadedReader, Prompt


def prompt_hash(prompt: Prompt) -> str:
    digest = hashlib.sha256()
    for ids in (prompt.context_ids, prompt.question_ids):
        digest.update(ids.detach().cpu().to(torch.int64).numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def encode(reader: LoadedReader, source: Source, joined: bool = False) -> Prompt:
    """``joined``: kvpress's query-aware input, the question appended to the context text."""
    return reader.render(source, joined)
