"""InfiniteBench's per-sample metrics, as kvpress's
``evaluation/benchmarks/infinite_bench/calculate_metrics.py`` (InfiniteBench's ``src/compute_scores.py``)
defines them.

Where kvpress's copy cannot score its own dataset, kvx follows InfiniteBench's intent, which its
original labels (numbers, and a function name beside Code.Debug's letter) carried:

* ``code_run``, ``math_calc``: kvpress's labels are strings, compared to the ints read from the
  answer, so every answer scores 0; kvx compares numbers;
* ``math_find``: kvpress raises TypeError on a string label; kvx reads the label as the int or float
  it writes;
* ``code_debug``: kvpress keeps only the option letter and raises IndexError looking for the function
  name; kvx reads the name from the options the question lists.

``longbook_sum_eng`` is not scored by kvpress ("not supported due to a conflict with rouge library")
and is not a subset here.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from kvx.tasks.kvpress.longbench_metrics import token_f1
from kvx.tasks.scoring import squad_normalize

#: the punctuation InfiniteBench's Chinese normalisation removes besides ASCII's
CJK_PUNCTUATION = (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～"
    "｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."
)
_ZH_PUNCTUATION = frozenset(string.punctuation + CJK_PUNCTUATION)
_LAST_CHOICE = re.compile(r"\b[A-D]\b(?!.*\b[A-D]\b)")  # a letter with no other on the rest of its line
_LAST_DEBUG_CHOICE = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)")
_OPTIONS = re.compile(r"\nA\. (.*)\nB\. (.*)\nC\. (.*)\nD\. (.*)\Z")


def first_integer(prediction: str) -> str:
    """The first run of digits in the prediction ("" without one)."""
    return next((part for part in re.split("[^0-9]", prediction) if part), "")


def qa_f1(prediction: str, references: Sequence[str]) -> float:
    """Best token F1 over the references after SQuAD normalisation (LongBench's qa F1)."""
    tokens = squad_normalize(prediction).split()
    return max((token_f1(tokens, squad_normalize(ref).split()) for ref in references), default=0.0)


def normalize_zh(text: str) -> str:
    """Lowercase, ASCII and CJK punctuation removed, all whitespace removed."""
    return "".join("".join(c for c in text.lower() if c not in _ZH_PUNCTUATION).split())


def qa_f1_zh(prediction: str, references: Sequence[str]) -> float:
    """Best character F1 over the references after Chinese normalisation."""
    chars = list(normalize_zh(prediction))
    return max((token_f1(chars, list(normalize_zh(ref))) for ref in references), default=0.0)


def kv_retrieval(prediction: str, label: str) -> bool:
    """The value is one of the answer's words (split on whitespace and ``\\n:"'.,?!{}``)."""
    for char in "\n:\"'.,?!{}":
        prediction = prediction.replace(char, " ")
    return label in prediction.split()


def same_integer(prediction: str, label: str) -> bool:
    """The first digits of the answer are the label (``passkey``, ``number_string``)."""
    return label == first_integer(prediction)


def code_run(prediction: str, label: str) -> bool:
    """The answer's last word (split on whitespace and ``\\n.`':"``) is the label's integer."""
    text = prediction.strip()
    for char in "\n.`'\":":
        text = text.replace(char, " ")
    words = text.split()
    try:
        return bool(words) and int(words[-1]) == int(label)
    except ValueError:
        return False


def options(question: str) -> list[str] | None:
    """The four options the question lists last (``\\nA. ...\\nD. ...``), or None."""
    found = _OPTIONS.search(question)
    return list(found.groups()) if found else None


def code_debug(prediction: str, letter: str, function: str | None) -> bool:
    """The last standalone letter A-J of the answer's line is the right one, or the cleaned answer
    starts with the letter or the function's name, or so does what follows its first answer prefix."""
    pred = prediction.strip()
    found = _LAST_DEBUG_CHOICE.search(pred)
    if found and found.group(0) == letter:
        return True
    for mark in ("\n", "`", "'", '"', "-", "*", "Option", "option"):
        pred = pred.replace(mark, " ")
    while "  " in pred:
        pred = pred.replace("  ", " ")
    names = [letter] + ([function] if function else [])
    if any(pred.startswith(name) for name in names):
        return True
    found = _answer_after(pred, ("answer is:", "is:", "answer:", "correct option is:"), names)
    return bool(found)


def math_find(prediction: str, label: str) -> bool:
    """The answer's first number equals the label: an int label wants an int ("3.5" is wrong where
    InfiniteBench's ``int("3.5")`` raises), a float label any number of that value."""
    found = re.search(r"\d+\.\d+|\d+", prediction)
    if found is None:
        return False
    number = found.group(0)
    try:
        wanted = int(label)
    except ValueError:
        return float(number) == float(label)
    return "." not in number and int(number) == wanted


def math_calc(prediction: str, labels: Sequence[str]) -> float:
    """Share of the intermediate values the answer gets right, counted up to its first mistake."""
    numbers = [int(part) for part in re.split("[^0-9]", prediction) if part]
    right = 0
    for value, label in zip(numbers, labels):
        if value != int(label):
            break
        right += 1
    return right / len(labels)


def longdialogue(prediction: str, names: Sequence[str]) -> bool:
    """One of the character's names appears in the answer (case-insensitive)."""
    pred = prediction.strip().upper()
    return any(name.upper() in pred for name in names)


def longbook_choice(prediction: str, labels: Sequence[str]) -> bool:
    """The answer's letter: the last standalone A-D of its first line with one, else its first
    character, else what follows an answer prefix, else its first word that is a letter."""
    pred = prediction.strip()
    found = _LAST_CHOICE.search(pred)
    if found and found.group(0) in labels:
        return True
    if pred == "":
        return False
    if pred[0] in "ABCD":
        return pred[0] in labels
    if pred in labels:
        return True
    for char in ("\n", '"', "'", ".", ",", "?", "!", "{", "}"):
        pred = pred.replace(char, " ")
    while "  " in pred:
        pred = pred.replace("  ", " ")
    found = _answer_after(pred, ("answer is:", "answer:", "answer is", "option is"), labels)
    if found is not None:
        return found
    return next((word in labels for word in pred.split() if word in "ABCD"), False)


def _answer_after(pred: str, prefixes: tuple[str, ...], names: Sequence[str]) -> bool | None:
    """InfiniteBench's rule: after the first of ``prefixes`` found in ``pred`` (one character
    skipped), does the answer start with one of ``names``? None when no prefix occurs."""
    for prefix in prefixes:
        at = pred.find(prefix)
        if at == -1:
            continue
        if len(pred) < at + len(prefix) + 1:
            return False
        rest = pred[at + len(prefix) + 1 :]
        return any(rest.startswith(name) for name in names)
    return None
