"""Statistics for the aggregation command (ragscale sections 3, 6, 7, A.4, A.5; KVDiagnosis 3.3, 5.3).

Pure numpy/scipy. Undefined values are ``None``, never NaN, so a report can say "undefined"
instead of silently propagating NaN. Every random function takes ``seed`` and draws from
``np.random.default_rng(seed)``, so a report is reproducible from its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.resampling import split_halves
from kvx.diagnostics.stats import exact_mcnemar

__all__ = [
    "EIV",
    "EIVBootstrap",
    "ExcessFlips",
    "TIE_RULES",
    "RescueDamage",
    "auroc",
    "eiv_bootstrap",
    "eiv_correlation",
    "endpoints",
    "excess_flips",
    "jaccard",
    "mean_interval",
    "paired_bootstrap_difference",
    "pair_mcnemar",
    "rescue_damage",
    "rescue_damage_per_reader",
    "retention",
    "stratified_auroc",
    "stratified_auroc_interval",
]

# Upper bound on the cells of one vectorized block (draws x rows), to bound memory on big inputs.
_BLOCK_CELLS = 1 << 21


# ----------------------------------------------------------------------------- input checks


def _finite(a: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """A finite float array of ``ndim`` dimensions (2: readers x rows); NaN scores are a caller bug."""
    arr = np.asarray(a, dtype=float)
    if arr.ndim != ndim:
        shape = "1-D" if ndim == 1 else "2-D (readers x rows)"
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values")
    return arr


def _paired_panels(x: np.ndarray, y: np.ndarray, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Two same-shape (readers x rows) panels with at least 2 of each: paired designs need both."""
    a, b = _finite(x, names[0], 2), _finite(y, names[1], 2)
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} differ in shape: {a.shape} vs {b.shape}")
    if a.shape[0] < 2 or a.shape[1] < 2:
        raise ValueError(f"need at least 2 readers and 2 rows, got shape {a.shape}")
    return a, b


def _binary(a: np.ndarray, name: str) -> np.ndarray:
    """Booleans from a bool or 0/1 array; any other value is a scoring bug."""
    arr = np.asarray(a)
    if arr.dtype != bool:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must be boolean or 0/1")
        arr = arr.astype(bool)
    return arr


def _check_count(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _check_bootstrap(n_boot: int, level: float) -> None:
    """Fail before resampling, not after."""
    _check_count(n_boot, "n_boot")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """Central percentile interval holding ``level`` of ``values``."""
    low, high = np.percentile(values, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(low), float(high)


# ----------------------------------------------------------------------------- AUROC (KVDiagnosis 5.3)


def _mann_whitney_u(pos: np.ndarray, neg: np.ndarray) -> float:
    """Pairs with pos > neg plus half the ties, counted over the sorted negatives in O(n log n).

    Integer counts throughout, so exact (as midranks are); numpy only, because importing
    ``scipy.stats`` for its ``rankdata`` cost more CPU than every AUROC of an aggregate."""
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos, side="left")
    upto = np.searchsorted(neg_sorted, pos, side="right")
    return float(int(below.sum()) + int(upto.sum())) / 2


def auroc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """P(random positive scores above random negative), ties 1/2; None if a class is empty.

    Positives are C->W rows, negatives C->C rows, scores oriented so larger means more risk.
    """
    p, n = _finite(pos, "pos", 1), _finite(neg, "neg", 1)
    if p.size == 0 or n.size == 0:
        return None
    return _mann_whitney_u(p, n) / (p.size * n.size)


def _mixed_strata(strata: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Strata with both classes present; the others contribute no within-stratum pair."""
    checked = [(_finite(p, "pos", 1), _finite(n, "neg", 1)) for p, n in strata]
    return [(p, n) for p, n in checked if p.size and n.size]


def stratified_auroc(strata: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float | None, int]:
    """Within-stratum AUROC pooled over pairs: sum of U_s over sum of n_pos_s * n_neg_s.

    Positives are never compared with negatives of another stratum, so differences in base
    score between strata (e.g. workloads) cannot masquerade as separation. Returns
    (auc, number of mixed strata); auc is None when no stratum has both classes.
    """
    mixed = _mixed_strata(strata)
    if not mixed:
        return None, 0
    u = sum(_mann_whitney_u(p, n) for p, n in mixed)
    pairs = sum(p.size * n.size for p, n in mixed)
    return u / pairs, len(mixed)


def _bootstrap_u(pos: np.ndarray, neg: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """U of ``n_boot`` resamples (with replacement, within the stratum) in O(n) per draw.

    Resampled negatives are counted over the sorted originals, so the number of them below (or
    tied with) a value is a cumulative count; each resampled positive then adds its credit. The
    counts of a block of draws are one flat cumulative sum (row ``r`` from ``r * width``), read only
    where the resampled positives fall: integers throughout, so the result is exact.
    """
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos, side="left")
    upto = np.searchsorted(neg_sorted, pos, side="right")
    block = max(1, _BLOCK_CELLS // max(pos.size, neg.size))
    width = neg.size + 1
    out = np.empty(n_boot)
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        rows = np.arange(0, size * width, width)[:, None]
        draws = rng.integers(0, neg.size, size=(size, neg.size))
        draws += rows + 1  # a draw of negative i counts from column i + 1 of its row on
        cum = np.cumsum(np.bincount(draws.ravel(), minlength=size * width), dtype=np.int32)
        picks = rng.integers(0, pos.size, size=(size, pos.size))
        start_of_row = cum[rows]  # every draw of the rows before
        twice_credit = (cum[rows + below[picks]] - start_of_row).sum(axis=1)  # below + ties / 2, x 2
        twice_credit += (cum[rows + upto[picks]] - start_of_row).sum(axis=1)
        out[start : start + size] = 0.5 * twice_credit
    return out


def stratified_auroc_interval(
    strata: list[tuple[np.ndarray, np.ndarray]], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile interval of stratified AUROC, resampling each class within each mixed stratum.

    Descriptive only: sources recur across strata, so draws are not independent replications
    (KVDiagnosis Figure 6). (None, None) when no stratum is mixed.
    """
    _check_bootstrap(n_boot, level)
    mixed = _mixed_strata(strata)
    if not mixed:
        return None, None
    rng = np.random.default_rng(seed)
    u = sum(_bootstrap_u(p, n, n_boot, rng) for p, n in mixed)
    pairs = sum(p.size * n.size for p, n in mixed)
    return _interval(u / pairs, level)


# ----------------------------------------------------------------------------- failure-set overlap


def jaccard(a: set, b: set) -> float | None:
    """|a & b| / |a | b|: low overlap shows methods fail on different sources; None if both empty."""
    union = len(a | b)
    return len(a & b) / union if union else None


# ----------------------------------------------------------------------------- upgrade retention (ragscale 3)


def retention(raw_upgrade: float, comp_upgrade: float, floor: float = 0.05) -> float | None:
    """Share of the raw reader upgrade still visible under compression (ragscale eq. 3).

    None when |raw upgrade| < ``floor`` (5 pp): the ratio is unstable for small upgrades.
    """
    if abs(raw_upgrade) < floor:
        return None
    return comp_upgrade / raw_upgrade


def endpoints(raw_means: np.ndarray) -> tuple[int, int]:
    """(lowest, highest) raw-scoring reader: the headline upgrade pair; ties go to the lower index."""
    means = _finite(raw_means, "raw_means", 1)
    if means.size == 0:
        raise ValueError("raw_means is empty")
    return int(np.argmin(means)), int(np.argmax(means))


# ----------------------------------------------------------------------------- excess flips (ragscale 6, A.5)

#: how a scoring-half tie counts (A.5): not a reversal (the paper's rule), excluded, or a raw reversal
TIE_RULES = ("not-reversal", "exclude", "adverse")


@dataclass(frozen=True)
class ExcessFlips:
    """Split replay summary; values are None and counts 0 when no split had an eligible pair."""

    median: float | None
    low: float | None
    high: float | None
    raw_rate: float | None
    comp_rate: float | None
    n_splits_used: int
    median_eligible_pairs: float | None


def _mcnemar_pass(b: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    """Elementwise exact McNemar p < alpha, computing each distinct (min, max) count pair once."""
    lo, hi = np.minimum(b, c).astype(np.int64), np.maximum(b, c).astype(np.int64)
    width = int(hi.max()) + 1
    keys, inverse = np.unique(lo * width + hi, return_inverse=True)
    passed = np.array([exact_mcnemar(*divmod(int(k), width)) < alpha for k in keys], dtype=bool)
    return passed[inverse].reshape(b.shape)


def excess_flips(
    raw: np.ndarray,
    comp: np.ndarray,
    n_splits: int = 5000,
    seed: int = 0,
    min_gap: float = 0.05,
    mcnemar_alpha: float | None = None,
    ties: str = "not-reversal",
) -> ExcessFlips:
    """Reversals under compression beyond the raw row-sampling floor (ragscale A.5).

    ``raw``/``comp`` are (readers x rows) scores, split by the release's rule
    (:func:`kvx.aggregate.stats.resampling.split_halves`: the ``k``-th ``rng.permutation(n_rows)``, its
    first ``n_rows // 2`` entries the selection half). A pair is eligible when its raw selection-half mean
    difference is at least ``min_gap`` in magnitude (and, with ``mcnemar_alpha``, its exact McNemar p <
    alpha on that half; binary scores only). Oriented by that sign, it reverses when the scoring-half
    difference has the opposite strict sign (``ties``: a scoring-half tie is not a reversal; ``"exclude"``
    drops a pair tied under raw or compressed evidence from that split's eligible pairs; ``"adverse"``
    counts a raw tie as a raw reversal: A.5's tie sensitivity). Per split, excess = comp rate - raw rate
    over eligible pairs; splits without eligible pairs are omitted.
    """
    r, c = _paired_panels(raw, comp, ("raw", "comp"))
    _check_count(n_splits, "n_splits")
    m, n = r.shape
    if min_gap <= 0:
        raise ValueError("min_gap must be positive: a pair tied on the selection half has no orientation")
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")
    if mcnemar_alpha is not None and not np.isin(r, (0.0, 1.0)).all():
        raise ValueError("the McNemar filter needs binary raw scores")
    half = n // 2
    first, second = np.triu_indices(m, k=1)
    # pairs x rows; with the selection sums it gives each pair's McNemar discordant counts
    both_right = r[first] * r[second] if mcnemar_alpha is not None else None
    excess, raw_rates, comp_rates, eligible_counts = [], [], [], []
    for select, score in split_halves(n, n_splits, seed):
        # Sums, not means, so binary gaps compare exactly (one rounding in the division).
        sel_sums = r @ select.T  # readers x splits
        gap = sel_sums[second] - sel_sums[first]  # pairs x splits
        eligible = np.abs(gap) / half >= min_gap
        if both_right is not None:
            both = both_right @ select.T
            b, cc = sel_sums[first] - both, sel_sums[second] - both
            eligible &= _mcnemar_pass(b, cc, mcnemar_alpha)
        sign = np.sign(gap)
        raw_score, comp_score = r @ score.T, c @ score.T
        raw_diff = sign * (raw_score[second] - raw_score[first])
        comp_diff = sign * (comp_score[second] - comp_score[first])
        if ties == "exclude":
            eligible &= (raw_diff != 0) & (comp_diff != 0)
        raw_rev = eligible & ((raw_diff <= 0) if ties == "adverse" else (raw_diff < 0))
        comp_rev = eligible & (comp_diff < 0)
        k = eligible.sum(axis=0)
        used = k > 0
        raw_rate = raw_rev.sum(axis=0)[used] / k[used]
        comp_rate = comp_rev.sum(axis=0)[used] / k[used]
        raw_rates.append(raw_rate)
        comp_rates.append(comp_rate)
        excess.append(comp_rate - raw_rate)
        eligible_counts.append(k[used])
    ex = np.concatenate(excess)
    if ex.size == 0:
        return ExcessFlips(None, None, None, None, None, 0, None)
    low, high = np.percentile(ex, [2.5, 97.5])
    return ExcessFlips(
        median=float(np.median(ex)),
        low=float(low),
        high=float(high),
        raw_rate=float(np.median(np.concatenate(raw_rates))),
        comp_rate=float(np.median(np.concatenate(comp_rates))),
        n_splits_used=int(ex.size),
        median_eligible_pairs=float(np.median(np.concatenate(eligible_counts))),
    )


# ----------------------------------------------------------------------------- rescue and damage (ragscale 7)


@dataclass(frozen=True)
class RescueDamage:
    """Rescue is a share of ALL reader-row pairs, damage a share of raw-correct pairs.

    The denominators differ, so rescue - damage is not the accuracy change.
    """

    rescue: float | None
    damage: float | None
    n_pairs: int
    n_rescued: int
    n_raw_correct: int
    n_damaged: int


def rescue_damage(raw_correct: np.ndarray, comp_correct: np.ndarray) -> RescueDamage:
    """Answers compression fixes (raw wrong, comp right) and breaks (raw right, comp wrong)."""
    raw, comp = _binary(raw_correct, "raw_correct"), _binary(comp_correct, "comp_correct")
    if raw.shape != comp.shape:
        raise ValueError(f"raw_correct and comp_correct differ in shape: {raw.shape} vs {comp.shape}")
    n_pairs, n_raw_correct = int(raw.size), int(raw.sum())
    n_rescued, n_damaged = int((~raw & comp).sum()), int((raw & ~comp).sum())
    return RescueDamage(
        rescue=n_rescued / n_pairs if n_pairs else None,
        damage=n_damaged / n_raw_correct if n_raw_correct else None,
        n_pairs=n_pairs,
        n_rescued=n_rescued,
        n_raw_correct=n_raw_correct,
        n_damaged=n_damaged,
    )


def rescue_damage_per_reader(raw_correct: np.ndarray, comp_correct: np.ndarray) -> list[RescueDamage]:
    """:func:`rescue_damage` for each reader (row): readers reach similar averages by different paths."""
    raw, comp = np.asarray(raw_correct), np.asarray(comp_correct)
    if raw.ndim != 2 or raw.shape != comp.shape:
        raise ValueError(f"need two same-shape (readers x rows) matrices, got {raw.shape} and {comp.shape}")
    return [rescue_damage(raw[i], comp[i]) for i in range(raw.shape[0])]


# ----------------------------------------------------------------------------- paired tests (KVDiagnosis 5.3)


def _outcome_pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two same-length boolean outcome vectors over the same rows."""
    xs, ys = _binary(x, "x"), _binary(y, "y")
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"need two same-length 1-D outcome vectors, got {xs.shape} and {ys.shape}")
    return xs, ys


def pair_mcnemar(x: np.ndarray, y: np.ndarray) -> tuple[int, int, float]:
    """(b, c, p): b = x right & y wrong, c = x wrong & y right, p = exact two-sided McNemar."""
    xs, ys = _outcome_pair(x, y)
    b, c = int((xs & ~ys).sum()), int((~xs & ys).sum())
    return b, c, exact_mcnemar(b, c)


def paired_bootstrap_difference(
    x: np.ndarray, y: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean(x) - mean(y), low, high), resampling rows jointly so the pairing is kept.

    Outcomes are binary, so a resample's difference depends only on how many rows it draws of
    each kind (x - y in {-1, 0, 1}); drawing those counts from a multinomial is exactly row
    resampling with replacement, in O(1) per draw.
    """
    xs, ys = _outcome_pair(x, y)
    if xs.size == 0:
        raise ValueError("no rows: the paired difference is undefined")
    _check_bootstrap(n_boot, level)
    d = xs.astype(int) - ys.astype(int)
    shares = np.array([(d == -1).mean(), (d == 0).mean(), (d == 1).mean()])
    counts = np.random.default_rng(seed).multinomial(d.size, shares, size=n_boot)
    low, high = _interval((counts[:, 2] - counts[:, 0]) / d.size, level)
    return float(d.mean()), low, high


def mean_interval(
    values: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` resampled with replacement: for paired data pass the per-row
    differences, so the pairing is kept. A resample's mean depends only on how many rows it draws of
    each distinct value; drawing those counts from a multinomial is exactly row resampling (the binary
    case is ``paired_bootstrap_difference``'s draw, value for value)."""
    arr = _finite(values, "values", 1)
    if arr.size == 0:
        raise ValueError("no rows: the mean is undefined")
    _check_bootstrap(n_boot, level)
    distinct, counts = np.unique(arr, return_counts=True)
    draws = np.random.default_rng(seed).multinomial(arr.size, counts / arr.size, size=n_boot)
    low, high = _interval(draws @ distinct / arr.size, level)
    return float(arr.mean()), low, high


@dataclass(frozen=True)
class UpgradeInterval:
    """Row-bootstrap intervals of a reader pair's raw and compressed upgrade and its retention."""

    raw: tuple[float, float]
    comp: tuple[float, float]
    retention: tuple[float | None, float | None]
    n_undefined: int  # draws whose raw upgrade fell below the floor: retention undefined, not replaced


def release_percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    """Percentiles at 2.5 and 97.5 for level 0.95, exactly: ``50 * (1 - 0.95)`` is 2.500000000000002 in
    floating point, which would move the interpolation off the releases' ``np.percentile(v, 2.5)``
    (ragscale) and ``np.quantile(v, [.025, .975])`` (TPBench), which are the same numbers."""
    low_q = round(50.0 * (1.0 - level), 12)
    low, high = np.percentile(values, [low_q, 100.0 - low_q])
    return float(low), float(high)


def upgrade_interval(
    raw: np.ndarray,
    comp: np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    floor: float = 0.05,
) -> UpgradeInterval:
    """Resample rows jointly for a pair's (2 x rows) raw and compressed scores, reader a then b.

    The draws are ragscale's (release ``analysis.bootstrap_pair``): ``rng = default_rng(seed)``, then
    for each draw ``rng.integers(0, n, size=n)`` row indices, one call per draw (a single call for
    all draws would consume the stream differently); the upgrades are the mean of b - a over the
    drawn rows; retention uses only draws with |raw upgrade| >= ``floor``. The same seed therefore
    gives the release's intervals to float precision.
    """
    r, c = _paired_panels(raw, comp, ("raw", "comp"))
    if r.shape[0] != 2:
        raise ValueError(f"an upgrade needs exactly 2 readers, got {r.shape[0]}")
    _check_bootstrap(n_boot, level)
    n = r.shape[1]
    rng = np.random.default_rng(seed)
    d_raw, d_comp = r[1] - r[0], c[1] - c[0]
    up_raw, up_comp = np.empty(n_boot), np.empty(n_boot)
    block = max(1, _BLOCK_CELLS // n)
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        picks = np.stack([rng.integers(0, n, size=n) for _ in range(size)])
        # a row mean over the contiguous axis sums as np.mean of one draw does (pairwise)
        up_raw[start : start + size] = d_raw[picks].mean(axis=1)
        up_comp[start : start + size] = d_comp[picks].mean(axis=1)
    defined = np.abs(up_raw) >= floor
    ratio = up_comp[defined] / up_raw[defined]
    return UpgradeInterval(
        raw=release_percentiles(up_raw, level),
        comp=release_percentiles(up_comp, level),
        retention=release_percentiles(ratio, level) if ratio.size else (None, None),
        n_undefined=int((~defined).sum()),
    )


# ----------------------------------------------------------------------------- EIV correlation (ragscale A.4)


@dataclass(frozen=True)
class EIV:
    """Corrected moments M* and every derived estimate, with flags for each boundary case."""

    m11: float
    m22: float
    m12: float
    min_eigenvalue: float
    r_unbounded: float | None
    r_clipped: float | None
    r_psd: float | None
    slope: float | None
    nonpositive_variance: bool
    non_psd: bool
    nonfinite: bool
    outside_unit: bool


def _correlation(cov: np.ndarray) -> float | None:
    """cov12 / sqrt(cov11 cov22), or None when a variance is not positive or the value is nonfinite."""
    if cov[0, 0] <= 0 or cov[1, 1] <= 0:
        return None
    r = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    return float(r) if np.isfinite(r) else None


def _sampling_moments(a_c: np.ndarray, b_c: np.ndarray) -> np.ndarray:
    """tr(H Sigma) / (m - 1) for Sigma = A_c B_c^T / (n (n - 1)), per panel of a (draws, m, n) stack.

    Uses tr(H Sigma) = tr(Sigma) - 1^T Sigma 1 / m, which needs no m x m product.
    """
    _, m, n = a_c.shape
    trace = np.sum(a_c * b_c, axis=(1, 2))
    total = np.sum(a_c.sum(axis=1) * b_c.sum(axis=1), axis=1)
    return (trace - total / m) / (n * (n - 1) * (m - 1))


def _corrected(r: np.ndarray, d: np.ndarray) -> np.ndarray:
    """M* = M - projected sampling moments for a (draws, m, n) stack of panels: (draws, 2, 2)."""
    m = r.shape[1]
    r_means, d_means = r.mean(axis=2), d.mean(axis=2)
    r_dev = r_means - r_means.mean(axis=1, keepdims=True)
    d_dev = d_means - d_means.mean(axis=1, keepdims=True)
    r_c, d_c = r - r_means[..., None], d - d_means[..., None]
    s_rd = _sampling_moments(r_c, d_c)
    out = np.empty((r.shape[0], 2, 2))
    out[:, 0, 0] = np.sum(r_dev * r_dev, axis=1) / (m - 1) - _sampling_moments(r_c, r_c)
    out[:, 1, 1] = np.sum(d_dev * d_dev, axis=1) / (m - 1) - _sampling_moments(d_c, d_c)
    out[:, 0, 1] = out[:, 1, 0] = np.sum(r_dev * d_dev, axis=1) / (m - 1) - s_rd
    return out


def _eiv(r: np.ndarray, d: np.ndarray) -> EIV:
    """A.4 on checked panels: M* = M - projected sampling moments, then every derived value."""
    corrected = _corrected(r[None], d[None])[0]
    eigenvalues, eigenvectors = np.linalg.eigh(corrected)
    min_eigenvalue = float(eigenvalues[0])
    non_psd = min_eigenvalue < 0
    psd = (eigenvectors * np.maximum(eigenvalues, 0.0)) @ eigenvectors.T if non_psd else corrected
    r_unbounded = _correlation(corrected)
    m11, m22, m12 = float(corrected[0, 0]), float(corrected[1, 1]), float(corrected[0, 1])
    return EIV(
        m11=m11,
        m22=m22,
        m12=m12,
        min_eigenvalue=min_eigenvalue,
        r_unbounded=r_unbounded,
        r_clipped=None if r_unbounded is None else min(1.0, max(-1.0, r_unbounded)),
        r_psd=_correlation(psd),
        slope=m12 / m11 if m11 > 0 else None,
        nonpositive_variance=m11 <= 0 or m22 <= 0,
        non_psd=bool(non_psd),
        nonfinite=r_unbounded is None,
        outside_unit=r_unbounded is not None and abs(r_unbounded) > 1,
    )


def eiv_correlation(R: np.ndarray, D: np.ndarray) -> EIV:
    """Cross-reader correlation of raw score and compression gain, minus shared row noise (A.4).

    ``R`` holds raw scores and ``D`` paired gains (comp - raw), readers x rows. Gain contains
    the raw score, so the observed covariance of reader means carries the row-sampling noise of
    both; the projected sampling moments are subtracted to give M*. ``nonfinite`` means no
    finite unbounded correlation exists (this includes every nonpositive-variance case).
    """
    return _eiv(*_paired_panels(R, D, ("R", "D")))


_EIV_CHUNK = 256  # bootstrap draws stacked per numpy call (memory: chunk x readers x rows floats)


@dataclass(frozen=True)
class EIVBootstrap:
    """Percentile interval of the clipped correlation, plus every boundary count (none hidden)."""

    low: float | None
    high: float | None
    n_draws: int
    n_finite: int
    n_nonpositive_variance: int
    n_non_psd: int
    n_nonfinite: int
    n_outside_unit: int


def eiv_bootstrap(
    R: np.ndarray,
    D: np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    families: Sequence[str] | None = None,
) -> EIVBootstrap:
    """Row bootstrap of :func:`eiv_correlation`, recomputing the full nonlinear estimate per draw.

    Draw ``k`` uses columns ``rng.integers(0, n_rows, n_rows)``. With ``families`` (one label per
    reader) each draw also resamples families with replacement, every reader of a drawn family
    entering once per draw of it (ragscale's family-by-row interval: questions and the represented
    reader families are both samples). The interval uses the draws with a finite correlation;
    draws without one are counted, not replaced.
    """
    r, d = _paired_panels(R, D, ("R", "D"))
    _check_bootstrap(n_boot, level)
    rng = np.random.default_rng(seed)
    n = r.shape[1]
    corrected = []
    if families is not None:
        if len(families) != r.shape[0]:
            raise ValueError(f"families has {len(families)} labels for {r.shape[0]} readers")
        groups = [np.flatnonzero(np.asarray(families) == f) for f in sorted(set(families))]
        for _ in range(n_boot):  # panels differ in size per draw: one numpy call each
            cols = rng.integers(0, n, n)
            members = np.concatenate([groups[g] for g in rng.integers(0, len(groups), len(groups))])
            with np.errstate(divide="ignore", invalid="ignore"):  # one drawn reader: no variance
                corrected.append(_corrected(r[members][:, cols][None], d[members][:, cols][None]))
    for start in range(0, n_boot if families is None else 0, _EIV_CHUNK):  # stacked draws
        cols = np.stack([rng.integers(0, n, n) for _ in range(min(_EIV_CHUNK, n_boot - start))])
        corrected.append(_corrected(r[:, cols].transpose(1, 0, 2), d[:, cols].transpose(1, 0, 2)))
    m = np.concatenate(corrected)
    m11, m22, m12 = m[:, 0, 0], m[:, 1, 1], m[:, 0, 1]
    nonpositive = (m11 <= 0) | (m22 <= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(nonpositive, np.nan, m12 / np.sqrt(np.where(nonpositive, 1.0, m11 * m22)))
    is_finite = np.isfinite(corr)
    finite = np.clip(corr[is_finite], -1.0, 1.0)
    low, high = _interval(finite, level) if finite.size else (None, None)
    return EIVBootstrap(
        low=low,
        high=high,
        n_draws=n_boot,
        n_finite=int(finite.size),
        n_nonpositive_variance=int(nonpositive.sum()),
        n_non_psd=int((np.linalg.eigh(m[np.isfinite(m).all(axis=(1, 2))])[0][:, 0] < 0).sum()),
        n_nonfinite=int((~is_finite).sum()),
        n_outside_unit=int((np.abs(corr[is_finite]) > 1).sum()),
    )
