"""The bubblewrap mode holds without the Python guard and as root: each program here runs with the
guard removed, a stand-in for a program that undid it, so only the sandbox stands in its way."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from kvx.tasks import executor, sandbox
from kvx.tasks.executor import Executor, Limits, isolation_available

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor targets Linux")

FAST = Limits(wall_s=3, cpu_s=3, memory_bytes=512 * 2**20)
SYSTEM_PYTHON = "/usr/bin/python3"  # outside /root: runnable by nobody
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture()
def unguarded(monkeypatch):
    """A bubblewrap executor whose programs run without the guard (skips, saying why, without bwrap)."""
    available, reason = isolation_available("bubblewrap")
    if not available:
        pytest.skip(reason)
    monkeypatch.setattr(executor, "_GUARD", "")
    return Executor(True, FAST)


def _report(outcome) -> dict:
    assert outcome.status == "pass", outcome.stderr_tail
    return json.loads(outcome.stdout_tail)


def test_outermost_keeps_one_bind_per_subtree():
    paths = ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/lib32", "/opt/py/lib", "/opt/py/lib/python3.11"]
    assert sandbox._outermost(paths) == ("/opt/py/lib", "/usr/lib", "/usr/lib32")


def test_parents_are_listed_outermost_first():
    assert sandbox._parents(["/root/.pyenv/lib", "/kvx/work", "/kvx/program.py", "/usr"]) == [
        "/kvx",
        "/root",
        "/root/.pyenv",
    ]


def test_view_is_the_base_interpreter_not_the_host():
    view = sandbox.interpreter_view(sys.executable)
    assert view.executable == os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    assert any(view.executable == path or view.executable.startswith(path + "/") for path in view.read_only)
    assert not {"/", "/etc", "/tmp", "/home", os.path.expanduser("~")} & set(view.read_only)
    if sys.prefix != sys.base_prefix:  # a virtual environment: none of it is seen
        venv = os.path.realpath(sys.prefix)
        assert not [path for path in view.read_only if path == venv or path.startswith(venv + "/")]


def test_the_program_imports_from_the_standard_library_alone_and_has_exit(unguarded):
    outcome = unguarded.run("import json, sys\nprint(json.dumps(sys.path))\nexit(0)\n")
    path = _report(outcome)
    assert path and not [entry for entry in path if "-packages" in entry or entry in ("", ".")]


def test_without_bwrap_every_program_is_refused_naming_the_fix(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a refused executor started a process")

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    monkeypatch.setattr(executor, "_probe", executor._probe.__wrapped__)  # uncached
    monkeypatch.setattr(subprocess, "Popen", no_process)
    available, reason = isolation_available("bubblewrap")
    outcome = Executor(True, FAST).run("print(1)\n")
    assert not available and (outcome.status, outcome.reason, outcome.isolation) == ("refused", reason, ())
    assert "apt-get install bubblewrap" in reason and "task.isolation=process" in reason


def test_a_bwrap_older_than_0_8_is_refused_by_its_version(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bubblewrap 0.6.1'\n")
    fake.chmod(0o755)
    assert sandbox.version(str(fake)) == (0, 6, 1)
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: str(fake))
    monkeypatch.setattr(executor, "_probe", executor._probe.__wrapped__)  # uncached
    available, reason = isolation_available("bubblewrap")
    assert not available and f"{fake} reports 0.6.1, older than 0.8" in reason


def test_planted_files_outside_the_sandbox_cannot_be_read(unguarded, tmp_path):
    secret = uuid.uuid4().hex
    planted = tmp_path / "secret.txt"
    planted.write_text(secret)
    planted.chmod(0o644)
    home = pathlib.Path(os.path.expanduser("~")) / f".kvx-test-{secret}"
    home.write_text(secret)
    targets = [str(planted), str(home), "/etc/hostname", "/etc/passwd", str(ROOT / "pyproject.toml")]
    program = (
        "import json, os\nseen = {}\n"
        f"for path in {targets!r}:\n"
        "    try:\n        seen[path] = open(path).read()\n"
        "    except OSError as exc:\n        seen[path] = type(exc).__name__\n"
        "seen['/'] = sorted(os.listdir('/'))\nprint(json.dumps(seen))\n"
    )
    try:
        seen = _report(unguarded.run(program))
    finally:
        home.unlink()
    assert {path: seen[path] for path in targets} == dict.fromkeys(targets, "FileNotFoundError")
    assert seen["/"] == sorted(["dev", "proc", "kvx", *{p.strip("/").split("/")[0] for p in _bound()}])


def _bound() -> list[str]:
    view = sandbox.interpreter_view(sys.executable)
    return [*view.read_only, *(link for _, link in view.symlinks)]


def test_nothing_outside_the_work_directory_can_be_written(unguarded, tmp_path):
    stdlib = os.path.dirname(os.__file__)
    targets = [str(tmp_path / "escape.txt"), "/escape.txt", "/kvx/program.py", f"{stdlib}/os.py", "/tmp/x"]
    before = pathlib.Path(stdlib, "os.py").read_bytes()
    program = (
        "import json\nresult = {}\n"
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'a').write('x')\n        result[path] = 'written'\n"
        "    except OSError as exc:\n        result[path] = type(exc).__name__\n"
        "open('inside.txt', 'w').write('x')\nprint(json.dumps(result))\n"
    )
    result = _report(unguarded.run(program))
    assert "written" not in result.values() and set(result) == set(targets)
    assert not (tmp_path / "escape.txt").exists() and pathlib.Path(stdlib, "os.py").read_bytes() == before


def test_kvx_processes_are_invisible_and_the_uid_is_unprivileged(unguarded):
    program = (
        "import json, os\nresult = {'pid': os.getpid(), 'uid': os.getuid(),\n"
        "          'proc': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}\n"
        f"for pid in ({os.getpid()}, {os.getppid()}):\n"
        "    try:\n        os.kill(pid, 0)\n        result[str(pid)] = 'signalled'\n"
        "    except OSError as exc:\n        result[str(pid)] = type(exc).__name__\n"
        "print(json.dumps(result))\n"
    )
    outcome = unguarded.run(program)
    result = _report(outcome)
    assert result["proc"] == [1, result["pid"]]  # bwrap's reaper and the program: nothing of the host
    # a host pid that happens to be numbered like one inside the namespace (a reparented test run's
    # parent is pid 1, the reaper's number there) names that process instead: only the others count
    host = [pid for pid in (os.getpid(), os.getppid()) if pid not in result["proc"]]
    assert host and {result[str(pid)] for pid in host} == {"ProcessLookupError"}
    if os.geteuid() == 0:
        assert result["uid"] == 65534 and "uid:nobody" in outcome.isolation
    else:
        assert "userns" in outcome.isolation
    assert {"mountns", "pidns", "netns", "ipcns", "utsns", "guard"} <= set(outcome.isolation)


def test_no_socket_reaches_a_listener_on_the_host(unguarded):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        program = (
            f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)\n"
        )
        outcome = unguarded.run(program)
        assert outcome.status == "fail" and "ConnectionRefusedError" in outcome.reason
        with pytest.raises(BlockingIOError):
            server.accept()


def test_fork_bomb_stops_at_the_process_limit(unguarded):
    program = (
        "import os, time\nforks = 0\nwhile True:\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    forks += 1\nprint(forks, os.readlink('/proc/self/ns/pid'), flush=True)\ntime.sleep(60)\n"
    )
    limits = Limits(wall_s=1, cpu_s=5, memory_bytes=512 * 2**20, processes=16)
    outcome = Executor(True, limits).run(program)
    forks, namespace = outcome.stdout_tail.split()
    # the program itself (and, as a non-root user, bwrap's reaper; as root, any other process of
    # nobody's) counts towards the 16
    assert outcome.status == "timeout" and 0 < int(forks) < 16
    _assert_namespace_empties(namespace)


def test_a_program_that_leaves_its_session_is_still_killed_on_time(unguarded, clock_slack_s):
    program = (
        "import os, time\nos.setsid()\nif os.fork() == 0:\n    os.setsid()\n"
        "print(os.readlink('/proc/self/ns/pid'), flush=True)\ntime.sleep(60)\n"
    )
    outcome = Executor(True, Limits(wall_s=1, cpu_s=5, memory_bytes=512 * 2**20)).run(program)
    assert outcome.status == "timeout" and outcome.seconds < 1 + clock_slack_s  # not the 60 s it sleeps
    _assert_namespace_empties(outcome.stdout_tail.split()[0])


def _assert_namespace_empties(namespace: str) -> None:
    deadline = time.monotonic() + 2  # SIGKILLed processes take a moment to go
    while _in_namespace(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_namespace(namespace) == []


def _in_namespace(namespace: str) -> list[str]:
    """Live processes (zombies, which the host's init reaps in its own time, excluded) of a namespace."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            if os.readlink(f"/proc/{entry}/ns/pid") == namespace and state != "Z":
                found.append(entry)
        except OSError:
            continue
    return found


def test_an_exit_status_above_128_reads_as_a_signal(unguarded):
    """bwrap reports a death by signal N as exit status 128 + N, as a shell does (documented)."""
    outcome = unguarded.run("import os\nos._exit(128 + 6)\n")
    assert (outcome.status, outcome.reason, outcome.exit_code) == ("crash", "killed by SIGABRT", None)
    assert unguarded.run("import os\nos._exit(3)\n").exit_code == 3


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="becoming nobody needs root; as a user, the suite itself runs so"
)
def test_as_a_normal_user_the_sandbox_uses_a_user_namespace():
    """kvx run by nobody, with Debian's interpreter: bwrap unprivileged, mapping nobody's own uid."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        planted = pathlib.Path(folder, "secret.txt")
        planted.write_text("secret")
        planted.chmod(0o644)  # nobody reads it on the host (the driver checks), not in the sandbox
        result = _run_as_nobody(str(planted))
    assert result["host_read"] == "secret"
    assert result["status"] == "pass", result["stderr"]
    assert "userns" in result["isolation"] and "uid:nobody" not in result["isolation"]
    assert json.loads(result["stdout"]) == {"uid": 65534, "read": "FileNotFoundError", "proc": 2}


def _run_as_nobody(planted: str) -> dict:
    program = (
        f"import json, os\ntry:\n    open({planted!r}).read()\n    read = 'read'\nexcept OSError as exc:\n"
        "    read = type(exc).__name__\nproc = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(json.dumps({'uid': os.getuid(), 'read': read, 'proc': len(proc)}))\n"
    )
    driver = (
        "import json, sys\nfrom kvx.tasks.executor import Executor, Limits, isolation_available\n"
        f"host_read = open({planted!r}).read()\n"
        f"available, reason = isolation_available('bubblewrap', {SYSTEM_PYTHON!r})\n"
        "if not available:\n    print(json.dumps({'skip': reason}))\n    sys.exit(0)\n"
        f"outcome = Executor(True, Limits(wall_s=5), python={SYSTEM_PYTHON!r}).run({program!r})\n"
        "print(json.dumps({'status': outcome.status, 'isolation': outcome.isolation, 'host_read': host_read,"
        " 'stdout': outcome.stdout_tail, 'stderr': outcome.stderr_tail}))\n"
    )
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", driver],
        env={"PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"},
        cwd="/",
        preexec_fn=_as_nobody,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "ModuleNotFoundError" in done.stderr:
        pytest.skip(
            f"nobody cannot import kvx from {ROOT} with {SYSTEM_PYTHON}: {done.stderr.splitlines()[-1]}"
        )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    if "skip" in result:
        pytest.skip(f"bubblewrap does not work for an unprivileged user here: {result['skip']}")
    return result
