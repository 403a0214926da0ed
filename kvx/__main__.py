"""``python -m kvx``: one cell; ``python -m kvx -m a=x,y``: a Hydra multirun over the grid.

Plugins are discovered and their config nodes stored before Hydra composes the config, and
group names and ratios on the command line are checked first, so a typo fails in a second
with the list of registered names instead of after a model load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from kvx.config import check_overrides, register_configs
from kvx.errors import ConfigError
from kvx.registry import RegistryError


def conf_dir() -> str:
    """``conf/`` ships inside the wheel as ``kvx/conf``; a source checkout keeps it at the top level."""
    here = Path(__file__).resolve().parent
    installed = here / "conf"
    return str(installed if (installed / "config.yaml").exists() else here.parent / "conf")


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="config")
def _hydra_main(cfg: DictConfig) -> dict[str, float]:
    from kvx.app import run

    return run(cfg)


def main() -> None:
    try:
        check_overrides(sys.argv[1:])
    except (RegistryError, ConfigError) as exc:
        print(f"kvx: {exc}", file=sys.stderr)
        sys.exit(2)
    register_configs()
    _hydra_main()


if __name__ == "__main__":
    main()
