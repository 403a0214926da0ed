"""The floors hold: ``lint-imports`` keeps the contracts in pyproject.toml, and breaks them when a
lower floor reaches up or two plugin kinds import each other (so the check can fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (dev extra)")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "kvx", root / "kvx", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    path = root / module
    path.write_text(path.read_text() + f"\n{line}\n")
    return root


def test_the_contracts_are_kept() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("kvx/core/records.py", "import kvx.pipeline.engine  # noqa", "kvx.core is not allowed to import"),
        ("kvx/diagnostics/base.py", "import kvx.tasks.base  # noqa", "kvx.diagnostics is not allowed"),
        ("kvx/aggregate/read/rows.py", "import kvx.aggregate.publish.report  # noqa", "not allowed"),
    ],
)
def test_a_reach_up_or_across_breaks_them(tmp_path: Path, module: str, line: str, broken: str) -> None:
    done = _lint(_copy_with(tmp_path, module, line))
    assert done.returncode != 0 and broken in done.stdout, done.stdout[-3000:]
