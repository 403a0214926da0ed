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
        return Alignment(False, reason="the context was cut to fit reader.max_prompt_tokens")
    enc = tokenizer(prompt.context_text, add_special_tokens=False, return_offsets_mapping=True)
    if enc["input_ids"] != prompt.context_ids[0].tolist():
        return Alignment(False, reason="re-tokenizing the prompt with offsets gives other token ids")
    owners = _owners(enc["offset_mapping"], len(prompt.context_text))
    spans: list[set[int]] = []
    for start, end in evidence:
        lo, hi = start + prompt.context_offset, end + prompt.context_offset
        positions = {i for c in range(max(lo, 0), min(hi, len(owners))) for i in owners[c]}
        if not positions:
            return Alignment(False, reason=f"evidence span ({start}, {end}) maps to no token")
        spans.append(positions)
    return Alignment(True, spans)


def _owners(offsets: list[tuple[int, int]], n_chars: int) -> list[list[int]]:
    """Per character, the tokens whose nonempty offset range holds it. A token overlaps a span exactly
    when it holds one of the span's characters, so each span costs its own length, not a pass over
    every token: the counting tasks (RULER CWE/FWE) have hundreds of spans in a 16K-token prompt."""
    owners: list[list[int]] = [[] for _ in range(n_chars)]
    for i, (ts, te) in enumerate(offsets):
        for c in range(ts, min(te, n_chars)):
            owners[c].append(i)
    return owners
