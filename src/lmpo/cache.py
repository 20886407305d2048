"""The user cache, `$LMPO_HOME` (default `~/.cache/lmpo`): folders built once and reused.

Each entry is keyed by everything that determines what it holds (`cache_key`): the
builder's resolved config, the source of every lmpo module the builder imports
(transitively, read from the source files: `source_digest`), and the versions of Python,
torch, transformers and lmpo. A change to any of them is a new entry, never a stale one
served. `build_once(final, build, inputs)` makes an entry on first use: the builder holds
an exclusive file lock, writes into a temporary folder next to `final`, records the
inputs and each file's SHA-256 in `lmpo-cache.json`, and renames it into place, so
concurrent first uses build it once and no reader sees a half-written folder. On every
later use the record is checked against the files (`verify`): a damaged entry is kept
aside (`<entry>.damaged`), said in one line, and built again. Warm-start policies
(`lmpo.warmstart`), reward models (`lmpo.reward_model_training`) and converted real
models (`lmpo.models.convert`) live here.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from lmpo.atomic import write_text

HOME_ENV = "LMPO_HOME"
RECORD = "lmpo-cache.json"
PACKAGE = Path(__file__).resolve().parent
_seen: set[tuple[str, int]] = set()  # entries verified by this process (path, mtime)


def lmpo_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or "~/.cache/lmpo").expanduser()


def _module_file(name: str) -> Path | None:
    if name == "lmpo":
        return PACKAGE / "__init__.py"
    rel = Path(*name.split(".")[1:])
    for candidate in (PACKAGE / rel / "__init__.py", PACKAGE / rel.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, name: str) -> set[str]:
    """The lmpo modules `path` (module `name`) imports, at any depth of its code."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "lmpo"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] == "lmpo":
                found.add(base)
                found |= {f"{base}.{a.name}" for a in node.names}  # a submodule, if it is one
    return found


@functools.lru_cache(maxsize=8)
def source_digest(module: str) -> str:
    """SHA-256 over the source of `module` and of every lmpo module it imports, transitively
    (module- or function-level imports alike; parent packages' __init__ included; an
    imported subpackage whole, since its names may load their modules lazily)."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            path = _module_file(prefix)
            if path is None:
                continue
            seen[prefix] = path
            todo += sorted(_imports(path, prefix) - set(seen))
            if path.name == "__init__.py" and prefix != "lmpo":  # a subpackage: all of it
                todo += sorted(".".join([prefix, *f.relative_to(path.parent).with_suffix("").parts])
                               for f in path.parent.rglob("*.py") if f.name != "__init__.py")
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(name.encode() + b"\0" + seen[name].read_bytes() + b"\0")
    return digest.hexdigest()


def versions() -> dict[str, str]:
    import torch
    import transformers

    from lmpo import __version__

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "lmpo": __version__}


def cache_key(kind: str, config: dict, builder: str) -> tuple[str, dict]:
    """(a 16-hex-digit key, the inputs it hashes) of an entry of `kind` built from `config`
    by the module `builder`."""
    inputs = {"kind": kind, "config": config, "source": source_digest(builder),
              "versions": versions()}
    blob = json.dumps(inputs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16], inputs


def file_hashes(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != RECORD):
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda f=fh: f.read(1 << 20), b""):
                digest.update(block)
        out[str(path.relative_to(folder))] = digest.hexdigest()
    return out


def verify(final: Path, inputs: dict) -> str:
    """'' if `final` holds what its record says, built from `inputs`; else what is wrong."""
    try:
        record = json.loads((final / RECORD).read_text())
    except (OSError, ValueError):
        return f"no readable {RECORD}"
    if record.get("inputs") != json.loads(json.dumps(inputs, default=str)):
        return "built from other inputs"
    if record.get("files") != file_hashes(final):
        return "its files differ from those recorded (changed or damaged)"
    return ""


def build_once(final: Path, build, inputs: dict | None = None) -> Path:
    """`final` (a model folder), made by `build(tmp)` into a temporary folder next to it
    and renamed into place under an exclusive file lock, unless it already exists and is
    verified. With `inputs`, the entry records them and its files' hashes."""
    if _usable(final, inputs):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if _usable(final, inputs, say=True):  # another process built it meanwhile
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            build(tmp)
            if inputs is not None:
                write_text(tmp / RECORD, json.dumps({"inputs": inputs,
                                                     "files": file_hashes(tmp)},
                                                    indent=1, default=str) + "\n")
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _usable(final: Path, inputs: dict | None, say: bool = False) -> bool:
    """Whether `final` may be used as it is; a damaged entry is moved aside (under the
    lock only: `say`)."""
    if not (final / "config.json").is_file():
        return False
    if inputs is None:
        return True
    if (str(final), final.stat().st_mtime_ns) in _seen:  # verified once per process
        return True
    problem = verify(final, inputs)
    if not problem:
        _seen.add((str(final), final.stat().st_mtime_ns))
        return True
    if say:
        aside = final.with_name(final.name + ".damaged")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(final, aside)
        print(f"lmpo: the cached {final} is {problem}; kept it as {aside} and building it "
              "again", file=sys.stderr, flush=True)
    return False
