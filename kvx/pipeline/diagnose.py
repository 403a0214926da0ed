"""Diagnose stage, which closes a source's record: the compressed answer evaluated and paired with its
control, every selected diagnostic run on it, then its Table 4 category."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from kvx.core.records import CW, ERROR
from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.categories import categorize, category_row
from kvx.diagnostics.context import DiagnosticContext
from kvx.modeling.costs import decode_cost
from kvx.modeling.generation import Generation
from kvx.modeling.reader import LoadedReader
from kvx.pipeline.cell import Job
from kvx.pipeline.evaluate import evaluate
from kvx.stores.tracing import Tracer

#: diagnostics that compare two caches of ONE prompt: a text transform gives the two sides
#: different prompts, so on transformed cells they are not applicable (decoding still runs)
SAME_PROMPT = ("coverage", "likelihood", "attention", "intervention")


def run_diagnostic(diagnostic: Diagnostic, context: DiagnosticContext) -> dict[str, Any]:
    """One diagnostic's result with its cost; a failure is an ``error`` result, never a gap."""
    started = time.perf_counter()
    try:
        result = diagnostic.measure(context)
    except Exception as exc:
        result = DiagnosticResult("error", reason=f"{type(exc).__name__}: {exc}")
    result.seconds = time.perf_counter() - started
    out = asdict(result)
    risk = getattr(diagnostic, "risk", None)
    if risk:  # self-describing records: the aggregate needs no plugin to read them
        out["risk"] = dict(risk)
    return out


def diagnose(
    diagnostics: list[tuple[str, Diagnostic]],
    context: DiagnosticContext,
    transformed: bool,
    tracer: Tracer | None = None,
    stored: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Results by name and, for a C→W record, its category. ``stored``: results that stand (those a
    finished cell already has, ``kvx.pipeline.rediagnose``), put back instead of measured again."""
    out: dict[str, Any] = {}
    context.results = out  # each diagnostic sees those before it, as stored
    for name, diagnostic in diagnostics:
        if stored and name in stored:
            out[name] = stored[name]
            if isinstance(diagnostic, Diagnostic):  # a duck-typed plugin hands nothing on
                diagnostic.restore(out[name], context)
            continue
        with (tracer or Tracer()).stage(f"diagnostic:{name}") as span:
            if transformed and name in SAME_PROMPT:
                reason = "a text transform gave the compressed side another prompt than the FullCache control"
                out[name] = asdict(DiagnosticResult("not_applicable", reason=reason))
            else:
                out[name] = run_diagnostic(diagnostic, context)
            span.set_outputs(out[name])
    category = categorize(category_row(out)) if context.record.get("transition") == CW else None
    return out, category


def close(job: Job, reader: LoadedReader, gen: Generation) -> None:
    """Evaluate the compressed answer, pair it with the control and run the diagnostics."""
    record, cell = job.record, job.cell
    try:
        with job.tracer.stage("evaluate") as span:
            answer = evaluate(cell.task, gen, job.source)
            span.set_outputs({"correct": answer.correct, "score": answer.score})
    except Exception as exc:  # recorded, counted, never scored as wrong
        record.fail(ERROR, f"{type(exc).__name__}: {exc}")
        return
    answer.cost = {**job.cost, **decode_cost(gen)} if job.cost is not None else None
    record.pair(record.full, answer)
    if cell.diagnostics:
        view = {
            "full": record.full.to_dict(),
            "compressed": answer.to_dict(),
            "transition": record.transition,
        }
        ctx = DiagnosticContext(
            reader,
            job.source,
            job.prompt,
            job.run,
            view,
            cell.max_new_tokens,
            lambda text: cell.task.evaluate(text, job.source).correct,
        )
        record.diagnostics, record.category = diagnose(
            cell.diagnostics, ctx, job.transformed is not None, job.tracer
        )
