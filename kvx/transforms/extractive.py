"""Extractive sentence selection (ragscale's extractive text compressor): keep the sentences of the
candidate passages most similar to the question under a sentence-embedding model.

Passages are split into sentences with a regex (no sentence model is installable offline); each
sentence and the question are embedded (all-MiniLM-L6-v2 by default, offline); the ``k`` most
cosine-similar sentences are kept (ties: the earlier sentence), in supplied order, each under its
passage's title line. Passages with no kept sentence are dropped; instructions are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvx.core.checks import check_int
from kvx.core.errors import Unsupported
from kvx.core.ranking import top_k
from kvx.core.source import Segment, Source
from kvx.modeling.embeddings import MINILM, check_encoder, encoder
from kvx.transforms.base import Transform, query

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")


def sentences(text: str) -> list[str]:
    """The text's sentences, stripped, in order (a regex split on . ! ? and line breaks)."""
    return [m.group().strip() for m in _SENTENCE.finditer(text) if m.group().strip()]


def similarities(question: str, texts: Sequence[str], model: str = MINILM) -> list[float]:
    """Cosine similarity of each text to the question."""
    emb = encoder(model).encode([question, *texts], convert_to_numpy=True, normalize_embeddings=True)
    return [float(x) for x in emb[1:] @ emb[0]]


@dataclass
class ExtractiveSentences(Transform):
    """``transform=extractive_minilm transform.k=5``: the k question-closest sentences of the pool."""

    k: int = 5
    model: str = MINILM

    def validate(self) -> None:
        check_int("transform.k", self.k, 1)
        check_encoder("transform.model", self.model)

    def apply(self, source: Source) -> Sequence[Segment]:
        parts = source.parts()
        pool = [(s, sentences(s.text.removeprefix(header(s)))) for s in parts if s.role == "passage"]
        if not pool:
            raise Unsupported(f"source {source.id} has no passage segments to select sentences from")
        flat = [(i, j) for i, (_, sents) in enumerate(pool) for j in range(len(sents))]
        texts = [pool[i][1][j] for i, j in flat]
        kept = set(top_k(similarities(query(source), texts, self.model), self.k)) if texts else set()
        chosen: dict[str, list[str]] = {}
        for n, (i, j) in enumerate(flat):
            if n in kept:
                chosen.setdefault(pool[i][0].id, []).append(pool[i][1][j])
        return rewrite_passages(source, lambda segment, _: " ".join(chosen.get(segment.id, [])))


def header(segment: Segment) -> str:
    """The passage's leading "Document n:\n<title>\n" lines (HotpotQA's layout), kept with its sentences."""
    match = re.match(r"(Document \d+:\n[^\n]*\n)", segment.text)
    return match.group(1) if match else ""


def rewrite_passages(source: Source, rewrite: Callable[[Segment, str], str]) -> list[Segment]:
    """Each passage's body (after its header) replaced by ``rewrite(passage, body)``, in supplied order;
    passages rewritten to nothing are dropped, other segments kept (per-passage pruners)."""
    parts = source.parts()
    if not any(s.role == "passage" for s in parts):
        raise Unsupported(f"source {source.id} has no passage segments to compress")
    out = []
    for segment in parts:
        if segment.role != "passage":
            out.append(segment)
            continue
        text = rewrite(segment, segment.text.removeprefix(header(segment))).strip()
        if text:
            out.append(Segment(segment.id, header(segment) + text, segment.role, segment.title))
    return out
