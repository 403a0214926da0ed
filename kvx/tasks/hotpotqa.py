"""HotpotQA (dev, distractor setting): multi-hop questions over ten Wikipedia paragraphs.

Reads the dev distractor set shipped with NVIDIA's RULER package, or ``path`` in the same native
format (a JSON list of objects with ``_id``, ``question``, ``answer``, ``context`` as
``[title, [sentence, ...]]`` pairs and ``supporting_facts`` as ``[title, sentence_index]`` pairs).
The context is RULER's QA layout, paragraphs in their native order::

    Answer the question ... other words.\\n\\nThe following are given documents.\\n\\n
    Document 1:\\n<title>\\n<sentences joined as stored>\\n\\nDocument 2:\\n...

Evidence spans cover each supporting-fact sentence (without its leading space), in
``supporting_facts`` order; ``metadata["supporting_facts"]`` records, per fact, whether it could be
aligned (the title exists and the sentence index is in range and not blank). Natural contexts are
not resized, so ``context_tokens`` is ignored; ``metadata["prompt_tokens"]`` records the length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvx.tasks.base import CountTokens, Source, Task
from kvx.tasks.jsonl import load_rows, seeded_order
from kvx.tasks.ruler import ruler_data_file
from kvx.tasks.scoring import containment, normalize_answer

INSTRUCTION = (
    "Answer the question based on the given documents. "
    "Only give me the answer and do not output any other words."
)


def hotpot_context(paragraphs: list[Any]) -> tuple[str, dict[str, list[tuple[int, int] | None]]]:
    """RULER-layout context and, per title (first occurrence), each sentence's stripped span or None."""
    text = f"{INSTRUCTION}\n\nThe following are given documents.\n\n"
    spans: dict[str, list[tuple[int, int] | None]] = {}
    for number, (title, sentences) in enumerate(paragraphs, 1):
        if number > 1:
            text += "\n\n"
        text += f"Document {number}:\n{title}\n"
        sentence_spans: list[tuple[int, int] | None] = []
        for sentence in sentences:
            lead = len(sentence) - len(sentence.lstrip())
            stripped = sentence.strip()
            sentence_spans.append((len(text) + lead, len(text) + lead + len(stripped)) if stripped else None)
            text += sentence
        spans.setdefault(title, sentence_spans)
    return text, spans


@dataclass
class HotpotQA(Task):
    """Multi-hop QA whose evidence (the supporting-fact sentences) is known to the sentence."""

    path: str = ""

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        rows = load_rows(self.path or str(ruler_data_file("hotpotqa.json")))
        out = []
        for index in seeded_order(len(rows), n, seed):
            row = rows[index]
            context, spans = hotpot_context(row["context"])
            evidence, facts = [], []
            for title, sentence in row["supporting_facts"]:
                sentences = spans.get(title, [])
                span = sentences[sentence] if 0 <= sentence < len(sentences) else None
                facts.append({"title": title, "sentence": sentence, "aligned": span is not None})
                if span is not None:
                    evidence.append(span)
            question = f"{INSTRUCTION}\n\nQuestion: {row['question']}"
            out.append(
                Source(
                    id=f"hotpotqa_{row['_id']}",
                    context=context,
                    question=question,
                    answers=[row["answer"]],
                    evidence=evidence,
                    answer_prefix="Answer:",
                    metadata={
                        "row": index,
                        "type": row.get("type"),
                        "level": row.get("level"),
                        "supporting_facts": facts,
                        "prompt_tokens": count_tokens(f"{context}\n{question}"),
                    },
                )
            )
        return out

    def score(self, prediction: str, source: Source) -> float:
        return containment(prediction, source.answers)

    def normalize(self, prediction: str) -> str:
        return normalize_answer(prediction)
