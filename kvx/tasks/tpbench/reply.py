"""Reading a reader's JSON reply robustly: the whole text, else the last ``{...}`` block in it.

A reply that yields no JSON object is a parse failure: recorded, scored as no answer (never
guessed at), and counted by the aggregate. ``abstain`` is true when the reader says so or gives
no usable value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvx.core.replies import json_object

_EMPTY = {"", "unknown", "n/a", "none"}


@dataclass(frozen=True)
class Reply:
    value: str
    support: str
    abstain: bool
    parsed: bool  # a JSON object was found


def parse_reply(text: str) -> Reply:
    obj = json_object(text or "")
    if obj is None:
        return Reply("", "", True, False)
    raw = obj.get("value")
    value = raw if isinstance(raw, str) else ("" if raw is None else json.dumps(raw))
    support = obj.get("support")
    if isinstance(support, list):
        support = " ".join(str(s) for s in support if s)
    abstain = obj.get("abstain") is True or value.strip().lower() in _EMPTY
    return Reply(value.strip(), str(support or ""), abstain, True)


def split_p3(value: str) -> tuple[str, str, str] | None:
    """``"<task>; <slot>: <value>"`` -> (task, slot, value); None unless there is exactly one ``;``
    and a non-empty task, slot label and value (time colons stay in the value)."""
    if value.count(";") != 1:
        return None
    goal, rest = (p.strip() for p in value.split(";", 1))
    if ":" not in rest:
        return None
    label, answer = (p.strip() for p in rest.split(":", 1))
    return (goal, label, answer) if goal and label and answer else None
