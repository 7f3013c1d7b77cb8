"""YAML files checked against pydantic models: one ``ConfigError`` line naming the file and key.

Every definition file of a workspace (``lakepub.yaml``, datasets, contracts) is parsed with a
model that forbids unknown keys (a misspelt ``comit:`` would otherwise be silently ignored) and
wrong types; a problem is one line ``<file>: '<key.path>' <what is wrong>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from lakepub.errors import ConfigError


class File(BaseModel):
    """Base of the file models: unknown keys and implicit conversions are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)


_KINDS = {"string_type": "a string", "bool_type": "true or false", "dict_type": "a mapping",
          "model_type": "a mapping", "model_attributes_type": "a mapping", "list_type": "a list",
          "int_type": "an integer"}


def parse(model: type[BaseModel], raw: dict[str, Any], path: Path,
          special: Mapping[tuple[str, ...], str] | None = None, prefix: str = "") -> Any:
    """``raw`` as ``model``, or one ConfigError line naming the file and the key path (after
    ``prefix``, for a mapping nested in the file); ``special`` gives the message for a wrong value
    at some key paths."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(part) for part in err["loc"])
        key, kind, got = prefix + ".".join(loc), err["type"], _short(err.get("input"))
    if kind == "missing" or (got == "None" and len(loc) == 1 and loc[0] in model.model_fields
                             and model.model_fields[loc[0]].is_required()):
        raise ConfigError(f"{path}: '{key}' is required") from None
    if kind == "extra_forbidden":
        known = f" (known keys: {', '.join(model.model_fields)})" if len(loc) == 1 else ""
        raise ConfigError(f"{path}: unknown key '{key}'{known}") from None
    if special and loc in special:
        raise ConfigError(f"{path}: '{key}' {special[loc]}") from None
    if kind in _KINDS:
        raise ConfigError(f"{path}: '{key}' must be {_KINDS[kind]}, not {got}") from None
    if kind == "literal_error":
        raise ConfigError(f"{path}: '{key}' must be one of {err['ctx']['expected']}, not {got}") from None
    raise ConfigError(f"{path}: '{key}' {err['msg'].lower()}, not {got}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_text(path: Path) -> str:
    """The file's text, or one ConfigError line: not found, not readable (a folder), not UTF-8."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path} not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}); "
                          "save the file as UTF-8") from None


class _UniqueKeys(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one
    silently: the file would not mean what its first occurrence says)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    raise _Duplicate(key.value, seen[key.tag, key.value], key.start_mark.line + 1)
                seen[key.tag, key.value] = key.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _Duplicate(Exception):
    def __init__(self, key: str, first: int, second: int):
        super().__init__(key, first, second)
        self.key, self.first, self.second = key, first, second


def read_yaml(path: Path) -> dict[str, Any]:
    text = read_text(path)
    try:
        data = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader
    except _Duplicate as dup:
        raise ConfigError(f"{path}: '{dup.key}' is given twice (lines {dup.first} and {dup.second}); "
                          "YAML would keep only the last one: remove one") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a YAML mapping")
    return data


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every key path of a YAML mapping document (``("constraints", "enum", "0",
    "col")``; list items by index), from the composed nodes' ``start_mark``: what lint findings
    cite. Empty for text that is not valid YAML."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines.setdefault(sub, key.start_mark.line + 1)
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, str(i))
                lines.setdefault(sub, item.start_mark.line + 1)
                walk(item, sub)

    if root is not None:
        walk(root, ())
    return lines


def line_of(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int:
    """The line of ``path`` or of its nearest ancestor that has one (1: the file itself)."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return 1
