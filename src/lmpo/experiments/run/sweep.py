"""`lmpo compare`: every arm x seed of an experiment as an ordinary `lmpo train` run.

Layout of `--out DIR`:

    experiment.yaml              the experiment as run (seeds and steps resolved)
    configs/<arm>-seed<k>.yaml   each run's fully resolved config
    runs/<arm>/seed<k>/          each run's directory (metrics.jsonl, eval.json, ...);
                                 with a condition axis `runs/<arm>@<level>/seed<k>/`
    logs/<arm>-seed<k>.log       each run's output
    sweep.json                   wall time, jobs and outcome of each invocation

Every run is `python -m lmpo train --config configs/... --run-dir runs/... --resume`,
so a second invocation skips finished runs and continues killed ones from their
checkpoints (a run is deterministic for a given thread count, and `--jobs J` fixes
threads = cores / J). On Linux each run is forked from a server that has imported the
trainer once (lmpo.experiments.run.launcher), not a fresh interpreter. Run processes die with
the sweep (Linux parent-death signal), so `kill -9` of the sweep leaves nothing running.
Pending runs start seed by seed (every arm of the first seed, then of the next), so a
sweep stopped part-way holds whole seeds of every arm rather than every seed of the first
arms. `--list` prints the commands, in that order, for another scheduler; `lmpo report`
reads the directories whatever ran them.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmpo.atomic import write_text
from lmpo.config import save_config
from lmpo.errors import ConfigError, LmpoError
from lmpo.experiments.design.spec import RUN_KEYS, Experiment, arm_config, check_differs
from lmpo.experiments.run.dispatch import (
    WARMSTARTS,
    execute,
    finished,
    start_order,
)
from lmpo.experiments.run.launchers import (
    DEFAULT_LAUNCHER,
    LAUNCHERS,
    build_launcher,
    check_address,
)
from lmpo.experiments.run.power_plan import check_power
from lmpo.experiments.run.upfront import check_experiment
from lmpo.locks import directory_lock
from lmpo.process_env import usable_cores


@dataclass
class Run:
    arm: str
    seed: int
    config: Path
    run_dir: Path
    log: Path
    status: str = "pending"  # pending | running | done | failed | refused (by the engine)
    error: str = ""
    started: float = 0.0
    engine: str = "lmpo"  # lmpo | trl (lmpo.integrations.trl_run)
    after: list[str] = field(default_factory=list)  # runs it reads, which must end first

    @property
    def name(self) -> str:
        return f"{self.arm}-seed{self.seed}"

    def command(self) -> list[str]:
        program = ["lmpo", "train"] if self.engine == "lmpo" else ["lmpo.integrations.trl_run"]
        return [sys.executable, "-m", *program, "--config", str(self.config),
                "--run-dir", str(self.run_dir), "--quiet", "--resume"]


def plan(exp: Experiment, out: Path, jobs: int, engine: str = "lmpo") -> list[Run]:
    """Check the experiment, write its configs under `out` and return its runs.

    Everything is checked before anything is written (lmpo.experiments.run.upfront: every
    arm builds, trains on tiers its task has, and logs every metric the claims read;
    `differs_in`): a broken arm stops the sweep before its first run, not after the
    others have trained."""
    threads = max(1, usable_cores() // jobs)  # the cores this process may run on
    saved = out / "experiment.yaml"
    if saved.exists():
        before, now = yaml.safe_load(saved.read_text()), exp.to_dict()
        before.setdefault("warm_starts", "shared")  # saved before per-seed warm starts
        changed = [k for k in RUN_KEYS if before.get(k) != now.get(k)]
        if changed and not any_step(out):  # nothing of it trained: nothing to lose
            print(f"{out} held another experiment ({', '.join(changed)} differ) that never "
                  "finished a step: replacing it")
            for part in ("runs", "configs", "logs"):
                shutil.rmtree(out / part, ignore_errors=True)
            changed = []
        if changed:
            raise ConfigError(f"{out} holds a different experiment ({saved}: {', '.join(changed)} "
                              "differ); resume it with the same file, --seeds and --steps, or "
                              "choose a new --out")
    check_power(exp)  # a declared source of variance: the headline can reach min_effect
    flat = exp.expand()  # arms x condition levels, as `arm@level`
    check_experiment(flat, exp.seeds[0])
    check_differs(flat)
    (out / "configs").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    write_text(saved, yaml.safe_dump(exp.to_dict(), sort_keys=False))
    runs = []
    for arm in flat.arms:
        for seed in exp.seeds:
            run = Run(arm.name, seed, out / "configs" / f"{arm.name}-seed{seed}.yaml",
                      out / "runs" / arm.name / f"seed{seed}",
                      out / "logs" / f"{arm.name}-seed{seed}.log", engine=engine)
            cfg = arm_config(flat, arm, seed, threads=threads)
            run.after = resolve_references(cfg, flat, arm.name, seed, out)
            save_config(cfg, run.config)
            refused = engine_refusals(engine, cfg)
            if refused:
                run.status, run.error = "refused", "; ".join(refused)
            elif finished(run.run_dir, exp.steps):
                stale = config_changes(run.run_dir, cfg)
                if stale:
                    run.status, run.error = "failed", (
                        f"finished under another config ({stale}); delete {run.run_dir} "
                        "to run it again")
                else:
                    run.status = "done"
            runs.append(run)
    return runs


def any_step(out: Path) -> bool:
    """Whether any run under `out` logged a step (rows or a checkpoint)."""
    runs = out / "runs"
    if not runs.exists():
        return False
    return any(p.stat().st_size > 0 for p in runs.glob("*/*/metrics.jsonl")) or any(
        runs.glob("*/*/checkpoints/*"))


REFERENCE = "@"  # a controller hyper-parameter naming another arm's run of the same seed


def resolve_references(cfg, flat, arm: str, seed: int, out: Path) -> list[str]:
    """Point each controller hyper-parameter written `"@ARM"` (random stops tracking an
    ESPO run: `reference: "@espo"`) at ARM's run of the same seed and level, in place;
    the names of the runs this one must wait for. A ConfigError for an unknown arm."""
    from lmpo.experiments.design.conditions import run_arm, split_arm

    names = {a.name for a in flat.arms}
    after = []
    for key, value in dict(cfg.controller.hparams or {}).items():
        if not (isinstance(value, str) and value.startswith(REFERENCE)):
            continue
        named = value[len(REFERENCE):]  # an arm that runs once stands at every level
        other = named if named in names else run_arm(named, split_arm(arm)[1])
        if other not in names or other == arm:
            raise ConfigError(f"experiment {flat.name!r}, arm {arm!r}: controller "
                              f"{key}: {value!r} names no other arm of this level; arms: "
                              f"{', '.join(sorted(names - {arm}))}")
        cfg.controller.hparams[key] = str(out / "runs" / other / f"seed{seed}")
        after.append(f"{other}-seed{seed}")
    return after


def engine_refusals(engine: str, cfg) -> list[str]:
    """What `engine` cannot express in `cfg` (lmpo expresses everything)."""
    if engine == "trl":
        from lmpo.experiments.engines.trl_mapping import trl_refusals

        return trl_refusals(cfg)
    return []


def config_changes(run_dir: Path, cfg) -> str:
    """'' if the run in `run_dir` ran `cfg` (up to keys a resume may change, and keys a
    newer lmpo added at their default), else the keys that differ."""
    from lmpo.trainer.resume import changes_since

    saved = run_dir / "config.yaml"
    if not saved.exists():
        return ""
    old = yaml.safe_load(saved.read_text()) or {}
    return "; ".join(x.strip() for x in changes_since(old, cfg))


def next_look(exp: Experiment, out: Path) -> list[int] | None:
    """The seeds of the next look of a sequential design, or None where the headline
    family is decided or `max` is reached (said in one line either way)."""
    from lmpo.experiments.design.sequential import all_seeds
    from lmpo.experiments.report.audit import design_decision
    from lmpo.experiments.report.write import collect

    decision = design_decision(collect(out))
    looks = ", ".join(f"{x['n']} seeds" for x in decision["looks"])
    if decision["next"] is None:
        print(f"seeds until decided: stopped after looks at {looks} ({decision['stopped']})")
        return None
    print(f"seeds until decided: after looks at {looks} a headline claim is undecided; "
          f"adding seeds up to {decision['next']}")
    return all_seeds(exp.design)[:decision["next"]]


def prebuild(runs: list[Run], out: Path | None = None) -> None:
    """Build the warm-start policies (and convert the packaged models) that the pending runs
    start from, once, before any starts: a run would build it on its share of the cores
    while the others wait. With `out`, each warm-start preset is pinned in
    `out/warmstarts/<name>/` (`<name>-seed<k>/` for a seed's own draw; the first build's
    copy, kept for every later look and machine: `lmpo.warmstart`). A policy that cannot
    be resolved is left to its runs, which fail with the error while the other arms go
    on."""
    from lmpo.warmstart import is_preset, pin, resolve_policy

    pending = [r for r in runs if r.status == "pending"]
    configs = [yaml.safe_load(r.config.read_text()) for r in pending]
    for policy, seed in dict.fromkeys((c["policy"], c.get("policy_seed")) for c in configs):
        try:
            if out is not None and is_preset(policy):
                pin(policy, out / WARMSTARTS, seed)
            else:
                resolve_policy(policy, seed=seed)
        except LmpoError:
            continue


def compare(exp: Experiment, out: str | Path, *, jobs: int = 1, list_only: bool = False,
            live: bool = True, engine: str = "lmpo", launcher_name: str = DEFAULT_LAUNCHER,
            address: str | None = None) -> int:
    """Plan and run (or, with `list_only`, print) the sweep; 0 if every run finished.

    `launcher_name` names a launcher (`lmpo.experiments.run.launchers`): "pool" runs at
    most `jobs` runs at once here; "ray" runs them as Ray tasks, `jobs` per node, on the
    cluster at `address` (None: a local Ray this call starts and stops). The sweep holds
    `out`'s lock throughout (a second `lmpo compare` on it fails at once, naming this
    one); each run's process holds its own run directory's. An `out` this call created is
    removed again if the experiment cannot be planned."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    meta = LAUNCHERS.meta(launcher_name)  # one line naming the valid ones
    check_address(launcher_name, address)
    out = Path(out).absolute() if meta["absolute_out"] else Path(out)
    fresh = not out.exists()
    with directory_lock(out, what="lmpo compare"):
        if exp.design and (out / "experiment.yaml").exists():
            from lmpo.experiments.design.sequential import taken_seeds

            exp.seeds = taken_seeds(out, exp)  # resume at the looks already started
        try:
            runs = plan(exp, out, jobs, engine)
        except LmpoError:
            if fresh:
                shutil.rmtree(out, ignore_errors=True)
            raise
        if list_only:
            print_plan(exp, runs)
            return 0
        while True:
            prebuild(runs, out)
            pool = build_launcher(launcher_name, jobs=jobs, out=out, address=address)
            execute(exp, runs, out, pool, live=live)
            if not exp.design or any(r.status == "failed" for r in runs):
                break
            more = next_look(exp, out)
            if more is None:
                break
            exp.seeds = more
            runs = plan(exp, out, jobs, engine)
    return outcome(runs, out, engine)


def print_plan(exp: Experiment, runs: list[Run]) -> None:
    """`lmpo compare --list`: each run's command line (or why its engine refused it)."""
    for run in start_order(exp, runs):
        print(shlex.join(run.command()) if run.status != "refused"
              else f"# refused: {run.name}: {run.error}")
    if exp.design:
        print(f"# seeds until decided: later blocks ({exp.design}) are added by "
              "`lmpo compare` after judging each look")


def outcome(runs: list[Run], out: Path, engine: str) -> int:
    """What the sweep says at its end (refused, failed or all finished) and its exit code."""
    refused = [r for r in runs if r.status == "refused"]
    for run in refused:
        print(f"refused by {engine}: {run.name}: {run.error}", file=sys.stderr)
    if refused and len(refused) == len(runs):
        print(f"lmpo compare: error: no arm runs on {engine}", file=sys.stderr)
        return 1
    runs = [r for r in runs if r.status != "refused"]
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        print(f"\n{len(failed)} of {len(runs)} runs failed (the others finished):",
              file=sys.stderr)
        for run in failed:
            print(f"  {run.name}: {run.error} (log: {run.log})", file=sys.stderr)
        return 1
    print(f"all {len(runs)} runs finished in {out}; next: lmpo report {out}")
    return 0
