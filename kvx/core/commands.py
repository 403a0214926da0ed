"""What every ``python -m kvx.<command>`` other than ``python -m kvx`` shares: ``main(argv) -> int``
runs in-process and returns its exit code, and this is the one place that turns how a command ends
into that code.

- argparse's own exits (``--help``: 0, a usage error: 2, its message already printed) are returned;
- a user error (:class:`~kvx.core.errors.ConfigError`, :class:`~kvx.core.registry.RegistryError`, a
  command's own bad-input type) is one ``PROG: message`` line on stderr and exit code 2;
- :class:`Failed` (the input was fine but the command could not finish) is that line and its code;
- a reader that closed the pipe (``python -m kvx.plugins | head -1``) ends the command quietly, with
  the code a shell shows for a program killed by SIGPIPE;
- Ctrl-C, where the command says what it leaves behind, is that line and 130.

Only a module's ``if __name__ == "__main__": raise SystemExit(main())`` hands the code to the
interpreter.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Sequence

from kvx.core.errors import ConfigError
from kvx.core.registry import RegistryError

#: exit code of bad input, argparse's own for a usage error
BAD_INPUT = 2
#: Ctrl-C: 128 + SIGINT
INTERRUPTED = 130
#: the reader of standard output went away: 128 + SIGPIPE
PIPE_CLOSED = 141


class Failed(Exception):
    """A command that could not finish on good input (a server that never answered): one line, ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def run(
    prog: str,
    body: Callable[[list[str]], int],
    argv: Sequence[str] | None,
    user_errors: tuple[type[Exception], ...] = (),
    interrupted: str | None = None,
) -> int:
    """``body(argv)``'s exit code (``argv`` defaults to the process's), however it ended. ``prog`` begins
    each line said (``kvx.aggregate``); ``user_errors`` are more bad-input types; ``interrupted``, when
    given, is what Ctrl-C says (otherwise KeyboardInterrupt propagates)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            code = body(args)
            sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is seen below
            return code
        except KeyboardInterrupt:
            if interrupted is None:
                raise
            print(f"\n{prog}: {interrupted}", file=sys.stderr, flush=True)
            return INTERRUPTED
    except SystemExit as exc:  # argparse's --help or usage error: its text already went out
        return _code(exc)
    except Failed as exc:
        _say(prog, exc)
        return exc.code
    except (ConfigError, RegistryError, *user_errors) as exc:
        _say(prog, exc)
        return BAD_INPUT
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return PIPE_CLOSED


def _say(prog: str, exc: Exception) -> None:
    print(f"{prog}: {exc}", file=sys.stderr)


def _code(exc: SystemExit) -> int:
    """The status the interpreter would exit with: None is 0; a message is printed and is 1."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def _stdout_closed() -> bool:
    """Whether standard output's reader went away; if so, point it at the null device, so what is still
    buffered there does not fail again (a traceback) when the interpreter flushes it at exit."""
    try:
        sys.stdout.flush()
        closed = False
    except BrokenPipeError:
        closed = True
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's capture)
        return closed
    if not (closed or _reader_gone(fd)):
        return False  # the closed pipe was another one (a socket): not this module's to hide
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


def _reader_gone(fd: int) -> bool:
    """A pipe whose reading end is closed polls as an error on its writing end."""
    if not hasattr(select, "poll"):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poll.poll(0))
