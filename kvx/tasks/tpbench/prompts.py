"""TPBench Appendix A: the system prompt and per-probe user prompts, verbatim.

The user prompt is ``Context:\\n<turns>\\n\\nQuestion: <probe question>\\n\\nRequired JSON schema: ...``.
kvx keeps ``Context:`` and the turns in the compressible context and the rest in the question, so
the question a reader sees is identical in every cell of a probe.
"""

from __future__ import annotations

SYSTEM = (
    "You are reading a conversation that may be partial or compressed. Answer ONLY using the provided "
    "context. Reply with a single JSON object and no other text. Do not add markdown fences."
)
HEADER = "Context:"
_SCHEMA = (
    '{{"value": {value}, "support": <verbatim span from context, <= 30 words>, '
    '"abstain": <true if you cannot tell, else false>}}'
)


def _user(question: str, value: str = "<string>") -> str:
    schema = _SCHEMA.format(value=value)
    return f"\n\nQuestion: {question}\n\nRequired JSON schema:\n{schema}\nReply with only the JSON object."


def p1() -> str:
    return _user(
        "What was the user's initial goal at the beginning of this conversation? Reply with one short "
        'noun phrase (e.g. "book a hotel", "find a flight", "reserve a restaurant").'
    )


def p2(slot: str) -> str:
    return _user(
        f"After the most recent change visible in the context, what is the user's CURRENT value for "
        f"{slot}? Reply with one short value."
    )


def p3(slot: str) -> str:
    return _user(
        f"In one short reply, state BOTH (a) the user's task in this conversation AND (b) the final value "
        f'the user decided on for {slot}. Format your answer as: "<task>; {slot}: <final value>".',
        "<string in the format above>",
    )
