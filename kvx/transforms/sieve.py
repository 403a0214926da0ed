"""SIEVE, ragscale's LongMemEval compressor (paper Tables 3, 8, 14, 19), which kvx cannot run.

No implementation is public: SIEVE is on no package index and the ragscale paper cites no code for
it. ``transform=sieve`` exists so that a SIEVE audit (``+experiment=ragscale/longmemeval_sieve``)
records every row ``unsupported`` with that reason instead of failing to start or compressing with a
substitute. Stored SIEVE outputs can still be audited: replay them (``transform=replay``) or audit
their scores (``python -m kvx.aggregate --scores``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvx.core.errors import Unsupported
from kvx.transforms.base import Transform

if TYPE_CHECKING:
    from kvx.core.source import Segment, Source

REASON = (
    "SIEVE has no public implementation (on no package index; the ragscale paper cites no code): kvx "
    "cannot compile it, and substitutes no other compressor; replay stored SIEVE outputs with "
    "transform=replay instead"
)


@dataclass
class Sieve(Transform):
    """``transform=sieve``: every row unsupported (module docstring)."""

    def apply(self, source: Source) -> Sequence[Segment]:
        raise Unsupported(REASON)
