"""The commands the README and docs/ show, found the way a reader finds them, with what each needs.

What counts as a command:

* in a fenced block whose language is ``bash``, ``sh``, ``shell`` or ``console``, every logical line
  (``\\`` continuations joined, a heredoc's body kept with its line, a ``$ `` prompt dropped) that is
  not blank, not a comment and not only a variable assignment (``NAME=value``, ``export NAME=value``:
  kept as the block's variables, which later lines expand); a trailing `` # comment`` is not part of it;
* in prose and tables, an inline code span whose first word, after any ``NAME=value`` prefixes, is a
  program (:data:`PROGRAMS`, or a path under ``.venv/bin/``) followed by at least one argument, and
  for ``python -m`` a module: ``python -m kvx.aggregate`` is a command, ``python -m``,
  ``.venv/bin/python``, ``lint-imports`` or ``task.path=...`` alone are names or fragments;
* a ``&&`` chain is one command per part, each at the chain's line.

What a command needs, when a test cannot run it here, is written where the reader sees it: ``needs:``
and a comma-separated list from :data:`NEEDS` (``data:NAME`` with NAME from :data:`DATA`). In a block,
a comment line holding it covers the commands after it (up to the next blank or comment line) and a
trailing comment covers its own line; outside blocks, written outside inline code, it covers the
inline commands of its table row or paragraph. A word after ``needs:`` outside the vocabulary is an
error, so a typo cannot pass for a mark.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELLS = ("bash", "sh", "shell", "console")
PROGRAMS = frozenset(
    {"python", "python3", "mlflow", "bash", "pip", "mkdocs", "kvx", "git", "source", "vllm", "ruff"}
)

#: what a documented command may need that a test on a 2-core CPU without credentials does not have
NEEDS = {
    "gpu": "a CUDA GPU",
    "hub": "models from the Hugging Face hub",
    "api-key": "a hosted API's key",
    "server": "an OpenAI-compatible model server",
    "network": "the internet beyond PyPI",
    "pypi": "installing packages from PyPI",
    "postgres": "PostgreSQL's server binaries",
    "bwrap": "bubblewrap, the sandbox model-written code runs in",
    "plugin": "a plugin installed beside kvx",
    "slurm": "a Slurm cluster",
    "long": "longer than a test may take on a 2-core CPU (full sizes: minutes to days)",
    "files": "files of your own (the capitalised or ... placeholders)",
}
#: public data kvx does not ship, each from where the page says
DATA = frozenset(
    {
        "SGD",
        "MultiWOZ",
        "TPBench",
        "KVDiagnosis",
        "Qasper",
        "HotpotQA",
        "ragscale",
        "LongMemEval",
        "AnswerEquivalence",
    }
)
MARK = re.compile(r"\bneeds: ([a-z][a-z-]*(?::[A-Za-z0-9_-]+)?(?:, [a-z][a-z-]*(?::[A-Za-z0-9_-]+)?)*)")
FENCE = re.compile(r"^```\s*(\S*)")
INLINE = re.compile(r"`([^`]+)`")
ASSIGN = re.compile(r"^(?:export )?[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S*)$")


@dataclass(frozen=True)
class Command:
    page: str  #: relative to the repository root
    line: int
    text: str  #: as documented (continuations joined, trailing comment dropped)
    needs: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = field(default=(), compare=False)  #: the block's, so far

    def where(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def marks(text: str) -> tuple[str, ...]:
    """The needs marked in ``text``; raises ValueError on a word outside the vocabulary."""
    found: list[str] = []
    for match in MARK.finditer(text):
        for need in match.group(1).split(", "):
            kind, _, name = need.partition(":")
            if kind not in NEEDS and not (kind == "data" and name in DATA):
                raise ValueError(
                    f"unknown need {need!r} (known: {', '.join(NEEDS)}, data:<{'|'.join(sorted(DATA))}>)"
                )
            found.append(need)
    return tuple(found)


def split_comment(line: str) -> tuple[str, str]:
    """(code, trailing comment) of a shell line; a ``#`` starts a comment after a blank, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def chain(text: str) -> list[str]:
    """The parts of a ``&&`` chain (outside quotes)."""
    parts, quote, start = [], "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif text.startswith(" && ", i):
            parts.append(text[start:i].strip())
            start = i + 4
    return [*parts, text[start:].strip()]


def is_inline_command(span: str) -> bool:
    words = span.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if len(words) < 2:
        return False
    program = words[0]
    if not (program in PROGRAMS or program.startswith(".venv/bin/")):
        return False
    return not (Path(program).name.startswith("python") and words[1] == "-m" and len(words) < 3)


def block_commands(page: str, first: int, lines: list[str]) -> list[Command]:
    """The commands of a shell block whose first body line is line ``first`` of the page."""
    out: list[Command] = []
    variables: dict[str, str] = {}
    stanza: tuple[str, ...] = ()
    i = 0
    while i < len(lines):
        start, raw = first + i, lines[i]
        if not raw.strip():
            stanza = ()
            i += 1
            continue
        code, comment = split_comment(raw.removeprefix("$ "))
        while code.endswith("\\") and i + 1 < len(lines):
            i += 1
            more, extra = split_comment(lines[i])
            code, comment = f"{code[:-1].rstrip()} {more.strip()}", comment + extra
        heredoc = re.search(r"<<-?'?(\w+)'?", code)
        if heredoc:
            body = []
            while i + 1 < len(lines) and lines[i + 1].strip() != heredoc.group(1):
                i += 1
                body.append(lines[i])
            i += 1
            code = "\n".join([code, *body, heredoc.group(1)])
        i += 1
        if not code:
            stanza = marks(comment)  # a comment line starts a new stanza's marks
            continue
        if ASSIGN.match(code):
            name, _, value = code.removeprefix("export ").partition("=")
            variables[name] = shlex.split(value)[0] if value else ""
            continue
        needs = stanza + marks(comment)
        for part in chain(code):
            out.append(Command(page, start, part, needs, tuple(variables.items())))
    return out


def page_commands(path: Path) -> list[Command]:
    """Every command of one Markdown page, in page order."""
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Command] = []
    i = 0
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        table = paragraph and paragraph[0][1].lstrip().startswith("|")
        units = [[row] for row in paragraph] if table else [paragraph]
        for unit in units:
            text = "\n".join(line for _, line in unit)
            needs = marks(" ".join(INLINE.sub("", text).split()))  # a mark is prose, not code
            for match in INLINE.finditer(text):
                span, number = (
                    " ".join(match.group(1).split()),
                    unit[0][0] + text.count("\n", 0, match.start()),
                )
                if is_inline_command(span):
                    out.extend(Command(page, number, part, needs) for part in chain(span))
        paragraph.clear()

    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            flush()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            if fence.group(1) in SHELLS:
                out.extend(block_commands(page, i + 2, lines[i + 1 : end]))
            i = end + 1
            continue
        if lines[i].strip():
            paragraph.append((i + 1, lines[i]))
        else:
            flush()
        i += 1
    flush()
    return out


def inventory(pages: list[Path] = PAGES) -> list[Command]:
    return [command for path in pages for command in page_commands(path)]


def argv(command: Command) -> list[str]:
    """The command's words as the shell passes them: the block's variables expanded, ``<...>``
    placeholders one word each."""
    text = re.sub(r"<([^<>]+)>", lambda m: m.group(1).replace(" ", "_").upper(), command.text)
    for name, value in sorted(command.variables, key=lambda nv: -len(nv[0])):
        text = text.replace(f"${name}", value)
    return shlex.split(text)


if __name__ == "__main__":  # the inventory, per page
    from collections import Counter

    found = inventory()
    for command in found:
        print(command.where(), f"[needs: {', '.join(command.needs)}]" if command.needs else "")
    for page, count in Counter(c.page for c in found).items():
        print(f"{count:4d}  {page}")
    print(f"{len(found):4d}  commands")
