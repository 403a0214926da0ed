"""``+experiment=ragscale/nq_open_recomp``: ragscale's two NQ-Open RECOMP settings (Table 11, "RECOMP
top-5" and "RECOMP with raw fallback") as one sweep, the fallback cells apart from the top-5 ones."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from kvx.core.conf import conf_dir
from kvx.core.identity import component
from kvx.core.registry import registry
from kvx.testing.cli import composed

NAME = "ragscale/nq_open_recomp"


def test_the_preset_sweeps_top5_and_the_raw_fallback() -> None:
    cfg = composed(f"+experiment={NAME}", return_hydra=True)
    choices = cfg.hydra.runtime.choices
    assert (choices.task, choices.transform, choices.press) == ("nq_open", "recomp_extractive", "none")
    assert dict(cfg.hydra.sweeper.params) == {
        "reader": "smollm2,gemma3",
        "transform.raw_fallback": "false,true",
    }
    assert cfg.transform.top_passages == 5 and cfg.transform.model == "fangyuan/nq_extractive_compressor"
    assert cfg.task.raw == "all" and cfg.n_sources == 323
    text = (Path(conf_dir()) / "experiment" / f"{NAME}.yaml").read_text()
    assert "--seed 20260821 --boot 5000 --splits 5000" in text


def test_only_the_fallback_setting_carries_the_field_in_its_identity() -> None:
    parts = []
    for flag in ("false", "true"):
        cfg = composed(f"+experiment={NAME}", f"transform.raw_fallback={flag}")
        transform = registry("transform").get("recomp_extractive")(**OmegaConf.to_container(cfg.transform))
        parts.append(component("recomp_extractive", transform, **transform.fingerprint())["fields"])
    assert parts[0] == {"k": 2, "top_passages": 5, "model": "fangyuan/nq_extractive_compressor"}
    assert parts[1] == {**parts[0], "raw_fallback": True}
