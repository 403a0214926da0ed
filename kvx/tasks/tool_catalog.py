"""The built-in, network-free tool catalog of the ``tool_call`` task: 12 tools and 24 requests.

Each tool is ``{name, description, parameters}`` with a JSON Schema object as ``parameters``
(``additionalProperties: false``, so an invented argument is a schema violation the model could
have seen coming). Each request pins every argument value in its text (dates as YYYY-MM-DD,
free text in quotes) so exactly one call answers it. Between them the requests use required and
optional arguments, enums, integers, numbers, booleans, arrays, an array of objects and a nested
object, and some spell out an optional argument's default value.
"""

from __future__ import annotations

from typing import Any, NamedTuple


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _enum(description: str, values: list[str], default: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "enum": values, "description": description}
    if default is not None:
        schema["default"] = default
    return schema


def _int(description: str, minimum: int | None = None, maximum: int | None = None, **extra: Any) -> dict:
    schema: dict[str, Any] = {"type": "integer", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return {**schema, **extra}


def _bool(description: str, default: bool = False) -> dict[str, Any]:
    return {"type": "boolean", "description": description, "default": default}


_DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "Date as YYYY-MM-DD."}
_EMAILS = {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Email addresses."}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": _obj(
            {
                "city": _str("City name."),
                "units": _enum("Temperature units.", ["celsius", "fahrenheit"], "celsius"),
                "days": _int("Number of forecast days.", 1, 7, default=1),
            },
            ["city"],
        ),
    },
    {
        "name": "get_air_quality",
        "description": "Get the current air quality index for a city.",
        "parameters": _obj(
            {
                "city": _str("City name."),
                "pollutant": _enum("Pollutant to report.", ["pm25", "pm10", "ozone", "no2"], "pm25"),
            },
            ["city"],
        ),
    },
    {
        "name": "search_flights",
        "description": "Search one-way flights between two airports.",
        "parameters": _obj(
            {
                "origin": _str("IATA code of the departure airport."),
                "destination": _str("IATA code of the arrival airport."),
                "date": _DATE,
                "passengers": _int("Number of passengers.", 1, 9, default=1),
                "cabin": _enum(
                    "Cabin class.", ["economy", "premium_economy", "business", "first"], "economy"
                ),
                "nonstop": _bool("Only nonstop flights."),
            },
            ["origin", "destination", "date"],
        ),
    },
    {
        "name": "book_restaurant",
        "description": "Reserve a table at a restaurant.",
        "parameters": _obj(
            {
                "restaurant": _str("Restaurant name."),
                "date": _DATE,
                "time": {
                    "type": "string",
                    "pattern": r"^\d{2}:\d{2}$",
                    "description": "24-hour time as HH:MM.",
                },
                "party_size": _int("Number of guests.", 1, 20),
                "special_requests": _str("Notes for the restaurant."),
            },
            ["restaurant", "date", "time", "party_size"],
        ),
    },
    {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": _obj(
            {
                "to": _EMAILS,
                "subject": _str("Subject line."),
                "body": _str("Message text."),
                "cc": _EMAILS,
                "priority": _enum("Delivery priority.", ["low", "normal", "high"], "normal"),
            },
            ["to", "subject", "body"],
        ),
    },
    {
        "name": "create_calendar_event",
        "description": "Add an event to the user's calendar.",
        "parameters": _obj(
            {
                "title": _str("Event title."),
                "date": _DATE,
                "start_time": {
                    "type": "string",
                    "pattern": r"^\d{2}:\d{2}$",
                    "description": "HH:MM, 24-hour.",
                },
                "duration_minutes": _int("Length of the event in minutes.", 5, 1440),
                "attendees": _EMAILS,
                "reminder": _obj(
                    {
                        "minutes_before": _int("When to remind, in minutes before the start.", 0),
                        "method": _enum("How to remind.", ["email", "popup"]),
                    },
                    ["minutes_before", "method"],
                ),
            },
            ["title", "date", "start_time", "duration_minutes"],
        ),
    },
    {
        "name": "convert_currency",
        "description": "Convert an amount of money between currencies.",
        "parameters": _obj(
            {
                "amount": {"type": "number", "exclusiveMinimum": 0, "description": "Amount to convert."},
                "from_currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code."},
                "to_currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code."},
            },
            ["amount", "from_currency", "to_currency"],
        ),
    },
    {
        "name": "set_thermostat",
        "description": "Set the target temperature of a room.",
        "parameters": _obj(
            {
                "room": _enum("Room.", ["living_room", "bedroom", "kitchen", "office"]),
                "temperature": {
                    "type": "number",
                    "minimum": 10,
                    "maximum": 30,
                    "description": "Degrees Celsius.",
                },
                "mode": _enum("Operating mode.", ["heat", "cool", "auto"], "auto"),
            },
            ["room", "temperature"],
        ),
    },
    {
        "name": "translate_text",
        "description": "Translate text into another language.",
        "parameters": _obj(
            {
                "text": _str("Text to translate."),
                "target_language": _enum("Target language code.", ["en", "fr", "de", "es", "it", "ja"]),
                "source_language": _enum("Source language code.", ["en", "fr", "de", "es", "it", "ja"]),
                "formal": _bool("Use a formal register."),
            },
            ["text", "target_language"],
        ),
    },
    {
        "name": "get_stock_price",
        "description": "Get the latest price of a stock.",
        "parameters": _obj(
            {
                "ticker": _str("Ticker symbol."),
                "exchange": _enum("Stock exchange.", ["NASDAQ", "NYSE", "LSE"], "NASDAQ"),
                "include_history": _bool("Also return the last 30 days of prices."),
            },
            ["ticker"],
        ),
    },
    {
        "name": "create_support_ticket",
        "description": "Open a customer support ticket.",
        "parameters": _obj(
            {
                "customer_id": _int("Customer number.", 1),
                "category": _enum("Ticket category.", ["billing", "technical", "account", "other"]),
                "description": _str("What the problem is."),
                "urgent": _bool("Escalate the ticket."),
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels."},
            },
            ["customer_id", "category", "description"],
        ),
    },
    {
        "name": "order_groceries",
        "description": "Order groceries for home delivery.",
        "parameters": _obj(
            {
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "description": "Products to order.",
                    "items": _obj(
                        {"name": _str("Product name."), "quantity": _int("How many.", 1)},
                        ["name", "quantity"],
                    ),
                },
                "delivery_address": _obj(
                    {
                        "street": _str("Street and number."),
                        "city": _str("City."),
                        "postal_code": _str("Postcode."),
                    },
                    ["street", "city", "postal_code"],
                ),
                "express": _bool("Deliver within two hours."),
            },
            ["items", "delivery_address"],
        ),
    },
]


class Request(NamedTuple):
    """A user request and the one call that answers it."""

    id: str
    text: str
    name: str
    arguments: dict[str, Any]


REQUESTS: list[Request] = [
    Request(
        "weather_paris",
        "What will the weather be like in Paris over the next 3 days?",
        "get_weather",
        {"city": "Paris", "days": 3},
    ),
    Request(
        "weather_denver_f",
        "Give me today's forecast for Denver in fahrenheit.",
        "get_weather",
        {"city": "Denver", "units": "fahrenheit"},
    ),
    Request("air_delhi", "How is the air quality in Delhi right now?", "get_air_quality", {"city": "Delhi"}),
    Request(
        "air_milan_ozone",
        "Check the ozone level in Milan.",
        "get_air_quality",
        {"city": "Milan", "pollutant": "ozone"},
    ),
    Request(
        "flight_sfo_jfk",
        "Find flights from SFO to JFK on 2025-03-14.",
        "search_flights",
        {"origin": "SFO", "destination": "JFK", "date": "2025-03-14"},
    ),
    Request(
        "flight_lhr_nrt",
        "Search nonstop business class flights for 2 passengers from LHR to NRT on 2025-07-01.",
        "search_flights",
        {
            "origin": "LHR",
            "destination": "NRT",
            "date": "2025-07-01",
            "passengers": 2,
            "cabin": "business",
            "nonstop": True,
        },
    ),
    Request(
        "table_nopa",
        "Book a table for 4 at Nopa on 2025-05-02 at 19:30.",
        "book_restaurant",
        {"restaurant": "Nopa", "date": "2025-05-02", "time": "19:30", "party_size": 4},
    ),
    Request(
        "table_zuni",
        'Reserve a table for 2 at Zuni Cafe on 2025-06-10 at 20:00 with the note "window seat".',
        "book_restaurant",
        {
            "restaurant": "Zuni Cafe",
            "date": "2025-06-10",
            "time": "20:00",
            "party_size": 2,
            "special_requests": "window seat",
        },
    ),
    Request(
        "email_ana",
        'Email ana@example.com with the subject "Lunch" and the body "See you at noon."',
        "send_email",
        {"to": ["ana@example.com"], "subject": "Lunch", "body": "See you at noon."},
    ),
    Request(
        "email_report",
        "Send a high priority email to bo@example.com, cc cy@example.com, with the subject "
        '"Report" and the body "The report is attached."',
        "send_email",
        {
            "to": ["bo@example.com"],
            "subject": "Report",
            "body": "The report is attached.",
            "cc": ["cy@example.com"],
            "priority": "high",
        },
    ),
    Request(
        "event_standup",
        'Put a 15 minute event called "Standup" with dee@example.com on my calendar on 2025-04-07 at 09:00.',
        "create_calendar_event",
        {
            "title": "Standup",
            "date": "2025-04-07",
            "start_time": "09:00",
            "duration_minutes": 15,
            "attendees": ["dee@example.com"],
        },
    ),
    Request(
        "event_review",
        'Schedule "Design review" on 2025-04-09 at 14:00 for 60 minutes and remind me by popup 10 '
        "minutes before.",
        "create_calendar_event",
        {
            "title": "Design review",
            "date": "2025-04-09",
            "start_time": "14:00",
            "duration_minutes": 60,
            "reminder": {"minutes_before": 10, "method": "popup"},
        },
    ),
    Request(
        "fx_usd_eur",
        "Convert 250 USD to EUR.",
        "convert_currency",
        {"amount": 250, "from_currency": "USD", "to_currency": "EUR"},
    ),
    Request(
        "fx_jpy_gbp",
        "How much is 12500.5 JPY in GBP?",
        "convert_currency",
        {"amount": 12500.5, "from_currency": "JPY", "to_currency": "GBP"},
    ),
    Request(
        "thermo_bedroom",
        "Set the bedroom to 19 degrees.",
        "set_thermostat",
        {"room": "bedroom", "temperature": 19},
    ),
    Request(
        "thermo_office",
        "Cool the office down to 22.5 degrees.",
        "set_thermostat",
        {"room": "office", "temperature": 22.5, "mode": "cool"},
    ),
    Request(
        "translate_fr",
        'Translate "Where is the station?" into French.',
        "translate_text",
        {"text": "Where is the station?", "target_language": "fr"},
    ),
    Request(
        "translate_de_ja",
        'Translate the German text "Guten Morgen" into formal Japanese.',
        "translate_text",
        {"text": "Guten Morgen", "target_language": "ja", "source_language": "de", "formal": True},
    ),
    Request(
        "stock_aapl",
        "What is Apple's stock price? The ticker is AAPL on NASDAQ.",
        "get_stock_price",
        {"ticker": "AAPL", "exchange": "NASDAQ"},
    ),
    Request(
        "stock_ibm",
        "Get the price of IBM on the NYSE including its recent history.",
        "get_stock_price",
        {"ticker": "IBM", "exchange": "NYSE", "include_history": True},
    ),
    Request(
        "ticket_billing",
        'Open a billing ticket for customer 4821: "I was charged twice."',
        "create_support_ticket",
        {"customer_id": 4821, "category": "billing", "description": "I was charged twice."},
    ),
    Request(
        "ticket_outage",
        'Open an urgent technical ticket for customer 77 saying "The app crashes on '
        'login." and tag it ios and login.',
        "create_support_ticket",
        {
            "customer_id": 77,
            "category": "technical",
            "description": "The app crashes on login.",
            "urgent": True,
            "tags": ["ios", "login"],
        },
    ),
    Request(
        "groceries_milk",
        "Order 2 milk and 1 bread to 5 Elm St, Springfield, postcode 12345.",
        "order_groceries",
        {
            "items": [{"name": "milk", "quantity": 2}, {"name": "bread", "quantity": 1}],
            "delivery_address": {"street": "5 Elm St", "city": "Springfield", "postal_code": "12345"},
        },
    ),
    Request(
        "groceries_express",
        "Express delivery of 6 eggs to 9 Oak Ave, Portland, postcode 97201.",
        "order_groceries",
        {
            "items": [{"name": "eggs", "quantity": 6}],
            "delivery_address": {"street": "9 Oak Ave", "city": "Portland", "postal_code": "97201"},
            "express": True,
        },
    ),
]
