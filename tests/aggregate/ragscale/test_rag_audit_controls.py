"""ragscale's audit controls (paper A.6-A.7, Tables 5-7): both-half reversals, the two order-preserving
nulls, transition homogeneity, resolution retention and cost, and the three-reader screen, each on a
tiny hand-computed panel; then every control table from a panel run through the aggregate."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.nulls import (
    both_half_reversals,
    independent_uniform,
    null_replay,
    row_exchangeable,
    transition_homogeneity,
)
from kvx.aggregate.ragscale.predictive import loco_errors, predictive_audit, spacing
from kvx.aggregate.ragscale.resolution import (
    resolution_cost,
    resolution_retention,
    token_cost,
)
from kvx.aggregate.ragscale.screen import choose_triplet, validate_screen
from kvx.aggregate.ragscale.splits import replay
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.aggregate.stats.paired_tests import exact_mcnemar, mcnemar_cutoffs, pair_mcnemar
from kvx.aggregate.stats.releases import split_halves
from kvx.aggregate.stats.resampling import cluster_interval
from kvx.aggregate.stats.upgrades import excess_flips
from kvx.core.records import Answer, dumps, validate
from kvx.testing.synthetic import ratio_record

# three readers, four rows; the selection half is rows 0 and 1
RAW = np.array([[0, 0, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=float)
COMP = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 1]], dtype=float)
SELECT = np.array([[1, 1, 0, 0]], dtype=float)


def test_splits_follow_the_release_permutations() -> None:
    # ragscale replay.py: rng = default_rng(seed); order = rng.permutation(n); selection = order[: n // 2]
    rng = np.random.default_rng(7)
    orders = [rng.permutation(9) for _ in range(3)]
    ((masks, _),) = list(split_halves(9, 3, 7))
    for order, mask in zip(orders, masks, strict=True):
        assert set(np.flatnonzero(mask)) == set(order[:4])


def test_both_half_reversals_by_hand() -> None:
    # selection sums raw 0/2/1: every pair is separated (gaps 1.0, 0.5, 0.5 >= 0.05), oriented 0<1, 0<2, 2<1.
    # Scoring half (rows 2-3): raw 1/2/0 reverses only 0<2. Compressed scoring 2/0/1 reverses all three;
    # compressed selection 2/0/0 opposes 0<1 and 0<2 but ties 2~1 (a tie is no reversal).
    r = replay(RAW, COMP, SELECT, 0.05)
    assert r.raw_rate.tolist() == [pytest.approx(1 / 3)]
    assert r.comp_rate.tolist() == [1.0]
    assert r.both_rate.tolist() == [pytest.approx(2 / 3)]
    assert r.eligible.tolist() == [3]
    # a stack of panels: the raw panel itself never reverses on its own selection half
    stacked = replay(RAW, np.stack([COMP, RAW]), SELECT, 0.05)
    assert stacked.both_rate[:, 0].tolist() == [pytest.approx(2 / 3), 0.0]
    assert stacked.comp_rate[1, 0] == pytest.approx(1 / 3)
    # a 0.6 gap leaves only pair 0<1: compressed reverses it on both halves, raw does not
    wide = replay(RAW, COMP, SELECT, 0.6)
    assert (wide.eligible.tolist(), wide.raw_rate.tolist(), wide.both_rate.tolist()) == ([1], [0.0], [1.0])


def test_both_half_excess_agrees_with_the_primary_replay() -> None:
    rng = np.random.default_rng(3)
    raw = (rng.random((5, 30)) < np.linspace(0.2, 0.8, 5)[:, None]).astype(float)
    comp = (rng.random((5, 30)) < 0.5).astype(float)
    ours = both_half_reversals(raw, comp, n_splits=60, seed=11)
    primary = excess_flips(raw, comp, n_splits=60, seed=11)
    assert ours.excess.median == pytest.approx(primary.median)
    assert (ours.excess.low, ours.excess.high) == pytest.approx((primary.low, primary.high))
    assert ours.excess.n == primary.n_splits_used
    assert 0.0 <= ours.both.low <= ours.both.median <= ours.both.high <= 1.0


def test_independent_uniform_uses_pooled_conditional_rates() -> None:
    rng = np.random.default_rng(0)
    raw = np.array([[1, 0], [0, 0]], dtype=float)
    # every raw-wrong cell rescued, no raw-correct cell damaged: every draw is all-correct
    assert (independent_uniform(raw, np.ones((2, 2)), 4, rng) == 1.0).all()
    # the reverse: nothing rescued, the raw-correct cell damaged
    assert (independent_uniform(raw, np.zeros((2, 2)), 4, rng) == 0.0).all()
    # rescue 1 of 4 raw-wrong cells (0.25), damage 2 of 4 raw-correct cells (0.5), pooled over readers
    raw = np.array([[1, 1, 0, 0], [1, 1, 0, 0]], dtype=float)
    comp = np.array([[0, 1, 1, 0], [0, 1, 0, 0]], dtype=float)
    draws = independent_uniform(raw, comp, 4000, rng)
    assert (draws[:, raw == 0] == 1).mean() == pytest.approx(0.25, abs=0.02)
    assert (draws[:, raw == 1] == 0).mean() == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ValueError, match="binary"):
        independent_uniform(raw, comp * 0.5, 1, rng)


def test_row_exchangeable_permutes_within_raw_outcome_groups() -> None:
    rng = np.random.default_rng(1)
    raw = np.array([[1, 0], [1, 1], [0, 1]], dtype=float)
    comp = np.array([[1, 0], [0, 1], [1, 0]], dtype=float)
    draws = row_exchangeable(raw, comp, 400, rng)
    # row 0: readers 0 and 1 (raw right) swap their compressed 1 and 0; reader 2 (alone) keeps its 1
    assert (draws[:, 2, 0] == 1).all()
    assert sorted(set(draws[:, 0, 0].tolist())) == [0.0, 1.0]
    assert (draws[:, 0, 0] + draws[:, 1, 0] == 1).all()
    assert 0.4 < draws[:, 0, 0].mean() < 0.6
    # row 1: reader 0 is the only raw-wrong reader and keeps its 0; readers 1, 2 share {1, 0}
    assert (draws[:, 0, 1] == 0).all() and (draws[:, 1, 1] + draws[:, 2, 1] == 1).all()
    # continuous scores: groups are equal raw scores
    f1 = row_exchangeable(np.array([[0.5], [0.5], [0.2]]), np.array([[0.1], [0.9], [0.3]]), 50, rng)
    assert (f1[:, 2, 0] == 0.3).all() and (np.sort(f1[:, :2, 0], axis=1) == [0.1, 0.9]).all()


def test_nulls_without_transitions_never_flip() -> None:
    # compressed == raw: both nulls reproduce the raw panel, so null excess and both-half rates are 0
    raw = np.array([[0, 0, 0, 1, 0, 0], [1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=float)
    for kind in ("independent_uniform", "row_exchangeable"):
        null = null_replay(raw, raw, kind, 0.5, n_draws=30, n_splits=7, split_seed=2, draw_seed=3)
        assert (null.excess.median, null.excess.low, null.excess.high) == (0.0, 0.0, 0.0)
        assert (null.both.median, null.both.high, null.both.n) == (0.0, 0.0, 30)
        assert null.share_exceeded == 1.0  # 0.5 exceeds every draw's 0
        assert null_replay(raw, raw, kind, 0.0, 30, 7, 2, 3).share_exceeded == 0.0  # ties do not exceed
    with pytest.raises(ValueError, match="unknown null"):
        null_replay(raw, raw, "uniform", 0.0, 1, 1, 0, 0)


def test_transition_homogeneity_by_hand() -> None:
    raw = np.array([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=float)
    comp = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], dtype=float)
    t = transition_homogeneity(raw, comp)
    assert t.rescue == [0.5, 0.0] and t.damage == [0.5, 0.0]
    assert t.rescue_sd == pytest.approx(math.sqrt(0.125))  # sd of (0.5, 0), ddof 1
    # readers x {rescued, not} = [[1, 1], [0, 2]]: expected [[.5, 1.5], [.5, 1.5]], chi2 = 4/3, dof 1
    assert t.rescue_chi2 == pytest.approx(4 / 3) and t.rescue_dof == 1
    assert t.rescue_p == pytest.approx(math.erfc(math.sqrt(2 / 3)))  # chi2(1) survival, no Yates
    assert t.damage_chi2 == pytest.approx(4 / 3) and t.reason == ""
    none = transition_homogeneity(raw, raw)
    assert none.rescue_chi2 is None and "same outcome" in none.reason and none.rescue_sd == 0.0


def test_mcnemar_cutoffs_match_the_exact_test() -> None:
    k = mcnemar_cutoffs(40, 0.05)
    assert (k[0], k[5], k[6], k[8], k[9]) == (-1, -1, 0, 0, 1)  # 2/32 > .05; 2/64, 2/256, 20/512 < .05
    for n in range(41):
        for low in range(n // 2 + 1):
            assert (low <= k[n]) == (exact_mcnemar(low, n - low) < 0.05)


def test_resolution_retention_by_hand() -> None:
    # rows are identical, so every half is the same: raw separates 0<1 and 0<2 (10 vs 0 discordant
    # rows on a 10-row half, p = 2^-9); compressed keeps 0<2 the same way and turns 0<1 around.
    raw = np.repeat(np.array([[0.0], [1.0], [1.0]]), 20, axis=1)
    comp = np.repeat(np.array([[0.0], [0.0], [1.0]]), 20, axis=1)
    kept = resolution_retention(raw, comp, n_splits=5, seed=0)
    assert (kept.same.median, kept.opposite.median, kept.median_raw_significant) == (0.5, 0.0, 2.0)
    flipped = resolution_retention(raw, np.repeat(np.array([[1.0], [0.0], [1.0]]), 20, axis=1), 5, 0)
    assert (flipped.same.median, flipped.opposite.median) == (0.0, 0.5)
    with pytest.raises(ValueError, match="binary"):
        resolution_retention(raw * 0.5, comp, 1, 0)


def test_resolution_retention_matches_pairwise_mcnemar_on_the_half() -> None:
    rng = np.random.default_rng(5)
    raw = (rng.random((4, 40)) < np.array([[0.1], [0.3], [0.6], [0.9]])).astype(float)
    comp = (rng.random((4, 40)) < np.array([[0.3], [0.4], [0.5], [0.8]])).astype(float)
    half = np.random.default_rng(9).permutation(40)[:20]
    same = opposite = significant = 0
    for a in range(4):
        for b in range(a + 1, 4):
            rb, rc, rp = pair_mcnemar(raw[a, half] == 1, raw[b, half] == 1)
            cb, cc, cp = pair_mcnemar(comp[a, half] == 1, comp[b, half] == 1)
            if rp < 0.05:
                significant += 1
                same += cp < 0.05 and np.sign(rc - rb) == np.sign(cc - cb)
                opposite += cp < 0.05 and np.sign(rc - rb) == -np.sign(cc - cb)
    ours = resolution_retention(raw, comp, n_splits=1, seed=9)
    assert significant and ours.median_raw_significant == significant
    assert ours.same.median == pytest.approx(same / significant)
    assert ours.opposite.median == pytest.approx(opposite / significant)


def test_resolution_cost_by_hand() -> None:
    # D_raw = (1, 1, 0, 0): mean 1/2, var 1/3; D_comp = (1, 0, 0, 0): mean 1/4, var 1/4; rho = 1/2
    raw = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=float)
    comp = np.array([[0, 0, 0, 0], [1, 0, 0, 0]], dtype=float)
    cost = resolution_cost(raw, comp, n_splits=3, seed=0)
    assert cost.n_ratio_median == pytest.approx((1 / 4) / (1 / 3) / (1 / 2) ** 2)  # 3.0
    assert (cost.n_pairs, cost.n_nonpositive, cost.n_undefined) == (1, 0, 0)
    assert cost.pair_ratios == [(0, 1, pytest.approx(3.0))]
    # reversed under compression: rho = -1/2 has no finite ratio and is counted, not used
    reversed_ = resolution_cost(raw, np.array([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=float), 3, 0)
    assert reversed_.n_ratio_median is None and reversed_.n_nonpositive == 1 and reversed_.pair_ratios == []


def test_resolution_cost_crossfit_selects_on_one_half_and_estimates_on_the_other() -> None:
    rng = np.random.default_rng(2)
    raw = (rng.random((3, 12)) < np.array([[0.2], [0.5], [0.9]])).astype(float)
    comp = (rng.random((3, 12)) < np.array([[0.4], [0.5], [0.7]])).astype(float)
    order = np.random.default_rng(4).permutation(12)
    sel, held = order[:6], order[6:]
    ratios = []
    for a, b in ((0, 1), (0, 2), (1, 2)):
        if abs(raw[b, sel].mean() - raw[a, sel].mean()) < 0.05:
            continue
        dr, dc = raw[b, held] - raw[a, held], comp[b, held] - comp[a, held]
        if dr.mean() == 0 or dr.var() == 0 or dc.mean() / dr.mean() <= 0:
            continue
        ratios.append(dc.var(ddof=1) / dr.var(ddof=1) / (dc.mean() / dr.mean()) ** 2)
    cost = resolution_cost(raw, comp, n_splits=1, seed=4)
    assert ratios and cost.crossfit.median == pytest.approx(float(np.median(ratios)))


def test_token_cost_by_hand() -> None:
    raw_tokens = np.array([[100, 100, np.nan], [200, 200, 200.0]])
    comp_tokens = np.array([[50, 50, 50], [50, 50, 50.0]])
    tc = token_cost([(0, 1, 3.0)], raw_tokens, comp_tokens)
    # cells: 0.5, 0.5 (the NaN cell leaves the mean), 0.25 x 3: pair mean = (1 + 0.75) / 5 = 0.35
    assert tc.median == pytest.approx(3.0 * 0.35) and tc.token_ratio == pytest.approx(0.35)
    assert tc.n_pairs == 1 and tc.q25 == tc.q75 == tc.median
    assert token_cost([(0, 1, 3.0)], np.full((2, 3), np.nan), comp_tokens).median is None


def test_triplet_choice_prefers_another_family() -> None:
    means = np.array([0.1, 0.5, 0.45, 0.9])
    assert choose_triplet(means, ["A", "A", "B", "C"]) == (0, 2, 3)  # 0.45 of family B over 0.5 of A
    assert choose_triplet(means, ["A", "A", "A", "C"]) == (0, 1, 3)  # no other family: the closest
    assert choose_triplet(np.array([0.2, 0.2, 0.5, 0.8, 0.8]), list("abcde")) == (
        0,
        2,
        3,
    )  # ties: lower index


def _constant(means: list[float], rows: int = 8) -> np.ndarray:
    return np.repeat(np.array(means)[:, None], rows, axis=1)


def test_screen_gives_false_reassurance_when_the_reversal_is_outside_the_triplet() -> None:
    # raw 0.1 < 0.45 < 0.6 < 0.9; the triplet is readers 0, 1 (closest to 0.5), 3 and keeps its
    # scores; reader 2 falls to 0.3 under compression, reversing 1<2 in the broader panel only
    raw = _constant([0.1, 0.45, 0.6, 0.9])
    comp = _constant([0.1, 0.45, 0.3, 0.9])
    v = validate_screen(raw, comp, list("abcd"), n_splits=6, seed=0)
    assert v.primary == (0, 1, 3) and v.modal_triplet == (0, 1, 3) and v.modal_share == 1.0
    assert (v.screen_expand_share, v.panel_expand_share) == (0.0, 1.0)
    assert (v.false_reassurance_share, v.false_reassurance_given_expand) == (1.0, 1.0)
    assert (v.n_triplets, v.false_triplets) == (1, 1)
    assert (v.n_panel_reversals, v.visible_share) == (6, 0.0)  # 1<2 on each split, not in the triplet
    same = validate_screen(raw, raw, list("abcd"), n_splits=6, seed=0)
    assert (same.screen_expand_share, same.panel_expand_share, same.visible_share) == (0.0, 0.0, None)


def test_screen_expansion_triggers() -> None:
    raw = _constant([0.1, 0.45, 0.6, 0.9])
    # endpoint retention (0.9 - 0.1 -> 0.5 / 0.8 = 0.625) below .75: both expand, no false reassurance
    shrunk = validate_screen(raw, _constant([0.1, 0.45, 0.6, 0.6]), list("abcd"), 4, 0)
    assert (shrunk.screen_expand_share, shrunk.panel_expand_share, shrunk.false_reassurance_share) == (
        1,
        1,
        0,
    )
    # a .60 floor passes the triplet (0.625, 0.629, 0.622); the panel's 2 -> 3 pair (retention 0) expands
    floor = validate_screen(raw, _constant([0.1, 0.32, 0.6, 0.6]), list("abcd"), 4, 0, retention_floor=0.6)
    assert (floor.screen_expand_share, floor.panel_expand_share) == (0.0, 1.0)
    # raw endpoints 0.02 apart: endpoint retention is inadmissible, a missing required estimate
    flat = validate_screen(_constant([0.5, 0.51, 0.52]), _constant([0.5, 0.51, 0.52]), list("abc"), 4, 0)
    assert (flat.screen_expand_share, flat.panel_expand_share) == (1.0, 1.0)
    with pytest.raises(ValueError, match="3 readers"):
        validate_screen(raw[:2], raw[:2], list("ab"), 1, 0)


def test_leave_one_cell_out_errors_by_hand() -> None:
    assert spacing(np.array([0.1, 0.5, 0.3])) == pytest.approx(0.2)
    excess, spacings = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    base, index, held = loco_errors(excess, spacings, np.ones(3), np.array(["a", "a", "a"]))
    assert base == pytest.approx([0, 0, 0])  # excess = spacing / 10 exactly: the line predicts each cell
    # index x = 1 / spacing; without cell 0 the line through (1/2, .2), (1/3, .3) is .5 - .6x: -.1 at 1
    assert index == pytest.approx([0.2, 0.05, 0.2 / 3])  # cell 1: .4 - .3x at 1/2; cell 2: .3 - .2x at 1/3
    assert held == pytest.approx([1, 1, 1])
    # class dispersion never uses the held-out cell: cell 0 -> cell 1 (same class), cell 2 -> all others
    _, _, held = loco_errors(excess, spacings, np.array([1.0, 2.0, 4.0]), np.array(["a", "a", "b"]))
    assert held == pytest.approx([2.0, 1.0, 1.5])
    assert cluster_interval(np.array([0.5, 0.5]), np.array(["t", "t"]), 20, 0, draw="indices") == (0.5, 0.5)


def test_predictive_audit_tables() -> None:
    readers, panel = [], []
    for c, (comp, gains) in enumerate(
        [("x", (0.0, 0.1, 0.2)), ("x", (0.0, 0.2, 0.1)), ("y", (0.1, 0.1, 0.4))]
    ):
        cell = {"task": f"t{c % 2}", "evidence": "e", "compressor": comp, "setting": "-", "metric": "em"}
        for i, gain in enumerate(gains):
            readers.append(cell | {"reader": f"r{i}", "raw_mean": 0.2 * (i + 1) * (c + 1) / 3, "gain": gain})
        panel.append(cell | {"excess_flips": 0.1 * (c + 1)})
    out = predictive_audit(pd.DataFrame(readers), pd.DataFrame(panel), n_boot=10, seed=0)
    cells = out["audit_predictive_cells"].sort_values("excess_flips")  # rows come in task order
    assert cells["spacing"].tolist() == pytest.approx([0.2 / 3, 0.4 / 3, 0.2])
    assert cells["dispersion"].tolist() == pytest.approx([0.1, 0.1, math.sqrt(0.03)])
    summary = out["audit_predictive"].iloc[0]
    assert summary.n_cells == 3 and summary.n_tasks == 2 and summary.status == "ok"
    assert summary.mae_difference == pytest.approx(summary.index_mae - summary.baseline_mae)
    assert summary.baseline_mae == pytest.approx(cells["baseline_error"].mean())


def test_every_control_table_comes_out_of_the_aggregate(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    readers = [f"r{i}" for i in range(5)]
    skill = np.linspace(0.2, 0.8, 5)
    rows = []
    for i, reader in enumerate(readers):
        raw = rng.random(40) < skill[i]
        comp = np.where(raw, rng.random(40) < 0.8, rng.random(40) < 0.5)
        for j in range(40):
            rows.append(
                {
                    "row_id": f"q{j}",
                    "reader": reader,
                    "family": f"fam{i % 3}",
                    "compressor": "recomp",
                    "raw_em": float(raw[j]),
                    "comp_em": float(comp[j]),
                    "raw_f1": float(raw[j]) * 0.6 + 0.2,
                    "comp_f1": float(comp[j]) * 0.6 + 0.2 * (j % 2),
                }
            )
    scores = tmp_path / "scores.csv"
    pd.DataFrame(rows).to_csv(scores, index=False)
    out = tmp_path / "out"
    args = ["--scores", str(scores), "--out", str(out), "--no-log", "--no-plots", "--quiet"]
    fast = ["--splits", "40", "--boot", "20", "--null-draws", "12", "--null-splits", "9", "--workers", "1"]
    assert main([*args, *fast]) == 0
    nulls = pd.read_csv(out / "audit_nulls.csv").set_index(["metric", "null"])
    assert len(nulls) == 4 and set(nulls["n_null_draws"]) == {12} and set(nulls["n_null_splits"]) == {9}
    em = nulls.loc[("em", "independent_uniform")]
    assert em.status == "ok" and 0 <= em.null_both_rate_low <= em.null_both_rate_high <= 1
    assert 0 <= em.exceeded_share <= 1 and -1 <= em.obs_excess <= 1
    assert nulls.loc[("f1", "independent_uniform"), "status"].startswith("not applicable")
    assert nulls.loc[("f1", "row_exchangeable"), "status"] == "ok"
    transitions = pd.read_csv(out / "audit_transitions.csv").set_index("metric")
    assert 0 <= transitions.loc["em", "rescued_p"] <= 1 and transitions.loc["em", "rescued_dof"] == 4
    assert transitions.loc["f1", "status"].startswith("not applicable")
    resolution = pd.read_csv(out / "audit_resolution.csv").set_index("metric")
    assert 0 <= resolution.loc["em", "same_share"] <= 1 and resolution.loc["em", "n_half_rows"] == 20
    assert resolution.loc["em", "question_ratio"] > 0 and resolution.loc["em", "n_separated_pairs"] > 0
    assert resolution.loc["em", "token_status"].startswith("no prompt-token counts")
    assert math.isnan(resolution.loc["f1", "same_share"]) and "McNemar" in resolution.loc["f1", "status"]
    screen = pd.read_csv(out / "audit_screen.csv").set_index("metric")
    assert screen.loc["em", "n_splits_used"] == 40 and screen.loc["em", "primary_triplet"].count(" / ") == 2
    assert 0 <= screen.loc["em", "false_reassurance_share"] <= screen.loc["em", "panel_expand_share"] + 1e-12
    predictive = pd.read_csv(out / "audit_predictive.csv")  # one cell per metric: too few to fit
    assert set(predictive["status"]) == {"needs 3 cells of the metric"}
    assert (pd.read_csv(out / "audit_predictive_cells.csv")["status"] == "ok").all()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Audit control: order-preserving nulls" in html and "three-reader screen" in html


def test_null_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scores", "x.csv", "--null-draws", "0"]) == 2
    assert "--null-draws=0 must be a positive integer" in capsys.readouterr().err


def _answer(ok: bool, prompt_tokens: int) -> Answer:
    text = "yes" if ok else "no"
    served = {"endpoint": "http://127.0.0.1:8000/v1", "model": "m", "prompt_tokens": prompt_tokens}
    return Answer(text, text, float(ok), ok, None, "eos", served=served)


def test_records_through_the_aggregate_carry_served_prompt_tokens(tmp_path: Path) -> None:
    # four served readers, 12 rows; raw prompts bill 100 tokens, compressed ones 25: token ratio 1/4
    rng = np.random.default_rng(1)
    records = []
    for i, reader in enumerate(["a", "b", "c", "d"]):
        raw = rng.random(12) < 0.2 + 0.2 * i
        comp = rng.random(12) < 0.5
        for j in range(12):
            r = ratio_record(
                "t",
                f"s{j}",
                reader,
                "snapkv",
                0.5,
                references=["yes"],
                split=f"t|{reader}",
                prompt_hash=f"{j:064x}",
                n_context_tokens=80,
                n_question_tokens=10,
                config_hash="h",
                versions={},
                full=_answer(bool(raw[j]), 100),
            )
            r.pair(r.full, _answer(bool(comp[j]), 25))
            records.append(r.to_dict())
    for r in records:
        validate(r)
    (tmp_path / "cell.jsonl").write_text(dumps(records))
    options = Options(n_splits=20, n_boot=20, seed=1, progress=False, workers=1, null_draws=4, null_splits=5)
    tables = analyse(DirectorySource([tmp_path]), options).tables
    controls = ("audit_nulls", "audit_transitions", "audit_resolution", "audit_screen")
    for name in (*controls, "audit_predictive", "audit_predictive_cells"):
        assert name in tables
    resolution = tables["audit_resolution"].set_index("metric")
    assert resolution.loc["correct", "token_ratio"] == pytest.approx(0.25)
    assert resolution.loc["correct", "token_status"] in {
        "served prompt tokens",
        "no pair with a finite ratio",
    }
    assert set(tables["audit_nulls"]["n_null_draws"]) == {4}
    assert tables["audit_screen"].set_index("metric").loc["correct", "n_splits_used"] == 20
