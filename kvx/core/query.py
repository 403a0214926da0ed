"""``query_aware``: how much of a prompt's question part goes through the compressor with the context.

A prompt is a context part (the template's opening, the context) and a question part (the question,
the template's suffix, the answer prefix: ``kvx.modeling.reader.Prompt``). The modes:

- ``false``: the compressor sees the context part only; the question part is appended uncompressed.
- ``prompt`` (``true``): kvx's mode: every prompt token but the last goes through the compressor (the
  question, the template's suffix and the answer prefix too); the last is fed when decoding starts.
- ``question``: kvpress's query-aware evaluation (``evaluation/evaluate.py``: context + question,
  question ""): the question joins the context text and is compressed with it; the template's suffix
  and the answer prefix are appended uncompressed.
"""

from __future__ import annotations

from typing import Any

from kvx.core.checks import check_choice

OFF, PROMPT, QUESTION = "false", "prompt", "question"
MODES = (OFF, PROMPT, QUESTION)
#: a mode as cell identities and records hold it: stores written before the modes had names hold
#: false and true (today's ``prompt``), so those cells keep their ids and their records
_STORED: dict[str, bool | str] = {OFF: False, PROMPT: True, QUESTION: QUESTION}


def query_mode(value: Any) -> str:
    """The mode a configured or stored value names (true: ``prompt``); a ConfigError naming the
    value, and the closest mode, for anything else."""
    if isinstance(value, bool):
        return PROMPT if value else OFF
    if value == "true":
        return PROMPT
    return str(check_choice("query_aware", value, MODES))


def stored(mode: str) -> bool | str:
    """The value a mode takes in cell identities and records: false, true (``prompt``) or "question"."""
    return _STORED[mode]
