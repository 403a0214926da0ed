"""Helpers several test modules share (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations


def save_tiny_bert(folder, words, model_class=None):
    """A tiny random BERT (WordPiece over ``words``, 1 layer of width 32) saved to ``folder``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n"
    )
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=False).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words) + 5,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    (model_class or BertModel)(config).save_pretrained(folder)
    return str(folder)


def unmeasured(record: dict) -> dict:
    """A record without what this machine measured (its seconds, its answers' and diagnostics'
    timings and costs): what two runs of one cell must agree on."""
    out = {k: v for k, v in record.items() if k != "seconds"}
    for side in ("full", "compressed"):
        if out.get(side):
            out[side] = {k: v for k, v in out[side].items() if k != "cost"}
    if out.get("diagnostics"):
        out["diagnostics"] = {
            name: {k: v for k, v in result.items() if k != "seconds"}
            for name, result in out["diagnostics"].items()
        }
    return out


def run_kvx(folder, *args: str) -> None:
    """``python -m kvx -m ARGS`` in ``folder`` as a user runs it (a prestarted process); fails the test
    with its stderr."""
    import prestarted

    done = prestarted.run("kvx", ["-m", *args], folder, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


# --- sweeps run as users run them, by several workers at once (concurrency, launchers, servers) ---

TINY_SWEEP = ["reader=tiny", "context_tokens=300", "max_new_tokens=4", "progress=false", "diagnostics=[]"]
# a worker killed on this machine is known dead at once (its pid), so stale_s only guards other machines;
# it stays long because 16 workers on 2 cores can starve a heartbeat thread for seconds
# one worker alone on its store: no rival's claim can land, so the pause that lets them (settle_s) only waits
SOLO_LEASE = ["lease.settle_s=0.05"]
FAST_LEASE = ["lease.settle_s=0.3", "lease.poll_s=0.5", "lease.heartbeat_s=2", "lease.stale_s=60"]


def kvx_env(uri=None, **extra):
    """The test's environment without a tracking URI of its own, or pointed at ``uri``."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env | extra


def start_sweep(cwd, *args, env=None):
    """``python -m kvx -m`` on the tiny reader with fast leases, a prestarted process in its own process
    group. Ctrl-C raises KeyboardInterrupt in it, as in a terminal, even where the test suite was started
    in the background (``cmd &`` in a script), which leaves SIGINT ignored."""
    import prestarted

    return prestarted.popen("kvx", ["-m", *TINY_SWEEP, *FAST_LEASE, *args], cwd, env or kvx_env())


def finish(proc, timeout=600):
    """(exit code, stderr) of a started sweep."""
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def store(cwd, uri=None, experiment="kvx"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri or f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    return client, client.get_experiment_by_name(experiment).experiment_id


def ledger(cwd, uri=None, experiment="kvx"):
    """Active runs of the experiment by role."""
    client, exp = store(cwd, uri, experiment)
    out = {}
    for run in client.search_runs([exp], "", max_results=1000):
        out.setdefault(run.data.tags.get("kvx.role", ""), []).append(run)
    return out


def check_exactly_once(cwd, cells, sources, uri=None, experiment="kvx"):
    """Each cell has one FINISHED run holding each source once; no other cell or control run is left."""
    import json

    runs = ledger(cwd, uri, experiment)
    cell_runs = runs.get("cell", [])
    assert [r.info.status for r in cell_runs] == ["FINISHED"] * cells, [r.info.status for r in cell_runs]
    assert len({r.data.tags["kvx.cell_id"] for r in cell_runs}) == cells  # no cell twice
    client, _ = store(cwd, uri, experiment)
    for run in cell_runs:
        folder = cwd / "dl" / run.info.run_id
        folder.mkdir(parents=True, exist_ok=True)
        path = client.download_artifacts(run.info.run_id, "records.jsonl", str(folder))
        with open(path) as handle:
            ids = [json.loads(line)["source_id"] for line in handle]
        assert len(ids) == len(set(ids)) == sources, ids
    controls = runs.get("control", [])
    assert [r.info.status for r in controls] == ["FINISHED"] * len(controls)
    assert len({r.data.tags["kvx.control_key"] for r in controls}) == len(controls)


def aggregate_strict(cwd, uri=None, experiment="kvx"):
    """``python -m kvx.aggregate --strict`` (a prestarted process) must exit 0; returns what it printed."""
    import prestarted

    args = ["--no-plots", "--no-log", "--strict", "--experiment", experiment, "--out", str(cwd / "agg")]
    done = prestarted.run("kvx.aggregate", args, cwd, kvx_env(uri), timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


#: headless Chromium flags for the browser tests (Debian's chromium, driven by Playwright)
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def chromium_or_skip() -> str:
    """Debian's Chromium for Playwright (its own browser download is not reachable here); the calling
    test module is skipped, with the reason, where Playwright or the binary is missing."""
    import shutil

    import pytest

    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)", allow_module_level=True)
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium binary (apt-get install chromium)", allow_module_level=True)
    return path


def compress_and_decode(engine, cell, reader, prompt):
    """The compress and decode stages on one prompt, as a source's path runs them for a cell
    that decodes alone: (the generation, the compressed run)."""
    from kvx.pipeline.compress import compress
    from kvx.pipeline.decode import decode_compressed

    cache, run = compress(engine.caches, reader, cell.compressor, cell.ratio, prompt, cell.query_aware)
    return decode_compressed(reader, run, cache, cell.max_new_tokens), run


# --- what a command would run, planned in this process (the sweeper's hydra.sweeper.plan=json) ---


def plan(*args: str) -> list[dict]:
    """The sweeps ``python -m kvx -m ARGS`` would run, each with its checked cells and jobs, from
    ``kvx.cli.main.main`` in this process; nothing runs or is written. Fails the test with kvx's line."""
    import contextlib
    import io
    import json

    from kvx.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["-m", *args, "hydra.sweeper.plan=json"])
    assert code == 0, err.getvalue()[-3000:]
    return json.loads(out.getvalue())["sweeps"]


def refused(*args: str) -> str:
    """kvx's one line for a command it refuses (exit 2), from ``main`` in this process."""
    import contextlib
    import io

    from kvx.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code == 2, err.getvalue()[-3000:]
    lines = [line for line in err.getvalue().splitlines() if line.startswith("kvx: ")]
    assert len(lines) == 1, err.getvalue()[-3000:]
    return lines[0]


def composed(*overrides: str, config_dir=None, return_hydra=False):
    """One cell's config as Hydra composes it (``hydra`` node removed), with kvx's shipped configs,
    installed plugins' configs and ``config_dir`` (as ``--config-dir`` adds it)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from kvx.core.conf import conf_dir

    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        extra = [f"hydra.searchpath=[file://{config_dir}]"] if config_dir else []
        cfg = compose("config", overrides=[*extra, *overrides], return_hydra_config=return_hydra)
    if not return_hydra:
        with open_dict(cfg):
            cfg.pop("hydra", None)
    return cfg
