"""The process's memory: freed heap pages given back between sources, and its peak measured.

A source's prefill, capture and caches are hundreds of megabytes of tensors freed together when
the source is done; glibc keeps much of that in its heap, so a sweep's resident memory creeps up
source by source. ``malloc_trim`` returns it (glibc only; elsewhere this does nothing).

A cell's peak memory is measured while it runs (:class:`PeakMemory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import resource
import sys
import threading
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def default_budget(device: Any) -> int:
    """The bytes one source's decode may hold when ``decode_budget_mb`` is not set: a quarter of the
    device's memory (of the machine's RAM on the CPU), leaving the rest to the model, the captured
    prefills other cells reuse, and everything else the process holds."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.get_device_properties(device).total_memory // 4
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4


def trim_memory() -> bool:
    """Release free heap memory to the OS; whether the C library could."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))


def _status_kib(field: str) -> int | None:
    try:
        found = re.search(rf"{field}:\s+(\d+) kB", _STATUS.read_text())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _process_peak() -> int:
    """The process's high-water mark of resident memory, in bytes."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


class PeakMemory:
    """Peak resident memory while a block runs, for a cell's metrics.

    The kernel's high-water mark is left alone (resetting it would hide earlier peaks from
    ``/usr/bin/time`` and every other reader of the process's maximum). When the block raises it,
    the new mark is the block's peak, exactly; otherwise the peak is the highest resident size a
    thread read every ``interval`` seconds while the block ran (a spike shorter than that can be
    missed)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="kvx-peak-memory", daemon=True)

    def _sample(self) -> None:
        while True:
            kib = _status_kib("VmRSS")
            if kib is None:
                return
            self.bytes = max(self.bytes, kib * 1024)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakMemory:
        self._before = _process_peak()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        after = _process_peak()
        if after > self._before or not self.bytes:
            self.bytes = after
