"""What a diagnostic sees: the run the engine already built for one supported compressed record."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kvx.diagnostics.alignment import Alignment, align_evidence
from kvx.modeling.layers import clear_head_masks

if TYPE_CHECKING:  # torch/transformers load with the model, not with the diagnostic plugins
    import torch
    from transformers import Cache

    from kvx.core.source import Source
    from kvx.modeling.compressed import CompressedRun
    from kvx.modeling.reader import LoadedReader, Prompt


@dataclass
class DiagnosticContext:
    reader: LoadedReader
    source: Source
    prompt: Prompt
    #: the compressed run, or what builds it when first read (:attr:`run`)
    compressed: CompressedRun | Callable[[], CompressedRun]
    record: dict[str, Any]
    #: the cell's decoding budget, for diagnostics that decode again
    max_new_tokens: int
    #: whether an answer text is correct for this source, by the cell's task
    correct: Callable[[str], bool]
    #: values earlier diagnostics computed for this record (e.g. gold ranks for decoding)
    shared: dict[str, Any] = field(default_factory=dict)
    #: stored results of the diagnostics that already ran on this record, by name (the
    #: intervention's cohort reads Table 4's rules from them)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    @cached_property
    def run(self) -> CompressedRun:
        """The compressed run the answer was decoded from. Where the answers were recorded earlier (a
        finished cell's added diagnostics), it is built when a diagnostic first reads it, so a record
        no diagnostic measures on a cache never compresses its context again."""
        return self.compressed() if callable(self.compressed) else self.compressed

    @cached_property
    def alignment(self) -> Alignment:
        """Evidence token positions, aligned once per record for every diagnostic that needs them."""
        return align_evidence(self.reader.tokenizer, self.prompt, list(self.source.evidence))

    def evidence_mask(self) -> torch.Tensor:
        """(prefill positions,) True at aligned evidence tokens; only call when aligned."""
        import torch

        mask = torch.zeros(self.run.prefill_ids.shape[1], dtype=torch.bool)
        mask[sorted(set().union(*self.alignment.spans))] = True
        return mask

    def full_side(self, name: str, reference: torch.Tensor, compute: Callable[[], Any]) -> Any:
        """A FullCache-side result of diagnostic ``name`` for this prompt and reference, computed
        once per source and reused by every cell (the FullCache does not depend on the cell)."""
        digest = hashlib.sha256(
            self.run.prefill_ids.cpu().numpy().tobytes() + self.run.feed.cpu().numpy().tobytes()
        )
        key = f"{name}:{self.reader.key}:{digest.hexdigest()}:{','.join(map(str, reference[0].tolist()))}"
        return self.run.memo.memo(key, compute)

    def full_cache(self) -> Cache:
        """The uncompressed cache of the same prefill, from the capture when there is one.

        Head masks an AdaKV compression left on the attention modules are cleared first: the
        FullCache must never see them (compressed-side measurements therefore come first)."""
        clear_head_masks(self.reader.model)
        return self.run.full_cache()

    def reference_ids(self) -> torch.Tensor:
        """Reference answer tokens as the model would emit them after the question.

        One reference is used as is; several (multi-value tasks) are joined with ", ". A space is
        added when the prompt ends mid-sentence (an answer prefix), as the model's own answer has.
        """
        refs = self.source.answers
        text = refs[0] if len(refs) == 1 else ", ".join(refs)
        if self.source.answer_prefix and not self.source.answer_prefix[-1].isspace():
            text = " " + text
        ids = self.reader.tokenizer.encode(text, add_special_tokens=False, return_tensors="pt")
        return ids.to(self.reader.device)
