"""Coverage diagnostic: slot-averaged ERR and ECov (tau = 0.5) over aligned evidence tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext
from kvx.diagnostics.coverage import slot_coverage


@dataclass
class Coverage(Diagnostic):
    """Measured for direct maps, projected for chunk maps, structural for ThinK/HQQ, else N/A."""

    risk: ClassVar[dict[str, str]] = {"err": "lower", "ecov": "lower"}

    tau: float = 0.5

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        retained = context.run.retained
        if retained is None or retained.status == "not_applicable":
            return DiagnosticResult("not_applicable", reason=retained.reason if retained else "no map")
        if retained.status == "structural":
            return DiagnosticResult("structural", reason=retained.reason)
        alignment = context.alignment
        if not alignment.ok:
            return DiagnosticResult("not_applicable", reason=f"evidence alignment: {alignment.reason}")
        values = dict(slot_coverage(retained.mask, alignment.spans, self.tau))
        values["evidence_share"] = values["evidence_tokens"] / retained.mask.shape[1]
        return DiagnosticResult(retained.status, values)  # type: ignore[arg-type]
