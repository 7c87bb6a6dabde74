"""Strict TOML loader for the schema: defaults <- file <- `--set key=value` overrides.

Every problem is collected (not just the first) and reported with the file, line, key
path, bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal

import tomli_w

from cosyvoiced.config.checks import config_problems
from cosyvoiced.config.schema import Config
from cosyvoiced.errors import CosyvoicedError

DEFAULT_CONFIG_PATH = "/etc/cosyvoiced/cosyvoiced.toml"
SECRET_KEYS = ("api.token",)
"""Keys `dump_config` never prints (`check-config` output ends up in tickets and chats)."""
REDACTED = "<redacted>"


@dataclass(frozen=True)
class ConfigProblem:
    source: str
    """File name, "--set" or "defaults"."""
    key: str
    """Dotted key path, e.g. "tts.max_chars"."""
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(CosyvoicedError):
    """The config could not be loaded; `problems` lists every reason."""

    code = "bad_config"

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load_config(path: str | os.PathLike[str] | None, overrides: typing.Sequence[str] = ()) -> Config:
    """Load `path` (None: defaults only) and apply `key=value` overrides."""
    problems: list[ConfigProblem] = []
    data: dict[str, Any] = {}
    lines: _LineIndex | None = None
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError([ConfigProblem(source, "", "config file not found")]) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([ConfigProblem(source, "", f"cannot read: {exc}")]) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([ConfigProblem(source, "", f"invalid TOML: {exc}")]) from None
        lines = _LineIndex(text)
    overridden = frozenset(_apply_override(data, item, problems) for item in overrides)
    where = _Where(source, lines, overridden)
    config = _build(Config, data, "", where, problems)
    if not problems:  # cross-field checks (config/checks.py)
        problems += [where.problem(key, msg) for key, msg in config_problems(config)]
    if problems:
        raise ConfigError(problems)
    assert isinstance(config, Config)
    return config


def dump_config(config: Config, *, redact: bool = True) -> str:
    """The effective config as TOML (what `check-config` prints); a secret that is set
    (`SECRET_KEYS`) is shown as `REDACTED` unless `redact` is false."""
    plain = _to_plain(config)
    for key in SECRET_KEYS if redact else ():
        section, name = key.split(".")
        if plain[section][name]:
            plain[section][name] = REDACTED
    return tomli_w.dumps(plain)


def changed_keys(old: Config, new: Config) -> list[tuple[str, bool]]:
    """Dotted keys whose values differ, each with whether it applies live (no restart)."""
    out: list[tuple[str, bool]] = []
    for section in fields(Config):
        a, b = getattr(old, section.name), getattr(new, section.name)
        for f in fields(a):
            if getattr(a, f.name) != getattr(b, f.name):
                out.append((f"{section.name}.{f.name}", bool(f.metadata.get("live"))))
    return out


# --- internals ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    source: str
    lines: _LineIndex | None
    overridden: frozenset[str]

    def problem(self, key: str, message: str) -> ConfigProblem:
        if key in self.overridden:
            return ConfigProblem("--set", key, message)
        return ConfigProblem(self.source, key, message, self.lines.find(key) if self.lines else None)


class _LineIndex:
    """Finds the line of a dotted key in TOML text (tomllib keeps no positions)."""

    _table = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _key = re.compile(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=")

    def __init__(self, text: str) -> None:
        self._index: dict[str, int] = {}
        table = ""
        array_counts: dict[str, int] = {}
        for n, raw in enumerate(text.splitlines(), start=1):
            if m := self._table.match(raw):
                table = _unquote(m.group(1))
                if raw.lstrip().startswith("[["):
                    i = array_counts.get(table, 0)
                    array_counts[table] = i + 1
                    table = f"{table}[{i}]"
                self._index.setdefault(table, n)
            elif m := self._key.match(raw):
                key = _unquote(m.group(1))
                self._index.setdefault(f"{table}.{key}" if table else key, n)

    def find(self, key: str) -> int | None:
        while key:
            if key in self._index:
                return self._index[key]
            key = key.rpartition(".")[0]
        return None


def _unquote(dotted: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in dotted.split("."))


def _apply_override(data: dict[str, Any], item: str, problems: list[ConfigProblem]) -> str:
    """Merge one `key=value` into `data`; returns the key."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        problems.append(ConfigProblem("--set", item, "expected KEY=VALUE, e.g. log.level=debug"))
        return key
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word is taken as a string
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            problems.append(ConfigProblem("--set", key, f"{part} is not a table"))
            return key
        node = child
    node[leaf] = value
    return key


def _build(cls: type, data: Any, prefix: str, where: _Where,
           problems: list[ConfigProblem]) -> Any:
    if not isinstance(data, dict):
        problems.append(where.problem(prefix, f"expected a table, got {_show(data)}"))
        return cls()
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key in data:
        if key not in known:
            path = f"{prefix}.{key}" if prefix else key
            allowed = ", ".join(sorted(known))
            problems.append(where.problem(path, f"unknown key; allowed: {allowed}"))
    values: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            continue
        path = f"{prefix}.{name}" if prefix else name
        ok, value = _convert(hints[name], data[name], path, where, problems)
        if ok and _check_meta(f, value, path, where, problems):
            values[name] = value
    return cls(**values)


def _convert(tp: Any, value: Any, path: str, where: _Where,
             problems: list[ConfigProblem]) -> tuple[bool, Any]:
    def bad(allowed: str) -> tuple[bool, Any]:
        problems.append(where.problem(path, f"got {_show(value)}; expected {allowed}"))
        return False, None

    origin = typing.get_origin(tp)
    if is_dataclass(tp):
        before = len(problems)
        built = _build(tp, value, path, where, problems)
        return len(problems) == before, built
    if origin is Literal:
        choices = typing.get_args(tp)
        return (True, value) if value in choices else bad("one of " + ", ".join(map(repr, choices)))
    if origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if not isinstance(value, list):
            return bad("an array")
        items = []
        for i, item in enumerate(value):
            ok, conv = _convert(item_tp, item, f"{path}[{i}]", where, problems)
            if not ok:
                return False, None
            items.append(conv)
        return True, tuple(items)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            if option is type(None) and value is None:
                return True, None
        inner = [t for t in typing.get_args(tp) if t is not type(None)]
        return _convert(inner[0], value, path, where, problems)
    if tp is bool:
        return (True, value) if isinstance(value, bool) else bad("true or false")
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (True, value) if ok else bad("an integer")
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return (True, float(value)) if ok else bad("a number")
    if tp is str:
        return (True, value) if isinstance(value, str) else bad("a string")
    raise TypeError(f"schema type {tp!r} at {path} is not supported by the loader")


def _check_meta(f: dataclasses.Field[Any], value: Any, path: str, where: _Where,
                problems: list[ConfigProblem]) -> bool:
    lo, hi, exist = f.metadata.get("min"), f.metadata.get("max"), f.metadata.get("must_exist")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):  # nan passes any range
            allowed = f"allowed {lo} to {hi}" if (lo, hi) != (None, None) else "expected a number"
            problems.append(where.problem(path, f"{value!r} is not a finite number; {allowed}"))
            return False
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            problems.append(where.problem(path, f"{value!r} is out of range; allowed {lo} to {hi}"))
            return False
    if exist:
        for p in value if isinstance(value, tuple) else (value,):
            if p == "":
                continue
            ok = Path(p).is_dir() if exist == "dir" else Path(p).is_file()
            if not ok:
                problems.append(where.problem(path, f"{exist} not found: {p!r}"))
                return False
    return True


def _show(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "table"}.get(type(value), type(value).__name__)
    return f"{kind} {value!r}" if not isinstance(value, dict | list) else kind


def _to_plain(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    return obj


def merge_live(old: Config, new: Config) -> Config:
    """`old` with every field marked live taken from `new`."""
    sections = {}
    for section in fields(Config):
        a, b = getattr(old, section.name), getattr(new, section.name)
        live = {f.name: getattr(b, f.name) for f in fields(a) if f.metadata.get("live")}
        sections[section.name] = replace(a, **live)
    return replace(old, **sections)
