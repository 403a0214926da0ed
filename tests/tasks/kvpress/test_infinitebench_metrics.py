"""InfiniteBench's per-sample metrics, pinned by hand on its own examples (kvpress's
``create_huggingface_dataset.py`` docstring lists them)."""

import pytest

from kvx.core.source import Source
from kvx.tasks.kvpress import infinitebench_metrics as ib
from kvx.tasks.kvpress.infinitebench import infinitebench_score


def test_passkey_and_number_string_read_the_first_digits():
    assert ib.same_integer(" 71432.", "71432")
    assert ib.same_integer("The pass key is 71432", "71432")
    assert not ib.same_integer("7-1432", "71432")
    assert ib.same_integer("2200012222 is the sequence", "2200012222")
    assert ib.first_integer("no digits") == ""


def test_kv_retrieval_finds_the_value_among_the_words():
    value = "00a00042-6bcb-494f-9c35-57180f1e7251"
    assert ib.kv_retrieval(f': "{value}".', value)
    assert not ib.kv_retrieval("00a00042-6bcb", value)


def test_longdialogue_any_name_case_insensitive():
    assert ib.longdialogue(" Ace.", ["ACE", "ACE ROTHSTEIN"])
    assert not ib.longdialogue("Sam", ["ACE", "ACE ROTHSTEIN"])


def test_longbook_qa_f1_and_chinese_character_f1():
    assert ib.qa_f1("Peyton", ['"Peyton"']) == 1.0
    assert ib.qa_f1("It is Peyton", ["Peyton"]) == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))  # "it is peyton"
    assert ib.qa_f1_zh("北京。", ["北京"]) == 1.0
    assert ib.qa_f1_zh("在 北京", ["北京"]) == pytest.approx(0.8)  # P 2/3, R 1


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        (" A", True),
        ("The answer is B, not A", True),  # the last standalone letter of the line
        ("(B) Taking care of Totty", False),
        ("", False),
        ("answer is: A", True),
        ("I think the option is Alain", True),  # no standalone letter; after "option is" comes "A..."
    ],
)
def test_longbook_choice(answer, right):
    assert ib.longbook_choice(answer, ["A"]) is right


def test_longbook_choice_prefix_and_word_fallbacks():
    # lowercase answers have no standalone capital: the prefix and then the words decide
    assert ib.longbook_choice("my answer is: b", ["b"])  # pred[0] "m"; after "answer is:" comes "b"
    assert not ib.longbook_choice("xx", ["A"])


QUESTION = "Which function has a deliberate error?\n\nOptions:\nA. func_a\nB. Foo.bar\nC. baz\nD. qux"


def test_code_debug_letter_function_name_and_prefixes():
    assert ib.options(QUESTION) == ["func_a", "Foo.bar", "baz", "qux"]
    assert ib.code_debug("B", "B", "Foo.bar")
    assert ib.code_debug("Foo.bar crashes", "B", "Foo.bar")  # no standalone letter; starts with the name
    assert not ib.code_debug("The correct option is: C", "B", "Foo.bar")
    assert ib.code_debug("the answer is: Foo.bar", "B", "Foo.bar")
    assert not ib.code_debug("the answer is:", "B", "Foo.bar")  # ends with the prefix


def test_code_run_compares_numbers():
    assert ib.code_run(" 2542", "2542")
    assert ib.code_run("The return value is: -12.", "-12")
    assert not ib.code_run("2542 or 7", "2542")  # the last word
    assert not ib.code_run("unknown", "2542") and not ib.code_run("", "2542")


def test_math_find_first_number():
    assert ib.math_find("7", "7")
    assert not ib.math_find("3.5", "3")  # an int is wanted
    assert ib.math_find("It is 3.50", "3.5")
    assert not ib.math_find("none", "7")


def test_math_calc_counts_up_to_the_first_mistake():
    assert ib.math_calc("[1, 4, 9]", ["1", "4", "8"]) == pytest.approx(2 / 3)
    assert ib.math_calc("[1, 5, 8]", ["1", "4", "8"]) == pytest.approx(1 / 3)
    assert ib.math_calc("", ["1"]) == 0.0


def source(answers, question="Q"):
    return Source(id="s", context="C", question=question, answers=answers)


def test_dispatch_by_subset():
    assert infinitebench_score("passkey", "71432", source(["71432"])) == 1.0
    assert infinitebench_score("code_debug", "Foo.bar", source(["B"], QUESTION)) == 1.0
    assert infinitebench_score("code_debug", "Foo.bar", source(["B"])) == 0.0  # no options: letter only
    assert infinitebench_score("math_calc", "1, 4", source(["1", "4", "8"])) == pytest.approx(2 / 3)
    assert infinitebench_score("longbook_qa_eng", "Peyton", source(['"Peyton"'])) == 1.0
