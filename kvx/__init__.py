"""kvx: measure what context and KV-cache compression does to language-model answers."""

__version__ = "0.1.0"
