"""Experiment presets (``+experiment=tpbench/main``): each expands to the overrides it stands for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvx.__main__ import conf_dir
from kvx.cli import presets
from kvx.cli.preflight import prepare
from kvx.core.errors import ConfigError


def _write(root: Path, name: str, text: str) -> str:
    path = root / "experiment" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(root)


PRESET = """# @package _global_
defaults:
  - override /task: tpbench_p1
  - override /press: none
hydra:
  mode: MULTIRUN
  sweeper:
    params:
      task: tpbench_p1,tpbench_p2
      seed: 42,43
task:
  corpus: sgd
turn_fraction: 0.3
diagnostics: []
note: "two words, it's quoted"
"""


def test_a_preset_is_the_overrides_it_stands_for(tmp_path: Path) -> None:
    root = _write(tmp_path, "study/main", PRESET)
    assert presets.expand(["+experiment=study/main"], root) == [
        "--multirun",
        "press=none",  # the swept group's default (task) is left to the sweep
        "task.corpus=sgd",
        "turn_fraction=0.3",
        "diagnostics=[]",
        "note='two words, it\\'s quoted'",
        "task=tpbench_p1,tpbench_p2",
        "seed=42,43",
    ]


def test_the_command_line_wins_over_the_preset(tmp_path: Path) -> None:
    root = _write(tmp_path, "study/main", PRESET)
    given = ["-m", "+experiment=study/main", "seed=7", "task.corpus=multiwoz21", "press=snapkv"]
    argv = presets.expand(given, root)
    assert argv[0] == "-m" and "--multirun" not in argv
    assert "seed=7" in argv and "seed=42,43" not in argv
    assert "task.corpus=multiwoz21" in argv and "task.corpus=sgd" not in argv
    assert "press=snapkv" in argv and "press=none" not in argv
    assert "task=tpbench_p1,tpbench_p2" in argv  # not given on the command line: the preset's


def test_a_flag_that_excludes_a_multirun_keeps_the_command_single(tmp_path: Path) -> None:
    root = _write(tmp_path, "study/main", PRESET)
    assert "--multirun" not in presets.expand(["+experiment=study/main", "--cfg", "job"], root)


def test_an_unknown_preset_names_the_presets_there_are(tmp_path: Path) -> None:
    root = _write(tmp_path, "study/main", PRESET)
    unknown = r"'study/mian' is not a preset .*study/main.*did you mean 'study/main'"
    with pytest.raises(ConfigError, match=unknown):
        presets.expand(["+experiment=study/mian"], root)
    _write(tmp_path, "bad", "defaults:\n  - task\n")
    with pytest.raises(ConfigError, match="override /<group>: <option>"):
        presets.expand(["+experiment=bad"], root)


def test_kvx_ships_the_tpbench_presets() -> None:
    assert {"tpbench/main", "tpbench/deletion", "tpbench/kv"} <= set(presets.names(conf_dir()))


@pytest.mark.parametrize(
    ("name", "cells"),
    [("tpbench/main", 3 * 7 * 3), ("tpbench/deletion", 4 * 3), ("tpbench/kv", 4)],
)
def test_each_tpbench_preset_runs_as_one_checked_sweep(name: str, cells: int, tmp_path: Path) -> None:
    """Every job of the preset is composed and checked (preflight), and the basic sweeper's jobs are
    grouped into one process: the ``cells`` list is the preset's grid."""
    argv = prepare([f"+experiment={name}", "task.corpus=synthetic", f"outputs_dir={tmp_path}"], conf_dir())
    assert argv[0] == "--multirun"
    grouped = [a for a in argv if a.startswith("cells=")]
    assert len(grouped) == 1
    assert len(json.loads(grouped[0].partition("=")[2].strip("'"))) == cells
