"""InfiniteBench as kvpress prepares it (``evaluation/benchmarks/infinite_bench``): the rows of
``MaxJeblick/InfiniteBench`` (one folder per task), scored per answer with InfiniteBench's metric
(:mod:`kvx.tasks.kvpress.infinitebench_metrics`); kvpress's per-task number is their mean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvx.core.source import Source
from kvx.tasks.base import Score
from kvx.tasks.kvpress import infinitebench_metrics as m
from kvx.tasks.kvpress.dataset import KvpressTask, graded

SUBSETS = (
    "passkey",
    "kv_retrieval",
    "number_string",
    "longdialogue_qa_eng",
    "longbook_qa_eng",
    "longbook_choice_eng",
    "code_run",
    "code_debug",
    "math_find",
    "math_calc",
    "longbook_qa_chn",
)


def infinitebench_score(subset: str, answer: str, source: Source) -> float:
    """InfiniteBench's score of one answer to one source of ``subset``."""
    labels = source.answers
    if subset == "longbook_qa_eng":
        return m.qa_f1(answer, labels)
    if subset == "longbook_qa_chn":
        return m.qa_f1_zh(answer, labels)
    if subset == "math_calc":
        return m.math_calc(answer, labels)
    if subset == "longdialogue_qa_eng":
        return float(m.longdialogue(answer, labels))
    if subset == "longbook_choice_eng":
        return float(m.longbook_choice(answer, labels))
    if subset == "code_debug":
        listed = m.options(source.question)
        function = listed["ABCD".index(labels[0])] if listed and labels[0] in "ABCD" else None
        return float(m.code_debug(answer, labels[0], function))
    single = {
        "passkey": m.same_integer,
        "number_string": m.same_integer,
        "kv_retrieval": m.kv_retrieval,
        "code_run": m.code_run,
        "math_find": m.math_find,
    }
    return float(single[subset](answer, labels[0]))


@dataclass
class InfiniteBench(KvpressTask):
    """``task=infinitebench task.subset=passkey``: one of InfiniteBench's tasks (not
    ``longbook_sum_eng``, which kvpress does not score)."""

    subset: str = "passkey"

    hub_id: ClassVar[str] = "MaxJeblick/InfiniteBench"
    benchmark: ClassVar[str] = "infinitebench"
    subsets: ClassVar[tuple[str, ...]] = SUBSETS

    def evaluate(self, answer: str, source: Source) -> Score:
        value = infinitebench_score(self.subset, answer, source)
        return graded(value, answer.strip(), metrics={self.subset: value})
