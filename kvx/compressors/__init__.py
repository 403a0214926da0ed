"""Compressors: how a context's KV cache is built smaller (kvpress presses, quantized caches)."""
