"""kvx.cli.preflight without a kvx subprocess: what it accepts, what it refuses, and what it imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvx.cli.preflight import check_folder, check_tracking_uri
from kvx.core.errors import ConfigError

HEAVY = ("torch", "transformers", "kvpress", "mlflow", "datasets", "gguf", "jsonschema", "lightning")


def test_composing_and_listing_import_no_framework() -> None:
    """``--help`` and ``--cfg job`` list and compose every plugin group: no plugin may cost torch's,
    transformers' or kvpress's import until a cell is built."""
    probe = (
        "import contextlib, io, sys\n"
        "from kvx.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes = [main(['--help']), main(['--cfg', 'job', 'press=tova', 'task=tpbench_p1'])]\n"
        f"print(codes, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[0, 0] []", done.stdout + done.stderr[-2000:]


def test_kvx_extends_hydra_only_through_its_public_plugins() -> None:
    """No private Hydra API beyond subclassing ``BasicSweeper`` (there is no public base for a sweeper
    that expands like Hydra's own), and no monkeypatch."""
    import kvx

    root = Path(kvx.__file__).parent
    found = [
        f"{path.relative_to(root)}: {line.strip()}"
        for path in [*root.rglob("*.py"), *(root.parent / "hydra_plugins").rglob("*.py")]
        for line in path.read_text().splitlines()
        if "hydra._internal" in line and "BasicSweeper" not in line
    ]
    assert found == []


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite:///outputs/mlflow.db",
        "sqlite://",
        "postgresql+psycopg2://u@h/db",
        "mysql://u@h/db",
        "https://mlflow.example.org",
        "databricks",
        "file:///tmp/kvx-mlruns",
        "mlruns",
    ],
)
def test_tracking_uris_mlflow_accepts(uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    check_tracking_uri(uri)
    assert not any(tmp_path.iterdir()), "checking a store creates nothing"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("bogus://x", "scheme 'bogus'"),
        ("sqlite:///taken/mlflow.db", "taken is a file"),
        ("taken", "is a file"),
    ],
)
def test_tracking_uris_refused(
    uri: str, message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ConfigError, match=message):
        check_tracking_uri(uri)


def test_a_missing_folder_is_fine_when_its_parent_is_writable(tmp_path: Path) -> None:
    check_folder("outputs_dir", tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ratio=0.25,0.5"], "Ambiguous value for argument 'ratio=0.25,0.5': to sweep over it add -m"),
        (["ratio=${oc.env:KVX_TEST_UNSET}"], "ratio: .*Environment variable 'KVX_TEST_UNSET' not found"),
        (
            ["-m", "press=snapkv,tova", "ratio=${oc.env:KVX_TEST_UNSET}"],
            "Environment variable 'KVX_TEST_UNSET'",
        ),
        (["outputs_dir=taken/x"], "outputs_dir=taken/x cannot be created: .*taken is a file"),
        (["-m", "press=snapkv,tova", "outputs_dir=taken/x"], "cannot be created: .*taken is a file"),
        (["hydra/launcher=nope"], "hydra/launcher=nope: no such option"),
        (["ratio=abc"], "ratio"),
        (["ration=0.5"], "did you mean 'ratio'"),
    ],
)
def test_bad_input_is_one_line_and_nothing_written(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import re

    from kvx.testing.cli import refused

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVX_TEST_UNSET", raising=False)
    (tmp_path / "taken").write_text("x")
    line = refused(*args, "reader=tiny", "n_sources=1")
    assert re.search(message, line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_fields_of_a_swept_group_reach_hydra_as_upserts():
    from kvx.cli.main import command_line

    argv = [
        "-cd",
        "task.x=1",  # a flag's value, not an override
        "task=tpbench_p1,tpbench_p2",
        "task.corpus=sgd",
        "+task.path=/d",
        "press=snapkv",
        "press.window_size=8",
        "b:n_sources=2",
    ]
    # the swept task's fields are upserts; the unswept press's field stays a plain override; PART:KEY
    # is the sweeper's scoped override
    assert command_line(argv) == [
        "-cd",
        "task.x=1",
        "task=tpbench_p1,tpbench_p2",
        "++task.corpus=sgd",
        "++task.path=/d",
        "press=snapkv",
        "press.window_size=8",
        "++hydra.sweeper.scoped.b=['n_sources=2']",
    ]
    assert command_line(["ratio=0.1,0.2", "task.x=1"]) == ["ratio=0.1,0.2", "task.x=1"]
    assert command_line(["+experiment=a,b", "task.x=1", "ratio=0.1"]) == [
        "+experiment=a,b",
        "++task.x=1",
        "ratio=0.1",
    ]
    assert (
        command_line(["--info", "task=a,b", "task.x=1"])[-1] == "++task.x=1"
    )  # a bare --info takes no value
