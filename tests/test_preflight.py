"""kvx.cli.preflight without a kvx subprocess: what it accepts, what it refuses, and what it imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvx.cli.preflight import _parse, check_folder, check_tracking_uri, expand
from kvx.core.errors import ConfigError

HEAVY = ("torch", "transformers", "kvpress", "mlflow", "datasets", "gguf", "jsonschema", "lightning")


def test_registering_every_builtin_imports_no_framework() -> None:
    """Hydra needs every built-in's class for its config node: none may cost torch's or kvpress's import."""
    probe = (
        "import sys, kvx.cli.preflight\n"
        "from kvx.cli.config import register_configs\n"
        "register_configs()\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_hydra_repository_copies_read_the_live_config_store() -> None:
    """kvx.cli.config makes Hydra's per-compose repository copy share the ConfigStore (``--help`` made
    75 copies of every stored node); a node stored after the copy is still found through it."""
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_store import ConfigStore
    from hydra.core.object_type import ObjectType

    import kvx.cli.config  # noqa: F401 - applies share_config_store()

    repo = ConfigRepository(create_config_search_path(None))
    cached = CachingConfigRepository(repo)
    assert cached.delegate is not repo and cached.delegate.sources is not repo.sources
    assert cached.delegate.get_schema_source().store is ConfigStore.instance()
    ConfigStore.instance().store(group="kvx_test_late", name="node", node={"a": 1})
    assert cached.get_group_options("kvx_test_late", ObjectType.CONFIG) == ["node"]


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


def test_expand_is_the_basic_sweepers_grid() -> None:
    jobs = list(expand(_parse(["press=snapkv,tova", "ratio=0.25,0.5", "seed=1"]), multirun=True))
    assert len(jobs) == 4 and jobs[0] == ["press=snapkv", "ratio=0.25", "seed=1"]
    with pytest.raises(ConfigError, match="add -m"):
        list(expand(_parse(["ratio=0.25,0.5"]), multirun=False))


def test_fields_of_a_swept_group_reach_hydra_as_upserts():
    from kvx.cli.preflight import _parse, for_swept_groups

    argv = [
        "task=tpbench_p1,tpbench_p2",
        "task.corpus=sgd",
        "+task.path=/d",
        "press=snapkv",
        "press.window_size=8",
    ]
    out = for_swept_groups(argv, _parse(argv))
    # the swept task's fields are upserts; the unswept press's field stays a plain override
    assert out == [
        "task=tpbench_p1,tpbench_p2",
        "++task.corpus=sgd",
        "++task.path=/d",
        "press=snapkv",
        "press.window_size=8",
    ]
    assert for_swept_groups(["ratio=0.1,0.2", "task.x=1"], _parse(["ratio=0.1,0.2", "task.x=1"])) == [
        "ratio=0.1,0.2",
        "task.x=1",
    ]
