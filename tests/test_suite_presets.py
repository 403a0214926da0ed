"""Suite presets (``+experiment=kvdiagnosis/main``): one sweep per part, run one after another."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvx.__main__ import conf_dir
from kvx.cli import presets, suite
from kvx.core.errors import ConfigError

PART_A = """# @package _global_
defaults:
  - override /task: ruler_niah_single
hydra:
  sweeper:
    params:
      ratio: 0.25,0.5
context_tokens: 8192
n_sources: 100
"""
PART_B = """# @package _global_
defaults:
  - override /task: hotpotqa
n_sources: 200
"""
SUITE = """# @package _global_
suite: [study/a, study/b]
defaults:
  - override /reader: hf
hydra:
  sweeper:
    params:
      reader.model_id: org/one,org/two
"""


def _root(tmp_path: Path, **files: str) -> str:
    for name, text in files.items():
        path = tmp_path / "experiment" / "study" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_a_suite_is_one_command_line_per_part_and_the_command_line_wins(tmp_path: Path) -> None:
    root = _root(tmp_path, a=PART_A, b=PART_B, all=SUITE)
    parts = presets.suite(["+experiment=study/all", "n_sources=2", "b:task.path=dev.json"], root)
    assert parts == [
        ("study/a", ["n_sources=2", "reader=hf", "reader.model_id=org/one,org/two", "+experiment=study/a"]),
        (
            "study/b",
            [
                "n_sources=2",
                "task.path=dev.json",
                "reader=hf",
                "reader.model_id=org/one,org/two",
                "+experiment=study/b",
            ],
        ),
    ]
    # each part then expands as any preset does: the command line (here the suite's keys) wins
    argv = presets.expand(parts[0][1], root)
    assert "n_sources=2" in argv and "n_sources=100" not in argv
    assert "context_tokens=8192" in argv and argv[0] == "--multirun"
    assert presets.suite(["+experiment=study/a"], root) is None  # a plain preset is no suite


def test_a_suite_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    root = _root(tmp_path, a=PART_A, b=PART_B, all=SUITE, nest="# @package _global_\nsuite: [study/all]\n")
    with pytest.raises(ConfigError, match=r"no part 'bb'.*did you mean 'b'"):
        presets.suite(["+experiment=study/all", "bb:task.path=x"], root)
    with pytest.raises(ConfigError, match="suites do not nest"):
        presets.suite(["+experiment=study/nest"], root)
    with pytest.raises(ConfigError, match="give one of its parts with --cfg"):
        presets.suite(["+experiment=study/all", "--cfg", "job"], root)
    with pytest.raises(ConfigError, match="runs alone"):
        presets.suite(["+experiment=study/all", "+experiment=study/a"], root)
    with pytest.raises(ConfigError, match="is a suite of 2 sweeps"):
        presets.expand(["+experiment=study/all"], root)
    bad = _root(tmp_path, odd="# @package _global_\nsuite: study/a\n")
    with pytest.raises(ConfigError, match="non-empty list of preset names"):
        presets.suite(["+experiment=study/odd"], bad)


def test_an_override_whose_value_has_a_colon_is_for_every_part(tmp_path: Path) -> None:
    root = _root(tmp_path, a=PART_A, b=PART_B, all=SUITE)
    uri = "mlflow.tracking_uri=sqlite:///x.db"
    parts = presets.suite(["+experiment=study/all", uri], root)
    assert parts is not None and all(uri in argv for _, argv in parts)


def test_a_bad_part_fails_before_any_part_runs(tmp_path: Path) -> None:
    """``python -m kvx +experiment=kvdiagnosis/main`` without Qasper's file stops in its check, naming
    where the data lives, before any part runs and before anything is written."""
    main = [sys.executable, "-m", "kvx", "+experiment=kvdiagnosis/main", "reader=tiny"]
    done = subprocess.run(main, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "task.path is not set: task=qasper" in done.stderr, done.stderr
    assert "suite part" not in done.stderr and not (tmp_path / "outputs").exists()


def test_every_part_is_checked_before_the_first_runs(tmp_path: Path) -> None:
    """A bad value meant for the last part fails the check of the whole suite."""
    root = tmp_path / "conf"
    shutil.copytree(conf_dir(), root)
    both = "# @package _global_\nsuite: [study/a, study/b]\n"
    _root(root, a=PART_A.replace("8192", "64"), b=PART_B, all=both)
    parts = presets.suite(["+experiment=study/all", "reader=tiny", "b:ratio=1.5"], str(root))
    assert parts is not None
    suite.check(parts[:1], str(root))  # the first part alone is fine
    with pytest.raises(ConfigError, match="ratio=1.5"):
        suite.check(parts, str(root))
