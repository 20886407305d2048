"""The package with no extras, in an environment that holds it, torch and numpy only.

Run with that environment's python (make test-wheel): the wheel's metadata declares torch
as a range, not a pin, admitting the torch verl 0.9.1's GPU extras pin (2.11.0) and the
one tested here; nothing of the training extra is installed; the losses, estimators,
corrections and the verl adapter import. tests/ then runs their float64 references there.

    python tests/minimal_env.py
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import requires, version

from pip._vendor.packaging.requirements import Requirement


def check(ok: bool, what: str) -> None:
    if not ok:
        sys.exit(f"minimal environment: {what}")
    print(f"ok: {what}")


def main() -> None:
    base = [Requirement(r) for r in requires("lmpo") if "extra ==" not in r]
    check(sorted(r.name for r in base) == ["numpy", "torch"],
          f"the package alone requires torch and numpy only ({[str(r) for r in base]})")
    torch_req = next(r for r in base if r.name == "torch")
    spec = torch_req.specifier
    check(all(s.operator not in ("==", "===") for s in spec), f"torch is a range: {spec}")
    for v in ("2.6.0", "2.11.0", version("torch")):
        check(spec.contains(v, prereleases=True), f"torch {v} is admitted by {spec}")
    for module in ("transformers", "yaml", "rich", "reasoning_gym", "matplotlib", "scipy"):
        check(importlib.util.find_spec(module) is None, f"{module} is not installed")
    for module in ("lmpo.losses", "lmpo.advantages", "lmpo.rollout.corrections",
                   "lmpo.integrations.verl", "lmpo.masked"):
        importlib.import_module(module)
    from lmpo.advantages import list_advantages
    from lmpo.losses import list_losses
    from lmpo.rollout.corrections import list_corrections

    check(len(list_losses()) >= 18 and len(list_advantages()) >= 11
          and len(list_corrections()) >= 6,
          f"{len(list_losses())} losses, {len(list_advantages())} estimators, "
          f"{len(list_corrections())} corrections registered with torch and numpy alone")
    print("minimal environment test passed")


if __name__ == "__main__":
    main()
