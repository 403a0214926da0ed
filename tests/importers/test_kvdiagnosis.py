"""``python -m kvx.importers kvdiagnosis``: a hand-made miniature of the KVDiagnosis release, converted
and checked record by record, then read by ``python -m kvx.aggregate --records``.

The miniature follows the release's documented layout (docs/data_format.md of ChosenQC/KVDiagnosis):
two datasets, five sources, three methods (SnapKV, ThinK, QuantizedCache) at the 75% and 25% retained
settings, ThinK at 25% an explicit N/A, and the six C->W runs in ``selected_failures`` with their
diagnostic columns (kvx.testing.kvdiagnosis_release). Every expected number below is counted by hand
from the tables there.
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest

from kvx.core.records import UNKNOWABLE, unknown_fields, validate
from kvx.importers.__main__ import main
from kvx.testing.kvdiagnosis_release import (
    COMP,
    DELTA_NLL,
    FULL,
    MODEL,
    NA_SLOT,
    REVISION,
    THINK_NA,
    imported_records,
    make_release,
    write_release_gz,
)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_release(tmp_path_factory.mktemp("KVDiagnosis"))


@pytest.fixture(scope="module")
def imported(release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("imported") / "kvdiagnosis"
    return out, main(["kvdiagnosis", str(release), "--out", str(out), "--quiet"])


def _by(records: list[dict], sample: str, method: str, retained: float) -> dict:
    [record] = [
        r
        for r in records
        if r["source_id"] == sample
        and r["provenance"]["release"]["method_name"] == method
        and r["provenance"]["release"]["retained_budget"] == retained
    ]
    return record


def test_layout_and_counts(release: Path, imported: tuple[Path, int]) -> None:
    out, code = imported
    assert code == 0
    names = sorted(p.name for p in out.iterdir())
    controls = [n for n in names if n.endswith(".controls.jsonl.gz")]
    assert [n for n in names if n not in controls] == [
        "hotpotqa.jsonl.gz",
        "import_manifest.json",
        "ruler8k.jsonl.gz",
    ]
    assert len(controls) == 2  # one control group per (task, reader)
    records = imported_records(out)
    assert len(records) == 30  # 5 sources x 3 methods x 2 settings
    assert Counter(r["status"] for r in records) == {"supported": 25, "unsupported": 5}
    assert Counter(r["transition"] for r in records if r["transition"]) == {
        "C→C": 9,
        "C→W": 6,
        "W→C": 2,
        "W→W": 8,
    }
    assert len({r["key"] for r in records}) == 30
    manifest = json.loads((out / "import_manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["records"] == 30 and counts["controls"] == 5 and counts["rejected"] == 0
    assert counts["by_status"] == {"supported": 25, "unsupported": 5}
    assert counts["by_transition"] == {"C→C": 9, "C→W": 6, "W→C": 2, "W→W": 8}
    assert counts["joins"]["c_to_w_with_diagnostic_row"] == 6
    assert counts["joins"].get("c_to_w_without_diagnostic_row", 0) == 0
    assert counts["joins"]["diagnostic_rows_without_a_ledger_run"] == 0
    assert counts["categories"] == {
        "low_mapped_coverage": 1,
        "structural_position_drift": 2,
        "ambiguous": 1,
        "conflicting": 1,
        "decoding_scoring_candidate": 1,
    }
    assert manifest["checks"]["summary_json"] == {"read": True, "differences": []}
    checked = manifest["checks"]["artifact_manifest"]
    assert checked["verified"] == 5 and checked["sha256_mismatch"] == [] and checked["not_listed"] == []
    assert len(manifest["files_read"]) == 7  # fullcache, 2 run files, 2 selected, summary, artifact manifest
    for entry in manifest["files_read"]:
        assert hashlib.sha256((release / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    for entry in manifest["files_written"]:
        assert (out / entry["path"]).is_file()
    assert set(manifest["unknown"]) == {
        "seed",
        "prompt_hash",
        "n_question_tokens",
        "config_hash",
        "full.token_ids",
        "full.stop_reason",
        "compressed.token_ids",
        "compressed.stop_reason",
    }
    assert manifest["unknown"]["seed"]["records"] == 30
    assert manifest["unknown"]["compressed.token_ids"]["records"] == 25  # unsupported runs have no answer


def test_every_record_valid_and_honest(imported: tuple[Path, int]) -> None:
    out, _ = imported
    for record in imported_records(out):
        validate(record)
        provenance = record["provenance"]
        assert provenance["origin"] == "external"
        assert provenance["source"] == "kvdiagnosis:kvdiagnosis.public_artifact.v0.4"
        # every null UNKNOWABLE field is listed with a reason, and only those
        assert set(unknown_fields(record)) == set(provenance["unknown"]), record["key"]
        assert all(isinstance(why, str) and why for why in provenance["unknown"].values())
        assert set(provenance["unknown"]) <= set(UNKNOWABLE)
        # nothing made up: no zero hashes, no seed, the release's 16-hex prompt hash not passed off as sha256
        text = json.dumps(record)
        assert "0" * 64 not in text
        assert record["seed"] is None and record["cell"]["fields"]["seed"] is None
        assert record["prompt_hash"] is None and len(provenance["release"]["prompt_hash"]) == 16
        assert record["config_hash"] is None and record["n_question_tokens"] is None
        assert record["model_revision"] == REVISION and record["reader"] == MODEL
        dataset = provenance["release"]["dataset"]
        assert record["n_context_tokens"] == (8070 if dataset == "ruler8k" else 1985)
        assert record["task"] == dataset
        assert record.get("task_family") == ("ruler" if dataset == "ruler8k" else None)
        for side in ("full", "compressed"):
            if record[side] is not None:
                assert record[side]["token_ids"] is None and record[side]["stop_reason"] is None
        if record["status"] == "unsupported":
            assert record["full"] is None and record["compressed"] is None and record["transition"] is None
            assert record["reason"] == THINK_NA and "diagnostics" not in record
        else:
            sample = record["source_id"]
            _, full_ok, full_score, _ = FULL[dataset][sample]
            assert record["full"]["correct"] is full_ok and record["full"]["score"] == full_score
            assert record["full"]["normalized"] == f"answer {sample}"


def test_settings_cells_and_keys(imported: tuple[Path, int]) -> None:
    records = imported_records(imported[0])
    snap = _by(records, "niah_single_1_000000", "SnapKVPress", 0.25)
    assert snap["compressor"] == "snapkv"
    assert snap["setting"] == {
        "kind": "ratio",
        "value": 0.75,  # kvpress ratio: the share removed; the release's 25% is the share kept
        "ratio": 0.75,
        "retained_share": 0.25,
        "method_parameter": {
            "release_method": "SnapKVPress",
            "release_method_family": "attention_observation_pruning",
            "release_label": "25%",
            "compression_ratio": 0.75,
            "retained_budget": 0.25,
        },
    }
    fields = snap["cell"]["fields"]
    assert fields == {
        "origin": "kvdiagnosis",
        "task": "ruler8k",
        "reader": MODEL,
        "press": "snapkv",
        "setting.kind": "ratio",
        "setting.value": 0.75,
        "seed": None,
    }
    assert len(snap["cell"]["id"]) == 16
    assert snap["key"].startswith(f"ruler8k/niah_single_1_000000/{MODEL}@{REVISION}/snapkv/ratio=0.75/")
    for retained, bits in ((0.75, 8), (0.25, 2)):
        q = _by(records, "cwe_000000", "QuantizedCache", retained)
        assert q["compressor"] == "hqq"
        assert q["setting"]["kind"] == "none" and q["setting"]["value"] is None
        assert q["setting"]["method_parameter"]["bits"] == bits
        assert q["setting"]["method_parameter"]["release_label"] == f"{100 * retained:g}%"
        assert q["setting"]["retained_share"] == bits / 16
        assert q["cell"]["fields"]["press.bits"] == bits and q["cell"]["fields"]["setting.kind"] == "none"
    cells = {
        (r["task"], r["compressor"], json.dumps(r["setting"]["value"]), r["cell"]["id"]) for r in records
    }
    assert len(cells) == 12  # 2 tasks x 6 settings (hqq's two bit widths are two cells)
    na = _by(records, "hotpotqa_000000", "ThinKPress", 0.25)
    assert na["status"] == "unsupported" and na["setting"]["retained_share"] is None
    splits = {r["task"]: r["split"] for r in records}
    assert all(r["split"] == splits[r["task"]] for r in records) and len(set(splits.values())) == 2


def test_transitions_and_diagnostics(imported: tuple[Path, int]) -> None:
    records = imported_records(imported[0])
    for (dataset, sample, method, retained), (ok, score) in COMP.items():
        record = _by(records, sample, method, retained)
        full_ok = FULL[dataset][sample][1]
        assert record["transition"] == ("C" if full_ok else "W") + "→" + ("C" if ok else "W")
        assert record["compressed"]["score"] == score and record["compressed"]["correct"] is ok
    cw = _by(records, "niah_single_1_000000", "SnapKVPress", 0.25)
    diags = cw["diagnostics"]
    assert diags["coverage"]["status"] == "measured"
    assert diags["coverage"]["values"] == {"err": 0.25, "ecov": 0.125, "tau": 0.5}
    assert diags["coverage"]["risk"] == {"err": "lower", "ecov": "lower"}
    lik = diags["likelihood"]
    assert lik["status"] == "measured"
    assert lik["values"] == {
        "nll_full": 0.5,
        "nll_comp": 0.5 + DELTA_NLL,
        "delta_nll": DELTA_NLL,
        "gpr": pytest.approx(math.exp(-DELTA_NLL)),
        "kl": 0.75,
        "top50": 0.62,
    }
    assert diags["attention"] == {
        "status": "measured",
        "values": {"ear": 0.4},
        "reason": "",
        "risk": {"ear": "lower", "eam_comp": "lower", "neae_comp": "lower"},
    }
    assert cw["category"] == {"category": "low_mapped_coverage", "matched": ["low_mapped_coverage"]}
    assert all("seconds" not in d for d in diags.values())  # unknown: left out, never 0
    think = _by(records, "niah_single_1_000001", "ThinKPress", 0.75)
    assert think["diagnostics"]["coverage"]["status"] == "structural"
    assert think["diagnostics"]["coverage"]["values"] == {}
    assert think["diagnostics"]["coverage"]["reason"] == NA_SLOT
    assert think["diagnostics"]["attention"]["status"] == "not_applicable"
    assert think["diagnostics"]["likelihood"]["status"] == "not_applicable"  # the release has no NLL there
    assert think["category"]["category"] == "structural_position_drift"
    both = _by(records, "hotpotqa_000000", "SnapKVPress", 0.25)
    assert both["category"] == {
        "category": "conflicting",
        "matched": ["high_mapped_coverage_drift", "decoding_scoring_candidate"],
    }
    cc = _by(records, "niah_single_1_000000", "SnapKVPress", 0.75)  # C->C: likelihood only
    assert set(cc["diagnostics"]) == {"likelihood"} and "category" not in cc


def test_control_ledgers_pair_with_records(imported: tuple[Path, int]) -> None:
    out, _ = imported
    records = imported_records(out)
    for path in out.glob("*.controls.jsonl.gz"):
        split = path.name.removesuffix(".controls.jsonl.gz")
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            ledger = {e["source_id"]: e for e in map(json.loads, fh)}
        mine = [r for r in records if r["split"] == split and r["status"] == "supported"]
        assert {r["source_id"] for r in mine} == set(ledger)
        for r in mine:
            entry = ledger[r["source_id"]]
            assert entry["prompt_hash"] == r["prompt_hash"]
            assert (entry["score"], entry["correct"], entry["output"]) == (
                r["full"]["score"],
                r["full"]["correct"],
                r["full"]["output"],
            )


def test_aggregate_reads_the_import(imported: tuple[Path, int], tmp_path: Path) -> None:
    """The matrix of the imported miniature, cell by cell, against the tables above."""
    from kvx.aggregate.__main__ import main as aggregate

    out, _ = imported
    report = tmp_path / "report"
    args = ["--records", str(out), "--out", str(report), "--no-log", "--quiet", "--no-plots"]
    assert aggregate([*args, "--boot", "50", "--splits", "50"]) == 0
    with (report / "problems.csv").open() as fh:
        assert list(csv.DictReader(fh)) == []  # schema, pairing with the control ledgers, complete cells
    with (report / "matrix.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    cells = {(r["task"], r["compressor"], r["setting"]): r for r in rows}

    def check(
        task: str, compressor: str, setting: str, quality: float, cw_rate: float | None, n_fc: int
    ) -> None:
        row = cells[(task, compressor, setting)]
        assert float(row["quality"]) == pytest.approx(quality), (task, compressor, setting)
        assert int(float(row["n_fc"])) == n_fc
        if cw_rate is None:
            assert row["cw_rate"] == "" or math.isnan(float(row["cw_rate"]))
        else:
            assert float(row["cw_rate"]) == pytest.approx(cw_rate)

    check("ruler8k", "FullCache", "", (1 + 1 + 0.6) / 3, None, 2)
    check("ruler8k", "snapkv", "0.25", (1 + 1 + 0.6) / 3, 0 / 2, 2)  # the release's 75%
    check("ruler8k", "snapkv", "0.75", 2 / 3, 1 / 2, 2)  # the release's 25%
    check("ruler8k", "think", "0.25", (1 + 0.5 + 0.2) / 3, 1 / 2, 2)
    check("ruler8k", "hqq[bits=8]", "-", (1 + 1 + 0.6) / 3, 0 / 2, 2)
    check("ruler8k", "hqq[bits=2]", "-", 0.0, 2 / 2, 2)
    check("hotpotqa", "FullCache", "", 1 / 2, None, 1)
    check("hotpotqa", "snapkv", "0.75", 1 / 2, 1 / 1, 1)
    check("hotpotqa", "hqq[bits=2]", "-", 0.0, 1 / 1, 1)
    na = cells[("ruler8k", "think", "0.75")]  # ThinK at 25%: N/A, counted, never scored
    assert int(float(na["n_unsupported"])) == 3 and int(float(na["n_supported"])) == 0
    assert na["quality"] == "" and na["cw_rate"] == ""


def test_subtask_level(tmp_path: Path) -> None:
    root = make_release(tmp_path / "KVDiagnosis")
    out = tmp_path / "sub"
    assert main(["kvdiagnosis", str(root / "data"), "--out", str(out), "--tasks", "subtask", "--quiet"]) == 0
    records = imported_records(out)
    tasks = Counter((r["task"], r.get("task_family")) for r in records)
    assert tasks == {
        ("ruler8k_niah_single_1", "ruler8k"): 12,
        ("ruler8k_cwe", "ruler8k"): 6,
        ("hotpotqa", None): 12,
    }
    assert len(list(out.glob("*.controls.jsonl.gz"))) == 3


def test_risk_declarations_match_the_diagnostics() -> None:
    """The importer copies the diagnostics' risk declarations (importing them would load torch)."""
    from kvx.importers.kvdiagnosis import RISK

    root = Path(__file__).resolve().parents[2] / "kvx" / "diagnostics"
    for name, module, cls in (
        ("coverage", "cache_coverage.py", "Coverage"),
        ("likelihood", "likelihood.py", "Likelihood"),
        ("attention", "attention_access.py", "Attention"),
    ):
        tree = ast.parse((root / module).read_text())
        [node] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
        [risk] = [
            ast.literal_eval(s.value)
            for s in node.body
            if isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == "risk"
        ]
        assert RISK[name] == risk, name


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kvx.importers: "), err
    return err[0]


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    assert main(["kvdiagnosis", str(tmp_path / "missing"), "--out", out]) == 2
    assert "no such file or directory" in _one_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["kvdiagnosis", str(tmp_path / "empty"), "--out", out]) == 2
    assert "is not a KVDiagnosis release" in _one_line(capsys)
    assert main(["nosuch", str(tmp_path), "--out", out]) == 2
    assert "unknown importer 'nosuch'" in _one_line(capsys)
    assert main(["kvdiagnoses", str(tmp_path), "--out", out]) == 2
    assert "did you mean 'kvdiagnosis'?" in _one_line(capsys)
    assert main(["kvdiagnosis", str(tmp_path)]) == 2  # no --out
    assert "--out" in _one_line(capsys)
    assert main([]) == 2
    assert "give an importer" in _one_line(capsys)
    lfs = tmp_path / "lfs/data/processed/full_population"
    (lfs / "compressed_runs").mkdir(parents=True)
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n"
    (lfs / "fullcache.jsonl.gz").write_bytes(pointer)
    (lfs / "compressed_runs/ruler8k.jsonl.gz").write_bytes(pointer)
    assert main(["kvdiagnosis", str(tmp_path / "lfs"), "--out", out]) == 2
    assert "Git LFS pointer" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_bad_rows_and_folders(release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt line is bad input (nothing written); a row the records cannot hold is rejected and listed."""
    broken = tmp_path / "broken"
    shutil.copytree(release, broken)
    runs = broken / "data/processed/full_population/compressed_runs/hotpotqa.jsonl.gz"
    with gzip.open(runs, "at", encoding="utf-8") as fh:
        fh.write("{not json\n")
    assert main(["kvdiagnosis", str(broken), "--out", str(tmp_path / "o1"), "--quiet"]) == 2
    assert "hotpotqa.jsonl.gz:13: invalid JSON" in _one_line(capsys)
    assert not (tmp_path / "o1").exists() and not list(tmp_path.glob(".o1*"))

    odd = tmp_path / "odd"
    shutil.copytree(release, odd)
    runs = odd / "data/processed/full_population/compressed_runs/hotpotqa.jsonl.gz"
    with gzip.open(runs, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    rows[0]["compressed_score"] = 7.0  # not a score in [0, 1]
    rows[1]["outcome_transition"] = "W->W"  # disagrees with the answers
    write_release_gz(runs, rows)
    out = tmp_path / "o2"
    assert main(["kvdiagnosis", str(odd), "--out", str(out), "--quiet"]) == 1
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["counts"]["rejected"] == 2 and manifest["counts"]["records"] == 28
    assert {e["run"] for e in manifest["rejected_examples"]} == {
        f"hotpotqa/{r['sample_id']}/{r['method_name']}/{r['retained_budget']}" for r in rows[:2]
    }
    assert manifest["checks"]["summary_json"]["differences"]  # the counts no longer match the release's
    capsys.readouterr()

    assert main(["kvdiagnosis", str(release), "--out", str(out), "--quiet"]) == 2  # not an empty folder
    assert "not an empty folder" in _one_line(capsys)
