"""Transform stage: apply a text transform to a source and carry its evidence along.

Evidence spans inside a kept, unchanged segment move with it; spans inside a dropped or rewritten
segment (or across segments) are no longer addressable and are counted, never guessed.

A source with a stored pool (``Source.pool``: MuSiQue's twenty paragraphs behind a first-eight raw
input) is compressed from that pool: the transform reads the pool, evidence follows the pool's spans,
and the artifact key (the row's digest) covers the pool, so a stored artifact always names what its
compressor saw. The output keeps the raw source's metadata (its raw policy, reader measurements).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvx.core.errors import Unsupported
from kvx.core.records import ERROR, UNSUPPORTED, Record, versions
from kvx.core.source import Segment, Source
from kvx.modeling.reader import LoadedReader
from kvx.stores.artifacts import ArtifactStore
from kvx.transforms.base import Transform


@dataclass
class Transformed:
    """The source the reader gets after a transform, and what the record says about it."""

    source: Source
    info: dict[str, Any]


def transform_source(
    transform: Transform, name: str, source: Source, segments: Sequence[Segment] | None = None
) -> Transformed | None:
    """None for the identity transform (the stage is skipped and nothing is recorded). ``segments``:
    the transform's output when it is already known (a stored artifact), else it is computed from
    ``source.pool`` when the source has one, else from the source."""
    if transform.identity:
        return None
    read = source.pool or source
    original = read.parts()
    segments = list(transform.apply(read) if segments is None else segments)
    if not segments:
        raise ValueError(f"transform {name} kept no segment of source {source.id}")
    before = {s.id: (s.text, span) for s, span in zip(original, read.segment_spans())}
    after: dict[str, tuple[str, int]] = {}  # kept segment id -> (text, start in the new context)
    offset = 0
    for segment in segments:
        after[segment.id] = (segment.text, offset)
        offset += len(segment.text) + len(source.separator)
    evidence = []
    for start, end in read.evidence:
        home = next((i for i, (_, (lo, hi)) in before.items() if lo <= start and end <= hi), None)
        if home is not None and home in after and after[home][0] == before[home][0]:
            shift = after[home][1] - before[home][1][0]
            evidence.append((start + shift, end + shift))
    out = Source.from_segments(
        segments,
        source.separator,
        id=source.id,
        question=source.question,
        answers=source.answers,
        evidence=evidence,
        answer_prefix=source.answer_prefix,
        inline_prefix=source.inline_prefix,
        system=source.system,
        metadata=source.metadata,
    )
    info = {
        "name": name,
        "context_sha256": hashlib.sha256(out.context.encode()).hexdigest(),
        "kept_segment_ids": [s.id for s in segments],
        "n_segments": len(original),
        "evidence_kept": len(evidence),
        "evidence_total": len(read.evidence),
        **transform.provenance(source),
    }
    if source.pool is not None:
        info["input"] = "pool"  # the compressor read the stored pool, not the raw reader input
    return Transformed(out, info)


def transformed(
    store: ArtifactStore, transform: Transform, name: str, config: dict, reader: LoadedReader, source: Source
) -> Transformed | None:
    """The transform stage through the artifact store: each (row, transform ``config``) output is
    computed once and replayed byte-identically to every reader and cell (per reader only for
    transforms that use it), with a manifest of what produced it."""
    if transform.identity:
        return None
    # the row's pool as every reader sees it: one artifact per row across a panel
    scope = {"transform": config, "pool_sha256": source.digest(reader_free=True)}
    if transform.uses_reader:
        scope["reader"] = reader.key
    key = store.key(scope)
    stored = store.get(key)
    if stored is not None:
        segments = [Segment(**s) for s in stored["segments"]]
        out = transform_source(transform, name, source, segments)
        if out is None or out.info["context_sha256"] != stored["text_sha256"]:
            raise ValueError(
                f"stored artifact {store.path(key)} fails its sha256 check: delete it to recompute"
            )
        return out
    segments = list(transform.apply(source.pool or source))
    out = transform_source(transform, name, source, segments)
    assert out is not None
    manifest = {
        "row_id": source.id,
        **scope,
        **({"input": "pool"} if source.pool is not None else {}),
        "text_sha256": out.info["context_sha256"],
        "versions": versions(),
        "segments": [dataclasses.asdict(s) for s in segments],
    }
    store.put(key, manifest)
    return out


def fail_transform(record: Record, name: str, exc: Exception) -> None:
    """A transform that failed on a source: ``unsupported`` when it said it cannot apply, else an
    ``error`` naming the exception; never a wrong answer."""
    if isinstance(exc, Unsupported):
        record.fail(UNSUPPORTED, f"transform {name}: {exc}")
    else:
        record.fail(ERROR, f"transform {name}: {type(exc).__name__}: {exc}")
