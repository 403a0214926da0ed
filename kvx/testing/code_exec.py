"""One HumanEval-style problem made by hand and an executor that runs nothing, for the code_exec task
and the tasks built on it: a test scores a prediction without running a program."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvx.core.source import Source

PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TEST = "\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n"
BODY = "    return sum(xs)\n"
SOURCE = Source(
    id="HumanEval_x",
    context=PROMPT,
    question="q",
    answers=[BODY],
    metadata={"task_id": "HumanEval/x", "entry_point": "total", "test": TEST, "prompt": PROMPT},
)


@dataclass(frozen=True)
class FakeOutcome:
    """What ``FakeExecutor.run`` returns: the fields of an executor's outcome."""

    status: str
    reason: str
    seconds: float = 0.25
    exit_code: int | None = None
    isolation: tuple[str, ...] = ("tempdir", "rlimits")


@dataclass
class FakeExecutor:
    """Same ``run`` as ``kvx.tasks.executor.Executor``; records the programs it is given."""

    status: str
    programs: list[str] = field(default_factory=list)

    def run(self, program: str) -> FakeOutcome:
        self.programs.append(program)
        return FakeOutcome(self.status, f"{self.status} reason", exit_code=0 if self.status == "pass" else 1)
