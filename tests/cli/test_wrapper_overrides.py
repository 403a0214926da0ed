"""A wrapper's base on the command line: ``press.base=tova`` (rewritten to Hydra's nested group
``press/base=tova``), swept like any axis, its fields swept too, kvpress's composed names one cell
with their spelled-out form."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvx.cli.main import command_line


def _plan(*args: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "kvx", "-m", *args, "reader=tiny", "hydra.sweeper.plan=json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return [c for sweep in json.loads(out.stdout)["sweeps"] for c in sweep["cells"]]


@pytest.mark.parametrize(
    ("given", "hydra"),
    [
        (["press=adakv", "press.base=tova"], ["press=adakv", "press/base=tova"]),
        (["press.base.base=knorm"], ["press/base/base=knorm"]),
        (["press.base.window_size=32"], ["press.base.window_size=32"]),  # a field stays a field
        (["press=dms", "press.decoding=true"], ["press=dms", "press.decoding=true"]),  # a field named so
    ],
)
def test_a_slot_chosen_like_a_field_becomes_the_nested_group(given, hydra):
    assert command_line(given) == hydra


def test_a_wrapper_swept_over_three_bases_is_three_cells():
    cells = _plan("press=chunkkv", "press.base=snapkv,tova,knorm")
    assert [c["label"].split("|")[2] for c in cells] == [
        "chunkkv@0.5",
        "chunkkv(tova)@0.5",
        "chunkkv(knorm)@0.5",
    ]
    assert len({c["setting"] for c in cells}) == 3


def test_a_base_field_sweeps_and_kvpress_names_are_one_cell_with_their_spelled_out_form():
    cells = _plan("press=chunkkv", "press.base.window_size=32,64")
    assert [c["label"].split("|")[2] for c in cells] == ["chunkkv(snapkv[window_size=32])@0.5", "chunkkv@0.5"]
    same = _plan("press=adakv_snapkv,adakv")
    assert len(same) == 1  # one setting, one cell
    ea = _plan("press=expected_attention")
    spelled = _plan("press=adakv", "press.base=expected_attention_plain", "press.base.epsilon=0.01")
    assert ea[0]["setting"] == spelled[0]["setting"]
