"""The `lmpo` command line: sft, train, eval, compare, report, presets (also
`python -m lmpo`)."""

from __future__ import annotations

import argparse
import errno
import json
import signal
import sys
import threading
from pathlib import Path

from lmpo import __version__
from lmpo.choices import EVAL_STREAMS
from lmpo.cli_eval import cmd_eval
from lmpo.cli_experiments import add_experiment_parsers, cmd_compare, cmd_report
from lmpo.errors import ConfigError, Interrupted, LmpoError, on_sigterm
from lmpo.extras import missing_extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmpo", description="RL post-training of language models: policy optimisation.")
    parser.add_argument("--version", action=VersionAction,
                        help="print lmpo's version with torch, transformers, verl and TRL's")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sft = sub.add_parser("sft", help="supervised warm start of a tiny policy")
    sft.add_argument("--config", help="an SFT preset name (`lmpo presets`) or a YAML file "
                                      "(defaults if omitted)")
    sft.add_argument("--out", help="output folder (overrides the config's out)")
    sft.add_argument("overrides", nargs="*", metavar="key=value")

    rm = sub.add_parser("rm", help="train a Bradley-Terry reward model from pairwise preferences")
    rm.add_argument("--config", help="an rm preset name (`lmpo presets`) or a YAML file "
                                     "(defaults if omitted)")
    rm.add_argument("--out", help="output folder (overrides the config's out)")
    rm.add_argument("overrides", nargs="*", metavar="key=value")

    tr = sub.add_parser("train", help="RL-train a policy with any registered loss and advantage")
    tr.add_argument("--config", required=True,
                    help="a train preset name (`lmpo presets`) or a YAML file")
    tr.add_argument("--run-dir", required=True, help="where metrics, checkpoints and the policy go")
    tr.add_argument("--steps", type=int, help="override the config's steps")
    tr.add_argument("--seed", type=int, help="override the config's seed")
    tr.add_argument("--resume", action="store_true",
                    help="continue from the newest complete checkpoint in --run-dir")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.add_argument("overrides", nargs="*", metavar="key=value")

    ev = sub.add_parser("eval", help="held-out accuracy and reward per tier of a model or run")
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a Hugging Face model folder or a warm-start preset name")
    src.add_argument("--run", help="a run directory: its final policy on the run's own task, "
                                   "tiers and held-out set")
    src.add_argument("--config", help="a train preset or YAML: its starting policy on its own "
                                      "task, prompt format, reward and held-out set")
    ev.add_argument("--task", help="task for --model (default chain_sum; a run uses its own)")
    ev.add_argument("--task-params", type=json.loads, default=None,
                    help='rg:<dataset> parameters as JSON, e.g. \'{"min_terms": 2}\'')
    ev.add_argument("--per-tier", type=int,
                    help="held-out problems per tier (default 100; a run uses its own)")
    ev.add_argument("--max-new-tokens", type=int,
                    help="generation budget (default 32; a run uses its own)")
    ev.add_argument("--temperature", type=float,
                    help="0 = greedy (default; a run uses its own log.eval_temperature)")
    ev.add_argument("--samples", type=int, help="completions per problem at temperature > 0")
    ev.add_argument("--stream", choices=EVAL_STREAMS,
                    help="sampling stream: per_problem (default; a run uses its own "
                         "log.eval_stream) or shared, the one stream earlier lmpo used")
    ev.add_argument("--reward", help="reward.fn for --model: task (default), exact, "
                                     "last_number, math_verify or file.py:function")
    ev.add_argument("--prompt-format", choices=("auto", "raw", "chat"),
                    help="for --model (default auto: chat when the tokenizer has a template)")
    ev.add_argument("--system-prompt", help="chat format: a system turn before each problem")
    ev.add_argument("--json", help="write the result here (default: RUN/eval_cli.json for "
                                   "--run; --model and --config write nothing unless asked)")
    ev.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where the model runs (default auto: CUDA when present, else CPU)")
    ev.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default 2, or 1 on a one-core affinity)")

    add_experiment_parsers(sub)

    ex = sub.add_parser("export-data", help="a task as verl data: train/test parquet in "
                                            "verl's schema and a reward-function file")
    ex.add_argument("--config", help="a train preset or YAML whose task, tiers, pool and "
                                     "held-out set to export (default: lmpo's defaults)")
    ex.add_argument("--experiment", help="instead of --config: an experiment file, with "
                                         "--arm and --seed (as `compare --engine verl` prints)")
    ex.add_argument("--arm", help="with --experiment: the arm whose config to export")
    ex.add_argument("--seed", type=int, default=0, help="with --experiment: the run's seed")
    ex.add_argument("--task", help="the task (overrides the config's)")
    ex.add_argument("--out", required=True, help="an empty or new folder")
    ex.add_argument("--system-prompt", help="a system turn before each problem")
    ex.add_argument("overrides", nargs="*", metavar="key=value")

    sub.add_parser("presets", help="the shipped presets (train, sft, experiment), described")
    ini = sub.add_parser("init", help="write a starter comparison into a new folder: the "
                                      "experiment, a smoke run of it, a reward and data")
    ini.add_argument("name", help="the folder to create")

    me = sub.add_parser("methods", help="every registered loss, estimator, rollout "
                                        "controller, correction and schedule, with its source "
                                        "and presets, and the cross-cutting options")
    me.add_argument("search", nargs="?", default=None,
                    help="a part's name (cegppo, grpo, espo, ...): its formula and every "
                         "hyper-parameter with default, domain and the engine settings "
                         "that feed it; else only the methods and options whose names, "
                         "sources or engine spellings contain this (e.g. OPSM, rollout_rs)")
    me.add_argument("--markdown", action="store_true", help="print the table as markdown")
    me.add_argument("--readme", metavar="FILE", help=argparse.SUPPRESS)  # docs/maintainers.md
    return parser


class VersionAction(argparse.Action):
    """argparse's `action="version"`, with the line built only when asked for."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())  # on stdout, as argparse's own version action
        parser.exit()


def version_line() -> str:
    """lmpo's version and the versions that matter in a bug report."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("torch", "transformers", "verl", "trl"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return f"lmpo {__version__} ({', '.join(parts)})"


def cmd_init(args) -> int:
    from lmpo.starter import init

    root = init(args.name)
    print(f"wrote {root}/: experiment.yaml, smoke.yaml, reward.py, data/train.jsonl\n"
          f"  cd {root} && lmpo compare --config smoke.yaml --out runs/smoke && "
          "lmpo report runs/smoke\nthen edit experiment.yaml (your policy, data and reward) "
          "and run it with --config experiment.yaml --out runs/main")
    return 0


def cmd_presets(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from lmpo import presets

    table = Table(title="lmpo presets: --config NAME (or a YAML file of your own)")
    for col in ("kind", "name", "description"):
        table.add_column(col)
    for kind, command in (("train", "lmpo train"), ("sft", "lmpo sft / policy:"),
                          ("experiment", "lmpo compare"), ("rm", "lmpo rm / reward.model:")):
        rows = presets.list_presets(kind)
        for i, (name, text) in enumerate(rows):
            table.add_row(f"{kind} ({command})" if i == 0 else "", name, text)
        if not rows:
            table.add_row(f"{kind} ({command})", "-", "none yet")
        table.add_section()
    Console(width=max(120, Console().width)).print(table)
    return 0


def cmd_methods(args) -> int:
    from lmpo import method_detail, methods

    if args.readme:
        changed = methods.rewrite_readme(args.readme)
        print(f"{args.readme}: methods table {'rewritten' if changed else 'already current'}")
        if method_detail.BEGIN in Path(args.readme).read_text():
            changed = method_detail.rewrite(args.readme)
            print(f"{args.readme}: per-part hyper-parameters "
                  f"{'rewritten' if changed else 'already current'}")
        return 0
    if args.search and not args.markdown and method_detail.sections_of(args.search):
        for section in method_detail.sections_of(args.search):  # a part's name: in full
            print("\n".join(method_detail.lines(method_detail.detail(section, args.search))))
        return 0
    from lmpo import options

    if args.markdown:
        print(methods.markdown() + "\n\n" + options.markdown())
        return 0
    from rich.console import Console
    from rich.table import Table

    found = methods.rows() if args.search is None else methods.search(args.search)
    opts = options.OPTIONS if args.search is None else options.find(args.search)
    console = Console(width=max(140, Console().width))
    if found:
        table = Table(title="lmpo methods (`kind` is the config section that names it)")
        for col in ("kind", "name", "method", "source", "what it does", "presets"):
            table.add_column(col)
        for r in found:
            table.add_row(r["kind"], r["name"], r["title"], r["source"], r["summary"],
                          ", ".join(r["presets"]) or "-")
        console.print(table)
    if opts:
        table = Table(title="cross-cutting options (a config key each)")
        for col in ("option", "also called", "in the engines", "what it does"):
            table.add_column(col)
        for o in opts:
            table.add_row(o.key, o.names, o.engines, o.summary)
        console.print(table)
    if not (found or opts):
        print(f"no method or option mentions {args.search!r}", file=sys.stderr)
        return 1
    return 0


def cmd_sft(args) -> int:
    from rich.console import Console

    from lmpo.config import load_config
    from lmpo.evaluate import accuracy_table
    from lmpo.sft import SFTConfig, run_sft

    overrides = list(args.overrides) + ([f"out={args.out}"] if args.out else [])
    cfg = load_config(SFTConfig, args.config, overrides)
    summary = run_sft(cfg)
    console = Console()
    console.print(accuracy_table({"greedy": summary["eval"]},
                                 title=f"SFT {cfg.task} {cfg.size}: per-tier accuracy"))
    console.print(f"loss {summary['loss_first']:.3f} -> {summary['loss_last']:.3f} in "
                  f"{summary['seconds']:.0f} s; wrote {cfg.out}")
    return 0


def cmd_rm(args) -> int:
    from rich.console import Console

    from lmpo.config import load_config
    from lmpo.reward_model_training import RMConfig, run_rm

    overrides = list(args.overrides) + ([f"out={args.out}"] if args.out else [])
    cfg = load_config(RMConfig, args.config, overrides)
    s = run_rm(cfg)
    before, after = s["heldout_before"], s["heldout"]
    Console().print(
        f"reward model: {s['pairs']['train']} training pairs, {s['pairs']['heldout']} held out "
        f"({s['pairs']['source']}); held-out pair accuracy {before['accuracy']:.3f} -> "
        f"{after['accuracy']:.3f}, reward gap {after['gap_mean']:.3f}; "
        f"{sum(s['seconds_per_epoch']) / len(s['seconds_per_epoch']):.1f} s per epoch; "
        f"wrote {cfg.out}")
    return 0


def cmd_train(args) -> int:
    from rich.console import Console

    from lmpo.config import load_config
    from lmpo.evaluate import accuracy_table
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    overrides = list(args.overrides)
    overrides += [f"steps={args.steps}"] if args.steps is not None else []
    overrides += [f"seed={args.seed}"] if args.seed is not None else []
    cfg = load_config(TrainConfig, args.config, overrides)
    summary = train(cfg, args.run_dir, resume=args.resume, progress=not args.quiet,
                    verbose=True)
    Console().print(accuracy_table({"before": summary["before"], "after": summary["after"]},
                                   title=f"{Path(str(args.config)).stem}: held-out set"))
    print(f"run directory: {args.run_dir}")
    return 0


def cmd_export_data(args) -> int:
    from lmpo.config import load_config
    from lmpo.integrations.verl_data import export_verl_data
    from lmpo.trainer.train_config import TrainConfig

    overrides = list(args.overrides) + ([f"task={args.task}"] if args.task else [])
    if args.experiment:
        from lmpo.experiments.design.spec import arm_config, load_experiment

        if args.config or not args.arm:
            raise ConfigError("--experiment takes --arm (and --seed), not --config")
        exp = load_experiment(args.experiment).expand()  # --arm may be `arm@level`
        cfg = arm_config(exp, exp.arm(args.arm), args.seed)
        if overrides:
            raise ConfigError("--experiment exports the arm's config as it is: no overrides")
    else:
        cfg = load_config(TrainConfig, args.config, overrides)
    counts = export_verl_data(cfg, args.out, system_prompt=args.system_prompt or cfg.system_prompt)
    out = Path(args.out)
    print(f"{cfg.task}: {counts['train']} training and {counts['test']} held-out problems in "
          f"{out}/train.parquet, {out}/test.parquet; reward function {out}/reward.py "
          "(reward.custom_reward_function.name=compute_score)")
    return 0


REFUSED_BY_FS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR,
                 errno.EEXIST)
RESUME = {"train": "; its checkpoints are kept: rerun with --resume to go on",
          "compare": "; each run finished its step in progress and checkpointed it: rerun "
                     "the same command to resume them",
          "sft": "; rerun to start again", "rm": "; rerun to start again"}
COMMANDS = {"sft": cmd_sft, "rm": cmd_rm, "train": cmd_train, "eval": cmd_eval,
            "compare": cmd_compare, "report": cmd_report, "presets": cmd_presets,
            "export-data": cmd_export_data, "init": cmd_init,
            "methods": cmd_methods}


TORCH_COMMANDS = ("sft", "rm", "train", "eval", "compare")


def override_hint(args, extra: list[str]) -> str:
    """'; config keys are overridden as key=value (optim.lr=3e-5)' for an option spelt
    like a dotted config key (`--optim.lr=3e-5`, `--optim.lr 3e-5`)."""
    dotted = next((x for x in extra if x.startswith("--") and "." in x.split("=", 1)[0]), None)
    if dotted is None or not hasattr(args, "overrides"):
        return ""
    key, _, value = dotted[2:].partition("=")
    if not value:  # `--optim.lr 1e-4`: argparse took the value as a positional
        loose = [x for x in [*extra, *args.overrides] if "=" not in x and not x.startswith("-")]
        value = loose[0] if loose else "VALUE"
    return f"; config keys are overridden as key=value, without dashes: {key}={value}"


def main(argv: list[str] | None = None) -> int:

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come after options too (`... --steps 3 optim.lr=1e-4`)
    if extra and hasattr(args, "overrides") and all("=" in x and not x.startswith("-")
                                                    for x in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}{override_hint(args, extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command in TORCH_COMMANDS:
        from lmpo.process_env import adapt_waits

        adapt_waits()  # on a busy machine OpenMP sleeps rather than spins (before torch)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)  # stops the work as Ctrl-C does
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt as exc:  # SIGINT (130) or SIGTERM (143): one line
        term = isinstance(exc, Interrupted)
        print(f"lmpo {args.command}: stopped by {'SIGTERM' if term else 'SIGINT'}"
              f"{RESUME.get(args.command, '')}", file=sys.stderr)
        return 143 if term else 130
    except LmpoError as exc:  # what the user can fix: one line, no traceback
        print(f"lmpo {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a read-only, file-shaped or forbidden target: one line
        if exc.errno not in REFUSED_BY_FS:
            raise
        what = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
        why = "a file where a directory is needed: choose another path" if exc.errno in (
            errno.EEXIST, errno.ENOTDIR) else "not writable here: choose another path or fix " \
            "its permissions"
        print(f"lmpo {args.command}: error: {what}: {exc.strerror} ({why})", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        reason = missing_extra(exc)
        if reason is None:
            raise
        print(f"lmpo {args.command}: error: {reason}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
