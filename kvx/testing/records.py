"""Records as tests compare them."""

from __future__ import annotations


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
