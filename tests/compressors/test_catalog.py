"""The kvpress catalog's explicit dataclasses against kvpress itself, and every built-in press's field checks.

The catalog copies each press's plain-valued fields and defaults so that registering its config node
never imports kvpress; these tests catch a kvpress upgrade that adds, drops or changes one.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from kvx.compressors import catalog
from kvx.core.errors import ConfigError
from kvx.core.registry import registry

SCORERS = [
    "knorm",
    "random",
    "expected_attention",
    "observed_attention",
    "lagkv",
    "cur",
    "leverage",
    "compactor",
    "non_causal_attention",
]
#: deliberate departures from kvpress's defaults
KVX_DEFAULTS = {("random", "seed"): 0}
_PLAIN = (int, float, bool, str)


def _plain(hint: typing.Any) -> bool:
    """A value a config can hold: a scalar, a string Literal, or an optional scalar."""
    if hint in _PLAIN:
        return True
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return all(isinstance(a, str) for a in args)
    return typing.get_origin(hint) is typing.Union and len(args) == 1 and args[0] in _PLAIN


def _press_fields(press_cls: type) -> dict[str, typing.Any]:
    hints = typing.get_type_hints(press_cls)
    return {
        f.name: f.default
        for f in dataclasses.fields(press_cls)
        if f.name != "compression_ratio" and not f.name.startswith("_") and _plain(hints[f.name])
    }


@pytest.mark.parametrize("name", SCORERS)
def test_catalog_fields_and_defaults_match_kvpress(name: str) -> None:
    import kvpress

    cls = getattr(catalog, name)
    press_cls = getattr(kvpress, cls.press_class)
    expected = {k: KVX_DEFAULTS.get((name, k), v) for k, v in _press_fields(press_cls).items()}
    assert {f.name: f.default for f in dataclasses.fields(cls)} == expected
    press = cls().build_press(0.25)
    assert isinstance(press, press_cls) and press.compression_ratio == 0.25


def test_every_catalog_entry_is_registered() -> None:
    builtin = {e.name for e in registry("compressor").entries if e.dist == "kvx"}
    assert set(SCORERS) | {"block", "key_rerotation"} <= builtin


@pytest.mark.parametrize(
    ("name", "fields", "key"),
    [
        ("snapkv", {"window_size": -5}, "press.window_size=-5"),
        ("snapkv", {"kernel_size": 4}, "press.kernel_size=4"),
        ("adakv", {"alpha_safeguard": 1.5}, "press.alpha_safeguard=1.5"),
        ("pyramidkv", {"beta": 0}, "press.beta=0"),
        ("streaming_llm", {"n_sink": -1}, "press.n_sink=-1"),
        ("think", {"window_size": 0}, "press.window_size=0"),
        ("chunkkv", {"chunk_length": 0}, "press.chunk_length=0"),
        ("hqq", {"bits": 3}, "press.bits=3"),
        ("hqq", {"group_size": 0}, "press.group_size=0"),
        ("hqq", {"residual_length": -1}, "press.residual_length=-1"),
        ("block", {"block_size": 0}, "press.block_size=0"),
        ("expected_attention", {"n_future_positions": 0}, "press.n_future_positions=0"),
        ("lagkv", {"lag_size": 0}, "press.lag_size=0"),
        ("cur", {"leverage_type": "both"}, "press.leverage_type='both'"),
        ("leverage", {"sketch_dimension": 0}, "press.sketch_dimension=0"),
        ("compactor", {"blending": 2.0}, "press.blending=2.0"),
        ("non_causal_attention", {"chunk_size": 0}, "press.chunk_size=0"),
    ],
)
def test_press_fields_are_checked(name: str, fields: dict[str, typing.Any], key: str) -> None:
    cls = registry("compressor").get(name)
    cls().validate()  # the defaults are valid
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        cls(**fields).validate()
