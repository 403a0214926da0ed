"""A validation finding, located precisely enough to fix: which check, which run or file, which record."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Problem:
    check: str  # schema, schema_version, duplicate_key, partner, prompt_hash, nonfinite, counts, ...
    severity: str  # "error": the record is left out of the analysis; "warning": it is kept
    run: str  # run id or file path
    key: str  # record key, or "" for run-level findings
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
