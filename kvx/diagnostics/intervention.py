"""Evidence-boost intervention (KVDiagnosis section 5.3): does giving retained evidence more
attention repair a failure, and more than boosting as many non-evidence positions does?

Holding the compressed cache and the greedy decoder fixed, ``log(boost)`` is added to the
attention logits of the cache rows that hold retained evidence (every layer and KV head), and,
as a sham, to the same number of deterministic non-evidence rows per layer and head. Each is
decoded on the eager per-layer attention next to an unboosted eager baseline. C->W rows
report repairs, C->C rows (the matched safety controls) report degradations. Which rows run it
is ``cohort`` (``kvx.diagnostics.cohort``): by default the paper's low-EAR cohort, read from the
coverage, likelihood and attention results of the same record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvx.core.errors import ConfigError
from kvx.core.records import CW
from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.cohort import COHORT_READS, COHORTS, cohort_role
from kvx.diagnostics.context import DiagnosticContext
from kvx.modeling.layers import attention_layers
from kvx.modeling.reader import attn_implementation

if TYPE_CHECKING:  # torch, transformers and kvpress are imported where used, not when the plugin loads
    import torch


def sham_rows(is_evidence: torch.Tensor) -> torch.Tensor:
    """Per head, as many non-evidence rows as evidence rows, evenly spread (deterministic)."""
    import torch

    sham = torch.zeros_like(is_evidence)
    for head in range(is_evidence.shape[0]):
        count = int(is_evidence[head].sum())
        candidates = (~is_evidence[head]).nonzero().flatten()
        if count == 0 or len(candidates) == 0:
            continue
        picks = torch.linspace(0, len(candidates) - 1, min(count, len(candidates))).round().long()
        sham[head, candidates[picks]] = True
    return sham


@dataclass
class Intervention(Diagnostic):
    """Runs on the cohort's C->W rows and C->C control candidates; others are not applicable."""

    boost: float = 4.0
    #: ``low_ear``: C->W rows matching only Table 4's low-EAR rule and C->C rows of that signature;
    #: ``all``: every C->W and C->C row (the behaviour before ``cohort`` existed, so a run's identity
    #: always names it: kvx.cli.preflight.diagnostic_label)
    cohort: str = field(default="low_ear", metadata={"identity": "always"})

    def __post_init__(self) -> None:
        if self.cohort not in COHORTS:
            raise ConfigError(f"intervention cohort={self.cohort!r} is not one of {', '.join(COHORTS)}")
        if not self.boost > 0:
            raise ConfigError(f"intervention boost={self.boost!r} must be > 0 (log(boost) is added)")

    def requires(self) -> tuple[str, ...]:
        return COHORT_READS if self.cohort == "low_ear" else ()

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        transition = context.record.get("transition")
        role, reason = cohort_role(self.cohort, transition, context.results)
        if role is None:
            return DiagnosticResult("not_applicable", reason=reason)
        run = context.run
        retained = run.retained
        # structural methods (ThinK, HQQ) keep every position addressable in place: rows = positions
        if retained is None or retained.status not in ("measured", "projected", "structural"):
            return DiagnosticResult(
                "not_applicable", reason="no original-position map of the retained evidence"
            )
        if not context.alignment.ok:
            return DiagnosticResult(
                "not_applicable", reason=f"evidence alignment: {context.alignment.reason}"
            )
        if run.capture is None:
            return DiagnosticResult("not_applicable", reason="no captured prefill to rebuild the cache")
        evidence = context.evidence_mask()
        cache = run.fresh_cache()
        heads = run.capture.layers[0].keys.shape[1]
        lengths = [cache.get_seq_length(i) for i in range(len(cache.layers))]
        rows = retained.cache_rows(lengths, heads)
        boosted = [evidence[r] for r in rows]  # per layer (kv_heads, cache rows)
        if not any(bool(b.any()) for b in boosted):
            return DiagnosticResult("not_applicable", reason="no evidence position survived compression")
        shams = [sham_rows(b) for b in boosted]

        outcomes = {}
        for arm, masks in (("baseline", None), ("evidence", boosted), ("sham", shams)):
            gen = self._decode(context, masks)
            outcomes[arm] = {
                "output": gen.text,
                "correct": bool(context.correct(gen.text)),
            }
        values = {f"{arm}_{k}": v for arm, o in outcomes.items() for k, v in o.items()}
        values["boost"] = self.boost
        values["cohort"] = self.cohort
        values["boosted_rows"] = int(sum(int(b.sum()) for b in boosted))
        if transition == CW:
            # a repair counts only where the eager baseline reproduces the failure
            values["reproduced"] = not outcomes["baseline"]["correct"]
            values["repaired_evidence"] = values["reproduced"] and outcomes["evidence"]["correct"]
            values["repaired_sham"] = values["reproduced"] and outcomes["sham"]["correct"]
        else:
            values["degraded_evidence"] = not outcomes["evidence"]["correct"]
            values["degraded_sham"] = not outcomes["sham"]["correct"]
        return DiagnosticResult(retained.status, values)  # type: ignore[arg-type]

    def _decode(self, context: DiagnosticContext, masks: list[torch.Tensor] | None):
        import torch

        from kvx.modeling import attention
        from kvx.modeling.generation import greedy_decode

        run, model = context.run, context.reader.model
        cache = run.fresh_cache()
        modules = attention_layers(model)
        bias = math.log(self.boost)
        try:
            for module, mask in zip(modules, masks or [None] * len(modules)):
                module.kvx_logit_bias = None if mask is None else mask.to(torch.float32) * bias
            with attn_implementation(model, attention.EAGER):
                return greedy_decode(
                    model, context.reader.tokenizer, cache, run.feed, run.start, context.max_new_tokens
                )
        finally:
            for module in modules:
                module.kvx_logit_bias = None
