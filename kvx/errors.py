"""Errors a user can act on: raised before any model loads, printed without a traceback."""


class ConfigError(ValueError):
    """An invalid setting: the message names the offending key and value."""
