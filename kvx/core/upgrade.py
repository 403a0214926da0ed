"""Records an earlier kvx wrote, upgraded on read to the current schema: a finished study never becomes
unreadable because kvx moved on.

Each schema version that changed the record's shape has one step here, from it to the next version;
``upgrade`` chains them. A step moves and renames what the old record states and nothing else: fields the
old kvx did not record stay absent (unknown, never imputed), and each step names them, so the aggregate
can tell the user which fields the upgraded records leave unknown. A future schema 3 is one more step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvx.core.identity import digest
from kvx.core.records import SCHEMA_VERSION

#: what kvx 0.1's schema-1 engine wrote as a cell's config hash: its cell identity, 16 hex digits
_CELL_ID = re.compile(r"^[0-9a-f]{16}$")

#: fields a kvx writing schema 2 fills that a schema-1 record never had; upgraded, they stay unknown
UNKNOWN_IN_1 = (
    "cell.fields (split size, context tokens, decoding budget, task/reader/press fields)",
    "task_family",
    "reader_family",
    "prompt_format",
    "full.cost",
    "compressed.cost",
)


def _asked_ratio(record: dict[str, Any]) -> float | None:
    """The ratio the cell asked for: schema-1 keys end ``.../ratio=<asked>/seed=<seed>`` (``setting.ratio``
    is what the method ran with: 0 for press=none); a key without it falls back to ``setting.ratio``,
    which is what schema-1 kvx itself showed as the setting."""
    for part in reversed(str(record.get("key", "")).split("/")):
        if part.startswith("ratio="):
            try:
                return float(part.removeprefix("ratio="))
            except ValueError:
                break
    ratio = record["setting"].get("ratio")
    return float(ratio) if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) else None


def _v1_to_v2(record: dict[str, Any]) -> tuple[str, ...]:
    """Schema 2 added the cell identity (id and flat fields) and the setting as asked (kind, value).

    Schema 1 asked every cell for a ratio, so the setting is ``ratio`` at the ratio its key names. The
    cell's id is its config hash (schema 1's cell identity: every semantic config field hashed; not
    schema 2's digest, so a cell read from both versions is two cells), and its flat fields are only
    those the record itself states; the rest of the identity was never recorded and stays unknown.
    What a malformed record lacks is not made up: the schema check then says what is missing."""
    setting = record.get("setting")
    value = _asked_ratio(record) if isinstance(setting, dict) else None
    if value is not None:
        record["setting"] = {"kind": "ratio", "value": value, **setting}
        fields: dict[str, Any] = {
            "task": record.get("task"),
            "reader": record.get("reader"),
            "press": record.get("compressor"),
            "setting.kind": "ratio",
            "setting.value": value,
            "seed": record.get("seed"),
        }
        if "query_aware" in record:
            fields["query_aware"] = record["query_aware"]
        chash = record.get("config_hash")
        if isinstance(chash, str):
            record["cell"] = {"id": chash if _CELL_ID.match(chash) else digest(chash), "fields": fields}
    record["schema_version"] = "2"
    return UNKNOWN_IN_1


#: presses schema 3 named after kvpress's evaluation registry or opened to any base: the name a schema-2
#: record gives -> (today's name, the base it always ran over, its fields that are the base's)
RENAMED_PRESSES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "expected_attention": ("expected_attention_plain", None, ()),
    "adakv": ("adakv", "snapkv", ("window_size", "kernel_size")),
    "chunkkv": ("chunkkv", "knorm", ()),
    "block": ("block", "knorm", ()),
    "key_rerotation": ("key_rerotation", "knorm", ()),
}


def _v2_to_v3(record: dict[str, Any]) -> tuple[str, ...]:
    """Schema 3 names presses as kvpress's registry does and lets wrappers take any base: a schema-2
    ``expected_attention`` is today's ``expected_attention_plain``, and a schema-2 ``adakv``, ``chunkkv``,
    ``block`` or ``key_rerotation`` ran over the one base it then had, which its flat fields now name
    (``press.base``, with the base's own fields under it). The cell id is unchanged: kvx hashes these
    settings as it did (``Compressor.stored_identity``), so a store keeps its cells. An imported record
    (``provenance``) names its release's method, which its importer mapped: it is left as it is."""
    press = record.get("compressor")
    imported = isinstance(record.get("provenance"), dict)  # a release's method name, not a kvx press
    if isinstance(press, str) and press in RENAMED_PRESSES and not imported:
        name, base, moved = RENAMED_PRESSES[press]
        record["compressor"] = name
        cell = record.get("cell")
        fields = cell.get("fields") if isinstance(cell, dict) else None
        if isinstance(fields, dict) and fields.get("press") == press:
            fields["press"] = name
            if base is not None:
                fields["press.base"] = base
                for key in moved:
                    if f"press.{key}" in fields:
                        fields[f"press.base.{key}"] = fields.pop(f"press.{key}")
    record["schema_version"] = "3"
    return ()


Step = Callable[[dict[str, Any]], tuple[str, ...]]
#: schema version -> the step that brings a record of it to the next version
STEPS: dict[str, Step] = {"1": _v1_to_v2, "2": _v2_to_v3}
READABLE = (*STEPS, SCHEMA_VERSION)  # every version this kvx reads
#: version -> how it identifies cells: versions with one number here give a setting the same cell id
#: (schema 3 kept schema 2's ids), so their records aggregate together; schema 1's ids are others
IDENTITY = {"1": "config_hash", "2": "identity", "3": "identity"}


def upgrade(record: dict[str, Any]) -> tuple[str, ...] | None:
    """Bring a record of an earlier schema version to ``SCHEMA_VERSION`` in place; returns the fields it
    leaves unknown (empty for a current record), or None, untouched, for a version this kvx cannot read
    (a newer kvx's, or none at all). A record that lacks what its own version required is left to the
    schema check to explain, with whatever the steps could move."""
    if record.get("schema_version") not in READABLE:
        return None
    unknown: list[str] = []
    while record["schema_version"] != SCHEMA_VERSION:
        unknown += STEPS[record["schema_version"]](record)
    return tuple(unknown)
