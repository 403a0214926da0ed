"""LongBench, LongBench-E and LongBench-v2 as kvpress prepares them (``evaluation/benchmarks/longbench``
and ``longbenchv2``): the rows of ``Xnhyacinth/LongBench`` (one folder per task, ``<task>_e`` for
LongBench-E) and ``simonjegou/LongBench-v2``, scored per answer as kvpress's ``calculate_metrics``
does; kvpress's per-task number is the mean of these scores x 100 (LongBench-E: per length bucket;
LongBench-v2: overall, per difficulty and per length)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score
from kvx.tasks.kvpress.dataset import KvpressTask, graded
from kvx.tasks.kvpress.longbench_metrics import E_TASKS, METRIC, length_bucket, prepare, score
from kvx.tasks.kvpress.longbench_v2_metrics import correct_choice


@dataclass
class LongBench(KvpressTask):
    """``task=longbench task.subset=narrativeqa``: one of LongBench's 16 English tasks."""

    subset: str = "narrativeqa"

    hub_id: ClassVar[str] = "Xnhyacinth/LongBench"
    benchmark: ClassVar[str] = "longbench"
    subsets: ClassVar[tuple[str, ...]] = tuple(METRIC)
    answer_column: ClassVar[str] = "answers"
    metadata_columns: ClassVar[tuple[str, ...]] = ("all_classes", "length")
    #: LongBench-E scores the prediction with only its leading newlines stripped
    length_split: ClassVar[bool] = False

    def evaluate(self, answer: str, source: Source) -> Score:
        """The task's LongBench metric, best over the references, named in ``metrics``."""
        classes = source.metadata.get("all_classes") or []
        value = score(self.subset, answer, source.answers, classes, self.length_split)
        name = METRIC[self.subset].__name__
        return graded(value, prepare(self.subset, answer, self.length_split), metrics={name: value})


@dataclass
class LongBenchE(LongBench):
    """``task=longbench_e task.subset=qasper``: LongBench-E's rows of one task (the ``<task>_e``
    folder), each with its length bucket (0-4k, 4-8k, 8k+) in ``metadata["length_bucket"]``."""

    subset: str = "qasper"

    benchmark: ClassVar[str] = "longbench_e"
    subsets: ClassVar[tuple[str, ...]] = E_TASKS
    length_split: ClassVar[bool] = True

    def folder(self) -> str | None:
        return f"{self.subset}_e"

    def row_source(self, index: int, row: dict[str, Any], count_tokens: CountTokens) -> Source:
        source = super().row_source(index, row, count_tokens)
        source.metadata["length_bucket"] = length_bucket(int(row["length"]))
        return source


@dataclass
class LongBenchV2(KvpressTask):
    """``task=longbench_v2``: LongBench-v2's 503 multiple-choice questions (the ``0shot`` prompts), with
    their ``difficulty`` (easy, hard) and ``length`` (short, medium, long) in the metadata."""

    hub_id: ClassVar[str] = "simonjegou/LongBench-v2"
    benchmark: ClassVar[str] = "longbench_v2"
    metadata_columns: ClassVar[tuple[str, ...]] = ("difficulty", "length", "domain")

    def folder(self) -> str | None:
        return "0shot"  # the one config kvpress pushed

    def evaluate(self, answer: str, source: Source) -> Score:
        """Right when the answer states the right letter in LongBench-v2's format."""
        value = float(correct_choice(answer, source.answers[0]))
        return Score.of(value, answer.replace("*", "").strip(), metrics={"accuracy": value})
