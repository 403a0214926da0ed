"""TPBench tables beyond the per-probe ones: §6.1.2's crossover, Table 8's gaps, Appendix B's scaling.

- ``tpbench_crossover`` (§6.1.2): two methods at one budget under the weighted average
  α·R1 + (1−α)·R2 of their P1 and P2 accuracies (seed means, as in Table 3). Their difference
  α·Δ1 + (1−α)·Δ2 changes sign at α* = Δ2 / (Δ2 − Δ1) when Δ1 and Δ2 have opposite signs; the paper's
  SGD instance, earliest turns (0.480, 0.156) against embedding MMR (0.178, 0.309), gives
  0.302α − 0.153(1 − α) and α* ≈ 0.336.
- ``tpbench_gap`` (Table 8, §6.2.3): each method's accuracy minus full context's on the same probes
  (same probe seed and source), with a paired interval from resampling source dialogues
  (:func:`kvx.aggregate.stats.releases.seed_weighted_interval`). The rule is the release's
  ``scripts/reader_evaluation/score_answers.py`` ``cluster_interval`` (kentech-sail/TPBench): each seed's
  answers weigh 1/n_seed, so the estimate is the mean of the per-seed gaps; a dialogue drawn by
  several seeds is one cluster; 5,000 resamples from ``numpy.random.default_rng(20260928)``, the
  clusters drawn as ``integers(K, size=(5000, K))``; ``np.quantile(boot, [.025, .975])`` (linear).
  The release indexes clusters in the order its rows first name them, kvx in sorted order (an
  interval that does not depend on row order): on rows sorted by dialogue the two are the same to the
  bit (tests/aggregate/tpbench/test_tpbench_gaps.py).
  With equal seed sizes this is the pooled mean §6.2.3 bootstraps (``audit_p3_segments.py``, which
  reports full − method, the opposite sign, and draws every contrast from one generator).
- ``tpbench_tokens`` (Appendix B): q = L_compressed / L_full, the share of the reader's input tokens
  (context + question) a prompt-side method keeps; the input KV cache scales as q and the dense
  prefill attention term as q², so full-to-compressed factors are 1/q and 1/q² (3.3 and 11.1 at
  q = 0.30). Theoretical scaling from token counts, not measured speed. No accuracy, so no
  denominator rule: kvx's own count of the supported answers that carry token counts.

The crossover and the gaps follow the paper's denominator rule
(:mod:`~kvx.aggregate.tpbench.denominators`), as Table 3 and the release's ``score_answers.py`` do: a
reader error is a wrong answer in n, a method with an unsupported answer has no accuracy (N/A), each
row with its ``n_error`` and ``n_unsupported``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import combinations
from typing import Any

import pandas as pd

from kvx.aggregate.stats.releases import TPBENCH_BOOT_SEED, TPBENCH_N_BOOT, seed_weighted_interval
from kvx.aggregate.tpbench.denominators import counts, not_run, paper_scored, under_rule
from kvx.aggregate.tpbench.probes import FULL, GROUP, PROBE_KEYS, compression_methods, paper_means
from kvx.core.records import SUPPORTED

__all__ = [
    "RELEASE_BOOT_SEED",
    "RELEASE_N_BOOT",
    "crossover",
    "crossover_alpha",
    "gaps",
    "tpbench_gap_tables",
    "token_scaling",
]

#: the release's paired dialogue bootstrap (``score_answers.py``, ``audit_p3_segments.py``)
RELEASE_N_BOOT = TPBENCH_N_BOOT
RELEASE_BOOT_SEED = TPBENCH_BOOT_SEED
NAN = math.nan
_TIE = 1e-12  # accuracy differences this small are equal (seed means of the same answers)


# ------------------------------------------------------------------------------------ crossover


def crossover_alpha(p1_diff: float, p2_diff: float) -> float:
    """The α in (0, 1) at which α·Δ1 + (1−α)·Δ2 changes sign, Δ = method a − method b on P1 and P2;
    NaN when it never does (one method ahead or tied on both probes, or a difference unknown)."""
    if not (math.isfinite(p1_diff) and math.isfinite(p2_diff)):
        return NAN
    if abs(p1_diff) <= _TIE or abs(p2_diff) <= _TIE or (p1_diff > 0) == (p2_diff > 0):
        return NAN
    return p2_diff / (p2_diff - p1_diff)


def _why_none(a: str, b: str, p1_diff: float, p2_diff: float, not_run: list[str]) -> str:
    if not_run:
        return f"{' and '.join(not_run)} not run (an unsupported answer): N/A under the paper's rule"
    if not (math.isfinite(p1_diff) and math.isfinite(p2_diff)):
        return "an accuracy is undefined (no scored answer)"
    tied1, tied2 = abs(p1_diff) <= _TIE, abs(p2_diff) <= _TIE
    if tied1 and tied2:
        return "tied on both probes: equal at every α"
    ahead = a if (p2_diff if tied1 else p1_diff) > 0 else b
    if tied1 or tied2:
        return f"tied on {'P1' if tied1 else 'P2'}, {ahead} ahead on the other: no swap"
    return f"{ahead} ahead on both probes: no swap"


CROSSOVER_COLUMNS = [
    "corpus", "reader", "budget", "p1_task", "p2_task", "score", "method_a", "method_b",
    "p1_accuracy_a", "p1_accuracy_b", "p2_accuracy_a", "p2_accuracy_b", "p1_accuracy_diff",
    "p2_accuracy_diff", "crossover_alpha", "ahead_above", "n_error", "n_unsupported", "note",
]  # fmt: skip
_COUNTS = ["n_error", "n_unsupported"]


def crossover(p1: pd.DataFrame, p2: pd.DataFrame) -> pd.DataFrame:
    """§6.1.2 for every pair of compression methods present in both probes at the same corpus,
    reader and budget, on the strict and the loose score (seed means): the crossover α and the
    method ahead above it (the P1 leader), or why the two never swap. The paper's rule (Table 3's
    accuracies): a reader error is wrong and in n; a method with an unsupported answer has no
    accuracy, so no α. ``n_error`` and ``n_unsupported`` count the four groups' answers (both methods,
    both probes)."""
    rows = []
    keys = ["corpus", "reader", "budget"]
    a_all, b_all = compression_methods(paper_means(p1)), compression_methods(paper_means(p2))
    for key, one in a_all.groupby(keys, sort=True):
        two = b_all[(b_all[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
        for (t1, x), (t2, y) in ((a, b) for a in one.groupby("task") for b in two.groupby("task")):
            tally = x.set_index("method")[_COUNTS].add(y.set_index("method")[_COUNTS], fill_value=0)
            for score in ("strict", "loose"):
                column = f"{score}_accuracy_seed_mean"
                both = (
                    x.set_index("method")[column]
                    .to_frame("p1")
                    .join(y.set_index("method")[column].to_frame("p2"), how="inner")
                )
                for a, b in combinations(sorted(both.index), 2):
                    d1, d2 = both.at[a, "p1"] - both.at[b, "p1"], both.at[a, "p2"] - both.at[b, "p2"]
                    alpha = crossover_alpha(d1, d2)
                    found = math.isfinite(alpha)
                    not_run = [m for m in (a, b) if tally.at[m, "n_unsupported"]]
                    rows.append(
                        dict(zip(keys, key))
                        | {"p1_task": t1, "p2_task": t2, "score": score, "method_a": a, "method_b": b}
                        | {"p1_accuracy_a": both.at[a, "p1"], "p1_accuracy_b": both.at[b, "p1"]}
                        | {"p2_accuracy_a": both.at[a, "p2"], "p2_accuracy_b": both.at[b, "p2"]}
                        | {"p1_accuracy_diff": d1, "p2_accuracy_diff": d2, "crossover_alpha": alpha}
                        | {"ahead_above": (a if d1 > 0 else b) if found else ""}
                        | {c: int(tally.loc[[a, b], c].sum()) for c in _COUNTS}
                        | {"note": "" if found else "none: " + _why_none(a, b, d1, d2, not_run)}
                    )
    return pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)


# ----------------------------------------------------------------------------------- the gaps


def _seed_mean(values: pd.Series, seeds: pd.Series) -> float:
    """The mean of the per-seed means: the estimate the gap's interval is centred on."""
    return float(values.groupby(seeds).mean().mean()) if len(values) else NAN


GAP_COLUMNS = [
    *GROUP, "family", "n_pairs", "n_seeds", "n_dialogues", "n_unpaired",
    "n_error", "n_unsupported", "full_n_error", "full_n_unsupported",
    "strict_accuracy", "full_strict_accuracy", "strict_accuracy_gap",
    "strict_accuracy_gap_ci_low", "strict_accuracy_gap_ci_high",
    "loose_accuracy", "full_loose_accuracy", "loose_accuracy_gap",
    "loose_accuracy_gap_ci_low", "loose_accuracy_gap_ci_high",
    "n_resamples", "resample_seed",
]  # fmt: skip
_PAIR = [*PROBE_KEYS, "seed", "source_id"]


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    """Answers the paper's rule scores (``paper_scored`` first: an error wrong), with a strict score."""
    return not_run(frame)[lambda f: f["m.strict"].notna()]


def gaps(tp: pd.DataFrame, n_boot: int = RELEASE_N_BOOT, seed: int = RELEASE_BOOT_SEED) -> pd.DataFrame:
    """Table 8 / §6.2.3: per method (every method but full context), its accuracy and full
    context's on the same answers (same probe, corpus, task, reader, seed and source), the gap
    method − full (negative: below full context) and its paired dialogue-clustered interval.

    The paper's rule, as the release's ``score_answers.py`` has it (every answer scored, an unreadable
    one 0; no comparison while an answer is missing): a reader error is wrong and in n on either side
    (``n_error``, ``full_n_error``); an unsupported answer of the method, or of full context on the
    method's sources, leaves the row's scores N/A, counted (``n_unsupported``, ``full_n_unsupported``).
    ``n_unpaired`` counts the method's scored answers without a full-context answer."""
    if tp.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    tp = paper_scored(tp)
    full_all = tp[tp["method"] == FULL].drop_duplicates(_PAIR).set_index(_PAIR)
    full = _scored(full_all.reset_index()).set_index(_PAIR)[["m.strict", "m.loose"]]
    rows = []
    for key, group in tp[tp["method"] != FULL].groupby(GROUP, sort=True):
        mine = _scored(group)
        paired = mine.join(full, on=_PAIR, rsuffix="_full", how="inner")
        here = full_all.reindex(pd.MultiIndex.from_frame(group[_PAIR])).dropna(subset=["status"])
        row: dict[str, Any] = dict(zip(GROUP, key)) | {"family": group["family"].iat[0]}
        row |= {
            "n_pairs": len(paired),
            "n_seeds": int(paired["seed"].nunique()),
            "n_dialogues": int(paired["cluster"].nunique()),
            "n_unpaired": len(mine) - len(paired),
            "n_resamples": n_boot,
            "resample_seed": seed,
        }
        for score in ("strict", "loose"):
            ok = paired[paired[f"m.{score}"].notna() & paired[f"m.{score}_full"].notna()]
            gap, low, high = seed_weighted_interval(
                ok[f"m.{score}"] - ok[f"m.{score}_full"], ok["seed"], ok["cluster"], n_boot, seed
            )
            row |= {
                f"{score}_accuracy": _seed_mean(ok[f"m.{score}"], ok["seed"]),
                f"full_{score}_accuracy": _seed_mean(ok[f"m.{score}_full"], ok["seed"]),
                f"{score}_accuracy_gap": gap,
                f"{score}_accuracy_gap_ci_low": low,
                f"{score}_accuracy_gap_ci_high": high,
            }
        # N/A when either side has an unsupported answer; the counts, each side's
        row = under_rule(row, pd.concat([group, here])) | counts(group)
        rows.append(row | {f"full_{k}": v for k, v in counts(here).items()})
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


# ------------------------------------------------------------------------------- token scaling


TOKEN_COLUMNS = [
    *GROUP, "family", "n", "context_share_mean", "q_mean", "q2_mean",
    "kv_factor", "attention_factor", "note",
]  # fmt: skip


def _why_no_tokens(family: str) -> str:
    if family == "kv":
        return "a cache method prefills the whole prompt: no prompt-side q (its budget is the cache's)"
    return "no supported record carries its token counts (n_context_tokens, transform.retained_token_share)"


def _partial(with_counts: int, scored: int) -> str:
    return "" if with_counts == scored else f"{with_counts} of {scored} carry token counts"


def token_scaling(tp: pd.DataFrame) -> pd.DataFrame:
    """Appendix B per method, over its supported answers: L_full = context + question tokens of
    the untransformed prompt, L_compressed = the transformed context's tokens + the question's;
    mean q and q² per answer, and the workload's full-to-compressed factors ΣL_full / ΣL_compressed
    (input KV cache) and ΣL_full² / ΣL_compressed² (dense prefill attention)."""
    if tp.empty:
        return pd.DataFrame(columns=TOKEN_COLUMNS)
    rows = []
    for key, group in tp[tp["method"] != FULL].groupby(GROUP, sort=True):
        family = str(group["family"].iat[0])
        scored = group[group["status"] == SUPPORTED]
        tokens = scored.reindex(columns=["n_context_tokens", "n_question_tokens", "retained_token_share"])
        tokens = tokens.astype(float).dropna()
        row: dict[str, Any] = dict(zip(GROUP, key)) | {"family": family, "n": len(tokens)}
        if tokens.empty:
            rows.append(row | {"note": _why_no_tokens(family)})
            continue
        context, question = tokens["n_context_tokens"], tokens["n_question_tokens"]
        kept = (tokens["retained_token_share"] * context).round()  # the share is kept / original tokens
        full, comp = context + question, kept + question
        q = comp / full
        rows.append(
            row
            | {
                "context_share_mean": float(tokens["retained_token_share"].mean()),
                "q_mean": float(q.mean()),
                "q2_mean": float((q**2).mean()),
                "kv_factor": float(full.sum() / comp.sum()),
                "attention_factor": float((full**2).sum() / (comp**2).sum()),
                "note": _partial(len(tokens), len(scored)),
            }
        )
    return pd.DataFrame(rows, columns=TOKEN_COLUMNS)


def tpbench_gap_tables(tp: pd.DataFrame, tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The three tables from the TPBench answers (``tpbench_rows``) and the per-probe accuracy tables
    ``tables`` (from :func:`kvx.aggregate.tpbench.probes.tpbench_tables`); none without TPBench
    records. The gap intervals use the release's resample count and seed, whatever ``--boot``."""
    if "tpbench_p1" not in tables:
        return {}
    return {
        "tpbench_crossover": crossover(tables["tpbench_p1"], tables["tpbench_p2"]),
        "tpbench_gap": gaps(tp),
        "tpbench_tokens": token_scaling(tp),
    }
