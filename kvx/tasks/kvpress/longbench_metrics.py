"""LongBench's per-sample metrics, as kvpress's ``evaluation/benchmarks/longbench/calculate_metrics.py``
(LongBench's ``metrics.py`` and ``eval.py``) computes them.

Each task has one metric (``METRIC``), taken as the max over the row's references. Before scoring,
kvpress strips the prediction's leading whitespace (LongBench) and keeps only the first line of a
few-shot task's answer (``FIRST_LINE``); LongBench-E strips leading newlines only and keeps the
rest of the whitespace. The Chinese tasks (``multifieldqa_zh``, ``dureader``, ``vcsum``, ``lsht``,
``passage_retrieval_zh``) are not in kvpress's dataset and not here.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Sequence

from kvx.tasks.scoring import squad_normalize

#: few-shot tasks whose answer is the prediction's first line (the model goes on with the next example)
FIRST_LINE = ("trec", "triviaqa", "samsum")
_NUMBER = re.compile(r"\d+")
_PARAGRAPH = re.compile(r"Paragraph (\d+)")


def token_f1(prediction: Sequence[str], reference: Sequence[str]) -> float:
    """F1 of two token multisets; 0 when they share no token (both empty included)."""
    same = sum((Counter(prediction) & Counter(reference)).values())
    if not same:
        return 0.0
    precision, recall = same / len(prediction), same / len(reference)
    return 2 * precision * recall / (precision + recall)


def qa_f1(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """Token F1 after SQuAD normalisation (lowercase, no punctuation or articles)."""
    return token_f1(squad_normalize(prediction).split(), squad_normalize(reference).split())


def rouge_l(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """ROUGE-L F of the ``rouge`` package (sentences split on ".", summary-level union LCS, words
    counted once); 0 when it cannot score (an empty prediction: "Hypothesis is empty")."""
    return rouge_scores(prediction, reference, "f")["rouge-l"]


def rouge_scores(prediction: str, reference: str, stat: str) -> dict[str, float]:
    """ROUGE-1/2/L of the ``rouge`` package (``stat``: "f", "p" or "r"); every one 0.0 when the package
    raises, as LongBench and LooGLE score it (an empty prediction; a sentence so long that its LCS
    recursion overflows)."""
    from rouge import Rouge

    try:
        scores = Rouge().get_scores([prediction], [reference])[0]
    except Exception:  # the benchmarks score any failure of the package as 0
        return {"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
    return {name: float(value[stat]) for name, value in scores.items()}


def classification(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """1 / (classes named) when the reference is among the class names found in the prediction.

    A found name that is a proper substring of the reference is dropped, but as LongBench removes it
    from the list it is iterating, the name after each removed one is not looked at (kept as is)."""
    found = [name for name in classes if name in prediction]
    position = 0
    while position < len(found):
        name = found[position]
        if name in reference and name != reference:
            found.remove(name)
        position += 1
    return 1.0 / len(found) if reference in found else 0.0


def _numbers_share(prediction: str, wanted: str) -> float:
    numbers = _NUMBER.findall(prediction)
    return sum(number == wanted for number in numbers) / len(numbers) if numbers else 0.0


def retrieval(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """Share of the prediction's numbers that are the reference paragraph's ("Paragraph 12")."""
    found = _PARAGRAPH.findall(reference)
    if not found:
        raise ValueError(f"passage_retrieval reference {reference!r} names no 'Paragraph N'")
    return _numbers_share(prediction, found[0])


def count(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """Share of the prediction's numbers that equal the reference count."""
    return _numbers_share(prediction, str(reference))


def fuzz_ratio(first: str, second: str) -> float:
    """fuzzywuzzy's ``fuzz.ratio`` / 100 as kvpress's environment computes it (fuzzywuzzy without
    python-Levenshtein: difflib's ratio, rounded to a whole percent half to even; equal strings 1.0,
    one empty string 0.0)."""
    if first == second:
        return 1.0
    if not first or not second:
        return 0.0
    return round(100 * difflib.SequenceMatcher(None, first, second).ratio()) / 100


def code_similarity(prediction: str, reference: str, classes: Sequence[str] = ()) -> float:
    """Edit similarity of the first predicted line that is code (no backtick, ``#`` or ``//``)."""
    lines = prediction.lstrip("\n").split("\n")
    line = next((line for line in lines if not any(mark in line for mark in ("`", "#", "//"))), "")
    return fuzz_ratio(line, reference)


Metric = Callable[[str, str, Sequence[str]], float]
#: LongBench's ``dataset2metric`` for the tasks of kvpress's dataset
METRIC: dict[str, Metric] = {
    "narrativeqa": qa_f1,
    "qasper": qa_f1,
    "multifieldqa_en": qa_f1,
    "hotpotqa": qa_f1,
    "2wikimqa": qa_f1,
    "musique": qa_f1,
    "gov_report": rouge_l,
    "qmsum": rouge_l,
    "multi_news": rouge_l,
    "trec": classification,
    "triviaqa": qa_f1,
    "samsum": rouge_l,
    "passage_retrieval_en": retrieval,
    "passage_count": count,
    "lcc": code_similarity,
    "repobench-p": code_similarity,
}
#: LongBench-E's tasks (``<task>_e`` folders of the same dataset)
E_TASKS = (
    "qasper",
    "multifieldqa_en",
    "hotpotqa",
    "2wikimqa",
    "gov_report",
    "multi_news",
    "trec",
    "triviaqa",
    "samsum",
    "passage_count",
    "passage_retrieval_en",
    "lcc",
    "repobench-p",
)
#: LongBench-E's length buckets (the row's ``length``, in words): upper bound -> name
BUCKETS = ((4000, "0-4k"), (8000, "4-8k"))


def prepare(task: str, prediction: str, length_split: bool = False) -> str:
    """The text the metric reads: LongBench strips leading whitespace and keeps a few-shot answer's
    first line; LongBench-E (``length_split``) strips only leading newlines."""
    if length_split:
        return prediction.lstrip("\n").split("\n")[0] if task in FIRST_LINE else prediction
    return prediction.lstrip().split("\n")[0].lstrip() if task in FIRST_LINE else prediction.lstrip()


def score(
    task: str, prediction: str, references: Sequence[str], classes: Sequence[str], length_split: bool = False
) -> float:
    """One answer's LongBench score: the task's metric, best over the references (0 with none)."""
    text = prepare(task, prediction, length_split)
    return max((METRIC[task](text, reference, classes) for reference in references), default=0.0)


def length_bucket(length: int) -> str:
    """LongBench-E's bucket of a row's length: 0-4k, 4-8k or 8k+."""
    return next((name for bound, name in BUCKETS if length < bound), "8k+")
