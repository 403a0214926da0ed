"""kvx: measure what context and KV-cache compression does to language-model answers."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """``kvx.__version__``: the installed distribution's version (``[project] version`` in pyproject.toml,
    the only place it is written); ``"0+unknown"`` for a source tree that is not installed. Read on first
    use: importing ``importlib.metadata`` costs ~30 ms, which ``import kvx`` alone should not pay."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version(__name__)
    except PackageNotFoundError:
        value = "0+unknown"
    globals()["__version__"] = value
    return value
