"""How the kvx sweeper groups a sweep's cells into jobs, and what it plans (``kvx.cli.sweeper``)."""

from __future__ import annotations

import json

from kvx.testing.cli import plan


def grouped(job: list[str]) -> list[list[str]]:
    (line,) = [a for a in job if a.startswith("cells=")]
    return json.loads(line.removeprefix("cells=").strip("'"))


def test_named_axes_and_their_fields_move_into_one_cells_override(tmp_path):
    (sweep,) = plan(
        "reader=tiny",
        "task=ruler_niah_single,ruler_vt",
        "press=snapkv",
        "press.window_size=16,32",
        "ratio=0.25,0.5",
        "per_job=[press,ratio]",
        f"outputs_dir={tmp_path}",
    )
    assert len(sweep["cells"]) == 8
    assert len(sweep["jobs"]) == 2  # the outer axis: one job per task
    for job, task in zip(sweep["jobs"], ["ruler_niah_single", "ruler_vt"]):
        assert f"task={task}" in job and not {"press=snapkv", "ratio=0.25"} & set(job)
        cells = grouped(job)
        assert len(cells) == 4 and cells[0] == ["press=snapkv", "press.window_size=16", "ratio=0.25"]
        assert cells[-1] == ["press=snapkv", "press.window_size=32", "ratio=0.5"]


def test_without_per_job_the_basic_launcher_runs_the_whole_sweep_as_one_job(tmp_path):
    """Hydra's basic launcher runs every job in this process anyway: one job lets cells sharing a
    split run source by source. The plan still counts cells."""
    (sweep,) = plan("reader=tiny", "press=snapkv,tova", "ratio=0.25,0.5", "seed=1", f"outputs_dir={tmp_path}")
    (job,) = sweep["jobs"]
    assert [a for a in job if not a.startswith("cells=")] == [
        "reader=tiny",
        "seed=1",
        f"outputs_dir={tmp_path}",
    ]
    assert grouped(job) == [
        ["press=snapkv", "ratio=0.25"],
        ["press=snapkv", "ratio=0.5"],
        ["press=tova", "ratio=0.25"],
        ["press=tova", "ratio=0.5"],
    ]
    assert len(sweep["cells"]) == 4


def test_a_parallel_launcher_gets_one_job_per_cell_and_a_single_cell_keeps_its_line(tmp_path):
    (sweep,) = plan(
        "reader=tiny", "press=snapkv,tova", "hydra/launcher=kvx_joblib", f"outputs_dir={tmp_path}"
    )
    assert sweep["jobs"] == [c["overrides"] for c in sweep["cells"]] and len(sweep["jobs"]) == 2
    (sweep,) = plan("reader=tiny", "press=snapkv", f"outputs_dir={tmp_path}")
    assert sweep["jobs"] == [["reader=tiny", "press=snapkv", f"outputs_dir={tmp_path}"]]


def test_the_same_cells_typed_another_way_are_the_same_settings(tmp_path):
    """The grid of the sweep's parent run is the set of its cells' settings (``sweep_run.grid_id``):
    the same cells in another order, or spelled through a YAML option, are the same grid."""
    from kvx.cli.sweep_run import grid_id

    def settings(*args: str) -> list[str]:
        (sweep,) = plan("reader=tiny", f"outputs_dir={tmp_path}", *args)
        return [c["setting"] for c in sweep["cells"]]

    one = settings("press=snapkv,tova", "ratio=0.25,0.5")
    assert grid_id(one) == grid_id(settings("ratio=0.25,0.5", "press=tova,snapkv"))
    assert grid_id(one) != grid_id(settings("press=snapkv,tova", "ratio=0.25,0.75"))
    assert len(set(one)) == 4


def test_a_yaml_option_extending_a_press_is_the_same_cell_as_its_fields_typed(tmp_path):
    """A cell is named by what it instantiates: ``press=mine`` (``defaults: [snapkv, _self_]`` with
    ``window_size: 32``) is ``press=snapkv press.window_size=32``."""
    (tmp_path / "conf" / "press").mkdir(parents=True)
    (tmp_path / "conf" / "press" / "mine.yaml").write_text(
        "defaults:\n  - snapkv\n  - _self_\nwindow_size: 32\n"
    )
    given = ["--config-dir", str(tmp_path / "conf"), "reader=tiny", f"outputs_dir={tmp_path}"]
    (mine,) = plan(*given, "press=mine")
    (typed,) = plan(*given, "press=snapkv", "press.window_size=32")
    (default,) = plan(*given, "press=snapkv")
    assert mine["cells"][0]["setting"] == typed["cells"][0]["setting"] != default["cells"][0]["setting"]
    assert mine["cells"][0]["label"] == typed["cells"][0]["label"]
