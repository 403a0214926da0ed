"""TPBench tables from records: probe accuracies, rankings, retention x reading, matched deletions.

Everything is computed from the records alone. A TPBench record carries its probe metrics and its
answer details (dialogue id, whether the reference survived compression, whether the update turn
was kept), which :func:`kvx.aggregate.read.rows.project` flattens into ``comp_m.*``/``comp_d.*`` and
``full_m.*``/``full_d.*``, so these tables regenerate from a record directory without the task.

A *method* is a turn selector (``recency``), a turn deletion (``delete:update``), a KV press
(``snapkv``) or a saved context of the public release (``saved:recency``, budget ``turns 0.3``: the
pool's 30% of turns). Its *budget* is the turn fraction kept (``turns 0.3``) or the cache fraction kept
(``cache 0.3`` = 1 - the kvpress ratio): different physical units (TPBench §5), so they are never
merged and a method is only ranked against methods of the same budget. *Full context* is a method
of its own, built once per source (split x source id) from the uncompressed control answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from kvx.aggregate.read import text
from kvx.aggregate.read.cells import owner
from kvx.aggregate.stats.paired_tests import pair_mcnemar
from kvx.aggregate.stats.ranks import spearman
from kvx.aggregate.stats.resampling import cluster_interval
from kvx.aggregate.tpbench.denominators import not_run, paper_scored, under_rule
from kvx.core.identity import varying
from kvx.core.records import ERROR, SUPPORTED, TASK_READER, UNSUPPORTED

__all__ = [
    "FULL",
    "accuracy",
    "column_mean",
    "compression_methods",
    "deletion",
    "in_family_order",
    "paper_means",
    "rank_change",
    "rankings",
    "retention",
    "tpbench_rows",
    "tpbench_tables",
]

PROBES = {"tpbench_p1": "P1", "tpbench_p2": "P2", "tpbench_p3": "P3"}
FULL = "full context"
FULL_BUDGET = "full"
DELETION_BUDGET = "deletion"
#: TPBench §5: the selectors that read turn positions (and speakers) only; drawn solid in Figure 2
POSITIONAL = frozenset({"recency", "earliest", "random", "uniform_stride", "first_user_recent"})
#: (evidence deletion, its matched control), TPBench §4 "Matched deletion controls"
PAIRS = (("update", "update_control"), ("answers", "answers_control"))
#: a probe's tables: one task and reader under one probe and corpus, then one method at one budget
PROBE_KEYS = ["probe", "corpus", *TASK_READER]
GROUP = [*PROBE_KEYS, "method", "budget"]
#: per probe: (record metric, table column) beyond strict/loose, which every probe has
EXTRA_SCORES: dict[str, tuple[tuple[str, str], ...]] = {
    "P1": (("f1", "f1_mean"),),
    "P2": (("superseded", "superseded_rate"),),
    "P3": (
        ("goal", "goal_accuracy"),
        ("value_strict", "value_strict_accuracy"),
        ("value_loose", "value_loose_accuracy"),
        ("segments_parsed", "parse_rate"),
        ("whole_strict", "whole_strict_accuracy"),
        ("whole_loose", "whole_loose_accuracy"),
    ),
}
#: a compressed answer's prompt sizes (rows.py): untransformed context and question, context share kept
TOKENS = ("n_context_tokens", "n_question_tokens", "retained_token_share")
#: the answer detail saying the reference survived compression (TPBench §6.1.3-6.1.4)
RETAINED = {"P1": "reference_retained", "P2": "answer_retained", "P3": "answer_retained"}
#: cell fields already named by the method or its budget, never repeated as a method variant
_NAMED = frozenset({"transform", "transform.selector", "transform.fraction", "transform.which"})
_FAMILY_ORDER = {"full": 0, "turns": 1, "saved": 1, "kv": 2, "deletion": 4}
#: the release's saved contexts that read turn positions only (``data/construction/*_r30.jsonl``)
SAVED_POSITIONAL = frozenset({"recency", "random_seed42", "first_n", "uniform_stride"})
SAVED_FULL = "full_context"
#: the saved method in a task label (``tpbench_p2[saved_context=recency]``): the method column names it
_SAVED_LABEL = re.compile(r"saved_context=[^,\]]*(?:, )?")
_HEADLINE = ("strict", "loose")
NAN = math.nan


# --------------------------------------------------------------------------------------- the rows


def _fmt(value: float) -> str:
    return "?" if not math.isfinite(value) else f"{round(value, 6):g}"


def _identity(
    cell: pd.Series, suffix: str, saved: tuple[str, float] | None = None
) -> tuple[str, str, str] | None:
    """(method, family, budget) of a cell; None for one that compresses nothing (press none with
    no transform: its answers are the full-context control's). ``saved``: the release's saved context
    the cell's task replays (method, its turn fraction): ``saved:<method>`` at ``turns <fraction>``;
    its ``full_context`` alone is the full-context condition itself."""
    methods, families, budgets = [], [], []
    if saved is not None:
        methods.append(f"saved:{saved[0]}")
        families.append("saved")
        budgets.append(f"turns {_fmt(saved[1])}")
    transform = str(cell["transform"])
    if transform.startswith("turns:") and transform != "turns:none":
        methods.append(transform.removeprefix("turns:"))
        families.append("turns")
        budgets.append(f"turns {_fmt(float(cell['turn_fraction']))}")
    elif transform == "delete_turns":
        methods.append(f"delete:{cell['deletion']}")
        families.append("deletion")
        budgets.append(DELETION_BUDGET)
    elif transform not in ("none", "turns:none"):
        methods.append(transform)
        families.append("transform")
    press = str(cell["compressor"]).split("[", 1)[0]  # the label may carry varying fields
    if press != "none":
        methods.append(press)
        families.append("kv")
        ratio = float(cell["ratio"])
        budgets.append(f"cache {_fmt(1.0 - ratio)}" if math.isfinite(ratio) else f"setting {cell['setting']}")
    if not methods:
        return None
    if methods == [f"saved:{SAVED_FULL}"]:
        return FULL, "full", FULL_BUDGET
    return "+".join(methods) + suffix, "+".join(families), ", ".join(budgets) or "-"


def _without_saved(label: str) -> str:
    return _SAVED_LABEL.sub("", label).replace(", ]", "]").replace("[]", "")


def _saved(tp: pd.DataFrame) -> dict[Any, tuple[str, float]]:
    """Cell id -> (saved method, turn fraction) for the cells whose task replays a saved context of
    the release (their answers' ``saved_context`` detail, on the compressed or the control answer)."""
    out: dict[Any, tuple[str, float]] = {}
    for side in ("comp_d.", "full_d."):
        if f"{side}saved_context" not in tp:
            continue
        named = tp[tp[f"{side}saved_context"].map(lambda v: isinstance(v, str) and v != "")]
        ratio = named.get(f"{side}saved_ratio", pd.Series(NAN, index=named.index)).astype(float)
        for cid, method, fraction in zip(named["cell_id"], named[f"{side}saved_context"], ratio):
            out.setdefault(cid, (str(method), float(fraction)))
    return out


def _variants(cells: Mapping[str, Mapping[str, Any]] | None, ids: list[str]) -> dict[str, str]:
    """A ``[field=value]`` suffix per cell for compressor fields that vary between TPBench cells
    (``query_aware``, ``press.window_size``, ``transform.markers``), so two variants of one method
    at one budget stay two rows instead of counting every source twice."""
    if not cells:
        return {}
    present = {cid: dict(cells[cid]) for cid in ids if cid in cells}
    keys = [k for k in varying(present) if owner(k) == "compressor" and k not in _NAMED]
    out = {}
    for cid, flat in present.items():
        parts = [f"{k.removeprefix('press.')}={flat[k]}" for k in keys if k in flat]
        out[cid] = f"[{', '.join(parts)}]" if parts else ""
    return out


def _columns(frame: pd.DataFrame, prefix: str, to: str) -> pd.DataFrame:
    picked = [c for c in frame.columns if c.startswith(prefix)]
    return frame[picked].rename(columns={c: to + c.removeprefix(prefix) for c in picked})


def tpbench_rows(rows: pd.DataFrame, cells: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One row per answer to analyse: each compressed TPBench record under its method and budget,
    plus full context once per split and source (first record with a control; a source without any
    control keeps its record's status, so it is counted, never scored). ``m.*`` are the answer's
    metrics, ``d.*`` its details, ``cluster`` its dialogue (the bootstrap's resampling unit; an answer
    without details takes its source's, from another answer, else the source id)."""
    if rows.empty or "task" not in rows:
        return pd.DataFrame()
    probe = rows["task"].astype(str).str.extract(r"^(tpbench_p[123])(?:\[|$)", expand=False).map(PROBES)
    tp = rows[probe.notna()].assign(probe=probe[probe.notna()])
    if tp.empty:
        return pd.DataFrame()
    # saved contexts are methods of one task: ranked and compared together, not split by task label
    tp = tp.assign(task=tp["task"].astype(str).map(_without_saved))
    base = ["probe", "corpus", "task", "reader", "seed", "source_id", "split", "status"]
    firsts = tp.drop_duplicates("cell_id").set_index("cell_id")
    suffix = _variants(cells, list(firsts.index))
    saved = _saved(tp)
    identity = {
        cid: _identity(cell, suffix.get(str(cid), ""), saved.get(cid)) for cid, cell in firsts.iterrows()
    }
    labels = tp["cell_id"].map(lambda cid: identity[cid] or (None, None, None))
    comp = tp[labels.map(lambda t: t[0] is not None)]
    labels = labels[comp.index]
    compressed = pd.concat(
        [
            comp[base].assign(
                method=labels.map(lambda t: t[0]),
                family=labels.map(lambda t: t[1]),
                budget=labels.map(lambda t: t[2]),
            ),
            _columns(comp, "comp_m.", "m."),
            _columns(comp, "comp_d.", "d."),
            _columns(comp, "unpaired_m.", "u."),  # an answer the release scored, kvx could not pair
            comp.reindex(columns=list(TOKENS)),  # Appendix B's token scaling (tpbench_gaps)
        ],
        axis=1,
    )
    has_full = tp["full_m.strict"].notna() if "full_m.strict" in tp else pd.Series(False, index=tp.index)
    # a saved-context cell's FullCache control reads the saved text itself: never full context (that
    # is its saved:full_context cell, above), so its records build no full-context row
    tp = tp[~tp["cell_id"].isin(list(saved))]
    has_full = has_full[tp.index]
    group = tp["split"].fillna("").astype(str)  # the control group; records without one: task x reader x seed
    tp = tp.assign(
        _control=group.where(group != "", tp["task"] + "|" + tp["reader"] + "|" + tp["seed"].astype(str))
    )
    ordered = text.drop_duplicates(pd.concat([tp[has_full], tp[~has_full]]), ["_control", "source_id"])
    got = has_full[ordered.index]
    status = ordered["status"].where(~got, SUPPORTED)  # with a control: scored
    status = status.mask(~got & (status == SUPPORTED), ERROR)  # a scored record without one
    full = pd.concat(
        [
            ordered[base].assign(status=status, method=FULL, family="full", budget=FULL_BUDGET),
            _columns(ordered, "full_m.", "m."),
            _columns(ordered, "full_d.", "d."),
        ],
        axis=1,
    )
    full.loc[~got, [c for c in full.columns if c.startswith(("m.", "d."))]] = NAN
    out = pd.concat([full, compressed], ignore_index=True)
    for metric in _HEADLINE:  # present even when no answer was scored
        out[f"m.{metric}"] = out.get(f"m.{metric}", NAN)
    out = text.drop_duplicates(out, [*GROUP, "seed", "source_id"]).reset_index(drop=True)
    out["corpus"] = out["corpus"].fillna("").astype(str)
    dialogue = out["d.dialogue_id"] if "d.dialogue_id" in out else pd.Series(np.nan, index=out.index)
    dialogue = dialogue.where(dialogue.map(lambda v: isinstance(v, str) and v != ""))
    # an answer without details (an error, unsupported) is still its source's dialogue: the paper's rule
    # resamples it with that dialogue (Table 8's interval)
    dialogue = dialogue.groupby([out["corpus"], out["source_id"]]).transform("first")
    out["cluster"] = dialogue.fillna(out["source_id"])
    return out


# --------------------------------------------------------------------------------------- statistics


def column_mean(frame: pd.DataFrame, column: str) -> float:
    """The mean of a column's non-missing values; NaN without any (or without the column)."""
    if column not in frame:
        return NAN
    values = frame[column].astype(float).dropna()
    return float(values.mean()) if len(values) else NAN


def _summary(group: pd.DataFrame, probe: str, n_boot: int, seed: int) -> dict[str, Any]:
    """One accuracy row: counts, headline scores with seed spread and dialogue-clustered interval,
    the probe's other scores and its failure rates; unsupported and errored answers only counted."""
    scored = group[group["status"] == SUPPORTED]
    out: dict[str, Any] = {
        "n": len(scored),
        "n_seeds": int(scored["seed"].nunique()),
        "n_dialogues": int(scored["cluster"].nunique()),
        "n_unsupported": int((group["status"] == UNSUPPORTED).sum()),
        "n_error": int((group["status"] == ERROR).sum()),
    }
    for metric in _HEADLINE:
        column = f"m.{metric}"
        values = scored[column].astype(float) if column in scored else pd.Series(NAN, index=scored.index)
        per_seed = values.groupby(scored["seed"]).mean().dropna()
        low, high = cluster_interval(values, scored["cluster"], n_boot, seed) if len(scored) else (NAN, NAN)
        out |= {
            f"{metric}_accuracy": column_mean(scored, column),
            f"{metric}_accuracy_seed_mean": float(per_seed.mean()) if len(per_seed) else NAN,
            f"{metric}_accuracy_seed_sd": float(per_seed.std(ddof=1)) if len(per_seed) > 1 else NAN,
            f"{metric}_accuracy_ci_low": low,
            f"{metric}_accuracy_ci_high": high,
        }
    out |= _paper_rule(group)
    for metric, column in EXTRA_SCORES[probe]:
        out[column] = column_mean(scored, f"m.{metric}")
    out["abstain_rate"] = column_mean(scored, "m.abstain")
    out["parse_failure_rate"] = 1.0 - column_mean(scored, "m.parsed")
    for metric in _HEADLINE:  # the same rules on the raw text: a reader that ignores the JSON format
        out[f"lenient_{metric}_accuracy"] = column_mean(scored, f"m.lenient_{metric}")
    if probe != "P1":
        out["update_kept_rate"] = column_mean(scored, "d.update_kept")
    return out


#: the paper's denominator rule beside kvx's (``denominators``): errors wrong and in n
PAPER_COLUMNS = ["paper_n"] + [
    f"paper_{metric}_accuracy{s}" for metric in _HEADLINE for s in ("", "_seed_mean", "_seed_sd")
]


def _paper_rule(group: pd.DataFrame) -> dict[str, Any]:
    """Strict and loose accuracy under the paper's rule (a reader error is wrong and in n), pooled and
    as seed mean and sample sd; N/A when an answer of the group was not run (unsupported)."""
    scored = paper_scored(not_run(group))
    out: dict[str, Any] = {"paper_n": len(scored)}
    for metric in _HEADLINE:
        values = scored[f"m.{metric}"].astype(float) if f"m.{metric}" in scored else pd.Series(dtype=float)
        per_seed = values.groupby(scored["seed"]).mean().dropna()
        out |= {
            f"paper_{metric}_accuracy": column_mean(scored, f"m.{metric}"),
            f"paper_{metric}_accuracy_seed_mean": float(per_seed.mean()) if len(per_seed) else NAN,
            f"paper_{metric}_accuracy_seed_sd": float(per_seed.std(ddof=1)) if len(per_seed) > 1 else NAN,
        }
    return {k: v for k, v in under_rule(out, group).items() if k in PAPER_COLUMNS}


def in_family_order(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Full context first, then turn selectors, cache methods and deletions, each by budget and name."""
    order = frame["family"].map(lambda f: _FAMILY_ORDER.get(f, 3))
    return (
        frame.assign(_order=order)
        .sort_values([*keys, "_order", "budget", "method"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


# --------------------------------------------------------------------------------------- the tables


def accuracy(tp: pd.DataFrame, probe: str, n_boot: int, seed: int) -> pd.DataFrame:
    """Per corpus x method x budget of one probe (TPBench Tables 3, 10, 23-25): n, strict and loose
    accuracy (pooled, seed mean and sample sd over probe seeds, dialogue-clustered 95% interval),
    the probe's other scores, abstention, parse failure (1 - parsed), superseded value (P2) and
    update-turn recall (share of answers whose context kept the update turn; P2/P3)."""
    columns = [*GROUP, "family", "n", "n_seeds", "n_dialogues", "n_unsupported", "n_error", *PAPER_COLUMNS]
    for metric in _HEADLINE:
        columns += [f"{metric}_accuracy{s}" for s in ("", "_seed_mean", "_seed_sd", "_ci_low", "_ci_high")]
    columns += [column for _, column in EXTRA_SCORES[probe]]
    columns += ["abstain_rate", "parse_failure_rate", "lenient_strict_accuracy", "lenient_loose_accuracy"]
    columns += [] if probe == "P1" else ["update_kept_rate"]
    part = tp[tp["probe"] == probe] if not tp.empty else tp
    if part.empty:
        return pd.DataFrame(columns=columns)
    out = [
        dict(zip(GROUP, key)) | {"family": group["family"].iat[0]} | _summary(group, probe, n_boot, seed)
        for key, group in part.groupby(GROUP, sort=True)
    ]
    return in_family_order(pd.DataFrame(out, columns=columns), PROBE_KEYS)


RANK_COLUMNS = [
    "probe", "corpus", "task", "reader", "budget", "method", "family", "n", "n_error", "n_unsupported",
    "n_seeds", "strict_accuracy_seed_mean", "strict_rank", "loose_accuracy_seed_mean", "loose_rank",
    "n_methods", "n_unranked",
]  # fmt: skip


def compression_methods(frame: pd.DataFrame) -> pd.DataFrame:
    """Compression methods only: full context is the reference and deletions are interventions."""
    return frame[~frame["family"].isin(["full", "deletion"])]


def paper_means(table: pd.DataFrame) -> pd.DataFrame:
    """A per-probe table (``accuracy``) with n and the seed-mean accuracies under the paper's rule
    (its ``paper_*`` columns) in place of kvx's, for the paper's tables that compare methods by them
    (Figure 2's ranks, §6.1.2's crossover): an error counts wrong, a method not run is N/A."""
    means = {f"paper_{m}_accuracy_seed_mean": f"{m}_accuracy_seed_mean" for m in _HEADLINE}
    return table.drop(columns=["n", *means.values()]).rename(columns={"paper_n": "n", **means})


def rankings(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Methods ranked within each probe x corpus x reader x budget by their seed-mean strict and
    loose accuracy (1 = best, ties share the average rank, as in TPBench Figure 2), under the paper's
    rule: a reader error is wrong and in n; a method with an unsupported answer has no accuracy and
    no rank (counted in ``n_unranked``), never a rank from fewer answers."""
    parts = []
    for table in tables:
        frame = compression_methods(paper_means(table))
        for _, group in frame.groupby([*PROBE_KEYS, "budget"], sort=True):
            group = group.assign(
                strict_rank=group["strict_accuracy_seed_mean"].rank(ascending=False, method="average"),
                loose_rank=group["loose_accuracy_seed_mean"].rank(ascending=False, method="average"),
                n_methods=int(group["strict_accuracy_seed_mean"].notna().sum()),
                n_unranked=int(group["strict_accuracy_seed_mean"].isna().sum()),
            )
            parts.append(group.sort_values(["strict_rank", "method"], kind="stable")[RANK_COLUMNS])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=RANK_COLUMNS)


CHANGE_COLUMNS = [
    "corpus", "reader", "budget", "p1_task", "p2_task", "method", "family", "kind",
    "p1_n_error", "p1_n_unsupported", "p2_n_error", "p2_n_unsupported",
    "p1_strict_accuracy", "p1_loose_accuracy", "p2_strict_accuracy",
    "p1_strict_rank", "p1_loose_rank", "p2_strict_rank",
]  # fmt: skip
SPEARMAN_COLUMNS = [
    "corpus", "reader", "budget", "p1_task", "p2_task", "n_methods", "methods",
    "rho_p1_strict_p2_strict", "rho_p1_loose_p2_strict", "n_unranked", "unranked",
]  # fmt: skip
#: Figure 2's three accuracies: (rank-change column, per-probe table column, which probe)
_FIGURE_2 = (
    ("p1_strict", "strict_accuracy_seed_mean", "p1"),
    ("p1_loose", "loose_accuracy_seed_mean", "p1"),
    ("p2_strict", "strict_accuracy_seed_mean", "p2"),
)


def _kind(method: str, family: str) -> str:
    """What a method reads, for Figure 2's line styles: turn positions, turn content, or the cache."""
    if family == "turns":
        return "position" if method.split("[", 1)[0] in POSITIONAL else "content"
    if family == "saved":
        return "position" if method.removeprefix("saved:").split("[", 1)[0] in SAVED_POSITIONAL else "content"
    return {"kv": "cache"}.get(family, family)


def _rho(a: pd.Series, b: pd.Series) -> float:
    """Spearman rho (average ranks for ties); NaN below three methods or for a constant column."""
    if len(a) < 3 or a.nunique() < 2 or b.nunique() < 2:
        return NAN
    return spearman(a, b)[0]


def _both_probes(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The methods of a P1 and a P2 table (``paper_means``), one row each with Figure 2's accuracies
    and each probe's error and unsupported counts."""
    counts = ["n_error", "n_unsupported"]
    one = a.set_index("method")[["family", *counts]].add_prefix("p1_").rename(columns={"p1_family": "family"})
    two = b.set_index("method")[counts].add_prefix("p2_")
    both = one.join(two, how="inner")
    for column, source, probe in _FIGURE_2:
        both[f"{column}_accuracy"] = (a if probe == "p1" else b).set_index("method")[source]
    return both.reset_index()


def rank_change(p1: pd.DataFrame, p2: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TPBench Figure 2 and §6.1's rho: methods present in both P1 and P2 at the *same* budget,
    corpus and reader, re-ranked among themselves under P1-strict, P1-loose and P2-strict (seed
    means), and the Spearman rho between P1-strict (and P1-loose) and P2-strict across them. The
    paper's rule: a reader error is wrong and in n; a method without all three accuracies (an
    unsupported answer: not run) keeps its row and counts, unranked, and is named beside rho, which
    is over the ranked methods."""
    changes, rhos = [], []
    keys = ["corpus", "reader", "budget"]
    a_all, b_all = compression_methods(paper_means(p1)), compression_methods(paper_means(p2))
    for key, a_group in a_all.groupby(keys, sort=True):
        b_group = b_all[(b_all[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
        for (p1_task, p2_task), (a, b) in (
            ((ta, tb), (a, b)) for ta, a in a_group.groupby("task") for tb, b in b_group.groupby("task")
        ):
            both = _both_probes(a, b)
            if both.empty:
                continue
            accuracies = [f"{column}_accuracy" for column, _, _ in _FIGURE_2]
            ranked = both[accuracies].notna().all(axis=1)
            ident = dict(zip(keys, key)) | {"p1_task": p1_task, "p2_task": p2_task}
            both = both.assign(**ident, kind=[_kind(m, f) for m, f in zip(both["method"], both["family"])])
            for column in accuracies:
                rank = both[column].where(ranked).rank(ascending=False, method="average")
                both[column.replace("_accuracy", "_rank")] = rank
            changes.append(both.sort_values(["p1_strict_rank", "method"], kind="stable")[CHANGE_COLUMNS])
            on = both[ranked]
            rhos.append(
                ident
                | {
                    "n_methods": len(on),
                    "methods": "; ".join(sorted(on["method"])),
                    "rho_p1_strict_p2_strict": _rho(on["p1_strict_accuracy"], on["p2_strict_accuracy"]),
                    "rho_p1_loose_p2_strict": _rho(on["p1_loose_accuracy"], on["p2_strict_accuracy"]),
                    "n_unranked": int((~ranked).sum()),
                    "unranked": "; ".join(sorted(both.loc[~ranked, "method"])),
                }
            )
    change = pd.concat(changes, ignore_index=True) if changes else pd.DataFrame(columns=CHANGE_COLUMNS)
    return change, pd.DataFrame(rhos, columns=SPEARMAN_COLUMNS)


RETENTION_COLUMNS = [
    *GROUP, "family", "n", "n_error", "n_unsupported", "n_retained", "n_not_retained", "retention_rate",
    "strict_accuracy", "strict_accuracy_retained", "strict_accuracy_not_retained",
    "loose_accuracy", "loose_accuracy_retained", "loose_accuracy_not_retained",
]  # fmt: skip


def retention(tp: pd.DataFrame) -> pd.DataFrame:
    """TPBench Tables 5-6: how often the reference survives in the compressed context (P1: the
    reference sentence; P2/P3: the complete current value at phrase boundaries) and how well the
    reader answers when it did and when it did not, pooled over seeds. The conditional accuracies
    are no ranking: each method is scored on the subset it kept. The paper's rule: a reader error is
    wrong and in n, a group with an unsupported answer has no scores (N/A), both counted."""
    if tp.empty:
        return pd.DataFrame(columns=RETENTION_COLUMNS)
    rows = []
    for key, group in paper_scored(tp).groupby(GROUP, sort=True):
        scored = not_run(group)
        flag = scored.get(f"d.{RETAINED[key[0]]}", pd.Series(NAN, index=scored.index)).astype(float)
        kept, lost = scored[flag == 1.0], scored[flag == 0.0]
        row = dict(zip(GROUP, key)) | {"family": group["family"].iat[0], "n": len(scored)}
        row |= {
            "n_retained": len(kept),
            "n_not_retained": len(lost),
            "retention_rate": len(kept) / (len(kept) + len(lost)) if len(kept) + len(lost) else NAN,
        }
        for metric in _HEADLINE:
            column = f"m.{metric}"
            row[f"{metric}_accuracy"] = column_mean(scored, column)
            row[f"{metric}_accuracy_retained"] = column_mean(kept, column)
            row[f"{metric}_accuracy_not_retained"] = column_mean(lost, column)
        rows.append(under_rule(row, group))
    return in_family_order(pd.DataFrame(rows, columns=RETENTION_COLUMNS), PROBE_KEYS)


DELETION_COLUMNS = [
    "probe", "corpus", "task", "reader", "seed", "deletion", "control",
    "n_sources", "n_deleted", "n_paired", "matched", "n_control_unmatched", "n_deleted_unsupported",
    "n_deleted_error", "n_control_unsupported", "n_control_error",
    "full_strict_accuracy", "deleted_strict_accuracy", "control_strict_accuracy",
    "full_loose_accuracy", "deleted_loose_accuracy", "control_loose_accuracy",
    "full_superseded_rate", "deleted_superseded_rate", "control_superseded_rate",
    "full_abstain_rate", "deleted_abstain_rate", "control_abstain_rate",
    "b", "c", "mcnemar_p",
    "n_full_correct", "deleted_cw", "control_cw", "b_fc", "c_fc", "fc_mcnemar_p",
]  # fmt: skip


def _paired(deleted: pd.DataFrame, control: pd.DataFrame, full: pd.DataFrame, pair: tuple[str, str]) -> dict:
    """One matched comparison on the sources where both deletions were supported.

    McNemar compares the evidence deletion with its control answer by answer (strict): b = control
    right and deletion wrong, c = the reverse, exact two-sided p. The ``_fc`` columns repeat it
    among answers full context got right (TPBench §6.3: 23/86 C→W vs 0/86 gives p = 2.38e-7).
    """
    key = ["seed", "source_id"]
    d, c = _scored(deleted).set_index(key), _scored(control).set_index(key)
    sources = set(map(tuple, deleted[key].to_numpy())) | set(map(tuple, control[key].to_numpy()))
    paired = d.index.intersection(c.index, sort=False)
    d, c = d.loc[paired], c.loc[paired]
    f = full.drop_duplicates(key).set_index(key).reindex(paired)
    row: dict[str, Any] = {
        "deletion": pair[0],
        "control": pair[1],
        "n_sources": len(sources),
        "n_deleted": int(len(_scored(deleted))),
        "n_paired": len(paired),
        "matched": f"{len(paired)} of {len(_scored(deleted))}",
        "n_control_unmatched": int(len(_scored(deleted)) - len(paired)),
        "n_deleted_unsupported": int((deleted["status"] == UNSUPPORTED).sum()),
        "n_deleted_error": int((deleted["status"] == ERROR).sum()),
        "n_control_unsupported": int((control["status"] == UNSUPPORTED).sum()),
        "n_control_error": int((control["status"] == ERROR).sum()),
    }
    for side, frame in (("full", f), ("deleted", d), ("control", c)):
        row[f"{side}_strict_accuracy"] = column_mean(frame, "m.strict")
        row[f"{side}_loose_accuracy"] = column_mean(frame, "m.loose")
        row[f"{side}_superseded_rate"] = column_mean(frame, "m.superseded")
        row[f"{side}_abstain_rate"] = column_mean(frame, "m.abstain")
    right_c, right_d = (c["m.strict"] == 1.0).to_numpy(), (d["m.strict"] == 1.0).to_numpy()
    fc = (f["m.strict"] == 1.0).to_numpy()
    row["n_full_correct"] = int(fc.sum())
    row["deleted_cw"], row["control_cw"] = int((fc & ~right_d).sum()), int((fc & ~right_c).sum())
    for suffix, rows in (("", np.ones(len(paired), dtype=bool)), ("_fc", fc)):
        b, c_, p = pair_mcnemar(right_c[rows], right_d[rows])
        row[f"b{suffix}"], row[f"c{suffix}"] = b, c_
        row["fc_mcnemar_p" if suffix else "mcnemar_p"] = p if rows.any() else NAN  # no pair: undefined
    return row


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    """Answers that count under the paper's rule (``paper_scored`` first): supported and errored ones
    (an error wrong), never an unsupported one (a source without a matched control, left out as the
    paper leaves its unmatched items out)."""
    return frame[(frame["status"] != UNSUPPORTED) & frame["m.strict"].notna()]


def deletion(tp: pd.DataFrame) -> pd.DataFrame:
    """TPBench Tables 11-13: each evidence deletion (the update turn; the update turn and every
    answer-bearing turn) against its matched control on the same sources, per seed and, with more
    than one seed, pooled ("all": a source drawn by two seeds then counts twice). ``matched`` is
    "k of n": n sources the deletion was scored on, k of them with a scored control. The paper's rule:
    a reader error is a wrong answer (§6.3: "Reader errors and malformed outputs count as wrong"), an
    unsupported one (no matched control) is left out, both counted."""
    rows = []
    if tp.empty:
        return pd.DataFrame(columns=DELETION_COLUMNS)
    tp = paper_scored(tp)
    deletions = tp[tp["family"] == "deletion"]
    keys = PROBE_KEYS
    for key, group in deletions.groupby(keys, sort=True):
        full = tp[(tp[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1) & (tp["method"] == FULL)]
        seeds = sorted(group["seed"].unique())
        for seed in [*seeds, *(["all"] if len(seeds) > 1 else [])]:
            here = group if seed == "all" else group[group["seed"] == seed]
            full_here = full if seed == "all" else full[full["seed"] == seed]
            for pair in PAIRS:
                deleted, control = (here[here["method"] == f"delete:{which}"] for which in pair)
                if deleted.empty and control.empty:
                    continue
                ident = dict(zip(keys, key)) | {"seed": str(seed)}
                rows.append(ident | _paired(deleted, control, full_here, pair))
    return pd.DataFrame(rows, columns=DELETION_COLUMNS)


def tpbench_tables(tp: pd.DataFrame, n_boot: int, seed: int) -> dict[str, pd.DataFrame]:
    """Every TPBench table from the TPBench answers (``tpbench_rows``); empty (no tables at all)
    without them."""
    if tp.empty:
        return {}
    per_probe = {probe: accuracy(tp, probe, n_boot, seed) for probe in ("P1", "P2", "P3")}
    change, rho = rank_change(per_probe["P1"], per_probe["P2"])
    return {
        "tpbench_p1": per_probe["P1"],
        "tpbench_p2": per_probe["P2"],
        "tpbench_p3": per_probe["P3"],
        "tpbench_rankings": rankings(list(per_probe.values())),
        "tpbench_spearman": rho,
        "tpbench_rank_change": change,
        "tpbench_retention": retention(tp),
        "tpbench_deletion": deletion(tp),
    }
