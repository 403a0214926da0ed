"""Byte-exact outputs of ``python -m kvx.aggregate`` on fixed fixtures: a "before" to hold a refactor to.

Why: a refactor of ``kvx.aggregate`` must not change one number of its CSV and Markdown tables. This
script builds small, deterministic inputs for each study kvx reproduces (KVDiagnosis, TPBench, ragscale's
reader-upgrade audit, kv-exec-bench's anchor/structural contrast, the synthetic diagnostics study, the
README sweep) and runs the aggregate CLI on each, as a fresh process, so the tables of two commits can be
compared file by file::

    git worktree add /tmp/base-tree <old-commit>
    cd /tmp/base-tree && PYTHONPATH=/tmp/base-tree python /work/main/benchmarks/aggregate_outputs.py OLD
    cd /work/main && PYTHONPATH=/work/main python benchmarks/aggregate_outputs.py NEW
    diff -r OLD NEW

    python benchmarks/aggregate_outputs.py OUT [--only NAME ...] [--inputs DIR] [--list]

Each fixture writes ``OUT/<name>/*.csv`` and ``*.md`` and nothing else: the run's ``report.html`` and
``summary.json`` (which hold the time and the kvx version) are moved beside its inputs, under
``--inputs`` (default ``OUT.inputs``). The aggregate runs with ``--no-log --no-cache --quiet --no-plots
--workers 1`` and with its working directory in the fixture's input folder, its inputs named by relative
paths, so no temporary path reaches a table. The kvx that runs is the one this script imports (the
``PYTHONPATH`` tree, else the installed one): it is printed first and handed to every child process, and
the test helpers some fixtures borrow (``tests/importers``) come from the same tree.

Inputs come from ``kvx.testing``'s public builders and kvx's own CLIs (``python -m kvx.importers``), with
fixed seeds; two fixtures read record folders you have, named by environment variables (skipped when
unset): ``KVX_KVD_IMPORTED`` (the real KVDiagnosis release, imported by ``python -m kvx.importers
kvdiagnosis``) and ``KVX_README_RECORDS`` (the README's sweep, written as a record folder by ``python -m
kvx.aggregate --export-records``). Per fixture it prints the tables written, how many hold rows, and the
wall time; at the end, over every fixture folder in OUT (those of earlier runs too), which of the
aggregate's known tables held rows in some fixture and which never did.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import kvx
from kvx.core.identity import digest
from kvx.testing import crafted, tpbench
from kvx.testing.kvdiagnosis_release import make_release as make_kvd_release
from kvx.testing.synthetic import Grid, write_records

ROOT = Path(kvx.__file__).resolve().parents[1]  # the tree whose kvx (and tests/) runs
FLAGS = ["--no-log", "--no-cache", "--quiet", "--no-plots", "--workers", "1"]
#: what the aggregate writes besides the tables: moved out of OUT (it holds the time, the kvx version)
NOT_TABLES = ("report.html", "summary.json")


class Skip(Exception):
    """A fixture that cannot be built here (an environment variable unset, a helper missing)."""


def sha(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def env() -> dict[str, str]:
    """This environment, with the kvx this script imported first on the path of every child."""
    out = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return out | {"TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"}


def cli(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in ``cwd``; fails with its output unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env(), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} {' '.join(args)} exited {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip
    return done


def from_tests(module: str, *names: str) -> list:
    """Helpers of a test module of the tree that runs (``tests/`` is a package there)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        loaded = __import__(module, fromlist=list(names))
        return [getattr(loaded, name) for name in names]
    except (ImportError, AttributeError) as exc:
        raise Skip(f"{module}: {exc}") from None


def folder_from(variable: str) -> Path:
    value = os.environ.get(variable)
    if not value:
        raise Skip(f"${variable} is unset")
    path = Path(value).resolve()
    if not path.is_dir():
        raise Skip(f"${variable}={value} is not a folder")
    return path


# --------------------------------------------------------------------------------------- KVDiagnosis


def kvdiagnosis(work: Path) -> list[str]:
    """The release miniature (kvx.testing.kvdiagnosis_release), imported as tests/importers does."""
    make_kvd_release(work / "release")
    cli("kvx.importers", ["kvdiagnosis", "release", "--out", "imported", "--quiet"], work)
    return ["--records", "imported"]


def kvdiagnosis_demand(work: Path) -> list[str]:
    """The miniature with the release's context-demand labels and PyramidKV audit next to it
    (tests/importers/test_kvdiagnosis_demand.py), for Tables 5, 13 and 14."""
    demand_csv, audit = from_tests("tests.importers.test_kvdiagnosis_demand", "_demand_csv", "AUDIT")
    root = make_kvd_release(work / "release")
    demand_csv(root / "data/context_demand/ruler8k_context_demand_dataset.csv")
    (root / "data/context_demand/validation_report.json").write_text(json.dumps({"rows": 3}))
    (root / "data/audits").mkdir()
    (root / "data/audits/pyramidkv_adapter_audit.json").write_text(json.dumps(audit), encoding="utf-8")
    cli("kvx.importers", ["kvdiagnosis", "release", "--out", "imported", "--quiet"], work)
    return ["--records", "imported", "--cases", "2"]


def kvdiagnosis_real(work: Path) -> list[str]:
    """The real KVDiagnosis release, imported: ``$KVX_KVD_IMPORTED``."""
    return ["--records", str(folder_from("KVX_KVD_IMPORTED"))]


# -------------------------------------------------------------------------------------------- TPBench

SELECTORS = {"recency": 0.45, "earliest": 0.6, "uniform_stride": 0.55, "mmr": 0.5}  # P(right | FC right)
DELETIONS = {"update": 0.3, "update_control": 0.85, "answers": 0.2, "answers_control": 0.8}
PRESSES = {
    ("snapkv", 0.7): 0.65,
    ("snapkv", 0.5): 0.5,
    ("streaming_llm", 0.7): 0.5,
    ("streaming_llm", 0.5): 0.4,
}
SLOTS = ("Restaurants_1.time", "Hotels_2.check_in_date", "Events_1.city", "Banks_1.account_type", None)
VALUES = (
    ("Atlanta, GA", "Atlanta"),
    ("checking", "savings"),
    ("", "March 5th"),
    ("12:45 PM", "afternoon 12:45"),
)


def tpbench_records() -> list[dict]:
    """Three probes x two corpora x three probe seeds x eight dialogues under four turn selectors, four
    matched deletions and two KV presses, with the answer details the paper tables read (slots,
    updated values, evidence location, parsed segments, token counts), some answers unsupported."""
    rng = np.random.default_rng(20260821)
    out = []
    for corpus in ("sgd", "multiwoz"):
        for seed in (42, 43, 44):
            for task in ("tpbench_p1", "tpbench_p2", "tpbench_p3"):
                methods: list[tuple[dict, float]] = [({"selector": s}, p) for s, p in SELECTORS.items()]
                methods += [({"selector": None, "press": p, "ratio": r}, q) for (p, r), q in PRESSES.items()]
                methods += [({"selector": None, "which": w}, p) for w, p in DELETIONS.items()]
                for d in range(8):
                    dialogue = f"{corpus}_{d}"
                    full = int(rng.random() < 0.8)
                    per_source: dict = {}
                    if task == "tpbench_p2" and SLOTS[d % 5]:
                        per_source["slot"] = SLOTS[d % 5]
                    if task == "tpbench_p3" and d % 5 != 4:
                        old, new = VALUES[d % 4]
                        per_source |= {"old_value": old, "current_value": new}
                    if task != "tpbench_p1" and d != 7:
                        per_source |= {
                            "update_states_value": bool(d % 3),
                            "evidence_turns": 1 + d % 3,
                            "system_states_value": d % 2 == 0,
                        }
                    for method, p_right in methods:
                        ok = int(rng.random() < (p_right if full else 0.15))
                        kept = bool(rng.random() < 0.6)
                        metrics = _probe_metrics(task, ok, rng)
                        status = "unsupported" if rng.random() < 0.04 else "supported"
                        r = tpbench.record(
                            task=task, dialogue=dialogue, seed=seed, corpus=corpus, full=full, comp=ok,
                            retained=kept, status=status, **method, **metrics,
                        )  # fmt: skip
                        for side in ("full", "compressed"):
                            if r.get(side) is not None:
                                r[side]["details"] |= per_source
                        if r.get("compressed") is not None and task != "tpbench_p1":
                            r["compressed"]["details"]["answer_turns_kept"] = int(rng.integers(0, 3))
                        if method.get("selector") in ("recency", "uniform_stride") and d < 6:
                            _with_tokens(r, 200 + 40 * d, 12, [0.3, 0.25, 0.35][d % 3])
                        out.append(r)
    return out


def _probe_metrics(task: str, ok: int, rng: np.random.Generator) -> dict[str, float]:
    loose = float(max(ok, rng.random() < 0.3))
    metrics = {"loose": loose, "abstain": float(not ok and rng.random() < 0.2)}
    if task == "tpbench_p1":
        metrics["f1"] = round(float(rng.uniform(0.5, 1.0) if ok else rng.uniform(0.0, 0.5)), 3)
    elif task == "tpbench_p2":
        metrics["superseded"] = float(not ok and rng.random() < 0.3)
    else:
        parsed = float(ok or rng.random() < 0.6)
        metrics |= {"segments_parsed": parsed, "whole_strict": float(ok and rng.random() < 0.8)}
        metrics |= {"goal": float(max(ok, rng.random() < 0.4)), "parsed": parsed}
    return metrics


def _with_tokens(r: dict, context: int, question: int, share: float) -> None:
    """The transform block of a run that kept ``share`` of ``context`` prompt tokens."""
    r["transform"] = {
        "name": r["cell"]["fields"]["transform"],
        "context_sha256": "0" * 64,
        "kept_segment_ids": [],
        "retained_token_share": share,
    }
    r |= {"n_context_tokens": context, "n_question_tokens": question}


def tpbench_fixture(work: Path) -> list[str]:
    """Crafted TPBench records (kvx.testing.tpbench): every TPBench table and the paper's."""
    tpbench.write(work / "records", tpbench_records())
    return ["--records", "records"]


def tpbench_release(work: Path) -> list[str]:
    """tests/importers/test_tpbench.py's release miniature, imported by ``python -m kvx.importers``."""
    [make_release] = from_tests("tests.importers.test_tpbench", "make_release")
    make_release(work / "release")
    cli("kvx.importers", ["tpbench", "release", "--out", "imported", "--quiet"], work)
    return ["--records", "imported"]


# ------------------------------------------------------------------------------------ ragscale audit


def ragscale_scores(work: Path) -> list[str]:
    """ragscale's worked HotpotQA audit (tests/fixtures), as tests/aggregate/ragscale/test_ragscale_release.py
    audits it: the release's seed and bootstrap draws."""
    source = ROOT / "tests/fixtures/ragscale_openrouter_hotpotqa/paired_scores.csv"
    if not source.is_file():
        raise Skip(f"{source} is missing")
    shutil.copy(source, work / "paired_scores.csv")
    return ["--scores", "paired_scores.csv", "--seed", "20260821", "--boot", "2000"]


def ragscale_families(work: Path) -> list[str]:
    """The same scores with reader families, slices by difficulty too, the row interval and ties adverse."""
    args = ragscale_scores(work)
    families = ["qwen/qwen-2.5-7b-instruct=qwen", "meta-llama/llama-3.3-70b-instruct=llama"]
    args += [a for f in families for a in ("--family", f)]
    return args + ["--interval", "row", "--ties", "adverse", "--slice-by", "question_type,difficulty"]


READERS = {"r0": "fam0", "r1": "fam1", "r2": "fam0", "r3": "fam2", "r4": "fam1"}
SKILL = {"r0": 0.35, "r1": 0.45, "r2": 0.55, "r3": 0.65, "r4": 0.8}
EVIDENCE = {  # evidence condition -> its transform fields; summary draws 0-2 are one artifact drawn thrice
    "bm25": {"transform": "bm25_top_k", "transform.k": 3},
    "dense": {"transform": "dense_top_k", "transform.k": 3},
    "summary0": {"transform": "summary", "transform.reader": "x"},
    "summary1": {"transform": "summary", "transform.reader": "x", "transform.draw": 1},
    "summary2": {"transform": "summary", "transform.reader": "x", "transform.draw": 2},
}


def panel_records(swap: bool = False) -> list[dict]:
    """A reader-upgrade panel (kvx.testing.crafted records): five readers of three families on 40
    HotpotQA rows under five evidence conditions and two compressors at two ratios. A reader's FullCache
    answer to a row is one answer in every cell; each row's compressed artifact is one text for every
    reader (a summary draw re-drawn on some rows). ``swap``: BM25 (its answers the raw ones), dense and
    one summary, each named by the record's transform block alone (no cell field), so the cells' labels
    do not differ by condition and a swap pairs them."""
    rng = np.random.default_rng(7)
    full = {
        (reader, row): bool(rng.random() < SKILL[reader] * (1.2 - (row % 10) / 10))
        for reader in READERS
        for row in range(40)
    }
    out = []
    for name, fields in EVIDENCE.items():
        if swap and name not in ("bm25", "dense", "summary0"):
            continue
        for comp, ratio in (("snapkv", 0.5), ("snapkv", 0.25), ("tova", 0.5), ("tova", 0.25)):
            keep = ratio + (0.35 if comp == "snapkv" else 0.2)
            for row in range(40):
                text = sha(
                    "artifact", name if row % 4 or "summary" not in name else "summary", row, comp, ratio
                )
                for reader, family in READERS.items():
                    right = full[reader, row]
                    ok = bool(rng.random() < (keep if right else 0.15))
                    if swap and name == "bm25":  # the swap's reference: the raw answers themselves
                        ok = right
                    r = crafted.rec(task="hotpotqa", source=f"q{row:02d}", reader=reader, comp=comp,
                                    ratio=ratio, full=right, ok=ok, text_hash=text)  # fmt: skip
                    cell = r["cell"]["fields"] | ({} if swap else fields)
                    r["cell"] = {"id": digest(cell | fields), "fields": cell}
                    if swap:
                        r["transform"] = {
                            "name": fields["transform"],
                            "context_sha256": sha("context", row),
                            "kept_segment_ids": [],
                            "retained_token_share": 0.4,
                        }
                    r["key"] = f"hotpotqa/q{row:02d}/{reader}@rev1/{r['cell']['id']}/seed=0"
                    r["prompt_hash"] = sha("prompt", row, reader)
                    r["reader_family"] = family
                    hint = {"question_type": "bridge" if row % 3 else "comparison", "level": "hard"}
                    for side in ("full", "compressed"):
                        r[side]["details"] = hint
                        r[side]["metrics"] = {"em": float(r[side]["correct"])}
                    out.append(r)
    return out


def rag_panel(work: Path) -> list[str]:
    """The panel audited with a declared pair, families, a retriever swap and small null counts."""
    crafted.write(work / "records", panel_records())
    args = ["--records", "records", "--pair", "r1:r3", "--swap", "bm25_top_k:dense_top_k"]
    args += ["--family", "r4=fam2", "--slice-by", "question_type"]
    return args + ["--splits", "400", "--boot", "400", "--null-draws", "40", "--null-splits", "50"]


def rag_swap(work: Path) -> list[str]:
    """A retriever swap (BM25 -> dense) against the summary's compression panels of the same readers."""
    crafted.write(work / "records", panel_records(swap=True))
    args = ["--records", "records", "--swap", "bm25_top_k:dense_top_k", "--mcnemar-filter"]
    return args + ["--splits", "400", "--boot", "400", "--null-draws", "40", "--null-splits", "50"]


# ------------------------------------------------------------------------------------- kv-exec-bench

CONTRAST = {
    "tool_call": ({"json_valid": "schema_valid", "name_substring": "schema_valid"}, "args_exact"),
    "code_exec": ({"edit_sim": "pass"}, None),
}
KV_PRESSES = {"snapkv": 1.0, "tova": 0.8, "streaming_llm": 0.6}
KV_RATIOS = (0.1, 0.25, 0.5, 0.75, 0.9)


def kvexec_records() -> list[dict]:
    """Tool-call and code-exec records (kvx.testing.crafted) at five ratios of three presses: the anchor
    metric (a parseable call, edit similarity) holds while the structural one (schema, tests pass)
    drops with compression; a judge decides every tool-call answer."""
    rng = np.random.default_rng(11)
    out = []
    for task, (pairs, extra) in CONTRAST.items():
        for press, strength in KV_PRESSES.items():
            for ratio in KV_RATIOS:
                for i in range(16):
                    source = f"{task}_{i:02d}"
                    full_rng = np.random.default_rng(int(sha(task, source)[:8], 16))
                    anchor_full = float(full_rng.random() < 0.95)
                    structural_full = float(anchor_full and full_rng.random() < 0.85)
                    loss = ratio * (1.2 - strength)
                    anchor = float(anchor_full and rng.random() > loss / 3)
                    structural = float(structural_full and anchor and rng.random() > loss)
                    r = crafted.rec(task=task, source=source, comp=press, ratio=ratio,
                                    full=bool(structural_full), ok=bool(structural))  # fmt: skip
                    r["prompt_hash"] = sha("prompt", task, source)
                    r["contrast"] = dict(pairs)
                    names = sorted({*pairs, *pairs.values(), *([extra] if extra else [])})
                    for side, a, s in (
                        ("full", anchor_full, structural_full),
                        ("compressed", anchor, structural),
                    ):
                        values = {n: (a if n in pairs else s) for n in names}
                        if task == "code_exec":
                            values["edit_sim"] = round(a * (0.7 + 0.3 * s), 3)
                        r[side]["metrics"] = values
                        if task == "tool_call":
                            r[side]["judgments"] = {"fmts": _judgment(bool(s), i, side)}
                    out.append(r)
    return out


def _judgment(correct: bool, i: int, side: str) -> dict:
    """A judge's decision dict (kvx.judges.base.Judgment's fields): disagreeing on some, one error."""
    if i == 3 and side == "full":
        return {"status": "error", "reason": "503", "judge": {"name": "fmts"}}
    decided = correct if i % 5 else not correct
    verdict = "uncertain" if i == 7 else ("equivalent" if decided else "not_equivalent")
    decided = decided and verdict != "uncertain"
    return {"status": "judged", "correct": decided, "score": float(decided), "verdict": verdict,
            "judge": {"name": "fmts"}}  # fmt: skip


def kvexec(work: Path) -> list[str]:
    """Anchor and structural metrics for the contrast, its by-ratio view (Figure 1) and the onset."""
    crafted.write(work / "records", kvexec_records())
    return ["--records", "records", "--onset-drop", "0.1", "--boot", "500"]


# --------------------------------------------------------------------------------- synthetic, README

SYNTHETIC = Grid(
    tasks=("ruler_niah_single", "ruler_vt", "hotpotqa"),
    readers=("smollm2", "qwen"),
    compressors=("snapkv", "tova", "think", "hqq"),
    ratios=(0.25, 0.5, 0.75),
    n_sources=40,
    unsupported=(("think", 0.75),),
    error_rate=0.02,
)


def synthetic(work: Path) -> list[str]:
    """kvx.testing.synthetic's study (benchmarks/bench_aggregate.py's, small): diagnostics, categories,
    intervention, costs, two readers (an audit), ThinK at 25% unsupported, 2% errored runs."""
    write_records(work / "records", SYNTHETIC)
    return ["--records", "records", "--boot", "500", "--splits", "500"]


def readme_sweep(work: Path) -> list[str]:
    """The README's sweep (``python -m kvx -m press=snapkv,tova ratio=0.25,0.5``) exported as a record
    folder: ``$KVX_README_RECORDS``."""
    return ["--records", str(folder_from("KVX_README_RECORDS"))]


FIXTURES: dict[str, Callable[[Path], list[str]]] = {
    "kvdiagnosis": kvdiagnosis,
    "kvdiagnosis_demand": kvdiagnosis_demand,
    "kvdiagnosis_real": kvdiagnosis_real,
    "tpbench": tpbench_fixture,
    "tpbench_release": tpbench_release,
    "ragscale_scores": ragscale_scores,
    "ragscale_families": ragscale_families,
    "rag_panel": rag_panel,
    "rag_swap": rag_swap,
    "kvexec": kvexec,
    "synthetic": synthetic,
    "readme_sweep": readme_sweep,
}


# ------------------------------------------------------------------------------------------- running


def rows_of(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as fh:
        return max(sum(1 for _ in csv.reader(fh)) - 1, 0)


def run_fixture(name: str, out: Path, inputs: Path) -> dict[str, int] | None:
    """Build the fixture's inputs afresh, aggregate them into ``out/name``; its tables' row counts."""
    work, target = inputs / name, out / name
    for folder in (work, target):
        shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    try:
        args = FIXTURES[name](work)
    except Skip as exc:
        shutil.rmtree(work, ignore_errors=True)
        print(f"{name:20s} skipped: {exc}")
        return None
    built = time.perf_counter() - started
    started = time.perf_counter()
    cli("kvx.aggregate", [*args, "--out", str(target), *FLAGS], work)
    seconds = time.perf_counter() - started
    (work / "report").mkdir()
    for extra in NOT_TABLES:
        if (target / extra).exists():
            shutil.move(str(target / extra), str(work / "report" / extra))
    strays = sorted(p.name for p in target.iterdir() if p.suffix not in (".csv", ".md"))
    for stray in strays:  # figures or anything else: not what is compared
        shutil.move(str(target / stray), str(work / "report" / stray))
    tables = {p.stem: rows_of(p) for p in sorted(target.glob("*.csv"))}
    empty = sorted(t for t, n in tables.items() if n == 0)
    print(
        f"{name:20s} {len(tables):3d} tables, {len(tables) - len(empty):3d} with rows, "
        f"aggregate {seconds:6.1f} s (inputs {built:.1f} s)"
        + (f"; empty: {', '.join(empty)}" if empty else "")
    )
    return tables


def known_tables() -> list[str]:
    """The tables the running kvx declares: its catalogue (kvx after issue 42), else its report's
    sections (an earlier kvx); and ``problems``, which every aggregate writes."""
    try:
        from kvx.aggregate.catalogue import load

        return [*load().table_names(), "problems"]
    except ImportError:
        from kvx.aggregate.publish.report import OPTIONAL_SECTIONS, SECTIONS

        return [*dict.fromkeys(t for s in (*SECTIONS, *OPTIONAL_SECTIONS) for t in s.tables), "problems"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, nargs="?", help="folder of the tables: OUT/<fixture>/*.csv, *.md")
    p.add_argument("--only", nargs="+", choices=sorted(FIXTURES), metavar="NAME", help="these fixtures")
    p.add_argument("--inputs", type=Path, help="folder of the built inputs and reports (default OUT.inputs)")
    p.add_argument("--list", action="store_true", help="list the fixtures and exit")
    args = p.parse_args(argv)
    if args.list:
        for name, build in FIXTURES.items():
            print(f"{name:20s} {(build.__doc__ or '').split(chr(10))[0]}")
        return 0
    if args.out is None:
        p.error("give OUT")
    out = args.out.resolve()
    inputs = (args.inputs or out.with_name(out.name + ".inputs")).resolve()
    print(f"kvx from {ROOT} ({sys.executable}); tables into {out}, inputs into {inputs}")
    written: dict[str, dict[str, int]] = {}
    failed = []
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(FIXTURES):
        try:
            tables = run_fixture(name, out, inputs)
        except RuntimeError as exc:
            print(f"{name:20s} FAILED: {exc}")
            failed.append(name)
            continue
        if tables is not None:
            written[name] = tables
    for folder in sorted(p for p in out.iterdir() if p.name in FIXTURES and p.name not in written):
        written[folder.name] = {t.stem: rows_of(t) for t in sorted(folder.glob("*.csv"))}  # earlier runs
    with_rows = {t for tables in written.values() for t, n in tables.items() if n}
    seen = {t for tables in written.values() for t in tables}
    known = known_tables()
    print(f"\nover the {len(written)} fixtures in {out}: {', '.join(sorted(written))}")
    print(f"tables with rows in some fixture ({len(with_rows)}): {', '.join(sorted(with_rows))}")
    print(f"written but always empty: {', '.join(sorted(seen - with_rows)) or 'none'}")
    print(f"known tables never written: {', '.join(t for t in known if t not in seen) or 'none'}")
    print(f"tables not in the known list: {', '.join(sorted(seen - set(known))) or 'none'}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
