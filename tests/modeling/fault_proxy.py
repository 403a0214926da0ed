"""A fault-injecting proxy in front of a real OpenAI-compatible server, for kvx's served-reader tests.

``python tests/modeling/fault_proxy.py --upstream http://127.0.0.1:P/v1 --port Q --log FILE [--fault N:KIND]
[--die-after N]`` forwards every request to the upstream server and appends one JSON line per request
to FILE (path, Authorization header present, body). ``--fault N:KIND`` answers the N-th chat request
(1-based) itself instead: ``429`` (with ``Retry-After: 1``), ``500``, ``empty`` (a completion with no
choices) or ``html`` (a 200 whose body is not JSON). ``--die-after N`` kills the proxy (``os._exit``)
when the (N+1)-th chat request arrives, as a server killed mid-cell would be.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fault", action="append", default=[])
    parser.add_argument("--die-after", type=int, default=None)
    args = parser.parse_args()
    faults = {int(n): kind for n, kind in (f.split(":", 1) for f in args.fault)}
    lock = threading.Lock()
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, method: str, body: bytes | None) -> None:
            url = args.upstream.rstrip("/") + self.path.removeprefix("/v1")
            request = urllib.request.Request(url, data=body, method=method)
            request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    self._reply(response.status, response.read(), {"Content-Type": "application/json"})
            except urllib.error.HTTPError as exc:
                self._reply(exc.code, exc.read(), {"Content-Type": "application/json"})

        def do_GET(self) -> None:
            self._forward("GET", None)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                count[0] += 1
                n = count[0]
                with open(args.log, "a") as log:
                    entry = {"n": n, "path": self.path, "authorization": self.headers.get("Authorization")}
                    log.write(json.dumps({**entry, "body": json.loads(body or b"{}")}) + "\n")
            if args.die_after is not None and n > args.die_after:
                os._exit(1)
            kind = faults.get(n)
            error = {"error": {"message": f"injected {kind}", "type": "test"}}
            if kind == "429":
                self._reply(
                    429, json.dumps(error).encode(), {"Retry-After": "1", "Content-Type": "application/json"}
                )
            elif kind == "500":
                self._reply(500, json.dumps(error).encode(), {"Content-Type": "application/json"})
            elif kind == "empty":
                empty = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
                self._reply(200, json.dumps(empty).encode(), {"Content-Type": "application/json"})
            elif kind == "html":
                self._reply(200, b"<html>upstream hiccup</html>", {"Content-Type": "application/json"})
            else:
                self._forward("POST", body)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
