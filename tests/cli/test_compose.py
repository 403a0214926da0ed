"""kvx.cli.compose.Composer composes a cell as Hydra's own ``compose`` does, for every override form."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from kvx.cli.compose import Composer
from kvx.core.conf import conf_dir
from kvx.core.errors import ConfigError

#: the hydra node Composer reads: the primary config's name, no hydra.* overrides
HYDRA = OmegaConf.create({"job": {"config_name": "config"}, "overrides": {"hydra": []}})

CASES = [
    ["press=snapkv", "ratio=0.25"],
    ["press=tova", "ratio=0.75", "seed=3", "n_sources=2"],
    ["press=snapkv", "press.window_size=32", "reader=tiny", "reader.num_hidden_layers=2"],
    ["+experiment=kvdiagnosis/ruler8k", "task=ruler_cwe", "press=hqq", "ratio=0.5"],
    ["diagnostics=[coverage]", "lease.heartbeat_s=3", "mlflow.experiment=x"],
    ["++tracing.sample=0.5", "~judge", "judge=none"],
    ["diagnostic_fields={intervention:{boost:2.0}}", "context_tokens=2048"],
    ["task=tpbench_p1", "task.corpus=sgd", "turn_selector=recency", "turn_fraction=0.3"],
]


def hydra_compose(overrides: list[str]) -> dict:
    cfg = compose("config", overrides=overrides, return_hydra_config=True)
    choices = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items() if v is not None}
    with open_dict(cfg):
        del cfg["hydra"]
    return {"cfg": OmegaConf.to_container(cfg), "choices": choices}


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o)[:40])
def test_a_cell_composed_from_a_shared_base_is_the_cell_hydra_composes(overrides: list[str]) -> None:
    if "~judge" in overrides:
        overrides = [o for o in overrides if o != "judge=none"]
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        composer = Composer.of_hydra(HYDRA)
        composer(["press=snapkv"])  # a base composed before is reused, never changed
        cfg, choices = composer(overrides)
        assert {"cfg": OmegaConf.to_container(cfg), "choices": choices} == hydra_compose(overrides)
        again, _ = composer(overrides)
        assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ration=0.5"], "unknown key 'ration'.*did you mean 'ratio'"),
        (["press=snapkv", "press.window=3"], "valid keys of press: kernel_size, window_size"),
        (["+ratio=0.5"], "already set"),
        (["~nothing"], "does not exist"),
        (["ratio=abc"], "ratio=abc"),
    ],
)
def test_an_override_that_does_not_apply_is_one_line_naming_it(overrides: list[str], message: str) -> None:
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        with pytest.raises(ConfigError, match=message):
            Composer.of_hydra(HYDRA)(overrides)
        with pytest.raises(Exception):  # noqa: B017 - Hydra refuses the same overrides
            compose("config", overrides=overrides)
