"""Judged scores beside the task's own, and how often each judge agrees with the task's scorer.

A row carries each judge's decision on its two answers (``kvx.aggregate.read.rows.judge_fields``).

Agreement compares the judge's yes/no with the deterministic ``correct`` over the answers the judge
judged: an uncertain judgment is a "no" (no credit, as scored) and is also counted on its own. Cohen's
κ = (p_o − p_e) / (1 − p_e), with p_o the observed agreement and p_e the agreement expected from the
two marginals; it is N/A when p_e = 1 (both raters constant and equal) or nothing was judged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.read.rows import JUDGE_CORRECT as CORRECT
from kvx.aggregate.read.rows import JUDGE_STATUS as STATUS
from kvx.aggregate.read.rows import JUDGE_UNCERTAIN as UNCERTAIN
from kvx.core.records import SUPPORTED, TASK_READER

SIDES = {"FullCache": "full_", "compressed": "comp_"}
COLUMNS = [
    "task",
    "reader",
    "judge",
    "answers",
    "n_answers",
    "n_judged",
    "n_error",
    "n_not_applicable",
    "n_uncertain",
    "yes_correct",
    "yes_incorrect",
    "no_correct",
    "no_incorrect",
    "uncertain_correct",
    "uncertain_incorrect",
    "agreement",
    "kappa",
    "judge_accuracy",
    "deterministic_accuracy",
]


def judge_names(rows: pd.DataFrame) -> list[str]:
    """The judges any row's answers were judged by."""
    heads = tuple(f"{side}{STATUS}" for side in SIDES.values())
    return sorted({c.split(".", 1)[1] for c in rows.columns if c.startswith(heads)})


def judge_columns(rows: pd.DataFrame) -> list[str]:
    heads = tuple(f"{side}{kind}" for side in SIDES.values() for kind in (CORRECT, STATUS, UNCERTAIN))
    return [c for c in rows.columns if c.startswith(heads)]


def judged_answers(rows: pd.DataFrame, name: str, side: str) -> pd.DataFrame:
    """The answers of one side that carry a judgment by ``name``: controls once per source and reader
    (``unit``), compressed answers of supported rows."""
    status = f"{SIDES[side]}{STATUS}{name}"
    if status not in rows:
        return rows.iloc[:0]
    found = rows[rows[status].notna()]
    if side == "FullCache":
        return found.drop_duplicates("unit")
    return found[found["status"] == SUPPORTED]


def with_judged(out: pd.DataFrame, rows: pd.DataFrame, keys: list[str], side: str) -> pd.DataFrame:
    """``judge.<name>.accuracy`` (mean over the judged answers of ``side``, uncertain ones scoring 0) and
    ``judge.<name>.n_judged`` for each judge, per ``keys`` group of ``out``; N/A with 0 where none."""
    for name in judge_names(rows):
        accuracy, count = f"judge.{name}.accuracy", f"judge.{name}.n_judged"
        answers = judged_answers(rows, name, side)
        column = f"{SIDES[side]}{CORRECT}{name}"
        if answers.empty:
            out[accuracy], out[count] = np.nan, 0
            continue
        stats = answers.groupby(keys, sort=True)[column].agg(["mean", "count"])
        stats.columns = [accuracy, count]
        out = out.merge(stats.reset_index(), on=keys, how="left")
        out[count] = out[count].fillna(0).astype(int)
    return out


def cohen_kappa(yes_correct: int, yes_incorrect: int, no_correct: int, no_incorrect: int) -> float:
    """Cohen's κ of the 2x2 table judge (yes/no) x deterministic scorer (correct/incorrect)."""
    n = yes_correct + yes_incorrect + no_correct + no_incorrect
    if n == 0:
        return np.nan
    observed = (yes_correct + no_incorrect) / n
    yes, correct = yes_correct + yes_incorrect, yes_correct + no_correct
    expected = (yes * correct + (n - yes) * (n - correct)) / n**2
    return np.nan if expected == 1 else (observed - expected) / (1 - expected)


def _labels(answers: pd.DataFrame, name: str, side: str) -> pd.DataFrame:
    """One side's judged answers as (task, reader, status, judge yes, scorer correct, uncertain)."""
    prefix = SIDES[side]
    return pd.DataFrame(
        {
            "task": answers["task"].to_numpy(),
            "reader": answers["reader"].to_numpy(),
            "answers": side,
            "status": answers[f"{prefix}{STATUS}{name}"].to_numpy(),
            "said": answers[f"{prefix}{CORRECT}{name}"].to_numpy() == 1.0,
            "right": answers[f"{prefix}correct"].to_numpy() == 1.0,
            "unsure": answers[f"{prefix}{UNCERTAIN}{name}"].to_numpy() == 1.0,
        }
    )


def _counts(labels: pd.DataFrame) -> dict[str, float]:
    judged = labels[labels["status"] == "judged"]
    said, right, unsure = judged["said"], judged["right"], judged["unsure"]
    cells = [int((said & right).sum()), int((said & ~right).sum())]
    cells += [int((~said & right).sum()), int((~said & ~right).sum())]
    n = len(judged)
    return {
        "n_answers": len(labels),
        "n_judged": n,
        "n_error": int((labels["status"] == "error").sum()),
        "n_not_applicable": int((labels["status"] == "not_applicable").sum()),
        "n_uncertain": int(unsure.sum()),
        **dict(zip(COLUMNS[9:13], cells, strict=True)),
        "uncertain_correct": int((unsure & right).sum()),
        "uncertain_incorrect": int((unsure & ~right).sum()),
        "agreement": (cells[0] + cells[3]) / n if n else np.nan,
        "kappa": cohen_kappa(*cells),
        "judge_accuracy": float(said.mean()) if n else np.nan,
        "deterministic_accuracy": float(right.mean()) if n else np.nan,
    }


def agreement(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task x reader x judge: the judge against the task's scorer on the FullCache controls, the
    compressed answers and both together ("all"): the confusion table, agreement, κ, and the uncertain,
    error and not-applicable counts."""
    out = []
    for name in judge_names(rows):
        labels = pd.concat([_labels(judged_answers(rows, name, side), name, side) for side in SIDES])
        for (task, reader), group in labels.groupby(TASK_READER, sort=True):
            parts = [(side, frame) for side, frame in group.groupby("answers", sort=True)]
            if len(parts) > 1:
                parts.append(("all", group))
            for side, frame in parts:
                out.append({"task": task, "reader": reader, "judge": name, "answers": side, **_counts(frame)})
    return pd.DataFrame(out, columns=COLUMNS)
