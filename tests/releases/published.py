"""Where a paper's public release is, for the tests that read the release itself.

A release is too large to ship with kvx and cannot be fetched by a test (no network), so these tests
read a clone the person running them points at: ``KVX_<NAME>_RELEASE=/path/to/clone`` (for example
``KVX_KVDIAGNOSIS_RELEASE`` for a clone of ChosenQC/KVDiagnosis). Without it they are skipped, naming
the variable, so a reader of the skip list sees what would pin the paper's published numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def release(name: str, marker: str) -> Path:
    """The clone named by ``KVX_<NAME>_RELEASE``, or skip the test; ``marker`` is a file every clone has."""
    variable = f"KVX_{name.upper()}_RELEASE"
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"set {variable} to a clone of the release to check the paper's numbers on it")
    root = Path(value)
    if not (root / marker).exists():
        pytest.fail(f"{variable}={value} is not a clone of the release: no {marker} in it")
    return root
