"""The audit controls' tables (ragscale A.6-A.7, Tables 5-7): one row per audited panel and metric.

``AuditControls.visit`` is handed each panel the reader-upgrade audit builds (``audit(..., visit=)``),
so the controls see exactly the readers, rows and scores the audit does. Seeds: the primary replay
uses ``seed``; the paper runs its nulls from "a seed separate from the primary replay" and the
release fixes none, so the calibration splits use ``seed + 1`` and the two nulls' draws ``seed + 2``
(independent-uniform) and ``seed + 3`` (row-exchangeable). Resolution and screen splits use ``seed``:
the halves of the primary replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.audit_rows import Panel
from kvx.aggregate.ragscale.nulls import Spread, both_half_reversals, null_replay, transition_homogeneity
from kvx.aggregate.ragscale.resolution import resolution_cost, resolution_retention, token_cost
from kvx.aggregate.ragscale.screen import validate_screen
from kvx.core.records import PANEL_METRIC

NULL_COLUMNS = [
    *PANEL_METRIC,
    "null",
    "n_readers",
    "n_rows",
    "obs_excess",
    "obs_excess_low",
    "obs_excess_high",
    "obs_both_rate",
    "obs_both_rate_low",
    "obs_both_rate_high",
    "null_excess",
    "null_excess_low",
    "null_excess_high",
    "null_both_rate",
    "null_both_rate_low",
    "null_both_rate_high",
    "exceeded_share",
    "n_null_draws",
    "n_null_splits",
    "status",
]
TRANSITION_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "n_rows",
    "rescue_rate_min",
    "rescue_rate_max",
    "rescue_rate_sd",
    "rescued_chi2",
    "rescued_dof",
    "rescued_p",
    "damage_rate_min",
    "damage_rate_max",
    "damage_rate_sd",
    "damaged_chi2",
    "damaged_dof",
    "damaged_p",
    "status",
]
RESOLUTION_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "n_rows",
    "n_half_rows",
    "same_share",
    "same_share_low",
    "same_share_high",
    "opposite_share",
    "opposite_share_low",
    "opposite_share_high",
    "median_raw_significant",
    "n_halves_empty",
    "question_ratio",
    "n_separated_pairs",
    "n_nonpositive_retention",
    "n_undefined_ratio",
    "crossfit_question_ratio",
    "crossfit_low",
    "crossfit_high",
    "n_crossfit_nonpositive",
    "token_ratio",
    "token_cost_ratio",
    "token_cost_q25",
    "token_cost_q75",
    "n_token_pairs",
    "token_status",
    "status",
]
SCREEN_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "n_families",
    "primary_triplet",
    "primary_families",
    "n_splits_used",
    "screen_expand_share",
    "panel_expand_share",
    "false_reassurance_share",
    "false_reassurance_share_of_expand",
    "n_triplets",
    "n_false_triplets",
    "modal_triplet",
    "modal_share",
    "n_panel_reversals",
    "visible_share",
    "retention_floor",
    "excess_limit",
    "status",
]
TABLES = ("audit_nulls", "audit_transitions", "audit_resolution", "audit_screen")
#: served readers' billed prompt tokens per answer (kvx.aggregate.read.rows: Answer.served)
TOKENS = ("full_prompt_tokens", "comp_prompt_tokens")


def _spread(prefix: str, s: Spread) -> dict:
    return {prefix: s.median, f"{prefix}_low": s.low, f"{prefix}_high": s.high}


def _binary(raw: np.ndarray, comp: np.ndarray) -> bool:
    return bool(np.isin(raw, (0.0, 1.0)).all() and np.isin(comp, (0.0, 1.0)).all())


@dataclass
class AuditControls:
    """Collects the control rows of every audited panel; ``tables()`` returns the four tables."""

    n_splits: int = 5000
    seed: int = 20260821
    null_draws: int = 200
    null_splits: int = 250
    min_gap: float = 0.05
    retention_floor: float = 0.75
    excess_limit: float = 0.05
    rows: dict[str, list[dict]] = field(default_factory=lambda: {name: [] for name in TABLES})

    def __post_init__(self) -> None:
        for name in ("n_splits", "null_draws", "null_splits"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.min_gap <= 0:
            raise ValueError(f"min_gap must be positive, got {self.min_gap}")

    @classmethod
    def from_options(cls, options: Options) -> AuditControls:
        """The controls (ragscale A.6-A.7) with the aggregate's splits, seed, null counts and gap."""
        return cls(options.n_splits, options.seed, options.null_draws, options.null_splits, options.min_gap)

    def visit(self, panel: Panel, group: pd.DataFrame) -> None:
        """Add one audited panel (``group``: its audit rows)."""
        head, names, families, raw, comp = panel.head, panel.names, panel.families, panel.raw, panel.comp
        size = {"n_readers": len(names), "n_rows": raw.shape[1]}
        binary = _binary(raw, comp)
        self.rows["audit_nulls"] += self._nulls(head | size, raw, comp, binary)
        self.rows["audit_transitions"].append(self._transitions(head | size, raw, comp, binary))
        tokens = _tokens(group, names)
        self.rows["audit_resolution"].append(self._resolution(head | size, raw, comp, binary, tokens))
        self.rows["audit_screen"].append(self._screen(head, names, families, raw, comp))

    def tables(self) -> dict[str, pd.DataFrame]:
        columns = (NULL_COLUMNS, TRANSITION_COLUMNS, RESOLUTION_COLUMNS, SCREEN_COLUMNS)
        return {
            name: pd.DataFrame(self.rows[name], columns=cols)
            for name, cols in zip(TABLES, columns, strict=True)
        }

    def _nulls(self, head: dict, raw: np.ndarray, comp: np.ndarray, binary: bool) -> list[dict]:
        if raw.shape[1] < 2:
            return [head | {"null": k, "status": "not applicable: fewer than 2 rows"} for k in _NULL_SEEDS]
        observed = both_half_reversals(raw, comp, self.n_splits, self.seed + 1, self.min_gap)
        base = head | _spread("obs_excess", observed.excess) | _spread("obs_both_rate", observed.both)
        out = []
        for kind, offset in _NULL_SEEDS.items():
            row = base | {"null": kind, "n_null_draws": self.null_draws, "n_null_splits": self.null_splits}
            if kind == "independent_uniform" and not binary:
                out.append(row | {"status": "not applicable: the independent-uniform null is EM/binary only"})
                continue
            if observed.both.n == 0:
                out.append(row | {"status": "undefined: no split has a raw-separated pair"})
                continue
            null = null_replay(
                raw,
                comp,
                kind,
                observed.both.median,
                self.null_draws,
                self.null_splits,
                self.seed + 1,
                self.seed + offset,
                self.min_gap,
            )
            row |= _spread("null_excess", null.excess) | _spread("null_both_rate", null.both)
            status = "ok" if null.both.n else "undefined: no null split has a raw-separated pair"
            out.append(row | {"exceeded_share": null.share_exceeded, "status": status})
        return out

    def _transitions(self, head: dict, raw: np.ndarray, comp: np.ndarray, binary: bool) -> dict:
        if not binary:
            return head | {"status": "not applicable: rescue and damage need binary scores"}
        t = transition_homogeneity(raw, comp)
        row = head | {
            "rescue_rate_sd": t.rescue_sd,
            "rescued_chi2": t.rescue_chi2,
            "rescued_dof": t.rescue_dof,
            "rescued_p": t.rescue_p,
            "damage_rate_sd": t.damage_sd,
            "damaged_chi2": t.damage_chi2,
            "damaged_dof": t.damage_dof,
            "damaged_p": t.damage_p,
            "status": t.reason or "ok",
        }
        for name, rates in (("rescue", t.rescue), ("damage", t.damage)):
            defined = [r for r in rates if r is not None]
            if defined:
                row[f"{name}_rate_min"], row[f"{name}_rate_max"] = min(defined), max(defined)
        return row

    def _resolution(
        self, head: dict, raw: np.ndarray, comp: np.ndarray, binary: bool, tokens: tuple | str
    ) -> dict:
        row = head | {"n_half_rows": raw.shape[1] // 2}
        if raw.shape[1] < 4:
            return row | {"status": "not applicable: fewer than 4 rows"}
        status = []
        if binary:
            kept = resolution_retention(raw, comp, self.n_splits, self.seed)
            row |= _spread("same_share", kept.same) | _spread("opposite_share", kept.opposite)
            row |= {
                "median_raw_significant": kept.median_raw_significant,
                "n_halves_empty": kept.n_splits_empty,
            }
        else:
            status.append("resolution retention not applicable: exact McNemar needs binary scores")
        cost = resolution_cost(raw, comp, self.n_splits, self.seed, self.min_gap)
        row |= {
            "question_ratio": cost.n_ratio_median,
            "n_separated_pairs": cost.n_pairs,
            "n_nonpositive_retention": cost.n_nonpositive,
            "n_undefined_ratio": cost.n_undefined,
            "crossfit_question_ratio": cost.crossfit.median,
            "crossfit_low": cost.crossfit.low,
            "crossfit_high": cost.crossfit.high,
            "n_crossfit_nonpositive": cost.n_crossfit_nonpositive,
        }
        if isinstance(tokens, str):
            row["token_status"] = tokens
        else:
            tc = token_cost(cost.pair_ratios, *tokens)
            row |= {
                "token_ratio": tc.token_ratio,
                "token_cost_ratio": tc.median,
                "token_cost_q25": tc.q25,
                "token_cost_q75": tc.q75,
                "n_token_pairs": tc.n_pairs,
                "token_status": "served prompt tokens" if tc.n_pairs else "no pair with a finite ratio",
            }
        return row | {"status": "; ".join(status) or "ok"}

    def _screen(
        self, head: dict, names: list[str], families: list[str], raw: np.ndarray, comp: np.ndarray
    ) -> dict:
        row = head | {
            "n_readers": len(names),
            "n_families": len(set(families)),
            "retention_floor": self.retention_floor,
            "excess_limit": self.excess_limit,
        }
        if len(names) < 3 or raw.shape[1] < 4:
            return row | {"status": "not applicable: needs 3 readers and 4 rows"}
        v = validate_screen(
            raw,
            comp,
            families,
            self.n_splits,
            self.seed,
            self.min_gap,
            self.retention_floor,
            self.excess_limit,
        )
        return row | {
            "primary_triplet": " / ".join(names[i] for i in v.primary),
            "primary_families": " / ".join(families[i] for i in v.primary),
            "n_splits_used": v.n_splits,
            "screen_expand_share": v.screen_expand_share,
            "panel_expand_share": v.panel_expand_share,
            "false_reassurance_share": v.false_reassurance_share,
            "false_reassurance_share_of_expand": v.false_reassurance_given_expand,
            "n_triplets": v.n_triplets,
            "n_false_triplets": v.false_triplets,
            "modal_triplet": " / ".join(names[i] for i in v.modal_triplet),
            "modal_share": v.modal_share,
            "n_panel_reversals": v.n_panel_reversals,
            "visible_share": v.visible_share,
            "status": "ok",
        }


#: each null and its draw seed's offset from the primary seed (the calibration splits use seed + 1)
_NULL_SEEDS = {"independent_uniform": 2, "row_exchangeable": 3}


def _tokens(group: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, np.ndarray] | str:
    """(raw, compressed) prompt tokens as (readers x rows) matrices, or why there are none."""
    if not set(TOKENS) <= set(group.columns):
        return "no prompt-token counts in these records (only served readers record them)"
    pivots = [
        group.pivot(index="reader", columns="row_id", values=c).loc[names].to_numpy(float) for c in TOKENS
    ]
    if not all(np.isfinite(p).any() for p in pivots):
        return "no prompt-token counts in these records (only served readers record them)"
    return pivots[0], pivots[1]
