"""Compare the records of two runs of the same sweep, source by source: answers, scores,
transitions, diagnostics and categories must be identical (costs and provenance may differ).

    python scripts/compare_records.py BEFORE AFTER

BEFORE and AFTER are MLflow stores (``sqlite:///…/mlflow.db`` or a tracking URI) or record
directories; records of any schema version are matched by task, source, reader, transform,
compressor, the ratio the method ran with, seed and query-awareness (two records of one store with
the same match are an error). Exits 1 on any difference or unmatched record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvx.aggregate.read.sources import DirectorySource, MlflowSource, Source

ANSWER = ("output", "normalized", "score", "correct", "token_ids", "stop_reason", "metrics", "details")
RECORD = (
    "status",
    "reason",
    "transition",
    "prompt_hash",
    "n_context_tokens",
    "n_question_tokens",
    "category",
)
SETTING = ("ratio", "retained_share", "method_parameter")


def source(spec: str) -> Source:
    if Path(spec).is_dir():
        return DirectorySource([Path(spec)])
    return MlflowSource(spec, ["kvx"])


def load(spec: str) -> dict[tuple, dict[str, Any]]:
    out = {}
    for batch in source(spec).batches():
        if batch.kind != "records":
            continue
        for line in batch.read():
            if line.strip():
                r = json.loads(line)
                key = (
                    r["task"],
                    r["source_id"],
                    r["reader"],
                    (r.get("transform") or {}).get("name", "none"),
                    r["compressor"],
                    r["setting"]["ratio"],
                    r["seed"],
                    r.get("query_aware", False),
                )
                if key in out:  # two settings the key cannot tell apart: never compare one of them silently
                    sys.exit(f"{spec}: two records share the match key {key}")
                out[key] = r
    return out


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """What must not change: everything a result depends on, without costs or provenance."""
    view: dict[str, Any] = {k: record.get(k) for k in RECORD}
    view["setting"] = {k: record["setting"].get(k) for k in SETTING}
    for side in ("full", "compressed"):
        answer = record.get(side)
        view[side] = None if answer is None else {k: answer.get(k) for k in ANSWER}
    view["diagnostics"] = {
        name: {k: v for k, v in result.items() if k != "seconds"}
        for name, result in (record.get("diagnostics") or {}).items()
    }
    return view


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    only = sorted(set(before) ^ set(after))
    differ = [k for k in sorted(set(before) & set(after)) if comparable(before[k]) != comparable(after[k])]
    shared = len(set(before) & set(after))
    diag_values = sum(
        len(d.get("values", {}))
        for k in set(before) & set(after)
        for d in (after[k].get("diagnostics") or {}).values()
    )
    print(f"{shared} records matched ({len(before)} before, {len(after)} after)", end="; ")
    print(f"{diag_values} diagnostic values compared")
    for key in only:
        print(f"  only in {'before' if key in before else 'after'}: {key}")
    for key in differ:
        a, b = comparable(before[key]), comparable(after[key])
        fields = [f for f in a if a[f] != b[f]]
        print(f"  differs {key}: {', '.join(fields)}")
    print("identical" if not only and not differ else f"{len(differ)} differ, {len(only)} unmatched")
    return 1 if only or differ else 0


if __name__ == "__main__":
    sys.exit(main())
