"""Attention-access diagnostic: EAM, EAR and NEAE on an eager replay of the answer steps.

The replay runs after compression, on the cache compression produced, so it cannot change what
the compressor kept (KVDiagnosis section 3.2: inspectability confers no evaluation advantage).
The answer steps are the teacher-forced reference tokens, identical for both caches, so the
layer-head-step domain is common by construction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.core.setting import RetainedMap
from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext
from kvx.modeling.reader import attn_implementation

if TYPE_CHECKING:  # torch, transformers and kvpress are imported where used, not when the plugin loads
    import torch
    from transformers import Cache, PreTrainedModel


def replay_weights(
    model: PreTrainedModel, cache: Cache, feed: torch.Tensor, reference: torch.Tensor, start: int
) -> list[torch.Tensor]:
    """Per layer, (query heads, answer steps, keys) attention weights of the answer steps."""
    import torch

    from kvx.modeling import attention

    with torch.inference_mode():
        inputs = torch.cat([feed, reference[:, :-1]], dim=1)
        positions = torch.arange(start, start + inputs.shape[1], device=inputs.device).unsqueeze(0)
        with attn_implementation(model, attention.EAGER):
            out = model(
                input_ids=inputs, past_key_values=cache, position_ids=positions, output_attentions=True
            )
        steps = reference.shape[1]
        return [w[0, :, -steps:, :].float() for w in out.attentions]


def evidence_mass(
    weights: list[torch.Tensor], rows: list[torch.Tensor], lengths: list[int], evidence: torch.Tensor
) -> torch.Tensor:
    """(layers, query heads, steps) attention mass on evidence; cache rows map to positions by
    ``rows`` (per layer, kv_heads x compressed rows); rows after them (question, answer) are not evidence."""
    import torch

    masses = []
    for w, r, length in zip(weights, rows, lengths):
        groups = w.shape[0] // r.shape[0]
        is_evidence = torch.zeros(r.shape[0], w.shape[-1], dtype=torch.bool)
        is_evidence[:, :length] = evidence[r[:, :length]]
        masses.append((w * is_evidence.repeat_interleave(groups, dim=0)[:, None, :]).sum(-1))
    return torch.stack(masses)


def evidence_key(evidence: torch.Tensor) -> str:
    return hashlib.sha256(evidence.numpy().tobytes()).hexdigest()[:16]


@dataclass
class Attention(Diagnostic):
    """EAM = mean answer-time attention on evidence; EAR = EAM^C / EAM^F; NEAE = EAM / (|E| / n)."""

    risk: ClassVar[dict[str, str]] = {"ear": "lower", "eam_comp": "lower", "neae_comp": "lower"}

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        run, model = context.run, context.reader.model
        retained = run.retained
        if retained is None or retained.status == "not_applicable":
            return DiagnosticResult("not_applicable", reason=retained.reason if retained else "no map")
        if not context.alignment.ok:
            return DiagnosticResult(
                "not_applicable", reason=f"evidence alignment: {context.alignment.reason}"
            )
        comp_cache = run.fresh_cache()
        if comp_cache is None:
            return DiagnosticResult(
                "not_applicable", reason="no captured prefill to rebuild the cache for a replay"
            )
        evidence, n = context.evidence_mask(), run.prefill_ids.shape[1]
        reference = context.reference_ids()
        lengths = [comp_cache.get_seq_length(i) for i in range(len(comp_cache.layers))]
        heads = run.capture.layers[0].keys.shape[1]
        comp_w = replay_weights(model, comp_cache, run.feed, reference, run.start)
        comp = evidence_mass(comp_w, retained.cache_rows(lengths, heads), lengths, evidence)
        full_lengths = [n] * len(lengths)
        full_rows = RetainedMap("measured").cache_rows(full_lengths, heads)

        def full_eam() -> float:
            full_w = replay_weights(model, context.full_cache(), run.feed, reference, n)
            return float(evidence_mass(full_w, full_rows, full_lengths, evidence).mean())

        share = float(evidence.sum()) / n
        eam_c, eam_f = (
            float(comp.mean()),
            context.full_side(f"attention:{evidence_key(evidence)}", reference, full_eam),
        )
        values = {
            "eam_comp": eam_c,
            "eam_full": eam_f,
            "neae_comp": eam_c / share,
            "neae_full": eam_f / share,
        }
        values["steps"], values["layers"], values["heads"] = reference.shape[1], comp.shape[0], comp.shape[1]
        if eam_f > 0:
            values["ear"] = eam_c / eam_f
        return DiagnosticResult(retained.status, values)  # type: ignore[arg-type]
