"""RULER's own needle draws: the answers NVIDIA/RULER's ``niah.py`` draws from its seed.

Why: the KVDiagnosis release ran RULER's scripts (``prepare.py``, ``--random_seed`` 42): its NIAH
sample ids carry RULER's ``index`` field, which ``niah.py`` overwrites with the first answer's
character offset in the prompt (``niah_single_1_000461``), and its references are RULER's draws.
kvx's own generator (``kvx.tasks.ruler``) draws each source from (task, seed, index) instead, so
its needles never equal the release's.

RULER's rules, as ``niah.py`` states them (read, not copied): one global ``random`` seeded with the
seed; each call of ``generate_input_output`` draws, per key, the key and then its values (a word is a
uniform pick of the sorted adjective-noun pairs of wonderwords' lists, a number uniform in
[10**6, 10**7 - 1], a UUID version 4 from 128 random bits), then the needles' depths (a sample of 40
depths) for an essay haystack, then which keys are queried. For an essay haystack nothing in a call
depends on the haystack's size, so the stream of calls is fixed by the seed alone; the calls RULER
spends before its first sample (a size estimate, then a binary search for the haystack size) and
the retries of a sample too long for the budget are counted in the reader's tokens, so which calls
became the release's samples is found by matching, not computed (:func:`stream`). Noise and needle
haystacks draw a position per needle among the haystack's sentences (and distractor needles), so their
stream depends on the tokenizer-sized haystack too: not reproduced here.
"""

from __future__ import annotations

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
def word_pairs() -> int:
    """How many distinct ``adjective-noun`` words RULER picks among: the product of wonderwords'
    distinct adjectives and nouns (no two pairs join to one string)."""
    assets = importlib.resources.files("wonderwords.assets")
    counts = [
        len({line.rstrip() for line in (assets / f"{kind}list.txt").read_text("utf-8").splitlines()})
        for kind in ("adjective", "noun")
    ]
    return counts[0] * counts[1]


def _draw(kind: str, rng: random.Random) -> str:
    """One needle key or value, consuming ``rng`` as RULER does; a word is its index among the
    sorted pairs (``w<index>``): the answers never hold words, so the pairs are not built."""
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return f"w{rng.choice(range(word_pairs()))}"


def stream(config: NiahConfig, calls: int, seed: int = 42) -> list[tuple[str, ...]]:
    """The answers of RULER's first ``calls`` calls of ``generate_input_output`` for an essay
    haystack with ``config``, in call order (each a tuple: the queried keys' values)."""
    rng = random.Random(seed)
    keys = max(config.num_needle_k, config.num_needle_q)
    out = []
    for _ in range(calls):
        values = []
        for _ in range(keys):
            _draw(config.type_needle_k, rng)
            values.append([_draw(config.type_needle_v, rng) for _ in range(config.num_needle_v)])
        rng.sample(range(DEPTHS), keys * config.num_needle_v)
        queried = rng.sample(range(keys), config.num_needle_q)
        out.append(tuple(value for k in queried for value in values[k]))
    return out
