"""`lmpo methods`: the registered methods, from the registries' metadata.

Every loss, advantage estimator, rollout controller, rollout correction and coefficient
schedule registers its `title`, `source` and one-line `summary` (entries that share a
`family`, verl's rejection modes, make one row); the presets that set it are read from
the preset files. The
table in docs/methods-reference.md is this table (`lmpo methods --readme
docs/methods-reference.md` rewrites it between its markers; a test checks it is current),
so a new method is written in its own files and the page is regenerated, never edited by
hand.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lmpo import presets
from lmpo.errors import ConfigError

BEGIN = ("<!-- methods table: `lmpo methods --readme docs/methods-reference.md` writes it; "
         "do not edit -->")
END = "<!-- end of the methods table -->"
SECTIONS = {"loss": lambda c: c.loss.name, "advantage": lambda c: c.advantage.name,
            "controller": lambda c: c.controller.name,
            "correction": lambda c: c.rollout.correction.kind,
            "schedule": lambda c: c.kl.schedule.name if c.kl.schedule.name != "fixed"
            else c.optim.entropy_schedule.name}
OWN_KEYS = {"loss": ("loss",), "advantage": ("advantage",), "controller": ("controller",),
            "correction": ("rollout",), "schedule": ("kl", "optim")}


def registries():
    from lmpo.advantages.base import ADVANTAGES
    from lmpo.losses.registry import LOSSES
    from lmpo.rollout.controllers.registry import CONTROLLERS
    from lmpo.rollout.corrections import CORRECTIONS
    from lmpo.trainer.schedules import SCHEDULES

    return {"loss": LOSSES, "advantage": ADVANTAGES, "controller": CONTROLLERS,
            "correction": CORRECTIONS, "schedule": SCHEDULES}


def preset_parts() -> dict[tuple[str, str], list[str]]:
    """{(section, name): presets that set it}: a preset sets a part when its own file names
    it, changes its section, or is named after it."""
    from lmpo.config import load_config
    from lmpo.trainer.train_config import TrainConfig

    out: dict[tuple[str, str], list[str]] = {}
    for name in presets.names("train"):
        own = yaml.safe_load(presets.find(name, "train").read_text()) or {}
        cfg = load_config(TrainConfig, name)
        for section, part_of in SECTIONS.items():
            part = part_of(cfg)
            if part is not None and (any(k in own for k in OWN_KEYS[section])
                                     or name == part):
                out.setdefault((section, part), []).append(name)
    return out


def rows() -> list[dict]:
    """One row per registered method (the `none` controller is the absence of one)."""
    used = preset_parts()
    out, families = [], {}
    for section, registry in registries().items():
        for name in registry.names():
            meta = registry.meta(name)
            if (section, name) in (("controller", "none"), ("schedule", "fixed")):
                continue  # the absence of one
            family = meta.get("family")
            if family is not None and family in families:
                families[family]["presets"] += used.get((section, name), [])
                continue
            row = {"kind": section, "name": family or name, "title": meta["title"],
                   "source": meta["source"], "summary": meta["summary"],
                   "presets": list(used.get((section, name), []))}
            if family is not None:
                families[family] = row
            out.append(row)
    return out


def markdown() -> str:
    lines = ["| kind | name | method | source | what it does | presets |",
             "|---|---|---|---|---|---|"]
    for r in rows():
        shown = ", ".join(f"`{p}`" for p in r["presets"]) or "-"
        lines.append(f"| {r['kind']} | `{r['name']}` | {r['title']} | {r['source']} | "
                     f"{r['summary']} | {shown} |")
    return "\n".join(lines)


def readme_block() -> str:
    from lmpo import options

    return (f"{BEGIN}\n{markdown()}\n\nThe cross-cutting options (settings that act on any "
            f"loss, estimator or rollout; `lmpo.options`), under lmpo's key with the names "
            f"papers and engines give them:\n\n{options.markdown()}\n{END}")


def search(text: str) -> list[dict]:
    """The method rows whose name, title, source or summary contain `text` (any case)."""
    t = text.lower()
    return [r for r in rows()
            if t in " ".join((r["name"], r["title"], r["source"], r["summary"])).lower()]


def rewrite_readme(path: str | Path) -> bool:
    """Replace the block between the markers in `path`; True if it changed."""
    return replace_block(path, BEGIN, END, readme_block(), "methods table")


def replace_block(path: str | Path, begin: str, end: str, block: str, what: str) -> bool:
    """Replace `begin`...`end` (markers included) in `path` by `block`; True if it changed."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    text = path.read_text()
    if begin not in text or end not in text:
        raise ConfigError(f"{path} has no {what} markers ({begin!r} ... {end!r})")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    new = head + block + tail
    path.write_text(new)
    return new != text
