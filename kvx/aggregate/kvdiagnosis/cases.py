"""KVDiagnosis Figure 8 / Table 15: paired cases, the FullCache answer next to the compressed one with
the row's diagnostics.

The paper picks its cases by hand (the release names them by sample id); kvx picks, for each task and
diagnostic category, the ``n`` C->W rows most extreme on the signature that defines the category, so a
case is reproducible from the records alone:

- low / partial mapped coverage: lowest ECov (the coverage loss), then largest ΔNLL;
- low-EAR candidate: lowest EAR, then highest ECov (retained but not accessed: Table 15's KeyDiff case);
- decoding/scoring candidate: smallest |ΔNLL|, then highest Top-50 (stable local distribution);
- every other category (drifts, conflicting, ambiguous): largest ΔNLL (Figure 8's ThinK case).

Ties go to the record key. A row whose sort values are all N/A ranks last, never dropped silently: the
table counts the category's rows. Sources named with ``--case`` add every C->W row of theirs (rank 0,
rule "chosen"), so the paper's hand-picked cases (e.g. HotpotQA's ``hotpotqa_000076``) can be shown too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from kvx.aggregate.read.rows import case_text
from kvx.core.records import CW

#: category -> (column, ascending) sort keys; ``abs_delta_nll`` is |ΔNLL|
RULES: dict[str, tuple[tuple[str, bool], ...]] = {
    "low_mapped_coverage": (("ecov", True), ("delta_nll", False)),
    "partial_mapped_coverage": (("ecov", True), ("delta_nll", False)),
    "low_ear_candidate": (("ear", True), ("ecov", False)),
    "decoding_scoring_candidate": (("abs_delta_nll", True), ("top50", False)),
}
DEFAULT_RULE = (("delta_nll", False),)
COLUMNS = (
    "task",
    "category",
    "rank",
    "n_category_rows",
    "rule",
    "source_id",
    "reader",
    "compressor",
    "setting",
    "full_output",
    "comp_output",
    "references",
    "coverage_status",
    "err",
    "ecov",
    "delta_nll",
    "kl",
    "top50",
    "ear",
    "key",
)


def _rule_text(rule: tuple[tuple[str, bool], ...]) -> str:
    return ", then ".join(f"{'lowest' if asc else 'highest'} {col}" for col, asc in rule)


def cases(rows: pd.DataFrame, n: int = 1, chosen: Sequence[str] = ()) -> pd.DataFrame:
    """The ``n`` most extreme C->W rows of every (task, category), then every C->W row of the ``chosen``
    sources (by source id)."""
    cw = rows[(rows["transition"] == CW) & rows["category"].notna()].copy()
    for column in ("err", "ecov", "delta_nll", "kl", "top50", "ear"):
        if column not in cw:
            cw[column] = np.nan
    cw["abs_delta_nll"] = cw["delta_nll"].abs()
    cw["full_output"] = cw["full_output"].map(case_text)  # comp_output is capped the same way in the rows
    out = []
    for (task, category), part in cw.groupby(["task", "category"], sort=True):
        rule = RULES.get(str(category), DEFAULT_RULE)
        # NaN last whatever the direction; the record key breaks ties
        ordered = part.sort_values(
            [c for c, _ in rule] + ["key"], ascending=[a for _, a in rule] + [True], na_position="last"
        )
        for rank, (_, row) in enumerate(ordered.head(n).iterrows(), 1):
            out.append(
                {
                    **{c: row.get(c) for c in COLUMNS},
                    "task": task,
                    "category": category,
                    "rank": rank,
                    "n_category_rows": len(part),
                    "rule": _rule_text(rule),
                }
            )
    picked = cw[cw["source_id"].isin(list(chosen))].sort_values("key")
    sizes = cw.groupby(["task", "category"]).size()
    for _, row in picked.iterrows():
        size = int(sizes[(row["task"], row["category"])])
        out.append({**{c: row.get(c) for c in COLUMNS}, "rank": 0, "n_category_rows": size, "rule": "chosen"})
    return pd.DataFrame(out, columns=list(COLUMNS))
