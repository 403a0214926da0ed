"""Text transforms (``kvx.transforms`` plugins): text-level compression before the reader sees a context."""
