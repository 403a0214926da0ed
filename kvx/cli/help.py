"""``python -m kvx --help``: Hydra's app help (its ``hydra.help`` template), listing kvx's groups only.

Hydra's own ``--help`` lists every config group, Hydra's included, and composes a fresh copy of the
whole config repository for each of the ~110 listings it makes (3 s here with the launcher plugins
kvx installs). This fills the same template through Hydra's public compose API, listing the plugin
groups and the presets: one composition and a listing per group, about a second. ``--hydra-help``
is Hydra's.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

#: the flags that ask for it
HELP = ("--help", "-h")


def help_text(overrides: Sequence[str], search_path: Sequence[str]) -> str:
    """The help ``hydra.help.template`` describes, for the config these overrides compose."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from kvx.cli.sources import GROUPS, configs_under
    from kvx.core.conf import conf_dir

    extra = [f"hydra.searchpath=[{','.join(search_path)}]"] if search_path else []
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        cfg = compose("config", overrides=[*extra, *overrides], return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        listed = {group: sorted(loader.get_group_options(group, overrides=extra)) for group in GROUPS}
        for preset in configs_under(loader, "experiment", extra):
            folder, _, name = preset.rpartition("/")
            listed.setdefault(f"experiment/{folder}" if folder else "experiment", []).append(name)
    template = string.Template(str(cfg.hydra.help.template))
    groups = "\n".join(f"{group}: {', '.join(sorted(names))}" for group, names in sorted(listed.items()))
    body = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(body, dict)
    body.pop("hydra", None)
    return template.safe_substitute(APP_CONFIG_GROUPS=groups + "\n", CONFIG=OmegaConf.to_yaml(body))
