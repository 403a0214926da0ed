"""Reader-upgrade audit (ragscale sections 3, 6, 7 and Appendix A.4-A.6).

For a task x evidence condition (text transform configuration) x compressor x setting with at
least two readers, "raw" is each reader's FullCache answer on the supplied evidence and
"compressed" its answer under the transform and compressor, on the rows every reader answered
(intersected, never imputed). Every score the records carry is audited: ``correct``, ``score``
and each task metric (``em``, ``f1``: ragscale's). It reports each reader's gain, the raw and
compressed upgrade of the raw endpoint pair and of declared pairs, retention, excess flips over
seeded row splits (the raw reversal rate is the raw-replay flip baseline), rescue and damage and
exact McNemar (binary scores), and the paired errors-in-variables correlation between raw score
and gain, with family-by-row intervals when the panel spans families. A text compressor must
have handed every reader byte-identical evidence on every row (content hashes), or the audit of
that panel is refused. Judge verdicts (``full_j.<name>``) are the metric ``judge:<name>``, on the rows
every answer was judged. The estimators of Tables 2-3, 8, 9 and 15, the graded rescue/damage, the
corrected slope, headroom-scaled and disjoint-row EIV are in :mod:`kvx.aggregate.ragscale.audit_rows`;
how a table was computed (gap, tie rule, McNemar filter, interval) is in its columns (AuditSettings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kvx.aggregate.ragscale.audit_rows import (
    FLOOR_COLUMNS,
    HELDOUT_COLUMNS,
    JUDGE_PREFIX,
    PANEL_EXTRA_COLUMNS,
    SWAP_COLUMNS,
    Panel,
    floor_row,
    heldout_row,
    judged_rows,
    panel_extra,
    swap_rows,
)
from kvx.aggregate.ragscale.endpoints import endpoint_bootstrap, interval_label
from kvx.aggregate.ragscale.score_changes import score_changes
from kvx.aggregate.ragscale.settings import MCNEMAR_ALPHA, AuditSettings
from kvx.aggregate.read.problems import Problem
from kvx.aggregate.stats.eiv import eiv_bootstrap, eiv_correlation
from kvx.aggregate.stats.paired_tests import pair_mcnemar
from kvx.aggregate.stats.releases import upgrade_interval
from kvx.aggregate.stats.upgrades import (
    endpoints,
    excess_flips,
    rescue_damage,
    rescue_damage_per_reader,
    retention,
)
from kvx.core.records import PANEL, SUPPORTED

BASE_METRICS = {"correct": ("full_correct", "comp_correct"), "score": ("full_score", "comp_score")}
READER_COLUMNS = [
    *PANEL,
    "metric",
    "reader",
    "family",
    "prompt_format",
    "n_rows",
    "raw_mean",
    "comp_mean",
    "gain",
    "rescue",
    "damage",
    "rescue_change",
    "damage_change",
]
PAIR_COLUMNS = [
    *PANEL,
    "metric",
    "kind",
    "reader_a",
    "reader_b",
    "min_gap",
    "interval",
    "raw_upgrade",
    "raw_upgrade_low",
    "raw_upgrade_high",
    "comp_upgrade",
    "comp_upgrade_low",
    "comp_upgrade_high",
    "retention",
    "retention_low",
    "retention_high",
    "retention_undefined_draws",
    "mcnemar_raw_p",
    "mcnemar_comp_p",
]
PANEL_COLUMNS = [
    *PANEL,
    "metric",
    "n_readers",
    "n_rows",
    "min_gap",
    "ties",
    "mcnemar_filter",
    "excess_flips",
    "excess_low",
    "excess_high",
    "raw_reversal",
    "comp_reversal",
    "eligible_pairs",
    "rescue",
    "damage",
    "eiv_r",
    "eiv_r_unbounded",
    "eiv_r_psd",
    "eiv_low",
    "eiv_high",
    "eiv_min_eig",
    "eiv_nonpositive_draws",
    "eiv_non_psd_draws",
    "eiv_nonfinite_draws",
    "eiv_outside_unit_draws",
    *PANEL_EXTRA_COLUMNS,
    "n_families",
    "artifact_check",
]


def metrics(rows: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The scores to audit: correct, score, each task metric both conditions carry, then each judge's
    verdicts as ``judge:<name>`` (LongMemEval's semantic score is a judge)."""
    out = {name: cols for name, cols in BASE_METRICS.items() if set(cols) <= set(rows.columns)}
    for column in sorted(rows.columns):
        if column.startswith("full_m.") and f"comp_m.{column[7:]}" in rows:
            out[column[7:]] = (column, f"comp_m.{column[7:]}")
    for column in sorted(rows.columns):
        if column.startswith("full_j.") and f"comp_j.{column[7:]}" in rows:
            out[JUDGE_PREFIX + column[7:]] = (column, f"comp_j.{column[7:]}")
    return out


def with_families(rows: pd.DataFrame, families: dict[str, str]) -> pd.DataFrame:
    """Rows with the user's reader -> family mapping applied over what the records say."""
    if not families or rows.empty:
        return rows
    return rows.assign(family=rows["reader"].map(families).fillna(rows["family"]))


def _binary(values: np.ndarray) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


@dataclass
class AuditTables:
    readers: pd.DataFrame
    pairs: pd.DataFrame
    panel: pd.DataFrame
    problems: list[Problem]
    heldout: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=HELDOUT_COLUMNS))
    floor: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FLOOR_COLUMNS))
    swap_difference: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SWAP_COLUMNS))

    def tables(self) -> dict[str, pd.DataFrame]:
        """The audit's tables by their report names."""
        return {
            "audit_readers": self.readers,
            "audit_pairs": self.pairs,
            "audit_panel": self.panel,
            "audit_heldout": self.heldout,
            "audit_floor": self.floor,
            "audit_swap_difference": self.swap_difference,
        }


def _nan(value: float | None) -> float:
    return np.nan if value is None else float(value)


def _artifact_check(group: pd.DataFrame, label: str, problems: list[Problem], ids: list[str]) -> str | None:
    """None when the panel may be audited, else the refusal reason (also recorded as a problem); the
    group's ``row_id`` is a rank in ``ids``."""
    hashes = group.pivot(index="row_id", columns="reader", values="text_hash")
    if hashes.isna().all().all():
        return None
    for rank, h in hashes.iterrows():
        if h.isna().any() or h.nunique() > 1:
            shown = ", ".join(f"{r}={'missing' if pd.isna(v) else v[:12]}" for r, v in h.items())
            reason = (
                f"refused: row {ids[rank]} has different compressed-evidence hashes across readers ({shown})"
            )
            problems.append(Problem("artifact_hash", "error", "", label, reason))
            return reason
    return None


#: told of each audited panel and its audit rows; the audit controls
Visit = Callable[[Panel, pd.DataFrame], None]


def audit(
    rows: pd.DataFrame,
    declared: list[tuple[str, str]],
    n_splits: int,
    n_boot: int,
    seed: int,
    settings: AuditSettings | None = None,
    visit: Visit | None = None,
) -> AuditTables:
    supported = rows[rows["status"] == SUPPORTED]
    revisions = supported.groupby("reader")["revision"].transform("nunique")
    # two revisions of one reader are two readers here
    label = supported["reader"].where(revisions == 1, supported["reader"] + "@" + supported["revision"])
    # rows by their rank among the sorted row ids: the pivots below order them as the ids sort, and pandas
    # never hashes an id (it merges ids that differ after a NUL)
    ids = sorted(set(supported["row_id"]))
    rank = {row_id: i for i, row_id in enumerate(ids)}
    supported = supported.assign(reader=label, row_id=[rank[r] for r in supported["row_id"]])
    audited = metrics(supported)
    settings = settings or AuditSettings()
    readers_out, pairs_out, panel_out, problems = [], [], [], []
    heldout_out, floor_out, panels = [], [], []
    for keys, group in supported.groupby(PANEL, sort=True):
        names = sorted(group["reader"].unique())
        if len(names) < 2:
            continue
        label = f"{keys[0]} x {keys[1]} + {keys[2]}@{keys[3]}"
        base = dict(zip(PANEL, keys, strict=True))
        counts = group.groupby("row_id")["reader"].nunique()
        shared = counts[counts == len(names)].index
        if len(shared) < len(counts):
            problems.append(
                Problem(
                    "audit_rows",
                    "warning",
                    "",
                    label,
                    f"{len(counts) - len(shared)} of {len(counts)} rows lack "
                    "a supported result for some reader; the audit uses the rows all readers answered",
                )
            )
        answered = group
        group = group[group["row_id"].isin(shared)]
        refused = _artifact_check(group, label, problems, ids)
        if group.empty:  # every row lacks some reader's answer (the warning above counts them)
            refused = "no row every reader answered"
        check = refused or (
            "identical text artifact" if group["text_hash"].notna().any() else "KV cache: no text artifact"
        )
        described = answered if group.empty else group
        about = described.groupby("reader")[["family", "prompt_format"]].first().loc[names]
        for metric, (raw_col, comp_col) in audited.items():
            head = base | {"metric": metric}
            size = {"n_readers": len(names), "n_families": about["family"].nunique()}
            if refused or group.empty:
                panel_out.append(head | size | {"n_rows": len(shared), "artifact_check": check})
                continue
            raw_frame = group.pivot(index="reader", columns="row_id", values=raw_col).loc[names]
            raw = raw_frame.to_numpy(float)
            comp = group.pivot(index="reader", columns="row_id", values=comp_col).loc[names].to_numpy(float)
            row_ids = [ids[r] for r in raw_frame.columns]
            if metric.startswith(JUDGE_PREFIX):
                keep = judged_rows(raw, comp, label, metric, problems)
                raw, comp, row_ids = raw[:, keep], comp[:, keep], [r for r, k in zip(row_ids, keep) if k]
                if raw.shape[1] < 2:
                    continue  # the problem above counts the unjudged rows
            if not (np.isfinite(raw).all() and np.isfinite(comp).all()):
                continue  # a metric some answers lack is not this task's metric: never imputed
            binary = _binary(raw) and _binary(comp)
            families = list(about["family"])
            panel = Panel(head, names, row_ids, families, raw, comp)
            if visit is not None:
                visit(panel, group)
            panels.append(panel)
            readers_out += _readers(head, about, raw, comp, binary)
            pairs_out += _pairs(panel, declared, binary, n_boot, seed, settings)
            panel_out.append(
                head
                | _panel(raw, comp, binary, families, n_splits, n_boot, seed, settings)
                | panel_extra(panel, n_splits, n_boot, seed)
                | size
                | {"n_rows": raw.shape[1], "artifact_check": check}
            )
            heldout_out.append(heldout_row(panel, settings, n_splits, seed))
            floor_out.append(floor_row(panel, *endpoints(raw.mean(axis=1))))
    return AuditTables(
        pd.DataFrame(readers_out, columns=READER_COLUMNS),
        pd.DataFrame(pairs_out, columns=PAIR_COLUMNS),
        pd.DataFrame(panel_out, columns=PANEL_COLUMNS),
        problems,
        pd.DataFrame(heldout_out, columns=HELDOUT_COLUMNS),
        pd.DataFrame(floor_out, columns=FLOOR_COLUMNS),
        pd.DataFrame(swap_rows(panels, settings, n_boot, seed), columns=SWAP_COLUMNS),
    )


def _readers(head: dict, about: pd.DataFrame, raw: np.ndarray, comp: np.ndarray, binary: bool) -> list[dict]:
    out = []
    transitions = rescue_damage_per_reader(raw == 1.0, comp == 1.0) if binary else None
    for i, (name, info) in enumerate(about.iterrows()):
        row = head | {
            "reader": name,
            "family": info["family"],
            "prompt_format": info["prompt_format"],
            "n_rows": raw.shape[1],
            "raw_mean": raw[i].mean(),
            "comp_mean": comp[i].mean(),
        }
        row["gain"] = row["comp_mean"] - row["raw_mean"]
        row["rescue_change"], row["damage_change"] = score_changes(raw[i], comp[i])
        if transitions is not None:
            row["rescue"], row["damage"] = _nan(transitions[i].rescue), _nan(transitions[i].damage)
        out.append(row)
    return out


def _pairs(
    panel: Panel,
    declared: list[tuple[str, str]],
    binary: bool,
    n_boot: int,
    seed: int,
    settings: AuditSettings,
) -> list[dict]:
    head, names, raw, comp = panel.head, panel.names, panel.raw, panel.comp
    means = raw.mean(axis=1)
    low, high = endpoints(means)
    wanted = [("endpoints", low, high)] if low != high else []  # every reader ties: no upgrade to retain
    wanted += [("declared", names.index(a), names.index(b)) for a, b in declared if a in names and b in names]
    out = []
    for kind, a, b in wanted:
        up_raw = float(means[b] - means[a])
        up_comp = float(comp[b].mean() - comp[a].mean())
        reselect = kind == "endpoints" and settings.interval == "family-row"
        if reselect:  # Tables 2-3: families and rows drawn, the endpoints chosen again in each draw
            boot = endpoint_bootstrap(raw, comp, panel.families, n_boot, seed, settings.min_gap)
        else:
            boot = upgrade_interval(
                raw[[a, b]], comp[[a, b]], n_boot=n_boot, seed=seed, floor=settings.min_gap
            )
        row = head | {
            "kind": kind,
            "reader_a": names[a],
            "reader_b": names[b],
            "min_gap": settings.min_gap,
            "interval": interval_label(panel.families, fixed_pair=not reselect),
            "raw_upgrade": up_raw,
            "raw_upgrade_low": boot.raw[0],
            "raw_upgrade_high": boot.raw[1],
            "comp_upgrade": up_comp,
            "comp_upgrade_low": boot.comp[0],
            "comp_upgrade_high": boot.comp[1],
            "retention": _nan(retention(up_raw, up_comp, floor=settings.min_gap)),
            "retention_low": _nan(boot.retention[0]),
            "retention_high": _nan(boot.retention[1]),
            "retention_undefined_draws": boot.n_undefined,
        }
        if binary:
            row["mcnemar_raw_p"] = pair_mcnemar(raw[b] == 1.0, raw[a] == 1.0)[2]
            row["mcnemar_comp_p"] = pair_mcnemar(comp[b] == 1.0, comp[a] == 1.0)[2]
        out.append(row)
    return out


def _panel(
    raw: np.ndarray,
    comp: np.ndarray,
    binary: bool,
    families: list[str],
    n_splits: int,
    n_boot: int,
    seed: int,
    settings: AuditSettings,
) -> dict:
    alpha = MCNEMAR_ALPHA if settings.mcnemar and binary else None
    flips = excess_flips(
        raw,
        comp,
        n_splits=n_splits,
        seed=seed,
        min_gap=settings.min_gap,
        mcnemar_alpha=alpha,
        ties=settings.ties,
    )
    out = {
        "min_gap": settings.min_gap,
        "ties": settings.ties,
        "mcnemar_filter": settings.mcnemar_label(binary),
        "excess_flips": _nan(flips.median),
        "excess_low": _nan(flips.low),
        "excess_high": _nan(flips.high),
        "raw_reversal": _nan(flips.raw_rate),
        "comp_reversal": _nan(flips.comp_rate),
        "eligible_pairs": _nan(flips.median_eligible_pairs),
    }
    if binary:
        rd = rescue_damage(raw == 1.0, comp == 1.0)
        out["rescue"], out["damage"] = _nan(rd.rescue), _nan(rd.damage)
    if raw.shape[0] >= 3 and raw.shape[1] >= 2:  # a cross-reader covariance needs >= 3 readers
        gain = comp - raw
        eiv = eiv_correlation(raw, gain)
        # family-by-row draws (ragscale) when the panel spans several families, else rows only
        by_family = families if len(set(families)) > 1 else None
        boot = eiv_bootstrap(raw, gain, n_boot=n_boot, seed=seed, families=by_family)
        out |= {
            "eiv_r": _nan(eiv.r_clipped),
            "eiv_r_unbounded": _nan(eiv.r_unbounded),
            "eiv_r_psd": _nan(eiv.r_psd),
            "eiv_low": _nan(boot.low),
            "eiv_high": _nan(boot.high),
            "eiv_min_eig": eiv.min_eigenvalue,
            "eiv_nonpositive_draws": boot.n_nonpositive_variance,
            "eiv_non_psd_draws": boot.n_non_psd,
            "eiv_nonfinite_draws": boot.n_nonfinite,
            "eiv_outside_unit_draws": boot.n_outside_unit,
        }
    return out
