"""``judge=fmts_containment``: TPBench's FMTS free-form answer matcher (§6.6), a rule, no model.

An answer is correct when, lowercased, the reference is contained in it or it is contained in the
reference (``expected in prediction or prediction in expected``, the reader path of
``scripts/fmts_refpool/core/evaluation.py`` in github.com/kentech-sail/TPBench, commit 1e169643).
The release's second rule is kept: a ``reversal_combined`` question with an old and a new value
(``metadata.qa_type``, ``metadata.old_value``, ``metadata.new_value``) needs both values in the answer;
the paper notes no released item meets it. Its ``dep`` questions are not scored there, and are
``not_applicable`` here. Containment credits partial answers: it measures reference matching, not
completeness. kvx differs in two ways, both recorded: surrounding whitespace is stripped first, and
an empty answer is incorrect (verdict ``empty``), where the release's rule would find the empty
string inside every reference (its runner refuses empty answers, so none was scored). A source with
several references is correct when any one matches.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvx.core.source import Source
from kvx.judges.base import Judge, Judgment

REVERSAL = "reversal_combined"


def _reversal(source: Source) -> tuple[str, str] | None:
    meta = source.metadata
    old, new = meta.get("old_value"), meta.get("new_value")
    if meta.get("qa_type") == REVERSAL and isinstance(old, str) and isinstance(new, str) and old and new:
        return old, new
    return None


@dataclass
class FMTSContainment(Judge):
    """Case-insensitive containment in either direction between the answer and a reference."""

    def applies(self, source: Source) -> str | None:
        if source.metadata.get("qa_type") == "dep":
            return "FMTS scores no dependency (qa_type=dep) questions"
        if _reversal(source) is None and not any(str(a).strip() for a in source.answers):
            return "the source has no non-empty reference answer"
        return None

    def decide(self, source: Source, output: str) -> Judgment:
        prediction = output.strip().lower()
        if not prediction:
            return Judgment.of(False, "empty", "an empty answer contains no reference")
        pair = _reversal(source)
        if pair is not None:
            found = all(value.lower() in prediction for value in pair)
            return Judgment.of(found, "contained" if found else "not_contained", "needs old and new value")
        references = [str(a).strip().lower() for a in source.answers if str(a).strip()]
        found = any(ref in prediction or prediction in ref for ref in references)
        return Judgment.of(found, "contained" if found else "not_contained")
