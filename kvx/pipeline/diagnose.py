"""Diagnose stage: every selected diagnostic on one supported record, then its Table 4 category."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.categories import categorize, category_row
from kvx.diagnostics.context import DiagnosticContext
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
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Results by name and, for a C→W record, its category."""
    out = {}
    for name, diagnostic in diagnostics:
        with (tracer or Tracer()).stage(f"diagnostic:{name}") as span:
            if transformed and name in SAME_PROMPT:
                reason = "a text transform gave the compressed side another prompt than the FullCache control"
                out[name] = asdict(DiagnosticResult("not_applicable", reason=reason))
            else:
                out[name] = run_diagnostic(diagnostic, context)
            span.set_outputs(out[name])
    category = categorize(category_row(out)) if context.record.get("transition") == "C→W" else None
    return out, category
