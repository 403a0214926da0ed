"""Example kvx plugin: the ``value_norm`` compressor, found by kvx through its entry point."""

from kvx_plugin_example.value_norm_press import ValueNormPress

__all__ = ["ValueNormPress"]
