"""The user cache folder: what kvx derives once and reuses (converted weights, validated record files)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``KVX_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvx`` (``~/.cache/kvx``)."""
    root = os.environ.get("KVX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvx"
    )
    return Path(root)
