"""The installed wheel, used as a new user would (`make test-wheel`; not collected by pytest).

Run with the python of a fresh virtual environment into which only the wheel was
installed: it checks that lmpo comes from that environment, lists the wheel's
contents by kind, then from an empty temporary directory (its own LMPO_HOME)
runs `lmpo presets`, a short `lmpo sft` (the warm start a user builds; the 800-step
build on first use is tests/test_install.py's), `lmpo train --config grpo --steps 2`
from it, `lmpo eval` on the result and `lmpo compare --config demo --list`, checking
what they print and write, not only their exit codes.

    python tests/wheel_smoke.py dist/lmpo-<version>-py3-none-any.whl
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def check(cond: bool, what: str) -> None:
    if not cond:
        sys.exit(f"wheel smoke test FAILED: {what}")
    print(f"ok: {what}")


def run(args: list[str], cwd: Path, env: dict, expect: list[str]) -> str:
    print("$ " + " ".join(args), flush=True)
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"wheel smoke test FAILED: exit code {proc.returncode}:\n{out[-3000:]}")
    print(out.rstrip())
    for s in expect:
        check(s in out, f"its output mentions {s!r}")
    return out


def main() -> None:
    wheel = Path(sys.argv[1])
    import lmpo

    check(Path(lmpo.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()),
          f"lmpo is imported from the environment ({lmpo.__file__}), not a checkout")
    names = zipfile.ZipFile(wheel).namelist()
    kinds = collections.Counter(
        "dist-info" if ".dist-info/" in n else Path(n).suffix.lstrip(".") or "other"
        for n in names)
    print(f"wheel {wheel.name}: {len(names)} files, " +
          ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    presets = [n for n in names if "/presets/" in n and n.endswith(".yaml")]
    check(any(n.endswith("presets/train/grpo.yaml") for n in presets) and
          any(n.endswith("presets/sft/nano-chain-sum.yaml") for n in presets),
          f"the wheel ships the presets ({len(presets)} YAML files)")
    check(not any(n.startswith(("tests/", "experiments/", "benchmarks/")) or "results/" in n
                  for n in names), "no tests, benchmarks or experiment results in the wheel")
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    fields = zipfile.ZipFile(wheel).read(meta).decode()
    check(any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
          and "License-Expression: Apache-2.0" in fields,
          "the wheel ships LICENSE and declares License-Expression: Apache-2.0")

    bindir = Path(sys.executable).parent
    lmpo_cmd = str(bindir / "lmpo")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp) / "empty"
        cwd.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env |= {"LMPO_HOME": str(Path(tmp) / "home"), "PYTHONUNBUFFERED": "1"}
        run([sys.executable, "-m", "lmpo", "--version"], cwd, env,
            [f"lmpo {lmpo.__version__} (torch 2.13.0"])
        run([lmpo_cmd, "presets"], cwd, env,
            ["grpo", "cegppo", "CE-GPPO: gradient-preserving clipping", "nano-chain-sum"])
        run([lmpo_cmd, "sft", "--config", "nano-chain-sum", "--out", "warm", "steps=60",
             "eval_per_tier=20", "max_new_tokens=8"], cwd, env, ["t2d1"])
        check((cwd / "warm" / "config.json").exists(), "lmpo sft wrote a model folder")
        run([lmpo_cmd, "train", "--config", "grpo", "--steps", "2", "--run-dir", "run",
             "--quiet", "policy=warm"], cwd, env,
            ["held-out set (chain_sum): t2d1: 200 distinct, 50 held out", "t3d1 *",
             "accuracy = exactly correct"])
        rows = [json.loads(x) for x in (cwd / "run" / "metrics.jsonl").read_text().splitlines()]
        check([r["step"] for r in rows] == [1, 2] and all("reward/accuracy" in r for r in rows),
              "the run logged 2 steps")
        summary = json.loads((cwd / "run" / "eval.json").read_text())
        check(summary["after"]["trained_tiers"] == ["t3d1"], "eval.json marks the trained tier")
        run([lmpo_cmd, "eval", "--run", "run"], cwd, env, ["t3d1 *", "mean@4, T=1"])
        run([lmpo_cmd, "compare", "--config", "demo", "--out", "sweep", "--list"], cwd, env,
            ["-m lmpo train --config sweep/configs/cegppo@L0-seed0.yaml",
             "sweep/configs/grpo@L2-seed1.yaml"])
        result = json.loads((cwd / "run" / "eval_cli.json").read_text())
        check(set(result["per_tier"]) == {"t2d1", "t3d1", "t2d2", "t4d2"},
              "lmpo eval reports every tier of the run's task")
        home = Path(tmp) / "home" / "policies"
        check(not home.exists() or not any(home.iterdir()),
              "a run from a model folder builds no warm start")
    print("wheel smoke test passed")


if __name__ == "__main__":
    main()
