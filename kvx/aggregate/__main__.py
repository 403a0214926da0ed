"""``python -m kvx.aggregate``: tables, plots and a report from an MLflow store or a record directory.

python -m kvx.aggregate                          # every finished cell in outputs/mlflow.db
python -m kvx.aggregate --outputs-dir D          # the runs of `python -m kvx ... outputs_dir=D`
python -m kvx.aggregate --sweep latest           # only the most recent sweep
python -m kvx.aggregate --records DIR            # record files produced anywhere (reread fast)
python -m kvx.aggregate --strict                 # exit 1 on any validation problem
python -m kvx.aggregate --swap bm25_top_k:dense_top_k   # also audit one evidence condition against another
python -m kvx.aggregate --scores scores.csv      # audit precomputed per-row, per-reader scores
python -m kvx.aggregate --scores paired_scores.csv --manifest artifact_manifest.jsonl  # a ragscale audit
python -m kvx.aggregate --fail-on attenuated,reversed  # exit 3 when a compared upgrade is so labelled

Exit codes: 0 done; 1 --strict and a validation problem; 2 bad input; 3 the release gate failed
(--fail-on / --retention-alert: the comparisons are named on stderr); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvx.aggregate import catalogue
from kvx.aggregate.kvexec.onset import check_threshold
from kvx.aggregate.options import GATE, RETENTION_ALERT, comma_list, counts, flags, forms, from_args
from kvx.aggregate.ragscale.outcomes import (
    ATTENUATED,
    OUTCOMES,
    REVERSED,
    check_alert,
    gate,
    parse_outcomes,
)
from kvx.aggregate.read import cache
from kvx.aggregate.read.sources import DirectorySource, MlflowSource, Source
from kvx.aggregate.run import Result, analyse, listing, select
from kvx.core import commands
from kvx.core.errors import ConfigError
from kvx.core.records import PANEL
from kvx.stores.tags import run_store

if TYPE_CHECKING:
    import pandas as pd

    from kvx.aggregate.publish.plots import Drawer

GATE_FAILED = 3  # exit code: a compared upgrade has an outcome --fail-on lists (1 and 2 are taken)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kvx.aggregate", description=__doc__.split("\n")[0])
    src = p.add_argument_group("input (an MLflow store by default)")
    src.add_argument(
        "--outputs-dir",
        help="the runs' outputs_dir (as in `python -m kvx outputs_dir=DIR`): read the store they wrote "
        "(DIR/mlflow.db unless $MLFLOW_TRACKING_URI is set), write DIR/aggregate/<time> (default: outputs)",
    )
    src.add_argument(
        "--tracking-uri",
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else the --outputs-dir store); an absolute "
        "sqlite path takes four slashes: sqlite:////abs/path/mlflow.db",
    )
    src.add_argument("--experiment", action="append", help="experiment name (repeatable; default: kvx)")
    src.add_argument("--sweep", action="append", help="sweep (parent) run id, or 'latest' (repeatable)")
    src.add_argument(
        "--records", action="append", type=Path, help="directory of record files instead of a store"
    )
    src.add_argument(
        "--scores",
        action="append",
        type=Path,
        help="CSV/JSONL of per-row, per-reader raw_/comp_ scores to audit instead (kvx.aggregate.scores)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="output directory (default: <outputs-dir>/aggregate/<time>; without --outputs-dir, beside "
        "the sqlite store read)",
    )
    gate = p.add_argument_group(GATE)
    flags(p, {GATE: gate})
    gate.add_argument(
        "--fail-on",
        type=_outcomes,
        default=[],
        help="exit 3 when a compared upgrade's outcome is one of these (comma-separated: "
        f"{', '.join(OUTCOMES)})",
    )
    gate.add_argument(
        "--retention-alert",
        type=float,
        help=f"retention below it labels an upgrade attenuated (default {RETENTION_ALERT:g}); given "
        "without --fail-on, exit 3 when an upgrade is attenuated or reversed",
    )
    gate.add_argument(
        "--slice-by",
        type=comma_list,
        help="row hints to slice the audit by, e.g. question_type,difficulty (default: a scores file's "
        "hint columns; records: none)",
    )
    src.add_argument(
        "--manifest",
        action="append",
        type=Path,
        help="ragscale artifact_manifest.jsonl to check a ragscale --scores file's artifact hashes against",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when validation finds any problem")
    p.add_argument("--close-stale", action="store_true", help="mark sweep runs left RUNNING as KILLED")
    p.add_argument("--export-records", type=Path, help="also write the records read as a record directory")
    p.add_argument(
        "--no-log", action="store_true", help="do not log the report to MLflow as an aggregate run"
    )
    p.add_argument("--no-plots", action="store_true", help="tables and report only")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="read every record file and draw every figure afresh: keep nothing in the user cache",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--list", action="store_true", help="list every table (section, family, figures) and exit")
    p.add_argument(
        "--workers", type=int, help="processes reading records and drawing figures (default: every CPU)"
    )
    args = p.parse_args(argv)
    for flag, name in [*counts(), ("--workers", "workers")]:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"{flag}={getattr(args, name)} must be a positive integer")
    try:
        check_threshold(args.onset_drop, f"--onset-drop={args.onset_drop:g}")
        if args.retention_alert is not None:
            check_alert(args.retention_alert)
    except ValueError as exc:
        p.error(str(exc))
    if not 0.0 < args.min_gap < 1.0:
        p.error(
            f"--min-gap={args.min_gap:g} must be in (0, 1): a fraction of the score scale, e.g. 0.05 = 5 pp"
        )
    if args.manifest and not args.scores:
        p.error("--manifest checks a ragscale --scores file: give --scores too")
    for flag, name, form in forms():
        separator = ":" if ":" in form else "="
        for item in getattr(args, name):
            if item.count(separator) != 1 or "" in item.split(separator):
                p.error(f"{flag} {item!r} must be {form}")
    inputs = [name for name in ("records", "scores") if getattr(args, name)]
    if len(inputs) > 1 or (args.scores and (args.sweep or args.experiment)):
        p.error("give one input: an MLflow store (--sweep/--experiment), --records or --scores")
    if args.records and (args.sweep or args.experiment):
        p.error("--records reads files; --sweep/--experiment select runs of an MLflow store")
    return args


def store_uri(args: argparse.Namespace) -> tuple[str, str]:
    """The store to read, by the rule runs use (``kvx.stores.tags.run_store``), and what chose it."""
    if args.tracking_uri:
        return args.tracking_uri, "--tracking-uri"
    outputs_dir, uri = run_store(args.outputs_dir)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return uri, "MLFLOW_TRACKING_URI"
    if args.outputs_dir:
        return uri, f"--outputs-dir {outputs_dir}"
    return uri, f"the default outputs_dir={outputs_dir}"


def out_dir(args: argparse.Namespace, uri: str | None) -> Path:
    """``--out``, else ``<outputs dir>/aggregate/<time>``: ``--outputs-dir``, else the folder of the
    sqlite store read, else the runs' default ``outputs_dir``."""
    if args.out:
        return args.out
    db = uri.removeprefix("sqlite:///") if uri else ""
    if args.outputs_dir:
        folder = Path(args.outputs_dir)
    elif db and db != uri and db != ":memory:":
        folder = Path(db).parent
    else:
        folder = Path(run_store()[0])
    return folder / "aggregate" / time.strftime("%Y%m%d-%H%M%S")


def build_source(args: argparse.Namespace) -> tuple[Source, str | None]:
    """The source and the tracking URI the report is logged to (None: do not log)."""
    if args.scores:
        from kvx.aggregate.scores import ScoresSource

        return ScoresSource(args.scores), args.tracking_uri
    if args.records:
        kept = None if args.no_cache or args.export_records else cache.default_root()  # export: the lines
        return DirectorySource(args.records, cache=kept), args.tracking_uri
    from kvx.cli.preflight import check_reachable  # hydra and plugins: only for stores

    uri, origin = store_uri(args)
    check_reachable(uri, "--tracking-uri" if args.tracking_uri else None)
    try:
        source = MlflowSource(uri, args.experiment or ["kvx"], args.sweep, args.close_stale)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc}, chosen by {origin}{_store_hint(uri)}") from None
    if args.close_stale and source.stale:
        from kvx.stores.tracking import close_stale  # imports MLflow: only when asked to write

        close_stale(uri, source.stale)
    return source, uri


def _store_hint(uri: str) -> str:
    """How to reach the store the runs wrote: the absolute path a three-slash sqlite URI meant, if
    that file exists, else ``--outputs-dir`` and ``--tracking-uri``."""
    absolute = "/" + uri.removeprefix("sqlite:///")
    if uri.startswith("sqlite:///") and not absolute.startswith("//") and Path(absolute).is_file():
        return f"; did you mean sqlite:///{absolute}?"
    return (
        ". Runs with outputs_dir=DIR write DIR/mlflow.db: pass --outputs-dir DIR, or --tracking-uri URI "
        "for another store (an absolute sqlite path takes four slashes: sqlite:////abs/path/mlflow.db)"
    )


#: what Ctrl-C says (the workers got it too and end at once, silently)
INTERRUPTED = "interrupted; the store and records are unchanged, rerun to aggregate"


def main(argv: Sequence[str] | None = None) -> int:
    """The aggregate, in-process: its exit code (the module's docstring); bad input is one
    ``kvx.aggregate: ...`` line on stderr and 2, said in :func:`kvx.core.commands.run`."""
    return commands.run("kvx.aggregate", _main, argv, interrupted=INTERRUPTED)


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.list:
        print(listing(catalogue.load(figures=True)), end="")
        return 0
    options = from_args(
        args,
        export=args.export_records,
        progress=not args.quiet,
        workers=args.workers,
        retention_alert=RETENTION_ALERT if args.retention_alert is None else args.retention_alert,
        slice_by=args.slice_by,
    )
    tables = catalogue.load()
    try:
        select(tables, options.only, options.skip)
    except ValueError as exc:  # a name that is no table, section or family: before any record is read
        raise ConfigError(str(exc)) from exc
    try:
        source, log_uri = build_source(args)
    except (FileNotFoundError, LookupError) as exc:  # no such store, experiment or sweep
        raise ConfigError(str(exc)) from exc
    out = out_dir(args, log_uri)
    if args.scores:
        from kvx.aggregate.scores import audit_scores

        try:
            result = audit_scores(args.scores, options, args.manifest, tables)
        except (FileNotFoundError, ValueError) as exc:  # a scores file that is missing or malformed
            raise ConfigError(str(exc)) from exc
        drawer = None
    else:
        kept = None if args.no_cache else cache.default_root()
        drawer = None if args.no_plots else _Figures(out, options.workers, kept)
        try:
            if drawer is None:
                result = analyse(source, options, catalogue=tables)
            else:
                result = analyse(
                    source, options, on_table=drawer.add, while_reading=drawer.start, catalogue=tables
                )
        except BaseException:
            if drawer is not None:
                drawer.cancel()
            raise
        exported = isinstance(source, DirectorySource) and source.manifests  # a store export may hold none
        if args.records and result.n_records == 0 and not exported:
            if drawer is not None:
                drawer.cancel()
            raise ConfigError(f"--records holds no records ({'; '.join(source.notes)})")
    from kvx.aggregate.publish.write import publish

    if drawer is not None:  # its figures are drawn: the catalogue that drew them
        plots, declared = drawer.figures()
    else:  # --no-plots (matplotlib never imported), or --scores drawing in publish
        plots, declared = not args.no_plots, tables if args.no_plots else catalogue.load(figures=True)
    report = publish(
        result,
        source,
        out,
        plots=plots,
        log_uri=None if args.no_log else log_uri,
        options=options,
        declared=declared,
    )
    _summary(result, source.notes, report, time.perf_counter() - started)
    if not args.no_cache:
        cache.prune(cache.default_root())
    errors = sum(p.severity == "error" for p in result.problems)
    if args.strict and result.problems:
        return 1
    if result.n_rows == 0 and errors:
        return 2
    return _gate(result, args)


def _outcomes(text: str) -> list[str]:
    try:
        return parse_outcomes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--fail-on ")) from None


def _gate(result: Result, args: argparse.Namespace) -> int:
    """ragscale's release gate: GATE_FAILED naming each comparison whose outcome is listed."""
    fail_on = args.fail_on or ([ATTENUATED, REVERSED] if args.retention_alert is not None else [])
    failing = gate(result.tables.get("audit_pairs"), fail_on)
    if not failing:
        return 0
    print(f"kvx.aggregate: release gate failed ({', '.join(fail_on)}):", file=sys.stderr)
    for line in failing:
        print(f"  {line}", file=sys.stderr)
    return GATE_FAILED


class _Figures:
    """Figures drawn in worker processes while the analysis goes on. The plotting stack is imported
    while the record workers read (``start``), so its import overlaps them instead of preceding them."""

    def __init__(self, out: Path, workers: int | None, kept: Path | None) -> None:
        self.out, self.workers, self.kept = out, workers, kept
        self.drawer: Drawer | None = None
        self.declared: catalogue.Catalogue | None = None  # the catalogue with its figures, once started

    def start(self) -> Drawer:
        if self.drawer is None:
            from kvx.aggregate.publish.plots import Drawer

            self.out.mkdir(parents=True, exist_ok=True)
            self.declared = catalogue.load(figures=True)
            self.drawer = Drawer(self.out, self.declared.figures, self.workers, self.kept)
        return self.drawer

    def add(self, name: str, frame: pd.DataFrame) -> None:
        self.start().add(name, frame)

    def figures(self) -> tuple[dict[str, list[Path]], catalogue.Catalogue]:
        """Every figure drawn, and the catalogue that declared them."""
        figures = self.start().figures()
        assert self.declared is not None  # start() loaded it with the drawer
        return figures, self.declared

    def cancel(self) -> None:
        """The figures not begun are dropped, so leaving (Ctrl-C, bad input) waits for none of them."""
        if self.drawer is not None:
            self.drawer.cancel()


def _summary(result: Result, notes: list[str], report: Path, seconds: float) -> None:
    errors = sum(p.severity == "error" for p in result.problems)
    warnings = len(result.problems) - errors
    print(
        f"kvx.aggregate: {result.n_records} records read, {result.n_rows} analysed, "
        f"{errors} errors and {warnings} warnings in validation, {seconds:.1f} s"
    )
    for note in notes:
        print(f"  note: {note}")
    for p in result.problems[:10]:
        print(f"  [{p.severity}] {p.check}: {p.run} {p.key} {p.message}".rstrip())
    if len(result.problems) > 10:
        print(f"  ... {len(result.problems) - 10} more in problems.csv")
    _audit_headlines(result)
    print(f"report: {report}")


def _audit_headlines(result: Result) -> None:
    """The endpoint upgrade of each audited panel on its first metric (em where the task has it)."""
    pairs = result.tables.get("audit_pairs")
    if pairs is None or pairs.empty:
        return
    ends = pairs[pairs["kind"] == "endpoints"]
    for _, panel in ends.groupby(PANEL, sort=True):
        row = panel[panel["metric"] == "em"].iloc[0] if (panel["metric"] == "em").any() else panel.iloc[0]
        retention = "N/A" if row.isna()["retention"] else f"{100 * row['retention']:.0f}%"
        where = f"{row['task']} x {row['evidence']} + {row['compressor']}@{row['setting']}"
        print(
            f"  audit {where} ({row['metric']}): {row['reader_a']} -> {row['reader_b']} "
            f"raw {100 * row['raw_upgrade']:+.1f} pp, compressed {100 * row['comp_upgrade']:+.1f} pp, "
            f"retention {retention}" + (f" ({row['outcome']})" if "outcome" in row else "")
        )


if __name__ == "__main__":
    raise SystemExit(main())
