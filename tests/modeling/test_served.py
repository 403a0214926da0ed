"""Served readers (``reader=openai``) against a real OpenAI-compatible server on loopback.

The server is Hugging Face's own ``transformers serve`` (FastAPI + uvicorn, installed with kvx's
dependencies), serving the tiny random Llama saved to a folder. Faults come from
``tests/modeling/fault_proxy.py``, a separate process in front of it that answers chosen requests itself (429
with Retry-After, 500, a completion without choices, a body that is not JSON) or dies mid-cell.

``transformers serve`` 5.2 corrupts its loaded model when it decodes two requests at once (verified:
answers turn to noise and stay so), so these tests send one request at a time
(``reader.max_concurrency=1``); concurrency itself is tested on the client (``Endpoint``) and measured
against llama.cpp's server in ``benchmarks/bench_served.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvx.modeling.chat import ChatRequest
from kvx.modeling.endpoint import Endpoint, EndpointError, RateLimit, ResponseCache, public_url
from kvx.testing.cli import SOLO_LEASE, aggregate_strict, kvx_env
from kvx.testing.stores import ledger, store

pytest.importorskip("fastapi", reason="transformers serve needs fastapi and uvicorn")
pytest.importorskip("uvicorn", reason="transformers serve needs fastapi and uvicorn")

KEY_VAR, KEY = "KVX_TEST_SERVED_KEY", "sk-test-5f1e2d3c4b5a69788796a5b4c3d2e1f0"
PROXY = Path(__file__).with_name("fault_proxy.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(url: str, process: subprocess.Popen, timeout_s: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError(f"{url}: nothing answered within {timeout_s:g} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``transformers serve`` on loopback with the tiny Llama in a folder: (base_url, model folder)."""
    from kvx.readers.tiny import TinyLlama

    folder = tmp_path_factory.mktemp("served-model")
    model, tok, _ = TinyLlama().load_model()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    port = free_port()
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"}
    serve = Path(sys.executable).with_name("transformers")
    args = [str(serve), "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    log = open(folder / "server.log", "w")  # noqa: SIM115 - closed at teardown
    process = subprocess.Popen(
        [*args, "--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until(base + "/models", process)
        Endpoint(base, str(folder), max_retries=0).complete([ChatRequest((("user", "hi"),), 2)])  # loads it
        yield base, str(folder)
    finally:
        process.kill()
        process.wait()
        log.close()


class Proxy:
    """tests/modeling/fault_proxy.py in its own process; ``requests()`` reads what it logged."""

    def __init__(
        self, upstream: str, folder: Path, *faults: str, die_after: int | None = None, port: int | None = None
    ) -> None:
        self.port, self.log = port or free_port(), folder / f"proxy-{time.monotonic_ns()}.jsonl"
        args = [
            sys.executable,
            str(PROXY),
            "--upstream",
            upstream,
            "--port",
            str(self.port),
            "--log",
            str(self.log),
        ]
        args += [a for f in faults for a in ("--fault", f)]
        if die_after is not None:
            args += ["--die-after", str(die_after)]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "ready"
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def chat(n: int) -> list[ChatRequest]:
    return [
        ChatRequest((("system", "Answer briefly."), ("user", f"Question {i}: what is {i} + {i}?")), 4)
        for i in range(n)
    ]


# --- the client, against the real server through the proxy ---


@pytest.mark.slow
def test_429_with_retry_after_is_waited_out_and_counted(server, tmp_path) -> None:
    base, model = server
    proxy = Proxy(base, tmp_path, "1:429")
    try:
        endpoint = Endpoint(proxy.url, model, max_concurrency=1)
        started = time.monotonic()
        (reply,) = endpoint.complete(chat(1), progress=False)
        assert time.monotonic() - started >= 1.0  # the server's Retry-After: 1
        assert not isinstance(reply, Exception), reply
        assert reply.served["retries"] == 1 and not reply.served["cached"]
        assert len(proxy.requests()) == 2
    finally:
        proxy.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["empty", "html", "500"])
def test_a_bad_reply_is_an_error_with_the_servers_message_and_the_rest_go_on(server, tmp_path, kind) -> None:
    base, model = server
    retries = 1 if kind == "500" else 0  # a 500 is retried: its retry fails too
    proxy = Proxy(base, tmp_path, *(f"{n}:{kind}" for n in range(1, retries + 2)))
    try:
        endpoint = Endpoint(proxy.url, model, max_concurrency=1, max_retries=retries)
        first, second = endpoint.complete(chat(2), progress=False)
        assert isinstance(first, EndpointError)
        expected = {
            "empty": "malformed reply: no choices",
            "html": "malformed reply",
            "500": "answered 500: injected 500",
        }
        assert expected[kind] in str(first), str(first)
        assert public_url(proxy.url) in str(first)
        assert not isinstance(second, Exception), second
        assert len(proxy.requests()) == retries + 2
    finally:
        proxy.stop()


@pytest.mark.slow
def test_cache_replays_an_answer_without_a_request_and_keys_the_exact_request(server, tmp_path) -> None:
    base, model = server
    proxy = Proxy(base, tmp_path)
    try:
        cache = ResponseCache(tmp_path / "responses")
        endpoint = Endpoint(proxy.url, model, cache=cache, counter=("chars", len))
        first = endpoint.complete(chat(3), progress=False)
        again = Endpoint(proxy.url, model, cache=cache, counter=("chars", len)).complete(
            chat(3), progress=False
        )
        assert len(proxy.requests()) == 3
        assert [r.text for r in again] == [r.text for r in first]
        assert all(r.served["cached"] for r in again) and not any(r.served["cached"] for r in first)
        # transformers serve reports no usage: the tokens are counted, and say so
        assert first[0].served["tokens_from"] == "counted:chars"
        assert first[0].served["prompt_tokens"] == len("Answer briefly.") + len("Question 0: what is 0 + 0?")
        seeded = Endpoint(proxy.url, model, cache=cache, seed=7).complete(chat(1), progress=False)
        assert len(proxy.requests()) == 4 and not seeded[0].served["cached"]  # another request: asked
    finally:
        proxy.stop()


def test_concurrency_keeps_order_and_sends_at_most_max_concurrency(tmp_path) -> None:
    """The client's own concurrency, against a local server that records overlap (no model)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    active, peak, lock = [0], [0], threading.Lock()

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.2)
            with lock:
                active[0] -= 1
            text = body["messages"][-1]["content"]
            message = {"role": "assistant", "content": text}
            reply = {
                "id": "1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        replies = Endpoint(url, "m", max_concurrency=3).complete(chat(9), progress=False)
        assert [r.text for r in replies] == [f"Question {i}: what is {i} + {i}?" for i in range(9)]
        assert peak[0] == 3
        assert replies[0].served["tokens_from"] == "server" and replies[0].served["prompt_tokens"] == 3
    finally:
        httpd.shutdown()


def test_rate_limit_by_hand() -> None:
    """2 requests / minute and 100 tokens / minute, on a fake clock: the third request waits until the
    first leaves the window (t=60), a 90-token one until the window holds <= 10 tokens."""
    now = [0.0]
    limit = RateLimit(2, 100, clock=lambda: now[0])

    def sleep(s: float) -> None:
        now[0] += s

    assert limit.wait(10, sleep) == 0.0  # t=0
    now[0] = 5.0
    assert limit.wait(10, sleep) == 0.0  # t=5
    assert limit.wait(10, sleep) == pytest.approx(55.0)  # until t=60, when the t=0 request leaves
    now[0] = 70.0  # the t=5 request has left; t=60 (10 tokens) is in the window
    assert limit.wait(90, sleep) == 0.0  # 10 + 90 <= 100
    now[0] = 70.0  # window: t=60 (10), t=70 (90)
    assert limit.wait(1, sleep) == pytest.approx(50.0)  # 2 requests: until t=120, when t=60 leaves
    tokens = RateLimit(None, 100, clock=lambda: now[0])
    now[0] = 0.0
    assert tokens.wait(60, sleep) == 0.0
    assert tokens.wait(50, sleep) == pytest.approx(60.0)  # 60 + 50 > 100 until the first leaves
    assert tokens.wait(500, sleep) == pytest.approx(60.0)  # larger than the budget: alone, in an empty minute


def test_public_url_never_shows_credentials() -> None:
    assert (
        public_url("https://user:sk-secret@api.example.com:8443/v1/?key=sk-x#f")
        == "https://api.example.com:8443/v1"
    )


# --- the CLI: a sweep, a server that dies mid-cell, the cache, the key, the preflight ---


def kvx(folder: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m kvx ARGS`` (a prestarted process: the key's variable is read at run time)."""
    from kvx.testing import cli

    return cli.run("kvx", list(args), folder, env)


def served_args(url: str, model: str) -> list[str]:
    return [
        "reader=openai",
        f"reader.base_url={url}",
        f"reader.model={model}",
        f"reader.tokenizer={model}",
        "reader.max_concurrency=1",
        "reader.max_retries=1",
        f"reader.api_key_env={KEY_VAR}",
    ]


def cell_records(folder: Path) -> dict[str, list[dict]]:
    """Records of each FINISHED cell run, by the run's press choice."""
    client, _ = store(folder)
    out = {}
    for run in ledger(folder)["cell"]:
        path = client.download_artifacts(
            run.info.run_id, "records.jsonl", str(folder / "dl" / run.info.run_id)
        )
        out[run.data.params["choices.press"]] = [
            json.loads(line) for line in Path(path).read_text().splitlines()
        ]
    return out


@pytest.mark.slow
def test_a_served_sweep_survives_its_server_dying_reuses_every_answer_and_never_writes_the_key(
    server, tmp_path, blank_store
) -> None:
    """TPBench P1 with a turn selector (a text transform) and a KV press, through a proxy that dies
    after 3 requests: the rest are error records; a rerun finishes the cell asking only for the
    missing answers; a forced rerun asks for nothing; the aggregate finds 0 problems; the key is in no
    file of the outputs folder, and reached the server."""
    base, model = server
    blank_store(tmp_path)
    env = kvx_env(**{KEY_VAR: KEY})
    port = free_port()
    sweep = ["-m", "task=tpbench_p1", "turn_selector=recency", "turn_fraction=0.3", "press=none,snapkv"]
    sweep += ["n_sources=3", "max_new_tokens=6", "diagnostics=[decoding]", "progress=false", *SOLO_LEASE]
    dying = Proxy(base, tmp_path, die_after=3, port=port)
    done = kvx(tmp_path, *sweep, *served_args(dying.url, model), env=env)
    dying.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    first = cell_records(tmp_path)
    assert {r["status"] for r in first["snapkv"]} == {"unsupported"}
    assert "press snapkv compresses the KV cache" in first["snapkv"][0]["reason"]
    errors = [r for r in first["none"] if r["status"] == "error"]
    assert errors and all("could not be reached" in r["reason"] for r in errors)

    proxy = Proxy(base, tmp_path, port=port)  # the server is back, at the same address
    try:
        done = kvx(tmp_path, *sweep, *served_args(proxy.url, model), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        asked = len(proxy.requests())
        records = cell_records(tmp_path)["none"]
        assert [r["status"] for r in records] == ["supported"] * 3
        assert 0 < asked < 6  # only what the dead server never answered (3 controls + 3 selected)
        full, compressed = records[0]["full"], records[0]["compressed"]
        for served in (full["served"], compressed["served"]):
            assert served["endpoint"] == public_url(proxy.url) and served["model"] == model
            assert served["served_model"].startswith(model)  # what the server says answered
            assert served["tokens_from"] == f"counted:{model}" and served["prompt_tokens"] > 0
        assert full["token_ids"] is None and records[0]["transform"]["name"].startswith("turns:recency")
        assert records[0]["diagnostics"]["decoding"]["status"] == "not_applicable"
        aggregate_strict(tmp_path)

        done = kvx(tmp_path, *sweep, "force=true", *served_args(proxy.url, model), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(proxy.requests()) == asked  # every answer from the response cache or the control store
        assert all(r["authorization"] == f"Bearer {KEY}" for r in proxy.requests())
    finally:
        proxy.stop()
    leaked = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.name.startswith("proxy-") and KEY.encode() in p.read_bytes()
    ]
    assert leaked == []
    client, exp = store(tmp_path)
    runs = client.search_runs([exp])
    assert all(KEY not in json.dumps([r.data.params, r.data.tags]) for r in runs)
    assert all(r.data.params.get("reader.fields.api_key_env") is None for r in runs)  # a NEVER field


@pytest.mark.slow
def test_a_server_down_or_a_missing_key_fails_in_one_line_before_anything_loads(tmp_path) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    done = kvx(tmp_path, "reader=openai", f"reader.base_url=http://127.0.0.1:{port}/v1", "reader.model=m")
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 60
    (line,) = done.stderr.strip().splitlines()
    assert (
        line.startswith(f"kvx: reader.base_url=http://127.0.0.1:{port}/v1: nothing answers")
        and "start the server" in line
    )
    assert not (tmp_path / "outputs").exists()
    env = {k: v for k, v in os.environ.items() if k != KEY_VAR}
    done = kvx(tmp_path, "reader=openai", "reader.model=m", f"reader.api_key_env={KEY_VAR}", env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"kvx: reader.api_key_env={KEY_VAR}: that environment variable is not set (export it, or set "
        "reader.api_key_env=null for a server that needs no key)"
    )


@pytest.mark.slow
def test_a_panel_of_an_in_process_and_a_served_reader_passes_the_fixed_artifact_audit(
    server, tmp_path, blank_store
) -> None:
    from kvx.testing.rag_panel import audit_panel, hotpot_file

    base, model = server
    blank_store(tmp_path)
    task = [
        "-m",
        "task=hotpotqa",
        f"task.path={hotpot_file(tmp_path)}",
        "transform=bm25_top_k",
        "transform.k=3",
    ]
    common = [
        "press=none",
        "n_sources=4",
        "max_new_tokens=4",
        "diagnostics=[]",
        "progress=false",
        *SOLO_LEASE,
    ]
    for reader in (["reader=tiny"], served_args(base, model)):
        done = kvx(tmp_path, *task, *common, *reader, env=kvx_env(**{KEY_VAR: KEY}))
        assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((tmp_path / "outputs" / "artifacts").rglob("*.json"))) == 4  # once per row
    panel = audit_panel(tmp_path, tmp_path / "agg")
    assert (panel["n_readers"] == 2).all() and (panel["n_rows"] == 4).all()
    assert (panel["artifact_check"] == "identical text artifact").all()


@pytest.mark.slow
def test_the_summary_transform_compresses_through_a_served_model(server) -> None:
    from kvx.core.source import Segment, Source
    from kvx.transforms.summary import Summary

    base, model = server
    source = Source.from_segments(
        [
            Segment(f"p{i}", text, role="passage")
            for i, text in enumerate(["Paris is in France.", "Rome is in Italy."])
        ],
        "\n\n",
        id="s",
        question="Where is Paris?",
        answers=("France",),
    )
    summary = Summary(reader="openai", max_new_tokens=8, reader_fields={"base_url": base, "model": model})
    summary.validate()
    (segment,) = summary.apply(source)
    assert segment.role == "passage" and segment.title == "Summary"
    assert segment.text == summary.apply(source)[0].text  # greedy on the server: the same summary


def test_a_cached_reply_holding_a_lone_surrogate_reads_back_the_same(tmp_path):
    """A server's JSON may escape half an emoji (``\\ud83d``): the reply is cached and comes back equal,
    from an ASCII file whatever the locale's encoding."""
    cache = ResponseCache(tmp_path / "responses")
    reply = {"choices": [{"message": {"content": "ok \ud83d and é \x00"}}]}
    cache.put("ab" * 32, reply)
    assert cache.get("ab" * 32) == reply
    assert next((tmp_path / "responses").rglob("*.json")).read_bytes().isascii()
