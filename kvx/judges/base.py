"""Judge interface: what decides, besides the task's own scorer, whether an answer is right.

A judge is a dataclass registered in the ``kvx.judges`` entry-point group (its fields are the
``judge.<field>`` Hydra node). A model judge (``ModelJudge``) is a reader, a prompt template and a
parser: ``request`` turns a source and an answer into one chat request, the reader answers it, and
``parse`` turns the reply into a ``Judgment``. A rule judge (``uses_model = False``) decides itself.

Nothing is guessed: a judge that does not apply to a source says why (``not_applicable``), a request
that fails or a reply the parser cannot read is an ``error`` with the message, and neither is ever
scored. An undecided judgment (``verdict == "uncertain"``) is judged, earns no credit and stays in
every denominator. Each judgment carries the judge's identity: its name, version, the sha256 of the
template it filled and the identity of the model that answered.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import NEVER, fields_of
from kvx.core.records import Answer
from kvx.core.registry import RegistryError, registry
from kvx.core.source import Source
from kvx.modeling.chat import ChatRequest
from kvx.modeling.endpoint import public_url

STATUSES = ("judged", "error", "not_applicable")
#: the verdict of a judgment the judge left undecided: no credit, still in the denominator
UNCERTAIN = "uncertain"


@dataclass
class Judgment:
    """One judge's decision on one answer (``Answer.judgments[name]`` in the record)."""

    status: str
    correct: bool | None = None
    score: float | None = None
    verdict: str | None = None
    explanation: str | None = None
    reason: str | None = None
    #: the judge's other annotations (TPBench's core_goal and reference_type, ...)
    details: dict[str, Any] = field(default_factory=dict)
    #: name, version, template sha256, fields and the model's identity (filled by the judging stage)
    judge: dict[str, Any] = field(default_factory=dict)
    #: what the endpoint reported for this request (``Answer.served``'s fields), when one answered
    served: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {STATUSES}")
        if self.status == "judged" and not isinstance(self.correct, bool):
            raise ValueError("a judged answer is correct or not")
        if self.status != "judged" and (not self.reason or self.correct is not None):
            raise ValueError(f"a {self.status} judgment says why and is never scored")

    @classmethod
    def of(cls, correct: bool, verdict: str, explanation: str | None = None, **details: Any) -> Judgment:
        """A decision: score 1 when correct, 0 otherwise (an uncertain one included)."""
        return cls("judged", correct, float(correct), verdict, explanation, details=details)

    @classmethod
    def failed(cls, reason: str) -> Judgment:
        return cls("error", reason=reason)

    @classmethod
    def not_applicable(cls, reason: str) -> Judgment:
        return cls("not_applicable", reason=reason)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("details", "served"):
            if not out[name]:
                del out[name]
        return out


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Judge:
    """Base class for ``kvx.judges`` plugins (subclasses are dataclasses)."""

    #: bumped when the template, the parser or the rule changes what a judgment means
    version: ClassVar[str] = "1"
    #: False: the judge decides by a rule (``decide``), asking no model
    uses_model: ClassVar[bool] = False
    #: True only for ``judge=none``: nothing is judged
    identity: ClassVar[bool] = False

    def validate(self) -> None:
        """Check the fields (before any model loads); raise ConfigError naming the key and value."""

    def applies(self, source: Source) -> str | None:
        """None when the judge can judge answers to ``source``, else why not (``not_applicable``)."""
        return None

    def candidate(self, answer: Answer) -> str:
        """The text the judge reads of an answer: the whole output unless the judge's release read a
        parsed field of it."""
        return answer.output

    def template(self, source: Source) -> str | None:
        """The template filled for ``source``, whose sha256 each judgment keeps (None: a rule)."""
        return None

    def decide(self, source: Source, output: str) -> Judgment:
        """A rule judge's decision (model judges ask their model instead)."""
        raise NotImplementedError(f"{type(self).__name__} asks a model: use request() and parse()")

    def describe(self, name: str, source: Source, model: dict[str, Any] | None) -> dict[str, Any]:
        """What a judgment records of its judge: name, version, template hash, fields, model."""
        template = self.template(source)
        return {
            "name": name,
            "version": self.version,
            "template_sha256": None if template is None else sha256(template),
            "fields": fields_of(self),
            "model": model,
        }

    def label(self, name: str) -> str:
        """The judge as a run's tag names it: with every field set away from its default (a URL without
        credentials or query), so a finished cell judged otherwise is judged again."""
        shown = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if value != default:
                shown[f.name] = _public(value)
        return f"{name}({','.join(f'{k}={v}' for k, v in sorted(shown.items()))})" if shown else name


def _public(value: Any) -> Any:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_public(v)}" for k, v in sorted(value.items())) + "}"
    return public_url(value) if isinstance(value, str) and "://" in value else value


@dataclass
class ModelJudge(Judge, ABC):
    """A judge that asks a model: ``reader`` names a registered reader and ``reader_fields`` sets its
    fields (for ``reader=openai``: base_url, model, api_key_env, ...). ``model_defaults`` holds, per
    reader name, the fields of the model the judge's paper used; ``reader_fields`` wins over them."""

    reader: str = "openai"
    reader_fields: dict[str, Any] = field(default_factory=dict, metadata=NEVER)
    max_tokens: int = 512

    uses_model: ClassVar[bool] = True
    model_defaults: ClassVar[dict[str, dict[str, Any]]] = {}

    def validate(self) -> None:
        check_int("judge.max_tokens", self.max_tokens, 1)
        self.model_config()

    def model_fields(self) -> dict[str, Any]:
        return {**self.model_defaults.get(self.reader, {}), **dict(self.reader_fields)}

    def model_config(self) -> Any:
        """The judge's reader as configured and validated (no model loads, no request is sent)."""
        if not isinstance(self.reader, str) or not self.reader:
            raise ConfigError(f"judge.reader={self.reader!r} must name a reader (python -m kvx.plugins)")
        try:
            cls = registry("reader").get(self.reader)
        except RegistryError as exc:
            raise ConfigError(f"judge.reader: {exc}") from None
        fields = self.model_fields()
        known = [f.name for f in dataclasses.fields(cls)]
        for key in fields:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"judge.reader_fields.{key}: reader {self.reader} has no such field "
                    f"(fields: {', '.join(known)}){hint}"
                )
        try:
            config = cls(**fields)
            config.validate()
        except ConfigError as exc:
            raise ConfigError(f"judge.reader={self.reader} (judge.reader_fields): {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"judge.reader_fields: {exc}") from None
        return config

    @abstractmethod
    def request(self, source: Source, output: str) -> ChatRequest:
        """The chat request that asks the judge model about ``output`` (an answer to ``source``)."""

    @abstractmethod
    def parse(self, text: str) -> Judgment:
        """The judgment a reply states (``error`` when the reply cannot be read)."""
