"""TPBench's denominator rule for the paper's tables: a reader error is a wrong answer, in n.

The paper scores reader errors as wrong (§6.3: "Reader errors and malformed outputs count as
wrong"; Table 15: "those rows are scored as wrong"), and the release's aggregates keep them in n
(``results/main/*_aggregate.json``: ``n`` 128 with ``err_rate`` 0.0078). kvx's own tables leave an
error out of n; the paper's tables follow the paper:

- a supported answer keeps its scores;
- an error scores 0 on every metric, unless the release scored an answer kvx could not pair (its
  full-context answer was the error): then that answer's own scores (``u.*``), as the release did;
- an unsupported answer was not run (offline, ``llmlingua2`` needs the model hub): a group with one
  has no accuracy under the rule (N/A), its count beside, never an accuracy over fewer answers.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kvx.core.records import ERROR, UNSUPPORTED

__all__ = ["SCORE_WORDS", "counts", "not_run", "paper_scored", "under_rule"]

#: a table column holding a score (blanked when the group was not run): accuracies, rates, F1
SCORE_WORDS = ("accuracy", "rate", "f1")


def paper_scored(frame: pd.DataFrame) -> pd.DataFrame:
    """The answers with their scores under the paper's rule: every ``m.*`` of an error is its unpaired
    answer's (``u.*``) where the release scored one, else 0; unsupported answers stay, unscored."""
    if frame.empty:
        return frame
    error = (frame["status"] == ERROR).to_numpy()
    if not error.any():
        return frame
    out = frame.copy()
    for column in [c for c in out.columns if c.startswith("m.")]:
        own = out[column].astype(float)
        unpaired = out.get("u." + column[2:], pd.Series(math.nan, index=out.index)).astype(float)
        out[column] = own.where(~error, unpaired.fillna(0.0))
    return out


def counts(group: pd.DataFrame) -> dict[str, int]:
    """How many answers of a group were reader errors (in n, wrong) and how many were not run."""
    return {
        "n_error": int((group["status"] == ERROR).sum()),
        "n_unsupported": int((group["status"] == UNSUPPORTED).sum()),
    }


def not_run(group: pd.DataFrame) -> pd.DataFrame:
    """The group's answers the rule scores: all but the unsupported ones."""
    return group[group["status"] != UNSUPPORTED]


def under_rule(row: dict[str, Any], group: pd.DataFrame) -> dict[str, Any]:
    """A paper-table row with its error and unsupported counts; every score N/A when the group has an
    unsupported answer (the method was not run on the paper's n)."""
    tally = counts(group)
    if tally["n_unsupported"]:
        row = {k: (math.nan if any(w in k for w in SCORE_WORDS) else v) for k, v in row.items()}
    return row | tally
