"""Judges (``kvx.judges`` entry points): a second opinion on each answer, kept beside the task's own score."""
