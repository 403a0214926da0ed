"""Likelihood diagnostic: teacher-forced reference tokens on the FullCache and the compressed cache.

Both sides use the same two steps: the question is fed after the cache (its last logits predict
the first reference token), then the reference (all but its last token) is fed after it. The
compressed side reuses the question step free decoding already ran (its cache is cut back to
compression + question); the FullCache side is computed once per source and reused by every
cell. The context is never prefilled again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.context import DiagnosticContext
from kvx.diagnostics.distribution import distribution_metrics
from kvx.modeling.reader import attn_implementation

if TYPE_CHECKING:  # torch and transformers are imported where used, not when the plugin loads
    import torch
    from transformers import Cache, PreTrainedModel


def gold_ranks(values: dict[str, Any]) -> dict[str, Any]:
    """The gold-rank values of a likelihood result, which the decoding diagnostic reports too."""
    return {k: v for k, v in values.items() if k.startswith("gold_rank")}


def feed(model: PreTrainedModel, cache: Cache, ids: torch.Tensor, start: int, keep: int) -> torch.Tensor:
    import torch

    with torch.inference_mode():
        positions = torch.arange(start, start + ids.shape[1], device=ids.device).unsqueeze(0)
        out = model(input_ids=ids, past_key_values=cache, position_ids=positions, logits_to_keep=keep)
        return out.logits[0].float()


def reference_logits(
    model: PreTrainedModel, cache: Cache, first: torch.Tensor, reference: torch.Tensor, start: int
) -> torch.Tensor:
    """(T, vocab) logits predicting each reference token; ``cache`` already holds the question,
    ``first`` are the logits after its last token and ``start`` the next position."""
    import torch

    rows = [first.float().view(1, -1)]
    if reference.shape[1] > 1:
        rows.append(feed(model, cache, reference[:, :-1], start, reference.shape[1] - 1))
    return torch.cat(rows)


def question_then_reference(
    model: PreTrainedModel, cache: Cache, question: torch.Tensor, reference: torch.Tensor, start: int
) -> torch.Tensor:
    first = feed(model, cache, question, start, 1)[-1]
    return reference_logits(model, cache, first, reference, start + question.shape[1])


@dataclass
class Likelihood(Diagnostic):
    """NLL^F, NLL^C, delta NLL, GPR, full->compressed KL, Top-k overlap, gold ranks (section 4)."""

    risk: ClassVar[dict[str, str]] = {
        "delta_nll": "higher",
        "gpr": "lower",
        "kl": "higher",
        "top50": "lower",
        "rank_shift_first": "higher",
        "rank_shift_mean": "higher",
    }

    epsilon: float = 1e-6
    top_k: int = 50

    def measure(self, context: DiagnosticContext) -> DiagnosticResult:
        run, model = context.run, context.reader.model
        reference = context.reference_ids()
        if reference.shape[1] == 0:
            return DiagnosticResult("not_applicable", reason="the reference answer has no tokens")
        with attn_implementation(model, run.decode_impl):
            cache = run.cache_after_feed()
            if cache is not None and run.first_logits is not None:
                comp = reference_logits(
                    model, cache, run.first_logits, reference, run.start + run.feed.shape[1]
                )
            elif (fresh := run.fresh_cache()) is not None:
                comp = question_then_reference(model, fresh, run.feed, reference, run.start)
            else:
                return DiagnosticResult(
                    "not_applicable", reason="the compressed cache cannot be restored exactly"
                )
        full_start = run.prefill_ids.shape[1]
        full = context.full_side(
            "likelihood",
            reference,
            lambda: question_then_reference(model, context.full_cache(), run.feed, reference, full_start),
        )
        values = dict(distribution_metrics(full, comp, reference[0], eps=self.epsilon, k=self.top_k))
        values["reference_ids"] = reference[0].tolist()
        context.shared["gold_ranks"] = gold_ranks(values)
        return DiagnosticResult("measured", values)

    def restore(self, result: dict[str, Any], context: DiagnosticContext) -> None:
        if result.get("status") == "measured":  # the decoding diagnostic reads its gold ranks
            context.shared["gold_ranks"] = gold_ranks(result["values"])
