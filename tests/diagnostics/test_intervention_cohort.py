"""The intervention's cohort (KVDiagnosis section 5.3, "Low EAR predicts selective repair"): which
records it runs on, the run order it needs, its preset, and the per-signature cohort summary."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from kvx.aggregate.kvdiagnosis.intervention_cohort import COLUMNS, intervention_cohort, matched_controls
from kvx.aggregate.stats.resampling import paired_bootstrap_difference
from kvx.cli.preflight import diagnostic_label, diagnostics_of
from kvx.core.conf import conf_dir
from kvx.core.errors import ConfigError
from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.cohort import cohort_role
from kvx.diagnostics.intervention import Intervention
from kvx.pipeline.diagnose import diagnose
from kvx.testing.cli import composed, plan, refused
from kvx.testing.crafted import rec, run, write


def stored(ecov=0.95, dnll=0.5, top50=0.8, ear=0.2, coverage="measured") -> dict:
    """A record's coverage, likelihood and attention results; the defaults match only Table 4's
    low-EAR rule (ECov >= 0.90, EAR < 0.50, no drift, not stable enough for decoding/scoring)."""
    return {
        "coverage": {"status": coverage, "values": {} if coverage == "structural" else {"ecov": ecov}},
        "likelihood": {"status": "measured", "values": {"delta_nll": dnll, "top50": top50}},
        "attention": {"status": "measured", "values": {"ear": ear}},
    }


# ------------------------------------------------------------------------------ who is in the cohort


def test_the_cohort_is_c_to_w_rows_matching_only_the_low_ear_rule() -> None:
    """Paper §5.3: "Of the 104 rows matching only the low-EAR rule"."""
    assert cohort_role("low_ear", "C→W", stored()) == ("failure", "")
    assert cohort_role("low_ear", "C→W", stored(coverage="structural")) == ("failure", "")  # Table 4
    # low EAR and stable likelihood: two rules match (conflicting), so not "only" low EAR
    role, reason = cohort_role("low_ear", "C→W", stored(dnll=0.05, top50=0.95))
    assert role is None and "low_ear_candidate, decoding_scoring_candidate" in reason
    role, reason = cohort_role("low_ear", "C→W", stored(ecov=0.7))  # partial coverage, EAR moot
    assert role is None and "partial_mapped_coverage" in reason
    role, reason = cohort_role("low_ear", "C→W", stored(ear=0.6))
    assert role is None and "rules matched: none" in reason


def test_without_an_ear_a_row_is_outside_the_cohort_never_imputed() -> None:
    results = stored()
    results["attention"] = {"status": "not_applicable", "values": {}, "reason": "no map"}
    assert cohort_role("low_ear", "C→W", results)[0] is None
    del results["attention"]
    assert cohort_role("low_ear", "C→W", results)[0] is None


def test_c_to_c_controls_share_the_cohort_signature_and_other_transitions_never_run() -> None:
    assert cohort_role("low_ear", "C→C", stored()) == ("control", "")
    assert cohort_role("low_ear", "C→C", stored(ear=0.9))[0] is None
    for transition in ("W→C", "W→W", None):
        role, reason = cohort_role("low_ear", transition, stored())
        assert role is None and "C→W rows and C→C controls" in reason
        assert cohort_role("all", transition, stored())[0] is None


def test_cohort_all_keeps_every_paired_failure_and_success() -> None:
    assert cohort_role("all", "C→W", stored(ecov=0.1)) == ("failure", "")
    assert cohort_role("all", "C→C", {}) == ("control", "")


def test_a_row_outside_the_cohort_is_not_applicable_before_any_cache_is_touched() -> None:
    """The stub has no run: reaching past the cohort check would raise (an error, not N/A)."""

    def context(transition: str, results: dict) -> SimpleNamespace:
        return SimpleNamespace(record={"transition": transition}, results=results, run=None)

    result = Intervention().measure(context("C→W", stored(ecov=0.3)))  # type: ignore[arg-type]
    assert result.status == "not_applicable" and "low_mapped_coverage" in result.reason
    with pytest.raises(AttributeError):  # a cohort row goes on to the caches
        Intervention().measure(context("C→W", stored()))  # type: ignore[arg-type]


def test_each_diagnostic_sees_the_results_of_those_before_it() -> None:
    seen = {}

    class Probe(Diagnostic):
        def __init__(self, name: str) -> None:
            self.name = name

        def measure(self, context) -> DiagnosticResult:
            seen[self.name] = sorted(context.results)
            return DiagnosticResult("measured", {"x": 1})

    ctx = SimpleNamespace(record={"transition": "C→C"}, results={})
    diagnose([("a", Probe("a")), ("b", Probe("b"))], ctx, transformed=False)  # type: ignore[arg-type]
    assert seen == {"a": [], "b": ["a"]}


# ------------------------------------------------------------------------- configuration and identity


def cfg(names: list[str], **fields) -> OmegaConf:
    return OmegaConf.create({"diagnostics": names, "diagnostic_fields": {"intervention": fields}})


def test_the_low_ear_cohort_refuses_a_run_order_without_its_inputs_first() -> None:
    for names in (["intervention"], ["coverage", "likelihood", "intervention", "attention"]):
        with pytest.raises(ConfigError, match=r"must run before it .*diagnostics=\[coverage,likelihood,"):
            diagnostics_of(cfg(names))
    built = diagnostics_of(cfg(["coverage", "likelihood", "attention", "intervention"]))
    assert [n for n, _ in built][-1] == "intervention" and built[-1][1].cohort == "low_ear"
    assert diagnostics_of(cfg(["intervention"], cohort="all"))[0][1].cohort == "all"  # the old behaviour


def test_bad_intervention_fields_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="cohort='lowear' is not one of low_ear, all"):
        diagnostics_of(cfg(["intervention"], cohort="lowear"))
    with pytest.raises(ConfigError, match="diagnostic_fields.intervention.cohrt.*did you mean 'cohort'"):
        diagnostics_of(cfg(["intervention"], cohrt="all"))
    with pytest.raises(ConfigError, match="boost=0"):
        diagnostics_of(cfg(["intervention"], cohort="all", boost=0))


def test_the_cohort_is_part_of_a_runs_identity() -> None:
    """Runs made before ``cohort`` existed are tagged ``intervention`` (every row): never reused."""
    assert diagnostic_label("intervention", Intervention()) == "intervention(cohort=low_ear)"
    assert diagnostic_label("intervention", Intervention(cohort="all")) == "intervention(cohort=all)"
    boosted = diagnostic_label("intervention", Intervention(boost=2.0))
    assert boosted == "intervention(boost=2.0,cohort=low_ear)"
    built = diagnostics_of(cfg(["coverage", "likelihood"]))
    assert [diagnostic_label(n, d) for n, d in built] == ["coverage", "likelihood"]  # defaults: as before


def test_the_shipped_config_defaults_are_the_dataclass_defaults() -> None:
    shipped = OmegaConf.load(Path(conf_dir()) / "config.yaml").diagnostic_fields.intervention
    assert dict(shipped) == {"cohort": Intervention().cohort, "boost": Intervention().boost}


def test_the_intervention_preset_is_the_papers_grid() -> None:
    """RULER-8K/16K (EAR needs eager traces on RULER; §5.3, Table 13), the six methods with a native
    EAR at the three tiers, 100 sources per subtask (1100 per workload, Table 12)."""
    cfg = composed("+experiment=kvdiagnosis/intervention", return_hydra=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    # the main study's RULER diagnostics (coverage, likelihood, decoding, attention), then the intervention
    assert list(cfg.diagnostics) == ["coverage", "likelihood", "decoding", "attention", "intervention"]
    assert (cfg.diagnostic_fields.intervention.cohort, cfg.n_sources) == ("low_ear", 100)
    params = dict(cfg.hydra.sweeper.params)
    assert (
        params["press"] == "streaming_llm,snapkv,tova,keydiff,think,hqq"
        and params["ratio"] == "0.25,0.5,0.75"
    )
    assert params["context_tokens"] == "8192,16384"
    tasks = params["task"].split(",")
    assert len(tasks) == 11 and {"ruler_vt", "ruler_cwe", "ruler_fwe"} <= set(tasks)


@pytest.mark.slow
def test_the_intervention_preset_passes_preflight_with_the_tiny_reader(tmp_path: Path) -> None:
    """Every press and tier on one subtask (the full 396-cell grid composes the same way, only slower)."""
    given = ["+experiment=kvdiagnosis/intervention", "reader=tiny", "task=ruler_vt", "context_tokens=8192"]
    (sweep,) = plan(*given, f"outputs_dir={tmp_path}")
    assert len(sweep["cells"]) == 6 * 3
    line = refused("-m", *given, "diagnostics=[coverage,intervention]", f"outputs_dir={tmp_path}")
    assert "must run before it" in line


# ------------------------------------------------------------------------------------ the summary


def frame(rows: list[dict]) -> pd.DataFrame:
    base = {"status": "supported", "task": "t", "reader": "r", "setting": "0.5"}
    return pd.DataFrame([base | r for r in rows])


def failure(key, comp, reproduced, ev, sh, signature="low_ear_candidate") -> dict:
    return {
        "key": key,
        "compressor": comp,
        "transition": "C→W",
        "iv_signature": signature,
        "iv_reproduced": float(reproduced),
        "iv_repaired_evidence": float(reproduced and ev),
        "iv_repaired_sham": float(reproduced and sh),
        "iv_degraded_evidence": np.nan,
        "iv_degraded_sham": np.nan,
    }


def control(key, comp, ev, sh, signature="low_ear_candidate") -> dict:
    return {
        "key": key,
        "compressor": comp,
        "transition": "C→C",
        "iv_signature": signature,
        "iv_reproduced": np.nan,
        "iv_repaired_evidence": np.nan,
        "iv_repaired_sham": np.nan,
        "iv_degraded_evidence": float(ev),
        "iv_degraded_sham": float(sh),
    }


def test_the_papers_cohort_counts_give_its_reported_statistics() -> None:
    """Paper §5.3: 104 low-EAR-only rows, 96 reproduced; 28/96 vs 6/96, 23 evidence-only vs 1
    sham-only, 22.9 points (95% paired-bootstrap CI 14.6-32.3), exact McNemar p = 2.98e-6; 3/92
    matched C→C controls degraded."""
    outcomes = [(True, False)] * 23 + [(True, True)] * 5 + [(False, True)] + [(False, False)] * 67
    rows = [failure(f"w{i}", "snapkv", True, e, s) for i, (e, s) in enumerate(outcomes)]
    rows += [failure(f"n{i}", "snapkv", False, False, False) for i in range(8)]
    rows += [control(f"c{i}", "snapkv", i < 3, False) for i in range(92)]
    out = intervention_cohort(frame(rows), n_boot=10_000, seed=0).set_index("category")
    assert out.columns.tolist() == COLUMNS[1:] and out.index.tolist() == ["low_ear_candidate", "all"]
    row = out.loc["low_ear_candidate"]
    assert (row.n_rows, row.n_reproduced, row.repaired_evidence, row.repaired_sham) == (104, 96, 28, 6)
    # the paper's one-decimal percentages (6/96 = 6.25 is printed 6.3: half up)
    assert 100 * row.repair_rate_evidence == pytest.approx(29.2, abs=0.05)
    assert 100 * row.repair_rate_sham == pytest.approx(6.3, abs=0.05)
    assert 100 * row.paired_diff == pytest.approx(22.9, abs=0.05)
    assert (row.evidence_only, row.sham_only) == (23, 1)
    assert 100 * row.diff_ci_low == pytest.approx(14.6, abs=0.05)
    assert 100 * row.diff_ci_high == pytest.approx(32.3, abs=0.05)
    assert row.mcnemar_p == pytest.approx(50 / 2**24) and f"{row.mcnemar_p:.2e}" == "2.98e-06"
    assert (row.n_cc_matched, row.degraded_evidence) == (92, 3)
    assert 100 * row.degradation_rate_evidence == pytest.approx(3.3, abs=0.05)


def ten_row_fixture() -> tuple[list[dict], list[dict]]:
    """Two cells. snapkv: 8 cohort rows (7 reproduced), 3 control candidates; tova: 2 cohort rows
    (both reproduced), 4 candidates. Plus 2 partial-coverage C→W rows (a cohort=all record) and an
    ambiguous-signature C→C row."""
    snap = [(True, False)] * 3 + [(True, True), (False, False), (False, False), (False, True)]
    rows = [failure(f"ws{i}", "snapkv", True, e, s) for i, (e, s) in enumerate(snap)]
    rows.append(failure("ws7", "snapkv", False, False, False))
    rows += [failure("wt0", "tova", True, True, False), failure("wt1", "tova", True, False, False)]
    rows += [failure("wp0", "snapkv", True, True, False, "partial_mapped_coverage")]
    rows += [failure("wp1", "snapkv", True, False, False, "partial_mapped_coverage")]
    controls = [control(f"cs{i}", "snapkv", i == 0, False) for i in range(3)]
    tova = [(1, 0), (0, 1), (0, 0), (1, 1)]
    controls += [control(f"ct{i}", "tova", ev, sh) for i, (ev, sh) in enumerate(tova)]
    controls.append(control("ca0", "snapkv", True, True, "ambiguous"))
    return rows, controls


def test_the_cohort_summary_reproduces_a_hand_computed_fixture() -> None:
    rows, controls = ten_row_fixture()
    out = intervention_cohort(frame(rows + controls), n_boot=500, seed=3).set_index("category")
    assert out.index.tolist() == ["partial_mapped_coverage", "low_ear_candidate", "all"]  # Table 4's order
    row = out.loc["low_ear_candidate"]
    # 9 reproduced: evidence repairs 3+1+1 = 5, sham 1+1 = 2; discordant 4 evidence-only, 1 sham-only
    assert (row.n_rows, row.n_reproduced, row.repaired_evidence, row.repaired_sham) == (10, 9, 5, 2)
    assert row.repair_rate_evidence == pytest.approx(5 / 9) and row.paired_diff == pytest.approx(3 / 9)
    assert (row.evidence_only, row.sham_only) == (4, 1)
    assert row.mcnemar_p == pytest.approx(2 * (1 + 5) / 2**5)  # 2 P[Bin(5, 1/2) <= 1] = 0.375
    ev = np.array([1, 1, 1, 1, 0, 0, 0, 1, 0], bool)
    sh = np.array([0, 0, 0, 1, 0, 0, 1, 0, 0], bool)
    assert (row.diff_ci_low, row.diff_ci_high) == paired_bootstrap_difference(ev, sh, n_boot=500, seed=3)[1:]
    # controls: snapkv keeps all 3 (fewer than its 7 reproduced), tova the first 2 of 4 by sha256
    tova = sorted(range(4), key=lambda i: hashlib.sha256(f"3|ct{i}".encode()).hexdigest())[:2]
    degraded = [(1, 0), (0, 1), (0, 0), (1, 1)]
    assert (row.n_cc_candidates, row.n_cc_matched) == (7, 5)
    assert row.degraded_evidence == 1 + sum(degraded[i][0] for i in tova)
    assert row.degraded_sham == sum(degraded[i][1] for i in tova)
    partial = out.loc["partial_mapped_coverage"]
    assert (partial.n_reproduced, partial.repaired_evidence, partial.evidence_only) == (2, 1, 1)
    assert (partial.n_cc_candidates, partial.n_cc_matched) == (0, 0)
    assert np.isnan(partial.degradation_rate_evidence)  # no matched control: undefined, never 0
    everything = out.loc["all"]
    assert (everything.n_rows, everything.n_reproduced, everything.repaired_evidence) == (12, 11, 6)
    assert (everything.n_cc_candidates, everything.n_cc_matched) == (8, 5)  # the ambiguous row: unmatched


def test_the_bootstrap_interval_agrees_with_direct_row_resampling() -> None:
    rows, _ = ten_row_fixture()
    row = intervention_cohort(frame(rows[:10]), n_boot=20_000, seed=0).iloc[0]
    d = np.array([1, 1, 1, 0, 0, 0, -1, 1, 0], float)  # evidence - sham per reproduced row
    draws = np.random.default_rng(5).choice(d, size=(20_000, d.size)).mean(axis=1)
    low, high = np.percentile(draws, [2.5, 97.5])
    assert abs(row.diff_ci_low - low) <= 1 / 9 + 1e-9 and abs(row.diff_ci_high - high) <= 1 / 9 + 1e-9


def test_matched_controls_do_not_depend_on_row_order_and_follow_the_seed() -> None:
    rows, controls = ten_row_fixture()
    cw, cc = frame(rows), frame(controls)
    picked = set(matched_controls(cw, cc, seed=3)["key"])
    assert picked == set(matched_controls(cw, cc.iloc[::-1], seed=3)["key"])
    assert {"cs0", "cs1", "cs2"} <= picked and len(picked) == 5
    draws = {frozenset(matched_controls(cw, cc, seed=s)["key"]) for s in range(20)}
    assert len(draws) > 1  # the tova draw changes with the seed


def test_the_aggregate_reads_the_signature_from_stored_values(tmp_path: Path) -> None:
    """Records as the app writes them: the signature comes from their own coverage, likelihood and
    attention results (C→C rows too), and rows without a valid intervention stay out."""

    def diags(iv: dict, **kw) -> dict:
        out = {name: r | {"reason": "", "seconds": 0.0} for name, r in stored(**kw).items()}
        out["intervention"] = {"status": "measured", "values": iv, "reason": "", "seconds": 0.0}
        return out

    fix = {"reproduced": True, "repaired_evidence": True, "repaired_sham": False}
    records = [rec(source="w0", ok=False, diags=diags(fix))]
    records.append(rec(source="w1", ok=False, diags=diags(fix, ecov=0.3)))
    degraded = {"degraded_evidence": True, "degraded_sham": False}
    records.append(rec(source="c0", ok=True, diags=diags(degraded)))
    off = {"status": "not_applicable", "values": {}, "reason": "outside the low-EAR cohort", "seconds": 0.0}
    records.append(rec(source="c1", ok=True, diags={"intervention": off}))
    table = run(write(tmp_path, records)).tables["intervention_cohort"].set_index("category")
    assert table.index.tolist() == ["low_mapped_coverage", "low_ear_candidate", "all"]
    row = table.loc["low_ear_candidate"]
    assert (row.n_rows, row.repaired_evidence, row.n_cc_candidates) == (1, 1, 1)
    assert (row.n_cc_matched, row.degraded_evidence) == (1, 1)
