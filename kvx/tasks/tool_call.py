"""Tool calling (kv-exec-bench ``tool_call``): pick one tool from a shared catalog and fill its arguments.

Every source of a split shares one context, the catalog: an instruction line, then one JSON tool
definition ``{name, description, parameters}`` per line. The engine prefills it once and a compressed
cache answers every request, the regime where a dropped definition turns into an invalid call. The
question is one request plus the reply format; the evidence span is the gold tool's line.

Metrics under ``scorer=kvx`` (the default), lenient to strict and nested (each implies the one
before, so the rates never cross):

- ``json_valid``: the first balanced ``{...}`` of the output (string- and escape-aware scan) parses
  as a JSON object. Only the first one counts: a model that emits a broken object and then a good
  one made a broken call.
- ``name_match``: its ``"name"`` is the gold tool. Arguments may be under ``"arguments"`` (OpenAI
  style) or ``"parameters"`` (Llama style); a missing key means no arguments.
- ``schema_valid``: the arguments validate against the gold tool's JSON Schema (``jsonschema``,
  draft 2020-12), the schema the model was shown.
- ``args_exact`` (the score): schema-valid and every argument equals one of its acceptable values,
  with no argument beyond them. Values compare by JSON type (``true`` is not ``1``; ``2`` equals
  ``2.0``). An argument is omittable when its acceptable list holds ``""`` (BFCL's convention).
  Built-in requests accept the gold value and, for an optional argument with a schema default, the
  default or nothing, so spelling out a default is the same call. BFCL requests accept BFCL's lists,
  and strings compare after BFCL's standardisation (case, spaces and ``,./-_*^`` ignored), as BFCL's
  own checker does.
- ``name_substring``: the string anchor; the gold name appears anywhere in the raw output.

``source=builtin`` uses the 12-tool catalog of :mod:`kvx.tasks.tool_catalog` (fixed size, so
``context_tokens`` is ignored). ``source=bfcl`` reads BFCL v4's single-call category
``bfcl_category`` from the ``bfcl-eval`` package. Every entry runs unless no call can score it
(the manifest lists each one left out, with its reason). The chosen requests' tools are packed, in
seeded order, into catalogs (shards) of at most ``context_tokens``, each filled with distractor
tools from the rest of the category up to that budget; a split has as many shared contexts as
shards, and its sources come shard by shard. BFCL reuses tool names for different definitions, so
the k-th definition of a name (k >= 2, file order) is shown as ``<name>_v<k>`` everywhere
(:func:`bfcl_names`): a name in a catalog always means one definition, and ``name_match`` compares
with the name shown (``bfcl_name`` keeps BFCL's). BFCL types become JSON Schema (``dict`` ->
``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> unconstrained) and the model
is shown the converted schema. Built-in schemas forbid unknown arguments (``additionalProperties:
false``); BFCL's do not, so there an invented argument fails ``args_exact`` only.

``catalog=kv_exec_bench`` is the paper's task as released (:mod:`kvx.tasks.kv_exec_bench_catalog`):
its 12 tools and 9 requests, the first ``n`` in the release's order; the reply format in the catalog
header (compressed with it); the question ``"\\nUser request: <text>\\n"``; 128 new tokens.
``scorer=kv_exec_bench`` scores the same five metrics as the release does
(:func:`evaluate_kv_exec_bench`): not nested, the first *parsing* object, ``"arguments"`` only,
``schema_valid`` whatever the name, ``args_exact`` by plain equality with the gold arguments. Every
answer's ``details.scorer`` names its scorer, and a set ``scorer`` is part of the cell's identity.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.source import Source
from kvx.tasks import kv_exec_bench_catalog as paper
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import seeded_order
from kvx.tasks.ruler import fit_units
from kvx.tasks.tool_catalog import REQUESTS, TOOLS

if TYPE_CHECKING:
    import jsonschema

INSTRUCTION = "You can call the following tools. Each line defines one tool as JSON."
REPLY_FORMAT = (
    'Reply with exactly one JSON object of the form {"name": "<tool name>", "arguments": {...}} '
    "that calls the right tool for this request, and nothing else."
)
BFCL_VERSION = "2026.3.23"
BFCL_CATEGORIES = ("simple_python", "live_simple")
BFCL_INSTALL = f"pip install --no-deps bfcl-eval=={BFCL_VERSION}"
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
_BFCL_STRIP = re.compile(r"[ ,./\-_*^]")
Normalize = Callable[[str], str]
METRICS = ("json_valid", "name_match", "schema_valid", "args_exact", "name_substring")


# ---------------------------------------------------------------- extraction and comparison


def extract_first_object(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text``, or None when the first ``{`` never closes.

    Braces inside JSON strings do not count, and ``\\"`` / ``\\\\`` escapes are honoured, so
    ``{"q": "a } b"}`` comes out whole. The result is not guaranteed to parse. A truncated call gives
    None rather than its inner object, which would be a different (wrong) reading of the output.
    """
    start = text.find("{")
    return None if start < 0 else _balanced_from(text, start)


def _balanced_from(text: str, start: int) -> str | None:
    """The balanced ``{...}`` opening at ``text[start]`` (string- and escape-aware); None: never closes."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def first_parsing_object(text: str) -> tuple[str, dict[str, Any]] | None:
    """kv-exec-bench's extraction: from each ``{`` in turn (nested ones included), its balanced
    ``{...}``; the first that parses wins. A broken or unclosed object is skipped, so its inner object
    or a later one may be read instead (release ``kv_exec_bench/scorers.py``, ``extract_json_object``)."""
    start = text.find("{")
    while start >= 0:
        candidate = _balanced_from(text, start)
        if candidate is not None:
            try:
                return candidate, json.loads(candidate)
            except json.JSONDecodeError:
                pass
        start = text.find("{", start + 1)
    return None


def bfcl_standardize(text: str) -> str:
    """BFCL's ``standardize_string``: drop spaces and ``,./-_*^``, lowercase, single to double quotes."""
    return _BFCL_STRIP.sub("", text).lower().replace("'", '"')


def _same_value(value: Any, expected: Any, norm: Normalize) -> bool:
    """JSON equality by type: booleans only equal booleans, numbers compare numerically.

    A dict in ``expected`` is itself a map of acceptable values (BFCL nests them that way).
    """
    if isinstance(expected, dict):
        return isinstance(value, dict) and arguments_match(value, expected, norm)
    if isinstance(expected, list):
        return (
            isinstance(value, list)
            and len(value) == len(expected)
            and all(_same_value(v, e, norm) for v, e in zip(value, expected))
        )
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(expected, bool) and value == expected
    if isinstance(expected, (int, float)):
        return isinstance(value, (int, float)) and value == expected
    if isinstance(expected, str):
        return isinstance(value, str) and norm(value) == norm(expected)
    return value is None and expected is None


def arguments_match(
    arguments: dict[str, Any], acceptable: dict[str, list[Any]], norm: Normalize = str
) -> bool:
    """Every argument is one of its acceptable values, none is unknown, and none is missing unless
    its list holds ``""`` (omittable). ``norm`` maps strings before comparing."""
    if any(key not in acceptable for key in arguments):
        return False
    for key, options in acceptable.items():
        if key not in arguments:
            if "" not in options:
                return False
        elif not any(_same_value(arguments[key], option, norm) for option in options):
            return False
    return True


def acceptable_values(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, list[Any]]:
    """A gold call in BFCL's acceptable-values form: the gold value, plus the default or omission
    for optional arguments that have a schema default (nested objects recursively)."""
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    out: dict[str, list[Any]] = {}
    for key, prop in properties.items():
        if key in arguments:
            value = arguments[key]
            if isinstance(value, dict):
                value = acceptable_values(value, prop)
            elif isinstance(value, list) and prop.get("items", {}).get("type") == "object":
                value = [acceptable_values(item, prop["items"]) for item in value]
            out[key] = [value]
        if key not in required and "default" in prop:
            options = out.setdefault(key, [])
            if not any(_same_value(prop["default"], option, str) for option in options):
                options.append(prop["default"])
            options.append("")
    return out


@functools.lru_cache(maxsize=4096)
def _validator(schema_json: str) -> jsonschema.Draft202012Validator:
    import jsonschema  # imported on first use: the config node registers without it

    return jsonschema.Draft202012Validator(json.loads(schema_json))


@dataclass(frozen=True)
class Evaluation:
    """One output judged against one request."""

    metrics: dict[str, float]
    extracted: str | None
    error: str


def evaluate(
    prediction: str,
    name: str,
    schema: dict[str, Any],
    acceptable: dict[str, list[Any]],
    strings: str = "exact",
) -> Evaluation:
    """All five metrics for one output; ``strings`` is ``"exact"`` or ``"bfcl"`` (standardised)."""
    flags = dict.fromkeys(METRICS, 0.0)
    flags["name_substring"] = float(name in prediction)
    extracted = extract_first_object(prediction)

    def done(error: str) -> Evaluation:
        return Evaluation(flags, extracted, error)

    if extracted is None:
        return done("no balanced JSON object")
    try:
        call = json.loads(extracted)
    except json.JSONDecodeError as exc:
        return done(f"invalid JSON: {exc.msg} at char {exc.pos}")
    if not isinstance(call, dict):
        return done("not a JSON object")
    flags["json_valid"] = 1.0
    if call.get("name") != name:
        return done(f"wrong tool: {str(call.get('name'))[:80]!r}")
    flags["name_match"] = 1.0
    arguments = call.get("arguments", call.get("parameters", {}))
    from jsonschema.exceptions import best_match

    error = best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(arguments))
    if error is not None:
        return done(f"schema: {error.message[:160]}")
    flags["schema_valid"] = 1.0
    norm = bfcl_standardize if strings == "bfcl" else str
    if not isinstance(arguments, dict) or not arguments_match(arguments, acceptable, norm):
        return done("arguments differ from the gold call")
    flags["args_exact"] = 1.0
    return done("")


def evaluate_kv_exec_bench(
    prediction: str, name: str, schema: dict[str, Any], arguments: dict[str, Any]
) -> Evaluation:
    """The five metrics as kv-exec-bench scores them (release ``kv_exec_bench/scorers.py``,
    ``score_tool_call``), each on its own, not nested: the call is the first parsing object
    (:func:`first_parsing_object`); its arguments are under ``"arguments"`` only; ``schema_valid``
    validates them against the gold tool's schema whatever the name; ``args_exact`` is Python
    equality with the gold arguments (so ``1 == 1.0 == true``, and a spelled-out default differs)."""
    flags = dict.fromkeys(METRICS, 0.0)
    flags["name_substring"] = float(name in prediction)
    found = first_parsing_object(prediction)
    if found is None:
        return Evaluation(flags, None, "no parsing JSON object")
    extracted, call = found
    flags["json_valid"] = 1.0
    flags["name_match"] = float(call.get("name") == name)
    given = call.get("arguments")
    from jsonschema.exceptions import best_match

    error = best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(given))
    flags["schema_valid"] = float(error is None)
    flags["args_exact"] = float(given == arguments)
    problems = [f"wrong tool: {str(call.get('name'))[:80]!r}"] if not flags["name_match"] else []
    if error is not None:
        problems.append(f"schema: {error.message[:160]}")
    if not flags["args_exact"]:
        problems.append("arguments differ from the gold call")
    return Evaluation(flags, extracted, "; ".join(problems))


# ---------------------------------------------------------------- catalogs


def render_catalog(tools: list[dict[str, Any]]) -> tuple[str, dict[str, tuple[int, int]]]:
    """The context (instruction line, one JSON definition per line) and each tool's line span."""
    text, spans = INSTRUCTION + "\n", {}
    for tool in tools:
        line = json.dumps(tool, ensure_ascii=False)
        spans[tool["name"]] = (len(text), len(text) + len(line))
        text += line + "\n"
    return text, spans


def _call_json(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def _question(request: str) -> str:
    return f"Request: {request}\n{REPLY_FORMAT}"


def bfcl_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as JSON Schema: types mapped recursively, other keys kept.

    BFCL sometimes puts ``enum`` on an array whose items it means to constrain; it moves to ``items``,
    as JSON Schema would otherwise require the whole array to equal one of the strings.
    """
    out = {}
    for key, value in schema.items():
        if key == "type":
            if value == "any":
                continue
            value = _BFCL_TYPES.get(value, value)
            if value not in _JSON_TYPES:
                raise ValueError(f"BFCL type {schema['type']!r} has no JSON Schema equivalent")
        elif key == "properties":
            value = {name: bfcl_schema(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = bfcl_schema(value)
        out[key] = value
    if out.get("type") == "array" and "enum" in out and "enum" not in out.get("items", {}):
        out["items"] = {**out.get("items", {}), "enum": out.pop("enum")}
    return out


def bfcl_gold(acceptable: dict[str, list[Any]], schema: dict[str, Any]) -> dict[str, Any]:
    """One canonical gold call from BFCL's acceptable values: each first option, omitting an argument
    where omission comes first, unless the schema requires it (BFCL marks a few required ones ``""``)."""
    required = set(schema.get("required", []))
    properties = schema.get("properties", {})
    out = {}
    for key, options in acceptable.items():
        values = [option for option in options if option != ""] if key in required else options
        if values and values[0] != "":
            out[key] = _first_option(values[0], properties.get(key, {}))
    return out


def _first_option(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return bfcl_gold(value, schema)
    if isinstance(value, list):
        return [_first_option(item, schema.get("items", {})) for item in value]
    return value


class BfclFiles(NamedTuple):
    """One BFCL v4 category as installed: entries, ground truth and the package version."""

    entries: Path
    answers: Path
    version: str


def bfcl_files(category: str) -> BfclFiles:
    """Locate a BFCL v4 category in the installed bfcl-eval; ConfigError naming the install if absent."""
    try:
        root = Path(str(importlib.resources.files("bfcl_eval") / "data"))
        version = importlib.metadata.version("bfcl-eval")
    except (ModuleNotFoundError, importlib.metadata.PackageNotFoundError):
        raise ConfigError(f"task.source=bfcl needs the bfcl-eval package: {BFCL_INSTALL}") from None
    name = f"BFCL_v4_{category}.json"
    files = BfclFiles(root / name, root / "possible_answer" / name, version)
    if not (files.entries.is_file() and files.answers.is_file()):
        raise ConfigError(f"bfcl-eval {version} has no {name} with ground truth; {BFCL_INSTALL}")
    return files


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def bfcl_requests(
    entries: list[dict[str, Any]], answers: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """BFCL entries joined with their ground truth, as requests with a converted tool and gold call,
    and every entry left out with its reason (never dropped silently).

    Only single-call entries with one tool qualify (the ``simple`` categories), and only those whose
    canonical gold call passes this task's own checks (a few BFCL answers contradict their schema, e.g.
    an empty acceptable list for a required argument: no call could score). The request text is the
    first turn's messages joined, so a live entry's system prompt stays with its user message. Each
    tool carries the name the model is shown (:func:`bfcl_names`); ``bfcl_name`` keeps BFCL's own.
    """
    truth = {row["id"]: row["ground_truth"] for row in answers}
    out, excluded = [], {}
    for entry in entries:
        calls = truth.get(entry["id"])
        if calls is None:
            excluded[entry["id"]] = "no ground truth"
            continue
        if len(entry["function"]) != 1 or len(calls) != 1:
            excluded[entry["id"]] = f"{len(entry['function'])} tools, {len(calls)} gold calls: not one call"
            continue
        ((name, acceptable),) = calls[0].items()
        function = entry["function"][0]
        if name != function["name"]:
            excluded[entry["id"]] = f"the gold call names {name!r}, its tool is {function['name']!r}"
            continue
        tool = {**function, "parameters": bfcl_schema(function["parameters"])}
        gold = bfcl_gold(acceptable, tool["parameters"])
        check = evaluate(_call_json(name, gold), name, tool["parameters"], acceptable, "bfcl")
        if not check.metrics["args_exact"]:
            excluded[entry["id"]] = (
                f"its ground truth contradicts its schema, no call can score ({check.error})"
            )
            continue
        text = "\n\n".join(message["content"] for message in entry["question"][0])
        out.append(
            {"id": entry["id"], "text": text, "tool": tool, "acceptable": acceptable, "arguments": gold}
        )
    for request, shown in zip(out, bfcl_names([request["tool"] for request in out])):
        request["bfcl_name"], request["name"] = request["tool"]["name"], shown
        request["tool"] = {**request["tool"], "name": shown}
    return out, excluded


def bfcl_names(tools: list[dict[str, Any]]) -> list[str]:
    """The name each tool is shown under, so one name always means one definition in any catalog.

    BFCL reuses names for different definitions (``simple_python``: 27 names, ``live_simple``: 26,
    up to 11 definitions each). A name keeps BFCL's spelling for its first definition in file order;
    its k-th different definition (k >= 2) is shown as ``<name>_v<k>``. The scheme depends on the
    category file only, never on the seed, the split size or the budget.
    """
    definitions: dict[str, list[str]] = {}
    out = []
    for tool in tools:
        known = definitions.setdefault(tool["name"], [])
        key = json.dumps(tool, sort_keys=True)
        if key not in known:
            known.append(key)
        version = known.index(key) + 1
        out.append(tool["name"] if version == 1 else f"{tool['name']}_v{version}")
    clash = {shown for shown, tool in zip(out, tools) if shown != tool["name"]} & set(definitions)
    if clash:
        raise ValueError(f"BFCL already names a tool {sorted(clash)[0]!r}: the _v<k> suffix is ambiguous")
    return out


def bfcl_shards(names: list[str], measure: Callable[[list[str]], int], budget: int) -> list[list[str]]:
    """Gold tool names (in the split's seeded order) packed into consecutive shards whose catalog
    each ``measure``s at most ``budget``: next fit, each shard as many of the next names as fit, so an
    item's shard is fixed per configuration and a longer list keeps a shorter one's shards (all but
    its last). ValueError when one tool alone exceeds the budget."""
    shards: list[list[str]] = []
    hint = 1
    while rest := names[sum(map(len, shards)) :]:
        k, _ = fit_units(lambda k, rest=rest: measure(rest[:k]), budget, 0, len(rest), hint)
        if k == 0:
            raise ValueError(
                f"context_tokens={budget} is too small: the catalog of BFCL tool {rest[0]!r} with its "
                f"requests takes {measure(rest[:1])} tokens; raise context_tokens"
            )
        shards.append(rest[:k])
        hint = k
    return shards


class BfclShard(NamedTuple):
    """One catalog of a BFCL split: the gold tools it serves, its text and tool spans, its size."""

    gold: list[str]
    context: str
    spans: dict[str, tuple[int, int]]
    tools: int


def bfcl_catalogs(
    tools: dict[str, dict[str, Any]],
    asked: dict[str, list[str]],
    seed: int,
    budget: int,
    count_tokens: CountTokens,
) -> list[BfclShard]:
    """The catalogs of a split: the gold tools (``asked``: name -> every question of the category that
    calls it, in seeded order) packed by :func:`bfcl_shards`, each filled up to ``budget`` with
    distractors drawn in a seeded order per shard from every other tool of the category (``tools``).
    Every catalog lists its tools in one seeded order, so a shard's text grows line by line as
    distractors join. Nothing here depends on the split size beyond which tools are gold, so a larger
    split repeats a smaller one's catalogs (all but its last) and their stored controls serve both."""
    render, measure = _catalog_measure(tools, asked, seed, count_tokens)
    out = []
    for index, gold in enumerate(bfcl_gold_shards(asked, measure, budget)):
        pool = [name for name in tools if name not in set(gold)]
        random.Random(f"tool_call:bfcl:{seed}:{index}").shuffle(pool)
        k, _ = fit_units(lambda k, g=gold, p=pool: measure(g + p[:k], g), budget, 0, len(pool), hint=0)
        out.append(BfclShard(gold, *render(gold + pool[:k]), len(gold) + k))
    return out


def bfcl_gold_shards(
    asked: dict[str, list[str]], measure: Callable[[list[str], list[str]], int], budget: int
) -> list[list[str]]:
    """:func:`bfcl_catalogs`' shards of gold tools, before distractors fill them: each measured as its
    own catalog with its costliest question. The only step of a split that can run out of room
    (ValueError): filling with distractors starts from the gold catalog, which fits."""
    return bfcl_shards(list(asked), lambda names: measure(names, names), budget)


def _catalog_measure(
    tools: dict[str, dict[str, Any]], asked: dict[str, list[str]], seed: int, count_tokens: CountTokens
) -> tuple[
    Callable[[list[str]], tuple[str, dict[str, tuple[int, int]]]], Callable[[list[str], list[str]], int]
]:
    """A catalog's text and spans from its tool names (in the split's seeded layout), and a shard's
    longest prompt: the catalog of ``names`` with the costliest question of its ``gold`` tools."""
    layout = list(tools)
    random.Random(f"tool_call:bfcl:{seed}").shuffle(layout)
    rank = {name: position for position, name in enumerate(layout)}

    def render(names: list[str]) -> tuple[str, dict[str, tuple[int, int]]]:
        return render_catalog([tools[name] for name in sorted(names, key=rank.__getitem__)])

    @functools.cache
    def cost(question: str) -> int:
        return count_tokens(question)

    def measure(names: list[str], gold: list[str]) -> int:
        longest = max((question for name in gold for question in asked[name]), key=cost, default="")
        return count_tokens(f"{render(names)[0]}\n{longest}")

    return render, measure


# ---------------------------------------------------------------- the task


@dataclass
class ToolCall(Task):
    """One JSON tool call per request against a shared catalog; score = exact call (``args_exact``)."""

    source: str = "builtin"
    bfcl_category: str = "simple_python"
    #: ``kv_exec_bench``: the paper's catalog, prompt layout and 128-token budget (source=builtin only)
    catalog: str = field(default="kvx", metadata=WHEN_SET)
    #: ``kv_exec_bench``: the paper's metric semantics; recorded in every answer's ``details.scorer``
    scorer: str = field(default="kvx", metadata=WHEN_SET)

    max_new_tokens: ClassVar[int] = 96
    #: 2: BFCL runs every item (renamed tools, catalogs sharded to the budget): other sources, same fields
    scorer_version: ClassVar[str] = "2"
    #: kv-exec-bench's contrast: a parseable call (paper Figure 1) and the gold name anywhere in the
    #: output, each vs a schema-valid call
    contrast: ClassVar[dict[str, str]] = {"json_valid": "schema_valid", "name_substring": "schema_valid"}

    def __post_init__(self) -> None:
        check_choice("task.source", self.source, ("builtin", "bfcl"))
        check_choice("task.bfcl_category", self.bfcl_category, BFCL_CATEGORIES)
        # catalog (with source=builtin): kvx's 12 tools / 24 requests, or the paper's 12 / 9; scorer: kvx's
        # nested metrics, or kv-exec-bench's as released (evaluate_kv_exec_bench)
        check_choice("task.catalog", self.catalog, paper.VARIANTS)
        check_choice("task.scorer", self.scorer, paper.VARIANTS)
        if self.source == "bfcl" and (self.catalog, self.scorer) != ("kvx", "kvx"):
            raise ConfigError(
                "task.source=bfcl takes task.catalog=kvx and task.scorer=kvx: kv-exec-bench has no BFCL "
                "split, and BFCL's gold is a set of acceptable values, not the one call its scorer compares"
            )
        if self.catalog == "kv_exec_bench":
            self.max_new_tokens = paper.MAX_NEW_TOKENS  # the release's budget
        # the category's requests, read once for the sources and the manifest (not a field: not config)
        self._bfcl: tuple[BfclFiles, list[dict[str, Any]], dict[str, str]] | None = None
        if self.source == "bfcl":
            bfcl_files(self.bfcl_category)  # fail at config time, before any model loads

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        if self.source == "bfcl":
            return self._bfcl_sources(n, seed, context_tokens, count_tokens)
        if self.catalog == "kv_exec_bench":
            return self._paper_sources(n, count_tokens)
        if n > len(REQUESTS):
            raise ValueError(f"source=builtin has {len(REQUESTS)} requests; asked for {n}")
        context, spans = render_catalog(TOOLS)
        schemas = {tool["name"]: tool["parameters"] for tool in TOOLS}
        out = []
        for index in seeded_order(len(REQUESTS), n, seed):
            request = REQUESTS[index]
            schema = schemas[request.name]
            out.append(
                self._source(
                    f"tool_call_{request.id}",
                    context,
                    spans,
                    request.text,
                    request.name,
                    request.arguments,
                    schema,
                    acceptable_values(request.arguments, schema),
                    {"strings": "exact"},
                    count_tokens,
                )
            )
        return out

    @classmethod
    def _paper_sources(cls, n: int, count_tokens: CountTokens) -> list[Source]:
        """The release's first ``n`` requests in its order (its ``--limit``), whatever the seed."""
        if n > len(paper.REQUESTS):
            raise ValueError(f"task.catalog=kv_exec_bench has {len(paper.REQUESTS)} requests; asked for {n}")
        context, spans = paper.render(paper.TOOLS)
        schemas = {tool["name"]: tool["parameters"] for tool in paper.TOOLS}
        return [
            cls._source(
                f"kv_exec_bench_{request.id}",
                context,
                spans,
                request.text,
                request.name,
                request.arguments,
                schemas[request.name],
                acceptable_values(request.arguments, schemas[request.name]),
                {"strings": "exact"},
                count_tokens,
                question=paper.question(request.text),
            )
            for request in paper.REQUESTS[:n]
        ]

    def _bfcl_sources(
        self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens
    ) -> list[Source]:
        """The first ``n`` requests of a seeded order, their tools packed into catalogs of at most
        ``context_tokens`` (:func:`bfcl_shards`), each filled with distractors up to the budget.
        Sources come shard by shard, so the engine compresses each catalog once and frees it after its
        last request."""
        files, chosen, asked, tools = self._bfcl_split(n, seed)
        shards = bfcl_catalogs(tools, asked, seed, context_tokens, count_tokens)
        shard_of = {name: index for index, shard in enumerate(shards) for name in shard.gold}
        out = []
        for request in sorted(chosen, key=lambda request: shard_of[request["name"]]):
            index = shard_of[request["name"]]
            extra = {
                "strings": "bfcl",
                "bfcl_version": files.version,
                "bfcl_name": request["bfcl_name"],
                "shard": index,
                "shards": len(shards),
                "catalog_tools": shards[index].tools,
            }
            out.append(
                self._source(
                    f"bfcl_{request['id']}",
                    shards[index].context,
                    shards[index].spans,
                    request["text"],
                    request["name"],
                    request["arguments"],
                    request["tool"]["parameters"],
                    request["acceptable"],
                    extra,
                    count_tokens,
                )
            )
        return out

    def _bfcl_split(
        self, n: int, seed: int
    ) -> tuple[BfclFiles, list[dict[str, Any]], dict[str, list[str]], dict[str, dict[str, Any]]]:
        """The category's files, the ``n`` requests chosen (a seeded order), every question of each
        chosen tool (name -> questions) and every tool in that order (name -> definition)."""
        files, requests, excluded = self._bfcl_requests()
        if n > len(requests):
            left_out = "; ".join(f"{key}: {why}" for key, why in excluded.items())
            raise ValueError(
                f"BFCL {self.bfcl_category} has {len(requests)} runnable requests of "
                f"{len(requests) + len(excluded)}; asked for {n}"
                + (f" (left out: {left_out})" if left_out else "")
            )
        order = seeded_order(len(requests), len(requests), seed)
        chosen = [requests[index] for index in order[:n]]
        questions: dict[str, list[str]] = {}
        for request in requests:  # every request of a tool, chosen or not: its shard fits any split size
            questions.setdefault(request["name"], []).append(_question(request["text"]))
        asked = {request["name"]: questions[request["name"]] for request in chosen}
        tools = {requests[index]["name"]: requests[index]["tool"] for index in order}
        return files, chosen, asked, tools

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:
        """``source=bfcl``: pack the split's gold tools into catalogs of ``context_tokens`` as
        ``sources`` does (a tool whose catalog with its requests is over the budget fails the same
        way); the built-in catalogs are not sized to the budget."""
        if self.source == "bfcl":
            _, _, asked, tools = self._bfcl_split(n, seed)
            bfcl_gold_shards(asked, _catalog_measure(tools, asked, seed, count_tokens)[1], context_tokens)

    def manifest(self, n: int, seed: int) -> dict[str, Any] | None:
        """BFCL: the category read, how many of its entries run, each one left out with its reason,
        and how many requests are shown a renamed tool (:func:`bfcl_names`); None for the built-in one."""
        if self.source != "bfcl":
            return None
        files, requests, excluded = self._bfcl_requests()
        return {
            "file": str(files.entries),
            "bfcl_version": files.version,
            "entries": len(requests) + len(excluded),
            "runnable": len(requests),
            "excluded": excluded,
            "renamed": sum(request["name"] != request["bfcl_name"] for request in requests),
        }

    def _bfcl_requests(self) -> tuple[BfclFiles, list[dict[str, Any]], dict[str, str]]:
        """The category's files, its runnable requests and the entries left out (:func:`bfcl_requests`)."""
        if self._bfcl is None:
            files = bfcl_files(self.bfcl_category)
            self._bfcl = (files, *bfcl_requests(_read_jsonl(files.entries), _read_jsonl(files.answers)))
        return self._bfcl

    @staticmethod
    def _source(
        source_id: str,
        context: str,
        spans: dict[str, tuple[int, int]],
        request: str,
        name: str,
        arguments: dict[str, Any],
        schema: dict[str, Any],
        acceptable: dict[str, list[Any]],
        extra: dict[str, Any],
        count_tokens: CountTokens,
        question: str | None = None,
    ) -> Source:
        """One request as a source; ``question`` replaces kvx's request-plus-format question."""
        question = _question(request) if question is None else question
        return Source(
            id=source_id,
            context=context,
            question=question,
            answers=[_call_json(name, arguments)],
            evidence=[spans[name]],
            metadata={
                "name": name,
                "arguments": arguments,
                "schema": schema,
                "acceptable": acceptable,
                **extra,
                "prompt_tokens": count_tokens(f"{context}\n{question}"),
            },
        )

    def evaluate(self, answer: str, source: Source) -> Score:
        meta = source.metadata
        if self.scorer == "kv_exec_bench":
            result = evaluate_kv_exec_bench(answer, meta["name"], meta["schema"], meta["arguments"])
        else:
            result = evaluate(answer, meta["name"], meta["schema"], meta["acceptable"], meta["strings"])
        details = {"extracted": (result.extracted or "")[:400], "error": result.error, "scorer": self.scorer}
        return Score.of(result.metrics["args_exact"], answer.strip(), metrics=result.metrics, details=details)
