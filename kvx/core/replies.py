"""A model's reply read as a JSON object, the way TPBench's reader prompts and judges expect one."""

from __future__ import annotations

import json
from typing import Any


def json_object(text: str) -> dict[str, Any] | None:
    """The reply as a JSON object: the whole text (code fences allowed, as models add them despite the
    instruction), else its last ``{...}`` block; None when neither parses to an object."""
    text = (text or "").strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    for candidate in (text, text[text.rfind("{") : text.rfind("}") + 1]):
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
