"""Suite presets (``+experiment=kvdiagnosis/main``): one sweep per part, every part checked before the
first runs; the command line wins over ``suite_overrides``, and those over a part's own values."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvx.testing.cli import composed, plan, refused

PART_A = """# @package _global_
defaults:
  - override /task: ruler_niah_single
hydra:
  mode: MULTIRUN
  sweeper:
    params:
      ratio: 0.25,0.5
context_tokens: 300
n_sources: 100
"""
PART_B = """# @package _global_
defaults:
  - override /task: ruler_vt
hydra:
  mode: MULTIRUN
n_sources: 200
"""
SUITE = """# @package _global_
suite: [study/a, study/b]
suite_overrides: [reader=tiny, "reader.num_hidden_layers=1,2"]
hydra:
  mode: MULTIRUN
"""


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    files = {
        "a": PART_A,
        "b": PART_B,
        "all": SUITE,
        "nest": "# @package _global_\nsuite: [study/all]\nhydra:\n  mode: MULTIRUN\n",
        "single": "# @package _global_\nsuite: [study/a]\n",
    }
    for name, text in files.items():
        path = tmp_path / "conf" / "experiment" / "study" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "conf"


def values(sweep: dict, key: str) -> list[str]:
    return [o.partition("=")[2] for c in sweep["cells"] for o in c["overrides"] if o.partition("=")[0] == key]


@pytest.mark.slow
def test_a_suite_is_one_sweep_per_part_and_the_command_line_wins(root: Path, tmp_path: Path) -> None:
    a, b = plan(
        "-cd",
        str(root),
        "+experiment=study/all",
        "n_sources=2",
        "b:context_tokens=1000",
        f"outputs_dir={tmp_path}",
    )
    assert (a["part"], b["part"]) == ("study/a", "study/b")
    assert len(a["cells"]) == 2 * 2 and len(b["cells"]) == 2  # a: its ratios x the suite's readers
    assert values(a, "n_sources") == ["2"] * 4 and values(b, "n_sources") == ["2"] * 2
    assert values(b, "context_tokens") == ["1000"] * 2 and not values(a, "context_tokens")
    assert sorted(values(a, "reader.num_hidden_layers")) == ["1", "1", "2", "2"]
    # the command line wins over suite_overrides
    a, b = plan(
        "-cd",
        str(root),
        "+experiment=study/all",
        "reader=tiny",
        "reader.num_hidden_layers=3",
        f"outputs_dir={tmp_path}",
    )
    assert values(a, "reader.num_hidden_layers") == ["3", "3"] and len(b["cells"]) == 1
    # each part's values are its preset's, as --cfg job shows for a part alone
    assert composed("+experiment=study/a", config_dir=root).context_tokens == 300


def test_a_suite_refuses_what_it_cannot_run(root: Path) -> None:
    assert refused("-cd", str(root), "+experiment=study/all", "bb:n_sources=1").endswith("did you mean 'b'?")
    assert "suites do not nest" in refused("-cd", str(root), "+experiment=study/nest")
    assert "a suite of sweeps (study/a): run it with -m" in refused(
        "-cd", str(root), "+experiment=study/single"
    )
    assert "PART:KEY=VALUE is for a suite's parts" in refused(
        "-m", "-cd", str(root), "+experiment=study/a", "a:ratio=0.1"
    )


def test_an_override_whose_value_has_a_colon_is_for_every_part(root: Path, tmp_path: Path) -> None:
    uri = f"mlflow.tracking_uri=sqlite:///{tmp_path}/x.db"
    for sweep in plan("-cd", str(root), "+experiment=study/all", uri, f"outputs_dir={tmp_path}"):
        # Hydra escapes the colon in the lines it writes for each cell (sqlite\\:///...)
        assert all(uri in [o.replace("\\:", ":") for o in c["overrides"]] for c in sweep["cells"])


def test_every_part_is_checked_before_the_first_runs(root: Path, tmp_path: Path) -> None:
    """A bad value meant for the last part fails the check of the whole suite, before anything runs or
    is written."""
    line = refused(
        "-cd", str(root), "+experiment=study/all", "b:ratio=1.5", f"outputs_dir={tmp_path / 'out'}"
    )
    assert line.startswith("kvx: +experiment=study/b: ") and "ratio=1.5" in line
    assert not (tmp_path / "out").exists()


def test_a_bad_part_of_a_shipped_suite_fails_before_any_part_runs(tmp_path: Path, monkeypatch) -> None:
    """``python -m kvx +experiment=kvdiagnosis/main`` without Qasper's file stops in its check, naming
    where the data lives, before any part runs and before anything is written."""
    monkeypatch.chdir(tmp_path)
    line = refused("+experiment=kvdiagnosis/main", "reader=tiny")
    assert "task.path is not set: task=qasper" in line, line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()
