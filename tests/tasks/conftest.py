"""Fixtures of the task tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def corpora() -> Path:
    """The real SGD and MultiWOZ 2.1 files, from ``KVX_CORPORA`` (a folder holding ``sgd/{train,dev,test}``
    and ``multiwoz21/test.json.zip``, as their official releases lay them out); the test is skipped,
    saying how to run it, where it is not set. Nothing outside the checkout is read unless asked."""
    folder = os.environ.get("KVX_CORPORA")
    if not folder:
        pytest.skip("needs the real SGD/MultiWOZ 2.1 files: KVX_CORPORA=DIR (DIR/sgd/train, DIR/multiwoz21)")
    path = Path(folder)
    if not (path / "sgd").is_dir():
        pytest.fail(f"KVX_CORPORA={folder} holds no sgd/ folder")
    return path


@pytest.fixture(scope="session")
def clock_slack_s() -> float:
    """How late a kill may land on a loaded machine (the suite runs a worker per core): a test bounds a
    program's time by its limit plus this. The limits a test tells apart (a 2 s wall clock from a 10 s
    CPU limit, a 1 s wall clock from a 60 s sleep) lie further apart."""
    return 3.0
