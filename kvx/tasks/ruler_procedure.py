"""RULER's own NIAH generation procedure, end to end: its samples for a given tokenizer.

Why: the KVDiagnosis release ran NVIDIA/RULER's ``prepare.py`` (seed 42, the ``base`` model
template, Qwen3-8B's tokenizer); its samples are decided not only by the seed but by the draws that
RULER's haystack-size search and retries consume, which are counted in the reader's tokens. This
module follows ``scripts/data/synthetic/niah.py`` (read, not copied) step by step so that the same
tokenizer yields RULER's instances: one ``random`` seeded with the seed, one word of which loading
the tokenizer spends (:func:`kvx.tasks.ruler_stream.ruler_random`); a size estimate at
``incremental`` haystack units, then a binary search for the largest haystack whose prompt plus
``tokens_to_generate`` fits ``max_seq_length`` (one ``generate_input_output`` call per probe); then
per sample a call at that size, retried ``incremental`` units smaller while too long. Each call
draws the needles (:func:`kvx.tasks.ruler_stream.draw`), shuffles them with a fresh
``Random(seed)``, places them (essay: at a sample of 40 depths among the haystack's sentences, split
by NLTK's Punkt; noise and needle haystacks: at a sample of line positions, needle haystacks first
drawing a key and value per line), then draws the queried keys. The prompt is the task template
and the answer prefix (``TASKS['niah']``), reworded for one answer; RULER cuts it at the answer
prefix and writes the first answer's character offset as ``index``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvx.core.source import Source
from kvx.tasks.base import CountTokens
from kvx.tasks.ruler_data import NEEDLE, NOISE, ruler_data_file
from kvx.tasks.ruler_stream import DEPTHS, ESSAY_TASKS, NiahConfig, draw, ruler_random

SplitSentences = Callable[[str], list[str]]

#: RULER's ``TASKS['niah']`` template and answer prefix (``scripts/data/synthetic/constants.py``)
TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
#: ``TASKS['niah']['tokens_to_generate']``: RULER's budget counts them in ``max_seq_length``
TOKENS_TO_GENERATE = 128

#: RULER's eight NIAH subtasks (``scripts/synthetic.yaml``): haystack and needle configuration
NIAH_TASKS: dict[str, tuple[str, NiahConfig]] = {
    "niah_single_1": ("noise", NiahConfig()),
    **{name: ("essay", config) for name, config in ESSAY_TASKS.items()},
    "niah_multikey_2": ("needle", NiahConfig()),
    "niah_multikey_3": ("needle", NiahConfig(type_needle_k="uuids", type_needle_v="uuids")),
}


@dataclass(frozen=True)
class RulerSample:
    """One line of RULER's ``validation.jsonl`` (``token_position_answer`` left out)."""

    index: int
    input: str
    outputs: list[str]
    length: int
    answer_prefix: str


def prompt_hash(sample: RulerSample) -> str:
    """The KVDiagnosis release's ``prompt_hash`` of a RULER sample: sha256 of RULER's whole prompt
    (``input`` + ``answer_prefix``), 16 hex digits (found on its niah_single_1 sources)."""
    return hashlib.sha256((sample.input + sample.answer_prefix).encode()).hexdigest()[:16]


@functools.cache
def essay_words() -> tuple[str, ...]:
    """RULER's essay haystack: Paul Graham's essays, whitespace runs made one space, split on it."""
    with ruler_data_file("PaulGrahamEssays.json").open(encoding="utf-8") as handle:
        return tuple(re.sub(r"\s+", " ", json.load(handle)["text"]).split(" "))


def punkt_sentences(text: str) -> list[str]:
    """RULER's sentence splitter (NLTK's English Punkt, whose data NLTK downloads as ``punkt_tab``)."""
    from nltk.tokenize import sent_tokenize

    return sent_tokenize(text)


def _depths() -> list[int]:
    return [int(d) for d in np.round(np.linspace(0, 100, num=DEPTHS, endpoint=True)).astype(int)]


def _essay(needles: list[str], units: int, rng: random.Random, split: SplitSentences) -> str:
    words = essay_words()
    text = " ".join((words * -(-units // len(words)))[:units])
    sentences = split(text.strip())
    drawn = rng.sample(_depths(), len(needles))
    cuts = [0, *sorted(int(len(sentences) * (depth / 100)) for depth in drawn), len(sentences)]
    parts = []
    for i in range(1, len(cuts)):
        parts.append(" ".join(sentences[cuts[i - 1] : cuts[i]]))
        if i - 1 < len(needles):
            parts.append(needles[i - 1])
    return " ".join(parts)


def _lines(haystack: str, config: NiahConfig, needles: list[str], units: int, rng: random.Random) -> str:
    if haystack == "noise":
        lines = [NOISE] * units
    else:
        lines = [
            NEEDLE.format(
                type_needle_v=config.type_needle_v,
                key=draw(config.type_needle_k, rng),
                value=draw(config.type_needle_v, rng),
            )
            for _ in range(units)
        ]
    for position, needle in zip(sorted(rng.sample(range(units), len(needles)), reverse=True), needles):
        lines.insert(position, needle)
    return "\n".join(lines)


def niah_input(
    haystack: str, config: NiahConfig, units: int, rng: random.Random, seed: int, split: SplitSentences
) -> tuple[str, list[str]]:
    """One call of RULER's ``generate_input_output``: the prompt (answer prefix included) and the
    answers, consuming ``rng`` as RULER consumes its global ``random``."""
    count = max(config.num_needle_k, config.num_needle_q)
    keys, values, needles = [], [], []
    for _ in range(count):
        keys.append(draw(config.type_needle_k, rng))
        values.append([draw(config.type_needle_v, rng) for _ in range(config.num_needle_v)])
        needles += [
            NEEDLE.format(type_needle_v=config.type_needle_v, key=keys[-1], value=v) for v in values[-1]
        ]
    random.Random(seed).shuffle(needles)
    if haystack == "essay":
        context = _essay(needles, units, rng, split)
    else:
        context = _lines(haystack, config, needles, units, rng)
    queried = rng.sample(range(count), config.num_needle_q)
    queries = [keys[k] for k in queried]
    query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    template, kind = TEMPLATE + ANSWER_PREFIX, config.type_needle_v
    if config.num_needle_q * config.num_needle_v == 1:
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            template = template.replace(old, new)
        kind = kind[:-1]
    return template.format(type_needle_v=kind, context=context, query=query), [
        v for k in queried for v in values[k]
    ]


def _incremental(haystack: str, max_seq_length: int) -> int:
    """RULER's step in haystack units: the estimate's size, the search's floor, a retry's cut."""
    if haystack == "essay":
        return 500
    return 5 if max_seq_length < 4096 else 25


def niah_samples(
    haystack: str,
    config: NiahConfig,
    max_seq_length: int,
    num_samples: int,
    count_tokens: CountTokens,
    seed: int = 42,
    split: SplitSentences = punkt_sentences,
) -> list[RulerSample]:
    """RULER's first ``num_samples`` samples of the NIAH configuration (``haystack``, ``config``), in
    its order, sized with ``count_tokens`` (RULER counts ``tokenizer.tokenize(text)``: no special
    tokens); a larger ``num_samples`` extends a smaller one."""
    rng = ruler_random(seed)
    step = _incremental(haystack, max_seq_length)

    def call(units: int) -> tuple[str, list[str], int]:
        text, answers = niah_input(haystack, config, units, rng, seed, split)
        return text, answers, count_tokens(text) + TOKENS_TO_GENERATE

    per_unit = (call(step)[2] - TOKENS_TO_GENERATE) / step
    low, high, units = step, max(int(max_seq_length / per_unit * 3), step * 2), step
    while low <= high:
        mid = (low + high) // 2
        if call(mid)[2] <= max_seq_length:
            units, low = mid, mid + 1
        else:
            high = mid - 1
    out = []
    for _ in range(num_samples):
        used = units
        text, answers, length = call(used)
        while length > max_seq_length:
            used -= step if used > step else 0
            text, answers, length = call(used)
        cut = text.rfind(ANSWER_PREFIX[:10])
        out.append(RulerSample(text[:cut].find(answers[0]), text[:cut], answers, length, text[cut:]))
    return out


def _needle_spans(context: str, answers: list[str]) -> list[tuple[int, int]]:
    """The character spans of the needles stating ``answers``, in text order (the evidence)."""
    spans = []
    for answer in answers:
        end = context.find(f" is: {answer}.") + len(f" is: {answer}.")
        spans.append((context.rfind("One of the special magic", 0, end), end))
    return sorted(spans)


def niah_sources(
    name: str,
    haystack: str,
    config: NiahConfig,
    n: int,
    seed: int,
    max_seq_length: int,
    count_tokens: CountTokens,
) -> list[Source]:
    """RULER's samples as kvx sources that read as RULER's prompt (``context + question +
    answer_prefix`` is its ``input + answer_prefix``): the prompt cut before its question line,
    RULER's answer prefix as it is (a leading space) run on from it (``inline_prefix``), the needles
    as evidence, and the id the KVDiagnosis release gives it (``<subtask>_<index:06d>``, ``_dup01``...
    for a repeated ``index``); RULER's ``index``, ``length`` and the release's ``prompt_hash`` in the
    metadata."""
    seen: dict[int, int] = {}
    out = []
    for sample in niah_samples(haystack, config, max_seq_length, n, count_tokens, seed):
        repeat = seen[sample.index] = seen.get(sample.index, -1) + 1
        cut = sample.input.rfind("\n") + 1
        context, question = sample.input[:cut], sample.input[cut:]
        metadata = {"ruler_index": sample.index, "ruler_length": sample.length}
        out.append(
            Source(
                id=f"{name}_{sample.index:06d}" + (f"_dup{repeat:02d}" if repeat else ""),
                context=context,
                question=question,
                answers=sample.outputs,
                evidence=_needle_spans(context, sample.outputs),
                answer_prefix=sample.answer_prefix,
                inline_prefix=True,
                metadata={**metadata, "prompt_hash": prompt_hash(sample), "haystack": haystack},
            )
        )
    return out
