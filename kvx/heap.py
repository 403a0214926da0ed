"""Give freed heap pages back to the operating system between sources.

A source's prefill, capture and caches are hundreds of megabytes of tensors freed together when
the source is done; glibc keeps much of that in its heap, so a sweep's resident memory creeps up
source by source. ``malloc_trim`` returns it (glibc only; elsewhere this does nothing).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def trim_memory() -> bool:
    """Release free heap memory to the OS; whether the C library could."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))
