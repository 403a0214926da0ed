"""KeepEnds: a text transform plugin that keeps a context's first and last segments."""

from dataclasses import dataclass

from kvx.core.errors import ConfigError
from kvx.transforms.base import Transform


@dataclass
class KeepEnds(Transform):
    """Keep the first ``head`` and last ``tail`` segments (instructions up front, the latest turn)."""

    head: int = 1
    tail: int = 1

    def validate(self):
        if self.head < 0 or self.tail < 0 or self.head + self.tail < 1:
            raise ConfigError(f"transform.head={self.head}, transform.tail={self.tail}: keep at least one")

    def apply(self, source):
        parts = source.parts()
        return [p for i, p in enumerate(parts) if i < self.head or i >= len(parts) - self.tail]
