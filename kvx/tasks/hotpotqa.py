"""HotpotQA (dev, distractor setting): multi-hop questions over ten Wikipedia paragraphs.

Reads the dev distractor set shipped with NVIDIA's RULER package, or ``path`` in the same native
format (a JSON list of objects with ``_id``, ``question``, ``answer``, ``context`` as
``[title, [sentence, ...]]`` pairs and ``supporting_facts`` as ``[title, sentence_index]`` pairs).
The context is RULER's QA layout, paragraphs in their native order, one segment each (plus the
preamble), so text transforms can keep or drop documents::

    Answer the question ... other words.\\n\\nThe following are given documents.\\n\\n
    Document 1:\\n<title>\\n<sentences joined as stored>\\n\\nDocument 2:\\n...

Evidence spans cover each supporting-fact sentence (without its leading space), in
``supporting_facts`` order; ``metadata["supporting_facts"]`` records, per fact, whether it could be
aligned (the title exists and the sentence index is in range and not blank). Natural contexts are
not resized, so ``context_tokens`` is ignored; ``metadata["prompt_tokens"]`` records the length.

``task.ids=FILE`` (one ``_id`` per line) or a list fixes the slice, in its order, as on every pool task
(``kvx.tasks.rag``): ragscale's ``hotpotqa_distractor_500_v1`` is such a slice (docs/rag-data.md).
The KVDiagnosis release's sample ids (``hotpotqa_000076``) may stand for ``_id``s, and a release
folder names its 200 in its order (``kvx.tasks.kvdiagnosis_ids``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.source import Segment, Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import load_rows
from kvx.tasks.kvdiagnosis_ids import check_hotpotqa, hotpotqa_ids, is_release, release_manifest
from kvx.tasks.rag import INSTRUCTION, ids_label, pool_segments, raw_policy, score_rag, select_ids, take
from kvx.tasks.ruler import require_ruler_data, ruler_data_file

#: the row hints HotpotQA supplies (bridge / comparison; easy / medium / hard)
HINTS = ("type", "level")


def hotpot_segments(
    paragraphs: list[Any],
) -> tuple[list[Segment], dict[str, list[tuple[int, int] | None]]]:
    """RULER-layout segments (the preamble, then one per document, joined by a blank line) and,
    per title (first occurrence), each sentence's stripped span in the joined context or None."""
    segments, per_passage = pool_segments([(title, sentences) for title, sentences in paragraphs])
    spans: dict[str, list[tuple[int, int] | None]] = {}
    for (title, _), sentence_spans in zip(paragraphs, per_passage, strict=True):
        spans.setdefault(title, sentence_spans)
    return segments, spans


@dataclass
class HotpotQA(Task):
    """Multi-hop QA whose evidence (the supporting-fact sentences) is known to the sentence."""

    path: str = ""
    #: row ids (a list, a file, release sample ids or a release folder): the fixed slice, in its order
    ids: Any = field(default="", metadata=WHEN_SET)
    scorer_version: ClassVar[str] = "3"  # 2: EM and token F1 beside containment; 3: ASCII punctuation

    def validate(self) -> None:
        if self.path and not Path(self.path).is_file():
            raise ConfigError(f"task.path={self.path!r}: no such file")
        if not self.path:
            require_ruler_data("task=hotpotqa", "hotpotqa.json")
        if self.ids:
            rows = load_rows(self._file())
            select_ids(hotpotqa_ids(self.ids), rows["_id"], label=ids_label(self.ids))
            if is_release(self.ids):
                check_hotpotqa(self.ids, dict(zip(rows["_id"], rows["answer"], strict=True)))

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        """The raw policy (ragscale: all ten paragraphs in their supplied order), the file read and
        the slice file."""
        rows = load_rows(self._file())
        sizes = sorted({len(rows[i]["context"]) for i in self._split(rows, n, seed)})
        out = {"file": self._file(), "raw_policy": [raw_policy(0, size) for size in sizes]}
        return {**out, **release_manifest(self.ids, "hotpotqa")} if self.ids else out

    def _split(self, rows: Any, n: int, seed: int) -> list[int]:
        ids = hotpotqa_ids(self.ids) if self.ids else ""
        return take(ids, rows["_id"], n, seed, label=ids_label(self.ids))

    def _file(self) -> str:
        return self.path or str(ruler_data_file("hotpotqa.json"))

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        rows = load_rows(self._file())
        out = []
        for index in self._split(rows, n, seed):
            row = rows[index]
            segments, spans = hotpot_segments(row["context"])
            evidence, facts = [], []
            for title, sentence in row["supporting_facts"]:
                sentences = spans.get(title, [])
                span = sentences[sentence] if 0 <= sentence < len(sentences) else None
                facts.append({"title": title, "sentence": sentence, "aligned": span is not None})
                if span is not None:
                    evidence.append(span)
            question = f"{INSTRUCTION}\n\nQuestion: {row['question']}"
            source = Source.from_segments(
                segments,
                "\n\n",
                id=f"hotpotqa_{row['_id']}",
                question=question,
                answers=[row["answer"]],
                evidence=evidence,
                answer_prefix="Answer:",
                metadata={
                    "query": row["question"],  # what retrievers and text compressors rank by
                    "row": index,
                    "type": row.get("type"),
                    "level": row.get("level"),
                    "supporting_facts": facts,
                },
            )
            source.metadata["prompt_tokens"] = count_tokens(f"{source.context}\n{question}")
            out.append(source)
        return out

    def evaluate(self, answer: str, source: Source) -> Score:
        """KVDiagnosis containment as the score; HotpotQA's official EM and token F1 beside it
        (ragscale's metrics); the row's question type and level as details, so the aggregate can slice
        the reader-upgrade audit by them (``--slice-by type,level``)."""
        score = score_rag(answer, source)
        score.details.update({k: source.metadata[k] for k in HINTS if source.metadata.get(k)})
        return score
