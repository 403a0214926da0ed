"""``judge=longmemeval``: LongMemEval's question-type answer checks (its official evaluation; ragscale §A).

One binary prompt per question type, filled with the question, the reference (a rubric for
preference questions, an explanation for abstention questions) and the answer; the reply counts as
correct when it contains "yes" anywhere, case-insensitively, and as incorrect otherwise (the
evaluation's ``'yes' in eval_response.lower()``; ragscale maps it to score 2 of 2, kvx to score 1).

Templates are ``get_anscheck_prompt`` of ``src/evaluation/evaluate_qa.py`` in
github.com/xiaowu0162/LongMemEval (commit 9e0b455f), character for character: one for
single-session-user, single-session-assistant and multi-session questions, one each for
temporal-reasoning (off-by-one day counts tolerated), knowledge-update (earlier information allowed
beside the updated answer) and single-session-preference, and one for abstention questions (a
question id containing ``_abs``), which the ragscale paper calls the five templates. The request is
one user message at temperature 0 with a 10-token limit; the model is ragscale's pinned DeepSeek V3
(``deepseek/deepseek-chat-v3-0324`` on OpenRouter) when ``judge.reader=openai``.

A source is judged when its metadata names a LongMemEval ``question_type``; the question is
``metadata.question`` (else the source's question), the reference ``metadata.answer`` (else its first
answer), and abstention is ``metadata.abstention`` (else ``_abs`` in ``metadata.question_id`` or the
source id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvx.core.source import Source
from kvx.judges.base import Judgment, ModelJudge
from kvx.modeling.chat import ChatRequest

#: template name -> the template, ``str.format`` placeholders for question, reference and response
TEMPLATES = {
    "general": (
        "I will give you a question, a correct answer, and a response from a model. Please answer yes if "
        "the response contains the correct answer. Otherwise, answer no. If the response is equivalent to "
        "the correct answer or contains all the intermediate steps to get the correct answer, you should "
        "also answer yes. If the response only contains a subset of the information required by the answer, "
        "answer no. \n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response "
        "correct? Answer yes or no only."
    ),
    "temporal-reasoning": (
        "I will give you a question, a correct answer, and a response from a model. Please answer yes if "
        "the response contains the correct answer. Otherwise, answer no. If the response is equivalent to "
        "the correct answer or contains all the intermediate steps to get the correct answer, you should "
        "also answer yes. If the response only contains a subset of the information required by the answer, "
        "answer no. In addition, do not penalize off-by-one errors for the number of days. If the question "
        "asks for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., "
        "predicting 19 days when the answer is 18), the model's response is still correct. \n\nQuestion: "
        "{}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no "
        "only."
    ),
    "knowledge-update": (
        "I will give you a question, a correct answer, and a response from a model. Please answer yes if "
        "the response contains the correct answer. Otherwise, answer no. If the response contains some "
        "previous information along with an updated answer, the response should be considered as correct as "
        "long as the updated answer is the required answer.\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel "
        "Response: {}\n\nIs the model response correct? Answer yes or no only."
    ),
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response from a "
        "model. Please answer yes if the response satisfies the desired response. Otherwise, answer no. The "
        "model does not need to reflect all the points in the rubric. The response is correct as long as it "
        "recalls and utilizes the user's personal information correctly.\n\nQuestion: {}\n\nRubric: "
        "{}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only."
    ),
    "abstention": (
        "I will give you an unanswerable question, an explanation, and a response from a model. Please "
        "answer yes if the model correctly identifies the question as unanswerable. The model could say "
        "that the information is incomplete, or some other information is given but the asked information "
        "is not.\n\nQuestion: {}\n\nExplanation: {}\n\nModel Response: {}\n\nDoes the model correctly "
        "identify the question as unanswerable? Answer yes or no only."
    ),
}
#: LongMemEval question type -> its template
QUESTION_TYPES = {
    "single-session-user": "general",
    "single-session-assistant": "general",
    "multi-session": "general",
    "temporal-reasoning": "temporal-reasoning",
    "knowledge-update": "knowledge-update",
    "single-session-preference": "single-session-preference",
}
#: ragscale's judge model (Appendix A), used when ``judge.reader=openai``
MODEL = {
    "base_url": "https://openrouter.ai/api/v1",
    "model": "deepseek/deepseek-chat-v3-0324",
    "api_key_env": "OPENROUTER_API_KEY",
    "temperature": 0.0,
}


def abstention(source: Source) -> bool:
    flag = source.metadata.get("abstention")
    if isinstance(flag, bool):
        return flag
    return "_abs" in str(source.metadata.get("question_id", source.id))


@dataclass
class LongMemEval(ModelJudge):
    """Is the answer correct, by the question type's binary prompt? ("yes" in the reply)."""

    max_tokens: int = 10

    model_defaults: ClassVar[dict[str, dict[str, Any]]] = {"openai": MODEL}

    def applies(self, source: Source) -> str | None:
        kind = source.metadata.get("question_type")
        if kind not in QUESTION_TYPES:
            return f"question_type={kind!r} is not a LongMemEval question type ({', '.join(QUESTION_TYPES)})"
        if "answer" not in source.metadata and not source.answers:
            return "the source has no reference answer"
        return None

    def template(self, source: Source) -> str:
        kind = "abstention" if abstention(source) else QUESTION_TYPES[source.metadata["question_type"]]
        return TEMPLATES[kind]

    def request(self, source: Source, output: str) -> ChatRequest:
        question = source.metadata.get("question", source.question)
        reference = source.metadata.get("answer", source.answers[0] if source.answers else "")
        prompt = self.template(source).format(question, reference, output)
        return ChatRequest.of([{"role": "user", "content": prompt}], self.max_tokens)

    def parse(self, text: str) -> Judgment:
        reply = (text or "").strip()
        yes = "yes" in reply.lower()
        return Judgment.of(yes, "yes" if yes else "no", reply)
