"""RULER's own needle draws: the answers NVIDIA/RULER's ``niah.py`` draws from its seed.

Why: the KVDiagnosis release ran RULER's scripts (``prepare.py``, ``--random_seed`` 42): its NIAH
sample ids carry RULER's ``index`` field, which ``niah.py`` overwrites with the first answer's
character offset in the prompt (``niah_single_1_000461``), and its references are RULER's draws.
kvx's own generator (``kvx.tasks.ruler``) draws each source from (task, seed, index) instead, so
its needles never equal the release's.

RULER's rules, as ``niah.py`` states them (read, not copied): one global ``random`` seeded with the
seed, of which loading the reader's tokenizer spends one 32-bit word (:func:`ruler_random`); each
call of ``generate_input_output`` draws, per key, the key and then its values (a word is a uniform
pick of the sorted adjective-noun pairs of wonderwords' lists, a number uniform in [10**6, 10**7 - 1],
a UUID version 4 from 128 random bits), then the needles' depths (a sample of 40 depths) for an
essay haystack, then which keys are queried. For an essay haystack nothing in a call
depends on the haystack's size, so the stream of calls is fixed by the seed alone; the calls RULER
spends before its first sample (a size estimate, then a binary search for the haystack size) and
the retries of a sample too long for the budget are counted in the reader's tokens, so which calls
became the release's samples is found by matching, not computed (:func:`stream`). Noise and needle
haystacks draw a position per needle among the haystack's sentences (and distractor needles), so their
stream depends on the tokenizer-sized haystack too: not reproduced here.
"""

from __future__ import annotations

import bisect
import functools
import importlib.resources
import random
import uuid
from dataclasses import dataclass

#: RULER's needle depths: 40 percentages, 0 to 100 (``np.linspace(0, 100, 40)`` rounded)
DEPTHS = 40


@dataclass(frozen=True)
class NiahConfig:
    """One of RULER's NIAH configurations (``scripts/synthetic.yaml``)."""

    type_needle_k: str = "words"
    type_needle_v: str = "numbers"
    num_needle_k: int = 1
    num_needle_v: int = 1
    num_needle_q: int = 1


#: the essay-haystack NIAH subtasks of RULER (and KVDiagnosis), whose draws :func:`stream` reproduces
ESSAY_TASKS = {
    "niah_single_2": NiahConfig(),
    "niah_single_3": NiahConfig(type_needle_v="uuids"),
    "niah_multikey_1": NiahConfig(num_needle_k=4),
    "niah_multivalue": NiahConfig(num_needle_v=4),
    "niah_multiquery": NiahConfig(num_needle_k=4, num_needle_q=4),
}


@functools.cache
def _lines(kind: str) -> tuple[str, ...]:
    """wonderwords' ``kind`` list as RULER reads it (each line right-stripped), deduplicated."""
    text = (importlib.resources.files("wonderwords.assets") / f"{kind}list.txt").read_text("utf-8")
    return tuple(sorted({line.rstrip() for line in text.splitlines()}))


@functools.cache
def _families() -> tuple[tuple[str, ...], ...]:
    """The adjectives in the order of RULER's sorted words, grouped so that an adjective whose
    ``adj-`` starts another's (``blue-``, ``blue-eyed-``) shares its group: the group's words
    interleave, every other adjective's ``adj-noun`` words are one run, in noun order."""
    groups: list[list[str]] = []
    for adjective in sorted(_lines("adjective"), key=lambda a: a + "-"):
        if groups and (adjective + "-").startswith(groups[-1][0] + "-"):
            groups[-1].append(adjective)
        else:
            groups.append([adjective])
    return tuple(map(tuple, groups))


@functools.cache
def _starts() -> tuple[int, ...]:
    """Where each adjective group's words start among RULER's sorted words."""
    starts, total = [], 0
    for group in _families():
        starts.append(total)
        total += len(group) * len(_lines("noun"))
    return tuple(starts)


@functools.cache
def _group_words(group: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(f"{a}-{n}" for a in group for n in _lines("noun")))


def word_pairs() -> int:
    """How many distinct ``adjective-noun`` words RULER picks among: the product of wonderwords'
    distinct adjectives and nouns (no two pairs join to one string)."""
    return len(_lines("adjective")) * len(_lines("noun"))


def word(index: int) -> str:
    """RULER's ``words[index]`` (``sorted(set(adj-noun))`` over wonderwords' lists), found without
    building its 6 million words (ten seconds): from the adjective groups' runs."""
    group = bisect.bisect_right(_starts(), index) - 1
    adjectives, offset = _families()[group], index - _starts()[group]
    if len(adjectives) > 1:
        return _group_words(adjectives)[offset]
    return f"{adjectives[0]}-{_lines('noun')[offset]}"


def draw(kind: str, rng: random.Random) -> str:
    """One needle key or value, consuming ``rng`` as RULER's ``generate_random`` does."""
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return word(rng.choice(range(word_pairs())))


def ruler_random(seed: int) -> random.Random:
    """RULER's global ``random`` as its first ``generate_input_output`` finds it: ``niah.py`` seeds
    it, then loads the reader's tokenizer, and importing ``transformers`` imports ``rich``, whose
    ``rich.style`` draws ``getrandbits(24)`` (one 32-bit word) from it at import. Without that draw
    the needle haystacks' size search settles one haystack line off (niah_multikey_2/3 at 8K)."""
    rng = random.Random(seed)
    rng.getrandbits(24)
    return rng


def stream(config: NiahConfig, calls: int, seed: int = 42) -> list[tuple[str, ...]]:
    """The answers of RULER's first ``calls`` calls of ``generate_input_output`` for an essay
    haystack with ``config``, in call order (each a tuple: the queried keys' values)."""
    rng = ruler_random(seed)
    keys = max(config.num_needle_k, config.num_needle_q)
    out = []
    for _ in range(calls):
        values = []
        for _ in range(keys):
            draw(config.type_needle_k, rng)
            values.append([draw(config.type_needle_v, rng) for _ in range(config.num_needle_v)])
        rng.sample(range(DEPTHS), keys * config.num_needle_v)
        queried = rng.sample(range(keys), config.num_needle_q)
        out.append(tuple(value for k in queried for value in values[k]))
    return out
