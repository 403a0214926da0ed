"""A binary judge's agreement with human labels, and its cluster bootstrap (TPBench §6.1.1: the P1
judge on Answer Equivalence).

Release: ``scripts/semantic_evaluation/aggregate_ae_judge.py`` (github.com/kentech-sail/TPBench, commit
1e16964). Pairs whose human vote tied are left out (``resolved`` counts the rest). A decision of None
(the judge's "uncertain") earns no credit and stays in the denominator: it is counted apart, as an
uncertain positive or negative by the human label. Accuracy is (tp + tn) / resolved; balanced accuracy
is the mean of tp / positives and tn / negatives, positives and negatives counting the uncertain ones.

The interval resamples clusters (AE: question ids) with replacement: each cluster carries its counts
(pairs, positives, negatives, then correct, tp, tn per method), clusters are numbered in the order the
pairs first name them, ``np.random.default_rng(seed).integers(K, size=(n_boot, K))`` draws them, and a
resample's rates are ratios of the drawn clusters' summed counts. Intervals are
:func:`~kvx.aggregate.stats.intervals.percentile_interval` (the release's ``np.quantile(.., [.025,
.975])``; a balanced accuracy undefined in a resample, a class absent, is left out, as its
``nanquantile``). A paired gain is the interval of the per-resample difference of two accuracies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from kvx.aggregate.stats.inputs import check_bootstrap
from kvx.aggregate.stats.intervals import percentile_interval

__all__ = [
    "AE_BOOT_SEED",
    "AE_N_BOOT",
    "Confusion",
    "agreement_intervals",
    "cluster_count_draws",
    "confusion",
]

#: the release's AE bootstrap: 10,000 question-clustered resamples from seed 20260928
AE_N_BOOT = 10_000
AE_BOOT_SEED = 20260928


@dataclass(frozen=True)
class Confusion:
    """Decisions against resolved human labels; None decisions are the uncertain ones."""

    tp: int
    tn: int
    fp: int
    fn: int
    uncertain_positive: int
    uncertain_negative: int

    @property
    def resolved(self) -> int:
        return self.tp + self.tn + self.fp + self.fn + self.uncertain_positive + self.uncertain_negative

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.resolved if self.resolved else None

    @property
    def balanced_accuracy(self) -> float | None:
        """Mean recall of the two classes; None when either class is absent."""
        positives = self.tp + self.fn + self.uncertain_positive
        negatives = self.tn + self.fp + self.uncertain_negative
        return (self.tp / positives + self.tn / negatives) / 2 if positives and negatives else None

    @property
    def uncertainty_rate(self) -> float | None:
        return (self.uncertain_positive + self.uncertain_negative) / self.resolved if self.resolved else None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self) | {
            "resolved": self.resolved,
            "accuracy": self.accuracy,
            "balanced_accuracy": self.balanced_accuracy,
            "uncertainty_rate": self.uncertainty_rate,
        }


def confusion(labels: Sequence[bool | None], decisions: Sequence[bool | None]) -> Confusion:
    """The confusion counts of ``decisions`` against ``labels`` (a None label, a human tie, is left out)."""
    if len(labels) != len(decisions):
        raise ValueError(f"{len(labels)} labels but {len(decisions)} decisions")
    pairs = [(y, p) for y, p in zip(labels, decisions, strict=True) if y is not None]
    return Confusion(
        tp=sum(y and p is True for y, p in pairs),
        tn=sum(not y and p is False for y, p in pairs),
        fp=sum(not y and p is True for y, p in pairs),
        fn=sum(y and p is False for y, p in pairs),
        uncertain_positive=sum(y and p is None for y, p in pairs),
        uncertain_negative=sum(not y and p is None for y, p in pairs),
    )


def cluster_count_draws(counts: np.ndarray, n_boot: int = AE_N_BOOT, seed: int = AE_BOOT_SEED) -> np.ndarray:
    """(n_boot, columns): each resample's summed counts of clusters drawn with replacement, the rows of
    ``counts`` (clusters x columns) drawn as ``default_rng(seed).integers(K, size=(n_boot, K))``."""
    table = np.asarray(counts)
    if table.ndim != 2 or table.shape[0] == 0:
        raise ValueError(f"counts must be a non-empty clusters x columns table, got shape {table.shape}")
    draws = np.random.default_rng(seed).integers(table.shape[0], size=(n_boot, table.shape[0]))
    return table[draws].sum(axis=1)


def agreement_intervals(
    labels: Sequence[bool | None],
    decisions: Mapping[str, Sequence[bool | None]],
    clusters: Sequence[str],
    n_boot: int = AE_N_BOOT,
    seed: int = AE_BOOT_SEED,
    level: float = 0.95,
) -> dict[str, dict[str, tuple[float | None, float | None]]]:
    """Per method (``decisions``' keys, in order): the cluster-bootstrap intervals of its ``accuracy``
    and ``balanced_accuracy`` and, for every method after the first, ``gain``: the first method's
    accuracy minus its own, paired within each resample. Only pairs with a resolved label count."""
    check_bootstrap(n_boot, level)
    methods = list(decisions)
    keep = [i for i, y in enumerate(labels) if y is not None]
    if not keep:
        raise ValueError("no resolved label: agreement is undefined")
    order: dict[str, int] = {}
    for i in keep:
        order.setdefault(clusters[i], len(order))
    counts = np.zeros((len(order), 3 + 3 * len(methods)), dtype=np.int64)
    for i in keep:
        row, y = counts[order[clusters[i]]], bool(labels[i])
        row[:3] += (1, y, not y)
        for m, name in enumerate(methods):
            p = decisions[name][i]
            row[3 + 3 * m : 6 + 3 * m] += (p is not None and p == y, y and p is True, not y and p is False)
    sums = cluster_count_draws(counts, n_boot, seed).astype(float)
    accuracy = {name: sums[:, 3 + 3 * m] / sums[:, 0] for m, name in enumerate(methods)}
    out: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    for m, name in enumerate(methods):
        with np.errstate(divide="ignore", invalid="ignore"):
            balanced = (sums[:, 4 + 3 * m] / sums[:, 1] + sums[:, 5 + 3 * m] / sums[:, 2]) / 2
        out[name] = {
            "accuracy": percentile_interval(accuracy[name], level),
            "balanced_accuracy": percentile_interval(balanced[np.isfinite(balanced)], level),
        }
        if m:
            out[name]["gain"] = percentile_interval(accuracy[methods[0]] - accuracy[name], level)
    return out
