"""``python -m kvx.importers tpbench``: a hand-made miniature of the TPBench release's scored answer
files, converted, then read by ``python -m kvx.aggregate --records`` into the paper's Table 3 numbers.

The miniature follows the release's layout (kentech-sail/TPBench ``results/p1_saved/*_scored.jsonl``
written by ``scripts/scorer/scorer_p1.py``; ``results/main/*_p3_scored.jsonl`` by ``scorer_p3.py``,
whose ``p3`` tag is the paper's P2; ChunkKV's ``chunkkv_*_p3_scored.jsonl`` without a seed in its
name; a reader error is ``err: 1`` with no answer, or ``error: "<message>"`` on corrected LLMLingua
rows). Every expected number is counted by hand from the tables below.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from kvx.core.records import unknown_fields, validate
from kvx.importers.__main__ import main

ERR = "err"  # a reader error: the release's err=1 row (no answer, no gold)
# P1, SGD, r=0.30: seed -> probe -> method -> (strict, loose, abstain) or ERR
P1 = {
    42: {
        "v20_sgd_1_00001__qa_00": {"full_context": (1, 1, 0), "recency": (0, 0, 0), "first_n": (1, 1, 0)},
        "v20_sgd_2_00002__qa_00": {"full_context": (1, 1, 0), "recency": (0, 0, 1), "first_n": (1, 1, 0)},
        "v20_sgd_3_00003__qa_01": {"full_context": (0, 1, 0), "recency": (0, 1, 0), "first_n": (0, 0, 0)},
    },
    43: {
        "v20_sgd_1_00001__qa_00": {"full_context": (1, 1, 0), "recency": (0, 0, 0), "first_n": (0, 1, 0)},
        "v20_sgd_4_00004__qa_00": {"full_context": (0, 0, 0), "recency": (0, 0, 1), "first_n": (1, 1, 0)},
    },
}
# P2 (the release's p3), SGD, r=0.30, seed 42: probe -> method -> (strict, loose, abstain) or ERR
P = "v20_sgd_5_00005__qa_02"
Q = "v20_sgd_6_00006__qa_00"
R = "v20_sgd_7_00007__qa_01"
S = "v20_sgd_8_00008__qa_00"  # its full_context answer is a reader error: no control
P2 = {
    P: {
        "full_context": (1, 1, 0),
        "recency": (1, 1, 0),
        "uniform_stride": (0, 1, 0),
        "llmlingua2_cache": ERR,
    },
    Q: {
        "full_context": (1, 1, 0),
        "recency": ERR,
        "uniform_stride": (1, 1, 0),
        "llmlingua2_cache": (1, 1, 0),
    },
    R: {
        "full_context": (0, 1, 0),
        "recency": (0, 0, 1),
        "uniform_stride": (1, 1, 0),
        "llmlingua2_cache": (0, 0, 0),
    },
    S: {
        "full_context": ERR,
        "recency": (1, 1, 0),
        "uniform_stride": (0, 0, 0),
        "llmlingua2_cache": (0, 0, 0),
    },
}
CHUNKKV = {P: (1, 1, 0), Q: (0, 0, 1), R: (0, 1, 0), S: (1, 1, 0)}
GOLD = {P: "12:45 pm", Q: "Anaheim", R: "7th of March", S: "Luxury"}
LINGUA_ERROR = "CUDA out of memory"
FORMAT_ERROR = {R}  # the corrected-LLMLingua row with no JSON object


def _meta(turns: int = 30, origin: int = 20) -> dict:
    return {
        "n_turns": turns,
        "k_turns": 9,
        "ratio": 0.3,
        "origin_turn_id": origin,
        "s_origin": [origin],
        "s_evidence": [origin, origin + 1],
        "is_final_slot_update": True,
    }


def p1_row(probe: str, method: str, scores: tuple) -> dict:
    strict, loose, abstain = scores
    answer = "" if abstain else ("find a doctor" if loose else "book a bus")
    return {
        "dialogue_id": probe,
        "dataset": "sgd",
        "method": method,
        "probe_type": "P1",
        "gold": f"I need to find a doctor ({probe})",
        "pred_value": answer,
        "abstain": bool(abstain),
        "p1_correct": strict,
        "p1_correct_loose": loose,
    }


def p2_row(probe: str, method: str, scores: tuple | str) -> dict:
    row: dict = {
        "dialogue_id": probe,
        "method": method,
        "dataset": "sgd",
        "probe_type": "P3",
        "meta": _meta(),
    }
    if scores == ERR and method == "llmlingua2_cache":  # the corrected rows name the error
        return row | {"error": LINGUA_ERROR, "format_error": 0, "p3_correct": 0, "p3_correct_loose": 0}
    if scores == ERR:  # scorer_p3.py's error row: zeros, err 1, no answer and no gold
        return row | {"p3_correct": 0, "p3_correct_loose": 0, "abstain": 0, "support_in_ctx": 0, "err": 1}
    strict, loose, abstain = scores
    value = "None" if abstain else (GOLD[probe] if strict else f"near {GOLD[probe]}" if loose else "other")
    row |= {
        "p3_correct": strict,
        "p3_correct_loose": loose,
        "p3_overlap_strict": 0,
        "p3_overlap_loose": loose,
        "abstain": abstain,
        "support_in_ctx": 1,
        "pred_value": value,
        "gold_value": GOLD[probe],
        "norm_pred": value.lower(),
        "norm_gold": GOLD[probe].lower(),
        "err": 0,
        "p2_loose_matcher": "reference_in_prediction_bounded_phrase_v2",
    }
    if method == "llmlingua2_cache":
        row |= {"error": None, "format_error": int(probe in FORMAT_ERROR)}
    return row


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_release(root: Path) -> Path:
    for seed, probes in P1.items():
        rows = [p1_row(p, m, s) for p, methods in probes.items() for m, s in methods.items()]
        _jsonl(root / f"results/p1_saved/sgd_r30_s{seed}_scored.jsonl", rows)
    main_rows = [p2_row(p, m, s) for p, methods in P2.items() for m, s in methods.items()]
    _jsonl(root / "results/main/sgd_r30_s42_p3_scored.jsonl", main_rows)
    _jsonl(
        root / "results/main/chunkkv_sgd_r30_p3_scored.jsonl",
        [p2_row(p, "chunkkv_r03_kvpress", s) for p, s in CHUNKKV.items()],
    )
    # the release's own means: every row in n, a reader error scored 0 (scorer_p3.py)
    aggregate = {
        "full_context": {"n": 4, "p3_em_strict": 0.5, "err_rate": 0.25},
        "recency": {"n": 4, "p3_em_strict": 0.5},
        "uniform_stride": {"n": 4, "p3_em_strict": 0.5},
        "llmlingua2_cache": {"n": 4, "p3_em_strict": 0.25},
    }
    (root / "results/main/sgd_r30_s42_p3_aggregate.json").write_text(json.dumps({"sgd": aggregate}))
    (root / "results/main/seed_summary.json").write_text("{}")
    labels = [  # the slot and values a scored row does not repeat, for P alone
        {"dialogue_id": P, "slot": "Buses_1.leaving_time", "old_value": "12 pm", "new_value": GOLD[P]}
    ]
    _jsonl(root / "results/diagnostics/update_evidence/sgd_goal_labels.jsonl", labels)
    return root


def _records(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*/tpbench_*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh)
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_release(tmp_path_factory.mktemp("TPBench"))


@pytest.fixture(scope="module")
def imported(release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("imported") / "tpbench"
    return out, main(["tpbench", str(release), "--out", str(out), "--quiet"])


def _by(records: list[dict], probe: str, method: str, seed: int = 42) -> dict:
    [record] = [
        r
        for r in records
        if r["source_id"] == probe and r["provenance"]["release"]["method"] == method and r["seed"] == seed
    ]
    return record


def test_layout_and_counts(imported: tuple[Path, int]) -> None:
    out, code = imported
    assert code == 0
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    controls = [n for n in names if n.endswith(".controls.jsonl.gz")]
    assert [n for n in names if n not in controls] == [  # one folder (one sweep) per release file
        "chunkkv_sgd_r30_p3/tpbench_p2.jsonl.gz",
        "import_manifest.json",
        "sgd_r30_s42/tpbench_p1.jsonl.gz",
        "sgd_r30_s42_p3/tpbench_p2.jsonl.gz",
        "sgd_r30_s43/tpbench_p1.jsonl.gz",
    ]
    assert len(controls) == 3  # P1 seed 42, P1 seed 43, P2 seed 42 (ChunkKV pairs with the last)
    records = _records(out)
    assert len(records) == 2 * 3 + 2 * 2 + 3 * 4 + 4  # methods x probes, full context excluded
    # errors: recency Q, llmlingua P (reader); S under recency, stride, llmlingua, chunkkv (no control)
    assert Counter(r["status"] for r in records) == {"supported": 20, "error": 6}
    manifest = json.loads((out / "import_manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["records"] == 26 and counts["controls"] == 3 + 2 + 3  # S has no full-context answer
    assert counts["records_without_control"] == 4
    assert manifest["checks"]["release_aggregates"]["differences"] == []
    assert manifest["files_skipped"] == []
    assert {f["path"] for f in manifest["files_read"]} == {
        "results/p1_saved/sgd_r30_s42_scored.jsonl",
        "results/p1_saved/sgd_r30_s43_scored.jsonl",
        "results/main/sgd_r30_s42_p3_scored.jsonl",
        "results/main/sgd_r30_s42_p3_aggregate.json",
        "results/main/chunkkv_sgd_r30_p3_scored.jsonl",
    }
    assert manifest["scorers"] == {
        "tpbench_p1": "scripts/scorer/scorer_p1.py",
        "tpbench_p2": "scripts/scorer/scorer_p3.py",
        "tpbench_p3": "scripts/scorer/scorer_paper_p3.py",
    }
    assert set(manifest["unknown"]) == {
        "model_revision",
        "prompt_hash",
        "n_context_tokens",
        "n_question_tokens",
        "config_hash",
        "full.normalized",  # P1 rows have no normalized answer
        "full.token_ids",
        "full.stop_reason",
        "compressed.normalized",
        "compressed.token_ids",
        "compressed.stop_reason",
    }


def test_every_record_valid_and_honest(imported: tuple[Path, int]) -> None:
    out, _ = imported
    records = _records(out)
    for record in records:
        validate(record)
        provenance = record["provenance"]
        assert provenance["origin"] == "external" and provenance["source"].startswith("tpbench:")
        assert set(unknown_fields(record)) == set(provenance["unknown"]), record["key"]
    assert len({r["key"] for r in records}) == len(records)
    # a reader error is an error with the release's reason, its control kept, never a wrong answer
    err = _by(records, Q, "recency")
    assert err["status"] == "error" and err["reason"] == "reader error in the release: err=1 in the release"
    assert err["compressed"] is None and err["full"]["correct"] is True and err["references"] == [GOLD[Q]]
    named = _by(records, P, "llmlingua2_cache")
    assert named["status"] == "error" and named["reason"].endswith(LINGUA_ERROR)
    orphan = _by(records, S, "recency")  # a correct answer, but its full-context answer errored
    assert orphan["status"] == "error" and "no FullCache control" in orphan["reason"]
    assert orphan["references"] == [GOLD[S]]  # the gold of another row of the probe
    # an abstention is an answer: scored as the release scored it, counted as abstaining
    abstained = _by(records, R, "recency")
    assert abstained["status"] == "supported" and abstained["transition"] == "W→W"
    assert abstained["compressed"]["metrics"] == {
        "strict": 0.0,
        "loose": 0.0,
        "abstain": 1.0,
        "overlap_strict": 0.0,
        "overlap_loose": 0.0,
    }
    unparsed = _by(records, R, "llmlingua2_cache")
    assert unparsed["compressed"]["metrics"]["parsed"] == 0.0
    details = _by(records, P, "uniform_stride")["compressed"]["details"]
    assert details["dialogue_id"] == "v20_sgd_5_00005" and details["release_probe_id"] == P
    assert details["scorer"] == "tpbench-release:scripts/scorer/scorer_p3.py"
    assert (details["update_turn"], details["turns_total"], details["turns_kept"]) == ("T20", 30, 9)
    assert details["update_position"] == pytest.approx(20 / 29)
    assert details["answer_turns"] == ["T20", "T21"]
    p1 = _by(records, "v20_sgd_2_00002__qa_00", "recency")
    assert p1["task"] == "tpbench_p1" and p1["compressed"]["normalized"] is None
    assert p1["compressed"]["metrics"] == {"strict": 0.0, "loose": 0.0, "abstain": 1.0}
    assert p1["provenance"]["unknown"]["compressed.normalized"].startswith("the release gives no normalized")


def test_cells_seeds_and_budgets(imported: tuple[Path, int]) -> None:
    records = _records(imported[0])
    stride = _by(records, P, "uniform_stride")["cell"]["fields"]
    assert stride == {
        "origin": "tpbench",
        "task": "tpbench_p2",
        "task.corpus": "sgd",
        "reader": "meta-llama/Llama-3.1-8B-Instruct",
        "seed": 42,
        "press": "none",
        "transform": "turns:uniform_stride",
        "transform.selector": "uniform_stride",
        "transform.fraction": 0.3,
        "setting.kind": "none",
        "setting.value": None,
    }
    chunk = _by(records, P, "chunkkv_r03_kvpress")  # no seed in its file name: seed 42's probe set
    assert chunk["seed"] == 42 and chunk["compressor"] == "chunkkv"
    assert chunk["setting"]["value"] == pytest.approx(0.7) and chunk["setting"]["retained_share"] == 0.3
    assert chunk["split"] == _by(records, P, "recency")["split"]  # paired with seed 42's full context
    earliest = _by(records, "v20_sgd_1_00001__qa_00", "first_n", seed=43)
    assert earliest["cell"]["fields"]["transform.selector"] == "earliest"


def test_aggregate_rebuilds_table_3(imported: tuple[Path, int], tmp_path: Path) -> None:
    """Table 3's cells of the miniature, by hand from the tables above."""
    from kvx.aggregate.__main__ import main as aggregate

    out, _ = imported
    report = tmp_path / "report"
    args = ["--records", str(out), "--out", str(report), "--no-log", "--quiet", "--no-plots"]
    assert aggregate([*args, "--boot", "50", "--splits", "50"]) == 0
    with (report / "problems.csv").open() as fh:  # schema, pairing with the ledgers, complete cells
        problems = [(p["check"], p["severity"]) for p in csv.DictReader(fh)]
    assert problems == []  # P1's two seeds are two control groups, as in kvx's runs: no warning
    p1 = pd.read_csv(report / "tpbench_p1.csv").set_index("method")
    p2 = pd.read_csv(report / "tpbench_p2.csv").set_index("method")

    def cell(table: pd.DataFrame, method: str, n: int, strict: float, loose: float, n_error: int = 0) -> None:
        row = table.loc[method]
        assert (row["n"], row["n_error"]) == (n, n_error), method
        assert row["strict_accuracy"] == pytest.approx(strict), method
        assert row["loose_accuracy"] == pytest.approx(loose), method

    # P1 pooled over seeds 42 (3 probes) and 43 (2 probes)
    cell(p1, "full context", 5, 3 / 5, 4 / 5)
    cell(p1, "earliest", 5, 3 / 5, 4 / 5)
    cell(p1, "recency", 5, 0 / 5, 1 / 5)
    assert p1.loc["full context", "strict_accuracy_seed_mean"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert p1.loc["earliest", "strict_accuracy_seed_mean"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert p1.loc["recency", "abstain_rate"] == pytest.approx(2 / 5)
    assert p1.loc["earliest", "budget"] == "turns 0.3"
    # P2: S's full-context answer is a reader error, so S is counted under every method, never scored
    cell(p2, "full context", 3, 2 / 3, 3 / 3, n_error=1)
    cell(p2, "recency", 2, 1 / 2, 1 / 2, n_error=2)  # Q a reader error, R an abstention
    cell(p2, "uniform_stride", 3, 2 / 3, 3 / 3, n_error=1)  # 2 of 3 strict = 66.7%
    cell(p2, "llmlingua2", 2, 1 / 2, 1 / 2, n_error=2)
    cell(p2, "chunkkv", 3, 1 / 3, 2 / 3, n_error=1)
    assert p2.loc["chunkkv", "budget"] == "cache 0.3" and p2.loc["recency", "budget"] == "turns 0.3"
    assert p2.loc["recency", "abstain_rate"] == pytest.approx(1 / 2)
    assert p2.loc["llmlingua2", "parse_failure_rate"] == pytest.approx(1 / 2)  # R: format_error 1
    # the paper's rule gives the release's own means (sgd_r30_s42_p3_aggregate.json above): every probe
    # in n, a reader error 0, S's answers scored though its full-context answer is an error
    paper = {"full context": 2 / 4, "recency": 2 / 4, "uniform_stride": 2 / 4, "llmlingua2": 1 / 4}
    paper["chunkkv"] = 2 / 4  # P 1, Q 0, R 0, S 1 (unpaired, as the release scored it)
    for method, mean in paper.items():
        assert (p2.loc[method, "paper_n"], p2.loc[method, "paper_strict_accuracy"]) == (4, mean), method
    # offline, an unsupported answer would leave the method N/A under the rule: none here
    assert (p2["n_unsupported"] == 0).all()


def test_bad_input(release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def one_line() -> str:
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("kvx.importers: "), err
        return err[0]

    out = str(tmp_path / "out")
    assert main(["tpbench", str(tmp_path / "missing"), "--out", out]) == 2
    assert "no such file or directory" in one_line()
    (tmp_path / "other/results/main").mkdir(parents=True)
    (tmp_path / "other/results/main/notes.txt").write_text("x")
    assert main(["tpbench", str(tmp_path / "other"), "--out", out]) == 2
    assert "is not a TPBench release" in one_line()
    assert main(["tpbenc", str(release), "--out", out]) == 2
    assert "did you mean 'tpbench'?" in one_line()

    def broken(name: str, change: dict | None, line: str | None = None) -> str:
        copy = tmp_path / f"broken-{name}"
        shutil.copytree(release, copy)
        path = copy / "results/main/sgd_r30_s42_p3_scored.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        if change is not None:
            rows[1] = {k: v for k, v in (rows[1] | change).items() if v != "<drop>"}
        text = "".join(json.dumps(r) + "\n" for r in rows)
        path.write_text(text + (line or ""))
        assert main(["tpbench", str(copy), "--out", out, "--quiet"]) == 2
        return one_line()

    message = broken("missing", {"p3_correct": "<drop>"})
    assert "sgd_r30_s42_p3_scored.jsonl:2: field 'p3_correct' is missing" in message
    message = broken("method", {"method": "recnecy"})
    assert ":2: field 'method' is 'recnecy'" in message and "did you mean 'recency'?" in message
    assert ":2: field 'abstain' must be 0/1" in broken("flag", {"abstain": 2})
    assert ":2: field 'probe_type' is 'P1'" in broken("probe", {"probe_type": "P1"})
    assert ":2: a second row for probe" in broken("twice", {"method": "full_context"})
    assert ":17: invalid JSON" in broken("json", None, "{not json\n")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_release_aggregate_differences_are_listed(release: Path, tmp_path: Path) -> None:
    copy = tmp_path / "TPBench"
    shutil.copytree(release, copy)
    path = copy / "results/main/sgd_r30_s42_p3_aggregate.json"
    stated = json.loads(path.read_text())
    stated["sgd"]["recency"]["p3_em_strict"] = 0.75
    path.write_text(json.dumps(stated))
    out = tmp_path / "out"
    assert main(["tpbench", str(copy / "results"), "--out", str(out), "--quiet"]) == 0  # results/ also works
    differences = json.loads((out / "import_manifest.json").read_text())["checks"]["release_aggregates"]
    assert differences["differences"] == [
        "sgd_r30_s42_p3_aggregate.json: recency p3_em_strict 0.75 in the release, 0.500000 read"
    ]


def test_other_budgets_share_the_control_group(release: Path, tmp_path: Path) -> None:
    """r10 and r30 files of one seed are one control group (kvx's split: task, reader, seed): the same
    full-context answers go in the ledger once; an answer that differs is listed, never overwritten."""
    copy = tmp_path / "TPBench"
    shutil.copytree(release, copy)
    main_dir = copy / "results/main"
    rows = [json.loads(x) for x in (main_dir / "sgd_r30_s42_p3_scored.jsonl").read_text().splitlines()]
    for row in rows:
        row["meta"]["ratio"] = 0.1
    _jsonl(main_dir / "sgd_r10_s42_p3_scored.jsonl", rows)
    out = tmp_path / "same"
    assert main(["tpbench", str(copy), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["counts"]["controls"] == 3 + 2 + 3  # the r10 file adds no control
    assert manifest["checks"]["full_context_differs_between_budgets"] == []
    r10 = [r for r in _records(out) if r["provenance"]["release"]["file"] == "sgd_r10_s42_p3_scored.jsonl"]
    assert {r["cell"]["fields"]["transform.fraction"] for r in r10} == {0.1} and len(r10) == 12
    r30 = [r for r in _records(out) if r["provenance"]["release"]["file"] == "sgd_r30_s42_p3_scored.jsonl"]
    assert {r["split"] for r in r10} == {r["split"] for r in r30}  # one control group

    rows[0]["p3_correct"] = 0  # row 0: P's full-context answer, now wrong under r10
    _jsonl(main_dir / "sgd_r10_s42_p3_scored.jsonl", rows)
    out = tmp_path / "differs"
    assert main(["tpbench", str(copy), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["checks"]["full_context_differs_between_budgets"] == [
        f"{P}: sgd_r10_s42_p3_scored.jsonl and sgd_r30_s42_p3_scored.jsonl"
    ]


def test_a_seedless_file_matching_no_probe_set(release: Path, tmp_path: Path) -> None:
    """ChunkKV probes that no seed's probe set holds: seed unknown (with the reason), no control, an error;
    a full-context answer in such a file has no control group to join."""
    copy = tmp_path / "TPBench"
    shutil.copytree(release, copy)
    other = p2_row(P, "chunkkv_r03_kvpress", (1, 1, 0)) | {"dialogue_id": "v20_sgd_9_00009__qa_00"}
    full = other | {"method": "full_context"}  # no seed, so no control group: counted, never used
    _jsonl(copy / "results/main/chunkkv_sgd_r30_p3_scored.jsonl", [other, full])
    out = tmp_path / "out"
    assert main(["tpbench", str(copy), "--out", str(out), "--quiet"]) == 0
    [record] = [r for r in _records(out) if r["compressor"] == "chunkkv"]
    assert record["seed"] is None and record["status"] == "error"
    assert record["provenance"]["unknown"]["seed"].startswith("the file name gives no probe seed")
    assert record["reason"] == "no FullCache control: no seed's full_context answers hold this probe"
    validate(record)
    counts = json.loads((out / "import_manifest.json").read_text())["counts"]
    assert counts["full_context_rows_without_seed"] == 1 and counts["controls"] == 3 + 2 + 3


def test_labels_give_the_slot_and_values_and_the_evidence_location(imported: tuple[Path, int]) -> None:
    """The paper tables (slot type, alias exclusion, evidence location) read these answer details:
    joined from the release's labels where it has a row for the probe, otherwise absent (unknown)."""
    records = _records(imported[0])
    answer = _by(records, P, "recency")["compressed"]["details"]
    assert (answer["slot"], answer["old_value"], answer["current_value"]) == (
        "Buses_1.leaving_time",
        "12 pm",
        "12:45 pm",
    )
    assert answer["update_states_value"] is True  # origin 20 is among the evidence turns [20, 21]
    assert answer["evidence_turns"] == 2
    assert "slot" not in _by(records, R, "recency")["compressed"]["details"]


# The release's other scored files, by hand: paper P3 (serialized P1_LATE; scorer_paper_p3.py), Llama
# and ChunkKV at seed 42; Mistral's P2 (diagnostics/mistral_128, the main files' layout); the paired
# deletions (update_evidence/p2_scored_llama.jsonl: both corpora, seed 42, cf_origin_minus_* methods).
A3, B3 = "v20_sgd_9_00001__qa_00", "v20_sgd_9_00002__qa_00"
M = "v20_multiwoz_MUL0001.json__qa_00"
# P3: probe -> method -> (joint strict, joint loose) or ERR
P3 = {
    A3: {"full_context": (1, 1), "uniform_stride": (1, 1)},
    B3: {"full_context": (0, 1), "uniform_stride": ERR},
}
P3_CHUNKKV = {A3: (0, 1), B3: (1, 1)}


def p3_row(probe: str, method: str, scores: tuple | str) -> dict:
    row: dict = {
        "dialogue_id": probe,
        "dataset": "sgd",
        "method": method,
        "probe_type": "P1_LATE",
        "meta": _meta() | {"sample_seed": 42},
        "gold_story_label": "i want to find a bus",
        "gold_value": "12:45 pm",
        "primary_scorer": "paper_p3_segment_local_v1",
    }
    if scores == ERR:  # a reader error: every score 0 (scorer_paper_p3.py on an empty answer)
        zeros = ("p3_joint_strict", "p3_joint_loose", "p3_goal_correct", "p3_value_strict", "p3_value_loose")
        return (
            row
            | dict.fromkeys(zeros, 0)
            | {"error": "CUDA out of memory", "abstain": False, "pred_value": ""}
        )
    strict, loose = scores
    return row | {
        "error": None,
        "abstain": False,
        "pred_value": "find a bus; leaving time: 12:45 pm",
        "p3_joint_strict": strict,
        "p3_joint_loose": loose,
        "p3_goal_correct": loose,
        "p3_value_strict": strict,
        "p3_value_loose": loose,
        "p3_segment_parse": 1,
        "p1late_combined_strict": strict,
        "p1late_combined": loose,
    }


def deletion_row(probe: str, method: str, answer: str | None, dataset: str = "sgd") -> dict:
    """A P2 row of the deletion file: ``answer`` the reader's value (None: a reader error)."""
    gold = {P: GOLD[P], Q: GOLD[Q], M: "italian"}[probe]
    if answer is None:
        return p2_row(probe, method, ERR) | {"dataset": dataset}
    right = int(answer == gold)
    row = p2_row(P, method, (right, right, 0))  # P's layout, then this probe's values
    return row | {"dialogue_id": probe, "dataset": dataset, "pred_value": answer, "gold_value": gold}


def make_more(root: Path) -> Path:
    evidence = root / "results/diagnostics/update_evidence"
    rows = [p3_row(p, m, s) for p, methods in P3.items() for m, s in methods.items()]
    _jsonl(evidence / "p3_sgd_s42_scored_llama.jsonl", rows)
    _jsonl(
        evidence / "p3_sgd_s42_scored_chunkkv.jsonl",
        [p3_row(p, "chunkkv_r03_kvpress", s) for p, s in P3_CHUNKKV.items()],
    )
    stated = {
        "full_context": {"n": 2, "p3_joint_strict": 0.5},
        "uniform_stride": {"n": 2, "p3_joint_strict": 0.5},
    }
    (evidence / "p3_sgd_s42_aggregate_llama.json").write_text(json.dumps(stated))
    mistral = root / "results/diagnostics/mistral_128/sgd_r30_s42_p3_scored.jsonl"
    mistral.parent.mkdir(parents=True)
    shutil.copy(root / "results/main/sgd_r30_s42_p3_scored.jsonl", mistral)
    # P: the update turn removed, the reader gives the replaced value (12 pm, from the labels); Q's
    # control is a reader error; M (MultiWOZ): the replaced value chinese
    rows = [
        deletion_row(P, "full_context", GOLD[P]),
        deletion_row(P, "cf_origin_minus_origin", "12 pm"),
        deletion_row(P, "cf_origin_minus_control_origin", GOLD[P]),
        deletion_row(Q, "full_context", GOLD[Q]),
        deletion_row(Q, "cf_origin_minus_origin", GOLD[Q]),
        deletion_row(Q, "cf_origin_minus_control_origin", None),
        deletion_row(M, "full_context", "italian", "multiwoz"),
        deletion_row(M, "cf_origin_minus_origin", "chinese", "multiwoz"),
        deletion_row(M, "cf_origin_minus_control_origin", "italian", "multiwoz"),
    ]
    _jsonl(evidence / "p2_scored_llama.jsonl", rows)
    methods = ("full_context", "cf_origin_minus_origin", "cf_origin_minus_control_origin")
    stated = {  # the release's means: Q's control error scored 0, in n
        "sgd": {m: {"n": 2, "p3_em_strict": v} for m, v in zip(methods, (1.0, 0.5, 0.5))},
        "multiwoz": {m: {"n": 1, "p3_em_strict": v} for m, v in zip(methods, (1.0, 0.0, 1.0))},
    }
    (evidence / "p2_aggregate_llama.json").write_text(json.dumps(stated))
    _jsonl(
        evidence / "multiwoz_goal_labels.jsonl",
        [{"dialogue_id": M, "old_value": "chinese", "new_value": "italian"}],
    )
    labels = evidence / "sgd_goal_labels.jsonl"
    rows = [json.loads(x) for x in labels.read_text().splitlines()]
    _jsonl(labels, rows + [{"dialogue_id": Q, "old_value": "Anaheim", "new_value": GOLD[Q]}])
    return root


def test_p3_mistral_and_deletion_files(release: Path, tmp_path: Path) -> None:
    """The paper's P3, Mistral's P2 and the deletions import beside P1/P2 and aggregate into Tables 12,
    17, 25 and Figure 3's numbers, under the paper's rule (a reader error wrong, in n) by hand."""
    from kvx.aggregate.__main__ import main as aggregate

    copy = tmp_path / "TPBench"
    shutil.copytree(release, copy)
    make_more(copy)
    out = tmp_path / "out"
    assert main(["tpbench", str(copy), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["checks"]["release_aggregates"]["differences"] == []
    assert {f["path"] for f in manifest["files_read"]} >= {
        "results/diagnostics/update_evidence/p3_sgd_s42_scored_llama.jsonl",
        "results/diagnostics/update_evidence/p3_sgd_s42_aggregate_llama.json",
        "results/diagnostics/update_evidence/p2_scored_llama.jsonl",
        "results/diagnostics/update_evidence/p2_aggregate_llama.json",
        "results/diagnostics/mistral_128/sgd_r30_s42_p3_scored.jsonl",
    }
    records = _records(out)
    chunk = [r for r in records if r["task"] == "tpbench_p3" and r["compressor"] == "chunkkv"]
    assert len(chunk) == 2 and {r["status"] for r in chunk} == {"supported"}  # Llama's P3 controls
    deleted = [r for r in records if r["cell"]["fields"].get("transform") == "delete_turns"]
    assert {r["cell"]["fields"]["max_new_tokens"] for r in deleted} == {128} and len(deleted) == 6
    assert {r["cell"]["fields"]["task.corpus"] for r in deleted} == {"sgd", "multiwoz22"}
    mistral = [r for r in records if r["reader"] == "mistralai/Mistral-7B-Instruct-v0.3"]
    assert len(mistral) == 12 and {r["task"] for r in mistral} == {"tpbench_p2"}

    report = tmp_path / "report"
    only = "tpbench_p2,tpbench_p3,tpbench_deletion"  # and what they need; the figure of the last
    args = [
        "--records",
        str(out),
        "--out",
        str(report),
        "--no-log",
        "--quiet",
        "--boot",
        "20",
        "--only",
        only,
    ]
    assert aggregate(args) == 0
    p3 = pd.read_csv(report / "tpbench_p3.csv").set_index("method")
    # uniform stride: A right, B a reader error: kvx 1 of 1, the paper 1 of 2 (its aggregate's 0.5)
    stride = p3.loc["uniform_stride"]
    assert (stride["n"], stride["n_error"], stride["paper_n"]) == (1, 1, 2)
    assert (stride["strict_accuracy"], stride["paper_strict_accuracy"]) == (1.0, 0.5)
    assert p3.loc["chunkkv", "budget"] == "cache 0.3" and p3.loc["chunkkv", "paper_strict_accuracy"] == 0.5
    assert p3.loc["full context", "paper_loose_accuracy"] == 1.0
    p2 = pd.read_csv(report / "tpbench_p2.csv")
    mine = p2[p2["reader"].str.startswith("mistralai")].set_index("method")
    # Mistral's file is the Llama file's copy: recency P 1, Q an error (0), R 0, S 1 (the release scored
    # it though S's full-context answer is an error) = 2 of 4, the release's 0.5; kvx's own: 1 of 2
    assert (mine.loc["recency", "paper_n"], mine.loc["recency", "paper_strict_accuracy"]) == (4, 0.5)
    assert (mine.loc["recency", "n"], mine.loc["recency", "strict_accuracy"]) == (2, 0.5)
    assert mine.loc["full context", "paper_strict_accuracy"] == 0.5  # P 1, Q 1, R 0, S an error (0)
    deletion = pd.read_csv(report / "tpbench_deletion.csv")
    sgd = deletion[(deletion["corpus"] == "sgd") & (deletion["deletion"] == "update")].iloc[0]
    # P: full right, deleted wrong (the replaced value), control right; Q: full right, deleted right,
    # control a reader error (wrong, in n)
    assert (sgd["n_paired"], sgd["n_control_error"]) == (2, 1)
    assert (sgd["full_strict_accuracy"], sgd["deleted_strict_accuracy"], sgd["control_strict_accuracy"]) == (
        1.0,
        0.5,
        0.5,
    )
    assert (sgd["deleted_superseded_rate"], sgd["control_superseded_rate"]) == (0.5, 0.0)
    assert (sgd["b"], sgd["c"]) == (1, 1)
    mw = deletion[(deletion["corpus"] == "multiwoz22") & (deletion["deletion"] == "update")].iloc[0]
    assert (mw["full_strict_accuracy"], mw["deleted_strict_accuracy"], mw["deleted_superseded_rate"]) == (
        1,
        0,
        1,
    )
    figures = sorted(p.name for p in report.glob("tpbench_figure3_*.png"))  # one per corpus (seed 42)
    assert [name.split("_tpbench_p2")[0] for name in figures] == [
        "tpbench_figure3_multiwoz22",
        "tpbench_figure3_sgd",
    ]
    assert all("max_new_tokens-128" in name and name.endswith("_42.png") for name in figures)
