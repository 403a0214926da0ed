"""``python -m kvx.importers kvpress``: kvpress run folders written here as kvpress's
``evaluation/evaluate.py`` writes them, converted, then read by ``python -m kvx.aggregate --records``.

The folders follow evaluate.py at NVIDIA/kvpress HEAD: ``<output_dir>/<name from get_results_dir>/``
with ``predictions.csv`` (the dataset's rows without ``context``, columns in set order, list columns as
numpy prints them, ``predicted_answer`` and, but for DecodingPress runs, ``compression_ratio``),
``metrics.json`` (``json.dump(..., indent=4)`` of the benchmark's calculate_metrics) and ``config.yaml``
(``yaml.dump`` of EvaluationConfig with its popping rules). A query-aware run's rows have the question
moved into the context, so its ``question`` column is empty. The rows are scored by kvx's kvpress tasks
(``kvx.tasks.kvpress``), or by kvx's own RULER tasks where no kvpress task is registered. Every
expected count is by hand from the tables below.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from collections import Counter
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from kvx.core import registry as registry_mod
from kvx.core.records import unknown_fields, validate
from kvx.importers.__main__ import main
from kvx.importers.kvpress import parse_list, settings_from_name
from kvx.tasks.kvpress.longbench import LongBench, LongBenchE
from kvx.tasks.kvpress.needle import NeedleInHaystack
from kvx.tasks.kvpress.ruler import KvpressRuler
from kvx.tasks.ruler import CommonWords, NiahSingle1

QWEN, LLAMA = "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"
# RULER 4096 rows: (task, key, references); the question and answer prefix name the key
RULER = {
    "A": ("niah_single_1", "apple", ["1111111"]),
    "B": ("niah_single_1", "banana", ["2222222"]),
    "C": ("niah_single_1", "cherry", ["3333333"]),
    "D": ("cwe", "", ["alpha", "beta"]),
    "E": ("qa_1", "", ["Paris", "paris city"]),
}
# run -> row -> predicted answer; scores: string_match_all (niah, cwe: share of references found),
# string_match_part (qa: any reference found)
ANSWERS = {
    "no_press": {"A": "1111111", "B": "2222222.", "C": "9999999", "D": "alpha, beta", "E": "Paris"},
    "knorm": {"A": "1111111", "B": "2222223", "C": "3333333", "D": "alpha", "E": "London"},
    "snapkv_qa": {"A": "1234567", "B": "2222222", "C": "0", "D": "Alpha and BETA", "E": "Paris"},
    "kvzap": {"A": "1111111", "B": "2222222", "C": "9999999", "D": "beta alpha", "E": "Paris"},
}
# the FullCache control: A, B, D, E correct, C wrong. Hand-counted transitions:
# knorm 0.5: A C->C, B C->W, C W->C, D C->W (0.5 of the words), E C->W
# snapkv 0.5 query-aware: A C->W, B C->C, C W->W, D C->C, E C->C
# kvzap_linear threshold -3: A C->C, B C->C, C W->W, D C->C, E C->C


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
    if config["max_context_length"] is not None:
        parts.append(f"max_context{config['max_context_length']}")
    if config["query_aware"]:
        parts.append("query_aware")
    if config["needle_depth"] is not None and config["dataset"] == "needle_in_haystack":
        parts.append(f"needle_depth{config['needle_depth']}")
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
    if not config["press_name"].startswith("decoding_"):  # _run_inference's DecodingPress path sets none
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


def _entry(name: str, obj: type) -> registry_mod.Entry:
    group = registry_mod.GROUPS["task"]
    return registry_mod.Entry(name, group, "kvx", "0", EntryPoint(name, "x:y", group), _obj=obj, loaded=True)


def use_tasks(monkeypatch: pytest.MonkeyPatch, **classes: type) -> None:
    """The task registry the import sees: exactly these tasks."""
    entries = [_entry(name, cls) for name, cls in classes.items()]
    monkeypatch.setitem(registry_mod._REGISTRIES, "task", registry_mod.Registry("task", "kvx.tasks", entries))


@pytest.fixture(autouse=True)
def tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvx's kvpress tasks (two on LongBench's hub id) and its own RULER tasks."""
    use_tasks(
        monkeypatch,
        ruler_niah_single_1=NiahSingle1,
        kvpress_ruler=KvpressRuler,
        longbench=LongBench,
        longbench_e=LongBenchE,
        needle_in_haystack=NeedleInHaystack,
    )


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
    """RULER subset (or task) -> transitions, or statuses of records without one."""
    out: dict[str, Counter] = {}
    for r in records:
        name = r["cell"]["fields"].get("task.subset", r["task"])
        out.setdefault(name, Counter())[r["transition"] or r["status"]] += 1
    return out


def test_records_pair_with_the_no_press_run(imported: Path) -> None:
    records = _records(imported)
    for record in records:
        validate(record)
        assert set(unknown_fields(record)) == set(record["provenance"]["unknown"]), record["key"]
    assert len({r["key"] for r in records}) == len(records) == 6 * 5  # the control run makes no records
    assert {r["task"] for r in records} == {"kvpress_ruler"}  # kvpress's RULER task, not kvx's own
    assert transitions(_of(records, KNORM)) == {
        "niah_single_1": Counter({"C→C": 1, "C→W": 1, "W→C": 1}),
        "cwe": Counter({"C→W": 1}),
        "qa_1": Counter({"C→W": 1}),
    }
    assert transitions(_of(records, f"{KNORM}~1")) == transitions(_of(records, KNORM))  # the rerun
    assert transitions(_of(records, SNAP)) == {
        "niah_single_1": Counter({"C→W": 1, "C→C": 1, "W→W": 1}),
        "cwe": Counter({"C→C": 1}),
        "qa_1": Counter({"C→C": 1}),
    }
    assert transitions(_of(records, KVZAP))["niah_single_1"] == Counter({"C→C": 2, "W→W": 1})
    # the query-aware run's rows (no question in its file) are the control's rows, by content
    snap = {r["source_id"]: r for r in _of(records, SNAP)}
    knorm = {r["source_id"]: r for r in _of(records, KNORM)}
    assert snap.keys() == knorm.keys()
    [a] = [r for r in snap.values() if r["references"] == ["1111111"]]
    assert a["full"]["output"] == "1111111" and a["compressed"]["output"] == "1234567"
    assert a["cell"]["fields"]["query_aware"] == "question"
    assert a["setting"]["method_parameter"]["control_query_aware"] is False
    [d] = [r for r in knorm.values() if r["cell"]["fields"]["task.subset"] == "cwe"]
    assert d["references"] == ["alpha", "beta"] and d["compressed"]["score"] == 0.5
    [e] = [r for r in knorm.values() if r["cell"]["fields"]["task.subset"] == "qa_1"]
    assert (e["full"]["score"], e["compressed"]["score"]) == (1.0, 0.0)  # string_match_part


def test_cells_keep_every_setting_apart(imported: Path) -> None:
    records = _records(imported)
    knorm = next(r for r in _of(records, KNORM) if r["cell"]["fields"]["task.subset"] == "niah_single_1")
    fields = knorm["cell"]["fields"]
    assert {k: fields[k] for k in ("task", "task.subset", "task.data_dir", "context_tokens", "reader")} == {
        "task": "kvpress_ruler",
        "task.subset": "niah_single_1",
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
    assert knorm["seed"] == 42 and knorm["compressor"] == "knorm" and "task_family" not in knorm
    rerun = next(r for r in _of(records, f"{KNORM}~1"))["cell"]["fields"]
    assert (fields["press.repeat"], rerun["press.repeat"]) == (0, 1)
    kvzap = next(r for r in _of(records, KVZAP) if r["status"] == "supported")
    assert kvzap["compressor"] == "kvzap_linear" and kvzap["cell"]["fields"]["press.threshold"] == -3.0
    assert (kvzap["setting"]["kind"], kvzap["setting"]["ratio"]) == ("none", 0.62)
    assert kvzap["setting"]["retained_share"] == pytest.approx(0.38)
    niah = [r for r in records if r["cell"]["fields"]["task.subset"] == "niah_single_1"]
    assert len({r["cell"]["id"] for r in niah}) == 6  # knorm, its rerun, snapkv, kvzap, Llama's knorm, tova


def test_runs_without_a_control_or_a_config(imported: Path) -> None:
    records = _records(imported)
    alone = _of(records, LLAMA_KNORM)
    assert Counter(r["status"] for r in alone) == {"error": 5} and all(r["full"] is None for r in alone)
    assert alone[0]["reason"].startswith(
        "no FullCache control: no no_press run (or ratio-0 run) of dataset=ruler"
    )
    tova = _of(records, TOVA)  # predictions only: the settings of its folder name
    assert transitions(tova)["niah_single_1"] == Counter({"C→C": 1, "C→W": 1, "W→C": 1})
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
        {"group": "qa_1", "stated": 0.0, "rows": 1, "kvx": 0.0, "agrees": True},
    ]
    assert manifest["metrics_differ"] == [f"{SNAP}: niah_single_1 40.0 in metrics.json, 33.333333 by kvx"]
    counts = manifest["counts"]
    assert counts["records"] == 30 and counts["runs"] == 7
    assert counts["by_status"] == {"error": 5, "supported": 25}
    assert counts["controls"] == 5  # the control's five rows, one ledger per subset


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
    # labels name what varies: the subset, the rerun's index, the query-aware mode, and what the run
    # without config.yaml does not say (its max_new_tokens, fp8, model_kwargs: unknown)
    niah = matrix[
        (matrix["level"] == "task")
        & (matrix["task"] == "kvpress_ruler[subset=niah_single_1, max_new_tokens=None]")
    ]
    niah = niah[niah["reader"].str.startswith(QWEN)].set_index("compressor")
    knorm = niah.loc["knorm[query_aware=False, repeat=0]"]
    assert (knorm["n_fc"], knorm["n_cc"], knorm["n_cw"], knorm["n_wc"], knorm["cw_rate"]) == (2, 1, 1, 1, 0.5)
    assert niah.loc["knorm[query_aware=False, repeat=1]", "n_cw"] == 1
    snap = niah.loc["snapkv[query_aware=question]"]
    assert (snap["n_cc"], snap["n_cw"], snap["n_ww"]) == (1, 1, 1)
    assert (niah.loc["kvzap_linear[query_aware=False]", "n_cw"], niah.loc["FullCache", "n_fc"]) == (0, 2)
    pooled = matrix[
        (matrix["level"] == "pooled") & (matrix["compressor"] == "knorm[query_aware=False, repeat=0]")
    ]
    assert list(pooled["n_fc"]) == [4] and list(pooled["n_cw"]) == [3]  # B, D, E of A, B, D, E
    llama = matrix[(matrix["level"] == "task") & matrix["reader"].str.startswith(LLAMA)]
    assert set(llama["n_error"]) == {1, 3} and set(llama["n_supported"]) == {0}  # no control: no pair
    failures = pd.read_csv(report / "failures.csv")
    # C->W sets: B (knorm, rerun, tova), A (snapkv); D and E (knorm, rerun, tova)
    assert failures["n_failures"].sum() == 4 + 3 + 3 and failures["n_failures"].max() == 1


def test_kvx_ruler_tasks_without_kvpress_ruler(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a kvpress RULER task, kvx's own RULER tasks score their subtasks (RULER's string match);
    a subtask none scores is unsupported, with kvpress's answers kept."""
    use_tasks(monkeypatch, ruler_niah_single_1=NiahSingle1, ruler_cwe=CommonWords)
    out = tmp_path / "out"
    assert main(["kvpress", str(results), "--out", str(out), "--quiet"]) == 0
    knorm = _of(_records(out), KNORM)
    assert transitions(knorm) == {
        "ruler_niah_single_1": Counter({"C→C": 1, "C→W": 1, "W→C": 1}),
        "ruler_cwe": Counter({"C→W": 1}),
        "qa_1": Counter({"unsupported": 1}),
    }
    [qa] = [r for r in knorm if r["status"] == "unsupported"]
    assert qa["task"] == "kvpress_ruler" and "no kvx task scores kvpress ruler rows of qa_1" in qa["reason"]
    assert qa["provenance"]["kvpress"] | {"row": None} == {
        "folder": KNORM,
        "row": None,
        "predicted_answer": "London",
        "control_predicted_answer": "Paris",
    }
    assert {r["task"]: r.get("task_family") for r in knorm} == {
        "ruler_niah_single_1": "ruler",
        "ruler_cwe": "ruler",
        "kvpress_ruler": None,
    }
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert list(manifest["counts"]["unscored"].values()) == [6]  # qa_1 of six runs


def test_a_kvpress_task_scores_its_subset(tmp_path: Path) -> None:
    """LongBench rows go to the task on LongBench's hub id whose subset's folder is the run's data_dir
    (longbench, not longbench_e), scored with the row's own columns (qa F1 for narrativeqa)."""
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
    no_press = config_of(**base, press_name="no_press", compression_ratio=0.0)
    write_run(tmp_path / "results", no_press, rows, ["A teacher.", "the baker"], 100.0)
    snap = config_of(**base, press_name="snapkv")
    write_run(tmp_path / "results", snap, rows, ["teacher", "Bob is a baker"], 80.0)  # F1 1 and 1/2
    out = tmp_path / "out"
    assert main(["kvpress", str(tmp_path / "results"), "--out", str(out), "--quiet"]) == 0
    records = sorted(_records(out), key=lambda r: r["references"])
    assert [r["transition"] for r in records] == ["C→W", "C→C"]
    assert records[0]["compressed"]["metrics"] == {"qa_f1": 0.5}  # "bob is baker" against "baker"
    fields = records[0]["cell"]["fields"]
    assert (records[0]["task"], fields["task.subset"]) == ("longbench", "narrativeqa")
    manifest = json.loads((out / "import_manifest.json").read_text())
    snapkv = next(run for run in manifest["runs"] if run["settings"]["press_name"] == "snapkv")
    assert snapkv["metrics_check"] == [
        {"group": "all", "stated": 80.0, "rows": 2, "kvx": 75.0, "agrees": False}
    ]


def test_needle_rows_are_cells_of_their_depth(tmp_path: Path) -> None:
    """A needle run of two depths: each row is needle_in_haystack at its own depth, sized to the run's
    max_context_length (kvx's context_tokens)."""
    needle = "The best thing to do in San Francisco is eat a sandwich."
    rows = [
        {
            "context": f"book {d}",
            "needle": needle,
            "needle_depth": d,
            "question": "What is the best thing?",
            "answer_prefix": "Answer:",
            "max_new_tokens": 64,
        }
        for d in (0, 50)
    ]
    base = {
        "dataset": "needle_in_haystack",
        "data_dir": None,
        "max_context_length": 2048,
        "needle_depth": [0, 50],
    }
    no_press = config_of(**base, press_name="no_press", compression_ratio=0.0)
    write_run(tmp_path / "results", no_press, rows, [needle, needle], [])
    write_run(tmp_path / "results", config_of(**base), rows, [needle, "a sandwich"], [])
    out = tmp_path / "out"
    assert main(["kvpress", str(tmp_path / "results"), "--out", str(out), "--quiet"]) == 0
    records = sorted(_records(out), key=lambda r: r["cell"]["fields"]["task.needle_depth"])
    assert [r["transition"] for r in records] == ["C→C", "C→W"]
    assert [r["cell"]["fields"]["task.needle_depth"] for r in records] == [0, 50]
    assert {r["cell"]["fields"]["context_tokens"] for r in records} == {2048}
    assert records[1]["compressed"]["score"] == pytest.approx(
        2 / 12
    )  # "a sandwich": 2 of the needle's 12 words


def test_decoding_and_fp8_runs(tmp_path: Path) -> None:
    """A DecodingPress run (no ratio column; its own fields fix what it keeps) pairs with the control;
    an fp8 run (its quantization config saved as a Python object in model_kwargs) has none."""
    rows = [ruler_row(r) for r in RULER]
    results = tmp_path / "results"
    control = config_of(press_name="no_press", compression_ratio=0.0, press_init_command="None")
    write_run(results, control, rows, [ANSWERS["no_press"][r] for r in RULER], {})
    decoding = config_of(press_name="decoding_knorm", compression_ratio=1.0, target_size=256)
    write_run(results, decoding, rows, [ANSWERS["knorm"][r] for r in RULER], {})
    fp8 = write_run(results, config_of(fp8=True), rows, [ANSWERS["knorm"][r] for r in RULER], {})
    text = (
        (fp8 / "config.yaml")
        .read_text()
        .replace(
            "  dtype: auto\n",
            "  dtype: auto\n  quantization_config: !!python/object:transformers.FineGrainedFP8Config\n"
            "    x: 1\n",
        )
    )
    (fp8 / "config.yaml").write_text(text)
    out = tmp_path / "out"
    assert main(["kvpress", str(results), "--out", str(out), "--quiet"]) == 0
    records = _records(out)
    decoded = _of(records, "ruler__4096__Qwen--Qwen3-8B__decoding_knorm__1.00")
    assert transitions(decoded)["niah_single_1"] == Counter({"C→C": 1, "C→W": 1, "W→C": 1})
    fields = decoded[0]["cell"]["fields"]
    assert (fields["setting.kind"], fields["press.target_size"], fields["press.compression_ratio"]) == (
        "none",
        256,
        1.0,
    )
    assert decoded[0]["setting"]["retained_share"] is None  # no measured ratio: unknown, never 1.0
    quantized = _of(records, KNORM)
    assert {r["status"] for r in quantized} == {"error"} and quantized[0]["cell"]["fields"][
        "reader.fp8"
    ] is True
    assert "FineGrainedFP8Config" in quantized[0]["cell"]["fields"]["reader.model_kwargs"]


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
