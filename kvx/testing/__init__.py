"""Test and benchmark fixtures shipped with kvx: synthetic record studies written through the same
record model the app writes."""
