"""What a ragscale user reads off an audit: each comparison's outcome label and the release gate on
it, the upgrade within row slices, and the answers that changed (ragscale release
``src/ragscale/analysis.py`` at 5c65b09: ``analyze_metric``'s outcome rules, ``slice_rows``,
``_changed_examples``; ``cli.py``'s release gate).

Outcome rules, in the release's order (the first that holds):

1. |raw upgrade| < the minimum gap (0.05): ``not separated`` (release: insufficient-raw-separation);
2. raw and compressed upgrade of opposite strict sign: ``reversed`` (observed-order-reversed);
3. retention below the alert threshold (0.75): ``attenuated`` (observed-upgrade-attenuated);
4. otherwise ``preserved`` (observed-upgrade-preserved).
"""

from __future__ import annotations

import difflib
import math

import numpy as np
import pandas as pd

from kvx.aggregate.options import MIN_SLICE_ROWS, RETENTION_ALERT
from kvx.aggregate.ragscale.audit import metrics
from kvx.aggregate.read.problems import Problem
from kvx.core.records import PANEL, SUPPORTED

MINIMUM_GAP = 0.05  # ragscale run.minimum_raw_gap default: the raw upgrade retention needs
CHANGED_SHOWN = 10  # the release reports the first 10 changed examples (``_changed_examples`` limit)

NOT_SEPARATED, REVERSED, ATTENUATED, PRESERVED = "not separated", "reversed", "attenuated", "preserved"
OUTCOMES = (NOT_SEPARATED, REVERSED, ATTENUATED, PRESERVED)
#: the release's labels, accepted by --fail-on as they appear in its summary.json
RELEASE_LABELS = {
    "insufficient-raw-separation": NOT_SEPARATED,
    "observed-order-reversed": REVERSED,
    "observed-upgrade-attenuated": ATTENUATED,
    "observed-upgrade-preserved": PRESERVED,
}
PAIR_KEYS = [*PANEL, "metric", "kind", "reader_a", "reader_b"]
SLICE_COLUMNS = [*PAIR_KEYS, "field", "value", "n_rows", "raw_upgrade", "comp_upgrade", "retention"]
CHANGED_COLUMNS = [
    *PAIR_KEYS,
    "row_id",
    "question_type",
    "transition_a",
    "transition_b",
    "raw_answer_a",
    "comp_answer_a",
    "raw_answer_b",
    "comp_answer_b",
]


def outcome(
    raw_upgrade: float, comp_upgrade: float, alert: float = RETENTION_ALERT, gap: float = MINIMUM_GAP
) -> str:
    """The release's label of one comparison (rules 1-4 above, in that order); ``gap`` is --min-gap."""
    if abs(raw_upgrade) < gap:
        return NOT_SEPARATED
    if raw_upgrade * comp_upgrade < 0:
        return REVERSED
    if comp_upgrade / raw_upgrade < alert:
        return ATTENUATED
    return PRESERVED


def parse_outcomes(text: str) -> list[str]:
    """``--fail-on`` values: kvx's labels (a space, '-' or '_' between words) or the release's; ValueError
    naming the bad value, with the closest label."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        label = RELEASE_LABELS.get(item, item.replace("-", " ").replace("_", " "))
        if label not in OUTCOMES:
            close = difflib.get_close_matches(label, OUTCOMES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"--fail-on {item!r} is not an outcome ({', '.join(OUTCOMES)}){hint}")
        out.append(label)
    return out


def check_alert(value: float) -> None:
    """The retention alert is a share of the raw upgrade: [0, 1] as in the release (``_unit_interval``)."""
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"--retention-alert={value:g} must lie in [0, 1] (ragscale's default is 0.75)")


def with_outcomes(pairs: pd.DataFrame, alert: float = RETENTION_ALERT) -> pd.DataFrame:
    """``audit_pairs`` with ``order_reversed`` and ``outcome`` for each comparison (endpoint and declared)."""
    out = pairs.copy()
    raw, comp = out["raw_upgrade"].astype(float), out["comp_upgrade"].astype(float)
    out["order_reversed"] = (raw * comp < 0).astype(bool)
    gaps = out["min_gap"].astype(float) if "min_gap" in out else pd.Series(MINIMUM_GAP, index=out.index)
    out["outcome"] = [outcome(r, c, alert, g) for r, c, g in zip(raw, comp, gaps, strict=True)]
    return out


def gate(pairs: pd.DataFrame | None, fail_on: list[str]) -> list[str]:
    """The comparisons whose outcome is one of ``fail_on``, each as one line naming it."""
    if pairs is None or pairs.empty or "outcome" not in pairs:
        return []
    failing = pairs[pairs["outcome"].isin(fail_on)]
    return [
        f"{r['task']} x {r['evidence']} + {r['compressor']}@{r['setting']} {r['metric']} ({r['kind']}): "
        f"{r['reader_a']} -> {r['reader_b']} {r['outcome']} (raw {100 * r['raw_upgrade']:+.1f} pp, "
        f"compressed {100 * r['comp_upgrade']:+.1f} pp)"
        for _, r in failing.iterrows()
    ]


def slice_column(rows: pd.DataFrame, field: str) -> str | None:
    """Where a row hint lives: its own column (scores files) or the answer's details (records: a task's
    ``Score.details``, column ``full_d.<field>``); None when no row carries it."""
    for column in (field, f"full_d.{field}"):
        if column in rows and rows[column].notna().any():
            return column
    return None


def _pair_frames(
    rows: pd.DataFrame, pairs: pd.DataFrame
) -> list[tuple[dict, pd.DataFrame, pd.DataFrame, tuple[str, str]]]:
    """Per comparison: its keys, reader a's and reader b's rows on the rows both answered (by row_id), and
    the metric's (raw, comp) columns."""
    supported = rows[rows["status"] == SUPPORTED]
    if "revision" in supported:  # as the audit names them: two revisions of one reader are two readers
        revisions = supported.groupby("reader")["revision"].transform("nunique")
        labels = supported["reader"].where(revisions == 1, supported["reader"] + "@" + supported["revision"])
        supported = supported.assign(reader=labels)
    columns = metrics(supported)
    groups = dict(iter(supported.groupby(PANEL, sort=False)))
    out = []
    for _, pair in pairs.iterrows():
        keys = {k: pair[k] for k in PAIR_KEYS}
        group = groups.get(tuple(pair[k] for k in PANEL))
        if group is None or pair["metric"] not in columns:
            continue
        raw_col, comp_col = columns[pair["metric"]]
        sides = []
        for reader in (pair["reader_a"], pair["reader_b"]):
            side = group[group["reader"] == reader]
            sides.append(side[side[raw_col].notna() & side[comp_col].notna()].set_index("row_id"))
        shared = sorted(set(sides[0].index) & set(sides[1].index))
        out.append((keys, sides[0].loc[shared], sides[1].loc[shared], (raw_col, comp_col)))
    return out


def audit_slices(
    rows: pd.DataFrame,
    pairs: pd.DataFrame,
    fields: list[str],
    min_rows: int = MIN_SLICE_ROWS,
    gap: float = MINIMUM_GAP,
) -> tuple[pd.DataFrame, list[Problem]]:
    """Raw and compressed upgrade (mean over the slice's rows of b - a) within each value of each hint
    field, for every comparison; a value with fewer than ``min_rows`` rows is left out and retention
    is NaN when |raw upgrade| < ``gap`` (--min-gap), as the release's ``slice_rows``. A missing value is
    its own slice ('nan', the release's ``groupby(dropna=False)``)."""
    problems, found = [], {}
    for field in fields:
        found[field] = slice_column(rows, field)
        if found[field] is None:
            problems.append(
                Problem("audit_slices", "warning", "", field, f"no row carries {field!r}: not sliced by it")
            )
    out = []
    for keys, a, b, (raw_col, comp_col) in _pair_frames(rows, pairs):
        for field, column in found.items():
            if column is None:
                continue
            values = a[column].map(lambda v: "nan" if pd.isna(v) else str(v))
            for value in sorted(values.unique()):
                ids = values.index[values == value]
                if len(ids) < min_rows:
                    continue
                raw_up = float(
                    (b.loc[ids, raw_col].to_numpy(float) - a.loc[ids, raw_col].to_numpy(float)).mean()
                )
                comp_up = float(
                    (b.loc[ids, comp_col].to_numpy(float) - a.loc[ids, comp_col].to_numpy(float)).mean()
                )
                ratio = comp_up / raw_up if abs(raw_up) >= gap else np.nan
                out.append(
                    keys
                    | {"field": field, "value": value, "n_rows": len(ids)}
                    | {"raw_upgrade": raw_up, "comp_upgrade": comp_up, "retention": ratio}
                )
    return pd.DataFrame(out, columns=SLICE_COLUMNS), problems


def _transition(raw: float, comp: float) -> str:
    if raw == 0 and comp == 1:
        return "rescued"
    if raw == 1 and comp == 0:
        return "damaged"
    return "unchanged"


def _answer(side: pd.DataFrame, row_id: str, columns: tuple[str, ...]) -> str | None:
    for column in columns:
        if column in side and isinstance(side.at[row_id, column], str):
            return side.at[row_id, column]
    return None


def audit_changed(rows: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Every row a binary metric's comparison changes: one reader's answer rescued (raw wrong, compressed
    right) or damaged (the reverse), with both readers' raw and compressed answers, in row order. Answers
    come from ``raw_answer``/``comp_answer`` (scores files) or the records' ``full_output``/``comp_output``
    (the aggregate keeps a compressed output for C→W rows only); None where not kept."""
    out = []
    for keys, a, b, (raw_col, comp_col) in _pair_frames(rows, pairs):
        scores = np.concatenate(
            [a[[raw_col, comp_col]].to_numpy(float), b[[raw_col, comp_col]].to_numpy(float)]
        )
        if not np.isin(scores, (0.0, 1.0)).all():
            continue
        for row_id in a.index:
            ta = _transition(a.at[row_id, raw_col], a.at[row_id, comp_col])
            tb = _transition(b.at[row_id, raw_col], b.at[row_id, comp_col])
            if ta == tb == "unchanged":
                continue
            hint = _answer(a, row_id, ("question_type", "full_d.question_type", "full_d.type"))
            out.append(
                keys
                | {"row_id": row_id, "question_type": hint or "unspecified"}
                | {"transition_a": ta, "transition_b": tb}
                | {
                    "raw_answer_a": _answer(a, row_id, ("raw_answer", "full_output")),
                    "comp_answer_a": _answer(a, row_id, ("comp_answer", "comp_output")),
                    "raw_answer_b": _answer(b, row_id, ("raw_answer", "full_output")),
                    "comp_answer_b": _answer(b, row_id, ("comp_answer", "comp_output")),
                }
            )
    return pd.DataFrame(out, columns=CHANGED_COLUMNS)


def first_changed(changed: pd.DataFrame, limit: int = CHANGED_SHOWN) -> pd.DataFrame:
    """The first ``limit`` changed rows of each comparison: what the report shows (the CSV holds all)."""
    if changed.empty:
        return changed
    return changed.groupby(PAIR_KEYS, sort=False, dropna=False).head(limit)
