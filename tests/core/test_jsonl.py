"""JSON Lines with line numbers: lines end at \\n only, blank lines are skipped, a bad line is named."""

from __future__ import annotations

import json

import pytest

from kvx.core.jsonl import JsonLineError, json_lines


def test_lines_end_at_newline_only(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": "x\u2028y"}\n\n  \n[1, 2]\n', encoding="utf-8")  # U+2028 inside a string
    assert list(json_lines(path)) == [(1, {"a": "x\u2028y"}), (4, [1, 2])]


def test_a_bad_line_is_named_by_path_and_number(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{not json\n', encoding="utf-8")
    with pytest.raises(JsonLineError, match=r"rows\.jsonl:2: invalid JSON"):
        list(json_lines(path))


def test_json_line_keeps_text_and_escapes_only_a_lone_surrogate():
    """UTF-8 text as written (NUL and U+2028 escaped by JSON's own rules), a lone surrogate as \\udXXX,
    a pair (one code point) untouched; ``json.loads`` gives the value back."""
    from kvx.core.jsonl import json_line

    value = {"a": "x\ud800y", "b": "😀\u2028\x00é"}
    line = json_line(value)
    assert line == '{"a": "x\\ud800y", "b": "😀\u2028\\u0000é"}\n'
    assert json.loads(line) == value and line.encode("utf-8")
