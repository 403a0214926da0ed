"""``main(argv) -> int`` of ``python -m kvx.plugins``, ``kvx.server``, ``kvx.aggregate`` and
``kvx.importers``, called in-process: argparse's exits and every user error come back as a return
code (one line on stderr), never as a raised SystemExit; and how :func:`kvx.core.commands.run` maps
the ways a command ends."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import kvx.core.registry as registry_mod
from kvx.core import commands
from kvx.core.errors import ConfigError
from kvx.core.registry import GROUPS, Registry, RegistryError


def _mains() -> dict[str, Callable[[list[str]], int]]:
    from kvx import plugins, server
    from kvx.aggregate import __main__ as aggregate
    from kvx.importers import __main__ as importers

    return {
        "kvx.plugins": plugins.main,
        "kvx.server": server.main,
        "kvx.aggregate": aggregate.main,
        "kvx.importers": importers.main,
    }


@pytest.mark.parametrize("prog", ["kvx.plugins", "kvx.server", "kvx.aggregate", "kvx.importers"])
def test_help_and_a_bad_flag_are_returned_not_raised(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    main = _mains()[prog]
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(("usage: python -m ", "``python -m kvx.importers")), out[:200]
    args = (
        ["kvdiagnosis", "p", "--out", "o", "--no-such-flag"]
        if prog == "kvx.importers"
        else ["--no-such-flag"]
    )
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--no-such-flag" in err and "Traceback" not in err


def test_importers_say_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    main = _mains()["kvx.importers"]
    assert main([]) == 2
    assert main(["kvdiagnosiss", "x"]) == 2
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("kvx.importers: give an importer: ")
    assert second.startswith("kvx.importers: unknown importer 'kvdiagnosiss'") and "did you mean" in second


def test_server_refuses_an_outputs_dir_it_cannot_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line and 2, before any server starts (``subprocess.Popen`` would fail this test)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "file").write_text("")
    monkeypatch.setattr("subprocess.Popen", None)
    assert _mains()["kvx.server"](["--outputs-dir", str(tmp_path / "file" / "out")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kvx.server: cannot make ") and "Not a directory" in line, line


def test_aggregate_says_a_missing_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _mains()["kvx.aggregate"](["--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--quiet"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kvx.aggregate: ") and "no such store" in line


# ----------------------------------------------------------------------------- kvx.plugins


@pytest.fixture()
def fake_registries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every group empty but the compressors: a module nobody imported yet and a broken entry."""
    name = f"kvx_test_plugins_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import EntryPoint

    group = GROUPS["compressor"]
    entries = [
        registry_mod.Entry("thing", group, "kvx-test", "1.0", EntryPoint("thing", f"{name}:Thing", group)),
        registry_mod.Entry(
            "gone", group, "kvx-test", "1.0", EntryPoint("gone", "kvx_no_such_mod_q:X", group)
        ),
    ]
    fake = {kind: Registry(kind, g, entries if kind == "compressor" else []) for kind, g in GROUPS.items()}
    monkeypatch.setattr(registry_mod, "_REGISTRIES", fake)
    yield name
    sys.modules.pop(name, None)


def test_plugins_lists_without_importing_and_check_imports(
    fake_registries: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvx import plugins

    assert plugins.main([]) == 0
    out = capsys.readouterr().out
    assert f"  thing  kvx-test 1.0  {fake_registries}:Thing\n" in out
    assert "  gone   kvx-test 1.0  kvx_no_such_mod_q:X\n" in out
    assert out.rstrip().endswith(plugins.CHECK_HINT) and "python -m kvx.plugins --check" in plugins.CHECK_HINT
    assert fake_registries not in sys.modules, "the plain listing imported a plugin module"
    assert plugins.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "  thing  kvx-test 1.0  ok\n" in out and fake_registries in sys.modules
    assert "  gone   kvx-test 1.0  broken: ModuleNotFoundError: " in out
    assert plugins.CHECK_HINT not in out


# ----------------------------------------------------------------------------- commands.run


def _ends(how: BaseException | int) -> Callable[[list[str]], int]:
    def body(argv: list[str]) -> int:
        if isinstance(how, BaseException):
            raise how
        return how

    return body


@pytest.mark.parametrize(
    ("how", "code", "err"),
    [
        (0, 0, ""),
        (3, 3, ""),
        (SystemExit(), 0, ""),
        (SystemExit(2), 2, ""),
        (SystemExit("went wrong"), 1, "went wrong\n"),
        (ConfigError("ratio=2 is out of range"), 2, "kvx.x: ratio=2 is out of range\n"),
        (RegistryError("Unknown task 'q'."), 2, "kvx.x: Unknown task 'q'.\n"),
        (commands.Failed("nothing answered", 1), 1, "kvx.x: nothing answered\n"),
        (commands.Failed("the gate failed", 3), 3, "kvx.x: the gate failed\n"),
        (LookupError("no sweep 'abc'"), 2, "kvx.x: no sweep 'abc'\n"),
        (KeyboardInterrupt(), 130, "\nkvx.x: interrupted; nothing written\n"),
    ],
)
def test_run_maps_each_ending_to_a_code(how, code: int, err: str, capsys: pytest.CaptureFixture[str]) -> None:
    got = commands.run(
        "kvx.x", _ends(how), [], user_errors=(LookupError,), interrupted="interrupted; nothing written"
    )
    assert got == code and capsys.readouterr().err == err


def test_run_lets_what_is_not_a_user_error_through() -> None:
    with pytest.raises(KeyboardInterrupt):  # no message given: the command handles Ctrl-C itself
        commands.run("kvx.x", _ends(KeyboardInterrupt()), [])
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        commands.run("kvx.x", _ends(ZeroDivisionError("x")), [])
    with pytest.raises(BrokenPipeError):  # another pipe than stdout (which is open): not hidden
        commands.run("kvx.x", _ends(BrokenPipeError()), [])


def test_run_reads_the_process_argv_when_given_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["prog", "a", "b"])
    seen: list[list[str]] = []
    assert commands.run("kvx.x", lambda argv: seen.append(argv) or 0, None) == 0
    assert seen == [["a", "b"]]
