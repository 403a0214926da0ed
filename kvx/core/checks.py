"""Value checks shared by the preflight and every plugin's ``validate()``.

Torch-free on purpose: a bad value must fail in the time it takes to read the config, and each
message names the key and the value so that the one line printed is enough to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

from kvx.core.errors import ConfigError


def check_ratio(ratio: Any) -> float:
    """``ratio`` is kvpress's compression ratio: the fraction removed, in [0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        raise ConfigError(
            f"ratio={ratio!r} is not a number; use a fraction removed in [0, 1), e.g. ratio=0.5"
        )
    if not 0.0 <= float(ratio) < 1.0:
        raise ConfigError(f"ratio={ratio} is outside [0, 1): ratio is the fraction of the cache removed")
    return float(ratio)


def check_int(key: str, value: Any, minimum: int | None = None) -> int:
    """An integer (not a bool), at least ``minimum`` when given."""
    bound = f" >= {minimum}" if minimum is not None else ""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise ConfigError(f"{key}={value!r} must be an integer{bound}")
    return value


def check_optional_int(key: str, value: Any, minimum: int) -> int | None:
    """null, or an integer of at least ``minimum``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise ConfigError(f"{key}={value!r} must be null or an integer >= {minimum}")
    return value


def check_number(key: str, value: Any, low: float, high: float | None = None) -> float:
    """A number (not a bool) in [low, high], or at least ``low`` without ``high``."""
    bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not low <= value <= (high if high is not None else float("inf"))
    ):
        raise ConfigError(f"{key}={value!r} must be a number {bound}")
    return float(value)


def check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


def check_choice(key: str, value: Any, options: Collection[Any]) -> Any:
    """``value`` if it is one of ``options``; else a ConfigError naming them, and the closest one (or
    the only one it begins: ``bm25`` for ``bm25_top_k``)."""
    if value not in options:
        names = [str(o) for o in options]
        close = difflib.get_close_matches(str(value), names, n=1)
        begun = [o for o in names if str(value) and o.startswith(str(value))]
        close = close or (begun if len(begun) == 1 else [])
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}={value!r} is not one of {sorted(options, key=str)}{hint}")
    return value
