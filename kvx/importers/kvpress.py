"""kvpress evaluation runs (NVIDIA/kvpress ``evaluation/evaluate.py``) -> kvx records.

What is read: the folders evaluate.py writes under its ``output_dir``, one per run, named
``<dataset>__<data_dir>__<model, / as -->__<press_name>__<compression_ratio %.2f>`` (the threshold of a
DMSPress, the head ratio of a DuoAttentionPress in the ratio's place; no data_dir part without one)
with the suffixes ``__fraction<%.3f>``, ``__max_context<n>``, ``__query_aware`` (``__compressed_questions``
before kvpress #168), ``__key_channel_cr<%.2f>`` and ``__needle_depth<d>``; a rerun of a name goes in
``<name>/<i>/``. Each holds

- ``predictions.csv``: the dataset's rows, every column but ``context`` (in no fixed order), with
  ``predicted_answer`` and, except after DecodingPress runs, the ``compression_ratio`` the press ran
  with; a list column (the references) as numpy prints it (``['a' 'b']``);
- ``metrics.json``: the benchmark's ``calculate_metrics`` of the run, in that benchmark's shape;
- ``config.yaml``: the run's ``EvaluationConfig``, written last (a run that failed while scoring has
  its predictions only: its settings are then read from the folder name).

Folders of kvpress before ab418ac (August 2025) saved ``predicted_answer`` and the ratio only, and
kvpress before #96 (July 2025) wrote flat ``<name>.csv`` files of them: neither holds a row's
references, so both are refused.

Each row becomes one record, scored by the kvx task that scores the benchmark: a kvpress task (a task
class whose ``hub_id`` is the dataset's in kvpress's DATASET_REGISTRY, its subset the one whose folder
is the run's data_dir) or, for RULER, kvx's own ``ruler_<task>``. A ``no_press`` run (or a run at
compression ratio 0) of the same dataset, data_dir, model and settings is the FullCache control of the
others, rows matched by the row's content (every column but the answer, the ratio and the question);
a row no kvx task scores, or without a control, is a record with its status and reason, never dropped.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvx import __version__
from kvx.core.errors import one_line
from kvx.core.identity import digest, fields_of
from kvx.core.records import (
    ERROR,
    SUPPORTED,
    UNKNOWABLE,
    UNSUPPORTED,
    Answer,
    Record,
    dumps,
    is_valid,
    unknown_fields,
    validate,
)
from kvx.core.registry import BUILTIN_DIST, RegistryError, registry
from kvx.core.source import Source
from kvx.importers import (
    CONTROLS_SUFFIX,
    MANIFEST,
    RECORDS_SUFFIX,
    BadInput,
    JsonlGzWriter,
    finite,
    manifest_head,
    sha256_file,
    staged,
    unknown_nulls,
    unknown_summary,
)
from kvx.tasks.base import Task

NAME = "kvpress"
PREDICTIONS, METRICS, CONFIG = "predictions.csv", "metrics.json", "config.yaml"
RUN_FILES = (PREDICTIONS, METRICS, CONFIG)
ANSWER, MEASURED = "predicted_answer", "compression_ratio"
NO_PRESS = "no_press"
UNKNOWN = "unknown"
#: kvpress's DATASET_REGISTRY (evaluation/evaluate_registry.py): dataset -> Hugging Face id, the
#: ``hub_id`` a kvx task declares for the benchmark it scores
DATASETS = {
    "loogle": "simonjegou/loogle",
    "ruler": "simonjegou/ruler",
    "zero_scrolls": "simonjegou/zero_scrolls",
    "infinitebench": "MaxJeblick/InfiniteBench",
    "longbench": "Xnhyacinth/LongBench",
    "longbench-e": "Xnhyacinth/LongBench",
    "longbench-v2": "simonjegou/LongBench-v2",
    "needle_in_haystack": "alessiodevoto/paul_graham_essays",
    "aime25": "alessiodevoto/aime25",
    "math500": "alessiodevoto/math500",
}
#: the reference column of a row: the first of these the file has (the needle of needle_in_haystack)
REFERENCE_COLUMNS = ("answers", "answer", "needle")
#: columns that are not the row's identity: the answer, what the press ran with, and the question
#: (a query-aware run moved it into the context, which the file does not keep)
NOT_IDENTITY = (ANSWER, MEASURED, "question", "context")
#: kept as the file's text for the task's source (a question "42" stays a string)
TEXT_COLUMNS = ("question", "answer_prefix", ANSWER)
#: presses whose folder name carries another value in the ratio's place (get_results_dir): the
#: DMSPress presses of PRESS_REGISTRY their --threshold, the DuoAttentionPress ones the head ratio
THRESHOLD_PRESSES = ("kvzap_linear", "kvzap_mlp")
HEAD_PRESSES = ("duo_attention", "duo_attention_on_the_fly")


def _literal(text: str) -> Any:
    """A Python literal (a needle depth: 50, [0, 50]), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


#: folder-name suffixes (get_results_dir) -> the setting each gives and its type
SUFFIXES: tuple[tuple[re.Pattern[str], str, Callable[[str], Any]], ...] = (
    (re.compile(r"fraction(\d*\.\d+)"), "fraction", float),
    (re.compile(r"max_context(\d+)"), "max_context_length", int),
    (re.compile(r"(query_aware|compressed_questions)"), "query_aware", bool),
    (re.compile(r"key_channel_cr(-?\d*\.\d+)"), "key_channel_compression_ratio", float),
    (re.compile(r"needle_depth(.+)"), "needle_depth", _literal),
)
#: what selects and renders a run's rows and decodes them: runs that agree on these share a control
GROUP = ("dataset", "data_dir", "model", "fraction", "seed", "max_context_length", "max_new_tokens")
GROUP_MORE = ("needle_depth", "fp8", "model_kwargs", "query_aware")
#: the settings a folder name does not give (unknown without config.yaml)
CONFIG_ONLY = (
    "seed",
    "max_new_tokens",
    "fp8",
    "model_kwargs",
    "compression_interval",
    "target_size",
    "hidden_states_buffer_size",
    "press_init_command",
)
#: config.yaml keys read into the settings (EvaluationConfig's fields; compress_questions before #168)
KNOWN_KEYS = (
    "dataset",
    "data_dir",
    "model",
    "press_name",
    "compression_ratio",
    "key_channel_compression_ratio",
    "head_compression_ratio",
    "threshold",
    "fraction",
    "max_new_tokens",
    "max_context_length",
    "query_aware",
    "compress_questions",
    "needle_depth",
    "compression_interval",
    "target_size",
    "hidden_states_buffer_size",
    "model_kwargs",
    "press_init_command",
    "seed",
    "fp8",
)
#: config.yaml keys that cannot change an answer: kept in the manifest only
IGNORED_KEYS = ("device", "output_dir", "log_level")
#: press settings in the cell identity (``press.<name>``), as the run states them
PRESS_FIELDS = (
    "key_channel_compression_ratio",
    "threshold",
    "head_compression_ratio",
    "compression_interval",
    "target_size",
    "hidden_states_buffer_size",
)

#: why a field every imported record leaves null is unknown
REASONS = {
    "references": "the row's reference column is absent, empty or unreadable in predictions.csv",
    "model_revision": "kvpress's config names the model id, not its revision",
    "seed": "no config.yaml: the folder name does not give the run's seed",
    "prompt_hash": "predictions.csv holds no prompt: kvpress drops the context column",
    "n_context_tokens": "predictions.csv holds no context (kvpress drops it) and no token counts",
    "n_question_tokens": "predictions.csv gives no token counts",
    "config_hash": "no kvx run configuration: the record was converted from a kvpress run folder",
    "token_ids": "kvpress saves the decoded answer only",
    "stop_reason": "kvpress does not record whether decoding stopped at EOS or at max_new_tokens",
}
FIELD_MAPPING = {
    "task": "the kvx task that scores the row: a task whose hub_id is the dataset's in kvpress's "
    "DATASET_REGISTRY (task.subset: the subset whose folder is the run's data_dir, the row's 'task' "
    "column among several); RULER without one: kvx's ruler_<row task>; none: kvpress_<dataset>, unsupported",
    "source_id": "<row task or dataset>-<sha256 of the control group's settings but the model, and of the "
    "row's columns but predicted_answer, compression_ratio and question (~<k>: the k-th equal row)>",
    "reader": "config model (the folder name's model with -- as /)",
    "compressor": "press_name, as kvx's compressor of that name (no_press: none)",
    "setting": "ratio: compression_ratio; none (the press's own fields fix it): no_press, a threshold "
    "(press.threshold), a DuoAttention head ratio (press.head_compression_ratio) or a DecodingPress run "
    "(no compression_ratio column); setting.ratio: the row's compression_ratio column where it is the "
    "kvpress ratio the press ran with",
    "cell.fields": "task.dataset, task.data_dir, task.fraction, task.needle_depth, the task's own fields "
    "(task.subset; a field the row has a column for, the row's: needle_depth), context_tokens (RULER's "
    "data_dir, the needle's max_context_length), max_new_tokens, reader.max_context_length, reader.fp8, "
    "reader.model_kwargs (without attn_implementation), press.kvpress_name, press.<every press setting>, "
    "press.attn_implementation, press.<config keys kvx does not know>, press.repeat (runs of one setting), "
    "query_aware ('question': kvpress's query-aware mode), seed",
    "full": "the control run's answer to the same row, scored by the same task",
    "references": "the row's answers / answer / needle column (a list as numpy prints it, else one string)",
    "split": "sha256 of the control run's settings and the task: one control group per control run and task",
    "status / reason": "supported when both answers are scored; unsupported when no kvx task scores the "
    "row (kvpress's answers kept in provenance.kvpress); error without a control, or a row kvx cannot read",
    "record files": "<run folder>/<task>.jsonl.gz: one folder (one sweep to the aggregate) per run",
}
CAVEATS = {
    "control across query_aware": "a run without a control of its own query-aware mode pairs with the "
    "no_press run of the other (kvpress's leaderboard.sh runs one no_press for both): a no_press model "
    "reads the same text either way; the record's method_parameter names the control's mode",
    "attn_implementation": "evaluate.py writes the attention it chose for the press (eager for "
    "observed_attention) into model_kwargs: it is a press field here and does not separate controls",
    "unverified pairing": "a run without config.yaml pairs with a control whose known settings agree; the "
    "settings neither says (seed, max_new_tokens, ...) are listed as unverified in the record",
    "metrics.json": "compared with kvx's mean of its per-row scores where kvpress's number is such a mean "
    "(RULER per task, LongBench, LongBench-v2, InfiniteBench, AIME25, MATH-500); both numbers are listed",
}
LEFT_OUT = {
    "context": "kvpress does not save it; prompt hashes and token counts are unknown",
    "device, output_dir, log_level": "cannot change an answer: in the manifest's run settings only",
    "press_init_command": "in setting.method_parameter (its text repeats the ratio), not the cell identity",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", type=Path, nargs="+", help="kvpress run folders, or folders holding them")
    parser.add_argument("--out", type=Path, required=True, help="new (or empty) folder for the records")
    parser.add_argument("--quiet", action="store_true", help="no summary lines")


# ----------------------------------------------------------------------------------------------- reading


class _ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load that reads a ``!!python/...`` node (an fp8 run's quantization config object
    in model_kwargs) as its tag instead of refusing the file or building the object."""


def _python_tag(loader: yaml.Loader, suffix: str, node: yaml.Node) -> str:
    return f"!!python/{suffix}"


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", _python_tag)


_LITERAL = re.compile(r"""\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*,?""", re.S)


def parse_list(text: str) -> list[str] | None:
    """A list of strings as pandas wrote it: numpy's print of an array (``['a' 'b']``, items apart by
    spaces or line breaks) or a Python list (``['a', 'b']``). None for any other text, a string
    scalar that happens to start with ``[`` (MATH-500's ``[-2,7]``) included."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body, items, at = text[1:-1], [], 0
    while body[at:].strip():
        match = _LITERAL.match(body, at)
        if match is None:
            return None
        items.append(str(ast.literal_eval(match.group(1))))
        at = match.end()
    return items


def value_of(text: str) -> Any:
    """A CSV cell as the dataset held it, as far as the text tells: a list of strings, an int, a float,
    None (empty: pandas writes None and NaN so), else the text."""
    if text == "":
        return None
    listed = parse_list(text)
    if listed is not None:
        return listed
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d*\.\d+(?:[eE][-+]?\d+)?", text):
        return float(text)
    return text


def _number(value: Any, where: str, name: str) -> float | None:
    if value is None:
        return None
    number = finite(value)
    if number is None:
        raise BadInput(f"{where}: {name} must be a number, not {value!r}")
    return number


def settings_from_name(name: str) -> dict[str, Any] | None:
    """The settings a folder name gives (get_results_dir's rule), None when it is not one. Suffixes
    absent from the name are their defaults (kvpress leaves them out exactly then)."""
    parts = name.split("__")
    found: dict[str, Any] = {
        "fraction": 1.0,
        "max_context_length": None,
        "query_aware": False,
        "key_channel_compression_ratio": None,
        "needle_depth": None,
    }
    while len(parts) > 4:
        for pattern, key, convert in SUFFIXES:
            match = pattern.fullmatch(parts[-1])
            if match:
                found[key] = convert(match.group(1))
                parts.pop()
                break
        else:
            break
    if len(parts) not in (4, 5) or not all(parts):
        return None
    dataset, *middle, model, press, slot = parts
    try:
        value = float(slot)
    except ValueError:
        return None
    found |= {
        "dataset": dataset,
        "data_dir": middle[0] if middle else None,
        "model": model.replace("--", "/"),
    }
    found |= {
        "press_name": press,
        "compression_ratio": None,
        "threshold": None,
        "head_compression_ratio": None,
    }
    slot_name = (
        "threshold"
        if press in THRESHOLD_PRESSES
        else "head_compression_ratio"
        if press in HEAD_PRESSES
        else "compression_ratio"
    )
    found[slot_name] = value
    return found


def settings_from_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The settings of a config.yaml (EvaluationConfig as saved by any kvpress since #96)."""
    for key in ("dataset", "model", "press_name"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise BadInput(f"{where}: {key!r} is missing or not a string")
    press = config["press_name"]
    out: dict[str, Any] = {key: config.get(key) for key in KNOWN_KEYS if key != "compress_questions"}
    out["data_dir"] = None if config.get("data_dir") in (None, "") else str(config["data_dir"])
    out["query_aware"] = bool(config.get("query_aware", config.get("compress_questions", False)))
    for key in ("compression_ratio", "key_channel_compression_ratio", "head_compression_ratio", "threshold"):
        out[key] = _number(config.get(key), where, key)
    out["fraction"] = _number(config.get("fraction", 1.0), where, "fraction")
    if press in HEAD_PRESSES and "head_compression_ratio" not in config:
        # kvpress before #229 set DuoAttention's head ratio from compression_ratio
        out["head_compression_ratio"], out["compression_ratio"] = out["compression_ratio"], None
    if press == NO_PRESS:
        out["compression_ratio"] = 0.0  # EvaluationConfig overrides it so
    out["model_kwargs"] = config.get("model_kwargs") or {}
    out["fp8"] = bool(config.get("fp8", False))
    return out


@dataclass
class Run:
    """One kvpress run folder, read."""

    folder: Path
    name: str  # the folder its records are written to
    settings: dict[str, Any]  # UNKNOWN where neither config.yaml nor the folder name says
    from_config: bool
    extra: dict[str, Any]  # config keys kvx does not know: kept in the cell identity
    columns: list[str] | None  # None: no predictions.csv
    rows: list[dict[str, str]]
    metrics: Any
    lacks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repeat: int | None = None  # the index among runs of one setting, when there are several

    @property
    def press(self) -> str:
        return str(self.settings["press_name"])

    @property
    def controls(self) -> bool:
        """A run that can be the FullCache control of its group: no_press, or nothing compressed."""
        return self.press == NO_PRESS or (self.kind() == "ratio" and self.settings["compression_ratio"] == 0)

    def kind(self) -> str:
        """How the setting was asked: "ratio", or "none" (the press's own fields fix what it keeps)."""
        s = self.settings
        if self.press == NO_PRESS or s["threshold"] is not None or s["head_compression_ratio"] is not None:
            return "none"
        if self.columns is not None and MEASURED not in self.columns:
            return "none"  # a DecodingPress run (evaluate.py writes no ratio column for them)
        return "ratio"

    def group(self) -> dict[str, Any]:
        """What must agree with a control's (GROUP, GROUP_MORE); model_kwargs without the attention
        evaluate.py chose for the press."""
        out = {key: self.settings[key] for key in (*GROUP, *GROUP_MORE)}
        kwargs = out["model_kwargs"]
        if isinstance(kwargs, dict):
            out["model_kwargs"] = {k: v for k, v in kwargs.items() if k != "attn_implementation"}
        return out

    def identity(self) -> str:
        """Every setting the run states: two runs of one identity are repeats of one cell."""
        return digest({"settings": _plain(self.settings), "extra": _plain(self.extra), "kind": self.kind()})

    @functools.cached_property
    def keys(self) -> list[str]:
        """Each row's identity: the hash of its columns but NOT_IDENTITY (lists compared as lists),
        ``~<k>`` on the k-th row of equal content (rows come in one order in every run of a dataset)."""
        seen: Counter = Counter()
        out = []
        for row in self.rows:
            key = digest({k: value_of(v) for k, v in sorted(row.items()) if k not in NOT_IDENTITY}, 16)
            seen[key] += 1
            out.append(key if seen[key] == 1 else f"{key}~{seen[key]}")
        return out

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Row identity -> row number."""
        return {key: i for i, key in enumerate(self.keys)}


def _plain(value: Any) -> Any:
    """JSON-able: a YAML value as text where JSON has no type for it."""
    return json.loads(json.dumps(value, default=str))


def _scalar(value: Any) -> str | int | float | bool | None:
    """A cell field value: scalars as they are, anything else as canonical JSON text."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(_plain(value), sort_keys=True, ensure_ascii=False)


def find_runs(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Run folders (any folder with predictions.csv, metrics.json or config.yaml) under each path, and
    the files beside them kvx does not read."""
    runs: list[Path] = []
    seen: set[Path] = set()
    skipped: list[str] = []
    for path in paths:
        if not path.exists():
            raise BadInput(f"{path}: no such file or directory")
        if not path.is_dir():
            raise BadInput(f"{path} is not a folder (give kvpress run folders or a folder holding them)")
        for folder in sorted({path, *(p for p in path.rglob("*") if p.is_dir())}):
            hidden = any(part.startswith(".") for part in folder.relative_to(path).parts)
            if hidden or folder.resolve() in seen:
                continue
            files = sorted(p for p in folder.iterdir() if p.is_file())
            legacy = [
                p
                for p in files
                if p.suffix == ".csv" and p.name != PREDICTIONS and len(p.stem.split("__")) >= 4
            ]
            if legacy:
                raise BadInput(
                    f"{legacy[0]}: a flat results file of kvpress before #96 (July 2025): it holds "
                    "predicted_answer only, no references to score against; re-run with kvpress's "
                    "evaluate.py since August 2025 (ab418ac), whose run folders this importer reads"
                )
            if any(p.name in RUN_FILES for p in files):
                runs.append(folder)
                seen.add(folder.resolve())
                skipped += [p.as_posix() for p in files if p.name not in RUN_FILES]
    if not runs:
        raise BadInput(f"no kvpress run folder ({', '.join(RUN_FILES)}) under {', '.join(map(str, paths))}")
    return runs, skipped


def read_run(folder: Path, name: str) -> Run:
    """One run folder: its settings (config.yaml, else the folder name), rows and metrics."""
    config_path, metrics_path, predictions_path = (folder / n for n in (CONFIG, METRICS, PREDICTIONS))
    label = folder.name if not folder.name.isdigit() else folder.parent.name  # a rerun: <name>/<i>/
    from_name = settings_from_name(label)
    lacks, notes, extra = [], [], {}
    if config_path.is_file():
        try:
            config = yaml.load(config_path.read_text(encoding="utf-8"), Loader=_ConfigLoader)  # noqa: S506
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise BadInput(f"{config_path}: not readable YAML ({exc.problem}{at})") from exc
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise BadInput(f"{config_path}: not readable YAML ({one_line(exc)})") from exc
        if not isinstance(config, dict):
            raise BadInput(f"{config_path}: not a mapping of EvaluationConfig's fields")
        settings = settings_from_config(config, str(config_path))
        extra = {k: v for k, v in config.items() if k not in KNOWN_KEYS and k not in IGNORED_KEYS}
        if from_name is not None:
            differ = [k for k, v in from_name.items() if _plain(v) != _plain(settings.get(k))]
            if differ:
                notes.append(
                    f"the folder name disagrees with config.yaml on {', '.join(differ)}: config.yaml read"
                )
        ignored = {k: config[k] for k in IGNORED_KEYS if k in config}
        if ignored:
            notes.append(f"not in the identity: {json.dumps(_plain(ignored), sort_keys=True)}")
    else:
        if from_name is None:
            raise BadInput(
                f"{folder}: no {CONFIG} and the folder name is not one kvpress's evaluate.py gives "
                "(<dataset>__<data_dir>__<model>__<press>__<ratio>[__...])"
            )
        lacks.append(f"{CONFIG}: settings read from the folder name; {', '.join(CONFIG_ONLY)} unknown")
        settings = from_name | {key: UNKNOWN for key in CONFIG_ONLY}
    metrics = None
    if metrics_path.is_file():
        try:
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"{metrics_path}: not readable JSON ({one_line(exc)})") from exc
    else:
        lacks.append(f"{METRICS}: kvpress's scores of the run are not compared")
    columns, rows = None, []
    if predictions_path.is_file():
        columns, rows = read_predictions(predictions_path)
    else:
        lacks.append(f"{PREDICTIONS}: no answers, nothing to import from this run")
    run = Run(folder, name, settings, config_path.is_file(), extra, columns, rows, metrics, lacks, notes)
    ratio = settings["compression_ratio"]
    if run.kind() == "ratio" and (ratio is None or not 0 <= ratio < 1):
        raise BadInput(f"{folder}: compression_ratio {ratio} is not a kvpress ratio in [0, 1)")
    return run


def read_predictions(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """predictions.csv as text (pandas reads the long multi-line answers the csv module limits)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise BadInput(f"{path}: not a CSV file kvpress's evaluate.py wrote ({one_line(exc)})") from exc
    columns = [str(c) for c in frame.columns]
    if ANSWER not in columns:
        raise BadInput(f"{path}: no {ANSWER!r} column (its columns: {', '.join(columns)})")
    if set(columns) <= {ANSWER, MEASURED}:
        raise BadInput(
            f"{path}: only {', '.join(columns)}: kvpress's evaluate.py before ab418ac (August 2025) saved "
            "no dataset columns, so these answers have no references to score against; re-run with a newer "
            "kvpress"
        )
    return columns, frame.to_dict("records")


# ------------------------------------------------------------------------------------------------ scoring


@dataclass
class Scorer:
    """The kvx task that scores one kind of kvpress row."""

    name: str  # its registry name
    task: Task
    fields: dict[str, Any]  # its identity fields (task.<field> in the cell identity)
    from_row: bool  # a kvpress task: it builds the source from the row itself (row_source)


def _configured(cls: type, subset: str, data_dir: str | None) -> Task | None:
    """A kvpress task class set to ``subset`` (and ``data_dir``, when it has that field) whose folder is
    the run's data_dir (any, for a run without one: kvpress read the dataset's root); None when that
    subset lives in another folder or the class refuses it."""
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    kwargs: dict[str, Any] = {"subset": subset}
    if "data_dir" in names and data_dir is not None:
        kwargs["data_dir"] = data_dir
    try:
        task = cls(**kwargs)
        folder = task.folder()  # type: ignore[attr-defined]
    except Exception:  # a subset or folder the class refuses: not this one
        return None
    return task if data_dir is None or folder == data_dir else None


class Scorers:
    """kvx's scorer of each kind of kvpress row (dataset, data_dir, row task), found once through the
    task registry; a string says why a kind has none."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str | None, str], Scorer | str] = {}

    def of(self, dataset: str, data_dir: str | None, row_task: str) -> Scorer | str:
        key = (dataset, data_dir, row_task)
        if key not in self._found:
            self._found[key] = self._find(*key)
        return self._found[key]

    def _find(self, dataset: str, data_dir: str | None, row_task: str) -> Scorer | str:
        hub = DATASETS.get(dataset)
        tasks = registry("task")
        matches: list[Scorer] = []
        for entry in tasks.entries if hub is not None else []:
            try:
                cls = entry.load()
            except RegistryError:  # a broken plugin scores nothing here; python -m kvx.plugins shows it
                continue
            if getattr(cls, "hub_id", None) != hub or not hasattr(cls, "row_source"):
                continue
            fitting = [(s, t) for s in getattr(cls, "subsets", ("",)) if (t := _configured(cls, s, data_dir))]
            chosen = [(s, t) for s, t in fitting if s == row_task] or fitting
            if len(chosen) == 1:
                name = entry.name if entry.dist == BUILTIN_DIST else entry.qualified
                matches.append(Scorer(name, chosen[0][1], fields_of(chosen[0][1]), True))
        if len(matches) > 1:  # two benchmarks on one hub id (LongBench, LongBench-E): the one named so
            matches = [m for m in matches if getattr(m.task, "benchmark", None) == dataset.replace("-", "_")]
            if len(matches) != 1:
                return f"more than one kvx task scores kvpress {dataset} rows of data_dir {data_dir}"
        if matches:
            return matches[0]
        if dataset == "ruler" and row_task:  # kvx's own RULER tasks score with RULER's string match
            with contextlib.suppress(RegistryError):
                return Scorer(f"ruler_{row_task}", tasks.get(f"ruler_{row_task}")(), {}, False)
        if hub is None:
            return f"kvpress dataset {dataset!r} is not in kvpress's DATASET_REGISTRY as kvx knows it"
        what = f" of {row_task or data_dir}" if row_task or data_dir else ""
        return (
            f"no kvx task scores kvpress {dataset} rows{what} (none declares hub_id {hub!r} with that subset)"
        )


def references_of(row: dict[str, str]) -> list[str] | str:
    """The row's references (empty when the file has no reference column, or it is empty), or why they
    cannot be read."""
    column = next((c for c in REFERENCE_COLUMNS if c in row), None)
    if column is None or row[column] == "":
        return []
    text = row[column]
    listed = parse_list(text)
    if listed is not None:
        return listed
    if text.lstrip().startswith(("['", '["')):
        return f"the {column!r} column is not a list numpy printed whole ({text[:60]!r}...)"
    return [text]


@dataclass
class Scored:
    """One row's answer as kvx scores it: the task (or why none scores it), references and answer."""

    scorer: Scorer | str
    references: list[str]
    answer: Answer | None
    problem: str  # why the answer is not scored ("" when it is)


def score_row(scorer: Scorer | str, row: dict[str, str], name: str) -> Scored:
    """Score the row's predicted answer with its task (``name``: the source id the task sees)."""
    refs = references_of(row)
    if isinstance(refs, str):
        return Scored(scorer, [], None, refs)
    if isinstance(scorer, str):
        return Scored(scorer, refs, None, scorer)
    if not refs:
        return Scored(scorer, refs, None, f"no reference to score against ({REASONS['references']})")
    try:
        if scorer.from_row:
            values = {k: v if k in TEXT_COLUMNS else value_of(v) for k, v in row.items()}
            column = next(c for c in REFERENCE_COLUMNS if c in row)
            values[column] = parse_list(row[column]) or row[column]
            source = scorer.task.row_source(0, values | {"context": ""}, _no_tokens)  # type: ignore[attr-defined]
        else:
            source = Source(
                id=name,
                context="",
                question=row.get("question", ""),
                answers=refs,
                answer_prefix=row.get("answer_prefix", ""),
            )
        score = scorer.task.evaluate(row[ANSWER], source)
    except Exception as exc:  # a task failing on one row is that row's error, never the import's end
        return Scored(
            scorer,
            refs,
            None,
            f"kvx task {scorer.name} could not score it: {type(exc).__name__}: {one_line(exc)}",
        )
    answer = Answer(
        output=row[ANSWER],
        normalized=score.normalized,
        score=float(score.value),
        correct=bool(score.correct),
        token_ids=None,
        stop_reason=None,
        metrics=dict(score.metrics),
        details=dict(score.details),
    )
    return Scored(scorer, refs, answer, "")


def _no_tokens(text: str) -> int:
    """predictions.csv keeps no context, so a kvpress task's source counts no prompt tokens."""
    return 0


# ----------------------------------------------------------------------------------------------- pairing


def control_for(run: Run, runs: list[Run]) -> tuple[Run | None, list[str], str]:
    """The run's FullCache control, the settings the pairing could not check, and why there is none.

    A candidate is a control-capable run whose group agrees with the run's on every setting both
    state (query_aware may differ: kvpress's leaderboard pairs its query-aware runs with its one
    no_press run). Preferred, in order: one with predictions, the same query_aware, no_press over a
    ratio-0 run, fewer unverified settings, then the first folder; equal preferences between runs of
    other settings are ambiguous."""
    mine = run.group()
    ranked = []
    for other in runs:
        if not other.controls:
            continue
        theirs = other.group()
        unverified, differ = [], False
        for key, value in mine.items():
            if key == "query_aware":
                continue
            if UNKNOWN in (value, theirs[key]):
                unverified.append(key)
            elif _plain(value) != _plain(theirs[key]):
                differ = True
        if not differ:
            rank = (
                other.columns is None,
                theirs["query_aware"] != mine["query_aware"],
                other.press != NO_PRESS,
            )
            ranked.append(((*rank, len(unverified)), str(other.folder), other, unverified))
    if not ranked:
        what = ", ".join(f"{k}={mine[k]}" for k in ("dataset", "data_dir", "model"))
        return (
            None,
            [],
            f"no no_press run (or ratio-0 run) of {what} with the same settings among the folders read",
        )
    ranked.sort(key=lambda item: item[:2])
    rank, _, best, unverified = ranked[0]
    rivals = [o.name for r, _, o, _ in ranked if r == rank and o.group() != best.group()]
    if rivals:
        return (
            None,
            [],
            f"more than one control could pair ({', '.join([best.name, *rivals])}): their settings differ",
        )
    return best, unverified, ""


# ------------------------------------------------------------------------------------------------ writing


@dataclass
class Counts:
    records: int = 0
    controls: int = 0
    status: Counter = field(default_factory=Counter)
    tasks: Counter = field(default_factory=Counter)  # kvx task -> records
    unscored: Counter = field(default_factory=Counter)  # reason -> records
    unknown: Counter = field(default_factory=Counter)  # (field, reason) -> records


@dataclass
class Converter:
    out: Path
    runs: list[Run]
    scorers: Scorers = field(default_factory=Scorers)
    counts: Counts = field(default_factory=Counts)
    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: split -> source_id -> control ledger entry
    ledgers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: run name -> its role, control, records and the check of its metrics.json
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (run name, row index) -> the row scored (a control's rows are scored once for every run)
    _scored: dict[tuple[str, int], Scored] = field(default_factory=dict)
    #: (run name, task, its fields) -> the cell's flat fields, its id and its split
    _cells: dict[str, tuple[dict[str, Any], str, str]] = field(default_factory=dict)

    def scored(self, run: Run, index: int) -> Scored:
        if (run.name, index) not in self._scored:
            row, s = run.rows[index], run.settings
            scorer = self.scorers.of(s["dataset"], s["data_dir"], row.get("task", ""))
            self._scored[(run.name, index)] = score_row(scorer, row, f"{run.name}:{index}")
        return self._scored[(run.name, index)]

    def convert(self, run: Run) -> None:
        control, unverified, why = control_for(run, self.runs)
        report = self.reports.setdefault(run.name, {})
        if control is run:
            report |= {"role": "control", "metrics_check": self.check_metrics(run)}
            return
        report |= {
            "role": "compressed",
            "control": control.name if control else None,
            "control_reason": why or None,
            "control_unverified": unverified,
        }
        writers: dict[str, JsonlGzWriter] = {}
        statuses: Counter = Counter()
        try:
            for index in range(len(run.rows)):
                data = self.record(run, index, control, unverified, why)
                statuses[data["status"]] += 1
                self.emit(data, run, writers)
        finally:
            for name, writer in writers.items():
                writer.close()
                self.written[name] = {"kind": "records", "rows": writer.count}
        report |= {"records": dict(sorted(statuses.items())), "metrics_check": self.check_metrics(run)}

    def control_answer(
        self, run: Run, index: int, control: Run | None, why: str
    ) -> tuple[Answer | None, str]:
        """The control's scored answer to the run's row, or why there is none."""
        if control is None:
            return None, why
        if control.columns is None:
            return None, f"control run {control.name} has no {PREDICTIONS}"
        theirs = control.index.get(run.keys[index])
        if theirs is None:
            return None, f"control run {control.name} has no row of this content"
        asked, control_asked = run.rows[index].get("question"), control.rows[theirs].get("question")
        if asked and control_asked and asked != control_asked:
            return None, f"control run {control.name}'s row of this content asks another question"
        scored = self.scored(control, theirs)
        return scored.answer, "" if scored.answer else f"its answer is not scored: {scored.problem}"

    def record(
        self, run: Run, index: int, control: Run | None, unverified: list[str], why: str
    ) -> dict[str, Any]:
        s, row, own = run.settings, run.rows[index], self.scored(run, index)
        row_task = row.get("task", "")
        if isinstance(
            own.scorer, Scorer
        ):  # a task field the row has a column for is the row's (needle_depth)
            task, family = own.scorer.name, getattr(own.scorer.task, "family", None)
            task_fields = {k: value_of(row[k]) if k in row else v for k, v in own.scorer.fields.items()}
        else:
            task, task_fields, family = f"kvpress_{s['dataset'].replace('-', '_')}", {}, None
            task_fields = {"subset": row_task or s["data_dir"] or ""}
        group = {k: v for k, v in (control or run).group().items() if k != "model"}
        source_id = (
            f"{row_task or s['dataset']}-{digest({'group': _plain(group), 'row': run.keys[index]}, 12)}"
        )
        fields, cell_id, split = self.cell(run, task, task_fields, control)
        seed = s["seed"] if isinstance(s["seed"], int) and not isinstance(s["seed"], bool) else None
        at = f"ratio={fields['setting.value']:g}" if fields["setting.kind"] == "ratio" else "none"
        params: dict[str, Any] = {"kvpress_name": run.press, "press_init_command": s["press_init_command"]}
        measured = finite(value_of(row[MEASURED])) if MEASURED in row else None
        if measured is not None:
            params["measured_compression_ratio"] = measured
        if control is not None:
            params |= {"control": control.name, "control_query_aware": control.settings["query_aware"]}
            if unverified:
                params["control_unverified"] = unverified
        record = Record(
            key=f"{task}/{source_id}/{s['model']}@unknown/{fields['press']}/{at}/seed={fields['seed']}/{cell_id}",
            status=SUPPORTED,
            reason="",
            task=task,
            source_id=source_id,
            references=own.references or None,
            reader=str(s["model"]),
            model_revision=None,
            compressor=fields["press"],
            seed=seed,
            setting=self.setting(run, measured) | {"method_parameter": params},
            prompt_hash=None,
            n_context_tokens=None,
            n_question_tokens=None,
            config_hash=None,
            cell={"id": cell_id, "fields": fields},
            versions={"kvx": __version__},
            split=split,
            task_family=family,
            provenance={"origin": "external", "source": f"{NAME}:{run.name}", "unknown": {}},
        )
        kept: dict[str, Any] = {"folder": run.name, "row": index}
        full, missing = self.control_answer(run, index, control, why)
        record.full = full
        if isinstance(own.scorer, str):
            record.fail(UNSUPPORTED, own.scorer)
            self.counts.unscored[own.scorer] += 1
            kept["predicted_answer"] = row[ANSWER]  # unscored answers stay in the record
            if control is not None and run.keys[index] in control.index:
                kept["control_predicted_answer"] = control.rows[control.index[run.keys[index]]][ANSWER]
        elif own.answer is None:
            record.fail(ERROR, own.problem)
        elif full is None:
            record.fail(ERROR, f"no FullCache control: {missing}")
        else:
            record.pair(full, own.answer)
            entry = {"source_id": source_id, "prompt_hash": None, **full.to_dict()}
            self.ledgers.setdefault(str(record.split), {})[source_id] = entry
        record.provenance["unknown"] = unknown_nulls(record, REASONS)  # type: ignore[index]
        record.provenance["kvpress"] = kept  # type: ignore[index]
        data = record.to_dict()
        if set(unknown_fields(data)) != set(record.provenance["unknown"]):  # type: ignore[index]
            raise RuntimeError(f"{record.key}: unknown fields and their reasons disagree")  # an importer bug
        return data

    def cell(
        self, run: Run, task: str, task_fields: dict[str, Any], control: Run | None
    ) -> tuple[dict[str, Any], str, str]:
        """The cell's flat fields, id and split (its control run's group for one task), once per cell."""
        key = json.dumps([run.name, task, _plain(task_fields)], sort_keys=True)
        if key not in self._cells:
            fields = self.cell_fields(run, task, task_fields)
            split = {
                "origin": NAME,
                "control": (control or run).identity(),
                "task": task,
                "fields": _plain(task_fields),
            }
            self._cells[key] = (fields, digest(fields), digest(split, 64))
        return self._cells[key]

    def setting(self, run: Run, measured: float | None) -> dict[str, Any]:
        """kind, value, the kvpress ratio the press ran with and the share kept."""
        if run.kind() == "ratio":
            ratio = run.settings["compression_ratio"]
            return {"kind": "ratio", "value": ratio, "ratio": ratio, "retained_share": 1.0 - ratio}
        if run.press == NO_PRESS:
            return {"kind": "none", "value": None, "ratio": 0.0, "retained_share": 1.0}
        ran = measured if measured is not None and 0 <= measured < 1 else None  # DMS, DuoAttention
        return {
            "kind": "none",
            "value": None,
            "ratio": 0.0 if ran is None else ran,
            "retained_share": None if ran is None else 1.0 - ran,
        }

    def cell_fields(self, run: Run, task: str, task_fields: dict[str, Any]) -> dict[str, Any]:
        """Everything the run states, flat: two settings are never one cell (press.* compared within
        one press, task.* within one task, reader.* within one model)."""
        s = run.settings
        kwargs = s["model_kwargs"]
        kind = run.kind()
        fields: dict[str, Any] = {
            "origin": NAME,
            "task": task,
            "task.dataset": s["dataset"],
            "task.data_dir": s["data_dir"],
            "task.fraction": s["fraction"],
            "task.needle_depth": _scalar(s["needle_depth"]),
            **{f"task.{k}": _scalar(v) for k, v in sorted(task_fields.items())},  # the row's, over the run's
            "max_new_tokens": _scalar(s["max_new_tokens"]),
            "reader": str(s["model"]),
            "reader.max_context_length": s["max_context_length"],
            "reader.fp8": s["fp8"],
            "reader.model_kwargs": _scalar(run.group()["model_kwargs"]),
            "press": compressor_name(run.press),
            "press.kvpress_name": run.press,
            **{f"press.{k}": _scalar(s[k]) for k in PRESS_FIELDS},
            "press.attn_implementation": _scalar(
                kwargs.get("attn_implementation") if isinstance(kwargs, dict) else kwargs
            ),
            **{f"press.{k}": _scalar(v) for k, v in sorted(run.extra.items())},
            "query_aware": "question" if s["query_aware"] else False,
            "seed": _scalar(s["seed"]),
            "setting.kind": kind,
            "setting.value": s["compression_ratio"] if kind == "ratio" else None,
        }
        if s["dataset"] == "ruler" and str(s["data_dir"]).isdigit():
            fields["context_tokens"] = int(s["data_dir"])  # kvpress's RULER folders are context lengths
        elif s["dataset"] == "needle_in_haystack":
            fields["context_tokens"] = s["max_context_length"]  # the haystack is cut to it
        if kind == "none" and MEASURED not in (run.columns or []):
            fields["press.compression_ratio"] = _scalar(s["compression_ratio"])  # a DecodingPress: unused
        if run.repeat is not None:
            fields["press.repeat"] = run.repeat
        return fields

    def emit(self, data: dict[str, Any], run: Run, writers: dict[str, JsonlGzWriter]) -> None:
        """Each run's records in a folder of their own: the aggregate checks each folder as one sweep."""
        if not is_valid(data):  # an importer bug: every field was checked on reading
            validate(data)
        name = f"{run.name}/{data['task']}{RECORDS_SUFFIX}"
        if name not in writers:
            (self.out / run.name).mkdir(parents=True, exist_ok=True)
            writers[name] = JsonlGzWriter(self.out / name)
        writers[name].write_line(dumps([data]))
        c = self.counts
        c.records += 1
        c.status[data["status"]] += 1
        c.tasks[data["task"]] += 1
        for path, reason in data["provenance"]["unknown"].items():
            c.unknown[(path, reason)] += 1

    def write_ledgers(self) -> None:
        for split, entries in sorted(self.ledgers.items()):
            writer = JsonlGzWriter(self.out / f"{split}{CONTROLS_SUFFIX}")
            for _, entry in sorted(entries.items()):
                writer.write(entry)
            writer.close()
            self.counts.controls += writer.count
            self.written[writer.path.name] = {"kind": "controls", "split": split, "rows": writer.count}

    def check_metrics(self, run: Run) -> list[dict[str, Any]] | str:
        """kvpress's metrics.json against kvx's mean of its per-row scores, where kvpress's number is
        such a mean: both numbers, or why the file is not compared."""
        if run.metrics is None:
            return f"no {METRICS}"
        stated = stated_means(str(run.settings["dataset"]), run.metrics)
        if isinstance(stated, str):
            return stated
        out = []
        for group, (number, scale) in sorted(stated.items()):
            rows = [i for i, row in enumerate(run.rows) if group in ("", row.get("task", ""))]
            answers = [self.scored(run, i).answer for i in rows]
            entry: dict[str, Any] = {"group": group or "all", "stated": number, "rows": len(rows)}
            scores = [a.score for a in answers if a is not None]
            if not rows or len(scores) < len(rows):
                entry |= {"kvx": None, "reason": f"{len(rows) - len(scores)} of {len(rows)} rows not scored"}
            else:
                mine = scale * sum(scores) / len(scores)
                tolerance = 0.005 + 1e-9 if scale == 100 else 1e-9  # kvpress rounds percentages to 2 places
                entry |= {"kvx": round(mine, 6), "agrees": abs(mine - number) <= tolerance}
            out.append(entry)
        return out

    def report_of(self, run: Run) -> dict[str, Any]:
        files = {
            name: {"bytes": (run.folder / name).stat().st_size, "sha256": sha256_file(run.folder / name)}
            for name in RUN_FILES
            if (run.folder / name).is_file()
        }
        return {
            "folder": str(run.folder),
            "name": run.name,
            "settings_from": CONFIG if run.from_config else "folder name",
            "settings": _plain(run.settings),
            "config_keys_kvx_does_not_know": _plain(run.extra),
            "kind": run.kind(),
            "repeat": run.repeat,
            "rows": len(run.rows),
            "files": files,
            "lacks": run.lacks,
            "notes": run.notes,
            **self.reports.get(run.name, {"role": "no predictions"}),
        }


def stated_means(dataset: str, metrics: Any) -> dict[str, tuple[float, float]] | str:
    """kvpress's numbers that are means of one per-row score (each benchmark's calculate_metrics): row
    task ("" for every row) -> (stated value, scale), or why the file is not compared."""
    if dataset == "ruler" and isinstance(metrics, dict):
        out = {}
        for task, value in metrics.items():
            number = finite(value.get("string_match")) if isinstance(value, dict) else None
            if number is not None:
                out[task] = (number, 100.0)
        return out or "no string_match per task in RULER's metrics.json"
    number = finite(metrics)
    if dataset == "longbench" and number is not None:
        return {"": (number, 100.0)}
    if dataset == "infinitebench" and number is not None:
        return {"": (number, 1.0)}
    named = {"aime25": "accuracy", "math500": "accuracy", "longbench-v2": "average"}.get(dataset)
    if named and isinstance(metrics, dict) and finite(metrics.get(named)) is not None:
        return {"": (float(metrics[named]), 1.0)}
    return f"kvpress's {dataset} {METRICS} is not a mean of one per-row score kvx recomputes"


def compressor_name(press: str) -> str:
    """kvx's compressor of a kvpress press: the same name (kvx follows PRESS_REGISTRY), spelled as kvx
    does when only the case differs; no_press is kvx's none."""
    if press == NO_PRESS:
        return "none"
    names = registry("compressor").names()
    if press in names:
        return press
    return next((n for n in names if n.lower() == press.lower()), press)


# -------------------------------------------------------------------------------------------- reporting


def out_names(folders: list[Path]) -> list[str]:
    """A unique output folder per run: its name (a rerun ``<name>/<i>`` as ``<name>~<i>``)."""
    names: list[str] = []
    for folder in folders:
        base = f"{folder.parent.name}~{folder.name}" if folder.name.isdigit() else folder.name
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}+{k}"
        names.append(name)
    return names


def mark_repeats(runs: list[Run]) -> None:
    """Runs of one identity are repeats of one cell: each gets its index (press.repeat)."""
    by: dict[str, list[Run]] = {}
    for run in runs:
        by.setdefault(run.identity(), []).append(run)
    for group in by.values():
        if len(group) > 1:
            for i, run in enumerate(group):
                run.repeat = i


def manifest(conv: Converter, paths: list[Path], skipped: list[str], seconds: float) -> dict[str, Any]:
    c = conv.counts
    return {
        **manifest_head(NAME, seconds),
        "inputs": [str(p.resolve()) for p in paths],
        "runs": [conv.report_of(run) for run in conv.runs],
        "files_skipped": skipped,
        "files_written": [{"path": name, **info} for name, info in sorted(conv.written.items())],
        "counts": {
            "runs": len(conv.runs),
            "records": c.records,
            "controls": c.controls,
            "by_status": dict(sorted(c.status.items())),
            "by_task": dict(sorted(c.tasks.items())),
            "unscored": dict(sorted(c.unscored.items())),
        },
        "metrics_differ": differences(conv),
        "field_mapping": FIELD_MAPPING,
        "unknown": unknown_summary(c.unknown),
        "caveats": CAVEATS,
        "left_out": LEFT_OUT,
    }


def differences(conv: Converter) -> list[str]:
    out = []
    for name, report in sorted(conv.reports.items()):
        checks = report.get("metrics_check")
        for check in checks if isinstance(checks, list) else []:
            if check.get("agrees") is False:
                out.append(
                    f"{name}: {check['group']} {check['stated']} in metrics.json, {check['kvx']} by kvx"
                )
    return out


def summary_lines(conv: Converter, out: Path) -> Iterator[str]:
    c = conv.counts
    status = ", ".join(f"{n} {s}" for s, n in sorted(c.status.items())) or "none"
    roles = Counter(conv.reports.get(r.name, {}).get("role", "no rows") for r in conv.runs)
    yield f"kvx.importers: {NAME} -> {out}"
    yield f"  runs: {len(conv.runs)} ({', '.join(f'{n} {r}' for r, n in sorted(roles.items()))})"
    yield f"  records: {c.records} ({status}); {c.controls} control answers in ledgers"
    for reason, n in sorted(c.unscored.items()):
        yield f"  not scored ({n} records): {reason}"
    without = sum(1 for r in conv.reports.values() if r.get("role") == "compressed" and not r.get("control"))
    if without:
        yield f"  runs without a FullCache control: {without} (their records are errors; see the manifest)"
    lacking = sum(1 for r in conv.runs if r.lacks)
    if lacking:
        yield f"  runs lacking files: {lacking} (listed in the manifest)"
    for difference in differences(conv)[:5]:
        yield f"  differs from kvpress's metrics.json: {difference}"
    names = [path for path in UNKNOWABLE if any(name == path for name, _ in c.unknown)]
    yield "  unknown (null, reason in provenance.unknown): " + (", ".join(names) or "none")
    yield f"  manifest: {out / MANIFEST}"
    yield f"  next: python -m kvx.aggregate --records {out}"


# ------------------------------------------------------------------------------------------------- entry


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    folders, skipped = find_runs(args.paths)
    runs = [read_run(folder, name) for folder, name in zip(folders, out_names(folders), strict=True)]
    mark_repeats(runs)
    out: Path = args.out
    with staged(out) as tmp:
        conv = Converter(tmp, runs)
        for each in runs:
            if each.columns is not None:
                conv.convert(each)
        conv.write_ledgers()
        data = manifest(conv, args.paths, skipped, time.perf_counter() - started)
        (tmp / MANIFEST).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.quiet:
        for line in summary_lines(conv, out):
            print(line, file=sys.stdout)
    return 0
