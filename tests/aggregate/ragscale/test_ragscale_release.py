"""ragscale's own files through ``python -m kvx.aggregate --scores``, and its worked HotpotQA audit
(release github.com/aimsresearchlab/ragscale at 5c65b09, examples/openrouter-hotpotqa/audit/)
reproduced figure by figure.

The release's ``summary.json`` and its per-row ``paired_scores.csv`` (the columns an audit reads) are
committed (tests/fixtures/ragscale_openrouter_hotpotqa); ``KVX_RAGSCALE_AUDIT=FOLDER`` points
``test_summary_json_is_reproduced`` at the release's whole folder instead. The rest runs on
miniatures in the release's layout written here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.outcomes import RELEASE_LABELS, outcome
from kvx.aggregate.scores import audit_scores
from kvx.aggregate.stats.releases import upgrade_interval
from kvx.aggregate.stats.upgrades import retention

FIXTURE = Path(__file__).parents[2] / "fixtures" / "ragscale_openrouter_hotpotqa"
RELEASE_URL = (
    "https://github.com/aimsresearchlab/ragscale/blob/5c65b0967323c81224407096f3e6243f90e85d59/"
    "examples/openrouter-hotpotqa/audit/paired_scores.csv"
)


def _summary() -> dict:
    return json.loads((FIXTURE / "summary.json").read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- the committed release file


def test_fixture_files_match_their_listed_sha256() -> None:
    listed = re.findall(
        r"^\| (\S+) \| [\d,]+ \| `([0-9a-f]{64})` \|$", (FIXTURE / "README.md").read_text(), re.M
    )
    assert listed, "README.md lists no file"
    for name, digest in listed:
        assert hashlib.sha256((FIXTURE / name).read_bytes()).hexdigest() == digest, name


def test_summary_is_the_releases_serialization() -> None:
    text = (FIXTURE / "summary.json").read_text(encoding="utf-8")
    assert len(text) == 14961  # the release file's length (read_file total_chars)
    assert json.dumps(json.loads(text), indent=2) + "\n" == text  # reports.write_outputs
    run = _summary()["run"]
    assert (run["seed"], run["bootstrap_draws"], run["minimum_raw_gap"]) == (20260821, 2000, 0.05)


def test_release_figures_follow_kvx_rules() -> None:
    """kvx's retention and outcome rules give the release's own figures from its own upgrades."""
    for m in _summary()["metrics"]:
        assert m["current_compressed"] - m["current_raw"] == m["current_compression_gain"]
        assert m["candidate_raw"] - m["current_raw"] == m["raw_upgrade"]  # a difference of means
        assert m["candidate_compressed"] - m["current_compressed"] == m["compressed_upgrade"]
        assert retention(m["raw_upgrade"], m["compressed_upgrade"]) == m["upgrade_retention"]
        label = outcome(m["raw_upgrade"], m["compressed_upgrade"], m["retention_alert_threshold"])
        assert RELEASE_LABELS[m["outcome"]] == label
        assert m["order_reversed"] is (m["raw_upgrade"] * m["compressed_upgrade"] < 0)
        for s in m["slices"]:
            expected = retention(s["raw_upgrade"], s["compressed_upgrade"])
            assert s["retention"] == expected  # None (null) below the 5 pp gap: token_f1 comparison


# ----------------------------------------------------------------------------- the release's row bootstrap


def _release_bootstrap(raw: np.ndarray, comp: np.ndarray, draws: int, seed: int, gap: float) -> tuple:
    """The draw of ragscale's ``analysis.bootstrap_pair`` as its docstring and loop state it: one
    ``rng.integers(0, rows, size=rows)`` per draw, np.mean of b - a, retention where |raw| >= gap."""
    rng = np.random.default_rng(seed)
    ups, comps, ratios = [], [], []
    for _ in range(draws):
        idx = rng.integers(0, raw.shape[1], size=raw.shape[1])
        up, cup = float(np.mean(raw[1][idx] - raw[0][idx])), float(np.mean(comp[1][idx] - comp[0][idx]))
        ups.append(up)
        comps.append(cup)
        if abs(up) >= gap:
            ratios.append(cup / up)
    return tuple(tuple(float(np.percentile(v, q)) for q in (2.5, 97.5)) for v in (ups, comps, ratios))


@pytest.mark.parametrize("binary", [True, False])
def test_upgrade_interval_draws_the_releases_rows(binary: bool) -> None:
    rng = np.random.default_rng(4)
    raw, comp = rng.random((2, 100)), rng.random((2, 100))
    if binary:
        raw, comp = (raw < 0.6).astype(float), (comp < 0.7).astype(float)
    boot = upgrade_interval(raw, comp, n_boot=2000, seed=20260821)
    expected = _release_bootstrap(raw, comp, 2000, 20260821, 0.05)
    assert (boot.raw, boot.comp, boot.retention) == expected  # exactly, not approximately


# ----------------------------------------------------------------------------- the release's layout


def _release_rows(n: int = 12) -> list[dict]:
    """A miniature of ragscale run's paired_scores.csv: two readers, two metrics, two hints."""
    out = []
    for i in range(n):
        text = f"compressed evidence {i}"
        digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        for key, reader, family in (("current", "small/r", "small"), ("candidate", "big/r", "big")):
            strong = key == "candidate"
            em_raw = float(i % 4 != 0) if strong else float(i % 2 == 0)
            em_comp = float(i % 3 != 0)
            for metric, raw, comp in (
                ("exact_match", em_raw, em_comp),
                ("token_f1", em_raw / 2, em_comp / 4),
            ):
                out.append(
                    {
                        "example_id": f"ex-{i:02d}",
                        "reader": reader,
                        "reader_key": key,
                        "reader_family": family,
                        "raw_score": raw,
                        "compressed_score": comp,
                        "candidate_pool_id": f"sha256:pool{i}",
                        "compressed_artifact_hash": digest,
                        "compressor_id": "llm-summary:demo",
                        "raw_policy_id": "demo-raw",
                        "metric": metric,
                        "dataset": "demo",
                        "question": "q?",
                        "question_type": "bridge" if i < 8 else "comparison",
                        "hints_json": "{}",
                        "raw_answer": f"{reader} raw {i}",
                        "compressed_answer": "1838" if i == 0 else f"{reader} comp {i}",
                        "raw_latency_ms": 10.0,
                        "artifact_reused": False,
                        "difficulty": "hard",
                    }
                )
    return out


def _manifest(path: Path, rows: list[dict], tamper: dict[str, str] | None = None) -> Path:
    seen = {}
    for row in rows:
        i = int(row["example_id"][3:])
        seen[row["example_id"]] = {
            "example_id": row["example_id"],
            "compressed_artifact_hash": row["compressed_artifact_hash"],
            "compressed_evidence": (tamper or {}).get(row["example_id"], f"compressed evidence {i}"),
        }
    path.write_text("".join(json.dumps(v) + "\n" for v in seen.values()))
    return path


def _audit(path: Path, manifests: list[Path] | None = None, **options) -> dict[str, pd.DataFrame]:
    opts = Options(n_splits=10, n_boot=200, progress=False, **options)
    return audit_scores([path], opts, manifests).tables


def test_paired_scores_csv_is_read_as_ragscale_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "paired_scores.csv"
    pd.DataFrame(_release_rows()).to_csv(path, index=False)
    tables = _audit(path, min_slice_rows=4)
    readers = tables["audit_readers"].set_index(["metric", "reader"])
    # current em raw: even rows of 12 -> 0.5; candidate: i % 4 != 0 -> 9 / 12; both comp: i % 3 != 0 -> 8 / 12
    assert readers.at[("exact_match", "small/r"), "raw_mean"] == 0.5
    assert readers.at[("exact_match", "big/r"), "raw_mean"] == pytest.approx(0.75)
    assert readers.at[("exact_match", "big/r"), "family"] == "big"
    assert readers.at[("token_f1", "small/r"), "comp_mean"] == pytest.approx(8 / 12 / 4)
    pairs = tables["audit_pairs"]
    declared = pairs[
        pairs["kind"] == "declared"
    ]  # reader_key's current -> candidate, as the release compares
    assert list(zip(declared["metric"], declared["reader_a"], declared["reader_b"], strict=True)) == [
        ("exact_match", "small/r", "big/r"),
        ("token_f1", "small/r", "big/r"),
    ]
    assert set(tables["audit_panel"]["artifact_check"]) == {"identical text artifact"}  # sha256: prefix read
    slices = tables["audit_slices"].drop_duplicates(["field", "value"])  # hint_fields, in order
    assert list(zip(slices["field"], slices["value"], slices["n_rows"], strict=True)) == [
        ("question_type", "bridge", 8),
        ("question_type", "comparison", 4),
        ("difficulty", "hard", 12),
    ]
    changed = tables["audit_changed"]
    assert changed.loc[changed["row_id"] == "ex-00", "comp_answer_a"].iloc[0] == "1838"  # text, not a number


def test_records_jsonl_reads_as_the_csv(tmp_path: Path) -> None:
    rows = _release_rows()
    csv, jsonl = tmp_path / "paired_scores.csv", tmp_path / "records.jsonl"
    pd.DataFrame(rows).to_csv(csv, index=False)
    jsonl.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    a, b = _audit(csv), _audit(jsonl)
    for name in ("audit_readers", "audit_pairs", "audit_slices", "audit_changed"):
        pd.testing.assert_frame_equal(a[name], b[name])


def test_each_metric_is_seeded_as_ragscales_runner_does(tmp_path: Path) -> None:
    """release runner.py: metric i of the configured order gets seed + i."""
    path = tmp_path / "paired_scores.csv"
    rows = _release_rows()
    pd.DataFrame(rows).to_csv(path, index=False)
    pairs = _audit(path, seed=7)["audit_pairs"].set_index(["metric", "kind"])
    frame = pd.DataFrame(rows)
    for index, metric in enumerate(["exact_match", "token_f1"]):
        part = frame[frame["metric"] == metric].sort_values(
            ["reader_key", "example_id"], ascending=[False, True]
        )
        raw = part["raw_score"].to_numpy().reshape(2, -1)
        comp = part["compressed_score"].to_numpy().reshape(2, -1)
        boot = upgrade_interval(raw, comp, n_boot=200, seed=7 + index)
        row = pairs.loc[(metric, "declared")]
        assert (row["raw_upgrade_low"], row["raw_upgrade_high"]) == boot.raw
        assert (row["comp_upgrade_low"], row["comp_upgrade_high"]) == boot.comp


def test_manifest_hashes_are_checked(tmp_path: Path) -> None:
    rows = _release_rows()
    path = tmp_path / "paired_scores.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    clean = _manifest(tmp_path / "ok.jsonl", rows)
    assert _audit(path, [clean])["problems"].empty
    tampered = _manifest(tmp_path / "bad.jsonl", rows, {"ex-03": "other text"})
    problems = _audit(path, [tampered])["problems"]
    assert list(problems["key"]) == ["ex-03"] and problems["severity"].iloc[0] == "error"
    assert "compressed_evidence hashes to" in problems["message"].iloc[0]
    short = tmp_path / "short.jsonl"
    short.write_text("".join(clean.read_text().splitlines(keepends=True)[1:]))
    problems = _audit(path, [short])["problems"]
    assert (
        list(problems["key"]) == ["ex-00"] and "not in the artifact manifest" in problems["message"].iloc[0]
    )


def test_readers_given_different_artifacts_are_refused(tmp_path: Path) -> None:
    rows = _release_rows()
    for row in rows:
        if row["example_id"] == "ex-05" and row["reader_key"] == "candidate":
            row["compressed_artifact_hash"] = "sha256:" + "0" * 64
    path = tmp_path / "paired_scores.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    tables = _audit(path)
    assert (
        tables["audit_pairs"].empty
        and "refused: row ex-05" in tables["audit_panel"]["artifact_check"].iloc[0]
    )


def test_a_repeated_example_reader_metric_is_refused(tmp_path: Path) -> None:
    rows = _release_rows()
    path = tmp_path / "paired_scores.csv"
    pd.DataFrame([*rows, rows[0]]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="repeat an \\(example_id, reader, metric\\)"):
        _audit(path)


# ----------------------------------------------------------------------------- the worked example


def _release_folder() -> Path:
    """The committed columns, or the release's whole audit folder (``KVX_RAGSCALE_AUDIT``)."""
    folder = Path(os.environ.get("KVX_RAGSCALE_AUDIT", FIXTURE))
    assert (folder / "paired_scores.csv").is_file(), (
        f"no paired_scores.csv in {folder} (release: {RELEASE_URL})"
    )
    return folder


def _close(kvx: float | None, release: float | None) -> bool:
    if release is None or kvx is None or (isinstance(kvx, float) and math.isnan(kvx)):
        return release is None and (kvx is None or math.isnan(kvx))
    return kvx == pytest.approx(release, rel=1e-12, abs=1e-15)


def compare(tables: dict[str, pd.DataFrame], summary: dict) -> list[str]:
    """Every figure of ``summary.json``'s metrics that kvx's tables do not give, as 'metric figure: kvx
    vs release' lines (empty: reproduced)."""
    out = []
    readers = tables["audit_readers"].set_index(["metric", "reader"])
    pairs = tables["audit_pairs"]
    pairs = pairs[pairs["kind"] == "declared"].set_index("metric")
    slices, changed = tables["audit_slices"], tables["audit_changed"]
    for release in summary["metrics"]:
        m = dict(release)
        metric, current, candidate = m["metric"], m["current_reader"], m["candidate_reader"]
        pair = pairs.loc[metric]
        got = {
            "rows": readers.at[(metric, current), "n_rows"],
            "current_raw": readers.at[(metric, current), "raw_mean"],
            "current_compressed": readers.at[(metric, current), "comp_mean"],
            "current_compression_gain": readers.at[(metric, current), "gain"],
            "candidate_raw": readers.at[(metric, candidate), "raw_mean"],
            "candidate_compressed": readers.at[(metric, candidate), "comp_mean"],
            "candidate_compression_gain": readers.at[(metric, candidate), "gain"],
            "raw_upgrade": pair["raw_upgrade"],
            "compressed_upgrade": pair["comp_upgrade"],
            "upgrade_retention": pair["retention"],
            "current_rescue": readers.at[(metric, current), "rescue"],
            "current_damage": readers.at[(metric, current), "damage"],
            "candidate_rescue": readers.at[(metric, candidate), "rescue"],
            "candidate_damage": readers.at[(metric, candidate), "damage"],
        }
        for name, (low, high) in {
            "raw_upgrade_interval": ("raw_upgrade_low", "raw_upgrade_high"),
            "compressed_upgrade_interval": ("comp_upgrade_low", "comp_upgrade_high"),
            "retention_interval": ("retention_low", "retention_high"),
        }.items():
            got[f"{name}[0]"], got[f"{name}[1]"] = pair[low], pair[high]
            m[f"{name}[0]"], m[f"{name}[1]"] = m[name]
        for name, value in got.items():
            if not _close(None if pd.isna(value) else float(value), m[name]):
                out.append(f"{metric} {name}: kvx {value!r} vs release {m[name]!r}")
        if (
            bool(pair["order_reversed"]) != m["order_reversed"]
            or pair["outcome"] != RELEASE_LABELS[m["outcome"]]
        ):
            out.append(f"{metric} outcome: kvx {pair['outcome']} vs release {m['outcome']}")
        mine = slices[(slices["metric"] == metric) & (slices["kind"] == "declared")]
        if len(mine) != len(m["slices"]):
            out.append(f"{metric} slices: kvx {len(mine)} vs release {len(m['slices'])}")
        for (_, s), r in zip(mine.iterrows(), m["slices"], strict=False):
            same = (s["field"], s["value"], int(s["n_rows"])) == (r["field"], r["value"], r["rows"])
            for a, b in (
                ("raw_upgrade", "raw_upgrade"),
                ("comp_upgrade", "compressed_upgrade"),
                ("retention", "retention"),
            ):
                same &= _close(None if pd.isna(s[a]) else float(s[a]), r[b])
            if not same:
                out.append(f"{metric} slice {r['field']}={r['value']}: kvx {s.to_dict()} vs release {r}")
        if m["changed_examples"]:  # the release lists the first 10 for exact match only
            mine = changed[(changed["metric"] == metric) & (changed["kind"] == "declared")].head(10)
            got_changed = [
                [r["row_id"], r["question_type"], r["transition_a"], r["transition_b"]]
                + [r["raw_answer_a"], r["comp_answer_a"], r["raw_answer_b"], r["comp_answer_b"]]
                for _, r in mine.iterrows()
            ]
            if got_changed != [list(e.values()) for e in m["changed_examples"]]:
                out.append(f"{metric} changed examples: kvx {got_changed} vs release {m['changed_examples']}")
    return out


def test_summary_json_is_reproduced(tmp_path: Path) -> None:
    folder = _release_folder()
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    run = summary["run"]
    args = ["--scores", str(folder / "paired_scores.csv"), "--out", str(tmp_path / "out")]
    args += ["--no-log", "--quiet", "--no-plots", "--splits", "10"]
    args += ["--boot", str(run["bootstrap_draws"]), "--seed", str(run["seed"])]
    if (folder / "artifact_manifest.jsonl").is_file():
        args += ["--manifest", str(folder / "artifact_manifest.jsonl")]
    assert main(args) == 0
    tables = {
        name: pd.read_csv(
            tmp_path / "out" / f"{name}.csv", dtype={"value": str}, keep_default_na=False, na_values=[""]
        )
        for name in ("audit_readers", "audit_pairs", "audit_slices", "audit_changed", "problems")
    }
    assert tables["problems"].empty
    assert compare(tables, summary) == []


def test_a_text_holding_a_line_separator_stays_one_record(tmp_path: Path) -> None:
    """JSON Lines end at \\n only: U+2028 inside a stored summary or answer must not cut its record."""
    from kvx.aggregate.read.ragscale_scores import read_manifest
    from kvx.aggregate.scores import read_scores

    text = "first line\u2028second line"
    entry = {"example_id": "hpqa-0000", "compressed_artifact_hash": "sha256:" + "0" * 64, "text": text}
    manifest = tmp_path / "artifact_manifest.jsonl"
    manifest.write_text(json.dumps(entry, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_manifest(manifest)["text"].tolist() == [text]
    row = {
        "row_id": "q1",
        "reader": "a",
        "compressor": "c",
        "raw_em": 1.0,
        "comp_em": 0.0,
        "raw_answer": text,
    }
    scores = tmp_path / "scores.jsonl"
    scores.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_scores(scores)["raw_answer"].tolist() == [text]


def test_the_worked_example_draws_figures_1_and_3(tmp_path: Path) -> None:
    """The release's exact-match rows give Figure 1's endpoint bars, Figure 3's excess flips and its
    shortlist panel, in the aggregate folder and the report, with the release's own numbers."""
    scores = pd.read_csv(FIXTURE / "paired_scores.csv", dtype=str, keep_default_na=False)
    scores[scores["metric"] == "exact_match"].to_csv(tmp_path / "paired_scores.csv", index=False)
    out = tmp_path / "out"
    args = ["--scores", str(tmp_path / "paired_scores.csv"), "--out", str(out), "--no-log", "--quiet"]
    args += ["--only", "audit_endpoints,audit_shortlist,audit_panel", "--boot", "20", "--splits", "20"]
    assert main(args) == 0
    drawn = sorted(p.name for p in out.glob("*.png"))
    panel = "hotpotqa-demo-100_llm-summary-qwen-qwen3-14b_text_-_exact_match"
    assert drawn == [f"endpoints_{panel}.png", "excess_flips.png", f"shortlist_{panel}.png"]
    html = (out / "report.html").read_text()
    assert all(Path(name).stem in html for name in drawn)
    (m,) = [m for m in _summary()["metrics"] if m["metric"] == "exact_match"]
    row = pd.read_csv(out / "audit_endpoints.csv").iloc[0]
    assert (row.low_raw_mean, row.low_comp_mean) == (m["current_raw"], m["current_compressed"])
    assert (row.high_raw_mean, row.high_comp_mean) == (m["candidate_raw"], m["candidate_compressed"])
    assert row.lost_share == pytest.approx(1 - m["upgrade_retention"], abs=1e-12)
    winners = pd.read_csv(out / "audit_shortlist.csv")[["raw_winner", "comp_winner"]].drop_duplicates()
    assert winners.values.tolist() == [["meta-llama/llama-3.3-70b-instruct"] * 2]
