"""The audit's endpoint, floor, EIV-extra and swap-difference rows (ragscale 5.1, A.4, B.1, B.5).

:func:`kvx.aggregate.ragscale.audit.audit` calls these per panel and metric; each returns table rows,
so the audit module only decides which panels and metrics are audited.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvx.aggregate.ragscale.endpoints import held_out_endpoints, panel_floor, swap_difference
from kvx.aggregate.ragscale.gain_vs_raw import disjoint_rows, slope_and_headroom
from kvx.aggregate.ragscale.score_changes import score_changes
from kvx.aggregate.ragscale.settings import AuditSettings
from kvx.aggregate.read.problems import Problem
from kvx.core.records import PANEL_METRIC

__all__ = [
    "FLOOR_COLUMNS",
    "HELDOUT_COLUMNS",
    "JUDGE_PREFIX",
    "PANEL_EXTRA_COLUMNS",
    "SWAP_COLUMNS",
    "Panel",
    "heldout_row",
    "judged_rows",
    "panel_extra",
    "swap_rows",
]

#: a judge's verdicts audited as a metric: ``judge:<name>`` from ``full_j.<name>`` / ``comp_j.<name>``
JUDGE_PREFIX = "judge:"
PANEL_EXTRA_COLUMNS = [
    "rescue_change",
    "damage_change",
    "eiv_slope",
    "eiv_slope_low",
    "eiv_slope_high",
    "eiv_slope_undefined_draws",
    "headroom_eiv_r",
    "headroom_eiv_low",
    "headroom_eiv_high",
    "headroom_nonfinite_draws",
    "disjoint_r",
    "disjoint_low",
    "disjoint_high",
    "n_disjoint_undefined_splits",
]
HELDOUT_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "n_rows",
    "min_gap",
    "n_orientations",
    "valid_share",
    "retention",
    "retention_low",
    "retention_high",
    "n_pairs_selected",
    "modal_pair",
    "modal_share",
]
FLOOR_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "n_rows",
    "raw_mean",
    "comp_mean",
    "raw_range",
    "comp_range",
    "endpoint_raw_upgrade",
    "endpoint_comp_upgrade",
]
SWAP_COLUMNS = [
    "task",
    "swap",
    "compression",
    "compressor",
    "setting",
    "metric",
    "reference",
    "n_readers",
    "n_rows",
    "min_gap",
    "interval",
    "status",
    "swap_retention",
    "comp_retention",
    "retention_difference",
    "retention_difference_low",
    "retention_difference_high",
    "retention_undefined_draws",
]


def _nan(value: float | None) -> float:
    return np.nan if value is None else float(value)


@dataclass(frozen=True)
class Panel:
    """One audited panel x metric: its scores (readers x rows), in reader-name and row-id order."""

    head: dict
    names: list[str]
    row_ids: list[str]
    families: list[str]
    raw: np.ndarray
    comp: np.ndarray


def judged_rows(
    raw: np.ndarray, comp: np.ndarray, label: str, metric: str, problems: list[Problem]
) -> np.ndarray:
    """Rows of a judge metric every reader's two answers were judged on; the others (NaN: not judged,
    an error or a source the judge does not apply to) leave this metric's panel, counted, not imputed.
    A panel with no judged row is not audited on that judge (it did not run there), without a problem."""
    keep = np.isfinite(raw).all(axis=0) & np.isfinite(comp).all(axis=0)
    if keep.any() and not keep.all():  # a panel the judge never saw: not this panel's metric
        problems.append(
            Problem(
                "audit_judge",
                "warning",
                "",
                label,
                f"{metric}: {int((~keep).sum())} of {keep.size} rows lack a verdict for some reader's answer "
                "(not judged); that metric is audited on the other rows, never imputed",
            )
        )
    return keep


def panel_extra(panel: Panel, n_splits: int, n_boot: int, seed: int) -> dict:
    """audit_panel's graded rescue/damage, corrected slope, headroom EIV and disjoint-row columns."""
    up, down = score_changes(panel.raw, panel.comp)
    out: dict = {"rescue_change": up, "damage_change": down}
    if panel.raw.shape[0] >= 3 and panel.raw.shape[1] >= 2:  # the EIV needs >= 3 readers (as eiv_r)
        extra = slope_and_headroom(panel.raw, panel.comp, panel.families, n_boot=n_boot, seed=seed)
        disjoint = disjoint_rows(panel.raw, panel.comp, n_splits=n_splits, seed=seed)
        out |= {
            "eiv_slope": _nan(extra.slope),
            "eiv_slope_low": _nan(extra.slope_low),
            "eiv_slope_high": _nan(extra.slope_high),
            "eiv_slope_undefined_draws": extra.slope_undefined_draws,
            "headroom_eiv_r": _nan(extra.headroom_r),
            "headroom_eiv_low": _nan(extra.headroom_low),
            "headroom_eiv_high": _nan(extra.headroom_high),
            "headroom_nonfinite_draws": extra.headroom_nonfinite_draws,
            "disjoint_r": _nan(disjoint.median),
            "disjoint_low": _nan(disjoint.low),
            "disjoint_high": _nan(disjoint.high),
            "n_disjoint_undefined_splits": disjoint.n_undefined,
        }
    return out


def heldout_row(panel: Panel, settings: AuditSettings, n_splits: int, seed: int) -> dict:
    """audit_heldout (Table 8): endpoints chosen on one row half and scored on the other."""
    held = held_out_endpoints(panel.raw, panel.comp, n_splits=n_splits, seed=seed, min_gap=settings.min_gap)
    modal = held.modal_pair
    return panel.head | {
        "n_readers": len(panel.names),
        "n_rows": panel.raw.shape[1],
        "min_gap": settings.min_gap,
        "n_orientations": held.n_orientations,
        "valid_share": held.valid_share,
        "retention": _nan(held.retention),
        "retention_low": _nan(held.low),
        "retention_high": _nan(held.high),
        "n_pairs_selected": held.n_pairs,
        "modal_pair": None if modal is None else f"{panel.names[modal[0]]} -> {panel.names[modal[1]]}",
        "modal_share": _nan(held.modal_share),
    }


def floor_row(panel: Panel, low: int, high: int) -> dict:
    """audit_floor (Table 9): panel means and full reader ranges beside the endpoint upgrade."""
    raw_means, comp_means = panel.raw.mean(axis=1), panel.comp.mean(axis=1)
    return panel.head | {
        "n_readers": len(panel.names),
        "n_rows": panel.raw.shape[1],
        **panel_floor(panel.raw, panel.comp),
        "endpoint_raw_upgrade": float(raw_means[high] - raw_means[low]),
        "endpoint_comp_upgrade": float(comp_means[high] - comp_means[low]),
    }


def _sub(panel: Panel, names: Sequence[str], row_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    r = [panel.names.index(n) for n in names]
    c = pd.Index(panel.row_ids).get_indexer(list(row_ids))
    return panel.raw[np.ix_(r, c)], panel.comp[np.ix_(r, c)]


def swap_rows(panels: list[Panel], settings: AuditSettings, n_boot: int, seed: int) -> list[dict]:
    """audit_swap_difference (Table 15): each ``--swap A:B`` panel against each compression panel of the
    same task, compressor, setting and metric, on their shared readers and rows.

    Both retentions divide by the upgrade under one shared reference condition (B.5: BM25 raw
    evidence, which the swap replaces and the compressor compresses): the swap's reference is A's
    answers, a compression panel's its readers' raw (FullCache) answers. The difference is computed
    only when the two references are the same scores on every shared reader and row; otherwise the
    row says how many differ (status) and holds no estimate."""
    out = []
    for swap in (p for p in panels if " -> " in p.head["evidence"]):
        before, after = swap.head["evidence"].split(" -> ", 1)
        for comp in panels:
            same = all(comp.head[k] == swap.head[k] for k in ("task", "compressor", "setting", "metric"))
            if not same or " -> " in comp.head["evidence"] or comp.head["evidence"] in (before, after):
                continue
            names = sorted(set(swap.names) & set(comp.names))
            row_ids = sorted(set(swap.row_ids) & set(comp.row_ids))
            row = {
                "task": swap.head["task"],
                "swap": swap.head["evidence"],
                "compression": comp.head["evidence"],
                "compressor": swap.head["compressor"],
                "setting": swap.head["setting"],
                "metric": swap.head["metric"],
                "reference": before,
                "n_readers": len(names),
                "n_rows": len(row_ids),
                "min_gap": settings.min_gap,
            }
            if len(names) < 2 or len(row_ids) < 2:
                out.append(row | {"status": "fewer than 2 shared readers or rows"})
                continue
            reference, swapped = _sub(swap, names, row_ids)
            comp_ref, compressed = _sub(comp, names, row_ids)
            differ = int((reference != comp_ref).sum())
            if differ:
                out.append(
                    row
                    | {
                        "status": f"no shared reference: {differ} of {reference.size} scores of {before} "
                        f"differ from the raw answers of {comp.head['evidence']}"
                    }
                )
                continue
            families = [swap.families[swap.names.index(n)] for n in names]
            diff = swap_difference(
                reference, swapped, compressed, families, n_boot=n_boot, seed=seed, min_gap=settings.min_gap
            )
            out.append(
                row
                | {
                    "interval": diff.label,
                    "status": "ok" if diff.difference is not None else "reference upgrade below the gap",
                    "swap_retention": _nan(diff.swap_retention),
                    "comp_retention": _nan(diff.comp_retention),
                    "retention_difference": _nan(diff.difference),
                    "retention_difference_low": _nan(diff.low),
                    "retention_difference_high": _nan(diff.high),
                    "retention_undefined_draws": diff.n_undefined,
                }
            )
    return out
