"""A least-recently-used store bounded by bytes, for the process-wide caches a sweep reuses.

Captured prefills and FullCache-side diagnostic results (reference logits: steps x vocabulary
floats, 10 MB per source on a 262k-vocabulary reader) are kept between cells; bounding them by
count would let a large model or vocabulary exhaust memory, so both are bounded by size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


def nbytes(value: Any) -> int:
    """Memory held by tensors and arrays inside ``value`` (dicts, lists, tuples, dataclass-like
    objects with ``nbytes()``), counting each tensor once; other values count a small constant."""
    seen: set[int] = set()

    def walk(node: Any) -> int:
        if id(node) in seen:
            return 0
        seen.add(id(node))
        if hasattr(node, "element_size") and hasattr(node, "numel"):  # torch.Tensor
            return int(node.numel() * node.element_size())
        if hasattr(node, "nbytes") and not callable(node.nbytes):  # numpy array
            return int(node.nbytes)
        if isinstance(node, dict):
            return sum(walk(k) + walk(v) for k, v in node.items())
        if isinstance(node, (list, tuple, set)):
            return sum(walk(v) for v in node)
        if hasattr(node, "__dict__"):
            return walk(vars(node))
        return 64

    return walk(value)


class ByteLRU(Generic[V]):
    """Keyed values, the least recently used evicted once their sizes exceed ``max_bytes``."""

    def __init__(self, max_bytes: int, size: Callable[[V], int] = nbytes) -> None:
        self.max_bytes = max_bytes
        self._size = size
        self._items: OrderedDict[Any, tuple[V, int]] = OrderedDict()
        self.total = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def get(self, key: Any) -> V | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Any, value: V) -> None:
        size = self._size(value)
        if size > self.max_bytes:
            return  # larger than the whole budget: recompute it instead of evicting everything
        if key in self._items:
            self.total -= self._items.pop(key)[1]
        self._items[key] = (value, size)
        self.total += size
        while self.total > self.max_bytes:
            self.total -= self._items.popitem(last=False)[1][1]

    def pop(self, key: Any) -> V | None:
        """Remove and return a value (None when absent)."""
        item = self._items.pop(key, None)
        if item is None:
            return None
        self.total -= item[1]
        return item[0]

    def memo(self, key: Any, compute: Callable[[], V]) -> V:
        """The stored value, or ``compute()`` stored (when it fits)."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value

    def clear(self) -> None:
        self._items.clear()
        self.total = 0
