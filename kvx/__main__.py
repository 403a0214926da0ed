"""``python -m kvx``: one cell; ``python -m kvx -m a=x,y``: a Hydra multirun over the grid.

Before Hydra runs, ``kvx.cli.preflight`` stores the config nodes the command line needs and checks every
job of its sweep, so a typo or a bad value fails in a second with one line (and, for a name, the
list of registered names) instead of after a model load, and nothing is written first.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

import hydra
from omegaconf import DictConfig

from kvx.cli import presets, suite
from kvx.cli.preflight import prepare
from kvx.core.conf import conf_dir
from kvx.core.errors import ConfigError
from kvx.core.registry import RegistryError


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="config")
def _hydra_main(cfg: DictConfig) -> dict[str, float]:
    from kvx.core import lean_imports

    lean_imports.install()  # before kvx.cli.app imports transformers: hqq and sklearn load only if used
    from kvx.cli.app import run

    return run(cfg)


def main() -> None:
    try:
        parts = presets.suite(sys.argv[1:], conf_dir())
        if parts is not None:
            suite.check(parts, conf_dir())
        else:
            sys.argv[1:] = prepare(sys.argv[1:], conf_dir())
    except (RegistryError, ConfigError) as exc:
        print("kvx: " + " ".join(str(exc).split()), file=sys.stderr)
        sys.exit(2)
    if parts is not None:
        sys.exit(suite.run(parts))
    try:
        _hydra_main()
        _leave()
    except KeyboardInterrupt:
        app = sys.modules.get("kvx.cli.app")
        done = getattr(app, "FINISHED_HERE", 0)
        print(
            f"\nkvx: interrupted; {done} cell(s) finished by this process are kept in the tracking "
            "store and the cell in progress is marked KILLED; rerun the same command to resume "
            "(finished cells are reused)",
            file=sys.stderr,
            flush=True,
        )
        # close the sweep run now and leave with 130: a second KeyboardInterrupt surfacing while the
        # interpreter joins MLflow's and Hydra's threads at shutdown would otherwise end it as -SIGINT
        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(130)


def _leave() -> None:
    """Exit now that every run is closed and logged: the exit handlers still run (MLflow's,
    logging's), but not the interpreter's teardown of torch, transformers and MLflow (~1.5 s),
    unless a thread that is not a daemon is still working."""
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
