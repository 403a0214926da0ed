"""per_job: which overrides move inside a job, what the job's command line carries, what is planned."""

from __future__ import annotations

import json

from kvx.__main__ import conf_dir
from kvx.cli.callbacks import grid_id, planned_jobs
from kvx.cli.grouping import in_one_process
from kvx.cli.preflight import _parse, config_defaults, prepare


def _cells(argv: list[str]) -> list[list[str]]:
    (line,) = [a for a in argv if a.startswith("cells=")]
    return json.loads(line.removeprefix("cells=").strip("'"))


def test_named_axes_and_their_fields_move_into_one_cells_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = prepare(
        [
            "-m",
            "reader=tiny",
            "task=ruler_niah_single,ruler_vt",
            "press=snapkv",
            "press.window_size=16,32",
            "ratio=0.25,0.5",
            "per_job=[press,ratio]",
        ],
        conf_dir(),
    )
    assert not {"press=snapkv", "press.window_size=16,32", "ratio=0.25,0.5"} & set(argv)
    assert "task=ruler_niah_single,ruler_vt" in argv  # the outer axis: one job per task
    cells = _cells(argv)
    assert len(cells) == 4 and cells[0] == ["press=snapkv", "press.window_size=16", "ratio=0.25"]
    assert cells[-1] == ["press=snapkv", "press.window_size=32", "ratio=0.5"]
    overrides = [a for a in argv if a != "-m"]
    assert planned_jobs(overrides) == 8  # 2 jobs x 4 cells: the plan counts cells


def test_without_per_job_the_basic_launcher_runs_the_whole_sweep_as_one_job(tmp_path, monkeypatch):
    """Hydra's basic launcher runs every job in this process anyway: one job lets cells sharing a
    split run source by source. The plan still counts cells."""
    monkeypatch.chdir(tmp_path)
    argv = prepare(["-m", "reader=tiny", "press=snapkv,tova", "ratio=0.25,0.5", "seed=1"], conf_dir())
    assert [a for a in argv if not a.startswith("cells=")] == ["-m", "reader=tiny", "seed=1"]
    assert _cells(argv) == [
        ["press=snapkv", "ratio=0.25"],
        ["press=snapkv", "ratio=0.5"],
        ["press=tova", "ratio=0.25"],
        ["press=tova", "ratio=0.5"],
    ]
    assert planned_jobs([a for a in argv if a != "-m"]) == 4
    assert planned_jobs(["press=snapkv,tova", "ratio=0.25,0.5"]) == 4


def test_another_launcher_or_sweeper_or_a_single_job_keeps_the_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for extra in (["hydra/launcher=kvx_joblib"], ["hydra/sweeper=other"]):
        argv = ["-m", "reader=tiny", "press=snapkv,tova", *extra]
        assert not in_one_process(_parse(argv[1:]), config_defaults(conf_dir(), "config"))
    assert prepare(["-m", "reader=tiny", "press=snapkv"], conf_dir()) == ["-m", "reader=tiny", "press=snapkv"]


def test_the_same_grid_typed_in_another_order_is_one_grid():
    assert grid_id("config", ["press=a,b", "ratio=0.5"]) == grid_id("config", ["ratio=0.5", "press=a,b"])
    assert grid_id("config", ["press=a,b"]) != grid_id("config", ["press=a,c"])
