"""Likelihood diagnostic: teacher-forced reference tokens on the FullCache and the compressed cache.

Both caches come from the run the engine already built (the captured prefill, or the compressed
cache cut back after decoding): the context is never prefilled again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache, PreTrainedModel

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext
from kvx.diagnostics.distribution import distribution_metrics
from kvx.readers.base import attn_implementation


@torch.inference_mode()
def teacher_forced_logits(
    model: PreTrainedModel, cache: Cache, feed: torch.Tensor, reference: torch.Tensor, start: int
) -> torch.Tensor:
    """Logits predicting each reference token after ``feed`` (question) on ``cache``: (T, vocab)."""
    inputs = torch.cat([feed, reference[:, :-1]], dim=1)
    positions = torch.arange(start, start + inputs.shape[1], device=inputs.device).unsqueeze(0)
    out = model(
        input_ids=inputs, past_key_values=cache, position_ids=positions, logits_to_keep=reference.shape[1]
    )
    return out.logits[0].float()


@dataclass
class Likelihood(Diagnostic):
    """NLL^F, NLL^C, delta NLL, GPR, full->compressed KL, Top-k overlap, gold ranks (section 4)."""

    epsilon: float = 1e-6
    top_k: int = 50

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        run, model = context.run, context.reader.model
        reference = context.reference_ids()
        if reference.shape[1] == 0:
            return DiagnosticResult("not_applicable", reason="the reference answer has no tokens")
        comp_cache = run.fresh_cache()
        if comp_cache is None:
            return DiagnosticResult(
                "not_applicable", reason="the compressed cache cannot be restored exactly"
            )
        with attn_implementation(model, run.decode_impl):
            comp = teacher_forced_logits(model, comp_cache, run.feed, reference, run.start)
        full_start = run.prefill_ids.shape[1]
        full = teacher_forced_logits(model, context.full_cache(), run.feed, reference, full_start)
        values = dict(distribution_metrics(full, comp, reference[0], eps=self.epsilon, k=self.top_k))
        values["reference_ids"] = reference[0].tolist()
        context.shared["gold_ranks"] = {k: v for k, v in values.items() if k.startswith("gold_rank")}
        return DiagnosticResult("measured", values)
