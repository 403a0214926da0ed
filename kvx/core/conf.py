"""Where kvx's Hydra configuration lives, for the commands that read it (runs, the aggregate)."""

from __future__ import annotations

from pathlib import Path


def conf_dir() -> str:
    """``conf/`` ships inside the wheel as ``kvx/conf``; a source checkout keeps it at the top level."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "conf"
    return str(installed if (installed / "config.yaml").exists() else package.parent / "conf")
