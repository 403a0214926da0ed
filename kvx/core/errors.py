"""Errors a user can act on: raised before any model loads, printed without a traceback."""


class ConfigError(ValueError):
    """An invalid setting: the message names the offending key and value."""


class Unsupported(RuntimeError):
    """A stage that cannot run this setting here (a model not obtainable offline, a deletion with no
    matched control turn): its record is ``unsupported`` with this reason, never an error and never
    a wrong answer."""
