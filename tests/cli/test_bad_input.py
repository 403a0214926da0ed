"""Every bad input to ``python -m kvx`` fails before any work: exit code 2, one ``kvx: ...`` line on
stderr naming the key and the value, in under 3 s, and nothing written (no outputs/, no MLflow
store, no Hydra run or multirun folder).

The read-only folder is ``/proc/self``: tests run as root here, and root may write into a chmod'ed
folder, but nobody may write into ``/proc/self`` (``os.access`` agrees, for root too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
#: the budget for a whole ``python -m kvx`` that must fail
LIMIT_S = 3.0


@pytest.fixture(scope="module")
def start_s() -> float:
    """A bare interpreter's start on this machine: the only slack a loaded CI machine gets."""
    begin = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - begin


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def _fails(tmp_path: Path, start_s: float, args: list[str], expected: str, **env: str) -> str:
    """Run kvx in ``tmp_path``; check the exit code, the one line, the time and that nothing was written."""
    environ = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "KVX_DISABLE_PLUGINS"}}
    environ.update(env)
    before = _files(tmp_path)
    begin = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kvx", *args], cwd=tmp_path, env=environ, capture_output=True, text=True
    )
    wall = time.monotonic() - begin
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("kvx: "), done.stderr
    assert expected in lines[0], lines[0]
    assert wall < LIMIT_S + start_s, f"{args} took {wall:.2f}s to fail"
    assert _files(tmp_path) == before, f"{args} wrote {_files(tmp_path) - before}"
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["press.window_size=-5"], "press.window_size=-5"),
        (["press.window_size=abc"], "press.window_size=abc"),
        (["press=hqq", "press.bits=3"], "press.bits=3"),
        (["n_sources=0"], "n_sources=0"),
        (["context_tokens=5"], "context_tokens=5"),
        (["max_new_tokens=0"], "max_new_tokens=0"),
        (["budget_tokens=0"], "budget_tokens=0"),
        (["budget_tokens=abc"], "budget_tokens='abc'"),
        (["decode_budget_mb=0"], "decode_budget_mb=0"),
        (["ratio=1.5"], "ratio=1.5"),
        (["reader=tiny", "reader.max_prompt_tokens=0"], "reader.max_prompt_tokens=0"),
        (["reader.max_prompt_tokens=-7168"], "reader.max_prompt_tokens=-7168"),
        (
            ["reader=tiny", "reader.max_prompt_tokens=64", "reader.truncation=contxt"],
            "did you mean 'context'",
        ),
        (["reader=tiny", "reader.truncation=context"], "reader.truncation=context cuts nothing"),
        (["query_aware=quesiton"], "query_aware='quesiton' is not one of"),
        (["-m", "query_aware=false,prmpt"], "did you mean 'prompt'"),
        (["task=tpbench_p2", "turn_selector=recency"], "turn_selector needs turn_fraction"),
        (["task=tpbench_p2", "turn_fraction=0.3"], "turn_selector=none"),
        (["task=tpbench_p2", "turn_selector=recency", "turn_fraction=0"], "turn_fraction=0 "),
        (["task=tpbench_p2", "turn_selector=mmr", "turn_fraction=0.3", "turn_selector.lam=2"], "lam=2"),
        (["task=tpbench_p2", "task.corpus=sgd"], "task.path is not set"),
        (["task=tpbench_p2", "task.corpus=multiwoz21", "task.path=/nope"], "task.path='/nope'"),
        (["task=tpbench_p2", "transform=delete_turns", "transform.which=all"], "transform.which='all'"),
        (["-m", "press=snapkv", "press.window_size=16,-1"], "press.window_size=-1"),
        (["press=snapkv", "press.window_size=16,32"], "add -m"),
        (["judge=tpbench_p1", "judge.reader=tinyy"], "Did you mean 'tiny'"),
        (["judge=longmemeval", "judge.reader=tiny", "judge.max_tokens=0"], "judge.max_tokens=0"),
        (["judge=tpbench_p1", "+judge.reader_fields.modle=x"], "did you mean 'model'"),
        (["judge=tpbench_p1", "judge.reader_fields.model=x"], "add a key to it with +judge.reader_"),
    ],
)
def test_bad_value(tmp_path: Path, start_s: float, args: list[str], expected: str) -> None:
    _fails(tmp_path, start_s, args, expected)


@pytest.mark.parametrize("arg", ["+foo=1", "foo=1", "++foo=1"])
def test_unknown_key_lists_the_valid_ones(tmp_path: Path, start_s: float, arg: str) -> None:
    line = _fails(tmp_path, start_s, [arg], "'foo'")
    assert "valid top-level keys" in line and "context_tokens" in line


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("press=snapkvv", "Did you mean 'snapkv'"),
        ("diagnostics=[bogus]", "Unknown diagnostic 'bogus'"),
        ("diagnostics=[coverag]", "Did you mean 'coverage'"),
        ("turn_selector=recncy", "Did you mean 'recency'"),
        ("judge=tpbench_pl", "Did you mean 'tpbench_p1'"),
    ],
)
def test_unknown_name(tmp_path: Path, start_s: float, arg: str, expected: str) -> None:
    """A registry's name says "Did you mean", a config group's option "...; did you mean"."""
    line = _fails(tmp_path, start_s, [arg], "")
    assert expected.lower() in line.lower(), line


def test_outputs_dir_is_a_file(tmp_path: Path, start_s: float) -> None:
    (tmp_path / "taken").write_text("x")
    _fails(tmp_path, start_s, ["outputs_dir=taken"], "outputs_dir=taken is a file")
    _fails(tmp_path, start_s, ["outputs_dir=taken/below"], "taken is a file")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_outputs_dir_not_writable(tmp_path: Path, start_s: float) -> None:
    _fails(tmp_path, start_s, ["outputs_dir=/proc/self"], "outputs_dir=/proc/self is not writable")
    _fails(tmp_path, start_s, ["outputs_dir=/proc/self/kvx"], "/proc/self is not writable")


def test_tracking_uri_with_an_unknown_scheme(tmp_path: Path, start_s: float) -> None:
    _fails(tmp_path, start_s, [], "MLFLOW_TRACKING_URI=bogus://x", MLFLOW_TRACKING_URI="bogus://x")


@pytest.mark.parametrize(
    "uri", ["http://127.0.0.1:9", "postgresql+psycopg2://kvx:pw@127.0.0.1:9/kvx"], ids=["server", "postgres"]
)
def test_tracking_store_nobody_answers(tmp_path: Path, start_s: float, uri: str) -> None:
    """Measured before: MLflow retried silently past 400 s. Now one line, in seconds."""
    line = _fails(
        tmp_path, start_s, [], f"MLFLOW_TRACKING_URI={uri}: nothing answers there", MLFLOW_TRACKING_URI=uri
    )
    assert "unset MLFLOW_TRACKING_URI" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["-m", "per_job=[press]", "ratio=0.25,0.5"],
            "per_job names press, which this sweep does not sweep",
        ),
        (["-m", "per_job=press,ratio", "press=snapkv,tova"], "per_job=press,ratio is a sweep"),
        (["per_job=[press]", "press=snapkv"], "groups the cells of a multirun: add -m"),
    ],
)
def test_per_job_grouping_mistakes(tmp_path: Path, start_s: float, args: list[str], expected: str) -> None:
    _fails(tmp_path, start_s, args, expected)


def test_sqlite_store_that_cannot_be_created(tmp_path: Path, start_s: float) -> None:
    (tmp_path / "taken").write_text("x")
    uri = "mlflow.tracking_uri=sqlite:///taken/mlflow.db"
    _fails(tmp_path, start_s, [uri], "taken is a file")


def test_jsonl_empty_file(tmp_path: Path, start_s: float) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    _fails(tmp_path, start_s, ["task=jsonl", "task.path=empty.jsonl"], "task.path=empty.jsonl is empty")


def test_jsonl_malformed_file(tmp_path: Path, start_s: float) -> None:
    row = '{"context": "a", "question": "q", "answers": ["a"]}'
    (tmp_path / "bad.jsonl").write_text(f'{row}\n{{"context": "b", "question"\n')
    _fails(tmp_path, start_s, ["task=jsonl", "task.path=bad.jsonl"], "task.path=bad.jsonl: line 2")


def test_jsonl_row_without_a_field(tmp_path: Path, start_s: float) -> None:
    (tmp_path / "rows.jsonl").write_text('{"context": "a", "question": "q"}\n')
    _fails(tmp_path, start_s, ["task=jsonl", "task.path=rows.jsonl"], "line 1 has no field(s) ['answers']")


@pytest.mark.parametrize(
    "args",
    [
        ["press=adakv", "press.window_size=8"],
        ["-m", "press=adakv,chunkkv", "press.window_size=8", "hydra.sweeper.plan=true"],
    ],
)
def test_a_base_press_field_set_on_the_wrapper_names_where_it_lives(args):
    """Before wrappers took any base, adakv had SnapKV's fields itself: now they are its base's."""
    out = subprocess.run([sys.executable, "-m", "kvx", *args, "reader=tiny"], capture_output=True, text=True)
    assert out.returncode == 2 and "did you mean 'press.base.window_size'?" in out.stderr, out.stderr


def test_an_unknown_base_press_is_named_with_the_base_options():
    out = subprocess.run(
        [sys.executable, "-m", "kvx", "press=adakv", "press.base=tovaa", "reader=tiny"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "press/base=tovaa: no such option; options: adakv," in out.stderr
    assert "did you mean 'tova'?" in out.stderr
