"""+experiment=kvpress/tour: a wrapper over three bases, a decoding press and a press on a quantized
cache, planned as one suite (running it is `tests/compressors/test_decoding.py`'s and the parity tests')."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_tour_plans_a_wrapper_over_three_bases_a_decoding_press_and_a_quantized_one():
    out = subprocess.run(
        [sys.executable, "-m", "kvx", "+experiment=kvpress/tour", "reader=tiny", "hydra.sweeper.plan=json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    labels = [c["label"].split("|")[2] for s in json.loads(out.stdout)["sweeps"] for c in s["cells"]]
    assert labels == [
        "chunkkv@0.5",
        "chunkkv(tova)@0.5",
        "chunkkv(knorm)@0.5",
        "decoding[compression_interval=8,target_size=64,hidden_states_buffer_size=8]@-",
        "quantized[group_size=32]@0.5",
    ]
