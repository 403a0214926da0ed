"""kvx's launcher presets, each run on this machine: two grouped jobs (per_job) of two cells each, every
cell computed once, the sweep's plan counted in cells, and the aggregate clean."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from kvx.testing.cli import aggregate_strict, finish, start_sweep, sweep
from kvx.testing.stores import check_exactly_once, ledger

pytestmark = pytest.mark.slow
# two tasks whose prompts fit 300 byte tokens (ruler_vt's RULER example alone takes up to 500)
GRID = ["task=ruler_niah_single,ruler_niah_single_1", "press=snapkv,tova", "per_job=[press]", "n_sources=2"]


@pytest.mark.parametrize(
    ("preset", "plugin"),
    [
        ("kvx_joblib", "hydra_joblib_launcher"),
        ("kvx_submitit_local", "hydra_submitit_launcher"),
        ("kvx_ray", "hydra_ray_launcher"),
    ],
)
def test_preset_runs_grouped_jobs(tmp_path, blank_store, preset, plugin):
    blank_store(tmp_path)
    if find_spec(f"hydra_plugins.{plugin}") is None:
        pytest.skip(f'{plugin} is not installed (pip install "kvx[launchers]")')
    args = [f"hydra/launcher={preset}", *GRID]
    # the launcher's workers are processes; the sweep that plans and dispatches them runs in-process,
    # except under Ray, which starts its cluster from the sweep's process and keeps it
    if preset == "kvx_ray":
        code, err = finish(start_sweep(tmp_path, *args))
    else:
        done = sweep(tmp_path, *args)
        code, err = done.returncode, done.stderr
    assert code == 0 and "Traceback" not in err, err[-3000:]
    check_exactly_once(tmp_path, cells=4, sources=2)
    (parent,) = ledger(tmp_path)["sweep"]
    assert parent.data.tags["kvx.planned_jobs"] == "4"  # 2 jobs x 2 cells each
    assert sum(tag.startswith("kvx.plan.") for tag in parent.data.tags) == 4  # each job's cells, its plan
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)
