"""The presets lmpo ships, resolvable by name from any directory.

Four namespaces, one folder each inside the package (the repository's only
copy): `train` (`lmpo train --config NAME`), `sft` (`lmpo sft --config NAME`,
also the warm-start policies a train preset names in `policy:`), `experiment`
(`lmpo compare --config NAME`) and `rm` (`lmpo rm --config NAME`, also the reward
models a train config names in `reward.model:`). A name may exist in more than one namespace.
Anything that looks like a file (a `.yaml` suffix, a path separator, or an
existing file) is a file. Each preset's first comment line is its description.
"""

from __future__ import annotations

from pathlib import Path

from lmpo.errors import ConfigError
from lmpo.registry import nearest

ROOT = Path(__file__).parent
FOLDERS = {"train": "train", "sft": "sft", "experiment": "experiments", "rm": "rm"}


def preset_dir(kind: str) -> Path:
    if kind not in FOLDERS:
        raise ValueError(f"unknown preset kind {kind!r}; kinds: {', '.join(FOLDERS)}")
    return ROOT / FOLDERS[kind]


def names(kind: str) -> list[str]:
    return sorted(p.stem for p in preset_dir(kind).glob("*.yaml"))


def header(path: Path) -> list[str]:
    """The text of a preset file's leading comment lines (blank lines before it skipped), up
    to the first empty comment line or other line."""
    lines: list[str] = []
    for line in path.read_text().splitlines():
        if not lines and not line.strip():
            continue
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        lines.append(text)
    return lines


def description(path: Path) -> str:
    """The first comment line of a preset file (without the `#`): `lmpo presets`' one line."""
    return next(iter(header(path)), "")


def title(path: Path) -> str:
    """The first sentence of a preset file's leading comment (without the `#`s), an
    experiment report's title: the comment's first paragraph up to the first full stop
    outside parentheses and quotes that ends a sentence (followed by a space or the end),
    whole words never cut."""
    joined = " ".join(header(path))
    depth, quoted = 0, False
    for i, ch in enumerate(joined):
        depth += (ch == "(") - (ch == ")")
        quoted ^= ch == '"'
        if ch in ".!?" and depth <= 0 and not quoted and (
                i + 1 == len(joined) or joined[i + 1] == " "):
            return joined[:i + 1]
    return joined


def list_presets(kind: str) -> list[tuple[str, str]]:
    """(name, description) of every preset of `kind`."""
    return [(n, description(preset_dir(kind) / f"{n}.yaml")) for n in names(kind)]


def shipped(path: str | Path) -> bool:
    """Whether `path` is one of the presets lmpo ships (not a user's file)."""
    return Path(path).resolve().is_relative_to(ROOT.resolve())


def looks_like_file(spec: str | Path) -> bool:
    text = str(spec)
    return Path(text).suffix in (".yaml", ".yml") or "/" in text or Path(text).is_file()


def find(name: str, kind: str) -> Path | None:
    """The preset file `name` of `kind`, or None."""
    path = preset_dir(kind) / f"{name}.yaml"
    return path if path.is_file() else None


def resolve(spec: str | Path, kind: str) -> Path:
    """A config given as a file path or as a preset name of `kind`."""
    if looks_like_file(spec):
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    found = find(str(spec), kind)
    if found is None:
        valid = names(kind)
        raise ConfigError(f"unknown {kind} preset {str(spec)!r}{nearest(str(spec), valid)}; "
                          f"{kind} presets: {', '.join(valid) or 'none yet'} (or give a path "
                          "to a YAML file)")
    return found
