"""What a diagnostic sees: the run the engine already built for one supported compressed record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kvx.compressors.kvpress_adapter import clear_head_masks

if TYPE_CHECKING:
    from transformers import Cache

    from kvx.engine import Cell, CompressedRun
    from kvx.readers.base import LoadedReader, Prompt
    from kvx.tasks.base import Source


@dataclass
class DiagnosticContext:
    reader: LoadedReader
    cell: Cell
    source: Source
    prompt: Prompt
    run: CompressedRun
    record: dict[str, Any]
    #: values earlier diagnostics computed for this record (e.g. gold ranks for decoding)
    shared: dict[str, Any] = field(default_factory=dict)

    def full_cache(self) -> Cache:
        """The uncompressed cache of the same prefill, from the capture when there is one.

        Head masks an AdaKV compression left on the attention modules are cleared first: the
        FullCache must never see them (compressed-side measurements therefore come first)."""
        clear_head_masks(self.reader.model)
        if self.run.capture is not None:
            return self.run.capture.full_cache()
        from kvx.capture import capture_prefill

        self.run.engine.prefills += 1
        return capture_prefill(self.reader.model, self.run.prefill_ids).full_cache()

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
