"""Reading YAML the way a user's mistakes deserve: a syntax error, a duplicate key, a
binary or empty file is one line naming the file, the line and the column, never a
traceback, and never a silently kept last value (`steps: 3` then `steps: 500` used to
run 500 steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lmpo.errors import ConfigError


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that a mapping repeats."""


def _mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # an unhashable key: the base constructor says so
            break
        if first != key_node.start_mark.line + 1:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {first})",
                key_node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_yaml(text: str, where: str) -> Any:
    """The YAML document `text`; ConfigError "where:line:column: problem" on any error."""
    try:
        return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{where}{at}: {problem}") from None


def read_yaml_file(path: str | Path, *, what: str = "file", allow_empty: bool = False) -> Any:
    """The YAML document in `path`: a binary, unreadable or (unless `allow_empty`) empty
    file is one line naming it, as are syntax errors and duplicate keys."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read this {what}: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise ConfigError(f"{path}: not a YAML {what} (it holds binary data)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a YAML {what} (not UTF-8 text at byte "
                          f"{exc.start})") from None
    data = parse_yaml(text, str(path))
    if data is None and not allow_empty:
        raise ConfigError(f"{path}: the {what} is empty (no settings in it)")
    return data
