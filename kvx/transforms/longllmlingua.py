"""LongLLMLingua (Jiang et al., 2024) as a RAG text compressor, via llmlingua's ``PromptCompressor``.

The candidate passages are llmlingua's ``context`` list and the bare question its ``question``.
LongLLMLingua's own recipe runs: question-aware coarse ranking of the passages
(``rank_method="longllmlingua"``), passages reordered by that rank (``reorder_context="sort"``),
dynamic per-passage ratios, contrastive (question-conditioned) token perplexity, to ``rate`` of
the pool's tokens. The output is one compressed text the panel's readers all receive; the scoring
LM is the embedded SmolLM2 by default (any local causal-LM folder, or a hub id with a hub).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvx.core.checks import check_number
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.source import Segment, Source
from kvx.modeling.lingua import EMBEDDED, check_llmlingua, prompt_compressor
from kvx.transforms.base import Transform, query


@dataclass
class LongLLMLinguaRAG(Transform):
    """``transform=longllmlingua transform.rate=0.5``: keep about ``rate`` of the pool's tokens."""

    rate: float = 0.5
    model: str = EMBEDDED
    dynamic_ratio: float = 0.3  # LongLLMLingua's dynamic_context_compression_ratio

    def validate(self) -> None:
        if check_number("transform.rate", self.rate, 0.0, 1.0) == 0.0:
            raise ConfigError("transform.rate=0 keeps nothing; use a rate in (0, 1]")
        check_number("transform.dynamic_ratio", self.dynamic_ratio, 0.0, 1.0)
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"transform.model={self.model!r} must be smollm2, a model folder or a hub id")
        check_llmlingua("transform=longllmlingua")

    def apply(self, source: Source) -> Sequence[Segment]:
        parts = source.parts()
        pool = [s for s in parts if s.role == "passage"]
        if not pool:
            raise Unsupported(f"source {source.id} has no passage segments to compress")
        result = prompt_compressor(self.model, "LongLLMLingua").compress_prompt(
            [s.text for s in pool],
            question=query(source),
            rate=self.rate,
            rank_method="longllmlingua",
            condition_in_question="after_condition",
            reorder_context="sort",
            dynamic_context_compression_ratio=self.dynamic_ratio,
            condition_compare=True,
            context_budget="+100",
            concate_question=False,
        )
        rest = [s for s in parts if s.role != "passage"]
        text = str(result["compressed_prompt"]).strip()
        return [*rest, Segment("longllmlingua", text, role="passage", title="LongLLMLingua")]
