"""The identity transform: the reader gets the context as the task built it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.transforms.base import Transform

if TYPE_CHECKING:
    from kvx.core.source import Segment, Source


@dataclass
class Identity(Transform):
    """``transform=none`` (the default): no text-level compression."""

    identity: ClassVar[bool] = True

    def apply(self, source: Source) -> Sequence[Segment]:
        return source.parts()
