"""kv-exec-bench's tables, declared for the catalogue (``kvx.aggregate.catalogue``)."""

from __future__ import annotations

import pandas as pd

from kvx.aggregate.catalogue import Section, intermediate, table
from kvx.aggregate.kvexec import contrast as anchors
from kvx.aggregate.kvexec.answer_metrics import paired_answers
from kvx.aggregate.kvexec.onset import onset as onset_of
from kvx.aggregate.options import Options

CONTRAST = Section(
    "contrast",
    "Anchors vs structural metrics",
    70,
    "no task in the selected runs declares an anchor/structural pair",
)


@intermediate
def answer_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Each answer metric (``Score.metrics``) paired source by source."""
    return paired_answers(rows)


@table("contrast", "contrast")
def contrast(
    rows: pd.DataFrame, answer_pairs: pd.DataFrame, contrasts: dict[str, dict[str, str]]
) -> pd.DataFrame:
    return anchors.contrast(rows, answer_pairs, contrasts)


@table("contrast_by_ratio", "contrast")
def contrast_by_ratio(
    rows: pd.DataFrame, answer_pairs: pd.DataFrame, contrasts: dict[str, dict[str, str]]
) -> pd.DataFrame:
    """kv-exec-bench Figure 1."""
    return anchors.contrast_by_ratio(rows, answer_pairs, contrasts)


@table("onset", "contrast")
def onset(rows: pd.DataFrame, answer_pairs: pd.DataFrame, options: Options) -> pd.DataFrame:
    return onset_of(rows, answer_pairs, options.onset_drop, options.n_boot, options.seed)
