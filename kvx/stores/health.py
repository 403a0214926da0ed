"""Waiting for a server kvx starts (the tracking server, a test's or benchmark's helper) to answer."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request


def wait_healthy(
    url: str, process: subprocess.Popen | None = None, wait_s: float = 120.0, any_status: bool = False
) -> None:
    """Poll ``url`` until it answers 200 (any HTTP status with ``any_status``: a server whose root
    is not a page); raise ``RuntimeError`` as soon as ``process`` exits, or after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError:
            if any_status:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"nothing answered at {url} within {wait_s:g} s")
