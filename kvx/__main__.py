"""``python -m kvx``: one cell; ``python -m kvx -m a=x,y``: a Hydra multirun over the grid
(``kvx.cli.main``)."""

from __future__ import annotations

import atexit
import os
import sys
import threading

from kvx.cli.main import main


def console() -> None:
    """The ``kvx`` command: ``main``'s exit code, then a fast exit. Once every run is closed and logged,
    the exit handlers run (MLflow's, logging's) but not the interpreter's teardown of torch, transformers
    and MLflow (~1.5 s), unless a thread that is not a daemon is still working. After Ctrl-C the fast
    exit also keeps a second KeyboardInterrupt, raised while the interpreter joins MLflow's and Hydra's
    threads, from ending the process as -SIGINT instead of 130. Output piped into a reader that stops
    early (``| head``) ends quietly."""
    try:
        code = main(sys.argv[1:])
    except BrokenPipeError:  # ``kvx --help | head``: the reader left; say nothing more (Python's advice)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console()
