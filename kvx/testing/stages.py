"""Pipeline stages run by hand, as a source's path runs them."""

from __future__ import annotations

from typing import Any


def compress_and_decode(engine: Any, cell: Any, reader: Any, prompt: Any) -> tuple[Any, Any]:
    """The compress and decode stages on one prompt, as a source's path runs them for a cell
    that decodes alone: (the generation, the compressed run)."""
    from kvx.pipeline.compress import compress
    from kvx.pipeline.decode import decode_compressed

    cache, run = compress(engine.caches, reader, cell.compressor, cell.ratio, prompt, cell.query_aware)
    return decode_compressed(reader, run, cache, cell.max_new_tokens), run
