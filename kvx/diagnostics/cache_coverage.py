"""Coverage diagnostic: slot-averaged ERR and ECov (tau = 0.5) over aligned evidence tokens.

Slots are those of the layers compression touched. A layer left whole (Gemma3's sliding-window
layers) holds every position, though its window lets only the last ``sliding_window`` be attended;
no compressor acted on it, so counting it as full coverage would only inflate ERR/ECov.
``n_slots`` counts the averaged slots, ``n_layers_untouched`` the layers left out. For a structured
context, ``segments`` gives each segment's slot-averaged retained share (segment id -> share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext
from kvx.diagnostics.coverage import segment_retention, slot_coverage


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
        slots = retained.compressed_slots()
        if slots.shape[0] == 0:
            return DiagnosticResult("not_applicable", reason="compression touched no layer")
        values: dict[str, float | int] = dict(slot_coverage(slots, alignment.spans, self.tau))
        values["n_layers_untouched"] = retained.compressed.count(False) if retained.compressed else 0
        values["evidence_share"] = values["evidence_tokens"] / retained.mask.shape[1]
        spans = context.prompt.segment_spans
        if context.source.segments and spans is not None:  # which turns / passages the cache still holds
            shares = segment_retention(slots, spans)
            values["segments"] = {s.id: share for s, share in zip(context.source.segments, shares)}
        return DiagnosticResult(retained.status, values)  # type: ignore[arg-type]
