"""ragscale's presets (``+experiment=ragscale/...``): each composes into the overrides it stands for and
is checked offline (preflight) before anything runs; SIEVE, which kvx cannot run, is recorded
``unsupported`` row by row, never replaced."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvx.__main__ import conf_dir
from kvx.cli import presets
from kvx.cli.preflight import prepare
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.registry import registry
from kvx.core.source import Source
from kvx.pipeline.transform import fail_transform
from kvx.transforms.sieve import REASON, Sieve

NAMES = ("ragscale/hotpotqa_recomp", "ragscale/musique_summary", "ragscale/longmemeval_sieve")


def test_kvx_ships_the_ragscale_presets() -> None:
    assert set(NAMES) <= set(presets.names(conf_dir()))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            NAMES[0],
            ["task=hotpotqa", "transform=recomp_extractive", "press=none", "transform.top_passages=5"],
        ),
        (NAMES[1], ["task=musique", "transform=summary", "press=none", "task.raw_k=8"]),
        (NAMES[2], ["task=longmemeval", "transform=sieve", "press=none", "judge=longmemeval"]),
    ],
)
def test_each_preset_is_the_papers_setting(name: str, expected: list[str]) -> None:
    argv = presets.expand([f"+experiment={name}"], conf_dir())
    assert argv[0] == "--multirun" and set(expected) <= set(argv)
    assert "reader=smollm2,gemma3" in argv  # the placeholder panel the user overrides
    text = (Path(conf_dir()) / "experiment" / f"{name}.yaml").read_text()
    assert "--seed 20260821 --boot 5000 --splits 5000" in text  # the paper's aggregate, documented


def test_the_users_readers_win_over_the_placeholder() -> None:
    argv = presets.expand([f"+experiment={NAMES[0]}", "reader=hf", "reader.model_id=a/b,c/d"], conf_dir())
    assert "reader=smollm2,gemma3" not in argv and "reader.model_id=a/b,c/d" in argv


def test_hotpotqa_recomp_is_checked_offline_as_one_sweep(tmp_path: Path) -> None:
    argv = prepare([f"+experiment={NAMES[0]}", f"outputs_dir={tmp_path}"], conf_dir())
    cells = [a for a in argv if a.startswith("cells=")]
    assert len(cells) == 1 and json.loads(cells[0].partition("=")[2].strip("'")) == [
        ["reader=smollm2"],
        ["reader=gemma3"],
    ]
    assert "n_sources=500" in argv


@pytest.mark.parametrize(
    ("name", "module"), [(NAMES[1], "kvx.tasks.musique"), (NAMES[2], "kvx.tasks.longmemeval")]
)
def test_the_other_presets_pass_preflight_or_say_why(name: str, module: str, tmp_path: Path) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not in this checkout")
    if name == NAMES[2] and "sieve" not in registry("transform").names():
        pytest.skip("transform sieve is registered on the next install (pip install -e .)")
    try:
        prepare([f"+experiment={name}", f"outputs_dir={tmp_path}"], conf_dir())
    except ConfigError as exc:  # offline: a data file or a judge endpoint, named with where to get it
        assert str(exc).strip() and "\n" not in str(exc).strip()


def test_sieve_records_every_row_unsupported_with_the_reason() -> None:
    source = Source.from_segments([], "\n", id="row", question="q", answers=["a"])
    with pytest.raises(Unsupported) as exc:
        Sieve().apply(source)
    assert str(exc.value) == REASON

    class Record:
        def fail(self, status: str, reason: str) -> None:
            self.status, self.reason = status, reason

    record = Record()
    fail_transform(record, "sieve", exc.value)  # type: ignore[arg-type]
    assert record.status == "unsupported" and record.reason == f"transform sieve: {REASON}"
