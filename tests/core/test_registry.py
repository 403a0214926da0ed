"""kvx.core.registry without subprocesses: lazy loading, broken entries, collisions, unknown names,
discovery."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint, PathDistribution
from pathlib import Path

import pytest

import kvx.core.registry as registry_mod
from kvx.core.registry import Entry, Registry, RegistryError, canonical, registry, reset, unknown_message

GROUP = "kvx.compressors"


def _entry(name: str, value: str, dist: str = "kvx", version: str = "0.1.0") -> Entry:
    return Entry(name, GROUP, dist, version, EntryPoint(name, value, GROUP))


def _reg(*entries: Entry) -> Registry:
    return Registry(kind="compressor", group=GROUP, entries=list(entries))


@pytest.fixture()
def lazy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module nobody has imported yet, so a test can see exactly when an entry imports it."""
    name = f"kvx_test_lazy_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture()
def fresh() -> Iterator[None]:
    """Discovery is cached per process: start and leave other tests with a clean cache."""
    reset()
    yield
    reset()


def test_entries_load_lazily_and_once(lazy_module: str) -> None:
    reg = _reg(_entry("thing", f"{lazy_module}:Thing"), _entry("other", "json:dumps"))
    assert reg.names() == ["other", "thing"]
    entry = reg.entry("thing")
    assert lazy_module not in sys.modules and not entry.loaded
    cls = reg.get("thing")
    assert cls.__name__ == "Thing" and lazy_module in sys.modules
    assert reg.get("thing") is cls and entry.status == "ok"
    assert not reg.entry("other").loaded, "loading one entry must not load the others"


@pytest.mark.parametrize(
    ("value", "error"),
    [("kvx_no_such_module_xyz:Nope", "ModuleNotFoundError"), ("json:NoSuchAttr", "AttributeError")],
)
def test_broken_entry_is_recorded_and_others_still_load(value: str, error: str) -> None:
    reg = _reg(_entry("broken", value, dist="kvx-broken", version="0.0.1"), _entry("fine", "json:dumps"))
    with pytest.raises(RegistryError, match=rf"'broken' from kvx-broken:broken is broken: {error}"):
        reg.get("broken")
    broken = reg.entry("broken")
    assert broken.status == "broken" and broken.error and broken.error.startswith(error)
    with pytest.raises(RegistryError):  # stays broken: the failed import is not retried silently
        reg.get("broken")
    import json

    assert reg.get("fine") is json.dumps and reg.entry("fine").status == "ok"


def test_status_of_an_unloaded_broken_entry_loads_it() -> None:
    """``python -m kvx.plugins --check`` reads ``status`` only; it must report broken without raising."""
    entry = _entry("broken", "kvx_no_such_module_xyz:Nope", dist="kvx-broken")
    assert entry.status == "broken" and "kvx_no_such_module_xyz" in (entry.error or "")


def test_collision_is_ambiguous_bare_and_resolves_qualified() -> None:
    a = _entry("dup", "json:dumps", dist="plugin-a", version="1.0")
    b = _entry("dup", "json:loads", dist="plugin-b", version="2.0")
    reg = _reg(a, b, _entry("solo", "json:JSONDecoder"))
    assert reg.names() == ["plugin-a:dup", "plugin-b:dup", "solo"]
    with pytest.raises(RegistryError) as info:
        reg.get("dup")
    message = str(info.value)
    assert "plugin-a:dup" in message and "plugin-b:dup" in message
    assert "press=<dist>:dup" in message, "the hint must use the override key a user types"
    assert not a.loaded and not b.loaded, "an ambiguous name must fail before importing anything"
    import json

    assert reg.get("plugin-a:dup") is json.dumps
    assert reg.get("plugin-b:dup") is json.loads
    assert reg.get("kvx:solo") is json.JSONDecoder, "dist:name works for unique names too"


def test_a_builtin_keeps_its_bare_name_and_the_plugin_is_qualified() -> None:
    """A plugin registering a built-in's name must not change what ``press=snapkv`` (or the default
    config) means; it stays reachable as ``dist:name``."""
    builtin = _entry("snapkv", "json:dumps")
    plugin = _entry("snapkv", "json:loads", dist="kvx-shadow", version="0.0.1")
    reg = _reg(plugin, builtin, _entry("tova", "json:JSONDecoder"))
    assert reg.names() == ["kvx-shadow:snapkv", "snapkv", "tova"]
    assert reg.entry("snapkv") is builtin and reg.entry("kvx:snapkv") is builtin
    assert reg.entry("kvx-shadow:snapkv") is plugin
    assert not plugin.loaded


def test_canonical_names_one_entry_however_typed(fake_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry_mod.DISABLE_ENV, raising=False)
    assert canonical("compressor", "tova") == canonical("compressor", "kvx:tova") == "tova"
    assert canonical("compressor", "xpress") == canonical("compressor", "kvx-plugin-x:xpress")
    assert canonical("compressor", "xpress") == "kvx-plugin-x:xpress"
    with pytest.raises(RegistryError, match="Did you mean 'tova'"):
        canonical("compressor", "tovaa")


def test_unknown_name_suggests_and_lists() -> None:
    reg = _reg(_entry("snapkv", "json:dumps"), _entry("tova", "json:loads"))
    with pytest.raises(RegistryError) as info:
        reg.entry("snapkvv")
    message = str(info.value)
    assert "Unknown compressor 'snapkvv'." in message
    assert "Did you mean 'snapkv'?" in message
    assert "Registered compressors: snapkv, tova." in message
    with pytest.raises(RegistryError, match="Unknown compressor 'other:snapkv'"):
        reg.entry("other:snapkv")


def test_unknown_message_without_a_close_match_or_any_names() -> None:
    assert "Did you mean" not in unknown_message("reader", "zzzzzz", ["hf", "tiny"])
    assert unknown_message("diagnostic", "x", []).endswith("Registered diagnostics: (none).")


def _dist(root: Path, name: str, version: str, eps: str) -> PathDistribution:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(eps)
    return PathDistribution(info)


@pytest.fixture()
def fake_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    """Discovery sees kvx, one plugin (visible twice on sys.path) and nothing else."""
    kvx = _dist(tmp_path / "a", "kvx", "0.1.0", "[kvx.compressors]\ntova = json:dumps\n")
    plugin = _dist(tmp_path / "b", "kvx-plugin-x", "0.2.0", "[kvx.compressors]\nxpress = json:loads\n")
    eps = [*kvx.entry_points, *plugin.entry_points, *plugin.entry_points]
    monkeypatch.setattr(registry_mod, "entry_points", lambda group: [ep for ep in eps if ep.group == group])


def test_discovery_records_dists_and_dedups(fake_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry_mod.DISABLE_ENV, raising=False)
    reg = registry("compressor")
    assert [(e.name, e.dist, e.version) for e in reg.entries] == [
        ("tova", "kvx", "0.1.0"),
        ("xpress", "kvx-plugin-x", "0.2.0"),
    ]
    assert registry("compressor") is reg, "discovered once per process"
    assert registry_mod.plugin_versions() == {"kvx": "0.1.0", "kvx-plugin-x": "0.2.0"}
    assert not any(e.loaded for e in reg.entries)


def test_disable_plugins_keeps_builtins(fake_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry_mod.DISABLE_ENV, "1")
    assert [e.dist for e in registry("compressor").entries] == ["kvx"]


def test_unknown_kind() -> None:
    with pytest.raises(KeyError, match="unknown registry kind"):
        registry("compresor")
