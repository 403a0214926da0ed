"""``python -m kvx.importers kvpress``: kvpress run folders written here as kvpress's
``evaluation/evaluate.py`` writes them, converted, then read by ``python -m kvx.aggregate --records``.

The folders follow evaluate.py at NVIDIA/kvpress HEAD: ``<output_dir>/<name from get_results_dir>/``
with ``predictions.csv`` (the dataset's rows without ``context``, columns in set order, list columns as
numpy prints them, ``predicted_answer`` and, but for DecodingPress runs, ``compression_ratio``),
``metrics.json`` (``json.dump(..., indent=4)`` of the benchmark's calculate_metrics) and ``config.yaml``
(``yaml.dump`` of EvaluationConfig with its popping rules). A query-aware run's rows have the question
moved into the context, so its ``question`` column is empty. Every expected count is by hand from the
tables below.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
import yaml

from kvx.core import registry as registry_mod
from kvx.core.records import unknown_fields, validate
from kvx.core.source import Source
from kvx.importers.__main__ import main
from kvx.importers.kvpress import parse_list, settings_from_name
from kvx.tasks.base import Score
from kvx.tasks.kvpress.dataset import KvpressTask

QWEN, LLAMA = "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"
# RULER 4096 rows: (task, key, references); the question and answer prefix name the key
RULER = {
    "A": ("niah_single_1", "apple", ["1111111"]),
    "B": ("niah_single_1", "banana", ["2222222"]),
    "C": ("niah_single_1", "cherry", ["3333333"]),
    "D": ("cwe", "", ["alpha", "beta"]),
    "E": ("qa_1", "", ["Paris", "paris city"]),  # no kvx task scores RULER's qa here: unsupported
}
# run -> row -> predicted answer; scores: string_match_all (niah, cwe: share of references found)
ANSWERS = {
    "no_press": {"A": "1111111", "B": "2222222.", "C": "9999999", "D": "alpha, beta", "E": "Paris"},
    "knorm": {"A": "1111111", "B": "2222223", "C": "3333333", "D": "alpha", "E": "London"},
    "snapkv_qa": {"A": "1234567", "B": "2222222", "C": "0", "D": "Alpha and BETA", "E": "Paris"},
    "kvzap": {"A": "1111111", "B": "2222222", "C": "9999999", "D": "beta alpha", "E": "Paris"},
}
# the FullCache control: A, B, D correct, C wrong. Hand-counted transitions (niah_single_1, cwe):
# knorm 0.5: A C->C, B C->W, C W->C, D C->W (0.5 of the words)
# snapkv 0.5 query-aware: A C->W, B C->C, C W->W, D C->C
# kvzap_linear threshold -3: A C->C, B C->C, C W->W, D C->C


def ruler_row(row: str) -> dict[str, Any]:
    task, key, refs = RULER[row]
    if task.startswith("niah"):
        question = f"What is the special magic number for {key} mentioned in the provided text?"
        prefix, tokens = f"The special magic number for {key} mentioned in the provided text is", 128
    elif task == "cwe":
        question, prefix, tokens = (
            "Question: What are the 10 most common words in the above list?",
            "Answer:",
            120,
        )
    else:
        question, prefix, tokens = "Question: Where is the Eiffel tower?", "Answer:", 32
    return {
        "context": f"a long haystack for {row}",
        "question": question,
        "answer_prefix": prefix,
        "answer": np.array(refs, dtype=object),  # datasets' to_pandas gives numpy arrays for lists
        "task": task,
        "max_new_tokens": tokens,
    }


def config_of(**changes: Any) -> dict[str, Any]:
    """EvaluationConfig's fields in its order, as evaluate.py saves them (None threshold and head
    ratio left out; compression_ratio left out when either is set)."""
    config: dict[str, Any] = {
        "dataset": "ruler",
        "data_dir": "4096",
        "model": QWEN,
        "device": "cuda:0",
        "press_name": "knorm",
        "compression_ratio": 0.5,
        "key_channel_compression_ratio": None,
        "head_compression_ratio": None,
        "threshold": None,
        "fraction": 1.0,
        "max_new_tokens": None,
        "max_context_length": None,
        "query_aware": False,
        "needle_depth": None,
        "compression_interval": None,
        "target_size": None,
        "hidden_states_buffer_size": None,
        "output_dir": "./results",
        "log_level": "INFO",
        "model_kwargs": {"attn_implementation": "flash_attention_2", "dtype": "auto"},
        "press_init_command": "KnormPress(compression_ratio=0.5)",
        "seed": 42,
        "fp8": False,
    } | changes
    if config["threshold"] is not None or config["head_compression_ratio"] is not None:
        config.pop("compression_ratio")
    for key in ("threshold", "head_compression_ratio"):
        if config[key] is None:
            config.pop(key)
    return config


def folder_name(config: dict[str, Any]) -> str:
    """get_results_dir's name of a configuration."""
    slot = config.get("threshold", config.get("head_compression_ratio", config.get("compression_ratio")))
    parts = [config["dataset"], config["data_dir"] or "", config["model"].replace("/", "--")]
    parts += [config["press_name"], f"{slot:.2f}"]
    if config["query_aware"]:
        parts.append("query_aware")
    return "__".join(p for p in parts if p)


def write_run(
    output_dir: Path,
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    answers: list[str],
    metrics: Any = None,
    measured: float | None = None,
    files: tuple[str, ...] = ("predictions.csv", "metrics.json", "config.yaml"),
) -> Path:
    """One run folder as evaluate.py leaves it (``files``: those it got to write)."""
    folder = output_dir / folder_name(config)
    if folder.exists():  # a rerun of one name: <name>/<i>/ (get_results_dir)
        folder = folder / str(1 + sum(1 for p in folder.iterdir() if p.is_dir()))
    folder.mkdir(parents=True)
    df = pd.DataFrame(rows)
    if config["query_aware"]:  # _load_and_prepare_dataset: the question joins the context
        df["context"] = df["context"] + df["question"]
        df["question"] = ""
    df["predicted_answer"] = answers
    if measured is not None or "compression_ratio" in config:
        df["compression_ratio"] = measured if measured is not None else config["compression_ratio"]
    if "predictions.csv" in files:
        df[list(set(df.columns) - {"context"})].to_csv(folder / "predictions.csv", index=False)
    if "metrics.json" in files:
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=4))
    if "config.yaml" in files:
        with (folder / "config.yaml").open("w") as handle:
            yaml.dump(config, handle, default_flow_style=False, indent=2, sort_keys=False)
    return folder


def ruler_metrics(answers: dict[str, str]) -> dict[str, Any]:
    """kvpress's RULER calculate_metrics by hand: per task, 100 x the mean string match, 2 places."""
    out: dict[str, list[float]] = {}
    for row, answer in answers.items():
        task, _, refs = RULER[row]
        if task.startswith("qa"):
            score = float(any(r.lower() in answer.lower() for r in refs))
        else:
            score = sum(r.lower() in answer.lower() for r in refs) / len(refs)
        out.setdefault(task, []).append(score)
    return {task: {"string_match": round(100 * sum(v) / len(v), 2)} for task, v in out.items()}


def make_results(root: Path) -> Path:
    rows = [ruler_row(r) for r in RULER]

    def answers(run: str) -> list[str]:
        return [ANSWERS[run][r] for r in RULER]

    control = config_of(press_name="no_press", compression_ratio=0.0, press_init_command="None")
    write_run(root, control, rows, answers("no_press"), ruler_metrics(ANSWERS["no_press"]))
    knorm = config_of()
    write_run(root, knorm, rows, answers("knorm"), ruler_metrics(ANSWERS["knorm"]))
    write_run(root, knorm, rows, answers("knorm"), ruler_metrics(ANSWERS["knorm"]))  # a rerun: <name>/1/
    snap = config_of(
        press_name="snapkv", query_aware=True, press_init_command="SnapKVPress(compression_ratio=0.5)"
    )
    stated = ruler_metrics(ANSWERS["snapkv_qa"]) | {"niah_single_1": {"string_match": 40.0}}  # true: 33.33
    write_run(root, snap, rows, answers("snapkv_qa"), stated)
    kvzap = config_of(press_name="kvzap_linear", threshold=-3.0, press_init_command="DMSPress(threshold=-3)")
    write_run(root, kvzap, rows, answers("kvzap"), ruler_metrics(ANSWERS["kvzap"]), measured=0.62)
    # no control: no no_press run of Llama
    write_run(root, config_of(model=LLAMA, compression_ratio=0.25), rows, answers("knorm"), {})
    # a run that stopped while scoring: predictions only, its settings from the folder name
    tova = config_of(press_name="tova", compression_ratio=0.25)
    write_run(root, tova, rows, answers("knorm"), files=("predictions.csv",))
    return root


# a kvpress task: LongBench's hub id, the subset the folder holding the run's data_dir
@dataclass
class LongBenchLike(KvpressTask):
    hub_id: ClassVar[str] = "Xnhyacinth/LongBench"
    benchmark: ClassVar[str] = "longbench"
    subsets: ClassVar[tuple[str, ...]] = ("narrativeqa", "trec")
    answer_column: ClassVar[str] = "answers"
    metadata_columns: ClassVar[tuple[str, ...]] = ("all_classes",)

    def evaluate(self, answer: str, source: Source) -> Score:
        assert source.metadata["task"] == self.subset and source.metadata["_id"]  # the row's own columns
        return Score.of(float(any(a.lower() in answer.lower() for a in source.answers)), answer.strip())


def _entry(name: str, obj: type) -> registry_mod.Entry:
    group = registry_mod.GROUPS["task"]
    return registry_mod.Entry(name, group, "kvx", "0", EntryPoint(name, "x:y", group), _obj=obj, loaded=True)


@pytest.fixture(autouse=True)
def tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task registry of these tests: kvx's RULER niah_single_1 and cwe, and the LongBench-like task."""
    from kvx.tasks.ruler import CommonWords, NiahSingle1

    entries = [_entry("ruler_niah_single_1", NiahSingle1), _entry("ruler_cwe", CommonWords)]
    entries.append(_entry("longbench", LongBenchLike))
    monkeypatch.setitem(registry_mod._REGISTRIES, "task", registry_mod.Registry("task", "kvx.tasks", entries))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_results(tmp_path_factory.mktemp("results"))


@pytest.fixture
def imported(results: Path, tmp_path: Path) -> Path:
    out = tmp_path / "kvpress"
    assert main(["kvpress", str(results), "--out", str(out), "--quiet"]) == 0
    return out


def _records(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*/*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh)
    return out


def _of(records: list[dict], folder: str) -> list[dict]:
    return [r for r in records if r["provenance"]["kvpress"]["folder"] == folder]


KNORM = "ruler__4096__Qwen--Qwen3-8B__knorm__0.50"
SNAP = "ruler__4096__Qwen--Qwen3-8B__snapkv__0.50__query_aware"
KVZAP = "ruler__4096__Qwen--Qwen3-8B__kvzap_linear__-3.00"
LLAMA_KNORM = "ruler__4096__meta-llama--Llama-3.1-8B-Instruct__knorm__0.25"
TOVA = "ruler__4096__Qwen--Qwen3-8B__tova__0.25"
CONTROL = "ruler__4096__Qwen--Qwen3-8B__no_press__0.00"


def transitions(records: list[dict]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for r in records:
        out.setdefault(r["task"], Counter())[r["transition"] or r["status"]] += 1
    return out


def test_records_pair_with_the_no_press_run(imported: Path) -> None:
    records = _records(imported)
    for record in records:
        validate(record)
        assert set(unknown_fields(record)) == set(record["provenance"]["unknown"]), record["key"]
    assert len({r["key"] for r in records}) == len(records) == 6 * 5  # the control run makes no records
    niah, cwe = "ruler_niah_single_1", "ruler_cwe"
    assert transitions(_of(records, KNORM)) == {
        niah: Counter({"C→C": 1, "C→W": 1, "W→C": 1}),
        cwe: Counter({"C→W": 1}),
        "kvpress_ruler": Counter({"unsupported": 1}),
    }
    assert transitions(_of(records, f"{KNORM}~1")) == transitions(_of(records, KNORM))  # the rerun
    assert transitions(_of(records, SNAP)) == {
        niah: Counter({"C→W": 1, "C→C": 1, "W→W": 1}),
        cwe: Counter({"C→C": 1}),
        "kvpress_ruler": Counter({"unsupported": 1}),
    }
    assert transitions(_of(records, KVZAP))[niah] == Counter({"C→C": 2, "W→W": 1})
    # the query-aware run's rows (no question in its file) are the control's rows, by content
    snap = {r["source_id"]: r for r in _of(records, SNAP)}
    knorm = {r["source_id"]: r for r in _of(records, KNORM)}
    assert snap.keys() == knorm.keys()
    [a] = [r for r in snap.values() if r["references"] == ["1111111"]]
    assert a["full"]["output"] == "1111111" and a["compressed"]["output"] == "1234567"
    assert a["cell"]["fields"]["query_aware"] == "question"
    assert a["setting"]["method_parameter"]["control_query_aware"] is False
    [d] = [r for r in knorm.values() if r["task"] == cwe]
    assert d["references"] == ["alpha", "beta"] and d["compressed"]["score"] == 0.5
    # RULER's qa row: no kvx task scores it; kvpress's answers are kept
    [qa] = [r for r in knorm.values() if r["task"] == "kvpress_ruler"]
    assert qa["status"] == "unsupported" and "no kvx task scores kvpress ruler rows of qa_1" in qa["reason"]
    assert qa["provenance"]["kvpress"] | {"row": None} == {
        "folder": KNORM,
        "row": None,
        "predicted_answer": "London",
        "control_predicted_answer": "Paris",
    }
    assert qa["cell"]["fields"]["task.subset"] == "qa_1"


def test_cells_keep_every_setting_apart(imported: Path) -> None:
    records = _records(imported)
    knorm = next(r for r in _of(records, KNORM) if r["task"] == "ruler_niah_single_1")
    fields = knorm["cell"]["fields"]
    assert {k: fields[k] for k in ("task", "task.dataset", "task.data_dir", "context_tokens", "reader")} == {
        "task": "ruler_niah_single_1",
        "task.dataset": "ruler",
        "task.data_dir": "4096",
        "context_tokens": 4096,
        "reader": QWEN,
    }
    assert (fields["press"], fields["press.kvpress_name"], fields["setting.value"]) == ("knorm", "knorm", 0.5)
    assert fields["press.attn_implementation"] == "flash_attention_2"
    assert fields["reader.model_kwargs"] == '{"dtype": "auto"}'
    assert knorm["setting"] == {
        "kind": "ratio",
        "value": 0.5,
        "ratio": 0.5,
        "retained_share": 0.5,
        "method_parameter": {
            "kvpress_name": "knorm",
            "press_init_command": "KnormPress(compression_ratio=0.5)",
            "measured_compression_ratio": 0.5,
            "control": CONTROL,
            "control_query_aware": False,
        },
    }
    assert knorm["seed"] == 42 and knorm["compressor"] == "knorm" and knorm["task_family"] == "ruler"
    rerun = _of(records, f"{KNORM}~1")[0]["cell"]["fields"]
    assert (fields["press.repeat"], rerun["press.repeat"]) == (0, 1)
    kvzap = next(r for r in _of(records, KVZAP) if r["status"] == "supported")
    assert kvzap["compressor"] == "kvzap_linear" and kvzap["cell"]["fields"]["press.threshold"] == -3.0
    assert (kvzap["setting"]["kind"], kvzap["setting"]["ratio"]) == ("none", 0.62)
    assert kvzap["setting"]["retained_share"] == pytest.approx(0.38)
    cells = {r["cell"]["id"] for r in records if r["task"] == "ruler_niah_single_1"}
    assert len(cells) == 6  # knorm, its rerun, snapkv, kvzap, Llama's knorm, tova


def test_runs_without_a_control_or_a_config(imported: Path) -> None:
    records = _records(imported)
    alone = _of(records, LLAMA_KNORM)
    assert Counter(r["status"] for r in alone) == {"error": 4, "unsupported": 1}
    reason = next(r["reason"] for r in alone if r["status"] == "error")
    assert reason.startswith("no FullCache control: no no_press run (or ratio-0 run) of dataset=ruler")
    assert all(r["full"] is None for r in alone)
    tova = _of(records, TOVA)
    assert transitions(tova)["ruler_niah_single_1"] == Counter({"C→C": 1, "C→W": 1, "W→C": 1})
    first = tova[0]
    assert first["seed"] is None and first["provenance"]["unknown"]["seed"].startswith("no config.yaml")
    unverified = first["setting"]["method_parameter"]["control_unverified"]
    assert unverified == ["seed", "max_new_tokens", "fp8", "model_kwargs"]
    manifest = json.loads((imported / "import_manifest.json").read_text())
    runs = {run["name"]: run for run in manifest["runs"]}
    assert runs[TOVA]["settings_from"] == "folder name" and runs[TOVA]["lacks"][0].startswith("config.yaml")
    assert runs[TOVA]["metrics_check"] == "no metrics.json"
    assert runs[LLAMA_KNORM]["control"] is None and runs[LLAMA_KNORM]["control_reason"].startswith(
        "no no_press"
    )
    assert runs[CONTROL]["role"] == "control" and runs[KNORM]["control"] == CONTROL


def test_manifest_compares_kvpress_metrics(imported: Path) -> None:
    manifest = json.loads((imported / "import_manifest.json").read_text())
    runs = {run["name"]: run for run in manifest["runs"]}
    assert runs[KNORM]["metrics_check"] == [
        {"group": "cwe", "stated": 50.0, "rows": 1, "kvx": 50.0, "agrees": True},
        {"group": "niah_single_1", "stated": 66.67, "rows": 3, "kvx": 66.666667, "agrees": True},
        {"group": "qa_1", "stated": 0.0, "rows": 1, "kvx": None, "reason": "1 of 1 rows not scored"},
    ]
    assert manifest["metrics_differ"] == [f"{SNAP}: niah_single_1 40.0 in metrics.json, 33.333333 by kvx"]
    counts = manifest["counts"]
    assert counts["records"] == 30 and counts["runs"] == 7
    assert counts["by_status"] == {"error": 4, "supported": 20, "unsupported": 6}
    assert counts["controls"] == 4  # A, B, C, D of the one control, in one ledger per task: 3 + 1


def test_aggregate_reads_the_import(imported: Path, tmp_path: Path) -> None:
    """The matrix and failure sets of the import, with 0 problems, by hand from the tables above."""
    from kvx.aggregate.__main__ import main as aggregate

    report = tmp_path / "report"
    args = ["--records", str(imported), "--out", str(report), "--no-log", "--quiet", "--no-plots"]
    assert aggregate([*args, "--boot", "50", "--splits", "50"]) == 0
    with (report / "problems.csv").open() as fh:
        problems = [(p["check"], p["severity"], p["message"]) for p in csv.DictReader(fh)]
    assert problems == []
    matrix = pd.read_csv(report / "matrix.csv")
    # labels name what varies: the rerun's index, the query-aware mode, what the run without
    # config.yaml does not say (its max_new_tokens, fp8, model_kwargs: unknown)
    niah = matrix[
        (matrix["level"] == "task") & (matrix["task"] == "ruler_niah_single_1[max_new_tokens=None]")
    ]
    niah = niah[niah["reader"].str.startswith(QWEN)].set_index("compressor")
    knorm, rerun = (
        niah.loc["knorm[query_aware=False, repeat=0]"],
        niah.loc["knorm[query_aware=False, repeat=1]"],
    )
    assert (knorm["n_fc"], knorm["n_cc"], knorm["n_cw"], knorm["n_wc"], knorm["cw_rate"]) == (2, 1, 1, 1, 0.5)
    assert (rerun["n_cw"], rerun["cw_rate"]) == (1, 0.5)
    snap = niah.loc["snapkv[query_aware=question]"]
    assert (snap["n_cc"], snap["n_cw"], snap["n_ww"]) == (1, 1, 1)
    assert (niah.loc["kvzap_linear[query_aware=False]", "n_cw"], niah.loc["FullCache", "n_fc"]) == (0, 2)
    family = matrix[
        (matrix["level"] == "family") & matrix["compressor"].str.startswith("knorm[query_aware=False, r")
    ]
    assert set(family["task"]) == {"ruler/* @4096"} and list(family["n_cw"]) == [2, 2]  # B and D
    llama = matrix[(matrix["level"] == "task") & matrix["reader"].str.startswith(LLAMA)]
    assert set(llama["n_error"]) == {0, 1, 3} and set(llama["n_supported"]) == {0}  # no control: no pair
    failures = pd.read_csv(report / "failures.csv")
    # C->W sets: niah B (knorm, rerun, tova) and A (snapkv); cwe D (knorm, rerun, tova)
    assert failures["n_failures"].sum() == 4 + 3 and failures["n_failures"].max() == 1


def test_a_kvpress_task_scores_its_subset(tmp_path: Path) -> None:
    """LongBench rows go to the task whose hub_id is LongBench's, set to the subset whose folder is the
    run's data_dir, the row's columns (all_classes, _id) in its source."""
    rows = [
        {
            "context": f"story {i}",
            "question": f"Who is {name}?",
            "answer_prefix": "Answer:",
            "answers": np.array(refs, dtype=object),
            "all_classes": None,
            "_id": f"id{i}",
            "length": 1000 + i,
            "dataset": "narrativeqa",
            "language": "en",
            "task": "narrativeqa",
            "max_new_tokens": 148,
        }
        for i, (name, refs) in enumerate([("Ann", ["a teacher"]), ("Bob", ["a baker", "the baker"])])
    ]
    base = {"dataset": "longbench", "data_dir": "narrativeqa"}
    write_run(
        tmp_path / "results",
        config_of(**base, press_name="no_press", compression_ratio=0.0),
        rows,
        ["She is a teacher", "a baker"],
        100.0,
    )
    write_run(
        tmp_path / "results", config_of(**base, press_name="snapkv"), rows, ["a teacher", "no idea"], 25.0
    )
    out = tmp_path / "out"
    assert main(["kvpress", str(tmp_path / "results"), "--out", str(out), "--quiet"]) == 0
    records = _records(out)
    assert [r["transition"] for r in sorted(records, key=lambda r: r["references"])] == ["C→W", "C→C"]
    fields = records[0]["cell"]["fields"]
    assert (records[0]["task"], fields["task.subset"], fields["task.path"]) == (
        "longbench",
        "narrativeqa",
        "",
    )
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["metrics_differ"] == [
        "longbench__narrativeqa__Qwen--Qwen3-8B__snapkv__0.50: all 25.0 in metrics.json, 50.0 by kvx"
    ]


def test_lists_as_numpy_prints_them() -> None:
    assert parse_list(str(np.array(["a b", "it's", 'say "x"'], dtype=object))) == ["a b", "it's", 'say "x"']
    assert parse_list(str(np.array([f"word{i}" for i in range(30)]))) == [f"word{i}" for i in range(30)]
    assert parse_list("['a', 'b']") == ["a", "b"]
    assert parse_list("[-2,7]") is None and parse_list("Paris") is None
    assert settings_from_name(
        "ruler__4096__Qwen--Qwen3-8B__snapkv__0.50__fraction0.100__compressed_questions"
    ) == {
        "dataset": "ruler",
        "data_dir": "4096",
        "model": QWEN,
        "press_name": "snapkv",
        "compression_ratio": 0.5,
        "threshold": None,
        "head_compression_ratio": None,
        "fraction": 0.1,
        "max_context_length": None,
        "query_aware": True,
        "key_channel_compression_ratio": None,
        "needle_depth": None,
    }
    assert settings_from_name("aime25__Qwen--Qwen3-8B__duo_attention__0.25")["head_compression_ratio"] == 0.25


def test_bad_input(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def one_line() -> str:
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("kvx.importers: "), err
        return err[0]

    out = str(tmp_path / "out")
    assert main(["kvpress", str(tmp_path / "missing"), "--out", out]) == 2
    assert "no such file or directory" in one_line()
    (tmp_path / "empty").mkdir()
    assert main(["kvpress", str(tmp_path / "empty"), "--out", out]) == 2
    assert "no kvpress run folder" in one_line()

    def broken(name: str, change: Any) -> str:
        copy = tmp_path / f"broken-{name}"
        shutil.copytree(results, copy)
        change(copy / KNORM)
        assert main(["kvpress", str(copy), "--out", out, "--quiet"]) == 2
        return one_line()

    def no_answer(folder: Path) -> None:
        frame = pd.read_csv(folder / "predictions.csv")
        frame.drop(columns=["predicted_answer"]).to_csv(folder / "predictions.csv", index=False)

    def before_ab418ac(folder: Path) -> None:  # kvpress July 2025: the answers and the ratio only
        frame = pd.read_csv(folder / "predictions.csv")
        frame[["predicted_answer", "compression_ratio"]].to_csv(folder / "predictions.csv", index=False)

    assert f"{KNORM}/predictions.csv: no 'predicted_answer' column" in broken("answer", no_answer)
    assert "before ab418ac (August 2025) saved no dataset columns" in broken("old", before_ab418ac)
    message = broken("yaml", lambda f: (f / "config.yaml").write_text("dataset: [unclosed\n"))
    assert "config.yaml: not readable YAML" in message
    message = broken("json", lambda f: (f / "metrics.json").write_text("{not json"))
    assert "metrics.json: not readable JSON" in message
    message = broken(
        "ratio", lambda f: (f / "config.yaml").write_text(yaml.dump(config_of(compression_ratio=1.0)))
    )
    assert "compression_ratio 1.0 is not a kvpress ratio in [0, 1)" in message

    def renamed(folder: Path) -> None:
        (folder / "config.yaml").unlink()
        folder.rename(folder.with_name("my-run"))

    assert "no config.yaml and the folder name is not one kvpress's evaluate.py gives" in broken(
        "name", renamed
    )
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "ruler__4096__Qwen--Qwen3-8B__knorm__0.5.csv").write_text("predicted_answer\nx\n")
    assert main(["kvpress", str(flat), "--out", out]) == 2
    assert "a flat results file of kvpress before #96" in one_line()
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
