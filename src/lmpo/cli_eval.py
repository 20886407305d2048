"""`lmpo eval`: a model's held-out accuracy and reward per tier, from a run, a config or a
model folder (part of the `lmpo` command line, `lmpo.cli`)."""

from __future__ import annotations

import json
from pathlib import Path

from lmpo.atomic import write_text
from lmpo.errors import ConfigError


def cmd_eval(args) -> int:
    from rich.console import Console

    from lmpo import process_env
    from lmpo.config import load_config
    from lmpo.devices import resolve_device
    from lmpo.evaluate import accuracy_table, evaluate
    from lmpo.models import PromptEncoder, load_policy, stop_token_ids
    from lmpo.rewards import build_reward
    from lmpo.tasks import get_task
    from lmpo.tasks.heldout import heldout_split
    from lmpo.trainer.resume import load_run_config
    from lmpo.trainer.train_config import TrainConfig
    from lmpo.warmstart import resolve_policy

    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads}: must be >= 1")
    process_env.set_torch_threads(args.threads or 2)
    device = resolve_device(args.device)
    task_name, per_tier, max_new, trained, temp, samples = "chain_sum", 100, 32, None, 0.0, 1
    cfg = TrainConfig()
    if args.run or args.config:
        run_cfg = Path(args.run) / "config.yaml" if args.run else args.config
        if args.run and not run_cfg.exists():
            raise ConfigError(f"{args.run} is not a run directory (no config.yaml)")
        cfg = load_run_config(run_cfg) if args.run else load_config(TrainConfig, run_cfg)
        task_name, per_tier = cfg.task, cfg.log.eval_per_tier
        max_new, trained = cfg.log.eval_max_new_tokens, cfg.rollout.clusters
        temp, samples = cfg.log.eval_temperature, cfg.log.eval_samples
    task_name = args.task or task_name
    per_tier = args.per_tier or per_tier
    max_new = args.max_new_tokens or max_new
    temp = temp if args.temperature is None else args.temperature
    samples = args.samples or (samples if temp > 0 else 1)
    model_dir = (Path(args.run) / "policy" if args.run
                 else resolve_policy(args.model) if args.model
                 else resolve_policy(cfg.policy, seed=cfg.policy_seed))
    model, tokenizer = load_policy(model_dir)
    model = model.to(device)
    params = args.task_params if args.task_params is not None else (
        cfg.task_params if task_name == cfg.task else None)
    task = get_task(task_name, params or None)
    encode = PromptEncoder(tokenizer, args.prompt_format or cfg.prompt_format,
                           args.system_prompt or cfg.system_prompt)
    reward = build_reward(args.reward or cfg.reward.fn, task)
    heldout = heldout_split(task, per_tier)
    print(f"held-out set ({task_name}): {heldout.describe()}")
    result = evaluate(model, tokenizer, task, heldout.problems, max_new_tokens=max_new,
                      trained_tiers=trained, temperature=temp, samples=samples, reward=reward,
                      encode=encode, eos_ids=stop_token_ids(model, tokenizer),
                      stream=args.stream or cfg.log.eval_stream)
    Console().print(accuracy_table({"model": result}, title=f"{model_dir} on {task_name}"))
    out = Path(args.json) if args.json else Path(args.run) / "eval_cli.json" if args.run \
        else None  # a user's model folder is theirs: written only where asked
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    return 0
