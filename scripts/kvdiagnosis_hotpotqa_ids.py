"""Derive ``kvx.tasks.kvdiagnosis_ids.HOTPOTQA``: the KVDiagnosis release's HotpotQA sample ids as
HotpotQA dev ``_id``s.

The release names its 200 HotpotQA sources ``hotpotqa_000000`` ... in its ledger, with each source's
reference answer and the 25 answers Qwen3-8B gave it (FullCache and the 24 compressed runs), but not
the question or the dataset's id. A reference answer that only one dev question has names that
question; for an answer several questions share (``yes``, a year), the question whose content words
and document titles the 25 recorded answers repeat most is taken, and printed with its margin over the
runner-up so a reader can check it.

    python scripts/kvdiagnosis_hotpotqa_ids.py RELEASE_FOLDER [DEV_FILE]

DEV_FILE defaults to the dev (distractor) set NVIDIA's RULER package ships (``task=hotpotqa``'s).
Prints the tuple to paste into ``kvx/tasks/kvdiagnosis_ids.py``; the ambiguous choices go to stderr.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from kvx.tasks.kvdiagnosis_ids import LEDGER
from kvx.tasks.ruler import ruler_data_file

RUNS = "data/processed/full_population/compressed_runs/hotpotqa.jsonl.gz"
WORD = re.compile(r"[A-Za-z][A-Za-z']+")
COMMON = frozenset(
    {
        "the",
        "and",
        "was",
        "were",
        "for",
        "with",
        "from",
        "that",
        "this",
        "which",
        "who",
        "what",
        "its",
        "are",
        "his",
        "her",
        "their",
        "has",
        "have",
        "had",
        "based",
        "provided",
        "context",
        "answer",
        "question",
        "given",
        "correct",
        "okay",
        "let",
        "see",
        "need",
        "first",
    }
)


def words(text: str) -> set[str]:
    """Lower-cased words of three letters or more, common ones left out."""
    return {w.lower() for w in WORD.findall(text) if len(w) > 2 and w.lower() not in COMMON}


def main(release: str, dev: str) -> None:
    rows = json.loads(Path(dev).read_text(encoding="utf-8"))
    by_answer: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_answer[row["answer"]].append(index)
    with gzip.open(Path(release) / LEDGER, "rt", encoding="utf-8") as handle:
        ledger = [r for r in map(json.loads, handle) if r["dataset"] == "hotpotqa"]
    said: dict[str, list[str]] = defaultdict(list)
    with gzip.open(Path(release) / RUNS, "rt", encoding="utf-8") as handle:
        for run in map(json.loads, handle):
            said[run["sample_id"]].append(run.get("raw_output_compressed") or "")
    ids = []
    for record in ledger:
        candidates = by_answer[record["reference_answer"][0]]
        if len(candidates) > 1:
            heard = words(" ".join([record["raw_output_full"], *said[record["sample_id"]]]))
            scored = sorted(
                (
                    3 * len(heard & words(rows[i]["question"]))
                    + 0.2 * len(heard & words(" ".join(t for t, _ in rows[i]["context"]))),
                    i,
                )
                for i in candidates
            )[::-1]
            (best, chosen), (second, _) = scored[0], scored[1]
            print(
                f"{record['sample_id']}: {rows[chosen]['question']!r} {best:.1f} vs {second:.1f}",
                file=sys.stderr,
            )
            candidates = [chosen]
        ids.append(rows[candidates[0]]["_id"])
    print("HOTPOTQA = (")
    for start in range(0, len(ids), 3):
        print("    " + " ".join(f'"{i}",' for i in ids[start : start + 3]))
    print(")")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(ruler_data_file("hotpotqa.json")))
