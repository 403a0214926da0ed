"""ragscale audit estimators against hand values: endpoint re-selection (Tables 2-3), held-out endpoints
(Table 8), panel floor (Table 9), graded rescue/damage (Table 4), headroom-scaled gain and corrected slope
(5.1, A.4), disjoint rows (A.4), the swap difference (Table 15) and the replay's settings (A.5)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.publish.report import write_html
from kvx.aggregate.ragscale.audit import audit, metrics
from kvx.aggregate.ragscale.endpoints import (
    endpoint_bootstrap,
    held_out_endpoints,
    panel_floor,
    swap_difference,
)
from kvx.aggregate.ragscale.gain_vs_raw import disjoint_rows, slope_and_headroom
from kvx.aggregate.ragscale.score_changes import score_changes
from kvx.aggregate.ragscale.settings import AuditSettings
from kvx.aggregate.ragscale.swap import swapped
from kvx.aggregate.stats.eiv import corrected_moments, eiv_bootstrap, eiv_correlation
from kvx.aggregate.stats.releases import family_row_draws
from kvx.aggregate.stats.upgrades import excess_flips, rescue_damage

# constant rows: every row resample is the panel itself, so only the families drawn change a draw
RAW_MEANS, COMP_MEANS = [0.1, 0.5, 0.9], [0.5, 0.6, 0.6]  # readers A, B, C (test_aggregate's panel)


def constant(means: list[float], n: int = 6) -> np.ndarray:
    return np.repeat(np.array(means)[:, None], n, axis=1)


def family_sets(n_boot: int, seed: int, n_rows: int, n_families: int = 3) -> list[frozenset[int]]:
    """The distinct families of each draw, replayed from the documented draw order."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        rng.integers(0, n_rows, n_rows)
        out.append(frozenset(rng.integers(0, n_families, n_families).tolist()))
    return out


# ----------------------------------------------------------------------------- Tables 2-3


def test_endpoint_bootstrap_reselects_endpoints_among_drawn_families() -> None:
    # families {A,C} or {A,B,C}: endpoints A, C: raw .8, comp .1, retention 1/8; {A,B}: .4, .1, 1/4;
    # {B,C}: .4, 0, 0; one family: no pair, raw 0, discarded (P = 3/27)
    boot = endpoint_bootstrap(constant(RAW_MEANS), constant(COMP_MEANS), ["a", "b", "c"], n_boot=400, seed=5)
    sets = family_sets(400, 5, 6)
    assert boot.n_undefined == sum(len(s) == 1 for s in sets) > 0
    assert boot.n_draws == 400 and boot.label == "family-by-row, endpoints re-selected"
    # the ratios are {0, 1/8, 1/4}, each extreme more than 2.5% of the draws
    assert boot.retention == pytest.approx((0.0, 0.25))
    assert boot.raw == pytest.approx((0.0, 0.8)) and boot.comp == pytest.approx((0.0, 0.1))


def test_endpoint_ties_go_to_the_name_first_and_copies_never_pair() -> None:
    # B and C tie at the top: the release picks B (min over (-mean, name)): comp upgrade .1, not .6
    boot = endpoint_bootstrap(constant([0.2, 0.8, 0.8]), constant([0.3, 0.4, 0.9]), ["f"] * 3, n_boot=50)
    assert boot.retention == pytest.approx((1 / 6, 1 / 6)) and boot.n_undefined == 0
    assert boot.label == "rows, endpoints re-selected (one family)"
    # one family holding both readers, drawn alone: its readers still pair; a lone reader never does
    lone = endpoint_bootstrap(constant([0.2, 0.8]), constant([0.3, 0.4]), ["a", "b"], n_boot=200, seed=2)
    assert lone.n_undefined == sum(len(s) == 1 for s in family_sets(200, 2, 6, n_families=2))


def slow_endpoint_bootstrap(raw, comp, families, n_boot, seed, gap):
    """Tables 2-3 literally: copy the drawn panel, pick endpoints by (mean, name) as the release does."""
    rng = np.random.default_rng(seed)
    names = sorted(set(families))
    groups = [[r for r, f in enumerate(families) if f == name] for name in names]
    ups, comps = [], []
    for _ in range(n_boot):
        cols = rng.integers(0, raw.shape[1], raw.shape[1])
        members = [r for g in rng.integers(0, len(names), len(names)) for r in groups[g]]
        means = {r: raw[r, cols].mean() for r in members}
        weak = min(members, key=lambda r: (means[r], r))
        strong = min(members, key=lambda r: (-means[r], r))
        ups.append(raw[strong, cols].mean() - raw[weak, cols].mean())
        comps.append(comp[strong, cols].mean() - comp[weak, cols].mean())
    ups, comps = np.array(ups), np.array(comps)
    ok = ups >= gap - 1e-12
    return np.percentile(comps[ok] / ups[ok], [2.5, 97.5]), int((~ok).sum())


def test_endpoint_bootstrap_matches_copied_panels() -> None:
    rng = np.random.default_rng(3)
    skill = np.array([0.2, 0.35, 0.5, 0.6, 0.8])[:, None]
    raw = (rng.random((5, 40)) < skill).astype(float)
    comp = (rng.random((5, 40)) < 0.55).astype(float)
    families = ["x", "x", "y", "z", "z"]
    boot = endpoint_bootstrap(raw, comp, families, n_boot=300, seed=11, min_gap=0.05)
    (low, high), undefined = slow_endpoint_bootstrap(raw, comp, families, 300, 11, 0.05)
    assert boot.retention == pytest.approx((low, high), abs=1e-12) and boot.n_undefined == undefined


# ----------------------------------------------------------------------------- Table 8


def first_halves(n_splits: int, seed: int, n_rows: int) -> list[frozenset[int]]:
    rng = np.random.default_rng(seed)
    return [frozenset(rng.permutation(n_rows)[: n_rows // 2].tolist()) for _ in range(n_splits)]


def test_held_out_endpoints_by_split_type() -> None:
    # A raw [1,0,0,0], B raw [1,1,1,0]; comp A 0, B [1,0,1,0]. Halves {0,1}|{2,3}: both orientations
    # select A -> B and hold out +.5 raw, +.5 comp: retention 1, 1. {0,2}|{1,3}: held-out comp 0 and
    # +1: retention 0, 2. {0,3}|{1,2}: {0,3} ties A and B (no pair), {1,2} holds out 0: both invalid.
    raw = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=float)
    comp = np.array([[0, 0, 0, 0], [1, 0, 1, 0]], dtype=float)
    held = held_out_endpoints(raw, comp, n_splits=60, seed=4)
    types = [min(h, frozenset(range(4)) - h, key=sorted) for h in first_halves(60, 4, 4)]
    x, y = types.count(frozenset({0, 1})), types.count(frozenset({0, 2}))
    z = 60 - x - y
    assert held.n_orientations == 120 and held.n_valid == 2 * (x + y)
    assert held.valid_share == pytest.approx((x + y) / 60)
    expected = np.array([1.0] * 2 * x + [0.0, 2.0] * y)
    assert held.retention == np.median(expected)
    assert (held.low, held.high) == tuple(np.percentile(expected, [2.5, 97.5]))
    assert held.n_pairs == 1 and held.modal_pair == (0, 1)
    assert held.modal_share == pytest.approx((120 - z) / 120)  # the {0,3} orientations select no pair


def test_held_out_endpoints_stable_pair() -> None:
    held = held_out_endpoints(constant([0.0, 0.5, 1.0], 8), constant([0.5, 0.5, 0.75], 8), n_splits=20)
    assert (held.retention, held.low, held.high) == (0.25, 0.25, 0.25)
    assert held.valid_share == 1.0 and held.modal_pair == (0, 2) and held.modal_share == 1.0


# ----------------------------------------------------------------------------- Table 9, Table 4


def test_panel_floor_by_hand() -> None:
    floor = panel_floor(constant(RAW_MEANS), constant(COMP_MEANS))
    assert floor["raw_mean"] == pytest.approx(0.5) and floor["comp_mean"] == pytest.approx(17 / 30)
    assert floor["raw_range"] == pytest.approx(0.8) and floor["comp_range"] == pytest.approx(0.1)


def test_graded_rescue_and_damage_by_hand() -> None:
    # changes +.5, -.5, 0, +.5 over the four pairs: positive mass 1/4, negative -1/8, sum = mean gain
    raw, comp = np.array([[0.5, 1.0], [0.0, 0.25]]), np.array([[1.0, 0.5], [0.0, 0.75]])
    assert score_changes(raw, comp) == (0.25, -0.125)
    assert score_changes(raw[1], comp[1]) == (0.25, 0.0)
    with pytest.raises(ValueError, match="same-shape"):
        score_changes(raw, comp[:, :1])


def test_binary_rescue_damage_are_the_releases_transition_rates() -> None:
    # ragscale analysis.transition_rates: rescue = mean((raw == 0) & (comp == 1)) over all pairs,
    # damage = mean(comp[raw == 1] == 0); here 2 of 6 pairs rescued, 1 of 3 raw-correct damaged
    raw = np.array([[1, 0, 0], [1, 1, 0]], dtype=float)
    comp = np.array([[1, 1, 1], [0, 1, 0]], dtype=float)
    rd = rescue_damage(raw == 1, comp == 1)
    assert (rd.rescue, rd.damage) == (2 / 6, 1 / 3)
    assert score_changes(raw, comp) == (2 / 6, -1 / 6)  # the graded masses: the damaged share of all pairs


# ----------------------------------------------------------------------------- 5.1, A.4

# constant rows: every sampling moment is 0 and M* is the covariance of the reader means.
# raw .2, .5, .6; comp .6, .7, .6: gains .4, .2, 0; headroom-scaled .4/.8, .2/.5, 0/.4 = .5, .4, 0.
# deviations (x30): raw -7, 2, 5; gain 6, 0, -6; scaled 6, 3, -9.
HEAD_RAW, HEAD_COMP = [0.2, 0.5, 0.6], [0.6, 0.7, 0.6]


def test_corrected_slope_and_headroom_correlation_by_hand() -> None:
    extra = slope_and_headroom(constant(HEAD_RAW), constant(HEAD_COMP), ["f"] * 3, n_boot=30, seed=1)
    assert extra.slope == pytest.approx(-72 / 78)  # sum dx dg / sum dx^2
    assert extra.headroom_r == pytest.approx(-81 / math.sqrt(78 * 126))
    assert extra.slope_low == pytest.approx(extra.slope) and extra.slope_high == pytest.approx(extra.slope)
    assert extra.headroom_low == pytest.approx(extra.headroom_r) and extra.headroom_nonfinite_draws == 0
    # a reader at 100% raw has no headroom: undefined, never a made-up value
    full = slope_and_headroom(constant([0.2, 0.5, 1.0]), constant(HEAD_COMP), ["f"] * 3, n_boot=10)
    assert full.headroom_r is None and full.headroom_nonfinite_draws == 10


def test_headroom_is_the_eiv_of_scaled_gains_and_draws_are_eiv_bootstraps() -> None:
    rng = np.random.default_rng(6)
    skill = np.array([0.15, 0.3, 0.45, 0.6, 0.75, 0.85])[:, None]
    raw = (rng.random((6, 50)) < skill).astype(float)
    comp = (rng.random((6, 50)) < 0.6).astype(float)
    families = ["a", "a", "b", "b", "c", "c"]
    extra = slope_and_headroom(raw, comp, families, n_boot=200, seed=9)
    gain = comp - raw
    scaled = gain / (1 - raw.mean(axis=1))[:, None]
    assert extra.headroom_r == pytest.approx(eiv_correlation(raw, scaled).r_clipped, abs=1e-12)
    assert extra.slope == pytest.approx(eiv_correlation(raw, gain).slope, abs=1e-12)
    # a draw's counts give the M* of the copied panel it describes
    rows, readers = next(family_row_draws(50, families, 3, seed=9))
    cols, members = np.repeat(np.arange(50), rows[1]), np.repeat(np.arange(6), readers[1])
    ones_rows, ones_readers = np.ones((1, cols.size)), np.ones((1, members.size))
    copied = corrected_moments(raw[members][:, cols], gain[members][:, cols], ones_rows, ones_readers)
    assert corrected_moments(raw, gain, rows[1:2], readers[1:2]) == pytest.approx(copied, abs=1e-15)
    # and, same seed, the same draws as eiv_bootstrap
    boot = eiv_bootstrap(raw, gain, n_boot=200, seed=9, families=families)
    m = np.concatenate(
        [corrected_moments(raw, gain, r, w) for r, w in family_row_draws(50, families, 200, 9)]
    )
    ok = (m[:, 0, 0] > 0) & (m[:, 1, 1] > 0)
    corr = np.clip(m[ok, 0, 1] / np.sqrt(m[ok, 0, 0] * m[ok, 1, 1]), -1, 1)
    assert tuple(np.percentile(corr, [2.5, 97.5])) == pytest.approx((boot.low, boot.high), abs=1e-12)


def test_disjoint_rows_by_hand_and_by_loops() -> None:
    same = disjoint_rows(constant(HEAD_RAW), constant(HEAD_COMP), n_splits=20)
    r = -72 / math.sqrt(78 * 72)  # every split sees the reader means themselves
    assert same.median == pytest.approx(r) and same.low == pytest.approx(r) and same.n_undefined == 0
    rng = np.random.default_rng(2)
    raw, comp = rng.random((4, 9)), rng.random((4, 9))
    got = disjoint_rows(raw, comp, n_splits=50, seed=3)
    perms = np.random.default_rng(3)
    loop = []
    for _ in range(50):
        p = perms.permutation(9)
        loop.append(np.corrcoef(raw[:, p[:4]].mean(1), (comp - raw)[:, p[4:]].mean(1))[0, 1])
    assert got.median == pytest.approx(np.median(loop), abs=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)


# ----------------------------------------------------------------------------- Table 15


def test_swap_difference_by_hand() -> None:
    ref, swap = constant(RAW_MEANS), constant([0.2, 0.5, 0.8])
    # endpoints A, C on the reference (.8): swap keeps .6 (.75), compression .1 (.125): difference .625
    one = swap_difference(ref, swap, constant(COMP_MEANS), ["f"] * 3, n_boot=40)
    assert (one.swap_retention, one.comp_retention) == pytest.approx((0.75, 0.125))
    assert one.difference == pytest.approx(0.625) and (one.low, one.high) == pytest.approx((0.625, 0.625))
    # families drawn: {A,B}: (.3 - .1) / .4 = .5; {B,C}: (.3 - 0) / .4 = .75; one family: discarded
    fam = swap_difference(ref, swap, constant(COMP_MEANS), ["a", "b", "c"], n_boot=400, seed=5)
    assert (fam.low, fam.high) == pytest.approx((0.5, 0.75))
    assert fam.n_undefined == sum(len(s) == 1 for s in family_sets(400, 5, 6))


# ----------------------------------------------------------------------------- A.5 settings


def test_tie_rules_by_split_type() -> None:
    # A 0 everywhere, B raw [1,1,0,0], comp [0,0,1,1]. Selection {0,1}: B leads, the held-out raw
    # ties (T); {2,3}: no gap (omitted); any other half: B leads by .5 on both halves, no reversal (N)
    raw = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=float)
    comp = np.array([[0, 0, 0, 0], [0, 0, 1, 1]], dtype=float)
    halves = first_halves(120, 8, 4)
    t = halves.count(frozenset({0, 1}))
    n = 120 - t - halves.count(frozenset({2, 3}))
    plain = excess_flips(raw, comp, n_splits=120, seed=8)
    assert plain.n_splits_used == t + n and plain.raw_rate == 0.0 and plain.median == 0.0
    excluded = excess_flips(raw, comp, n_splits=120, seed=8, ties="exclude")
    assert excluded.n_splits_used == n
    adverse = excess_flips(raw, comp, n_splits=120, seed=8, ties="adverse")  # T: raw rate 1, excess -1
    assert adverse.n_splits_used == t + n and t / (t + n) > 0.025
    assert (adverse.median, adverse.low, adverse.high) == (0.0, -1.0, 0.0)
    with pytest.raises(ValueError, match="ties must be one of"):
        excess_flips(raw, comp, n_splits=5, ties="never")


def test_settings_are_checked_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match="did you mean 'adverse'"):
        AuditSettings(ties="advers")
    with pytest.raises(ValueError, match="interval 'rows' is not one of family-row, row; did you mean"):
        AuditSettings(interval="rows")
    with pytest.raises(ValueError, match="min_gap 0 must be in"):
        AuditSettings(min_gap=0.0)
    assert AuditSettings(mcnemar=True).mcnemar_label(False).startswith("not applicable")


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        (["--ties", "never"], "'never'"),
        (["--interval", "fixed"], "'fixed'"),
        (["--min-gap", "0"], "--min-gap=0"),
    ],
)
def test_bad_audit_options_are_argparse_errors(flag, shown, capsys) -> None:
    assert main(["--scores", "x.csv", *flag]) == 2
    assert shown in capsys.readouterr().err


# ----------------------------------------------------------------------------- the audit path


def panel_rows(n_rows: int = 40) -> pd.DataFrame:
    """6 readers x 3 families x ``n_rows``: a compression panel and a retriever swap sharing its reference.

    Evidence 'none' answers are each reader's raw (FullCache) answers, so ``--swap none:dense`` starts
    from the compression panel's reference, as B.5's swap and compression both start from BM25."""
    rng = np.random.default_rng(0)
    skill = np.linspace(0.2, 0.85, 6)
    out = []
    for r, p in enumerate(skill):
        raw = (rng.random(n_rows) < p).astype(float)
        conditions = {
            "recomp": (rng.random(n_rows) < 0.55).astype(float),
            "none": raw,
            "dense": (rng.random(n_rows) < p * 0.9).astype(float),
        }
        for evidence, comp in conditions.items():
            for i in range(n_rows):
                # every 10th row not judged; the judge never ran on the dense condition
                judged = float(comp[i]) if i % 10 and evidence != "dense" else math.nan
                out.append(
                    {
                        "status": "supported", "task": "hotpotqa", "evidence": evidence,
                        "transform": evidence, "compressor": "none", "setting": "-",
                        "reader": f"r{r}", "revision": "x",
                        "family": "abc"[r // 2], "prompt_format": "plain", "row_id": f"q{i:02d}",
                        "full_correct": raw[i], "comp_correct": comp[i],
                        "full_score": raw[i] * 0.6 + 0.2, "comp_score": comp[i] * 0.7 + 0.1,
                        "full_j.llm": raw[i], "comp_j.llm": judged,
                        "text_hash": f"{evidence}{i}".ljust(64, "0"),
                    }
                )  # fmt: skip
    return pd.DataFrame(out)


def test_a_panel_reports_every_new_column(tmp_path) -> None:
    rows = panel_rows()
    swap, found = swapped(rows, "none", "dense")
    assert not found
    settings = AuditSettings(mcnemar=True, ties="exclude", min_gap=0.1)
    tables = audit(pd.concat([rows, swap], ignore_index=True), [("r0", "r5")], 30, 40, 1, settings)
    assert "judge:llm" in metrics(rows)
    pairs = tables.pairs.set_index(["evidence", "metric", "kind"])
    ends = pairs.loc[("recomp", "correct", "endpoints")]
    assert ends["interval"] == "family-by-row, endpoints re-selected" and ends["min_gap"] == 0.1
    assert pairs.loc[("recomp", "correct", "declared"), "interval"] == "rows, fixed pair"
    panel = tables.panel.set_index(["evidence", "metric"])
    assert panel.loc[("recomp", "correct"), "mcnemar_filter"] == "p<0.05"
    assert panel.loc[("recomp", "score"), "mcnemar_filter"].startswith("not applicable")
    assert (panel["ties"] == "exclude").all()
    judge = panel.loc[("recomp", "judge:llm")]
    assert judge["n_rows"] == 36  # rows 0, 10, 20, 30 not judged: left out, not imputed
    judge_problems = [p for p in tables.problems if p.check == "audit_judge"]
    assert judge_problems and all("4 of 40 rows" in p.message for p in judge_problems)
    assert ("dense", "judge:llm") not in panel.index and not any("dense" in p.key for p in judge_problems)
    assert np.isfinite(panel.loc[("recomp", "correct"), ["eiv_slope", "headroom_eiv_r", "disjoint_r"]]).all()
    done = tables.swap_difference.query("status == 'ok' and metric == 'correct'")
    assert set(done["compression"]) == {"recomp"} and done["reference"].eq("none").all()
    # recomp's own raw answers are its reference; the dense condition's answers differ from them
    assert len(tables.heldout) == len(tables.floor) == len(tables.panel)
    html = write_html(tables.tables(), {}, tmp_path, "audit", {}).read_text()
    new = [
        "interval", "min_gap", "ties", "mcnemar_filter", "rescue_change", "damage_change", "eiv_slope",
        "headroom_eiv_r", "disjoint_r", "valid_share", "n_pairs_selected", "modal_pair", "raw_range",
        "comp_range", "retention_difference", "retention_difference_low", "judge:llm",
    ]  # fmt: skip
    for name in [*new, "audit_heldout", "audit_floor", "audit_swap_difference"]:
        assert name in html, name


def test_draws_kept_for_the_next_interval_are_the_fresh_draws(monkeypatch) -> None:
    from kvx.aggregate.stats import releases

    kept = [rows.copy() for rows, _ in family_row_draws(10, ["a", "b"], 600, 3)]
    monkeypatch.setattr(releases, "KEPT_CELLS", 10)  # too large to keep: drawn afresh
    fresh = [rows for rows, _ in family_row_draws(10, ["a", "b"], 600, 3)]
    assert len(kept) == len(fresh) == 2 and all((k == f).all() for k, f in zip(kept, fresh, strict=True))
    assert all(rows.sum(axis=1).tolist() == [10] * len(rows) for rows in fresh)


def test_the_options_reach_every_audit_table(tmp_path) -> None:
    rows = panel_rows(12).query("evidence == 'recomp'")
    table = rows.rename(columns={"full_correct": "raw_em", "comp_correct": "comp_em"})
    table = table.assign(raw_f1=table["full_score"], comp_f1=table["comp_score"], compressor="recomp")
    path = tmp_path / "scores.csv"
    table[["row_id", "reader", "family", "compressor", "raw_em", "comp_em", "raw_f1", "comp_f1"]].to_csv(path)
    out = tmp_path / "out"
    args = ["--scores", str(path), "--out", str(out), "--no-log", "--no-plots", "--quiet", "--boot", "20"]
    flags = [
        "--splits",
        "20",
        "--min-gap",
        "0.1",
        "--ties",
        "exclude",
        "--interval",
        "row",
        "--mcnemar-filter",
    ]
    assert main([*args, *flags]) == 0
    pairs = pd.read_csv(out / "audit_pairs.csv")
    assert (pairs["interval"] == "rows, fixed pair").all() and (pairs["min_gap"] == 0.1).all()
    panel = pd.read_csv(out / "audit_panel.csv").set_index("metric")
    assert (panel["ties"] == "exclude").all() and panel.loc["em", "mcnemar_filter"] == "p<0.05"
    assert panel.loc["f1", "mcnemar_filter"] == "not applicable: non-binary scores (unfiltered)"
    for name in ("audit_heldout", "audit_floor", "audit_swap_difference"):
        assert (out / f"{name}.csv").exists()
    assert pd.read_csv(out / "audit_heldout.csv")["min_gap"].eq(0.1).all()
