"""Errors a user can act on: raised before any model loads, printed without a traceback."""


class ConfigError(ValueError):
    """An invalid setting: the message names the offending key and value."""


class Unsupported(RuntimeError):
    """A stage that cannot run this setting here (a model not obtainable offline, a deletion with no
    matched control turn): its record is ``unsupported`` with this reason, never an error and never
    a wrong answer."""


def one_line(exc: BaseException) -> str:
    """A message that spans lines (Hydra's and OmegaConf's hints, full_key, object_type) as one:
    the first line of the error and of its cause."""
    parts = [str(e).strip().splitlines()[0] for e in (exc, exc.__cause__) if e is not None and str(e).strip()]
    return ": ".join(dict.fromkeys(parts))
