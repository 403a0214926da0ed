"""What compression reuses within a process, and one compressed run as diagnostics see it.

``Caches`` holds captured prefills, shared compressed contexts and FullCache-side memos across
cells; ``CompressedRun`` is one source's compressed cache and how to rebuild it. The compress
stage makes them; diagnostics read a run. Both sit below the pipeline and the plugin kinds so
neither has to reach up for them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers import Cache, DynamicCache, QuantizedCache

from kvx.core.lru import ByteLRU
from kvx.core.setting import RetainedMap
from kvx.modeling import attention
from kvx.modeling.capture import Capture, CaptureCache, cache_over, capture_prefill, ids_digest
from kvx.modeling.layers import attention_layers
from kvx.modeling.reader import LoadedReader, attn_implementation

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class Compressor(Protocol):
    """What a run asks of a compressor (``kvx.compressors.base.Compressor`` is one)."""

    attn_implementation: str | None
    compresses_decoding: bool

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache: ...

    def prefill(self, model: PreTrainedModel, ids: torch.Tensor, ratio: float) -> Cache: ...

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap: ...


SHARED_CONTEXTS_KEPT = 16  # compressed contexts kept for reuse by later sources with the same context


@dataclass
class SharedContext:
    """A compressed context as compression left it: the layers' K/V, the retained-position map
    and any per-head masks the compressor set on the model (AdaKV), so a later source with the
    same context and compressor decodes from it without compressing again."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    retained: RetainedMap | None
    head_masks: list[Any]
    seconds: float  # what compressing it took, reported by every source that reuses it


@dataclass
class Caches:
    """What the stages reuse across cells of one process; passed to them, never reached for."""

    captures: CaptureCache
    #: FullCache-side diagnostic results per (diagnostic, reader, prompt, reference)
    memo: ByteLRU[Any]
    shared: OrderedDict[tuple[str, str, str, float], SharedContext] = field(default_factory=OrderedDict)
    prefills: int = 0  # context prefills actually run
    compressions: int = 0  # compressor runs actually done (fast or hook path)
    #: captures of the source in progress, kept whatever the LRU's budget (``holding``)
    held: dict[tuple[str, str], Capture] | None = None
    #: shared compressed contexts the source in progress built or reused (``holding``)
    held_shared: set[tuple[str, str, str, float]] = field(default_factory=set)

    def capture(self, reader: LoadedReader, ids: torch.Tensor, digest: str | None = None) -> Capture:
        """The captured full prefill of ``ids`` on this reader (keyed by reader identity too: two
        readers sharing a tokenizer must never share a prefill)."""
        key = (reader.key, digest or ids_digest(ids))
        capture = self.held.get(key) if self.held is not None else None
        capture = capture or self.captures.get(key)
        if capture is None:
            self.prefills += 1
            capture = capture_prefill(reader.model, ids)
            self.captures.put(key, capture)
        if self.held is not None:
            self.held[key] = capture
        return capture

    def captured(self, reader: LoadedReader, ids: torch.Tensor) -> Capture | None:
        """The capture of ``ids`` if one is in memory; never prefills."""
        key = (reader.key, ids_digest(ids))
        return (self.held or {}).get(key) or self.captures.get(key)

    def drop_held(self, shared: bool) -> None:
        """Forget the source in progress's captures now (and its shared compressed contexts with
        ``shared``): what still uses their tensors keeps them, until it lets go."""
        assert self.held is not None, "drop_held runs inside holding()"
        for key in self.held:
            self.captures.pop(key)
        self.held.clear()
        if shared:
            for key in self.held_shared:
                self.shared.pop(key, None)
            self.held_shared.clear()

    @contextmanager
    def holding(self, release: bool) -> Iterator[None]:
        """One source's captures, kept for every cell of it whatever the LRU's budget. ``release``
        (a source-major run over all of a split's cells): they then leave memory, so one source's
        prefill is held at a time instead of a sweep's worth, and of the shared compressed
        contexts only those this source built or reused stay (the next source may share its
        context); otherwise the LRU keeps captures for cells run later, one at a time."""
        self.held = {}
        self.held_shared = set()
        try:
            yield
        finally:
            if release:  # and compressed contexts only this source could use again
                for key in self.held:
                    self.captures.pop(key)
                for key in [k for k in self.shared if k not in self.held_shared]:
                    del self.shared[key]
            self.held = None


class CompressedRun:
    """One source's compressed cache and how to rebuild it, for diagnostics after decoding.

    Decoding appends to the cache; diagnostics need the cache as compression left it. Fast-path
    compressors rebuild it from the captured prefill (press scoring only); hook-path ones have
    their DynamicCache cut back to the compressed lengths. Neither prefills the context again.
    """

    def __init__(
        self,
        caches: Caches,
        reader: LoadedReader,
        compressor: Compressor,
        ratio: float,
        prefill_ids: torch.Tensor,
        feed: torch.Tensor,
        capture: Capture | None,
        shared_key: tuple[str, str, str, float] | None,
    ) -> None:
        self.caches, self.reader, self.compressor, self.ratio = caches, reader, compressor, ratio
        self.prefill_ids, self.feed, self.capture = prefill_ids, feed, capture
        #: (reader, context, compressor config, ratio) when sources may share this compressed
        #: context: only when the compressor never sees their question
        self.shared_key = shared_key
        self.retained: RetainedMap | None = None
        self.start = 0
        self.decode_impl: str | None = compressor.attn_implementation
        self.first_logits: torch.Tensor | None = None
        #: wall seconds of building the cache (a hook path's prefill included, a capture's not)
        self.seconds = 0.0
        self._cache: Cache | None = None
        self._lengths: list[int] = []
        self._quantized: list[object] = []

    @property
    def memo(self) -> ByteLRU[Any]:
        return self.caches.memo

    def build(self) -> Cache:
        comp, model, ratio = self.compressor, self.reader.model, self.ratio
        key, shared_contexts = self.shared_key, self.caches.shared
        shared = shared_contexts.get(key) if key else None
        if key is not None:
            self.caches.held_shared.add(key)
        if shared is not None:
            shared_contexts.move_to_end(key)
            cache = cache_over(shared.layers)  # shares storage: decoding never writes into it
            for module, mask in zip(attention_layers(model), shared.head_masks):
                module.masked_key_indices = mask
            self.retained = shared.retained
            self.seconds = shared.seconds
        else:
            self.caches.compressions += 1
            started = time.perf_counter()
            with attn_implementation(model, comp.attn_implementation):
                if self.capture is not None:
                    cache = comp.compress_captured(model, self.capture, ratio)
                else:
                    self.caches.prefills += 1
                    cache = comp.prefill(model, self.prefill_ids, ratio)
            self.seconds = time.perf_counter() - started
            if key is not None and type(cache) is DynamicCache:  # quantized caches change as they decode
                self.retained = comp.retained_map(model, cache, self.capture, ratio)
                masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
                layers = [(layer.keys, layer.values) for layer in cache.layers]
                shared_contexts[key] = SharedContext(layers, self.retained, masks, self.seconds)
                while len(shared_contexts) > SHARED_CONTEXTS_KEPT:
                    shared_contexts.popitem(last=False)
        self._lengths = [cache.get_seq_length(i) for i in range(len(cache.layers))]
        self._quantized = [getattr(layer, "_quantized_keys", None) for layer in cache.layers]
        # Layers left with different lengths (PyramidKV budgets, ChunkKV's partial chunk) break the
        # one mask transformers sizes from layer 0: decode on the per-layer causal attention then.
        if len(set(self._lengths)) > 1:
            self.decode_impl = attention.NAME
        self._cache = cache
        return cache

    def cache_after_feed(self) -> Cache | None:
        """The decoding cache cut back to compression + question, so a reference can be
        teacher-forced without feeding the question again; None where that is not exact."""
        extra = self.feed.shape[1]
        if self.compressor.compresses_decoding:  # decoding compressed it: no such cache remains
            return None
        if isinstance(self._cache, QuantizedCache):
            # exact only while decoding stayed in the unquantized residual (no re-quantization)
            if any(layer._quantized_keys is not q for layer, q in zip(self._cache.layers, self._quantized)):
                return None
            for layer, length in zip(self._cache.layers, self._lengths):
                layer.keys, layer.values = layer.keys[:, :, :extra], layer.values[:, :, :extra]
                layer.cumulative_length = length + extra
            return self._cache
        if not isinstance(self._cache, DynamicCache):
            return None
        for layer, length in zip(self._cache.layers, self._lengths):
            layer.keys, layer.values = (
                layer.keys[:, :, : length + extra],
                layer.values[:, :, : length + extra],
            )
        return self._cache

    def full_cache(self) -> Cache:
        """The uncompressed cache of the same prefill: over the capture when there is one, else
        from a prefill of its own (counted)."""
        if self.capture is not None:
            return self.capture.full_cache()
        self.caches.prefills += 1
        return capture_prefill(self.reader.model, self.prefill_ids).full_cache()

    def fresh_cache(self) -> Cache | None:
        """The cache as compression left it (rebuilt from the capture), or None without one (or when
        the press also compresses while decoding: a diagnostic would miss the decode's compression)."""
        if self.compressor.compresses_decoding:
            return None
        return self.build() if self.capture is not None else None
