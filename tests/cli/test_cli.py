"""End to end through ``python -m kvx``: the design-card sweep in MLflow, reuse, interruption, install."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from kvx.testing import cli
from kvx.testing.cli import SOLO_LEASE, aggregate_strict, kvx_env

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TINY = ["reader=tiny", "n_sources=3", "context_tokens=300", "max_new_tokens=4", "progress=false", *SOLO_LEASE]


def kvx(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m kvx ARGS``, run in-process."""
    return cli.run("kvx", args, cwd, kvx_env())


def started(args: list[str], cwd: Path):
    """A sweep in the background, in its own process group (so kill -9 takes its workers too)."""
    return cli.popen("kvx", args, cwd, kvx_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def client(cwd: Path) -> tuple[MlflowClient, str]:
    c = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    return c, c.get_experiment_by_name("kvx").experiment_id


def runs(cwd: Path, role: str) -> list:
    c, exp = client(cwd)
    return c.search_runs([exp], filter_string=f"tags.`kvx.role` = '{role}'")


def finished_cells(db: Path) -> int:
    """Poll read-only with sqlite3: an MLflow client would race the writer's schema migration."""
    query = (
        "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE r.status = 'FINISHED' AND t.key = 'kvx.role' AND t.value = 'cell'"
    )
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute(query).fetchone()[0]
    except sqlite3.Error:
        return 0


def test_design_card_sweep_logs_parent_cells_and_control_then_reuses_them(tmp_path, blank_store):
    # window_size is a SnapKV field only, so TOVA gets its own sweep
    blank_store(tmp_path)
    proc = kvx(["-m", "press=snapkv", "ratio=0.25,0.5", "press.window_size=16", *TINY], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = kvx(["-m", "press=tova", "ratio=0.25,0.5", *TINY], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    c, _ = client(tmp_path)
    cells, parents, controls = runs(tmp_path, "cell"), runs(tmp_path, "sweep"), runs(tmp_path, "control")
    assert len(cells) == 4 and all(r.info.status == "FINISHED" for r in cells)
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in parents)
    assert {r.data.tags["mlflow.parentRunId"] for r in cells} == {p.info.run_id for p in parents}
    assert len(controls) == 1 and controls[0].info.status == "FINISHED"
    assert sum(r.data.metrics["controls_computed"] for r in cells) == 3  # once per source, whole grid
    for r in cells:
        assert r.data.params["choices.press"] in {"snapkv", "tova"} and "ratio" in r.data.params
        assert r.data.tags["version.kvpress"] and r.data.tags["kvx.config_hash"]
        path = c.download_artifacts(r.info.run_id, "records.jsonl", str(tmp_path / r.info.run_id))
        records = [json.loads(line) for line in Path(path).read_text().splitlines()]
        assert len(records) == 3 and all(rec["status"] == "supported" for rec in records)
        assert r.data.metrics["n_supported"] == 3

    again = kvx(["-m", "press=tova", "ratio=0.25,0.5", *TINY], tmp_path)
    assert again.returncode == 0 and (again.stdout + again.stderr).count("skip ") == 2
    assert len(runs(tmp_path, "cell")) == 4  # nothing recomputed, nothing duplicated


#: what docs/results.md lists that a tiny run does not log, and why
NOT_ON_TINY = {
    "params": {"reader.revision", "reader.weights_sha256", "reader.chat_template_sha256"},  # no fingerprint
    "metrics": {"cw_rate", "m.json_valid"},  # no FullCache-correct source; RULER has no answer metrics
    "tags": set(),
}


def results_md_lists() -> dict[str, tuple[set[str], list[re.Pattern[str]]]]:
    """docs/results.md's params, metrics and tags: literal names, and patterns for ``<placeholder>``s."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    out = {}
    for kind in NOT_ON_TINY:
        bullet = re.search(rf"^- \*\*{kind}\*\*:(.*?)(?=^- \*\*)", text, flags=re.S | re.M).group(1)
        tokens = [name for code in re.findall(r"`([^`]+)`", bullet) for name in code.split()]
        patterns = [
            re.compile(re.sub(r"<\w+>", lambda _: r"[\w.-]+", re.escape(name)))  # distributions have -
            for name in tokens
            if "<" in name
        ]
        out[kind] = ({name for name in tokens if "<" not in name}, patterns)
    return out


def test_a_run_with_outputs_dir_is_aggregated_there_and_logs_what_results_md_lists(tmp_path):
    proc = kvx([*TINY, "outputs_dir=D"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = ["--outputs-dir", "D", "--quiet", "--no-plots", "--no-log"]
    done = cli.run("kvx.aggregate", args, tmp_path, kvx_env())
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "3 records read" in done.stdout
    assert len(list((tmp_path / "D" / "aggregate").glob("*/report.html"))) == 1
    assert not (tmp_path / "outputs").exists()  # neither the run nor the aggregate wrote elsewhere
    c = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'D' / 'mlflow.db'}")
    exp = c.get_experiment_by_name("kvx").experiment_id
    [cell] = c.search_runs([exp], filter_string="tags.`kvx.role` = 'cell'")
    logged = {"params": cell.data.params, "metrics": cell.data.metrics, "tags": cell.data.tags}
    for kind, (names, patterns) in results_md_lists().items():
        unlisted = {k for k in logged[kind] if k not in names and not any(p.fullmatch(k) for p in patterns)}
        assert not unlisted, f"{kind} logged but not in docs/results.md: {sorted(unlisted)}"
        absent = names - set(logged[kind]) - NOT_ON_TINY[kind]
        assert not absent, f"{kind} docs/results.md lists but a run does not log: {sorted(absent)}"


def test_interrupted_grouped_sweep_resumes_without_duplicates(tmp_path, blank_store):
    """per_job=[ratio]: one job per press, killed once the first job's cells are finished."""
    blank_store(tmp_path)
    args = ["-m", "press=tova,knorm", "ratio=0.25,0.5", "reader=tiny", "n_sources=6", "per_job=[ratio]"]
    args += ["context_tokens=1500", "max_new_tokens=16", "progress=false", *SOLO_LEASE]
    proc = started(args, tmp_path)
    deadline = time.time() + 300
    while time.time() < deadline and finished_cells(tmp_path / "outputs" / "mlflow.db") == 0:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = [r for r in runs(tmp_path, "cell") if r.info.status == "FINISHED"]
    assert 1 <= len(finished_before) < 4

    resumed = kvx(args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    cells = runs(tmp_path, "cell")
    assert len(cells) == 4 and all(r.info.status == "FINISHED" for r in cells)
    assert len({r.data.tags["kvx.config_hash"] for r in cells}) == 4
    assert {r.info.run_id for r in finished_before} <= {r.info.run_id for r in cells}
    assert (resumed.stdout + resumed.stderr).count("skip ") == len(finished_before)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)  # the resumed sweep's plan: all 4 cells


def test_a_sweep_killed_mid_source_loop_resumes_at_the_sources_it_reached(tmp_path, blank_store):
    """The default sweep runs its cells source by source in one job: killed before any cell
    finished, the rerun reuses every spooled source and computes only the rest."""
    blank_store(tmp_path)
    args = ["-m", "press=tova,knorm", "ratio=0.25,0.5", "reader=tiny", "n_sources=6"]
    args += ["context_tokens=1500", "max_new_tokens=16", "progress=false", *SOLO_LEASE]
    proc = started(args, tmp_path)
    partial = tmp_path / "outputs" / "partial"
    deadline = time.time() + 300
    while time.time() < deadline and not any(
        len(p.read_text().splitlines()) >= 2 for p in partial.glob("*.jsonl")
    ):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert finished_cells(tmp_path / "outputs" / "mlflow.db") == 0
    spooled = {p.name: len(p.read_text().splitlines()) for p in partial.glob("*.jsonl")}
    assert len(spooled) == 4 and min(spooled.values()) >= 1

    resumed = kvx(args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    cells = runs(tmp_path, "cell")
    assert len(cells) == 4 and all(r.info.status == "FINISHED" for r in cells)
    assert all(r.data.metrics["n_records"] == 6 for r in cells)
    assert all(1 <= r.data.metrics["resumed_sources"] < 6 for r in cells)  # reused, not recomputed
    assert not list(partial.glob("*.jsonl"))  # finished cells leave no spool behind


def test_a_failing_job_marks_the_parent_failed(tmp_path, blank_store):
    # a model folder with a tokenizer and no weights: every cell is checked (the tokenizer counts its
    # prompts), and the job fails when it loads the model
    from kvx.readers.tiny import byte_tokenizer

    blank_store(tmp_path)
    folder = tmp_path / "no-weights"
    byte_tokenizer().save_pretrained(folder)
    args = [
        "-m",
        "reader=hf",
        f"reader.model_id={folder}",
        "press=tova,snapkv",
        "n_sources=1",
        "max_new_tokens=4",
    ]
    proc = kvx([*args, "context_tokens=300", "progress=false", *SOLO_LEASE], tmp_path)
    assert proc.returncode != 0 and "config.json" in proc.stderr, proc.stderr[-2000:]
    parents = runs(tmp_path, "sweep")
    assert len(parents) == 1 and parents[0].info.status == "FAILED"


def test_config_is_found_after_a_non_editable_install(tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = "import kvx.core.conf as m; print(m.__file__); print(m.conf_dir())"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=kvx_env(PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
    )
    module_file, conf = out.stdout.split()
    assert module_file.startswith(str(site)) and conf == str(site / "kvx" / "conf")
    cfg = subprocess.run(
        [sys.executable, "-m", "kvx", "--cfg", "job", "press=tova"],
        cwd=tmp_path,
        env=kvx_env(PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cfg.returncode == 0, cfg.stderr[-2000:]
    assert "ratio: 0.5" in cfg.stdout and "mlflow:" in cfg.stdout


def test_cells_with_error_records_are_recomputed_not_reused(tmp_path, blank_store):
    # kvpress's AdaKV cannot find its masking keys on random weights: every source errors
    blank_store(tmp_path)
    args = ["press=adakv", "press.base.window_size=8", "ratio=0.5", *TINY]
    first = kvx(args, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (cell_run,) = runs(tmp_path, "cell")
    assert cell_run.info.status == "FINISHED" and cell_run.data.metrics["n_error"] == 3
    assert "cw_rate" not in cell_run.data.metrics  # errors are not scored as wrong
    second = kvx(args, tmp_path)
    assert "recompute" in second.stdout + second.stderr
    (again,) = runs(tmp_path, "cell")
    assert again.info.run_id != cell_run.info.run_id
