"""LooGLE as kvpress prepares it (``evaluation/benchmarks/loogle``): the rows of ``simonjegou/loogle``
(one folder per task; a document's questions are one row each), scored per answer as kvpress's
``calculate_metrics`` does (:mod:`kvx.tasks.kvpress.loogle_metrics`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvx.core.source import Source
from kvx.tasks.base import Score
from kvx.tasks.kvpress.dataset import KvpressTask, graded
from kvx.tasks.kvpress.loogle_metrics import bleu, exact_match, partial_match, rouge_recall

CLOZE = "shortdep_cloze"


@dataclass
class LooGLE(KvpressTask):
    """``task=loogle task.subset=shortdep_qa``.

    QA and summaries score ROUGE-L recall, with BLEU-1/4 and ROUGE-1/2 recall in ``metrics``. The
    cloze task scores the share of masks filled exactly, with ``partial_match`` beside it; kvpress pools
    masks over the answers (sum matched / sum counted), so the counts are in ``details``."""

    subset: str = "shortdep_qa"

    hub_id: ClassVar[str] = "simonjegou/loogle"
    benchmark: ClassVar[str] = "loogle"
    subsets: ClassVar[tuple[str, ...]] = ("shortdep_qa", "longdep_qa", CLOZE, "longdep_summarization")

    def evaluate(self, answer: str, source: Source) -> Score:
        reference = source.answers[0]
        if self.subset == CLOZE:
            exact, counted = exact_match(reference, answer)
            partial, masks = partial_match(reference, answer)
            metrics = {"exact_match": exact / counted, "partial_match": partial / masks if masks else 0.0}
            details = {"exact": exact, "exact_count": counted, "partial": partial, "partial_count": masks}
            return graded(metrics["exact_match"], answer.strip(), metrics=metrics, details=details)
        metrics = {**bleu(reference, answer), **rouge_recall(reference, answer)}
        return graded(metrics["rouge-l"], answer.strip(), metrics=metrics)
