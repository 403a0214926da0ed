"""Decoding diagnostic: what each decoder evaluated and emitted, why it stopped, gold ranks."""

from __future__ import annotations

from dataclasses import dataclass

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext


@dataclass
class Decoding(Diagnostic):
    """Always measurable for a supported record; gold ranks only when likelihood ran first."""

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        from kvx.modeling.generation import eos_ids  # imports torch: only once a model runs

        eos = set(eos_ids(context.reader.model))
        values = {}
        for side in ("full", "compressed"):
            answer = context.record[side]
            values[f"{side}_evaluated_tokens"] = len(answer["token_ids"])
            values[f"{side}_emitted_tokens"] = sum(t not in eos for t in answer["token_ids"])
            values[f"{side}_stop_reason"] = answer["stop_reason"]
            values[f"{side}_normalized"] = answer["normalized"]
        values.update(context.shared.get("gold_ranks", {}))
        return DiagnosticResult("measured", values)
