"""Experiment presets (``+experiment=tpbench/main``) are Hydra configs of the ``experiment`` group: a
user's own preset composes from ``--config-dir``, ``-cd`` or ``hydra.searchpath``, and the command
line wins over the preset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvx.testing.cli import composed, plan, refused

PRESET = """# @package _global_
defaults:
  - override /task: tpbench_p1
  - override /press: none
  - override /turn_selector: recency
hydra:
  mode: MULTIRUN
  sweeper:
    params:
      task: tpbench_p1,tpbench_p2
      seed: 42,43
task:
  corpus: synthetic
turn_fraction: 0.3
diagnostics: []
"""


@pytest.fixture()
def user_dir(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "experiment" / "lab" / "small.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(PRESET)
    return tmp_path / "conf"


def axes(sweep: dict, *keys: str) -> list[list[str]]:
    """Each cell's overrides of ``keys``."""
    return [[o for o in c["overrides"] if o.partition("=")[0] in keys] for c in sweep["cells"]]


@pytest.mark.parametrize("way", ["--config-dir", "-cd", "hydra.searchpath"])
def test_a_users_preset_is_a_sweep_every_hydra_way(way: str, user_dir: Path) -> None:
    given = [f"hydra.searchpath=[file://{user_dir}]"] if way == "hydra.searchpath" else [way, str(user_dir)]
    (sweep,) = plan(*given, "+experiment=lab/small", "reader=tiny")
    assert axes(sweep, "task", "seed") == [
        ["task=tpbench_p1", "seed=42"],
        ["task=tpbench_p1", "seed=43"],
        ["task=tpbench_p2", "seed=42"],
        ["task=tpbench_p2", "seed=43"],
    ]
    assert len(sweep["jobs"]) == 1  # the basic launcher: every cell in one job, one model load


def test_the_preset_composes_to_its_values_and_the_command_line_wins(user_dir: Path) -> None:
    cfg = composed("+experiment=lab/small", config_dir=user_dir)
    assert (cfg.turn_fraction, cfg.task.corpus, cfg.press, list(cfg.diagnostics)) == (
        0.3,
        "synthetic",
        {},
        [],
    )
    given = ["+experiment=lab/small", "seed=7", "task.corpus=sgd", "press=snapkv"]
    cfg = composed(*given, config_dir=user_dir)
    assert (cfg.seed, cfg.task.corpus, cfg.press.window_size) == (7, "sgd", 64)
    (sweep,) = plan("--config-dir", str(user_dir), *given[:2], "reader=tiny")
    # seed=7 replaces the preset's 42,43
    assert axes(sweep, "task", "seed") == [["task=tpbench_p1", "seed=7"], ["task=tpbench_p2", "seed=7"]]


def test_cfg_job_shows_the_presets_values(user_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvx.cli.main import main

    assert main(["-cd", str(user_dir), "+experiment=lab/small", "--cfg", "job"]) == 0
    shown = capsys.readouterr().out
    assert "turn_fraction: 0.3" in shown and "corpus: synthetic" in shown


def test_an_unknown_preset_names_the_presets_there_are(user_dir: Path) -> None:
    line = refused("-cd", str(user_dir), "+experiment=lab/smal")
    assert "experiment=lab/smal: no such option" in line and "tpbench/main" in line
    assert line.endswith("did you mean 'lab/small'?")
    assert refused("+experiment=tpbench/mian").endswith("did you mean 'tpbench/main'?")
    line = refused("-m", "-cd", str(user_dir), "+experiment=lab/small", "--cfg", "job")
    assert "Only one of --run, --multirun, --cfg" in line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "count"),
    [("tpbench/main", 3 * 7 * 3), ("tpbench/deletion", 4 * 3), ("tpbench/kv", 4)],
)
def test_each_tpbench_preset_runs_as_one_checked_sweep(name: str, count: int, tmp_path: Path) -> None:
    """Every cell of the preset is composed and checked, and the basic launcher's cells run in one job:
    its ``cells`` list is the preset's grid."""
    (sweep,) = plan(f"+experiment={name}", "task.corpus=synthetic", f"outputs_dir={tmp_path}")
    assert len(sweep["cells"]) == count
    (job,) = sweep["jobs"]
    grouped = [a for a in job if a.startswith("cells=")]
    assert len(json.loads(grouped[0].partition("=")[2].strip("'"))) == count


@pytest.mark.slow
def test_presets_swept_are_each_their_own_checked_sweep(tmp_path: Path) -> None:
    """``-m +experiment=a,b`` (and ``glob()``) runs each preset over its own axes, as a suite's parts."""
    given = ["task.corpus=synthetic", f"outputs_dir={tmp_path}"]
    kv, deletion = plan("+experiment=tpbench/kv,tpbench/deletion", *given)
    assert (kv["part"], len(kv["cells"]), deletion["part"], len(deletion["cells"])) == (
        "tpbench/kv",
        4,
        "tpbench/deletion",
        4 * 3,
    )
    assert [s["part"] for s in plan("+experiment=glob(tpbench/*,exclude=tpbench/main)", *given)] == [
        "tpbench/deletion",
        "tpbench/kv",
    ]


def test_a_yaml_press_and_its_fields_typed_out_are_one_cell() -> None:
    """docs/presets.md's ``snapkv_wide`` (snapkv, ``window_size: 128``) is snapkv with that field: one
    setting, so one cell however it is spelled, and the same cell as typed alone."""
    conf = str(Path(__file__).parents[2] / "docs" / "examples" / "conf")
    (both,) = plan("--config-dir", conf, "press=snapkv_wide,snapkv", "press.window_size=128", "reader=tiny")
    (typed,) = plan("press=snapkv", "press.window_size=128", "reader=tiny")
    (yaml,) = plan("--config-dir", conf, "press=snapkv_wide", "reader=tiny")
    assert len(both["cells"]) == 1
    assert both["cells"][0]["setting"] == typed["cells"][0]["setting"] == yaml["cells"][0]["setting"]
    (wider,) = plan("--config-dir", conf, "press=snapkv_wide,snapkv", "reader=tiny")
    assert len({c["setting"] for c in wider["cells"]}) == 2  # window 128 and the default 64: two cells


def test_help_lists_a_config_dirs_presets_and_options(
    user_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--help`` is Hydra's app-help template over kvx's groups: the folder's preset, every option,
    the composed config with the command's overrides; Hydra's own groups are ``--hydra-help``'s."""
    from kvx.cli.main import main

    assert main(["--config-dir", str(user_dir), "--help", "press=tova"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "experiment/lab: small" in lines and "experiment/tpbench: deletion, kv, main" in lines
    assert any(line.startswith("press: ") and "snapkv, streaming_llm" in line for line in lines)
    assert "hydra/launcher" not in out and "press: {}" in lines  # tova has no fields
