"""Evaluate stage: one decoded answer, evaluated once by its task."""

from __future__ import annotations

from kvx.core.records import Answer
from kvx.core.source import Source
from kvx.modeling.generation import Generation
from kvx.tasks.base import Task


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
