"""``python -m kvx.tasks.tpbench``: how many examples each construction rule keeps, per corpus,
probe and seed, and which files the corpus had — before any model is loaded; ``--pool-out`` also
writes every P2 candidate with each rule's verdict, one JSON line each (docs/tpbench.md).

    python -m kvx.tasks.tpbench --corpus sgd --path dstc8-schema-guided-dialogue/train --seeds 42 43 44
    python -m kvx.tasks.tpbench --corpus sgd --path dstc8-schema-guided-dialogue/train --pool-out pool.jsonl
    python -m kvx.tasks.tpbench --corpus sgd --release TPBench   # the release's own probe sets
    python -m kvx.tasks.tpbench --corpus sgd --path dstc8-schema-guided-dialogue/train --leak-audit

``--leak-audit`` prints §4's correction-cue audit instead (``kvx.tasks.tpbench.leak_audit``): per seed,
how often a user-side correction cue occurs in the evaluated P2 examples and in the rest of the
final-update pool.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvx.core.errors import ConfigError
from kvx.tasks.tpbench import leak_audit
from kvx.tasks.tpbench.probes import candidates
from kvx.tasks.tpbench.task import CORPORA, CurrentValue, GoalAndLateUpdate, InitialGoal, dialogues

PROBES = {"p1": InitialGoal, "p2": CurrentValue, "p3": GoalAndLateUpdate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvx.tasks.tpbench", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=CORPORA, default="synthetic")
    parser.add_argument("--path", default=None, help="the corpus files (.json, .json.gz, folder or zip)")
    parser.add_argument("--probes", nargs="+", choices=sorted(PROBES), default=sorted(PROBES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--n", type=int, default=200, help="source questions drawn per seed")
    parser.add_argument("--first-fills", action="store_true", help="count first fills as updates (P2/P3)")
    parser.add_argument(
        "--wanted",
        action="store_true",
        help="P2: read the shuffled pool until --n probes pass (the tasks' default) instead of the "
        "release's draw of --n, then its filters",
    )
    parser.add_argument("--json", action="store_true", help="one JSON manifest per line instead of a table")
    parser.add_argument("--pool-out", default=None, help="write every P2 candidate here (JSON lines)")
    parser.add_argument(
        "--release", default=None, help="count the public release's probe sets instead (a TPBench clone)"
    )
    parser.add_argument(
        "--leak-audit",
        action="store_true",
        help="print the correction-cue audit of the P2 samples (paper section 4) instead of the counts",
    )
    args = parser.parse_args(argv)
    rows = []
    try:
        if args.leak_audit:
            return _leak_audit(args)
        if args.pool_out and not Path(args.pool_out).resolve().parent.is_dir():
            raise ConfigError(f"--pool-out={args.pool_out!r}: its folder does not exist")
        if args.release and args.pool_out:
            raise ConfigError("--pool-out lists kvx's own candidates: it does not go with --release")
        source = {"probe_set": "release", "release_path": args.release} if args.release else {}
        for probe in args.probes:
            task = PROBES[probe](
                corpus=args.corpus,
                path=args.path,
                first_fills=args.first_fills,
                draw_then_filter=not args.wanted,
                **source,
            )
            task.validate()
            rows += [task.manifest(args.n, seed) for seed in args.seeds]
        if args.pool_out:
            corpus = dialogues(args.corpus, args.path, task.synthetic_dialogues)
            _write_pool(args.pool_out, candidates(corpus, args.corpus, args.first_fills))
    except ConfigError as exc:
        print(f"kvx: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print("\n".join(json.dumps(r) for r in rows))
        return 0
    first = rows[0]
    where = "the release" if args.release else f"{first['dialogues']} dialogues"
    print(f"{args.corpus}: {where} from {len(first['files'])} file(s)")
    for file in first["files"]:
        print(f"  {file}")
    keys = list(dict.fromkeys(k for r in rows for k in r["counts"]))
    print("\n| probe | seed | " + " | ".join(keys) + " | examples |")
    print("|---|---|" + "---|" * (len(keys) + 1))
    for r in rows:
        cells = " | ".join(str(r["counts"].get(k, "")) for k in keys)
        print(f"| {r['probe']} | {r['seed']} | {cells} | {r['examples']} |")
    return 0


def _leak_audit(args: argparse.Namespace) -> int:
    """The correction-cue audit of every seed, as a table or JSON lines (raises ConfigError)."""
    for flag, value in (("--pool-out", args.pool_out), ("--wanted", args.wanted)):
        if value:
            raise ConfigError(f"{flag} does not go with --leak-audit (it audits the release's P2 draw)")
    task = PROBES["p2"](
        corpus=args.corpus,
        path=args.path,
        first_fills=args.first_fills,
        **({"probe_set": "release", "release_path": args.release} if args.release else {}),
    )
    task.validate()
    if args.release:
        audits = [leak_audit.from_release(args.release, args.corpus, args.n, s) for s in args.seeds]
    else:
        corpus = dialogues(args.corpus, args.path, task.synthetic_dialogues)
        audits = [leak_audit.built(corpus, args.corpus, args.n, s, args.first_fills) for s in args.seeds]
    if args.json:
        print("\n".join(json.dumps(a.row()) for a in audits))
        return 0
    print(f"{args.corpus}: correction cues in the evaluated P2 examples vs the rest of the final-update pool")
    print("\n| seed | evaluated | with a cue | rate | rest | with a cue | rate | gap (pp) |")
    print("|---|---|---|---|---|---|---|---|")
    for a in audits:
        print(
            f"| {a.seed} | {a.evaluated} | {a.evaluated_cue} | {_share(a.evaluated_rate)} | {a.rest} | "
            f"{a.rest_cue} | {_share(a.rest_rate)} | {'' if a.gap_pp is None else f'{a.gap_pp:+.1f}'} |"
        )
    return 0


def _share(rate: float | None) -> str:
    return "" if rate is None else f"{100 * rate:.1f}%"


def _write_pool(path: str, rows: list[dict]) -> None:
    """The P2 candidates as JSON lines, so they can be diffed against the release's labels."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    except OSError as exc:
        raise ConfigError(f"--pool-out={path!r}: cannot write it ({exc.strerror})") from exc
    print(f"wrote {len(rows)} P2 candidates to {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
