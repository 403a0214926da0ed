"""Every analysis option of ``python -m kvx.aggregate``, declared once: its field, default, flag and help.

``kvx.aggregate.__main__`` builds its command-line flags from these fields (:func:`flags`) and the
options from the parsed flags (:func:`from_args`); tables read them as their ``options`` need.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvx.aggregate.stats.upgrades import TIE_RULES

#: ragscale's defaults (release ``run.retention_alert_threshold``, ``dataset.minimum_slice_rows``)
RETENTION_ALERT = 0.75
MIN_SLICE_ROWS = 10
#: kv-exec-bench's threshold framing: an absolute drop of 10 points marks a metric's onset
ONSET_DROP = 0.10
#: the argument group of ragscale's release gate and slices
GATE = "release gate and slices (ragscale)"
#: the endpoint retention interval (ragscale A.5, B.1): family-by-row draws re-selecting the endpoints
#: (Tables 2-3), or a row bootstrap of the fixed full-sample pair
INTERVALS = ("family-row", "row")


def _flag(flag: str, help: str, group: str = "analysis", **argparse_kw: Any) -> dict[str, Any]:
    return {"flag": flag, "help": help, "group": group, "argparse": argparse_kw}


def _pairs(text: str) -> tuple[str, str]:
    return tuple(text.split(":"))  # type: ignore[return-value]


@dataclass
class Options:
    """What every table computes with; a field with a ``flag`` is a command-line option."""

    n_splits: int = field(default=5000, metadata=_flag("--splits", "row splits for excess flips"))
    n_boot: int = field(default=2000, metadata=_flag("--boot", "bootstrap draws per interval"))
    seed: int = field(default=20260821, metadata=_flag("--seed", "seed of every resampling (ragscale's)"))
    #: declared reader upgrades a -> b
    pairs: list[tuple[str, str]] = field(
        default_factory=list,
        metadata=_flag(
            "--pair", "declared reader upgrade for the audit (repeatable)", form="READER_A:READER_B"
        ),
    )
    #: evidence swaps audited like compressors: raw = condition a's answers, compressed = b's
    swaps: list[tuple[str, str]] = field(
        default_factory=list,
        metadata=_flag(
            "--swap",
            "audit evidence condition B against A (e.g. a retriever swap bm25_top_k:dense_top_k)",
            form="A:B",
        ),
    )
    #: reader -> model family, over the records'
    families: dict[str, str] = field(
        default_factory=dict,
        metadata=_flag(
            "--family",
            "the reader's model family for family-by-row intervals (repeatable)",
            form="READER=FAMILY",
        ),
    )
    export: Path | None = None  # also write every batch as a record directory (--export-records)
    progress: bool = True  # progress bars (--quiet turns them off)
    workers: int | None = None  # processes reading batches and drawing figures (None: every CPU)
    cases: int = field(default=1, metadata=_flag("--cases", "KVDiagnosis paired cases per task and category"))
    case_sources: list[str] = field(
        default_factory=list,
        metadata=_flag(
            "--case", "also show the source's C→W rows as cases (repeatable)", metavar="SOURCE_ID"
        ),
    )
    onset_drop: float = field(
        default=ONSET_DROP,
        metadata=_flag(
            "--onset-drop",
            "absolute drop of an answer metric below FullCache that marks its degradation onset",
        ),
    )
    # reader-upgrade audit sensitivities (ragscale A.5, B.1): the defaults are the paper's
    min_gap: float = field(
        default=0.05,
        metadata=_flag(
            "--min-gap",
            "raw upgrade (score fraction) a retention ratio and an excess-flip pair need",
        ),
    )
    mcnemar_filter: bool = field(
        default=False,
        metadata=_flag(
            "--mcnemar-filter",
            "excess flips only on pairs separated by exact McNemar p<.05 on the selection half",
            action="store_true",
        ),
    )
    ties: str = field(
        default="not-reversal",
        metadata=_flag(
            "--ties",
            "a scoring-half tie in the excess-flip replay: not a reversal (default), excluded from the "
            "eligible pairs, or a raw tie counted as an adverse raw reversal",
            choices=TIE_RULES,
        ),
    )
    interval: str = field(
        default="family-row",
        metadata=_flag(
            "--interval",
            "endpoint retention interval: family-by-row draws re-selecting the endpoints (default) or "
            "a row bootstrap of the fixed pair",
            choices=INTERVALS,
        ),
    )
    retention_alert: float = RETENTION_ALERT  # --retention-alert (the release gate's flag, in __main__)
    slice_by: list[str] | None = None  # row hints the audit is sliced by (--slice-by; None: a scores file's)
    min_slice_rows: int = field(
        default=MIN_SLICE_ROWS,
        metadata=_flag(
            "--min-slice-rows",
            "a slice value with fewer rows is not reported",
            group=GATE,
        ),
    )
    null_draws: int = field(
        default=200, metadata=_flag("--null-draws", "draws of each audit null (ragscale A.6)")
    )
    null_splits: int = field(default=250, metadata=_flag("--null-splits", "row splits per audit null draw"))
    only: list[str] = field(
        default_factory=list,
        metadata=_flag(
            "--only",
            "build only these tables, sections or families (comma-separated; see --list) and what they need",
            group="selection",
            metavar="NAMES",
        ),
    )
    skip: list[str] = field(
        default_factory=list,
        metadata=_flag(
            "--skip",
            "leave out these tables, sections or families (comma-separated)",
            group="selection",
            metavar="NAMES",
        ),
    )


def comma_list(text: str) -> list[str]:
    """``a, b,,c`` as ``["a", "b", "c"]``: the names a comma-separated flag gives."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _comma_lists(items: list[str]) -> list[str]:
    return [name for item in items for name in comma_list(item)]


#: how a repeatable flag's texts become its field's value
_PARSE: dict[str, Callable[[list[str]], Any]] = {
    "pairs": lambda items: [_pairs(p) for p in items],
    "swaps": lambda items: [_pairs(p) for p in items],
    "families": lambda items: dict(item.split("=") for item in items),
    "case_sources": list,
    "only": _comma_lists,
    "skip": _comma_lists,
}


def flags(parser: argparse.ArgumentParser, groups: dict[str, Any] | None = None) -> None:
    """Add every option with a flag to ``parser``, in the argument group its ``group`` names (``groups``:
    those made already; the others are made here), its default in the help."""
    groups = {"analysis": parser, **(groups or {})}
    for f in fields(Options):
        meta = f.metadata
        if "flag" not in meta:
            continue
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(meta["group"])
        kw = {k: v for k, v in meta["argparse"].items() if k != "form"}
        if kw.get("action") != "store_true" and "choices" not in kw:  # choices show themselves
            kw.setdefault(
                "metavar", meta["argparse"].get("form", meta["flag"].lstrip("-").upper().replace("-", "_"))
            )
        if f.name in _PARSE:
            kw |= {"action": "append", "default": []}
        elif kw.get("action") != "store_true":
            shown = f"{f.default:g}" if isinstance(f.default, float) else f"{f.default}"
            described = meta["help"] if "choices" in kw else f"{meta['help']} (default {shown})"
            kw |= {"type": type(f.default), "default": f.default, "help": described}
        groups[meta["group"]].add_argument(meta["flag"], dest=f.name, **({"help": meta["help"]} | kw))


def counts() -> list[tuple[str, str]]:
    """(flag, field) of each option that counts something, so must be a positive integer."""
    return [
        (f.metadata["flag"], f.name)
        for f in fields(Options)
        if "flag" in f.metadata and isinstance(f.default, int) and not isinstance(f.default, bool)
    ]


def forms() -> list[tuple[str, str, str]]:
    """(flag, field, form) of each repeatable option whose values take a form, e.g. ``A:B``."""
    return [
        (f.metadata["flag"], f.name, f.metadata["argparse"]["form"])
        for f in fields(Options)
        if "form" in f.metadata.get("argparse", {})
    ]


def from_args(args: argparse.Namespace, **rest: Any) -> Options:
    """The options the parsed flags say, and ``rest`` (fields without a flag, or set otherwise)."""
    values = {}
    for f in fields(Options):
        if "flag" in f.metadata and f.name not in rest:
            raw = getattr(args, f.name)
            values[f.name] = _PARSE[f.name](raw) if f.name in _PARSE else raw
    return Options(**values, **rest)
