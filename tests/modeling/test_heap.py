"""Freed heap pages go back to the OS between sources (glibc's malloc_trim)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kvx.modeling.heap import trim_memory


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_trim_memory_returns_freed_heap_pages():
    # small tensors come from the heap (large ones are mmapped and returned on free anyway);
    # the last one stays, so the freed ones sit below it where only a trim can give them back
    tensors = [torch.ones(16 * 1024) for _ in range(4000)]  # 64 KiB each, 250 MiB
    last = torch.ones(16 * 1024)
    del tensors
    before = rss_mib()
    assert trim_memory() is True
    assert rss_mib() < before - 100
    assert last.sum() == 16 * 1024
