"""RULER-style synthetic tasks (niah, vt, cwe, fwe), generated in-process.

Reproduces NVIDIA RULER's synthetic tasks without its scripts so that every split is a pure
function of (task config, seed, context_tokens, tokenizer), and so that each answer-bearing
sentence is located by exact character offsets: diagnostics can then ask whether a compressor kept
the evidence. Source ``index`` draws its content from (seed, index) alone, and its size search starts
from the previous source's size, so a larger ``n`` extends a smaller one.

Prompts are sized by bisection over the amount of haystack, measuring ``context + "\\n" + question``
with the reader's tokenizer and staying at or under ``context_tokens`` (chat-template tokens are the
reader's business).
"""

from __future__ import annotations

import functools
import importlib.resources
import itertools
import json
import math
import random
import re
import string
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from kvx.core.checks import check_choice, check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.ruler_data import NEEDLE, NOISE, ruler_data_file
from kvx.tasks.ruler_stream import draw
from kvx.tasks.scoring import string_match_all

HAYSTACKS = ("noise", "essay", "needle")
#: ``kvx``: kvx's own draws per source; ``ruler``: NVIDIA RULER's own procedure (``ruler_procedure``)
GENERATORS = ("kvx", "ruler")
NEEDLE_TYPES = ("words", "numbers", "uuids")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def require_ruler_data(setting: str, name: str) -> None:
    """Refuse ``setting`` before any model loads when NVIDIA's RULER package is not installed."""
    try:
        ruler_data_file(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{setting}: {exc}") from None


@functools.lru_cache(maxsize=1)
def _essay_words() -> tuple[str, ...]:
    with ruler_data_file("PaulGrahamEssays.json").open(encoding="utf-8") as handle:
        return tuple(json.load(handle)["text"].split())


@functools.cache
def _wordlist(part_of_speech: str) -> tuple[str, ...]:
    """wonderwords' bundled list, alphabetic entries only (so keys like ``adj-noun`` parse cleanly),
    lowercased and sorted so that seeded draws never depend on set iteration order."""
    text = (importlib.resources.files("wonderwords.assets") / f"{part_of_speech}list.txt").read_text("utf-8")
    return tuple(sorted({word.strip().lower() for word in text.splitlines() if word.strip().isalpha()}))


def _draw(kind: str, rng: random.Random) -> str:
    """Numbers and UUIDs as RULER draws them; words from kvx's own lists (cleaned and lowercased)."""
    if kind == "words":
        return f"{rng.choice(_wordlist('adjective'))}-{rng.choice(_wordlist('noun'))}"
    return draw(kind, rng)


def _draw_unique(draw: Callable[[], str], used: set[str]) -> str:
    """Redraw until unseen, so no distractor repeats a key or value the answer depends on."""
    value = draw()
    while value in used:
        value = draw()
    used.add(value)
    return value


def too_small(context_tokens: int, shortest: int) -> str:
    """Why a split cannot be built (:func:`fit_units` and ``RulerTask.check_budget`` say it alike)."""
    shortest_prompt = f"the shortest prompt of this task has {shortest} tokens"
    return f"context_tokens={context_tokens} is too small: {shortest_prompt}"


def fit_units(
    measure: Callable[[int], int], target: int, lowest: int, highest: int, hint: int
) -> tuple[int, int]:
    """Largest ``k`` in [lowest, highest] with ``measure(k) <= target`` and its measure.

    Assumes ``measure`` grows with ``k``. Gallops from ``hint`` (the previous source's answer, so later
    sources cost a few calls) and then bisects: O(log k) tokenizer calls, never one per sentence.
    """
    seen: dict[int, int] = {}

    def fits(k: int) -> bool:
        if k not in seen:
            seen[k] = measure(k)
        return seen[k] <= target

    start, step = min(max(hint, lowest), highest), 1
    if fits(start):
        lo, hi = start, highest + 1
        while lo + step <= highest:
            if not fits(lo + step):
                hi = lo + step
                break
            lo, step = lo + step, step * 2
    else:
        hi = start
        while True:
            probe = max(hi - step, lowest)
            if fits(probe):
                lo = probe
                break
            if probe == lowest:
                raise ValueError(too_small(target, seen[lowest]))
            hi, step = probe, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, seen[lo]


def weave(
    segments: Sequence[str], inserts: Sequence[tuple[int, str, bool]], sep: str
) -> tuple[str, list[tuple[int, int]], list[int]]:
    """Insert sentences before segment positions and join with ``sep``.

    ``inserts`` are (position, text, is_evidence). Returns the text, the character spans of evidence
    inserts and their indices in ``inserts``, both in text order.
    """
    parts: list[tuple[str, int | None]] = []
    cursor = 0
    for i in sorted(range(len(inserts)), key=lambda i: inserts[i][0]):
        position, text, is_evidence = inserts[i]
        parts.extend((segment, None) for segment in segments[cursor:position])
        cursor = max(cursor, position)
        parts.append((text, i if is_evidence else None))
    parts.extend((segment, None) for segment in segments[cursor:])
    spans, which, offset = [], [], 0
    for text, tag in parts:
        if tag is not None:
            spans.append((offset, offset + len(text)))
            which.append(tag)
        offset += len(text) + len(sep)
    return sep.join(text for text, _ in parts), spans, which


class Prompt(NamedTuple):
    """One generated prompt before it gets its id."""

    context: str
    question: str
    answers: list[str]
    evidence: list[tuple[int, int]]
    answer_prefix: str
    metadata: dict[str, Any]


def _prompt(
    instruction: str, body: str, spans: list[tuple[int, int]], sep: str = "\n", **fields: Any
) -> Prompt:
    """Put the instruction before the body (on its own line unless ``sep`` says otherwise: RULER's FWE
    template runs on with a space) and shift the evidence spans to match."""
    shift = len(instruction) + len(sep)
    evidence = [(start + shift, end + shift) for start, end in spans]
    return Prompt(context=f"{instruction}{sep}{body}", evidence=evidence, **fields)


def word_spans(
    words: Sequence[str], answers: Sequence[str], labels: Sequence[str] | None = None
) -> tuple[str, list[tuple[int, int]]]:
    """``words`` joined by spaces (each after its label, ``"3. word"``, when ``labels`` are given) and
    the character span of every occurrence of an answer word, in text order: the evidence of the
    counting tasks, whose answer is stated by no one span but by all of its occurrences together."""
    wanted = set(answers)
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    offset = 0
    for i, word in enumerate(words):
        head = f"{labels[i]} " if labels is not None else ""
        if word in wanted:
            spans.append((offset + len(head), offset + len(head) + len(word)))
        parts.append(head + word)
        offset += len(head) + len(word) + 1
    return " ".join(parts), spans


class RulerTask(Task):
    """Shared sizing, ids and scoring; subclasses describe one prompt as a function of haystack size."""

    name: ClassVar[str]
    family: ClassVar[str | None] = "ruler"
    #: every RULER prompt has a fixed instruction and question of over 32 words
    min_context_tokens: ClassVar[int] = 32

    @abstractmethod
    def _units(self, context_tokens: int) -> tuple[int, int]:
        """Smallest and largest haystack size (in the subclass's own units) worth trying."""

    @abstractmethod
    def _builder(
        self, rng: random.Random, context_tokens: int, count_tokens: CountTokens
    ) -> Callable[[int], Prompt]:
        """Draw everything independent of haystack size from ``rng`` (and size any fixed example with
        ``count_tokens``); return a pure size -> prompt map."""

    def _rng(self, seed: int, index: int) -> random.Random:
        """Source ``index``'s draws: from (seed, index) alone."""
        return random.Random(f"{self.name}:{seed}:{index}")

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        lowest, highest = self._units(context_tokens)
        out: list[Source] = []
        units = lowest
        for index in range(n):
            build = self._builder(self._rng(seed, index), context_tokens, count_tokens)
            measure = functools.partial(_measure, build, count_tokens)
            units, tokens = fit_units(measure, context_tokens, lowest, highest, hint=units)
            prompt = build(units)
            metadata = {**prompt.metadata, "haystack_units": units, "prompt_tokens": tokens}
            out.append(
                Source(id=f"ruler_{self.name}_{index:06d}", **{**prompt._asdict(), "metadata": metadata})
            )
        return out

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:
        """``sources`` fails exactly when some source's prompt at the smallest haystack exceeds
        ``context_tokens`` (:func:`fit_units`, its measure growing with the haystack): measure each
        source's shortest prompt, as ``sources`` draws it, and fail at the first one as it does."""
        lowest, _ = self._units(context_tokens)
        for index in range(n):
            build = self._builder(self._rng(seed, index), context_tokens, count_tokens)
            shortest = _measure(build, count_tokens, lowest)
            if shortest > context_tokens:
                raise ValueError(too_small(context_tokens, shortest))

    def evaluate(self, answer: str, source: Source) -> Score:
        return Score.of(string_match_all(answer, source.answers), answer.strip())


def _measure(build: Callable[[int], Prompt], count_tokens: CountTokens, units: int) -> int:
    prompt = build(units)
    return count_tokens(f"{prompt.context}\n{prompt.question}")


@dataclass
class _Niah(RulerTask):
    """Needle in a haystack: recall the value(s) stated for the queried key(s).

    Haystack units: noise blocks (``noise``), essay words (``essay``) or distractor needles
    (``needle``). Needle depths are uniform in [0, 100] percent of the haystack.
    """

    haystack: str = "noise"
    type_needle_k: str = "words"
    type_needle_v: str = "numbers"
    num_needle_k: int = 1
    num_needle_v: int = 1
    num_needle_q: int = 1
    #: ``ruler``: RULER's own samples (its seed is ``seed``: 42 for the KVDiagnosis release), sized
    #: with the reader's tokenizer to ``context_tokens`` including RULER's 128 generated tokens
    generator: str = field(default="kvx", metadata=WHEN_SET)

    def __post_init__(self) -> None:
        check_choice("task.generator", self.generator, GENERATORS)
        check_choice("task.haystack", self.haystack, HAYSTACKS)
        check_choice("task.type_needle_k", self.type_needle_k, NEEDLE_TYPES)
        check_choice("task.type_needle_v", self.type_needle_v, NEEDLE_TYPES)
        for key in ("num_needle_k", "num_needle_v", "num_needle_q"):
            check_int(f"task.{key}", getattr(self, key), 1)

    def validate(self) -> None:
        if self.haystack == "essay":
            require_ruler_data("task.haystack=essay", "PaulGrahamEssays.json")
        if self.generator == "ruler" and self.haystack == "essay":
            try:
                from nltk.data import find

                find("tokenizers/punkt_tab/english/")
            except LookupError:
                raise ConfigError(
                    "task.generator=ruler splits essays with NLTK's Punkt as RULER does: "
                    "install its data with `python -m nltk.downloader punkt_tab`"
                ) from None

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        if self.generator == "kvx":
            return super().sources(n, seed, context_tokens, count_tokens)
        from kvx.tasks.ruler_procedure import niah_sources
        from kvx.tasks.ruler_stream import NiahConfig

        fields = ("type_needle_k", "type_needle_v", "num_needle_k", "num_needle_v", "num_needle_q")
        config = NiahConfig(**{key: getattr(self, key) for key in fields})
        return niah_sources(self.name, self.haystack, config, n, seed, context_tokens, count_tokens)

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:
        """RULER's procedure never fails for room (it falls back to its smallest haystack)."""
        if self.generator == "kvx":
            super().check_budget(n, seed, context_tokens, count_tokens)

    def _units(self, context_tokens: int) -> tuple[int, int]:
        if self.haystack == "essay":
            return 0, min(context_tokens, len(_essay_words()))
        return 0, context_tokens

    def _haystack(self, units: int, rng: random.Random, used: set[str]) -> list[str]:
        if self.haystack == "essay":
            text = " ".join(_essay_words()[:units])
            return [sentence for sentence in _SENTENCE_END.split(text) if sentence]
        if self.haystack == "noise":
            return [NOISE] * units
        return [
            NEEDLE.format(
                type_needle_v=self.type_needle_v,
                key=_draw_unique(lambda: _draw(self.type_needle_k, rng), used),
                value=_draw_unique(lambda: _draw(self.type_needle_v, rng), used),
            )
            for _ in range(units)
        ]

    def _builder(
        self, rng: random.Random, context_tokens: int, count_tokens: CountTokens
    ) -> Callable[[int], Prompt]:
        used: set[str] = set()
        keys = [
            _draw_unique(lambda: _draw(self.type_needle_k, rng), used)
            for _ in range(max(self.num_needle_k, self.num_needle_q))
        ]
        values = [
            [_draw_unique(lambda: _draw(self.type_needle_v, rng), used) for _ in range(self.num_needle_v)]
            for _ in keys
        ]
        needles = [
            (k, NEEDLE.format(type_needle_v=self.type_needle_v, key=keys[k], value=value))
            for k in range(len(keys))
            for value in values[k]
        ]
        rng.shuffle(needles)
        depths = [round(rng.uniform(0, 100), 2) for _ in needles]
        queried = rng.sample(range(len(keys)), self.num_needle_q)
        queries = [keys[k] for k in queried]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        answers = [value for k in queried for value in values[k]]
        haystack_seed = rng.getrandbits(64)
        sep = " " if self.haystack == "essay" else "\n"
        if self.num_needle_q * self.num_needle_v == 1:
            kind = self.type_needle_v[:-1]
            instruction = (
                f"A special magic {kind} is hidden within the following text. "
                f"Make sure to memorize it. I will quiz you about the {kind} afterwards."
            )
            question = f"What is the special magic {kind} for {query} mentioned in the provided text?"
            prefix = f"The special magic {kind} for {query} mentioned in the provided text is"
        else:
            kind = self.type_needle_v
            instruction = (
                f"Some special magic {kind} are hidden within the following text. "
                f"Make sure to memorize it. I will quiz you about the {kind} afterwards."
            )
            question = f"What are all the special magic {kind} for {query} mentioned in the provided text?"
            prefix = f"The special magic {kind} for {query} mentioned in the provided text are"

        def build(units: int) -> Prompt:
            segments = self._haystack(units, random.Random(haystack_seed), set(used))
            inserts = [
                (int(len(segments) * depth / 100), text, k in queried)
                for (k, text), depth in zip(needles, depths)
            ]
            body, spans, which = weave(segments, inserts, sep)
            metadata = {
                "haystack": self.haystack,
                "queries": queries,
                "depths": [depths[i] for i in which],
                "all_depths": depths,
            }
            return _prompt(
                instruction,
                body,
                spans,
                question=question,
                answers=answers,
                answer_prefix=prefix,
                metadata=metadata,
            )

        return build


@dataclass
class NiahSingle(_Niah):
    """One word key, one 7-digit value, repeated-noise haystack: kvx's default, easy even for small models."""

    name: ClassVar[str] = "niah_single"


@dataclass
class NiahMultikey(_Niah):
    """Four keys among a haystack of distractor needles: the query key must be told apart from the rest."""

    name: ClassVar[str] = "niah_multikey"
    haystack: str = "needle"
    num_needle_k: int = 4


@dataclass
class _RulerNiah(_Niah):
    """A NIAH configuration of RULER's own (``synthetic.yaml``), decoded with the KVDiagnosis
    release's budget for the NIAH families (64 tokens, ``src/kvcachebench/schema.py``); kvx's two
    defaults above keep the short budget of every kvx QA task."""

    max_new_tokens: ClassVar[int] = 64


@dataclass
class NiahMultivalue(_RulerNiah):
    """One key stated four times with different values in essays; all four values must be recalled."""

    name: ClassVar[str] = "niah_multivalue"
    haystack: str = "essay"
    num_needle_v: int = 4


@dataclass
class NiahMultiquery(_RulerNiah):
    """Four keys in essays, all four queried at once."""

    name: ClassVar[str] = "niah_multiquery"
    haystack: str = "essay"
    num_needle_k: int = 4
    num_needle_q: int = 4


@dataclass
class VariableTracking(RulerTask):
    """Chains ``VAR B = VAR A`` hidden in noise; name every variable that ends up holding the first value.

    Evidence is every statement of the queried chain; other chains are distractors. Haystack units
    are noise blocks and chain statements keep their order at uniform random depths. As in RULER, an
    answered example of the task (its own names and value, up to ``example_tokens``) comes first.
    """

    name: ClassVar[str] = "vt"
    #: 2: RULER's in-context example before the task
    scorer_version: ClassVar[str] = "2"
    #: the KVDiagnosis release's budget for ruler_variable_tracking (src/kvcachebench/schema.py)
    max_new_tokens: ClassVar[int] = 128
    #: RULER sizes its in-context example to at most 500 tokens (variable_tracking.py, max_seq_length=500)
    example_tokens: ClassVar[int] = 500
    num_chains: int = 1
    num_hops: int = 4

    def __post_init__(self) -> None:
        check_int("task.num_chains", self.num_chains, 1)
        check_int("task.num_hops", self.num_hops, 1)

    def _units(self, context_tokens: int) -> tuple[int, int]:
        return 0, context_tokens

    def _chains(
        self, rng: random.Random, length: int, hops: int, shared_value: bool
    ) -> list[tuple[list[str], str, list[float]]]:
        """``num_chains`` chains of ``hops`` assignments: unique ``length``-letter names, a 5-digit
        value (one for every chain in RULER's example, one each otherwise), sorted uniform depths."""
        used: set[str] = set()
        value = _draw_unique(lambda: str(rng.randint(10000, 99999)), used)
        chains = []
        for chain in range(self.num_chains):
            names = [
                _draw_unique(lambda: "".join(rng.choices(string.ascii_uppercase, k=length)), used)
                for _ in range(hops + 1)
            ]
            if chain and not shared_value:
                value = _draw_unique(lambda: str(rng.randint(10000, 99999)), used)
            chains.append((names, value, sorted(rng.random() for _ in names)))
        return chains

    @staticmethod
    def _text(
        chains: list[tuple[list[str], str, list[float]]], units: int
    ) -> tuple[str, list[tuple[int, int]]]:
        """Noise blocks with each chain's statements in order at its depths; the first chain's spans."""
        inserts = []
        for chain, (names, value, depths) in enumerate(chains):
            statements = [f"VAR {names[0]} = {value}"]
            statements += [f"VAR {b} = VAR {a}" for a, b in itertools.pairwise(names)]
            inserts += [(int(units * d), text, chain == 0) for d, text in zip(depths, statements)]
        body, spans, _ = weave([NOISE] * units, inserts, "\n")
        return body, spans

    @staticmethod
    def _wording(names: list[str], value: str) -> tuple[str, str, str]:
        """RULER's variable_tracking template: instruction, question and answer prefix."""
        return (
            "Memorize and track the chain(s) of variable assignment hidden in the following text.\n",
            f"Question: Find all variables that are assigned the value {value} in the text above.",
            "Answer: According to the chain(s) of variable assignment in the text above, "
            f"{len(names)} variables are assigned the value {value}, they are:",
        )

    def _example(self, rng: random.Random, count_tokens: CountTokens) -> str:
        """RULER's in-context example, answered, before the task (``sys_vartrack_w_noise_random`` with
        ``icl_example``): 3-letter names, at most 10 hops, every chain holding one value, as much noise
        as keeps the unanswered example within ``example_tokens``."""
        chains = self._chains(rng, 3, min(10, self.num_hops), shared_value=True)
        names, value, _ = chains[0]
        instruction, question, prefix = self._wording(names, value)

        def unanswered(units: int) -> str:
            return f"{instruction}\n{self._text(chains, units)[0]}\n{question} {prefix}"

        units, _ = fit_units(lambda k: count_tokens(unanswered(k)), self.example_tokens, 0, 500, hint=0)
        return f"{unanswered(units)}  {' '.join(names)}\n"  # RULER's prefix ends in a space, then " "

    def _builder(
        self, rng: random.Random, context_tokens: int, count_tokens: CountTokens
    ) -> Callable[[int], Prompt]:
        chains = self._chains(rng, 5, self.num_hops, shared_value=False)
        names, value, _ = chains[0]
        instruction, question, prefix = self._wording(names, value)
        example = self._example(rng, count_tokens)

        def build(units: int) -> Prompt:
            body, spans = self._text(chains, units)
            return _prompt(
                f"{example}\n{instruction}",
                body,
                spans,
                question=question,
                answers=names,
                answer_prefix=prefix,
                metadata={},
            )

        return build


@functools.lru_cache(maxsize=1)
def _common_vocabulary() -> tuple[str, ...]:
    return tuple(sorted(set(_wordlist("noun") + _wordlist("adjective") + _wordlist("verb"))))


@dataclass
class CommonWords(RulerTask):
    """Numbered word list where ``num_cw`` words repeat ``freq_cw`` times and the rest ``freq_ucw`` times.

    ``freq_cw = freq_ucw = 0`` means RULER's choice: 30/3 from 4096 tokens up, 6/1 below. As in RULER,
    one answered example list comes first. Evidence is every occurrence of a common word in the task's
    list (the word itself, not its ``"12. "`` label): the answer is a count, stated by all of them
    together, so ``num_cw x freq_cw`` spans.
    """

    name: ClassVar[str] = "cwe"
    #: 2: evidence spans (the common words' occurrences) where version 1 had none; RULER's example
    scorer_version: ClassVar[str] = "2"
    #: the KVDiagnosis release's budget for ruler_common_words_extraction (src/kvcachebench/schema.py)
    max_new_tokens: ClassVar[int] = 256
    num_cw: int = 10
    freq_cw: int = 0
    freq_ucw: int = 0

    def validate(self) -> None:
        check_int("task.num_cw", self.num_cw, 1)
        if (self.freq_cw or self.freq_ucw) and not self.freq_cw > self.freq_ucw >= 1:
            raise ConfigError(
                f"task.freq_cw={self.freq_cw} and task.freq_ucw={self.freq_ucw}: need "
                "freq_cw > freq_ucw >= 1, or both 0 (RULER's choice)"
            )

    def _frequencies(self, context_tokens: int) -> tuple[int, int]:
        if self.freq_cw or self.freq_ucw:
            common, uncommon = self.freq_cw, self.freq_ucw
        else:
            common, uncommon = (30, 3) if context_tokens >= 4096 else (6, 1)
        if not common > uncommon >= 1 or self.num_cw < 1:
            raise ValueError(
                f"need freq_cw > freq_ucw >= 1 and num_cw >= 1, got {common}, {uncommon}, {self.num_cw}"
            )
        return common, uncommon

    def _units(self, context_tokens: int) -> tuple[int, int]:
        self._frequencies(context_tokens)
        return 0, len(_common_vocabulary()) - self.num_cw

    def _builder(
        self, rng: random.Random, context_tokens: int, count_tokens: CountTokens
    ) -> Callable[[int], Prompt]:
        freq_cw, freq_ucw = self._frequencies(context_tokens)
        vocabulary = list(_common_vocabulary())
        rng.shuffle(vocabulary)
        common = vocabulary[: self.num_cw]
        order_seed = rng.getrandbits(64)
        instruction = (
            "Below is a numbered list of words. In these words, some appear more often than others. "
            "Memorize the ones that appear most often."
        )
        question = f"Question: What are the {self.num_cw} most common words in the above list?"
        prefix = f"Answer: The top {self.num_cw} words that appear most often in the list are:"
        # RULER's one answered example before the task (common_words_extraction.py, num_fewshot=1):
        # 40 words at 10/3 repeats from 4096 tokens up, 20 at 3/1 below; none of them is an answer
        size, repeats, others = (40, 10, 3) if context_tokens >= 4096 else (20, 3, 1)
        drawn = rng.sample(vocabulary[self.num_cw :], size)
        shown = drawn[: self.num_cw] * repeats + drawn[self.num_cw :] * others
        rng.shuffle(shown)
        listed, _ = word_spans(shown, [], [f"{i}." for i in range(1, len(shown) + 1)])
        answered = " ".join(f"{i}. {word}" for i, word in enumerate(drawn[: self.num_cw], 1))
        example = f"{instruction}\n{listed}\n{question} {prefix} {answered}"

        def build(units: int) -> Prompt:
            words = common * freq_cw + vocabulary[self.num_cw : self.num_cw + units] * freq_ucw
            random.Random(order_seed).shuffle(words)
            body, spans = word_spans(words, common, [f"{i}." for i in range(1, len(words) + 1)])
            metadata = {"freq_cw": freq_cw, "freq_ucw": freq_ucw, "num_words": len(words)}
            return _prompt(
                f"{example}\n{instruction}",
                body,
                spans,
                question=question,
                answers=common,
                answer_prefix=prefix,
                metadata=metadata,
            )

        return build


@dataclass
class FrequentWords(RulerTask):
    """Coded words with Zipf(``alpha``) counts; name the three most frequent (rank 1 is the noise ``...``).

    Haystack units are the Zipf sample size ``N`` (word of rank r appears ``int(N r^-alpha / zeta(alpha))``
    times); sizes start where rank 4 strictly outnumbers rank 5, so the answer is unambiguous.
    ``vocab_size = 0`` means RULER's ``context_tokens // 50`` (at least 10). Evidence is every
    occurrence of the three answer words: the answer is a count, stated by all of them together.
    The instruction runs on into the text with a space, as RULER's template has it.
    """

    name: ClassVar[str] = "fwe"
    #: 2: evidence spans (the answer words' occurrences) where version 1 had none, RULER's space after
    #: the instruction where version 1 had a newline
    scorer_version: ClassVar[str] = "2"
    #: the KVDiagnosis release's budget for ruler_frequent_words_extraction (src/kvcachebench/schema.py)
    max_new_tokens: ClassVar[int] = 256
    alpha: float = 2.0
    coded_wordlen: int = 6
    vocab_size: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or self.alpha <= 1:
            raise ConfigError(f"task.alpha={self.alpha!r} must be a number > 1 (Zipf exponent)")
        check_int("task.coded_wordlen", self.coded_wordlen, 1)
        if check_int("task.vocab_size", self.vocab_size, 0) in range(1, 5):
            raise ConfigError(f"task.vocab_size={self.vocab_size} must be 0 (auto) or >= 5")

    def _share(self, rank: int) -> float:
        from scipy.special import zeta

        return rank**-self.alpha / float(zeta(self.alpha))

    def _units(self, context_tokens: int) -> tuple[int, int]:
        return math.ceil(1 / (self._share(4) - self._share(5))), 4 * context_tokens

    def _builder(
        self, rng: random.Random, context_tokens: int, count_tokens: CountTokens
    ) -> Callable[[int], Prompt]:
        size = self.vocab_size or max(context_tokens // 50, 10)
        used: set[str] = set()
        vocabulary = [
            _draw_unique(lambda: "".join(rng.choices(string.ascii_lowercase, k=self.coded_wordlen)), used)
            for _ in range(size)
        ]
        vocabulary[0] = "..."
        shares = [self._share(rank) for rank in range(1, size + 1)]
        order_seed = rng.getrandbits(64)
        instruction = (
            "Read the following coded text and track the frequency of each coded word. "
            "Find the three most frequently appeared coded words."
        )
        question = (
            "Question: Do not provide any explanation. Please ignore the dots '....'. "
            "What are the three most frequently appeared words in the above coded text?"
        )
        prefix = "Answer: According to the coded text above, the three most frequently appeared words are:"

        def build(units: int) -> Prompt:
            words = [word for word, share in zip(vocabulary, shares) for _ in range(int(units * share))]
            random.Random(order_seed).shuffle(words)
            body, spans = word_spans(words, vocabulary[1:4])
            metadata = {"vocab_size": size, "num_words": len(words)}
            return _prompt(
                instruction,
                body,
                spans,
                " ",
                question=question,
                answers=vocabulary[1:4],
                answer_prefix=prefix,
                metadata=metadata,
            )

        return build


# RULER's named subtasks (NVIDIA/RULER scripts/synthetic.yaml): the configurations the
# KVDiagnosis workloads run, one registered task each, so `task=ruler_niah_single_2` is RULER's.


@dataclass
class NiahSingle1(_RulerNiah):
    """RULER ``niah_single_1``: noise haystack, word key, number value."""

    name: ClassVar[str] = "niah_single_1"


@dataclass
class NiahSingle2(_RulerNiah):
    """RULER ``niah_single_2``: essay haystack, word key, number value."""

    name: ClassVar[str] = "niah_single_2"
    haystack: str = "essay"


@dataclass
class NiahSingle3(_RulerNiah):
    """RULER ``niah_single_3``: essay haystack, word key, UUID value."""

    name: ClassVar[str] = "niah_single_3"
    haystack: str = "essay"
    type_needle_v: str = "uuids"


@dataclass
class NiahMultikey1(_RulerNiah):
    """RULER ``niah_multikey_1``: essay haystack, four word keys (three distractor needles)."""

    name: ClassVar[str] = "niah_multikey_1"
    haystack: str = "essay"
    num_needle_k: int = 4


@dataclass
class NiahMultikey2(_RulerNiah):
    """RULER ``niah_multikey_2``: a haystack of word-key/number-value distractor needles."""

    name: ClassVar[str] = "niah_multikey_2"
    haystack: str = "needle"


@dataclass
class NiahMultikey3(_RulerNiah):
    """RULER ``niah_multikey_3``: a haystack of UUID-key/UUID-value distractor needles."""

    name: ClassVar[str] = "niah_multikey_3"
    haystack: str = "needle"
    type_needle_k: str = "uuids"
    type_needle_v: str = "uuids"
