"""Start-up times of kvx's commands, each run as a whole fresh process (issue 14 "start-up").

- ``plugins``: ``python -m kvx.plugins``, wall seconds to exit;
- ``help``: ``python -m kvx --help``, wall seconds to exit;
- ``run``: ``python -m kvx`` on the default embedded reader (SmolLM2, weights already converted in
  the user cache) with ``n_sources=1 diagnostics=[] max_new_tokens=2 progress=false force=true``:
  seconds from process start to the model's first forward, and wall seconds to exit.

The first forward is seen without touching kvx: ``run`` starts ``python -c`` with a bootstrap that
starts a thread polling ``sys.modules`` for the model module, wraps its model class's ``forward``
to note the time of the first call, then runs ``kvx`` as ``python -m kvx`` would (``runpy``). Times
are measured from the process's start (``/proc/self/stat`` starttime against ``/proc/uptime``, so
interpreter start-up counts, at the kernel's 10 ms tick). The same thread notes when the imports
of torch, transformers, mlflow, hydra and kvx.cli.app began (``import_<module>_s``), and which of the
packages a first forward does not need (:data:`OPTIONAL`) were loaded by then
(``loaded_at_first_forward``). All ``run`` processes share one temporary ``outputs_dir``: an
untimed warm-up run creates its tracking store first, as any real store has after its first run.

Commands alternate, the order rotating each round; load on the machine shifts every number, so
the 1-minute load average at the start and end is printed. Prints one JSON line per command with
the medians and every value.

    python benchmarks/bench_startup.py                 # 5 rounds
    python benchmarks/bench_startup.py --runs 3 --only plugins help
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUN_ARGS = ["n_sources=1", "diagnostics=[]", "max_new_tokens=2", "progress=false", "force=true"]
#: the model class whose first forward is timed (SmolLM2 is a Llama)
MODEL = ("transformers.models.llama.modeling_llama", "LlamaModel")
MARKS = ("torch", "transformers", "mlflow", "hydra", "kvx.cli.app")
#: imports a run does not need before its first forward: those loaded by then are reported
OPTIONAL = (
    "hqq",
    "sklearn",
    "lightning",
    "torch._inductor.compile_fx",
    "scipy.optimize",
    "scipy.stats",
    "pandas",
    "datasets",
)

#: runs in the measured process: argv[1] is the JSON file for the marks, the rest are kvx's arguments
BOOTSTRAP = r"""
import functools, json, os, runpy, sys, threading, time
with open("/proc/self/stat") as f:
    ticks = float(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
with open("/proc/uptime") as f:
    uptime = float(f.read().split()[0])
start = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
out, module, cls, names, optional = sys.argv[1], *json.loads(sys.argv[2])
marks = {}

def save():
    with open(out, "w") as f:
        json.dump(marks, f)

def watch():
    patched = False
    while not (patched and ("first_forward" in marks or all(n in marks for n in names))):
        for name in names:
            if name not in marks and name in sys.modules:
                marks[name] = time.time() - start
        mod = sys.modules.get(module)
        if not patched and mod is not None and hasattr(mod, cls):
            model = getattr(mod, cls)
            forward = model.forward

            @functools.wraps(forward)
            def first(self, *args, **kwargs):
                if "first_forward" not in marks:
                    marks["first_forward"] = time.time() - start
                    marks["loaded"] = [m for m in optional if m in sys.modules]
                    save()
                return forward(self, *args, **kwargs)

            model.forward = first
            patched = True
        time.sleep(0.005)

threading.Thread(target=watch, daemon=True).start()
sys.argv = ["kvx", *sys.argv[3:]]
try:
    runpy.run_module("kvx", run_name="__main__", alter_sys=True)
finally:
    marks["exit"] = time.time() - start
    save()
"""


def load_average() -> float:
    return os.getloadavg()[0]


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, done


def run_plugins() -> dict[str, Any]:
    wall, _ = timed([sys.executable, "-m", "kvx.plugins"], ROOT)
    return {"wall_s": wall}


def run_help() -> dict[str, Any]:
    wall, _ = timed([sys.executable, "-m", "kvx", "--help"], ROOT)
    return {"wall_s": wall}


def run_kvx(outputs: Path, extra: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        marks_path = Path(f.name)
    try:
        cmd = [
            sys.executable,
            "-c",
            BOOTSTRAP,
            str(marks_path),
            json.dumps([*MODEL, list(MARKS), list(OPTIONAL)]),
            *RUN_ARGS,
            f"outputs_dir={outputs}",
            *extra,
        ]
        wall, _ = timed(cmd, ROOT)
        marks = json.loads(marks_path.read_text() or "{}")
    finally:
        marks_path.unlink(missing_ok=True)
    if "first_forward" not in marks:
        raise SystemExit(f"no forward of {MODEL[0]}.{MODEL[1]} seen: is the reader a Llama?")
    row: dict[str, Any] = {"first_forward_s": marks["first_forward"], "wall_s": wall}
    row |= {f"import_{name}_s": marks[name] for name in MARKS if name in marks}
    row["loaded_at_first_forward"] = marks.get("loaded", [])
    return row


def summary(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and every value of each timing; the distinct module lists (``loaded_*``) as they came."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    out: dict[str, Any] = {"command": name, "runs": len(rows)}
    for key in keys:
        values = [row[key] for row in rows if key in row]
        if key.endswith("_s"):
            out[f"median_{key}"] = round(statistics.median(values), 3)
        else:
            out[key] = [list(v) for v in dict.fromkeys(tuple(v) for v in values)]
    out["all"] = {k: [round(row[k], 3) for row in rows if k in row] for k in keys if k.endswith("_s")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="rounds (each runs every command once)")
    names = ["plugins", "help", "run"]
    parser.add_argument("--only", nargs="+", choices=names, default=names, help="commands to time")
    parser.add_argument(
        "--extra", nargs="*", default=[], help="more overrides for the run, e.g. reader=smollm2"
    )
    args = parser.parse_args()

    print(json.dumps({"load_average_start": load_average(), "python": sys.executable}), flush=True)
    with tempfile.TemporaryDirectory(prefix="kvx-bench-startup-") as tmp:
        outputs = Path(tmp) / "outputs"
        commands = {
            "plugins": run_plugins,
            "help": run_help,
            "run": lambda: run_kvx(outputs, args.extra),
        }
        chosen = [name for name in commands if name in args.only]
        if "run" in chosen:  # creates the tracking store and checks the reader's weights are there
            warm = run_kvx(outputs, args.extra)
            print(json.dumps({"warm_up_run": warm}), file=sys.stderr, flush=True)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
        for i in range(args.runs):
            order = chosen[i % len(chosen) :] + chosen[: i % len(chosen)]
            for name in order:
                results[name].append(commands[name]())
                print(f"round {i + 1}/{args.runs} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    for name in chosen:
        print(json.dumps(summary(name, results[name])), flush=True)
    print(json.dumps({"load_average_end": load_average()}), flush=True)


if __name__ == "__main__":
    main()
