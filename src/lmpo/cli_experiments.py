"""The `lmpo` commands that run and read experiments: compare and report."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmpo.errors import ConfigError
from lmpo.experiments.run.launchers import (
    DEFAULT_LAUNCHER,
    LAUNCHERS,
    check_address,
    launcher_help,
)


def add_experiment_parsers(sub) -> None:
    cp = sub.add_parser("compare", help="run every arm x seed of an experiment (resumable)")
    cp.add_argument("--config", required=True,
                    help="an experiment preset name (`lmpo presets`) or a YAML file")
    cp.add_argument("--out", help="the sweep's directory (rerun to resume); with --engine "
                                  "verl optional: where verl.sh and the runs' logs go")
    cp.add_argument("--seeds", type=int, help="run seeds 0..N-1 instead of the file's")
    cp.add_argument("--steps", type=int, help="override the experiment's steps")
    cp.add_argument("--jobs", type=int, default=1,
                    help="runs at once; each gets cores / jobs torch threads")
    cp.add_argument("--list", action="store_true",
                    help="print each run's command line (for Slurm, Ray, ...) and exit")
    cp.add_argument("--power", action="store_true",
                    help="print each headline claim's MDE at every look, from the file's "
                         "power: source (or --power-source), and exit")
    cp.add_argument("--power-source", metavar="SWEEP",
                    help="with --power: a sweep directory whose rows give the variance")
    cp.add_argument("--engine", choices=("lmpo", "verl", "trl"), default="lmpo",
                    help="verl: print (and write OUT/verl.sh) a verl command per arm x seed "
                         "(with --launcher ray: submit each as a Ray job); trl: TRL's trainer")
    cp.add_argument("--strict", action="store_true",
                    help="with --engine verl: any refused arm is an error")
    cp.add_argument("--launcher", choices=LAUNCHERS.names(), default=DEFAULT_LAUNCHER,
                    help=launcher_help())
    cp.add_argument("--address", help="--launcher ray's cluster (auto, HOST:PORT; with "
                                      "--engine verl http://HEAD:8265; default local)")
    cp.add_argument("--verl-entrypoint", default="python -m verl.trainer.main_ppo",
                    help="with --engine verl: the command that starts verl's trainer")

    rp = sub.add_parser("report", help="report.md, report.json and plots of a compare directory")
    rp.add_argument("dir", help="a `lmpo compare --out` directory")
    rp.add_argument("--out", help="where report.md goes (default DIR/report.md)")
    # maintainers' options, documented in docs/maintainers.md, not in the user help
    rp.add_argument("--rejudge", action="store_true", help=argparse.SUPPRESS)
    rp.add_argument("--readme", metavar="PAPER", help=argparse.SUPPRESS)


def cmd_compare(args) -> int:
    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.sweep import compare

    exp = load_experiment(args.config)
    if args.seeds is not None:
        if args.seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
        exp.seeds = list(range(args.seeds))
    if args.steps is not None:
        if args.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {args.steps}")
        exp.steps = args.steps
    if args.power or args.power_source:
        return print_power(exp, args)
    check_address(args.launcher, args.address)
    if args.engine == "verl":  # verl's own jobs, through the launcher (printed or submitted)
        return LAUNCHERS.meta(args.launcher)["verl"](
            exp, args.config, args.out, address=args.address, jobs=args.jobs,
            strict=args.strict, entrypoint=args.verl_entrypoint)
    if not args.out:
        raise ConfigError("--out is required (the sweep's directory)")
    if args.engine == "trl":
        import importlib.util

        if importlib.util.find_spec("trl") is None:
            raise ConfigError("--engine trl runs in an environment with TRL installed "
                              "(pip install -e '.[trl]'; make test-trl builds .venv-trl)")
    return compare(exp, args.out, jobs=args.jobs, list_only=args.list, engine=args.engine,
                   launcher_name=args.launcher, address=args.address)


def print_power(exp, args) -> int:
    """`lmpo compare --power`: the plan (lmpo.experiments.design.power); nothing runs."""
    from lmpo.experiments.run.power_plan import plan_power, power_lines

    if not args.power:
        raise ConfigError("--power-source goes with --power")
    if not (args.power_source or exp.power):
        raise ConfigError(f"{args.config}: no source of variance: declare power: {{source: "
                          "SWEEP_DIR}} in the file, or pass --power-source SWEEP_DIR")
    plan = plan_power(exp, args.power_source)
    print("\n".join(power_lines(exp, plan)))
    return 0


def cmd_report(args) -> int:
    from lmpo.experiments.report.write import report

    out = report(args.dir, args.out, rejudge=args.rejudge)
    if args.readme:
        import os

        from lmpo.experiments.report.results import HEADER, load, readme_rows

        link = os.path.relpath(out, Path.cwd())
        print("\n".join(HEADER + readme_rows(load(out.with_suffix(".json")), args.readme,
                                              link)))
    return 0
