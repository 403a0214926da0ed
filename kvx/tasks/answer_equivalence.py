"""The Answer Equivalence dataset (AE; Bulian et al., 2022) in its official format, as the human-rated
pairs a judge is validated on (TPBench §6.1.1: the P1 judge against AE's ratings).

The official files (github.com/google-research-datasets/answer-equivalence-dataset, ``v1/ae_dev.jsonl``,
``v1/ae_test.jsonl``, ...) hold one *rating* per line: ``qid``, ``context`` (the SQuAD passage),
``question``, ``reference`` (the gold answer), ``candidate`` (a QA model's answer), ``label``
(``equivalent`` or not) and ``raw_rating``. As the TPBench release does (its
``data/semantic_evaluation/ae_source_manifest.json``), ratings of one (qid, reference, candidate) are
one pair, labelled by their majority; a tie stays unresolved. A pair's id is the release's: the first
20 hex digits of the sha256 of ``json.dumps([split, qid, reference, candidate], ensure_ascii=False)``
with the split the file's name (``ae_test``), so the release's 200 dev / 600 test samples are selected
by their ids. The labels and ratings never reach a judge: a pair's source carries only the question,
the passage, the reference and the candidate.

The fixed baselines are the paper's: SQuAD's normalized exact match and token F1 >= 0.5
(:mod:`kvx.tasks.scoring`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvx.core.errors import ConfigError
from kvx.core.jsonl import JsonLineError, json_lines
from kvx.core.source import Segment, Source
from kvx.tasks import scoring

PUBLIC = "github.com/google-research-datasets/answer-equivalence-dataset (v1/ae_dev.jsonl, v1/ae_test.jsonl)"
#: the label of a rating that finds the candidate equivalent (any other label: not equivalent)
POSITIVE = "equivalent"
#: what each rating line must hold, and its type
FIELDS = {"qid": str, "context": str, "question": str, "reference": str, "candidate": str, "label": str}
#: token F1 at or above this is the fixed lexical baseline's "equivalent"
F1_THRESHOLD = 0.5


@dataclass(frozen=True)
class Pair:
    """One (question, reference, candidate) with its ratings: what a judge decides and humans rated."""

    id: str
    split: str
    qid: str
    question: str
    context: str
    reference: str
    candidate: str
    n_ratings: int
    n_positive: int

    @property
    def majority(self) -> bool | None:
        """The majority of the ratings; None for a tie (unresolved, outside every accuracy)."""
        if 2 * self.n_positive == self.n_ratings:
            return None
        return 2 * self.n_positive > self.n_ratings

    @property
    def exact_match(self) -> bool:
        return scoring.exact_match(self.candidate, [self.reference]) == 1.0

    @property
    def token_f1(self) -> float:
        return scoring.token_f1(self.candidate, [self.reference], closed=False)


def pair_id(split: str, qid: str, reference: str, candidate: str) -> str:
    """The release's pair id (``ab973d2a64b9be26bdae`` for ae_test's "1.4 and 5.8 °C" pair)."""
    key = json.dumps([split, qid, reference, candidate], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


def load_pairs(path: str) -> list[Pair]:
    """The pairs of one official AE file, in the order their first rating appears; the split is the
    file's name without ``.jsonl``. Every line is checked, and a bad one named with its field."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{path!r}: no such AE file (the public data: {PUBLIC})")
    split = file.name.removesuffix(".jsonl")
    ratings: dict[tuple[str, str, str], list[dict]] = {}
    try:
        for number, row in json_lines(file):
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{number}: not a JSON object")
            for name, kind in FIELDS.items():
                if not isinstance(row.get(name), kind):
                    raise ConfigError(
                        f"{path}:{number}: field {name!r} is {row.get(name)!r}, not a {kind.__name__} "
                        f"(an official AE rating has {', '.join(FIELDS)})"
                    )
            ratings.setdefault((row["qid"], row["reference"], row["candidate"]), []).append(row)
    except JsonLineError as exc:
        raise ConfigError(str(exc)) from None
    if not ratings:
        raise ConfigError(f"{path}: no AE ratings")
    return [
        Pair(
            pair_id(split, qid, reference, candidate),
            split,
            qid,
            rows[0]["question"],
            rows[0]["context"],
            reference,
            candidate,
            len(rows),
            sum(r["label"] == POSITIVE for r in rows),
        )
        for (qid, reference, candidate), rows in ratings.items()
    ]


def read_ids(path: str) -> list[str]:
    """Pair ids in order: a JSON-lines file whose rows have ``id`` (the release's
    ``data/semantic_evaluation/ae_test_inputs.jsonl`` or ``ae_test_key.jsonl``) or one id a line."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--ids={path!r}: no such file")
    ids = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("{"):
            row = json.loads(text)
            if not isinstance(row.get("id"), str):
                raise ConfigError(f"{path}:{number}: a JSON row without a string 'id'")
            text = row["id"]
        ids.append(text)
    if not ids:
        raise ConfigError(f"--ids={path!r}: no ids")
    return ids


def select(
    pairs: Sequence[Pair], ids: Sequence[str] | None = None, sample: int | None = None, seed: int = 0
) -> list[Pair]:
    """The pairs named by ``ids`` in their order (every id must be a pair of the file), or a seeded
    sample of ``sample`` pairs drawn without looking at labels (kvx's draw: ``random.Random(seed)``
    over the pairs sorted by id, kept in that order; not the release's), or all of them."""
    if ids is not None and sample is not None:
        raise ConfigError("--ids and --sample both choose the pairs: give one")
    if ids is not None:
        by_id = {p.id: p for p in pairs}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ConfigError(
                f"{len(missing)} of {len(ids)} ids are no pair of the file (first: {missing[0]!r}); "
                f"is it the split the ids were drawn from (ae_dev, ae_test)?"
            )
        return [by_id[i] for i in ids]
    if sample is not None:
        if not 1 <= sample <= len(pairs):
            raise ConfigError(f"--sample={sample} must be between 1 and the file's {len(pairs)} pairs")
        ordered = sorted(pairs, key=lambda p: p.id)
        return sorted(random.Random(seed).sample(ordered, sample), key=lambda p: p.id)
    return list(pairs)


def to_source(pair: Pair) -> Source:
    """The pair as a judge's source: the passage as context, the reference as the answer, and in the
    metadata what an equivalence judge's input row holds (``ae_id``, ``question``, ``context``); no
    label or rating."""
    return Source.from_segments(
        [Segment("passage", pair.context)],
        id=pair.id,
        question=pair.question,
        answers=[pair.reference],
        metadata={"ae_id": pair.id, "ae_split": pair.split, "qid": pair.qid, "context": pair.context},
    )
