"""The rest of TPBench's tables from records: P2 by slot type (Table 7), P3 without alias-equivalent
pairs (Table 9), where the update evidence lies against what each method kept (§6.3), P3 scored only
among parsed answers (Table 10's "Seg.|parsed"), each KV method beside the best turn selector at its
seed (Table 15) and P1 with token F1 as seed mean ± sd (Table 23).

Every table reads the analysis rows of :func:`~kvx.aggregate.tpbench.probes.tpbench_rows` (methods,
budgets and full context exactly as the main TPBench tables) under the paper's denominator rule
(:mod:`~kvx.aggregate.tpbench.denominators`): a reader error is a wrong answer in n, and a group with
an unsupported answer has no score (N/A), its ``n_error`` and ``n_unsupported`` beside. Where the
paper averages over seeds, a ``_seed_mean`` is the unweighted mean of the per-seed values of the
seeds that have any, as the release does (``scripts/audit/retention_vs_reading.py``,
``scripts/audit/p3_alias_exclusion_sensitivity.py``). The answer details read beyond the main
tables' (``slot``, ``old_value``, ``current_value``, ``update_states_value``, ``evidence_turns``,
``system_states_value``) are written by kvx's TPBench task; an answer without one is counted as
unknown, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from kvx.aggregate.tpbench.denominators import not_run, paper_scored, under_rule
from kvx.aggregate.tpbench.probes import GROUP, PROBE_KEYS, column_mean, in_family_order
from kvx.tasks.tpbench.text import alias_equivalent

__all__ = [
    "alias_excluded",
    "evidence",
    "kv_vs_selectors",
    "p1_seeds",
    "p3_parsed",
    "slot_type",
    "slot_types",
]

NAN = math.nan
SLOT_TYPES = ("time", "date", "place/name", "other", "unknown")
#: release ``scripts/audit/retention_vs_reading.py`` ``slot_group``: keywords of a place or a name
_PLACE = (
    "city", "location", "origin", "destination", "area", "place",
    "name", "theater", "hotel", "restaurant", "departure", "dest",
)  # fmt: skip


# --------------------------------------------------------------------------------------- helpers


def _paper(tp: pd.DataFrame, probe: str) -> pd.DataFrame:
    """A probe's answers scored under the paper's rule (errors wrong; unsupported kept, to be counted)."""
    return paper_scored(tp[tp["probe"] == probe])


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all NaN when no record carries it."""
    return frame[name].astype(float) if name in frame else pd.Series(NAN, index=frame.index)


def _text(frame: pd.DataFrame, name: str) -> pd.Series:
    """A text detail, all None when no record carries it."""
    return frame[name] if name in frame else pd.Series(None, index=frame.index, dtype=object)


def _per_seed(frame: pd.DataFrame, name: str) -> pd.Series:
    """The mean of a column at each seed; seeds without a finite value are left out."""
    return _column(frame, name).groupby(frame["seed"]).mean().dropna()


def _spread(per_seed: pd.Series) -> tuple[float, float]:
    """Mean and sample sd of per-seed values (sd undefined below two seeds)."""
    mean = float(per_seed.mean()) if len(per_seed) else NAN
    return mean, float(per_seed.std(ddof=1)) if len(per_seed) > 1 else NAN


def _seed_mean(frame: pd.DataFrame, name: str) -> float:
    return _spread(_per_seed(frame, name))[0]


def _by_seed(counts: pd.Series) -> str:
    """Per-seed counts as ``42:152 43:147``, the paper's "152/147/147" with its seeds named."""
    return " ".join(f"{seed}:{int(n)}" for seed, n in counts.items())


def _rows(part: pd.DataFrame, keys: list[str], build: Callable[[pd.DataFrame], dict[str, Any]]) -> list[dict]:
    """One row per group, built from the answers the rule scores, with its error and unsupported counts
    (its scores N/A when it has an unsupported answer)."""
    return [
        under_rule(dict(zip(keys, key)) | {"family": group["family"].iat[0]} | build(not_run(group)), group)
        for key, group in part.groupby(keys, sort=True)
    ]


# ------------------------------------------------------------------------------- Table 7: slot type


def slot_type(slot: object) -> str:
    """TPBench Table 7's group of a revised slot, by keywords of its name (release
    ``scripts/audit/retention_vs_reading.py``): "time" in it, else "date" or "day", else a place or
    name keyword, else other. SGD's service prefix (``Hotels_2.``) is dropped first: the release
    names SGD slots without it, and "Hotels_2.number_of_adults" is no place. MultiWOZ keeps its
    domain (``restaurant-food``), as the release does. "unknown" for an answer without a slot."""
    if not isinstance(slot, str) or not slot:
        return "unknown"
    name = slot.rsplit(".", 1)[-1].lower()
    if "time" in name:
        return "time"
    if "date" in name or "day" in name:
        return "date"
    return "place/name" if any(key in name for key in _PLACE) else "other"


SLOT_COLUMNS = [
    *GROUP, "family", "slot_type", "n", "n_error", "n_unsupported", "n_seeds",
    "strict_accuracy_seed_mean", "retention_rate_seed_mean",
    "strict_accuracy_retained_seed_mean", "loose_accuracy_seed_mean",
]  # fmt: skip


def slot_types(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench Table 7: P2-strict and answer retention per slot type (seed means; the groups
    partition every answer), with accuracy on the answers whose value survived. None without P2."""
    part = _paper(tp, "P2")
    if part.empty:
        return None
    part = part.assign(
        slot_type=_text(part, "d.slot").map(slot_type), _kept=_column(part, "d.answer_retained")
    )

    def build(group: pd.DataFrame) -> dict[str, Any]:
        kept = group[group["_kept"] == 1.0]
        return {
            "n": len(group),
            "n_seeds": int(group["seed"].nunique()),
            "strict_accuracy_seed_mean": _seed_mean(group, "m.strict"),
            "retention_rate_seed_mean": _seed_mean(group, "_kept"),
            "strict_accuracy_retained_seed_mean": _seed_mean(kept, "m.strict"),
            "loose_accuracy_seed_mean": _seed_mean(group, "m.loose"),
        }

    frame = pd.DataFrame(_rows(part, [*GROUP, "slot_type"], build), columns=SLOT_COLUMNS)
    frame["_type"] = frame["slot_type"].map(SLOT_TYPES.index)
    return in_family_order(frame, [*PROBE_KEYS, "_type"]).drop(columns="_type")


# ---------------------------------------------------------------------------- Table 9: P3 alias


def _alias(old: object, new: object, corpus: str) -> float:
    """1 for an alias-equivalent old/new pair (P2's construction rule), 0 if not, NaN when unknown."""
    if not isinstance(old, str) or not isinstance(new, str):
        return NAN
    return float(alias_equivalent(old, new, corpus))


ALIAS_COLUMNS = [
    *GROUP, "family", "n", "n_error", "n_unsupported", "n_excluded", "n_unknown", "n_kept", "n_by_seed",
    "excluded_by_seed",
    "strict_accuracy_seed_mean", "strict_accuracy_seed_sd",
    "loose_accuracy_seed_mean", "loose_accuracy_seed_sd",
    "original_strict_accuracy_seed_mean", "original_loose_accuracy_seed_mean", "best_strict", "best_loose",
]  # fmt: skip


def alias_excluded(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench Table 9: P3 on the same answers less those whose old and new value P2's alias rule
    calls one value (no new answers, reduced per-seed denominators), beside the original scores.
    An answer whose old or new value is unknown is neither kept nor excluded (``n_unknown``).
    ``best_*`` marks the turn selector(s) with the highest mean at each budget, per threshold.
    None without P3."""
    part = _paper(tp, "P3")
    if part.empty:
        return None
    old, new = _text(part, "d.old_value"), _text(part, "d.current_value")
    flags = [_alias(o, v, c) for o, v, c in zip(old, new, part["corpus"])]
    part = part.assign(_alias=flags)

    def build(group: pd.DataFrame) -> dict[str, Any]:
        kept = group[group["_alias"] == 0.0]
        excluded = (group["_alias"] == 1.0).groupby(group["seed"]).sum()
        row: dict[str, Any] = {
            "n": len(group),
            "n_excluded": int(excluded.sum()),
            "n_unknown": int(group["_alias"].isna().sum()),
            "n_kept": len(kept),
            "n_by_seed": _by_seed(kept.groupby("seed").size().reindex(excluded.index, fill_value=0)),
            "excluded_by_seed": _by_seed(excluded),
        }
        for metric in ("strict", "loose"):
            mean, sd = _spread(_per_seed(kept, f"m.{metric}"))
            row |= {f"{metric}_accuracy_seed_mean": mean, f"{metric}_accuracy_seed_sd": sd}
            row[f"original_{metric}_accuracy_seed_mean"] = _seed_mean(group, f"m.{metric}")
        return row

    frame = pd.DataFrame(_rows(part, GROUP, build), columns=ALIAS_COLUMNS)
    turns = frame["family"] == "turns"
    for metric in ("strict", "loose"):
        score = f"{metric}_accuracy_seed_mean"
        best = frame[turns].groupby([*PROBE_KEYS, "budget"])[score].transform("max").reindex(frame.index)
        frame[f"best_{metric}"] = turns & (frame[score] == best)
    return in_family_order(frame, PROBE_KEYS)


# ------------------------------------------------------------------------ §6.3: evidence location


EVIDENCE_COLUMNS = [
    *GROUP, "family", "seed", "n", "n_error", "n_unsupported", "n_evidence_unknown", "n_update_lacks_value",
    "n_several_evidence_turns",
    "n_system_states_value", "n_update_kept", "n_value_without_update", "n_no_evidence_kept",
    "n_kept_unknown",
    "strict_accuracy_update_kept", "strict_accuracy_value_without_update", "strict_accuracy_no_evidence_kept",
]  # fmt: skip


def evidence(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench §6.3 per probe set (seed): how often the update turn does not state the complete
    reference, the update and answer-bearing turns are more than one turn, and a system turn states
    the value (the paper's 68/128, 106/128, 102/128 on SGD P2) — and, per method, whether its
    context kept the update turn, dropped it but kept an answer-bearing turn, or kept neither, with
    strict accuracy in each. None without P2 or P3 answers."""
    parts = [_paper(tp, probe) for probe in ("P2", "P3")]
    part = pd.concat([p for p in parts if not p.empty]) if any(not p.empty for p in parts) else None
    if part is None:
        return None
    states = _column(part, "d.update_states_value")
    turns, system = _column(part, "d.evidence_turns"), _column(part, "d.system_states_value")
    update, answers = _column(part, "d.update_kept"), _column(part, "d.answer_turns_kept")
    dropped = update == 0.0
    where = np.select(
        [update == 1.0, dropped & (answers > 0), dropped & (answers == 0)],
        ["update", "value", "none"],
        "unknown",
    )
    part = part.assign(
        _unknown=states.isna() | turns.isna() | system.isna(),
        _lacks=states == 0.0,
        _several=turns > 1,
        _system=system == 1.0,
        _where=where,
    )

    def build(group: pd.DataFrame) -> dict[str, Any]:
        at = {name: group[group["_where"] == name] for name in ("update", "value", "none", "unknown")}
        located = not group["_unknown"].all()  # no answer with the details: N/A, never 0 of 0
        kept = len(at["unknown"]) < len(group)
        return {
            "n": len(group),
            "n_evidence_unknown": int(group["_unknown"].sum()),
            "n_update_lacks_value": int(group["_lacks"].sum()) if located else NAN,
            "n_several_evidence_turns": int(group["_several"].sum()) if located else NAN,
            "n_system_states_value": int(group["_system"].sum()) if located else NAN,
            "n_update_kept": len(at["update"]) if kept else NAN,
            "n_value_without_update": len(at["value"]) if kept else NAN,
            "n_no_evidence_kept": len(at["none"]) if kept else NAN,
            "n_kept_unknown": len(at["unknown"]),
            "strict_accuracy_update_kept": column_mean(at["update"], "m.strict"),
            "strict_accuracy_value_without_update": column_mean(at["value"], "m.strict"),
            "strict_accuracy_no_evidence_kept": column_mean(at["none"], "m.strict"),
        }

    frame = pd.DataFrame(_rows(part, [*GROUP, "seed"], build), columns=EVIDENCE_COLUMNS)
    return in_family_order(frame, [*PROBE_KEYS, "seed"])


# ----------------------------------------------------------------- Table 10: P3 among parsed answers


PARSED_COLUMNS = [
    *GROUP, "family", "n", "n_error", "n_unsupported", "n_seeds", "n_parsed",
    "strict_accuracy_seed_mean", "whole_strict_accuracy_seed_mean",
    "parse_rate_seed_mean", "strict_accuracy_parsed_seed_mean", "loose_accuracy_seed_mean",
    "whole_loose_accuracy_seed_mean", "loose_accuracy_parsed_seed_mean",
]  # fmt: skip


def p3_parsed(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench Table 10: P3 under the segment-local and the whole-field scorer, the share of answers
    the segment parser reads, and segment-local accuracy among those only ("Seg.|parsed"; release
    ``scripts/reader_evaluation/audit_p3_segments.py``: per seed, then averaged). None without P3."""
    part = _paper(tp, "P3")
    if part.empty:
        return None

    def build(group: pd.DataFrame) -> dict[str, Any]:
        parsed = group[_column(group, "m.segments_parsed") == 1.0]
        return {
            "n": len(group),
            "n_seeds": int(group["seed"].nunique()),
            "n_parsed": len(parsed),
            "strict_accuracy_seed_mean": _seed_mean(group, "m.strict"),
            "whole_strict_accuracy_seed_mean": _seed_mean(group, "m.whole_strict"),
            "parse_rate_seed_mean": _seed_mean(group, "m.segments_parsed"),
            "strict_accuracy_parsed_seed_mean": _seed_mean(parsed, "m.strict"),
            "loose_accuracy_seed_mean": _seed_mean(group, "m.loose"),
            "whole_loose_accuracy_seed_mean": _seed_mean(group, "m.whole_loose"),
            "loose_accuracy_parsed_seed_mean": _seed_mean(parsed, "m.loose"),
        }

    return in_family_order(pd.DataFrame(_rows(part, GROUP, build), columns=PARSED_COLUMNS), PROBE_KEYS)


# ----------------------------------------------------------- Table 15: KV beside the best selector


KV_COLUMNS = [
    "probe", "corpus", "task", "reader", "seed", "method", "budget", "n", "n_unsupported", "n_error",
    "strict_accuracy", "selector_budget", "n_selectors", "best_selector", "best_selector_strict_accuracy",
]  # fmt: skip


def kv_vs_selectors(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench Table 15: each KV method's strict accuracy per seed, beside the best turn selector on
    the same probe set (same seed) keeping the same fraction (``cache r`` beside ``turns r``, the
    paper's r = 0.30 for both); tied selectors are joined with "/" (the paper's "MMR/random"). Under the
    paper's rule: a reader error is wrong and in n (its count beside), a method with an unsupported
    answer was not run (N/A, and no candidate for the best selector). No selector at that fraction:
    none named, its accuracy N/A. None without a KV method."""
    tp = paper_scored(tp)
    kv = tp[tp["family"] == "kv"]
    if kv.empty:
        return None
    turns = tp[tp["family"] == "turns"]
    rows = []
    for key, group in kv.groupby([*PROBE_KEYS, "seed", "method", "budget"], sort=True):
        ident = dict(zip([*PROBE_KEYS, "seed", "method", "budget"], key))
        budget = str(ident["budget"])
        selector_budget = "turns " + budget.removeprefix("cache ") if budget.startswith("cache ") else ""
        seeded = [*PROBE_KEYS, "seed"]
        same = (turns[seeded] == pd.Series({k: ident[k] for k in seeded})).all(axis=1)
        candidates = turns[same & (turns["budget"] == selector_budget)]
        scores = pd.Series(
            {
                method: under_rule({"accuracy": column_mean(not_run(g), "m.strict")}, g)["accuracy"]
                for method, g in candidates.groupby("method")
            },
            dtype=float,
        ).dropna()
        best = scores[scores == scores.max()] if len(scores) else scores
        own = {"n": len(not_run(group)), "strict_accuracy": column_mean(not_run(group), "m.strict")}
        row = (
            ident
            | under_rule(own, group)
            | {
                "selector_budget": selector_budget,
                "n_selectors": len(scores),
                "best_selector": "/".join(sorted(best.index)),
                "best_selector_strict_accuracy": float(best.iloc[0]) if len(best) else NAN,
            }
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=KV_COLUMNS)


# ------------------------------------------------------------------------- Table 23: P1 with F1


P1_COLUMNS = [
    *GROUP, "family", "n", "n_error", "n_unsupported", "n_seeds",
    "strict_accuracy_seed_mean", "strict_accuracy_seed_sd",
    "loose_accuracy_seed_mean", "loose_accuracy_seed_sd", "f1_seed_mean", "f1_seed_sd",
]  # fmt: skip


def p1_seeds(tp: pd.DataFrame) -> pd.DataFrame | None:
    """TPBench Table 23: P1 under its three scoring rules (strict, loose, token F1), each the mean
    and sample sd of the per-seed means (release ``results/main/seed_summary.json``). None without P1."""
    part = _paper(tp, "P1")
    if part.empty:
        return None

    def build(group: pd.DataFrame) -> dict[str, Any]:
        row: dict[str, Any] = {"n": len(group), "n_seeds": int(group["seed"].nunique())}
        for metric, name in (("strict", "strict_accuracy"), ("loose", "loose_accuracy"), ("f1", "f1")):
            mean, sd = _spread(_per_seed(group, f"m.{metric}"))
            row |= {f"{name}_seed_mean": mean, f"{name}_seed_sd": sd}
        return row

    return in_family_order(pd.DataFrame(_rows(part, GROUP, build), columns=P1_COLUMNS), PROBE_KEYS)
