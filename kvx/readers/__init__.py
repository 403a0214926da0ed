"""Readers: the models that answer."""
