"""The power plan of every committed experiment, read from its own committed rows: what a
next edition at the same design (seeds, looks, min_effect) could detect, planned as
`lmpo compare --power` plans it (lmpo.experiments.design.power).

    python experiments/power_plans.py --out experiments/results/power_plans.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lmpo.experiments.design.spec import load_experiment
from lmpo.experiments.run.power_plan import plan_power, power_lines

ROOT = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    plans = {}
    for path in sorted(ROOT.glob("*.yaml")):
        sweep = ROOT / "results" / path.stem / "sweep"
        if not (sweep / "experiment.yaml").exists():
            continue
        exp = load_experiment(str(path))
        plan = plan_power(exp, str(sweep.relative_to(ROOT.parent)))
        plans[path.stem] = plan
        print("\n".join(power_lines(exp, plan)), flush=True)
    Path(args.out).write_text(json.dumps(plans, indent=2) + "\n")
    counts = {}
    for plan in plans.values():
        for p in plan:
            counts[p["status"]] = counts.get(p["status"], 0) + 1
    print(f"{sum(counts.values())} headline claims over {len(plans)} experiments: " +
          ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
