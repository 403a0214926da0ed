"""code_exec: code extraction, program assembly, edit_sim, outcome scoring and the opt-in gate."""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.code_exec import CodeExec, assemble, completion_code, edit_sim, extract_code, load_problems
from kvx.testing.code_exec import BODY, PROMPT, SOURCE, TEST, FakeExecutor


def words(text: str) -> int:
    return len(text.split())


def task_with(status: str) -> tuple[CodeExec, FakeExecutor]:
    task, fake = CodeExec(), FakeExecutor(status)
    task._executor, task._enabled_by = fake, "env"  # what ``executor()`` would have built
    return task, fake


@pytest.mark.parametrize(
    ("output", "code"),
    [
        ("Here you go:\n```python\ndef f():\n    pass\n```\nDone.", "def f():\n    pass\n"),
        ("```\n    return 1\n```", "    return 1\n"),
        ("```py\nx = 1\n```\n```python\ny = 2\n```", "x = 1\n"),  # the first block only
        ("```python\ndef f():\n    return [", "def f():\n    return ["),  # cut off by the token budget
        ("    return 1\n\nsome prose", "    return 1\n\nsome prose"),  # no fence: verbatim
        ("def f():\n    pass\n```\nUsage:\n```python\nf()\n```", "def f():\n    pass\n"),  # no opening fence
        ("```python\nf()\n```\n```python\ndef f():\n    pass\n```", "def f():\n    pass\n"),  # the def wins
    ],
)
def test_extract_code(output, code):
    assert extract_code(output) == code


def test_assemble_body_completion_appends_to_the_prompt():
    program = assemble(BODY, PROMPT, TEST, "total")
    assert program == PROMPT + BODY + "\n\n" + TEST + "\n\ncheck(total)\n"


def test_assemble_full_function_keeps_the_prompt_head_and_dedents():
    output = "Sure:\n```python\n  def total(xs):\n      return sum(xs)\n```\nIt sums."
    program = assemble(output, PROMPT, TEST, "total")
    head = "from typing import List\n\n\n"
    assert program == head + "def total(xs):\n    return sum(xs)\n" + "\n\n" + TEST + "\n\ncheck(total)\n"


def test_assemble_full_function_keeps_helper_code_above_the_entry_point():
    prompt = 'def helper(s):\n    return s\n\n\ndef main(s):\n    """Doc."""\n'
    program = assemble("def main(s):\n    return helper(s)\n", prompt, TEST, "main")
    assert program.startswith("def helper(s):\n    return s\n\n\ndef main(s):\n    return helper(s)\n")


def test_completion_code_is_the_body_the_canonical_solution_stands_for():
    full = '```python\ndef total(xs):\n    """Doc."""\n    return sum(xs)\n\nprint(total([1]))\n```'
    assert completion_code(full, "total") == "    return sum(xs)\n"
    assert completion_code("def total(xs:\n    return", "total") == "def total(xs:\n    return"
    assert completion_code(BODY, "total") == BODY


def test_edit_sim_is_difflib_ratio_against_the_canonical_solution():
    # "    return sum(ys)\n" vs "    return sum(xs)\n": 18 of 19 characters match -> 2*18/38
    assert edit_sim("    return sum(ys)\n", SOURCE) == pytest.approx(18 / 19)
    assert edit_sim("```python\ndef total(xs):\n    return sum(xs)\n```", SOURCE) == 1.0


@pytest.mark.parametrize(
    ("status", "score"),
    [("pass", 1.0), ("fail", 0.0), ("timeout", 0.0), ("memory_limit", 0.0), ("crash", 0.0)],
)
def test_outcome_scores_and_runs_once(status, score):
    task, fake = task_with(status)
    result = task.evaluate(BODY, SOURCE)
    assert result.value == score and result.correct == (score == 1.0)
    assert result.metrics == {"pass": score, "edit_sim": 1.0}
    assert result.details == {
        "outcome": status,
        "reason": f"{status} reason",
        "seconds": 0.25,
        "exit_code": 0 if status == "pass" else 1,
        "isolation": ["tempdir", "rlimits"],
        "isolation_mode": "bubblewrap",
        "execution_enabled_by": "env",
        "scorer": "kvx",
    }
    assert fake.programs == [assemble(BODY, PROMPT, TEST, "total")]
    task.evaluate(BODY, SOURCE)
    assert len(fake.programs) == 1  # the same prediction is not run again
    task.evaluate("    return 0\n", SOURCE)
    assert len(fake.programs) == 2  # another prediction is another program


def test_refused_is_an_error_not_a_wrong_answer():
    task, _ = task_with("refused")
    with pytest.raises(RuntimeError, match="refused: refused reason"):
        task.evaluate(BODY, SOURCE)


def test_sources_are_humaneval_prompts_in_seeded_order():
    rows = {row["task_id"]: row for row in load_problems()}
    assert len(rows) == 164
    task = CodeExec()
    three = task.sources(3, 0, 0, words)
    assert [s.id for s in task.sources(5, 0, 0, words)[:3]] == [s.id for s in three]
    assert [s.id for s in task.sources(3, 1, 0, words)] != [s.id for s in three]
    for source in three:
        row = rows[source.metadata["task_id"]]
        assert source.id == row["task_id"].replace("/", "_")
        assert source.context == source.metadata["prompt"] == row["prompt"]
        assert source.answers == [row["canonical_solution"]]
        assert source.metadata["test"] == row["test"] and source.metadata["entry_point"] == row["entry_point"]
        ((start, end),) = source.evidence
        assert source.context[start:end].startswith(f"def {row['entry_point']}(")
        assert source.context[end:].strip() == ""
        assert "```python" in source.question and row["entry_point"] in source.question


def test_problems_filter():
    task = CodeExec(problems="HumanEval/2, HumanEval/0")
    assert sorted(s.id for s in task.sources(2, 0, 0, words)) == ["HumanEval_0", "HumanEval_2"]
    with pytest.raises(ValueError, match="only 2 rows"):
        task.sources(3, 0, 0, words)
    with pytest.raises(ConfigError, match="HumanEval/999"):
        CodeExec(problems="HumanEval/999").sources(1, 0, 0, words)


@pytest.mark.parametrize("setting", [{"timeout_s": 0.0}, {"memory_mb": 0}])
def test_validate_rejects_bad_limits(setting):
    with pytest.raises(ConfigError, match=next(iter(setting))):
        CodeExec(execute=True, **setting).validate()


def test_validate_refuses_unless_execution_is_enabled(monkeypatch):
    pytest.importorskip("kvx.tasks.executor")
    monkeypatch.delenv("KVX_ALLOW_CODE_EXECUTION", raising=False)
    with pytest.raises(ConfigError) as refusal:
        CodeExec().validate()
    assert "task.execute=true" in str(refusal.value) and "KVX_ALLOW_CODE_EXECUTION=1" in str(refusal.value)
    CodeExec(execute=True, isolation="process").validate()
    monkeypatch.setenv("KVX_ALLOW_CODE_EXECUTION", "1")
    CodeExec(isolation="process").validate()


def test_validate_rejects_an_unknown_isolation_mode_before_anything_runs():
    with pytest.raises(ConfigError, match=r"task.isolation='bubblewarp' .*did you mean 'bubblewrap'\?"):
        CodeExec(execute=True, isolation="bubblewarp").validate()


def test_validate_refuses_when_bubblewrap_is_unavailable_naming_the_fix_and_the_opt_in(monkeypatch):
    from kvx.tasks import executor

    asked = []

    def unavailable(isolation, python=None):
        asked.append(isolation)
        return (False, "no bwrap: apt-get install bubblewrap, or task.isolation=process")

    monkeypatch.setattr(executor, "isolation_available", unavailable)
    with pytest.raises(ConfigError, match="apt-get install bubblewrap, or task.isolation=process"):
        CodeExec(execute=True).validate()
    assert asked == ["bubblewrap"]


def test_isolation_mode_is_out_of_the_identity_unless_set():
    from kvx.core.identity import fields_of

    assert "isolation" not in fields_of(CodeExec())
    assert fields_of(CodeExec(isolation="process"))["isolation"] == "process"


def test_real_executor_passes_canonical_solutions_and_fails_a_wrong_one(monkeypatch):
    pytest.importorskip("kvx.tasks.executor")
    monkeypatch.delenv("KVX_ALLOW_CODE_EXECUTION", raising=False)
    from kvx.tasks.executor import isolation_available

    isolation = "bubblewrap" if isolation_available("bubblewrap")[0] else "process"
    task = CodeExec(execute=True, problems="HumanEval/0,HumanEval/2", isolation=isolation)
    for source in task.sources(2, 0, 0, words):
        good = task.evaluate(source.answers[0], source)
        assert good.value == 1.0
        assert good.details["outcome"] == "pass" and good.details["execution_enabled_by"] == "config"
        assert good.details["isolation"] and good.details["isolation_mode"] == isolation
        bad = task.evaluate("    return None\n", source)
        assert bad.value == 0.0 and bad.details["outcome"] == "fail"
