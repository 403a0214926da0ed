"""``python -m kvx.tasks.tpbench counts``: how many examples each construction rule keeps, per
corpus, probe and seed, and which files the corpus had — before any model is loaded.

    python -m kvx.tasks.tpbench --corpus sgd --path ../shared/data/sgd/test --seeds 42 43 44
"""

from __future__ import annotations

import argparse
import json
import sys

from kvx.core.errors import ConfigError
from kvx.tasks.tpbench.task import CORPORA, CurrentValue, GoalAndLateUpdate, InitialGoal

PROBES = {"p1": InitialGoal, "p2": CurrentValue, "p3": GoalAndLateUpdate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvx.tasks.tpbench", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=CORPORA, default="synthetic")
    parser.add_argument("--path", default=None, help="the corpus files (.json, .json.gz, folder or zip)")
    parser.add_argument("--probes", nargs="+", choices=sorted(PROBES), default=sorted(PROBES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--n", type=int, default=200, help="source questions drawn per seed")
    parser.add_argument("--first-fills", action="store_true", help="count first fills as updates (P2/P3)")
    parser.add_argument("--json", action="store_true", help="one JSON manifest per line instead of a table")
    args = parser.parse_args(argv)
    rows = []
    try:
        for probe in args.probes:
            task = PROBES[probe](corpus=args.corpus, path=args.path, first_fills=args.first_fills)
            task.validate()
            rows += [task.manifest(args.n, seed) for seed in args.seeds]
    except ConfigError as exc:
        print(f"kvx: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print("\n".join(json.dumps(r) for r in rows))
        return 0
    first = rows[0]
    print(f"{args.corpus}: {first['dialogues']} dialogues from {len(first['files'])} file(s)")
    for file in first["files"]:
        print(f"  {file}")
    keys = list(dict.fromkeys(k for r in rows for k in r["counts"]))
    print("\n| probe | seed | " + " | ".join(keys) + " | examples |")
    print("|---|---|" + "---|" * (len(keys) + 1))
    for r in rows:
        cells = " | ".join(str(r["counts"].get(k, "")) for k in keys)
        print(f"| {r['probe']} | {r['seed']} | {cells} | {r['examples']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
