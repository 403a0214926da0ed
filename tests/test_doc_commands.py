"""Every command the README and docs/ show is run here (shrunk with documented small settings), covered
by a named test or CI step that holds it, or marked with what it needs (tests/doc_commands.py); a
``python -m kvx`` command that is not run still composes and passes kvx's preflight, so a renamed key
in the docs fails here even where the command needs a GPU. A registry entry whose command the docs no
longer show fails too."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvx.testing.cli import SOLO_LEASE, TINY_SWEEP, kvx_env
from tests.doc_commands import Command, argv, inventory, page_commands

ROOT = Path(__file__).parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
BIN = Path(sys.executable).parent


def tiny(context_tokens: int = 300) -> tuple[str, ...]:
    """The documented small settings a run is shrunk with: the tiny random reader, two short sources."""
    sweep = [a for a in TINY_SWEEP if not a.startswith("context_tokens=")]
    return (*sweep, f"context_tokens={context_tokens}", "n_sources=2", *SOLO_LEASE)


TINY = tiny()


@dataclass(frozen=True)
class Step:
    """One documented command as a test runs it."""

    doc: str  #: as documented (``.venv/bin/`` or not: the activated environment makes them one)
    add: tuple[str, ...] = ()  #: arguments appended to shrink it
    swap: tuple[tuple[str, str], ...] = ()  #: placeholder -> what this test runs it on
    expect: str = ""  #: a glob under the run's folder that success creates
    serves: str = ""  #: a server: the URL path that must answer (``{port}`` is the port passed to it)
    root: bool = False  #: run in the repository (a command that reads its files), not the test's folder


@dataclass(frozen=True)
class Scenario:
    """Commands run in order in one folder (a sweep, then what reads its store)."""

    name: str
    steps: tuple[Step, ...]
    xfail: str = ""  #: a known bug being fixed elsewhere: the scenario must fail until it is merged


@dataclass(frozen=True)
class Covered:
    """A documented command an existing test or CI step runs: ``by`` is ``path::function`` (its
    source, decorators included, must hold ``part``) or a file that CI runs (which must hold it)."""

    doc: str
    by: str
    part: str


def normal(text: str) -> str:
    """A command as the activated environment reads it: ``.venv/bin/X`` is ``X``."""
    return " ".join(w.removeprefix(".venv/bin/") for w in text.split(" "))


SCENARIOS = (
    Scenario(
        "the quickstart, running.md's sweeps and what reads their store",
        (
            Step("python -m kvx -m press=snapkv,tova ratio=0.25,0.5", TINY, expect="outputs/mlflow.db"),
            Step("python -m kvx", TINY),
            Step("python -m kvx task=ruler_niah_multikey press=pyramidkv ratio=0.5 seed=1", tiny(600)),
            Step("python -m kvx -m press=snapkv press.window_size=16,32,64", TINY),
            Step("python -m kvx -m press=snapkv,tova budget_tokens=128,256", TINY),
            Step("python -m kvx -m task=hotpotqa transform=none,bm25_top_k press=none,tova", TINY),
            Step("python -m kvx.aggregate", expect="outputs/aggregate/*/report.html"),
            Step("python -m kvx.aggregate --sweep latest", ("--no-plots",)),
            Step(
                "python -m kvx.aggregate --sweep latest --seed 20260821 --boot 5000 --splits 5000",
                ("--no-plots",),
            ),
            Step(
                "python -m kvx.aggregate --records DIR",
                ("--no-plots",),
                swap=(("DIR", "{fixtures}/schema1/engine/records"),),
            ),
        ),
    ),
    Scenario(
        "running.md's quantized caches",
        (Step("python -m kvx -m press=hqq press.bits=8,4,2", TINY),),
    ),
    Scenario(
        "the command line's help and the plugin listing",
        (
            Step("python -m kvx --help"),
            Step("python -m kvx.plugins"),
            Step("python -m kvx.plugins --check"),
            Step("source .venv/bin/activate"),
            Step("python -S -c pass"),
            Step('python -c "import torch, transformers.models.llama.modeling_llama, kvpress"'),
            Step("python tests/doc_commands.py", root=True),
            Step(".venv/bin/mkdocs serve", ("-a", "127.0.0.1:{port}"), serves="/", root=True),
        ),
    ),
    Scenario(
        "presets.md: a preset and a press of your own, in a config folder",
        tuple(
            Step(doc, add, swap=(("my-conf", "{root}/docs/examples/conf"),))
            for doc, add in (
                ("python -m kvx --config-dir my-conf --cfg job +experiment=lab/small", ()),
                ("python -m kvx --config-dir my-conf +experiment=lab/small hydra.sweeper.plan=true", ()),
                ("python -m kvx --config-dir my-conf +experiment=lab/small", ("progress=false", *SOLO_LEASE)),
            )
        ),
    ),
    Scenario(
        "KVDiagnosis's small check",
        (
            Step(
                "python -m kvx +experiment=kvdiagnosis/ruler8k reader=tiny n_sources=2 context_tokens=2048"
                " press=snapkv ratio=0.5",
                ("max_new_tokens=4", "progress=false"),
                swap=(("n_sources=2", "n_sources=1"),),
            ),
            Step("python -m kvx.aggregate", ("--no-plots",)),
        ),
    ),
)

IMPORTED_KVDIAGNOSIS = "tests/importers/test_kvdiagnosis.py::imported"
SCORES = "python -m kvx.aggregate --scores paired_scores.csv --manifest artifact_manifest.jsonl --boot 2000"
COVERED = (
    Covered("bash scripts/setup.sh", ".ci/run", "bash scripts/setup.sh"),
    Covered("python -m pytest -n auto", ".ci/run", ".venv/bin/python -m pytest -n auto"),
    Covered("ruff check .", ".ci/run", ".venv/bin/ruff check ."),
    Covered("ruff format --check .", ".ci/run", ".venv/bin/ruff format --check ."),
    Covered("mkdocs build --strict", ".ci/run", ".venv/bin/mkdocs build --strict"),
    Covered("bash scripts/wheel_check.sh", ".ci/run", "bash scripts/wheel_check.sh"),
    Covered(
        "python scripts/reproduction_pages.py",
        "tests/test_reproduction_pages.py::test_the_page_is_generated_from_its_spec",
        "GENERATOR.render(SPECS[name], name)",
    ),
    Covered("kvx --help", "scripts/wheel_check.sh", '"$WORK/venv/bin/kvx" --help'),
    Covered("python -m kvx.aggregate --strict", "scripts/wheel_check.sh", '"$VPY" -m kvx.aggregate --strict'),
    Covered('mkdocs build --strict -d "$(mktemp -d)"', ".ci/run", 'mkdocs build --strict -d "$(mktemp -d)"'),
    Covered(
        "python -m kvx.importers kvdiagnosis PATH --out DIR",
        IMPORTED_KVDIAGNOSIS,
        'main(["kvdiagnosis", str(release), "--out"',
    ),
    Covered("python -m kvx.importers kvdiagnosis", IMPORTED_KVDIAGNOSIS, 'main(["kvdiagnosis"'),
    Covered(
        "python -m kvx.aggregate --list",
        "tests/aggregate/test_catalogue.py::test_cli_lists_the_catalogue_and_refuses_an_unknown_name_before_reading",
        'main(["--list"])',
    ),
    Covered(
        "python -m kvx.aggregate.publish.sections_page docs/report-sections.md",
        "tests/aggregate/publish/test_report_prose.py::"
        "test_the_docs_page_is_the_catalogue_and_includes_every_section_prose_in_report_order",
        'sections_page.page(load(figures=True, distributions=["kvx"]))',
    ),
    Covered(
        "python -m kvx.importers tpbench PATH --out DIR",
        "tests/importers/test_tpbench.py::imported",
        'main(["tpbench", str(release), "--out"',
    ),
    Covered(
        SCORES,
        "tests/aggregate/ragscale/test_ragscale_release.py::test_summary_json_is_reproduced",
        '"--scores", str(folder / "paired_scores.csv")',
    ),
    Covered(
        "python -m kvx.aggregate --scores tests/fixtures/ragscale_openrouter_hotpotqa/paired_scores.csv"
        " --boot 2000",
        "tests/aggregate/ragscale/test_ragscale_release.py::test_summary_json_is_reproduced",
        '"--boot", str(run["bootstrap_draws"])',
    ),
    Covered(
        "python -m kvx.aggregate --outputs-dir DIR",
        "tests/cli/test_cli.py::test_a_run_with_outputs_dir_is_aggregated_there_and_logs_what_results_md_lists",
        '"--outputs-dir", "D"',
    ),
    Covered(
        "python -m kvx.aggregate --outputs-dir ...",
        "tests/cli/test_cli.py::test_a_run_with_outputs_dir_is_aggregated_there_and_logs_what_results_md_lists",
        '"--outputs-dir", "D"',
    ),
    Covered(
        "python -m kvx.server --outputs-dir D",
        "tests/test_server.py::test_the_server_serves_the_store_runs_with_that_outputs_dir_write",
        '["--outputs-dir", outputs_dir]',
    ),
    Covered("python -m kvx.server", "tests/stores/test_tracking_server.py::Server", '"kvx.server",'),
    Covered(
        "python -m kvx.server --postgres outputs/pg",
        "tests/stores/test_tracking_server.py::Server",
        '"--postgres",',
    ),
    Covered("mlflow server", "tests/stores/test_mlflow_ui.py::ui", '"mlflow", "server"'),
    # `mlflow ui` is MLflow's `mlflow server` with local defaults; starting one costs ~20-50 s here
    Covered(
        "mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db",
        "tests/stores/test_mlflow_ui.py::ui",
        "db = f\"sqlite:///{root / 'outputs' / 'mlflow.db'}\"",
    ),
    Covered(
        "python -m kvx task=tpbench_p1 reader=tiny turn_selector=recency turn_fraction=0.3 press=none"
        " n_sources=4 judge=tpbench_p1 judge.reader=tiny",
        "tests/judges/test_judges.py::test_cli_judges_a_tpbench_sweep_and_the_report_shows_the_kappa_table",
        '"n_sources=4", "judge=tpbench_p1", "judge.reader=tiny"',
    ),
    Covered(
        "python -m kvx press=value_norm press.n_sink=8",
        "tests/test_plugins.py::test_example_plugin_runs_end_to_end",
        '"press=value_norm",\n        "press.n_sink=8"',
    ),
    Covered(
        "python -m kvx -m hydra/launcher=kvx_joblib task=ruler_niah_single,hotpotqa press=snapkv,tova"
        " ratio=0.25,0.5 per_job=[press,ratio]",
        "tests/cli/test_launchers.py::test_preset_runs_grouped_jobs",
        '("kvx_joblib", "hydra_joblib_launcher")',
    ),
    Covered(
        "python -m kvx -m hydra/launcher=kvx_submitit_local ...",
        "tests/cli/test_launchers.py::test_preset_runs_grouped_jobs",
        '("kvx_submitit_local", "hydra_submitit_launcher")',
    ),
    Covered(
        "python -m kvx -m hydra/launcher=kvx_ray ...",
        "tests/cli/test_launchers.py::test_preset_runs_grouped_jobs",
        '("kvx_ray", "hydra_ray_launcher")',
    ),
)

#: each registered command and the first scenario that runs it
RUN = {normal(step.doc): scenario for scenario in reversed(SCENARIOS) for step in scenario.steps}
COVERED_BY = {normal(entry.doc): entry for entry in COVERED}


def unaccounted(commands: list[Command]) -> list[str]:
    """Commands neither run, covered nor marked, each as ``page:line: command``."""
    return [c.where() for c in commands if normal(c.text) not in RUN | COVERED_BY and not c.needs]


def stale(commands: list[Command], registered: list[str]) -> list[str]:
    """Registered commands no page shows any more."""
    shown = {normal(c.text) for c in commands}
    return [doc for doc in registered if normal(doc) not in shown]


def source_of(by: str) -> str:
    """The text ``by`` names: a function's source with its decorators, or a whole file."""
    path, _, name = by.partition("::")
    text = (ROOT / path).read_text(encoding="utf-8")
    if not name:
        return text
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "\n".join(text.splitlines()[first - 1 : node.end_lineno])
    raise LookupError(f"{path} has no function or class {name!r}")


def broken_covers(entries: list[Covered]) -> list[str]:
    """Covering entries whose test is gone or no longer holds the documented command."""
    out = []
    for entry in entries:
        try:
            if entry.part not in source_of(entry.by):
                out.append(f"{entry.by} no longer holds {entry.part!r}")
        except (LookupError, FileNotFoundError):
            out.append(f"{entry.by}: no such test")
    return out


COMMANDS = inventory()


def test_every_documented_command_is_run_covered_or_marked() -> None:
    missing = unaccounted(COMMANDS)
    assert not missing, "neither run, covered nor marked:\n" + "\n".join(missing)


def test_every_registered_command_is_still_documented() -> None:
    assert stale(COMMANDS, [*RUN, *COVERED_BY]) == []


def test_every_covering_test_still_holds_its_command() -> None:
    assert broken_covers(list(COVERED)) == []


# --- the check can fail ---


def test_an_unmarked_command_fails_naming_its_page_and_line(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "Run `python -m kvx.nothing --here` now (needs: gpu).\n\n"
        "```bash\npython -m kvx.missing \\\n  --flag   # needs: hub\n"
        "python -m kvx.unmarked && python -m kvx.aggregate\n```\n"
    )
    found = page_commands(page)
    assert [(c.line, c.text, c.needs) for c in found] == [
        (1, "python -m kvx.nothing --here", ("gpu",)),
        (4, "python -m kvx.missing --flag", ("hub",)),
        (6, "python -m kvx.unmarked", ()),
        (6, "python -m kvx.aggregate", ()),
    ]
    assert unaccounted(found) == ["p.md:6: python -m kvx.unmarked"]


def test_a_stale_registry_entry_fails() -> None:
    assert stale(COMMANDS, [*RUN, "python -m kvx --renamed-flag"]) == ["python -m kvx --renamed-flag"]


def test_a_need_outside_the_vocabulary_fails(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("`python -m kvx reader=hf` (needs: gpus)\n")
    with pytest.raises(ValueError, match="unknown need 'gpus'"):
        page_commands(page)
    page.write_text("`python -m kvx task=x` (needs: data:Nowhere)\n")
    with pytest.raises(ValueError, match="unknown need 'data:Nowhere'"):
        page_commands(page)


def test_a_covering_test_that_lost_the_command_or_is_gone_fails() -> None:
    here = "tests/test_doc_commands.py::test_a_stale_registry_entry_fails"
    gone = "tests/test_doc_commands.py::test_that_does_not_exist"
    entries = [
        Covered("x", here, "--renamed-flag"),
        Covered("x", here, "kvx_nowhere"),
        Covered("x", gone, ""),
    ]
    assert broken_covers(entries) == [f"{here} no longer holds 'kvx_nowhere'", f"{gone}: no such test"]


def test_fragments_are_not_commands(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "`task.path=...`, `python -m`, `.venv/bin/python`, `lint-imports`, `KVX_LEAN_IMPORTS=0` are names;\n"
        "`KVX_X=1 python -m kvx.plugins` and `mlflow ui` are commands.\n\n"
        '```bash\nQ="reader=hf"\n# only a comment\npython -m kvx $Q <your reader>\n```\n'
    )
    found = page_commands(page)
    assert [c.text for c in found] == [
        "KVX_X=1 python -m kvx.plugins",
        "mlflow ui",
        "python -m kvx $Q <your reader>",
    ]
    assert argv(found[-1]) == ["python", "-m", "kvx", "reader=hf", "YOUR_READER"]


# --- kvx's own commands that are not run: composed and preflight-checked ---

#: what a marked need may stop the preflight at, once every key and value before it was checked
STOPS = {
    "data": ("no such file", "no such folder", "task.path is empty"),
    "files": ("no such file", "task.path is empty"),
    "bwrap": ("bubblewrap isolation is unavailable",),
    "api-key": ("that environment variable is not set",),
    "server": ("nothing answers at",),
    "plugin": ("Unknown compressor", ": no such option"),
}


def kvx_argv(command: Command) -> tuple[dict[str, str], list[str]] | None:
    """(environment, arguments) of a ``python -m kvx`` command, or None for another program."""
    words = argv(command)
    env = {}
    while words and "=" in words[0] and words[0].split("=")[0].isupper():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words[:3] not in (["python", "-m", "kvx"], [".venv/bin/python", "-m", "kvx"]):
        return None
    return env, [w for w in words[3:] if w != "..."]


PREFLIGHTED = [c for c in COMMANDS if normal(c.text) not in RUN and kvx_argv(c) is not None]


def preflight_problem(command: Command) -> str | None:
    """What kvx refuses in the command, unless it is where a marked need stops it (the data or server
    this machine lacks), or None. A run is planned (every cell checked, as before any real run:
    ``hydra.sweeper.plan=true``), ``--help``/``--cfg``/``--info`` run as typed; in the current folder,
    which it must leave empty."""
    import contextlib
    import io

    from kvx.cli.main import main

    _, args = kvx_argv(command)
    shows = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i"}
    if not shows & set(args):
        args = ["-m", *(a for a in args if a not in ("-m", "--multirun")), "hydra.sweeper.plan=true"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(args)
    if code == 0:
        return None
    said = err.getvalue()
    allowed = [stop for need in command.needs for stop in STOPS.get(need.partition(":")[0], ())]
    return None if any(stop in said for stop in allowed) else f"{command.where()}\n{said[-2000:]}"


@pytest.fixture()
def preflight_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty folder to preflight in, without a hosted API's key and offline (no hosted API or hub is
    called from here: a hub reader's tokenizer is not here, and the job would check with it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # no 60 s of retries per reader
    yield monkeypatch
    assert list(tmp_path.iterdir()) == []  # the preflight created nothing


@pytest.mark.slow  # each plans a whole documented command through the sweeper (a full-size grid: ~15 s)
@pytest.mark.parametrize("command", PREFLIGHTED, ids=lambda c: f"{c.page}:{c.line}")
def test_a_command_not_run_passes_the_preflight(command: Command, preflight_here: pytest.MonkeyPatch) -> None:
    for name, value in kvx_argv(command)[0].items():
        preflight_here.setenv(name, value)
    assert preflight_problem(command) is None


def test_the_preflight_check_catches_a_renamed_key_behind_any_need(
    preflight_here: pytest.MonkeyPatch,
) -> None:
    gpu = Command("p.md", 1, "python -m kvx -m press=snapkv press.window_sz=16 reader=hf", ("gpu",))
    assert "unknown key 'press.window_sz'" in preflight_problem(gpu)
    data = "python -m kvx +experiment=tpbench/main task.path=missing-sgd/train"
    assert preflight_problem(Command("p.md", 2, data, ("data:SGD",))) is None  # stops at the data
    assert "no such file" in preflight_problem(Command("p.md", 2, data, ("gpu",)))  # not a need it has
    renamed = Command("p.md", 3, f"{data} reader.modle_id=x", ("data:SGD",))
    assert "reader.modle_id" in preflight_problem(renamed)


# --- the documented commands, run ---


def run_step(step: Step, folder: Path) -> None:
    from kvx.stores.health import wait_healthy
    from kvx.stores.postgres import free_port
    from kvx.testing import cli

    port = str(free_port())
    text = step.doc
    for old, new in step.swap:
        text = text.replace(old, new.format(fixtures=FIXTURES, root=ROOT))
    words = [*shlex.split(text), *(a.format(port=port) for a in step.add)]
    env = kvx_env()
    while "=" in words[0] and words[0].split("=")[0].isupper():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    program, rest = words[0].removeprefix(".venv/bin/"), words[1:]
    if step.serves:
        server = subprocess.Popen(
            [str(BIN / program), *rest],
            cwd=ROOT if step.root else folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}{step.serves}", server, wait_s=120)
        finally:
            server.terminate()
            server.wait(timeout=30)
        return
    if program == "python" and rest[:1] == ["-m"] and rest[1] in ("kvx", "kvx.aggregate"):
        done = cli.run(rest[1], rest[2:], folder, env)
    elif program == "source":
        done = subprocess.run(
            ["bash", "-c", text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
    else:
        exe = sys.executable if program == "python" else str(BIN / program)
        done = subprocess.run(
            [exe, *rest],
            cwd=ROOT if step.root else folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, f"{step.doc}\n{(done.stdout + done.stderr)[-3000:]}"
    assert "Traceback" not in done.stderr, f"{step.doc}\n{done.stderr[-3000:]}"
    if step.expect:
        assert list(folder.glob(step.expect)), f"{step.doc}: nothing at {step.expect}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=[pytest.mark.xfail(strict=True, reason=s.xfail)] if s.xfail else [])
        for s in SCENARIOS
    ],
    ids=lambda s: s.name,
)
def test_the_documented_commands_run(scenario: Scenario, tmp_path: Path) -> None:
    for step in scenario.steps:
        run_step(step, tmp_path)


def test_a_mark_inside_inline_code_is_an_example_not_a_mark(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("Write `needs: gpu` beside `python -m kvx.x --y`.\n")
    assert unaccounted(page_commands(page)) == ["p.md:1: python -m kvx.x --y"]
