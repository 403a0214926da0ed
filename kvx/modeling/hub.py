"""Models that live on the Hugging Face hub (RECOMP, EXIT, Provence, LLMLingua-2 and any user
hub id), loaded from a local folder or the hub once per process.

Offline, every row that needs such a model is ``Unsupported`` with the reason (remembered, so later
rows do not retry the hub), never an error and never a score. A local folder that fails to load is
an error: that is the user's to fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kvx.core.errors import ConfigError, Unsupported

_LOADED: dict[str, Any] = {}
_FAILED: dict[str, str] = {}


def check_model(key: str, model: Any) -> None:
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{key}={model!r} must be a hub id or a local model folder")


def hub_model(label: str, model: str, load: Callable[[str], Any]) -> Any:
    """``load(model)`` once per process for what ``label`` names; a hub id that cannot be fetched
    raises ``Unsupported`` saying that ``label`` needs it."""
    key = f"{label}:{model}"
    if key in _FAILED:
        raise Unsupported(_FAILED[key])
    if key not in _LOADED:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        try:
            _LOADED[key] = load(model)
        except OSError as err:  # what transformers and sentence-transformers raise for an unreachable hub
            if os.path.isdir(model):
                raise
            _FAILED[key] = (
                f"{label} needs {model} from the Hugging Face hub, which is unreachable here: {err}"
            )
            raise Unsupported(_FAILED[key]) from err
    return _LOADED[key]
