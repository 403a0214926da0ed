"""The stages one source goes through, one module each, composed by ``kvx.pipeline.engine``:

transform (text-level compression of the structured context, ``transform.py``) -> encode (the
reader renders the segments with their token spans, ``encode.py``) -> compress (KV: capture once,
apply each compressor, ``compress.py``) -> decode (greedy, ``decode.py``) -> evaluate
(``Task.evaluate`` -> one ``Answer``, ``evaluate.py``) -> diagnose (``diagnose.py``).

Stages take what they reuse (captured prefills, shared compressed contexts, FullCache-side memos)
as arguments and hold no per-cell state, so one process can run many cells of a source back to back.
"""
