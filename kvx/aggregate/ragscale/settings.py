"""How an audit was computed: the gap, the replay's filter and tie rule, the retention interval (A.5, B.1).

Every audit table row records the settings it used (columns ``min_gap``, ``ties``, ``mcnemar_filter``,
``interval``), so a table read on its own says how it was computed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from kvx.aggregate.options import INTERVALS, TIE_RULES, Options

__all__ = ["INTERVALS", "MCNEMAR_ALPHA", "TIE_RULES", "AuditSettings", "from_options"]

#: A.5: the EM sensitivity's exact two-sided McNemar test on the selection half, at p < .05
MCNEMAR_ALPHA = 0.05


def _choice(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        near = difflib.get_close_matches(value, allowed, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"{name} {value!r} is not one of {', '.join(allowed)}{hint}")


@dataclass(frozen=True)
class AuditSettings:
    """The paper's defaults: a 5 pp gap, no McNemar filter, a scoring-half tie is not a reversal,
    family-by-row retention intervals with re-selected endpoints."""

    min_gap: float = 0.05  # endpoint eligibility, retention and excess-flip eligibility (A.5: 0.02, 0.10)
    mcnemar: bool = False  # excess flips only on pairs McNemar-separated on the selection half
    ties: str = "not-reversal"  # or "exclude", "adverse"
    interval: str = "family-row"  # or "row"

    def __post_init__(self) -> None:
        if not 0.0 < self.min_gap < 1.0:
            raise ValueError(f"min_gap {self.min_gap:g} must be in (0, 1): a fraction of the score scale")
        _choice(self.ties, TIE_RULES, "ties")
        _choice(self.interval, INTERVALS, "interval")

    def mcnemar_label(self, binary: bool) -> str:
        """What the excess flips of a metric used: the filter, none, or why it could not apply."""
        if not self.mcnemar:
            return "off"
        return f"p<{MCNEMAR_ALPHA:g}" if binary else "not applicable: non-binary scores (unfiltered)"


def from_options(options: Options) -> AuditSettings:
    """The settings the aggregate's options say: ``--min-gap``, ``--mcnemar-filter``, ``--ties``,
    ``--interval``."""
    return AuditSettings(options.min_gap, options.mcnemar_filter, options.ties, options.interval)
