"""The records of a cell in progress, one JSON line per finished source, under ``outputs/partial/``.

A source-major sweep has every cell of a split open at once, so a sweep stopped half-way (Ctrl-C,
kill -9, a lost node) would otherwise lose the work of all of them. Each finished source's record
is appended to its cell's spool; a rerun of the same cell (same cell id and config hash) reuses
the spooled records and computes only the sources that are missing. Error records are never
reused (errors may be transient or fixed since), a torn last line is ignored, and the spool is
removed once the cell's records are complete. Records another schema version wrote are not reused but
recomputed: a spool is unfinished work, not a study, and a record this kvx writes must carry every field
its version has (an upgraded record would leave some unknown under the current version's stamp).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvx.core.jsonl import json_line
from kvx.core.records import ERROR, SCHEMA_VERSION, Record


class Spool:
    def __init__(self, root: Path, cell_id: str, config_hash: str) -> None:
        self.path = root / f"{cell_id}-{config_hash[:16]}.jsonl"

    def load(self) -> dict[str, Record]:
        """Spooled records by key; unreadable lines, error records and other schema versions' left out."""
        try:
            # lines end at \n only: an answer may hold U+2028, where splitlines() would cut its record
            lines = self.path.read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            return {}
        out = {}
        for line in lines:
            try:
                record = Record.from_dict(json.loads(line))
            except (ValueError, TypeError):  # the line a killed process was writing
                continue
            if record.status != ERROR and record.schema_version == SCHEMA_VERSION:
                out[record.key] = record
        return out

    def add(self, record: Record) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json_line(record.to_dict()))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
