"""Shared fixtures: a tiny random Llama loaded once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    from kvx.modeling.reader import load_reader
    from kvx.readers.tiny import TinyLlama

    return load_reader("tiny", TinyLlama(num_hidden_layers=3))


@pytest.fixture()
def engine(tmp_path):
    from kvx.pipeline.engine import Engine

    return Engine(tmp_path / "outputs", 512 * 2**20)
