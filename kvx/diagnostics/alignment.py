"""Evidence alignment: character spans of a source's context -> token positions of the final prompt.

Alignment runs after chat formatting and instructions were added (KVDiagnosis section 3.2), on
the exact token ids the run used. A failed or ambiguous alignment never drops the source; it
only makes the cache diagnostics of that source not applicable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # kept off the import path: loading a plugin must not import transformers
    from transformers import PreTrainedTokenizerBase

    from kvx.modeling.reader import Prompt


@dataclass
class Alignment:
    ok: bool
    spans: list[set[int]] = field(default_factory=list)  # token positions per evidence span
    reason: str = ""


def align_evidence(
    tokenizer: PreTrainedTokenizerBase, prompt: Prompt, evidence: list[tuple[int, int]]
) -> Alignment:
    """Token positions overlapping each evidence span, or why they cannot be trusted."""
    if not evidence:
        return Alignment(False, reason="the source has no evidence spans")
    if not getattr(tokenizer, "is_fast", False):
        return Alignment(False, reason="a slow tokenizer gives no character offsets")
    if prompt.truncated:
        return Alignment(False, reason="the context was cut from the left (reader.max_prompt_tokens)")
    enc = tokenizer(prompt.context_text, add_special_tokens=False, return_offsets_mapping=True)
    if enc["input_ids"] != prompt.context_ids[0].tolist():
        return Alignment(False, reason="re-tokenizing the prompt with offsets gives other token ids")
    offsets = enc["offset_mapping"]
    spans: list[set[int]] = []
    for start, end in evidence:
        lo, hi = start + prompt.context_offset, end + prompt.context_offset
        positions = {i for i, (ts, te) in enumerate(offsets) if ts < hi and te > lo and te > ts}
        if not positions:
            return Alignment(False, reason=f"evidence span ({start}, {end}) maps to no token")
        spans.append(positions)
    return Alignment(True, spans)
