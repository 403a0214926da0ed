"""Checks that need only the reader's tokenizer, made for every cell before any model loads.

A RULER split sized to ``context_tokens`` cannot be built when the task's shortest prompt, counted
with the reader's tokenizer, is longer than that: found by the run only once its model has loaded
and the cells before it have run. :func:`check_fits` asks the same question first, through two
optional plugin hooks, with the numbers the run would compute:

- the reader's ``token_counter()`` (``kvx.readers.base.Reader``): the run's own text -> token count,
  built without weights (tiny, hf, smollm2, gemma3; openai: the counter its served run sizes prompts
  with). A reader without the hook, or whose hook returns None, is not checked here;
- the task's ``check_budget(n, seed, context_tokens, count_tokens)`` (``kvx.tasks.base.Task``):
  raises ValueError exactly when ``sources`` with those arguments would run out of room (RULER's
  tasks, ``tool_call source=bfcl``). A task without it is not checked here.

Each reader's counter is built once per process (one per reader configuration), and each verdict
is kept per (task, reader, context_tokens, n_sources, seed), so the cells of a grid that share a split
(presses, ratios) cost one check.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

from kvx.core.errors import ConfigError, one_line

CountTokens = Callable[[str], int]

log = logging.getLogger("kvx")


@dataclasses.dataclass(frozen=True)
class _Keyed:
    """A plugin object as a cache key: its type and configured fields (the object rides along)."""

    key: str
    plugin: Any = dataclasses.field(compare=False, hash=False, repr=False)

    @classmethod
    def of(cls, plugin: Any, drop: tuple[str, ...] = ()) -> _Keyed:
        kind = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
        if not dataclasses.is_dataclass(plugin):  # no fields to read: this very object
            return cls(f"{kind}@{id(plugin)}", plugin)
        fields = {f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.name not in drop}
        return cls(f"{kind}:{sorted(fields.items(), key=lambda item: item[0])!r}", plugin)


@functools.cache
def _counter(reader: _Keyed) -> CountTokens | None:
    """The reader's ``token_counter()``, built once per reader configuration and process. A tokenizer
    whose files are not here (offline, a login node without the hub cache) is said once and not
    checked: the run checks each prompt's length when it loads the reader."""
    hook = getattr(reader.plugin, "token_counter", None)
    if hook is None:
        return None
    try:
        return hook()
    except Exception as exc:
        why = (one_line(exc) or type(exc).__name__)[:200]
        if not isinstance(exc, OSError):  # files that are here but are no tokenizer: the run fails too
            raise ConfigError(f"{_named(reader.plugin)}: its tokenizer does not load: {why}") from None
        log.warning(
            "kvx: %s: its tokenizer is not available here (%s); prompt lengths are checked when the "
            "job loads it",
            _named(reader.plugin),
            why,
        )
        return None


def _named(reader: Any) -> str:
    """``reader.model_id=...`` where the reader has one, else its class."""
    model_id = getattr(reader, "model_id", None)
    return f"reader.model_id={model_id}" if model_id else type(reader).__name__


@functools.lru_cache(maxsize=4096)
def _verdict(task: _Keyed, reader: _Keyed, context_tokens: int, n_sources: int, seed: int) -> str | None:
    """Why the split cannot be built (the task's ValueError), or None when it can or nothing checks."""
    check = getattr(task.plugin, "check_budget", None)
    count_tokens = _counter(reader) if check is not None else None
    if check is None or count_tokens is None:
        return None
    try:
        check(n_sources, seed, context_tokens, count_tokens)
    except ValueError as exc:  # ConfigError too
        return " ".join(str(exc).split())  # one line
    return None


def check_fits(
    task_name: str, task: Any, reader_name: str, reader: Any, context_tokens: int, n_sources: int, seed: int
) -> None:
    """Raise ``kvx.core.errors.ConfigError`` (one line naming the key and value, e.g. ``task=ruler_cwe,
    reader=tiny: context_tokens=1024 is too small: the shortest prompt of this task has 1880 tokens``)
    when a cell with these settings would fail for a reason the reader's tokenizer alone can tell;
    never loads model weights.

    ``task`` and ``reader`` are the instantiated plugin dataclasses. What is checked is what the
    task's ``check_budget`` checks, counted with the reader's ``token_counter()`` (module docstring):
    the same counts, so it raises exactly when the run's ``task.sources`` would. Skipped (returns)
    for a task without ``check_budget`` and for a reader without a counter before loading. The
    served reader (``openai``) is checked with the counter its run sizes prompts with (tiktoken's
    offline, or ``reader.tokenizer``), never asking the server. Not checked here:
    ``reader.max_prompt_tokens`` too small for a source's question and template (that needs the
    source itself; the run refuses it at that source's encode).

    Cost: the first call per reader builds its counter (tiny: milliseconds, no transformers import;
    hf: the tokenizer's files), the first per split builds each source's shortest prompt; repeated
    calls for a split are a dictionary lookup.
    """
    problem = _verdict(
        _Keyed.of(task),
        _Keyed.of(reader, drop=("max_prompt_tokens", "truncation")),
        int(context_tokens),
        int(n_sources),
        int(seed),
    )
    if problem is not None:
        raise ConfigError(f"task={task_name}, reader={reader_name}: {problem}")
