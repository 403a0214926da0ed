"""Compare kvx's RULER-8K/16K sources with the KVDiagnosis release's, sample by sample.

    python scripts/kvdiagnosis_ruler_compare.py RELEASE_FOLDER [--sources 100] [--tokenizer tokenizer.json]

Prints, per workload and subtask, out of the release's sources:

* ``hash``: how many release ``prompt_hash`` values equal a hash of a kvx prompt of that subtask
  (sha256, sha1 and md5, cut to 16 hex digits, of the context + question, with and without the
  answer prefix). The release computes its hash in code it does not publish, so these are guesses.
  kvx's prompts are sized here by whitespace words, as no Qwen3 tokenizer is offline;
* ``kvx answers``: release references equal (as a set) to the answers of some kvx source of that subtask
  (kvx draws its needles from (task, seed, index), RULER from one seeded stream);
* ``RULER stream``: release references that RULER's own seed-42 draws reproduce
  (``kvx.tasks.ruler_stream``; essay-haystack NIAH subtasks only), with the calls they came from;
* with ``--tokenizer`` (a Hugging Face ``tokenizer.json``: Qwen3-8B's for the release),
  ``RULER procedure``: RULER's own samples of the eight NIAH subtasks (``task.generator=ruler``,
  ``kvx.tasks.ruler_procedure``; essays split by NLTK's Punkt, whose ``punkt_tab`` data must be
  installed) against the release: references, sample ids (RULER's ``index``) and ``prompt_hash``
  (sha256 of RULER's prompt, 16 digits, as the reader is given it) reproduced, and their totals.
  The release's Qwen3-8B run: 600 of its 1,600 NIAH prompts byte for byte (the noise and needle
  haystacks: niah_single_1, niah_multikey_2 and niah_multikey_3 at 8K and 16K); the essays differ.
"""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter, defaultdict

from kvx.core.registry import registry
from kvx.core.source import Source
from kvx.tasks.kvdiagnosis_ids import release_sources
from kvx.tasks.ruler_procedure import NIAH_TASKS, niah_sources
from kvx.tasks.ruler_stream import ESSAY_TASKS, stream

SUBTASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2")
SUBTASKS += ("niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
WORKLOADS = {"ruler8k": 8192, "ruler16k": 16384}
CALLS = 400


def hashes(text: str) -> set[str]:
    """The 16-digit prefixes of the hashes a release might have taken of ``text``."""
    return {hashlib.new(name, text.encode()).hexdigest()[:16] for name in ("sha256", "sha1", "md5")}


def words(text: str) -> int:
    return len(text.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("release")
    parser.add_argument("--sources", type=int, default=100, help="kvx sources per subtask")
    parser.add_argument("--tokenizer", help="tokenizer.json for RULER's own procedure (Qwen3-8B's)")
    args = parser.parse_args()
    if args.tokenizer:
        procedure(args.release, args.tokenizer)
        return
    tasks = registry("task")
    totals: dict[str, int] = defaultdict(int)
    for workload, tokens in WORKLOADS.items():
        release = release_sources(args.release, workload)
        for name in SUBTASKS:
            mine = [s for s in release if s.task == name]
            task = tasks.get(f"ruler_{name}")()
            sources = task.sources(args.sources, 0, tokens, words)
            ours = set()
            answers = set()
            for source in sources:
                ours |= hashes(f"{source.context}\n{source.question}")
                ours |= hashes(f"{source.context}\n{source.question} {source.answer_prefix}")
                answers.add(frozenset(source.answers))
            references = [s.references for s in mine]
            hash_hits = sum(s.prompt_hash in ours for s in mine)
            answer_hits = sum(frozenset(r) in answers for r in references)
            line = f"{workload} {name}: {len(mine)} sources; hash {hash_hits}; kvx answers {answer_hits}"
            if name in ESSAY_TASKS:
                calls = {a: i for i, a in reversed(list(enumerate(stream(ESSAY_TASKS[name], CALLS))))}
                found = [calls[r] for r in references if r in calls]
                line += f"; RULER stream {len(found)} (calls {min(found)}-{max(found)})"
                totals["stream"] += len(found)
                totals["stream_of"] += len(mine)
            totals["sources"] += len(mine)
            totals["hash"] += hash_hits
            totals["answers"] += answer_hits
            print(line, flush=True)
    print(
        f"total: {totals['sources']} sources; hash {totals['hash']}; kvx answers {totals['answers']}; "
        f"RULER stream {totals['stream']} of the {totals['stream_of']} essay-haystack NIAH sources"
    )


def procedure(release: str, path: str) -> None:
    """Per workload and NIAH subtask, and in all: how many release references, ids and prompt hashes
    RULER's own procedure reproduces with the tokenizer at ``path`` (the hash of the prompt the
    reader is given: ``context + question + answer_prefix``)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    totals = [0, 0, 0, 0]
    for workload, tokens in WORKLOADS.items():
        sources = release_sources(release, workload)
        for name, (haystack, config) in NIAH_TASKS.items():
            mine = [s for s in sources if s.task == name]
            ours = niah_sources(name, haystack, config, len(mine), 42, tokens, count)
            hits = [
                sum((Counter(a) & Counter(b)).values())
                for a, b in (
                    ([s.references for s in mine], [tuple(s.answers) for s in ours]),
                    ([s.sample_id for s in mine], [s.id for s in ours]),
                    ([s.prompt_hash for s in mine], [read_hash(s) for s in ours]),
                )
            ]
            totals = [t + h for t, h in zip(totals, [*hits, len(mine)])]
            print(
                f"{workload} {name}: RULER procedure references {hits[0]}, ids {hits[1]}, "
                f"prompt hashes {hits[2]} of {len(mine)}",
                flush=True,
            )
    references, ids, prompts, of = totals
    print(f"total: RULER procedure references {references}, ids {ids}, prompt hashes {prompts} of {of}")


def read_hash(source: Source) -> str:
    """The release's ``prompt_hash`` of what the reader is given (RULER's ``input + answer_prefix``)."""
    return hashlib.sha256((source.context + source.question + source.answer_prefix).encode()).hexdigest()[:16]


if __name__ == "__main__":
    main()
