"""Evaluate stage: one decoded answer, evaluated once by its task."""

from __future__ import annotations

from kvx.generation import Generation
from kvx.records import Answer
from kvx.tasks.base import Source, Task


def evaluate(task: Task, gen: Generation, source: Source) -> Answer:
    score = task.evaluate(gen.text, source)
    return Answer(
        output=gen.text,
        normalized=score.normalized,
        score=float(score.value),
        correct=bool(score.correct),
        token_ids=gen.token_ids,
        stop_reason=gen.stop_reason,
        metrics={k: float(v) for k, v in score.metrics.items()},
        details=dict(score.details),
    )
