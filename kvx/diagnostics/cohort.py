"""Which records the evidence-boost intervention runs on (KVDiagnosis section 5.3, "Low EAR predicts
selective repair").

The paper boosts evidence attention on "the 104 rows matching only the low-EAR rule" of Table 4,
and reports degradation on "matched C→C controls" (3/92). The cohort is therefore chosen from the
same record's earlier diagnostics by Table 4's own rules (``categorize``), never by hand:

* a C→W row is in the cohort when its Table 4 category is ``low_ear_candidate`` (that rule and no
  other matched);
* a C→C row is a control candidate when the same rules, applied to its own stored values, give it
  the same signature (``low_ear_candidate`` alone): a success that looks like a cohort failure.

Neither the paper nor its release says how the C→C controls were matched; matching on the
diagnostic signature is kvx's choice (documented in docs/diagnostics.md). The aggregate then draws,
per cell, a seeded sample of as many controls as the cell has reproduced cohort rows
(``kvx.aggregate.kvdiagnosis.intervention_cohort``). ``all`` keeps the earlier behaviour: every C→W
row and every C→C row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvx.core.records import CC, CW
from kvx.diagnostics.categories import READS, categorize, category_row

#: ``low_ear``: the paper's cohort; ``all``: every C→W and C→C row
COHORTS: tuple[str, ...] = ("low_ear", "all")
#: the Table 4 category a cohort row (and its matched control's signature) must have
COHORT_CATEGORY = "low_ear_candidate"
#: the diagnostics the cohort's rules read; they must run before the intervention
COHORT_READS: tuple[str, ...] = READS


def cohort_role(cohort: str, transition: str | None, results: Mapping[str, Any]) -> tuple[str | None, str]:
    """``("failure", "")`` for a cohort C→W row, ``("control", "")`` for a control candidate C→C row,
    else ``(None, reason)``. ``results``: the diagnostics that already ran on the record, by name."""
    if transition not in (CW, CC):
        return None, f"intervention targets C→W rows and C→C controls, not {transition}"
    role = "failure" if transition == CW else "control"
    if cohort == "all":
        return role, ""
    signature = categorize(category_row(dict(results)))
    if signature["category"] == COHORT_CATEGORY:
        return role, ""
    matched = ", ".join(signature["matched"]) or "none"
    what = "C→W rows" if role == "failure" else "C→C controls with the same signature"
    return None, (
        f"outside the low-EAR cohort ({what} whose Table 4 rules match only {COHORT_CATEGORY}): "
        f"rules matched: {matched}"
    )
