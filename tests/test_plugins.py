"""Plugins through the real entry-point machinery: an installed third-party compressor runs end to
end, a broken or colliding plugin does not take kvx down, and bad names or values fail before any
model loads.

Subprocess tests share one module-scoped set of plugin folders (each is put on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from kvx.core.setting import n_kept
from kvx.modeling.capture import capture_prefill
from kvx.testing.cli import SOLO_LEASE

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SRC = REPO / "plugins" / "kvx-plugin-example"
#: a kvx subprocess that fails before composing a config takes ~1-2 s; leave room for a busy machine
FAIL_FAST_S = 30.0
#: byte-level tiny reader: ruler_niah_single needs ~280 tokens at least
TINY_RUN = ["reader=tiny", "context_tokens=400", "progress=false", *SOLO_LEASE]

Listing = dict[str, list[tuple[str, str, str, str]]]


def _fake_dist(site: Path, name: str, version: str, entry_points: str) -> None:
    """A distribution as importlib.metadata sees it: just a ``*.dist-info`` folder on sys.path."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders to put on PYTHONPATH: the example plugin pip-installed, a broken dist, two colliding
    dists and one that registers a built-in's name."""
    root = tmp_path_factory.mktemp("plugins")
    # build from a copy: setuptools leaves build/ and *.egg-info next to the sources it builds
    src = root / "src"
    shutil.copytree(EXAMPLE_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    example = root / "example"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet"]
    done = subprocess.run(
        [*pip, "--no-index", "--target", str(example), str(src)], capture_output=True, text=True
    )
    if done.returncode != 0:  # some pip versions want an index even for a local build
        done = subprocess.run([*pip, "--target", str(example), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    broken = root / "broken"
    _fake_dist(
        broken,
        "kvx-broken-plugin",
        "0.0.1",
        "[kvx.compressors]\nbroken_press = kvx_broken_missing_module:Nope\n",
    )
    dup = root / "dup"
    for dist in ("kvx-dup-a", "kvx-dup-b"):
        _fake_dist(dup, dist, "0.0.1", "[kvx.compressors]\ndup_press = kvx.compressors.presets:TOVA\n")
    shadow = root / "shadow"
    _fake_dist(shadow, "kvx-shadow", "0.0.1", "[kvx.compressors]\nsnapkv = kvx.compressors.presets:TOVA\n")
    return {"example": example, "broken": broken, "dup": dup, "shadow": shadow}


def _kvx(
    args: list[str], cwd: Path, paths: Sequence[Path] = (), module: str = "kvx", **env: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``python -m <module> args`` (``python args`` for no module) with only ``paths`` added to
    sys.path; return it and its wall time."""
    environ = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "KVX_DISABLE_PLUGINS"}}
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    environ["TOKENIZERS_PARALLELISM"] = "false"
    environ.update(env)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, *(["-m", module] if module else []), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, time.monotonic() - start


def _listing(text: str) -> Listing:
    """``python -m kvx.plugins`` output as group -> [(name, dist, version, status detail)]."""
    out: Listing = {}
    group = ""
    for line in text.splitlines():
        if not line.startswith(" "):
            group = line.split(" ")[0]
            out[group] = []
        elif "(none registered)" not in line:
            name, dist, version, detail = line.split(maxsplit=3)
            out[group].append((name, dist, version, detail))
    return out


def _runs(db: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exp_ids) if exp_ids else []


def _cell_runs(db: Path) -> list:
    return [r for r in _runs(db) if r.data.tags.get("kvx.role") == "cell"] if db.exists() else []


def test_value_norm_fast_path_equals_hook_path(
    tiny, sites: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example claims ``fast_path``: its replay on a captured prefill must build the hook's cache."""
    monkeypatch.syspath_prepend(str(sites["example"]))  # the installed copy: no bytecode in the repo
    from kvx_plugin_example.compressor import ValueNorm

    model = tiny.model
    prompt = tiny.encode("The grass is green. The sky is blue. " * 12, "What colour is the sky?", "It is")
    cap = capture_prefill(model, prompt.context_ids)
    assert ValueNorm.fast_path
    for ratio in (0.0, 0.5, 0.9):
        for n_sink in (0, 8):
            comp = ValueNorm(n_sink=n_sink)
            with torch.inference_mode():
                hook = comp.prefill(model, prompt.context_ids, ratio)
                fast = comp.compress_captured(model, cap, ratio)
            for idx, (h, f) in enumerate(zip(hook.layers, fast.layers, strict=True)):
                assert h.keys.shape[2] == (n_kept(cap.n_tokens, ratio) if ratio else cap.n_tokens)
                assert torch.equal(h.keys, f.keys) and torch.equal(h.values, f.values), (ratio, n_sink, idx)
            if ratio and n_sink:  # sinks survive even a 90% cut
                kept = fast.layers[0].keys[0, 0]
                for pos in range(n_sink):
                    assert (kept == cap.layers[0].keys[0, 0, pos]).all(-1).any(), pos


@pytest.mark.slow
def test_listing_shows_plugins_broken_and_colliding(sites: dict[str, Path], tmp_path: Path) -> None:
    done, _ = _kvx(["--check"], tmp_path, list(sites.values()), module="kvx.plugins")
    assert done.returncode == 0, done.stderr
    compressors = _listing(done.stdout)["kvx.compressors"]
    by_name: dict[str, list[tuple[str, str, str]]] = {}
    for name, dist, version, detail in compressors:
        by_name.setdefault(name, []).append((dist, version, detail))
    assert by_name["value_norm"] == [("kvx-plugin-example", "0.1.0", "ok")]
    [(dist, version, detail)] = by_name["broken_press"]
    assert (dist, version) == ("kvx-broken-plugin", "0.0.1")
    assert detail.startswith("broken:") and "kvx_broken_missing_module" in detail
    assert sorted(d for d, _, _ in by_name["dup_press"]) == ["kvx-dup-a", "kvx-dup-b"]
    assert all("use kvx-dup-" in detail for _, _, detail in by_name["dup_press"])
    shadowed = dict((d, detail) for d, _, detail in by_name["snapkv"])
    assert shadowed["kvx"] == "ok"
    assert shadowed["kvx-shadow"] == "ok; shadowed by kvx's built-in, use kvx-shadow:snapkv"
    others = [
        (n, d) for n, d, _, detail in compressors if n != "broken_press" and not detail.startswith("ok")
    ]
    assert not others, f"a broken plugin took others down: {others}"
    assert {"snapkv", "tova", "hqq"} <= set(by_name)


@pytest.mark.slow
def test_plain_listing_imports_no_plugin(sites: dict[str, Path], tmp_path: Path) -> None:
    """Names, distributions and targets from the metadata alone: the broken plugin is listed (its
    import would fail), the example's module and the kvpress it imports stay unimported."""
    done, _ = _kvx([], tmp_path, list(sites.values()), module="kvx.plugins")
    assert done.returncode == 0, done.stderr
    compressors = _listing(done.stdout)["kvx.compressors"]
    by_name = {(name, dist): detail for name, dist, _, detail in compressors}
    assert by_name["broken_press", "kvx-broken-plugin"] == "kvx_broken_missing_module:Nope"
    assert by_name["value_norm", "kvx-plugin-example"] == "kvx_plugin_example.compressor:ValueNorm"
    assert by_name["snapkv", "kvx-shadow"].endswith("; shadowed by kvx's built-in, use kvx-shadow:snapkv")
    assert not [d for d in by_name.values() if d.startswith(("ok", "broken"))], "no status without --check"
    assert done.stdout.rstrip().endswith("--check` imports each entry and says ok or broken and why)")
    probe = (
        "import sys\nfrom kvx.plugins import main\nassert main([]) == 0\n"
        "heavy = ('kvx_plugin_example', 'kvpress', 'torch')\n"
        "print([m for m in heavy if m in sys.modules], file=sys.stderr)\n"
    )
    done, _ = _kvx(["-c", probe], tmp_path, [sites["example"]], module="")
    assert done.returncode == 0 and done.stderr.strip() == "[]", done.stderr


@pytest.mark.slow
def test_disable_plugins_lists_only_kvx(sites: dict[str, Path], tmp_path: Path) -> None:
    done, _ = _kvx([], tmp_path, list(sites.values()), module="kvx.plugins", KVX_DISABLE_PLUGINS="1")
    assert done.returncode == 0, done.stderr
    entries = [e for group in _listing(done.stdout).values() for e in group]
    assert entries and {dist for _, dist, _, _ in entries} == {"kvx"}


@pytest.mark.slow
def test_example_plugin_runs_end_to_end(sites: dict[str, Path], tmp_path: Path, blank_store) -> None:
    blank_store(tmp_path)
    args = [
        "press=value_norm",
        "press.n_sink=8",
        "ratio=0.5",
        *TINY_RUN,
        "n_sources=2",
        f"outputs_dir={tmp_path / 'outputs'}",
    ]
    done, _ = _kvx(args, tmp_path, [sites["example"]])
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = _cell_runs(tmp_path / "outputs" / "mlflow.db")
    assert run.info.status == "FINISHED"
    assert run.data.params["choices.press"] == "value_norm"
    assert run.data.params["press.n_sink"] == "8"
    assert run.data.tags["plugin.kvx-plugin-example"] == "0.1.0"


@pytest.mark.slow
def test_example_plugin_preset_runs_as_installed(sites: dict[str, Path], tmp_path: Path, blank_store) -> None:
    """The plugin's ``kvx.conf`` folder is on the search path once installed: its preset and its press
    built on ``value_norm`` run with no flag, and that press is ``value_norm`` with ``n_sink=16``, the
    same cells however chosen (one setting, one cell)."""
    import json

    blank_store(tmp_path)
    example = [sites["example"]]
    planned, _ = _kvx(["+experiment=example/value_norm", "hydra.sweeper.plan=json"], tmp_path, example)
    assert planned.returncode == 0, planned.stderr[-3000:]
    [sweep] = json.loads(planned.stdout)["sweeps"]
    labels = [c["label"] for c in sweep["cells"]]
    assert len(labels) == 6 and all(label.startswith("ruler_niah_single|tiny|") for label in labels)
    assert sum("kvx-plugin-example:value_norm[n_sink=16]@" in label for label in labels) == 2
    spelled, _ = _kvx(
        [
            "-m",
            "+experiment=example/value_norm",
            "press=value_norm",
            "press.n_sink=16",
            "hydra.sweeper.plan=json",
        ],
        tmp_path,
        example,
    )
    assert spelled.returncode == 0, spelled.stderr[-3000:]
    sinks = {c["setting"] for c in sweep["cells"] if "[n_sink=16]" in c["label"]}
    assert {c["setting"] for c in json.loads(spelled.stdout)["sweeps"][0]["cells"]} == sinks

    done, _ = _kvx(["+experiment=example/value_norm", "progress=false", *SOLO_LEASE], tmp_path, example)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = _cell_runs(tmp_path / "outputs" / "mlflow.db")
    assert len(cells) == 6 and all(r.info.status == "FINISHED" for r in cells)
    sunk = [r for r in cells if r.data.params.get("press.n_sink") == "16"]
    assert len(sunk) == 2 and all(r.data.params["choices.press"] == "value_norm_sinks" for r in sunk)


@pytest.mark.slow
def test_broken_plugin_does_not_stop_a_run(sites: dict[str, Path], tmp_path: Path, blank_store) -> None:
    blank_store(tmp_path)
    args = ["press=tova", "ratio=0.5", *TINY_RUN, "n_sources=1", f"outputs_dir={tmp_path / 'outputs'}"]
    done, _ = _kvx(args, tmp_path, [sites["broken"]])
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = _cell_runs(tmp_path / "outputs" / "mlflow.db")
    assert run.info.status == "FINISHED" and run.data.params["choices.press"] == "tova"


def _fails_fast(args: list[str], tmp_path: Path, paths: Sequence[Path] = ()) -> str:
    """Run kvx expecting a user error before anything runs; return stderr. ``args`` come last: the
    last override of a key is the one Hydra composes."""
    done, wall = _kvx([*TINY_RUN, "outputs_dir=outputs", *args], tmp_path, paths)
    assert done.returncode != 0, done.stdout
    assert wall < FAIL_FAST_S, f"{args} took {wall:.1f}s to fail"
    assert "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "outputs").exists(), "something ran"
    return done.stderr


@pytest.mark.slow
def test_name_collision_fails_naming_both_dists(sites: dict[str, Path], tmp_path: Path) -> None:
    err = _fails_fast(["press=dup_press"], tmp_path, [sites["dup"]])
    assert "kvx-dup-a" in err and "kvx-dup-b" in err, err


@pytest.mark.slow
def test_builtin_keeps_its_name_next_to_a_plugin_that_shadows_it(
    sites: dict[str, Path], tmp_path: Path
) -> None:
    """The default config (press: snapkv) still composes, with the built-in; the plugin is ``dist:name``."""
    done, _ = _kvx(["--cfg", "job"], tmp_path, [sites["shadow"]])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "window_size: 64" in done.stdout, "press=snapkv must stay kvx's SnapKV"
    done, _ = _kvx(["--cfg", "job", "press=kvx-shadow:snapkv"], tmp_path, [sites["shadow"]])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "press: {}" in done.stdout, "kvx-shadow:snapkv is the plugin (a TOVA, no fields)"
    help_text, _ = _kvx(["--help"], tmp_path, [sites["shadow"]])
    [options] = [line for line in help_text.stdout.splitlines() if line.startswith("press: ")]
    names = options.removeprefix("press: ").split(", ")
    assert len(names) == len(set(names)) and "snapkv" in names and "kvx-shadow:snapkv" in names
    assert not any(name.startswith("kvx:") for name in names), "each option is listed once"


@pytest.mark.slow
def test_broken_plugin_asked_for_by_name_says_why(sites: dict[str, Path], tmp_path: Path) -> None:
    err = _fails_fast(["press=broken_press"], tmp_path, [sites["broken"]])
    [line] = err.splitlines()
    assert line.startswith("kvx: ") and "broken" in line and "kvx_broken_missing_module" in line, line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arg", "guess", "known"),
    [
        ("press=snapkvv", "snapkv", ["tova", "streaming_llm"]),
        ("task=ruler_niah_singel", "ruler_niah_single", ["hotpotqa", "ruler_vt"]),
        ("reader=smol", "smollm2", ["hf", "tiny"]),
    ],
)
def test_unknown_name_suggests_and_lists(arg: str, guess: str, known: list[str], tmp_path: Path) -> None:
    err = _fails_fast([arg], tmp_path)
    assert f"did you mean '{guess}'" in err.lower(), err
    assert all(name in err for name in known), err


@pytest.mark.slow
@pytest.mark.parametrize(("arg", "pattern"), [("ratio=1.5", r"ratio=1\.5"), ("ratio=abc", r"ratio='?abc")])
def test_bad_ratio_fails_fast(arg: str, pattern: str, tmp_path: Path) -> None:
    err = _fails_fast([arg], tmp_path)
    assert re.search(pattern, err), err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "pattern"),
    [(["press=hqq", "press.bits=3"], r"press\.bits=3.*2, 4, 8"), (["n_sources=0"], r"n_sources=0")],
)
def test_bad_value_fails_before_a_run(args: list[str], pattern: str, tmp_path: Path) -> None:
    """Checked after Hydra composes the config (the store may exist) but before any run or model."""
    outputs = tmp_path / "outputs"
    done, _ = _kvx([*TINY_RUN, *args, f"outputs_dir={outputs}"], tmp_path)
    assert done.returncode != 0, done.stdout
    assert re.search(pattern, done.stderr), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not _cell_runs(outputs / "mlflow.db")


#: frameworks a plugin listing must not import: each costs a second or more (torch ~2 s, its
#: transformers/kvpress stack ~10 s)
FRAMEWORKS = ("torch", "transformers", "kvpress", "lightning", "sklearn", "hqq", "mlflow", "datasets")


def test_loading_every_builtin_entry_point_imports_no_framework() -> None:
    """``python -m kvx.plugins`` and ``--help`` load every built-in: a module-level framework import
    in any of them (a diagnostic's ``import torch``) costs every listing its whole import time.
    A fresh process, so what this test process has imported does not matter."""
    probe = (
        "import sys\n"
        "from kvx.core.registry import BUILTIN_DIST, GROUPS, registry\n"
        "loaded = 0\n"
        "for kind in GROUPS:\n"
        "    for entry in registry(kind).entries:\n"
        "        if entry.dist == BUILTIN_DIST:\n"
        "            entry.load()\n"
        "            loaded += 1\n"
        f"print(loaded, [m for m in {FRAMEWORKS!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    count, imported = done.stdout.strip().split(" ", 1)
    assert int(count) >= 60, done.stdout  # every group was discovered and loaded
    assert imported == "[]", f"loading the built-in plugins imported {imported}"


def test_help_prints_usage_and_an_unknown_argument_is_an_error() -> None:
    def plugins(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kvx.plugins", *args], capture_output=True, text=True)

    done = plugins("--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m kvx.plugins")
    assert "kvx.tasks (" not in done.stdout  # not the listing
    done = plugins("--list")
    assert done.returncode == 2 and "unrecognized arguments: --list" in done.stderr and not done.stdout
    done = plugins()
    assert done.returncode == 0 and done.stdout.startswith("kvx.tasks (")
    assert "--check" in plugins("--help").stdout


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``python -m kvx.plugins | head -1``: the pipe closes before the listing is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kvx.plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    process.stdout.close()  # the only reader: every write of the listing now fails
    _, err = process.communicate(timeout=60)
    assert err == "" and process.returncode == 141, err


def _sources(root: Path) -> list[Path]:
    """The checkout's files as git sees them (tracked, and untracked but not ignored), relative to it."""
    done = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return [Path(f) for f in done.stdout.split("\0") if f and (root / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel built from a copy of the checkout's sources (~3 s). A copy: setuptools builds through
    ``build/lib`` and keeps what an earlier build left there, so a wheel built in place can hold a package
    that the package list lacks."""
    root = tmp_path_factory.mktemp("wheel")
    src, out = root / "src", root / "dist"
    for f in _sources(REPO):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    done = subprocess.run([*pip, str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    (built,) = out.glob("kvx-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_module_config_and_schema(wheel: zipfile.ZipFile) -> None:
    """Packages are found, not listed (setup.py): every module under kvx/, every config under conf/ (as
    ``kvx.conf``), the record schemas, the report's templates and prose, and kvx's Hydra plugins are in
    the wheel, and nothing else is."""
    names = set(wheel.namelist())
    files = [f.as_posix() for f in _sources(REPO)]
    modules = {f for f in files if f.startswith("kvx/") and f.endswith(".py")}
    configs = {"kvx/" + f for f in files if f.startswith("conf/") and f.endswith((".yaml", ".py"))}
    schemas = {f for f in files if f.startswith("kvx/schemas/") and f.endswith(".json")}
    plugins = {f for f in files if f.startswith("hydra_plugins/") and f.endswith(".py")}
    # report.html's template, style and script, and the report sections' Markdown prose
    report = {f for f in files if f.startswith("kvx/aggregate/publish/templates/")}
    report |= {f for f in files if f.startswith("kvx/aggregate/prose/") and f.endswith(".md")}
    assert {"kvx/__init__.py", "kvx/aggregate/read/__init__.py", "kvx/conf/config.yaml"} <= modules | configs
    assert schemas and "hydra_plugins/kvx/__init__.py" in plugins
    assert modules - names == set(), "modules missing from the wheel"
    assert configs - names == set(), "configs missing from the wheel"
    assert schemas - names == set(), "schemas missing from the wheel"
    assert plugins - names == set(), "Hydra plugins missing from the wheel"
    assert {"kvx/aggregate/publish/templates/report.html.j2", "kvx/aggregate/prose/matrix.md"} <= report
    assert report - names == set(), "report templates or prose missing from the wheel"
    # hydra_plugins is a namespace shared with other distributions' plugins: no __init__.py of its own
    assert "hydra_plugins/__init__.py" not in names
    (info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
    shipped = {n for n in names if not n.startswith(info + "/")}
    assert shipped == modules | configs | schemas | plugins | report


def test_the_wheel_carries_the_entry_points_and_the_version(wheel: zipfile.ZipFile) -> None:
    """Every plugin group of pyproject.toml with every name in it, the ``kvx`` command, and the version
    that ``kvx.__version__`` reads from the installed metadata."""
    import configparser
    import email

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (info,) = {n.split("/")[0] for n in wheel.namelist() if ".dist-info/" in n}
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # entry point names keep their case
    parser.read_string(wheel.read(f"{info}/entry_points.txt").decode())
    groups = {g: dict(parser[g]) for g in parser.sections()}
    declared = {"console_scripts": project["scripts"], **project["entry-points"]}
    assert {g for g in groups if g.startswith("kvx.")} >= {"kvx.tasks", "kvx.readers", "kvx.compressors"}
    assert groups == declared
    metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
    assert metadata["Name"] == "kvx" and metadata["Version"] == project["version"]
    import kvx

    assert kvx.__version__ == project["version"]  # the installed (editable) kvx's metadata


def test_example_plugin_table_appears_in_the_report(sites: dict[str, Path], tmp_path: Path) -> None:
    """A table from an installed package (the example plugin's ``fragile_sources``, through the
    ``kvx.aggregate.tables`` entry point) is built, written, listed and shown in ``report.html`` with its
    section's prose, with no change to kvx."""
    from kvx.testing.crafted import rec, write

    records = [
        rec(source=f"s{i}", comp=comp, ok=ok)
        for i in range(3)
        for comp, ok in (("snapkv", i != 0), ("tova", i == 2))
    ]
    folder = write(tmp_path / "records", records)
    out = tmp_path / "out"
    args = ["--records", str(folder), "--out", str(out), "--no-log", "--no-plots", "--quiet", "--boot", "20"]
    done, _ = _kvx(args, tmp_path, [sites["example"]], module="kvx.aggregate")
    assert done.returncode == 0, done.stderr[-3000:]
    fragile = (out / "fragile_sources.csv").read_text().splitlines()
    assert fragile[0] == "task,source_id,n_cells,n_broken,broken_share"
    assert fragile[1:] == ["t,s0,2,2,1.0", "t,s1,2,1,0.5", "t,s2,2,0,0.0"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Fragile sources (example plugin)" in page and "<h3>fragile_sources</h3>" in page
    assert "Sources broken by most cells come first" in page  # the plugin's own prose file
    listed, _ = _kvx(["--list"], tmp_path, [sites["example"]], module="kvx.aggregate")
    assert re.search(r"^fragile_sources\s+fragile\s+\[kvx_plugin_example\]", listed.stdout, re.M)
    without, _ = _kvx(["--list"], tmp_path, [], module="kvx.aggregate")
    assert without.returncode == 0 and "fragile_sources" not in without.stdout


def test_a_broken_table_plugin_is_left_out_and_said(tmp_path: Path) -> None:
    """A package whose table module fails to import is listed as broken by ``kvx.plugins --check`` and
    left out of the aggregate with a note: every other table is still built (exit 0)."""
    from kvx.testing.crafted import rec, write

    site = tmp_path / "site"
    _fake_dist(site, "kvx-broken-tables", "0.0.1", "[kvx.aggregate.tables]\nbroken_tables = no_such_module\n")
    folder = write(tmp_path / "records", [rec(source=f"s{i}", ok=i > 0) for i in range(3)])
    args = ["--records", str(folder), "--out", str(tmp_path / "out"), "--no-log", "--no-plots", "--quiet"]
    done, _ = _kvx(args, tmp_path, [site], module="kvx.aggregate")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "note: kvx.aggregate.tables 'broken_tables' from kvx-broken-tables:broken_tables is broken"
        in done.stdout
    )
    assert (tmp_path / "out" / "matrix.csv").exists()
    listed, _ = _kvx(["--list"], tmp_path, [site], module="kvx.aggregate")
    assert (
        "broken: kvx.aggregate.tables 'broken_tables'" in listed.stdout
        and "ModuleNotFoundError" in listed.stdout
    )
    checked, _ = _kvx(["--check"], tmp_path, [site], module="kvx.plugins")
    assert re.search(
        r"broken_tables\s+kvx-broken-tables 0\.0\.1\s+broken: ModuleNotFoundError", checked.stdout
    )
