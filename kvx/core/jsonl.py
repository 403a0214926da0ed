"""JSON Lines read with their line numbers, so a bad line is reported where it is.

Lines end at ``\\n`` only (the JSON Lines rule): a JSON string may hold U+2028 or other characters that
``str.splitlines`` would also cut at, which would split one record in two.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: a code point UTF-8 cannot encode: a surrogate on its own (a pair is one code point in a ``str``)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_line(value: Any) -> str:
    """``value`` as one JSON line, text kept as written except a lone surrogate, which is escaped
    (``\\udXXX``, as ``json.dumps`` escapes it): a served answer may hold one, and the line must still be
    UTF-8, read back by ``json.loads`` to the same string."""
    text = json.dumps(value, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


class JsonLineError(ValueError):
    """A line that is not valid JSON, named ``path:line``; ``line`` and ``reason`` let a caller word it."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: invalid JSON ({reason})")
        self.line, self.reason = line, reason


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of ``path``; ``JsonLineError`` at the first bad one."""
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise JsonLineError(path, number, exc.msg) from None
