"""Config loading: nested dataclasses from YAML with `key.sub=value` overrides.

Unknown keys are errors that name the nearest valid key; values are parsed as
YAML scalars (`lr=3e-4`, `loss.hparams={beta1: 0.5}`) and type-checked against
the field's declared type.

A config is a YAML file or the name of a shipped preset (`lmpo.presets`). A
file may start from another with `extends: NAME` (`NAME.yaml` next to it, else
the shipped preset of that name) or `extends: path/to/file.yaml` (relative to
the extending file).
Mappings merge key by key, the extending file winning; any other value (lists
included) is replaced. A section that names a different function (`loss.name`,
`advantage.name`) does not inherit the parent's `hparams`: hyper-parameters
belong to the function they were written for.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from lmpo import presets
from lmpo.atomic import write_text
from lmpo.errors import ConfigError
from lmpo.registry import nearest
from lmpo.yamlfile import parse_yaml, read_yaml_file

__all__ = ["ConfigError", "apply_override", "build", "flat_config", "flatten", "load_config",
           "merge", "merged", "own_keys", "read_layers", "read_yaml", "save_config", "to_dict"]


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, list) and hasattr(tp, "from_list"):  # a section written as a list
            value = tp.from_list(value, where)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return build(tp, value, prefix=where + ".")
    if tp is Any:
        return value
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return list(value)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "2e-3" as a string
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected float, got {value!r}") from None
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if tp is int and isinstance(value, bool):  # bool is an int to isinstance, not to lmpo
        raise ConfigError(f"{where}: expected int, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


def unknown_key(cls, key: str, where: str, types_: dict) -> ConfigError:
    """The error for `key`, unknown in `cls`: a replaced key says what replaced it."""
    replaced = getattr(cls, "replaced_keys", {}).get(key)
    if replaced:
        return ConfigError(f"config key {where!r} {replaced}")
    return ConfigError(f"unknown config key {where!r}{nearest(key, list(types_))}; valid keys "
                       f"under {where.rpartition('.')[0] or 'the top level'}: "
                       f"{', '.join(types_)}")


def build(cls, data: dict | None, prefix: str = ""):
    """Instantiate dataclass `cls` from a (nested) mapping, rejecting unknown keys."""
    data = data or {}
    types_ = _field_types(cls)
    for key in data:
        if key not in types_:
            raise unknown_key(cls, key, prefix + key, types_)
    kwargs = {k: _coerce(v, types_[k], prefix + k) for k, v in data.items()}
    obj = cls(**kwargs)
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def apply_override(data: dict, assignment: str, cls) -> None:
    """Set `a.b.c=value` inside the raw mapping `data`, checking the path against `cls`.

    Hydra's `+key=value` (add) and `++key=value` (add or override) read as `key=value`:
    every key of the schema exists with its default, and a free-form mapping (a part's
    `hparams`, `log.comparators`, `task_params`) takes a new key either way. Hydra's
    `~key` (delete) is refused: a key goes back to its default by being left out."""
    if assignment.startswith("~"):
        raise ConfigError(f"override {assignment!r}: lmpo has no key deletion (Hydra's ~key); "
                          "leave the key out for its default, or set it (key=null where "
                          "null is allowed)")
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like key=value")
    path, raw = assignment.split("=", 1)
    path = path.lstrip("+")
    keys = path.strip().split(".")
    node, tp = data, cls
    for i, key in enumerate(keys):
        types_ = _field_types(tp) if dataclasses.is_dataclass(tp) else None
        if types_ is not None and key not in types_:
            raise unknown_key(tp, key, ".".join(keys[:i + 1]), types_)
        if i == len(keys) - 1:
            node[key] = parse_yaml(raw, f"override {assignment!r}") if raw.strip() else ""
        else:
            node = node.setdefault(key, {})
            tp = types_[key] if types_ is not None else dict
            if typing.get_origin(tp) in (typing.Union, types.UnionType):
                tp = [a for a in typing.get_args(tp) if a is not type(None)][0]


def merge(base: dict, child: dict) -> dict:
    """`child` over `base`: mappings merge recursively, everything else is replaced; a
    mapping whose `name` changes keeps none of the parent's `hparams`."""
    out = dict(base)
    for key, value in child.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            if "name" in value and value["name"] != old.get("name"):
                old = {k: v for k, v in old.items() if k != "hparams"}
            out[key] = merge(old, value)
        else:
            out[key] = value
    return out


def resolve_extends(target: str, relative_to: Path, kind: str) -> Path:
    """The file an `extends:` value names: a path (relative to the extending file's
    folder), `NAME.yaml` next to it, or the shipped preset NAME of `kind`."""
    candidate = Path(target)
    if candidate.suffix not in (".yaml", ".yml"):
        candidate = candidate.with_name(candidate.name + ".yaml")
    path = candidate if candidate.is_absolute() else relative_to / candidate
    if path.exists():
        return path
    shipped = None if presets.looks_like_file(target) else presets.find(target, kind)
    if shipped is None:
        raise ConfigError(f"extends: {target!r} names no file ({path} does not exist) and no "
                          f"{kind} preset; {kind} presets: {', '.join(presets.names(kind))}")
    return shipped


def read_layers(path: str | Path, kind: str = "train", _chain: tuple[Path, ...] = ()
                ) -> list[tuple[Path, dict]]:
    """The files of a config's `extends:` chain (a file, or a preset name of `kind`), each
    with its own mapping, the root first."""
    path = presets.resolve(path, kind)
    data = read_yaml_file(path, what="config file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    parent = data.pop("extends", None)
    if parent is None:
        return [(path, data)]
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends must be a preset name or a path, got {parent!r}")
    parent_path = resolve_extends(parent, path.parent, kind).resolve()
    chain = (*_chain, path.resolve())
    if parent_path in chain:
        cycle = " -> ".join(str(p.name) for p in (*chain, parent_path))
        raise ConfigError(f"extends cycle: {cycle}")
    return [*read_layers(parent_path, kind, chain), (path, data)]


def merged(layers: list[tuple[Path, dict]]) -> dict:
    """The layers of an `extends:` chain (`read_layers`) merged, the last one winning."""
    data: dict = {}
    for _, layer in layers:
        data = merge(data, layer)
    return data


def read_yaml(path: str | Path, kind: str = "train") -> dict:
    """A YAML config (a file, or a preset name of `kind`) as a mapping, with its
    `extends:` chain merged in."""
    return merged(read_layers(path, kind))


def own_keys(layers: list[tuple[Path, dict]]) -> set[str]:
    """The dotted keys that the user's own files in an `extends:` chain (`read_layers`) set:
    every file but the shipped presets."""
    return {key for file, layer in layers if not presets.shipped(file) for key in flatten(layer)}


def load_config(cls, path: str | Path | None, overrides: list[str] | None = None):
    """Load `cls` from a YAML file or preset name (of `cls.preset_kind`; defaults if None),
    then apply `key=value` overrides. A class with `check_own_keys(data, own)` sees the
    mapping and the keys the user set (their files and the overrides), and may refuse
    values the user only inherited."""
    layers = [] if path is None else read_layers(path, getattr(cls, "preset_kind", "train"))
    data, given = merged(layers), {}
    for assignment in overrides or []:
        apply_override(data, assignment, cls)
        apply_override(given, assignment, cls)
    if hasattr(cls, "check_own_keys"):
        cls.check_own_keys(data, own_keys(layers) | set(flatten(given)))
    return build(cls, data)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def save_config(cfg, path: str | Path) -> None:
    write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def flatten(d: dict, prefix: str = "") -> dict:
    """Dotted keys of a nested mapping; an `hparams` mapping stays one value."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and k != "hparams":
            out |= flatten(v, key + ".")
        else:
            out[key] = v
    return out


def flat_config(cfg) -> dict:
    """Dotted keys of a config (a dataclass or its mapping), each hyper-parameter of every
    section's `hparams` a key of its own (`loss.hparams.beta1`)."""
    data = to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg
    out = {}
    for key, value in flatten(data).items():
        if key.endswith(".hparams"):
            out |= {f"{key}.{k}": v for k, v in (value or {}).items()}
        else:
            out[key] = value
    return out

