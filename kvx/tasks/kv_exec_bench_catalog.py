"""kv-exec-bench's own tool catalog, as published: 12 tools, 9 requests, and its prompt layout.

The data are the release's (pjdurden/kv-exec-bench, ``kv_exec_bench/datasets.py``: ``TOOLS``,
``CATALOG_HEADER``, ``render_catalog``, ``build_tool_call_df``), kept verbatim because the paper's
numbers were measured on exactly this text: the tools in the release's order (8 with requests, then 4
distractors), the requests in the release's order (tool by tool), and the catalog as the release renders
it: the header, which carries the reply-format instruction, then per tool ``"<i>. <name> — <description>"``
and ``"   parameters (JSON Schema): <json.dumps(schema)>"``. The header sits in the shared context, so
compression can damage the instruction too; the question is only ``"\\nUser request: <text>\\n"``.
"""

from __future__ import annotations

import json
from typing import Any

from kvx.tasks.tool_catalog import Request

#: the release's ``CATALOG_HEADER``: the reply format is part of the compressed context
HEADER = (
    "You are a function-calling assistant with access to the following tools. For the user's request, "
    "respond with ONLY a single JSON object of the form "
    '{"name": <tool name>, "arguments": {<arg>: <value>, ...}} and nothing else.\n\nTools:\n'
)
#: the release's ``TOOL_CALL_MAX_NEW_TOKENS``
MAX_NEW_TOKENS = 128
#: the values of every kv-exec-bench option of ``tool_call`` and ``code_exec`` (``catalog``, ``prompt``,
#: ``scorer``): kvx's own, or the release's
VARIANTS = ("kvx", "kv_exec_bench")


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The release's schema shape; key order matters, as the schema is rendered with ``json.dumps``."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _s() -> dict[str, Any]:
    return {"type": "string"}


#: ``{name, description, parameters}`` in the release's order
TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": _obj({"city": _s(), "units": {"type": "string", "enum": ["c", "f"]}}, ["city"]),
    },
    {
        "name": "get_stock_price",
        "description": "Look up the latest price for a stock ticker.",
        "parameters": _obj({"ticker": _s()}, ["ticker"]),
    },
    {
        "name": "send_email",
        "description": "Send an email to a recipient.",
        "parameters": _obj({"to": _s(), "subject": _s(), "body": _s()}, ["to", "subject"]),
    },
    {
        "name": "create_calendar_event",
        "description": "Create a calendar event.",
        "parameters": _obj(
            {"title": _s(), "date": _s(), "duration_minutes": {"type": "integer"}}, ["title", "date"]
        ),
    },
    {
        "name": "convert_currency",
        "description": "Convert an amount from one currency to another.",
        "parameters": _obj(
            {"amount": {"type": "number"}, "from_currency": _s(), "to_currency": _s()},
            ["amount", "from_currency", "to_currency"],
        ),
    },
    {
        "name": "search_flights",
        "description": "Search for flights between two airports on a date.",
        "parameters": _obj(
            {"origin": _s(), "destination": _s(), "date": _s()}, ["origin", "destination", "date"]
        ),
    },
    {
        "name": "translate_text",
        "description": "Translate text into a target language.",
        "parameters": _obj({"text": _s(), "target_language": _s()}, ["text", "target_language"]),
    },
    {
        "name": "set_reminder",
        "description": "Set a reminder with a message at a time.",
        "parameters": _obj({"message": _s(), "time": _s()}, ["message", "time"]),
    },
    {
        "name": "create_invoice",
        "description": "Create an invoice for a customer.",
        "parameters": _obj(
            {"customer": _s(), "amount": {"type": "number"}, "currency": _s()}, ["customer", "amount"]
        ),
    },
    {
        "name": "get_directions",
        "description": "Get driving directions between two places.",
        "parameters": _obj({"origin": _s(), "destination": _s(), "mode": _s()}, ["origin", "destination"]),
    },
    {
        "name": "play_music",
        "description": "Play a song or playlist.",
        "parameters": _obj({"query": _s(), "shuffle": {"type": "boolean"}}, ["query"]),
    },
    {
        "name": "book_hotel",
        "description": "Book a hotel room in a city for a date range.",
        "parameters": _obj(
            {"city": _s(), "check_in": _s(), "check_out": _s()}, ["city", "check_in", "check_out"]
        ),
    },
]

#: the release's requests in its order; ids are kvx's (the release has none)
REQUESTS: list[Request] = [
    Request("weather_paris", "What's the weather in Paris right now?", "get_weather", {"city": "Paris"}),
    Request(
        "weather_tokyo_f",
        "Get the current temperature in Tokyo in Fahrenheit.",
        "get_weather",
        {"city": "Tokyo", "units": "f"},
    ),
    Request(
        "stock_aapl",
        "How much is Apple stock trading at? Its ticker is AAPL.",
        "get_stock_price",
        {"ticker": "AAPL"},
    ),
    Request(
        "email_alice",
        "Email alice@example.com with the subject Hello.",
        "send_email",
        {"to": "alice@example.com", "subject": "Hello"},
    ),
    Request(
        "calendar_dentist",
        "Put a 'Dentist' appointment on my calendar for 2026-07-01.",
        "create_calendar_event",
        {"title": "Dentist", "date": "2026-07-01"},
    ),
    Request(
        "currency_usd_eur",
        "Convert 100 USD to EUR.",
        "convert_currency",
        {"amount": 100, "from_currency": "USD", "to_currency": "EUR"},
    ),
    Request(
        "flights_sfo_jfk",
        "Find flights from SFO to JFK on 2026-08-12.",
        "search_flights",
        {"origin": "SFO", "destination": "JFK", "date": "2026-08-12"},
    ),
    Request(
        "translate_spanish",
        "Translate 'good morning' into Spanish.",
        "translate_text",
        {"text": "good morning", "target_language": "Spanish"},
    ),
    Request(
        "reminder_mom",
        "Remind me to call mom at 18:00.",
        "set_reminder",
        {"message": "call mom", "time": "18:00"},
    ),
]


def render(tools: list[dict[str, Any]]) -> tuple[str, dict[str, tuple[int, int]]]:
    """The catalog as the release renders it, and each tool's span: its two lines, newline excluded."""
    text, spans = HEADER, {}
    for i, tool in enumerate(tools, 1):
        entry = (
            f"{i}. {tool['name']} — {tool['description']}\n"
            f"   parameters (JSON Schema): {json.dumps(tool['parameters'])}"
        )
        spans[tool["name"]] = (len(text), len(text) + len(entry))
        text += entry + "\n"
    return text, spans


def question(request: str) -> str:
    """The release's question: the request alone, the format instruction being in the catalog."""
    return f"\nUser request: {request}\n"
