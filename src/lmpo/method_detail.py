"""`lmpo methods NAME`: one registered part in full, from its registry entry.

For each registry that holds NAME (a loss, an estimator, a rollout controller, a
correction, a schedule): its title, source and summary, the formula lines of its
docstring, and every hyper-parameter with its default, its declared domain and the engine
settings that feed it when the user sets none (`peer_keys`: verl's, TRL's and SkyRL's).
docs/methods-reference.md holds the same table for every part (`markdown_all`, between
its markers; a test checks it is current).
"""

from __future__ import annotations

import inspect

from lmpo.methods import registries, replace_block
from lmpo.rollout.controllers.registry import CONTEXT

BEGIN = ("<!-- per-part hyper-parameters: `lmpo methods --readme docs/methods-reference.md` "
         "writes them; do not edit -->")
END = "<!-- end of the per-part hyper-parameters -->"
# where each engine reads a part's settings: a loss's from verl's actor config, an
# estimator's from verl's algorithm config; TRL's from GRPOConfig; SkyRL's from
# trainer.algorithm
PREFIX = {("loss", "verl"): "actor_rollout_ref.actor.", ("advantage", "verl"): "algorithm.",
          ("loss", "trl"): "GRPOConfig.", ("advantage", "trl"): "GRPOConfig.",
          ("loss", "skyrl"): "trainer.algorithm."}
ENGINES = ("verl", "trl", "skyrl")
EXPLICIT = ("Any hyper-parameter may also be set by name: verl "
            "`+actor_rollout_ref.actor.policy_loss.hparams.NAME=VALUE` (a loss), TRL "
            "`lmpo_loss_hparams` / `lmpo_advantage_hparams`, lmpo `loss.hparams.NAME=VALUE`; "
            "an engine setting listed feeds the hyper-parameter only where none is set.")


def sections_of(name: str) -> list[str]:
    """The registries (sections) that hold `name`."""
    return [s for s, reg in registries().items() if name in reg.names()]


def engine_keys(section: str, peer: str, spec) -> str:
    """'key (else fallback)' of a `peer_keys` entry: a key, or a tuple read in order."""
    keys = (spec,) if isinstance(spec, str) else tuple(spec)
    prefix = PREFIX.get((section, peer), "")
    return " else ".join(f"`{prefix}{k}`" for k in keys)


def formula(fn) -> list[str]:
    """The docstring's lines after its first paragraph, up to the next blank line after
    them (the formula block), or the first paragraph where there is none."""
    doc = inspect.getdoc(fn.__init__ if inspect.isclass(fn) and fn.__init__.__doc__ else fn)
    if not doc:
        return []
    blocks = [b.strip("\n") for b in doc.split("\n\n") if b.strip()]
    indented = [b for b in blocks[1:] if b.startswith((" ", "\t"))]
    return (indented[0] if indented else blocks[0]).splitlines()


def detail(section: str, name: str) -> dict:
    reg = registries()[section]
    meta, domains = reg.meta(name), reg.domains(name)
    peers = meta.get("peer_keys", {})
    rows = []
    for hp, default in reg.hparams(name).items():
        if section == "controller" and hp in CONTEXT:
            continue  # the run's own (steps, seed, reward range): never a setting
        engines = {p: engine_keys(section, p, peers[p][hp]) for p in ENGINES
                   if hp in peers.get(p, {})}
        rows.append({"name": hp, "default": default,
                     "domain": str(domains[hp]) if hp in domains else "-", "engines": engines})
    return {"kind": section, "name": name, "title": meta.get("title", ""),
            "source": meta.get("source", ""), "summary": meta.get("summary", ""),
            "formula": formula(reg._lookup(name)), "hparams": rows}


def lines(d: dict) -> list[str]:
    """The part for a terminal."""
    out = [f"{d['kind']} `{d['name']}`: {d['title']} ({d['source'] or 'lmpo'})",
           f"  {d['summary']}", ""]
    out += [f"  {x}" for x in d["formula"]] + ([""] if d["formula"] else [])
    if not d["hparams"]:
        return out + ["  no hyper-parameters"]
    section = {"loss": "loss.hparams", "advantage": "advantage.hparams",
               "controller": "controller.hparams"}.get(d["kind"], d["kind"])
    out.append(f"  hyper-parameters ({section}.NAME=VALUE):")
    for h in d["hparams"]:
        fed = "; ".join(f"{p}: {k}" for p, k in h["engines"].items())
        out.append(f"    {h['name']} = {h['default']!r}  in {h['domain']}"
                   + (f"  [from {fed}]" if fed else ""))
    return out


def markdown(d: dict) -> str:
    head = [f"#### {d['kind']} `{d['name']}` ({d['title']})", ""]
    if not d["hparams"]:
        return "\n".join(head + ["No hyper-parameters.", ""])
    table = ["| hyper-parameter | default | domain | verl | TRL | SkyRL |",
             "|---|---|---|---|---|---|"]
    for h in d["hparams"]:
        cells = [h["engines"].get(p, "-") for p in ENGINES]
        domain = h["domain"].replace("|", "\\|")
        table.append(f"| `{h['name']}` | `{h['default']!r}` | {domain} | "
                     + " | ".join(cells) + " |")
    return "\n".join(head + table + [""])


def markdown_all() -> str:
    parts = [markdown(detail(section, name)) for section, reg in registries().items()
             for name in reg.names() if (section, name) not in (("controller", "none"),
                                                                 ("schedule", "fixed"))]
    return f"{BEGIN}\n{EXPLICIT}\n\n" + "\n".join(parts) + f"{END}"


def rewrite(path) -> bool:
    """Replace the per-part block of `path` (docs/methods-reference.md); True if changed."""
    return replace_block(path, BEGIN, END, markdown_all(), "per-part hyper-parameter")
