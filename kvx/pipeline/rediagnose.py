"""Diagnostics added to a finished cell: its recorded answers stand, only the diagnostic passes run.

A cell's identity leaves its diagnostics out ([Cells](cells.md)), so a finished cell asked for other
diagnostics is the same cell, and its records' answers (the FullCache control's and the compressed one)
are what a rerun would decode again. Instead, each supported record is diagnosed on its recorded answers:
the compressed cache (and the prefill it is built from) is rebuilt only when a diagnostic first reads it,
the question is then fed after it once, as a decode's first step does, for the likelihood's first-token
logits, and no answer is decoded. Stored results of the diagnostics the finished run already had, in
the same leading places and with the same fields, stand (``kept_diagnostics``): a later diagnostic reads
only results before it, so those are the ones a rerun would compute again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvx.core.records import SUPPORTED, Record
from kvx.core.source import Source
from kvx.diagnostics.context import DiagnosticContext
from kvx.modeling.compressed import CompressedRun
from kvx.modeling.layers import clear_head_masks
from kvx.modeling.reader import LoadedReader, Prompt
from kvx.pipeline.cell import Member
from kvx.pipeline.compress import compress_job
from kvx.pipeline.decode import feed_question
from kvx.pipeline.diagnose import diagnose
from kvx.pipeline.encode import encode
from kvx.pipeline.source import Stages, open_job


@dataclass
class Answered:
    """A finished cell's records by key, whose answers stand, and the diagnostics whose stored results
    stand with them."""

    records: dict[str, Record]
    kept: tuple[str, ...] = ()


def kept_diagnostics(before: str, labels: list[tuple[str, str]]) -> tuple[str, ...]:
    """The leading diagnostics of ``labels`` ((name, label) in run order) that the finished run had in
    the same places with the same fields (``before``: its labels joined by ","): a diagnostic reads
    the results before it, so only a shared prefix of the run order stands."""
    kept: list[str] = []
    for i, (name, _) in enumerate(labels):
        prefix = ",".join(label for _, label in labels[: i + 1])
        if before != prefix and not before.startswith(prefix + ","):
            break
        kept.append(name)
    return tuple(kept)


def rediagnose_source(
    stages: Stages,
    reader: LoadedReader,
    members: list[Member],
    source: Source,
    recorded: list[Record],
    kept: list[tuple[str, ...]],
    release: bool,
) -> list[Record | None]:
    """Each member cell's record of ``source`` with its diagnostics run again on its recorded answers;
    None where the recorded answer was for another prompt (the task's text changed): that cell's source
    must be computed afresh."""
    with reader.autocast(), stages.caches.holding(release):
        prompt = encode(reader, source)
        return [
            _rediagnose(stages, reader, member, source, prompt, record, names)
            for member, record, names in zip(members, recorded, kept, strict=True)
        ]


def _rediagnose(
    stages: Stages,
    reader: LoadedReader,
    member: Member,
    source: Source,
    prompt: Prompt,
    recorded: Record,
    kept: tuple[str, ...],
) -> Record | None:
    cell = member.cell
    fresh, job = open_job(stages.artifacts, member, reader, source, prompt)
    if fresh.prompt_hash != recorded.prompt_hash:
        return None
    record = Record.from_dict(recorded.to_dict())
    record.config_hash = fresh.config_hash  # the run's configuration names its diagnostics
    if record.status != SUPPORTED or record.full is None or record.compressed is None:
        return record  # unsupported and errored records carry no diagnostics
    if job is None:  # the setting no longer resolves as it did: what a rerun records
        return fresh
    record.diagnostics = record.category = None
    if not cell.diagnostics:
        return record

    def built() -> CompressedRun:
        clear_head_masks(reader.model)
        compress_job(job, stages.caches, reader)
        if job.run is None or job.cache is None:
            raise RuntimeError(f"compression: {job.record.reason}")
        feed_question(reader, job.run, job.cache)
        return job.run

    view = {
        "full": record.full.to_dict(),
        "compressed": record.compressed.to_dict(),
        "transition": record.transition,
    }
    ctx = DiagnosticContext(
        reader,
        job.source,
        job.prompt,
        built,
        view,
        cell.max_new_tokens,
        lambda text: cell.task.evaluate(text, job.source).correct,
    )
    stored = {name: recorded.diagnostics[name] for name in kept if name in (recorded.diagnostics or {})}
    try:
        record.diagnostics, record.category = diagnose(
            cell.diagnostics, ctx, job.transformed is not None, member.tracer, stored
        )
    finally:
        clear_head_masks(reader.model)  # an AdaKV compression's head masks
    return record
