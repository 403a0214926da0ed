"""Qasper: questions about NLP papers, answered from the full text with annotated evidence paragraphs.

Reads allenai's official v0.3 release (``qasper-test-v0.3.json`` or ``qasper-dev-v0.3.json``, CC BY
4.0): one JSON object mapping paper ids to ``{title, abstract, full_text: [{section_name,
paragraphs}], qas: [{question, question_id, answers: [{answer: {unanswerable, extractive_spans,
yes_no, free_form_answer, evidence, highlighted_evidence}}]}]}``.

The rules follow the KVDiagnosis release, whose 200 Qasper sources are LongBench's Qasper rows
(``task_key`` ``longbench_qasper`` in ``data/processed/full_population/fullcache.jsonl.gz``):

* a source is one annotator answer to one question (``qasper_000001`` and ``qasper_000002`` share a
  prompt hash and differ in their reference), with that answer as its single reference;
* the reference is the extractive spans joined by ``"; "`` (``qasper_000019``: ``"Wang et al.;
  CrowdFlower dataset"``), else the free-form answer, else ``yes`` / ``no``; unanswerable answers
  are not sources (none of the release's 200 references is "unanswerable");
* the prompt is LongBench's Qasper prompt, byte for byte (its space before "Answer the question"
  included), with ``Answer:`` after the question; the decoding budget is LongBench's 128 tokens
  (the release's raw answers are at most 773 characters long);
* the score is KVDiagnosis containment of the whole reference (not of each span: ``qasper_000019``
  scores 0.0 for an answer holding both spans apart), correct only at 1.0.

Where the release is silent (it publishes no Qasper file of its own), kvx chooses: an answer is a
source only when it also has at least one evidence string (the benchmark's Qasper is the
evidence-annotated one), and the split is ``n`` eligible answers drawn by a seeded permutation over
the file order (papers, questions, answers), so ``n=200`` gives a fixed 200-source set per seed.

``task.ids`` fixes the split instead, in its order (the first ``n_sources``): a list or a file of
answer ids (``<question_id>_<answer index>``, the source id without ``qasper_``; any answer with a
reference, evidence or not), or a KVDiagnosis release folder, whose 200 samples are found in the file
by their references in the release's order (``kvx.tasks.kvdiagnosis_ids.qasper_positions``).

The context is the article: the preamble, ``Article: <title>``, then per section (the abstract
first) a heading segment and one ``passage`` segment per non-blank paragraph, joined by a blank
line, so text transforms can keep or drop paragraphs. Each evidence string is mapped to its span in
this rendered context (exactly, else ignoring whitespace differences); one that cannot be mapped
(a figure or table caption, ``FLOAT SELECTED: ...``, is not in the article's text; a paragraph
found twice is ambiguous) is recorded as unaligned in ``metadata["evidence"]`` and never removes
the source.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.source import Segment, Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import seeded_order
from kvx.tasks.kvdiagnosis_ids import is_release, qasper_positions, release_manifest, release_sources
from kvx.tasks.rag import first_n, ids_label, score_rag, select_ids

RELEASE = "https://allenai.org/data/qasper"
ARCHIVES = (
    "https://qasper-dataset.s3.us-west-2.amazonaws.com/qasper-test-and-evaluator-v0.3.tgz "
    "(qasper-test-v0.3.json) or "
    "https://qasper-dataset.s3.us-west-2.amazonaws.com/qasper-train-dev-v0.3.tgz (qasper-dev-v0.3.json)"
)
WHERE = (
    f"task=qasper reads allenai's Qasper v0.3 release ({RELEASE}, CC BY 4.0): download {ARCHIVES}, "
    "extract it and set task.path=/path/to/qasper-test-v0.3.json"
)
#: LongBench's Qasper prompt (THUDM/LongBench config/dataset2prompt.json), split around the article
INSTRUCTION = (
    "You are given a scientific article and a question. Answer the question as concisely as you can, "
    "using a single phrase or sentence if possible. If the question cannot be answered based on the "
    'information in the article, write "unanswerable". If the question is a yes/no question, answer '
    '"yes", "no", or "unanswerable". Do not provide any explanation.'
)
QUESTION = (
    "\n\n Answer the question based on the above article as concisely as you can, using a single phrase "
    "or sentence if possible. If the question cannot be answered based on the information in the "
    'article, write "unanswerable". If the question is a yes/no question, answer "yes", "no", or '
    '"unanswerable". Do not provide any explanation.\n\nQuestion: {question}'
)
FLOAT = "FLOAT SELECTED"

Span = tuple[int, int]


@dataclass(frozen=True)
class Candidate:
    """One annotator answer that may become a source: where it sits in the file and its reference."""

    paper_id: str
    question_index: int
    answer_index: int
    reference: str  # "" when the answer gives none (an unanswerable or empty annotation)
    kind: str  # unanswerable | extractive | free_form | yes_no | none
    n_evidence: int  # non-blank evidence strings


def reference(answer: dict[str, Any]) -> tuple[str, str]:
    """(reference text, answer kind) of one annotator answer, as the release writes references."""
    if answer.get("unanswerable"):
        return "", "unanswerable"
    spans = [s for s in answer.get("extractive_spans") or [] if s.strip()]
    if spans:
        return "; ".join(spans), "extractive"
    if (answer.get("free_form_answer") or "").strip():
        return answer["free_form_answer"], "free_form"
    if answer.get("yes_no") is not None:
        return ("yes" if answer["yes_no"] else "no"), "yes_no"
    return "", "none"


def article_segments(paper: dict[str, Any]) -> list[Segment]:
    """The preamble, the title line, then per section (the abstract first) its heading and one
    ``passage`` segment per non-blank paragraph; sections without a paragraph are left out."""
    segments = [
        Segment("preamble", INSTRUCTION, role="instruction"),
        Segment("title", f"Article: {paper['title']}", role="heading"),
    ]
    sections = [("Abstract", [paper["abstract"]])]
    sections += [(s.get("section_name") or "", s["paragraphs"]) for s in paper["full_text"]]
    for number, (name, paragraphs) in enumerate(sections):
        kept = [p for p in paragraphs if p.strip()]
        if not kept:
            continue
        if name.strip():
            segments.append(Segment(f"h{number}", name, role="heading"))
        for index, paragraph in enumerate(kept):
            segments.append(Segment(f"p{number}.{index}", paragraph, role="passage", title=name))
    return segments


def map_evidence(text: str, context: str, passages: Sequence[Span]) -> tuple[Span | None, dict[str, Any]]:
    """An evidence string's span in the rendered context and what happened: an exact match first,
    else one that ignores whitespace differences; among several matches, the one that is a whole
    passage if that is unique, else the evidence is ambiguous (unaligned)."""
    wanted = text.strip()
    if not wanted:
        return None, {"aligned": False, "match": None, "reason": "blank evidence string"}
    for match, pattern in (
        ("exact", re.escape(wanted)),
        ("whitespace", r"\s+".join(re.escape(word) for word in wanted.split())),
    ):
        found = [m.span() for m in re.finditer(pattern, context)]
        whole = [span for span in found if span in passages]
        chosen = whole if len(whole) == 1 else found
        if len(chosen) == 1:
            return chosen[0], {"aligned": True, "match": match, "reason": None}
        if chosen:
            reason = f"ambiguous: found {len(chosen)} times in the article"
            return None, {"aligned": False, "match": None, "reason": reason}
    if wanted.startswith(FLOAT):
        reason = "a figure or table caption (FLOAT SELECTED): captions are not in the article's text"
    else:
        reason = "not found in the rendered article"
    return None, {"aligned": False, "match": None, "reason": reason}


def _require(condition: bool, path: str, where: str, problem: str) -> None:
    if not condition:
        raise ConfigError(f"task.path={path}: {where}: {problem} (expected Qasper v0.3's layout; {WHERE})")


def check_layout(data: Any, path: str) -> None:
    """The fields kvx reads, with their types, in every paper: a clear error naming the paper and field."""
    kind = type(data).__name__
    _require(
        isinstance(data, dict), path, "the file", f"is a JSON {kind}, not an object of paper id -> paper"
    )
    _require(bool(data), path, "the file", "holds no papers")
    ids: set[str] = set()
    for pid, paper in data.items():
        where = f"paper {pid!r}"
        _require(isinstance(paper, dict), path, where, "is not an object")
        for key, kind in (("title", str), ("abstract", str), ("full_text", list), ("qas", list)):
            _require(isinstance(paper.get(key), kind), path, where, f"field {key!r} is not a {kind.__name__}")
        for number, section in enumerate(paper["full_text"]):
            at = f"{where} full_text[{number}]"
            _require(isinstance(section, dict), path, at, "is not an object")
            name = section.get("section_name")
            _require(name is None or isinstance(name, str), path, at, "section_name is not a string")
            paragraphs = section.get("paragraphs")
            ok = isinstance(paragraphs, list) and all(isinstance(p, str) for p in paragraphs)
            _require(ok, path, at, "field 'paragraphs' is not a list of strings")
        for number, qa in enumerate(paper["qas"]):
            at = f"{where} qas[{number}]"
            _require(isinstance(qa, dict), path, at, "is not an object")
            for key in ("question", "question_id"):
                _require(isinstance(qa.get(key), str), path, at, f"field {key!r} is not a string")
            qid = qa["question_id"]
            _require(qid not in ids, path, at, f"question_id {qid!r} already names another question")
            ids.add(qid)
            _require(isinstance(qa.get("answers"), list), path, at, "field 'answers' is not a list")
            for index, item in enumerate(qa["answers"]):
                answer = item.get("answer") if isinstance(item, dict) else None
                here = f"{at} answers[{index}]"
                _require(isinstance(answer, dict), path, here, "has no 'answer' object")
                for key in ("extractive_spans", "evidence"):
                    value = answer.get(key)
                    ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
                    _require(ok, path, here, f"answer.{key} is not a list of strings")
                _require(
                    isinstance(answer.get("free_form_answer", ""), str), path, here, "bad free_form_answer"
                )
                yes_no = answer.get("yes_no")
                _require(
                    yes_no is None or isinstance(yes_no, bool), path, here, "answer.yes_no is not a bool"
                )


def _nearby(folder: Path) -> str:
    """A "did you mean" naming a release file in ``folder``, when there is one."""
    found = sorted(folder.glob("qasper-*-v0.3.json")) if folder.is_dir() else []
    return f"; did you mean {' or '.join(map(str, found))}?" if found else ""


def check_path(path: str) -> Path:
    """The release file, or a ConfigError that says where the public data lives."""
    if not path:
        raise ConfigError(f"task.path is not set: {WHERE}")
    file = Path(path)
    if file.is_dir():
        raise ConfigError(
            f"task.path={path} is a folder, not the release's JSON file{_nearby(file)} ({WHERE})"
        )
    if not file.is_file():
        raise ConfigError(f"task.path={path}: no such file{_nearby(file.parent)} ({WHERE})")
    if file.name.endswith((".tgz", ".tar.gz")):
        raise ConfigError(
            f"task.path={path} is the archive: extract it and point at the JSON inside ({WHERE})"
        )
    return file


@functools.lru_cache(maxsize=2)
def _read(path: str, stamp: tuple[int, int]) -> tuple[dict[str, Any], str]:
    raw = Path(path).read_bytes()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"task.path={path} is not a JSON file ({exc}); {WHERE}") from None
    check_layout(data, path)
    return data, hashlib.sha256(raw).hexdigest()


def load(path: str) -> tuple[dict[str, Any], str]:
    """The validated release (paper id -> paper) and the file's sha256, read once per file version."""
    file = check_path(path)
    stat = file.stat()
    return _read(str(file), (stat.st_mtime_ns, stat.st_size))


def candidates(data: dict[str, Any]) -> list[Candidate]:
    """Every annotator answer in file order (papers, questions, answers)."""
    out = []
    for pid, paper in data.items():
        for q_index, qa in enumerate(paper["qas"]):
            for a_index, item in enumerate(qa["answers"]):
                answer = item["answer"]
                text, kind = reference(answer)
                n_evidence = sum(bool(e.strip()) for e in answer["evidence"])
                out.append(Candidate(pid, q_index, a_index, text, kind, n_evidence))
    return out


def exclusion(candidate: Candidate) -> str | None:
    """Why an answer is not a source (None: it is one): the inclusion rule."""
    if candidate.kind == "unanswerable":
        return "unanswerable"
    if not candidate.reference.strip():
        return "no_reference"
    if not candidate.n_evidence:
        return "no_evidence"
    return None


@dataclass
class Qasper(Task):
    """Document QA over an NLP paper whose answer-supporting paragraphs are annotated."""

    path: str = ""
    #: answer ids (a list or a file) or a KVDiagnosis release folder: the fixed split, in its order
    ids: Any = field(default="", metadata=WHEN_SET)
    scorer_version: ClassVar[str] = "1"
    max_new_tokens: ClassVar[int] = 128  # LongBench's Qasper budget (config/dataset2maxlen.json)

    def validate(self) -> None:
        data, _ = load(self.path)
        if not any(exclusion(c) is None for c in candidates(data)):
            raise ConfigError(
                f"task.path={self.path}: no answerable question with evidence (the inclusion rule)"
            )
        if self.ids:
            self.chosen(data)

    def chosen(self, data: dict[str, Any]) -> list[Candidate]:
        """What ``task.ids`` names, in its order: any answer with a reference (the release's rule on
        evidence is unknown); ConfigError naming the ids or release samples the file lacks."""
        answered = [c for c in candidates(data) if c.reference.strip()]
        if is_release(self.ids):
            keyed = [((c.paper_id, c.question_index), c.reference) for c in answered]
            positions = qasper_positions(release_sources(self.ids, "qasper"), keyed, self.ids)
        else:
            names = [
                f"{data[c.paper_id]['qas'][c.question_index]['question_id']}_{c.answer_index}"
                for c in answered
            ]
            positions = select_ids(self.ids, names)
        return [answered[p] for p in positions]

    def split(self, n: int, seed: int) -> tuple[dict[str, Any], list[Candidate]]:
        """The paper file and the ``n`` answers of the split: ``task.ids``'s first ``n``, else ``n``
        eligible ones in seeded order."""
        data, _ = load(self.path)
        if self.ids:
            chosen = self.chosen(data)
            return data, [chosen[i] for i in first_n(list(range(len(chosen))), n, ids_label(self.ids))]
        pool = [c for c in candidates(data) if exclusion(c) is None]
        return data, [pool[i] for i in seeded_order(len(pool), n, seed)]

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        """The file read (with its hash), what the inclusion rule kept and left out, and how much of
        the split's evidence mapped into the rendered article."""
        data, sha256 = load(self.path)
        every = candidates(data)
        mapped = Counter(
            e["aligned"] for s in self.sources(n, seed, 0, lambda _: 0) for e in s.metadata["evidence"]
        )
        return {
            "file": str(Path(self.path).resolve()),
            "sha256": sha256,
            "papers": len(data),
            "questions": sum(len(p["qas"]) for p in data.values()),
            "answers": len(every),
            "eligible": sum(exclusion(c) is None for c in every),
            "excluded": dict(sorted(Counter(r for c in every if (r := exclusion(c))).items())),
            "sources": n,
            "evidence_aligned": mapped[True],
            "evidence_unaligned": mapped[False],
            **(release_manifest(self.ids, "qasper") if self.ids else {}),
        }

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        data, chosen = self.split(n, seed)
        return [self._source(data, candidate, count_tokens) for candidate in chosen]

    def _source(self, data: dict[str, Any], candidate: Candidate, count_tokens: CountTokens) -> Source:
        paper = data[candidate.paper_id]
        qa = paper["qas"][candidate.question_index]
        answer = qa["answers"][candidate.answer_index]["answer"]
        segments = article_segments(paper)
        context = "\n\n".join(s.text for s in segments)
        offsets, offset = [], 0
        for segment in segments:
            offsets.append((offset, offset + len(segment.text)))
            offset += len(segment.text) + 2
        passages = [span for span, s in zip(offsets, segments, strict=True) if s.role == "passage"]
        evidence: list[Span] = []
        facts = []
        for index, text in enumerate(answer["evidence"]):
            span, fact = map_evidence(text, context, passages)
            facts.append({"index": index, **fact})
            if span is not None and span not in evidence:
                evidence.append(span)
        question = QUESTION.format(question=qa["question"])
        source = Source.from_segments(
            segments,
            "\n\n",
            id=f"qasper_{qa['question_id']}_{candidate.answer_index}",
            question=question,
            answers=[candidate.reference],
            evidence=evidence,
            answer_prefix="Answer:",
            metadata={
                "query": qa["question"],  # what retrievers and text compressors rank by
                "paper_id": candidate.paper_id,
                "question_id": qa["question_id"],
                "answer_index": candidate.answer_index,
                "answer_type": candidate.kind,
                "evidence": facts,
            },
        )
        source.metadata["prompt_tokens"] = count_tokens(f"{source.context}\n{question}")
        return source

    def evaluate(self, answer: str, source: Source) -> Score:
        """KVDiagnosis containment of the whole reference as the score; SQuAD/HotpotQA EM and token F1
        beside it (not Qasper's official Answer-F1, which takes the max over annotators)."""
        return score_rag(answer, source)
