"""`lmpo rm`: train a Bradley-Terry reward model from pairwise preferences.

The trunk is any causal-LM folder (a tiny warm-start policy by name, a local
pretrained model); its LM head is replaced by a scalar head (Hugging Face's
`AutoModelForSequenceClassification`, `num_labels=1`). The pairs are a JSONL file,
or `builtin`: pairs from a built-in task under its hidden true preference
(`lmpo.rewards.preferences`), drawn from problems outside the task's held-out set,
with a policy's samples among the candidates. Held-out pairs come from problems no
training pair uses. Writes a plain HF folder plus `lmpo_rm.json`, `metrics.jsonl`,
`eval.json` and the pairs it trained and evaluated on.

`reward.model: NAME` in a train config names an rm preset: `resolve_reward_model` trains
it once into the user cache, `$LMPO_HOME/reward_models/` (`lmpo.cache`), and reuses it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from lmpo import presets
from lmpo.atomic import write_text
from lmpo.cache import build_once, cache_key, lmpo_home
from lmpo.config import save_config
from lmpo.devices import check_device, resolve_device, resolved_name
from lmpo.errors import ConfigError
from lmpo.progress import LoopProgress
from lmpo.rewards.preferences import Pair, builtin_pairs, load_pairs, write_pairs
from lmpo.rewards.reward_model import (
    META_FILE,
    TextEncoder,
    bt_loss,
    pad_batch,
    score_batches,
    sequence_scores,
)


@dataclass
class RMConfig:
    preset_kind: ClassVar[str] = "rm"
    trunk: str = "nano-chain-sum"
    """A causal-LM folder or a warm-start preset name (as `policy:` in a train config)."""
    pairs: str = "builtin"
    """builtin (pairs from `task` under its true preference) | path/to/pairs.jsonl."""
    heldout_pairs: str | None = None
    """A JSONL of held-out pairs; None = hold out `heldout_frac` of the problems."""
    heldout_frac: float = 0.1
    task: str = "chain_sum"
    """builtin pairs: the built-in task and its tiers (None = all)."""
    clusters: list[str] | None = None
    problems: int = 2000
    """builtin pairs: training + held-out problems drawn outside the task's held-out set."""
    pairs_per_problem: int = 4
    sample_policy: str | None = "nano-chain-sum"
    """builtin pairs: a policy whose samples join each problem's candidates (None: the
    worked solution and its perturbations only)."""
    samples: int = 4
    sample_temperature: float = 1.0
    prompt_format: str = "auto"
    system_prompt: str | None = None
    epochs: int = 2
    batch_size: int = 32
    """Pairs per optimiser step (2x sequences)."""
    lr: float = 3.0e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    use_margin: bool = False
    """Subtract each pair's `margin` inside the sigmoid (TRL's margin column)."""
    center_coef: float | None = None
    """TRL's center_rewards_coefficient: + coef * mean((r_c + r_r)^2)."""
    seed: int = 0
    threads: int = 2
    device: str = "auto"
    """auto (CUDA when present, else CPU) | cpu | cuda (lmpo.devices)."""
    out: str = "runs/rm"

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "problems", "pairs_per_problem", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.samples < 0:
            raise ConfigError(f"samples must be >= 0, got {self.samples}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not 0 < self.heldout_frac < 1:
            raise ConfigError(f"heldout_frac must be in (0, 1), got {self.heldout_frac}")
        if self.center_coef is not None and self.center_coef < 0:
            raise ConfigError(f"center_coef must be >= 0, got {self.center_coef}")
        check_device(self.device)


def split_by_prompt(pairs: list[Pair], frac: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """(train, held-out): held-out pairs come from prompts no training pair uses."""
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    random.Random(seed).shuffle(prompts)
    held = set(prompts[:max(1, round(frac * len(prompts)))])
    train = [p for p in pairs if p.prompt not in held]
    if not train:
        raise ConfigError(f"heldout_frac {frac} leaves no training pairs ({len(prompts)} "
                          "prompts)")
    return train, [p for p in pairs if p.prompt in held]


def make_pairs(cfg: RMConfig) -> tuple[list[Pair], list[Pair], dict]:
    """(train, held-out, description) as the config asks."""
    if cfg.pairs != "builtin":
        pairs = load_pairs(cfg.pairs)
        if cfg.heldout_pairs:
            return pairs, load_pairs(cfg.heldout_pairs), {"source": cfg.pairs}
        train, held = split_by_prompt(pairs, cfg.heldout_frac, cfg.seed)
        return train, held, {"source": cfg.pairs}
    from lmpo.tasks import get_task
    from lmpo.tasks.heldout import heldout_split, sample_excluding

    task = get_task(cfg.task)
    rng = random.Random(cfg.seed)
    exclude = heldout_split(task, 100).prompts  # never the RL runs' held-out problems
    tiers = cfg.clusters or [None]
    problems = [p for i, tier in enumerate(tiers)
                for p in sample_excluding(task, cfg.problems // len(tiers)
                                          + (i < cfg.problems % len(tiers)), rng, exclude,
                                          cluster=tier)]
    problems = list({p.prompt: p for p in problems}.values())
    sampled = bool(cfg.sample_policy and cfg.samples)
    samples = policy_samples(cfg, task, problems) if sampled else {}
    pairs = builtin_pairs(task, problems, per_problem=cfg.pairs_per_problem, seed=cfg.seed,
                          samples=samples)
    train, held = split_by_prompt(pairs, cfg.heldout_frac, cfg.seed)
    return train, held, {"source": f"builtin:{cfg.task}", "problems": len(problems),
                         "sample_policy": cfg.sample_policy if sampled else None,
                         "samples": cfg.samples if sampled else 0}


def policy_samples(cfg: RMConfig, task, problems) -> dict[str, list[str]]:
    from lmpo.evaluate import complete
    from lmpo.models import PromptEncoder, load_policy, stop_token_ids
    from lmpo.warmstart import resolve_policy

    policy, tok = load_policy(resolve_policy(cfg.sample_policy))
    policy.eval()
    many = [p for p in problems for _ in range(cfg.samples)]
    texts = complete(policy, tok, many, max_new_tokens=32, temperature=cfg.sample_temperature,
                     generator=torch.Generator().manual_seed(cfg.seed), batch_size=256,
                     encode=PromptEncoder(tok, "auto"), eos_ids=stop_token_ids(policy, tok))
    out: dict[str, list[str]] = {}
    for p, t in zip(many, texts, strict=True):
        out.setdefault(p.prompt, []).append(t)
    return out


def load_trunk(cfg: RMConfig):
    """(sequence-classification model with a fresh scalar head, tokenizer)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from lmpo.warmstart import resolve_policy

    path = resolve_policy(cfg.trunk)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(cfg.seed)  # the head's initialisation
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "newly initialized: score.weight" is the point
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, local_files_only=True, pad_token_id=tok.pad_token_id)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model, tok


def pair_scores(model, encode: TextEncoder, pairs: list[Pair], pad_id: int,
                batch: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen scores, rejected scores), `batch` pairs' worth of sequences at a time."""
    seqs = [encode(p.prompt, p.chosen) for p in pairs] + [encode(p.prompt, p.rejected)
                                                         for p in pairs]
    scores = score_batches(model, seqs, pad_id, 2 * batch, next(model.parameters()).device)
    return scores[:len(pairs)], scores[len(pairs):]


def evaluate_pairs(model, encode, pairs, pad_id) -> dict[str, float]:
    """Held-out pair accuracy (ties count half) and the mean reward gap r_c - r_r."""
    model.eval()
    c, r = pair_scores(model, encode, pairs, pad_id)
    model.train()
    gap = c - r
    return {"accuracy": float(((gap > 0).float() + 0.5 * (gap == 0).float()).mean()),
            "gap_mean": float(gap.mean()), "score_mean": float(torch.cat([c, r]).mean()),
            "score_std": float(torch.cat([c, r]).std()), "n": len(pairs)}


def train_epoch(model, opt, pairs: list[Pair], encode: TextEncoder, pad_id: int,
                cfg: RMConfig, rng: random.Random, on_step=None) -> dict[str, float]:
    """One shuffled pass over `pairs` in batches of `cfg.batch_size`: mean loss and
    training pair accuracy."""
    order = list(pairs)
    rng.shuffle(order)
    losses, accs = [], []
    model.train()
    for i in range(0, len(order), cfg.batch_size):
        part = order[i:i + cfg.batch_size]
        seqs = [encode(p.prompt, p.chosen) for p in part] + [encode(p.prompt, p.rejected)
                                                             for p in part]
        device = next(model.parameters()).device
        s = sequence_scores(model, *(t.to(device) for t in pad_batch(seqs, pad_id)))
        c, r = s[:len(part)], s[len(part):]
        margin = torch.tensor([p.margin for p in part], device=device) if cfg.use_margin \
            else None
        loss = bt_loss(c, r, margin, cfg.center_coef)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        accs.append(float((c > r).float().mean()))
        if on_step is not None:
            on_step(losses[-1])
    return {"loss": sum(losses) / len(losses), "accuracy": sum(accs) / len(accs)}


def run_rm(cfg: RMConfig, *, progress: bool = True) -> dict:
    """Train, evaluate on held-out pairs, save. Returns the summary written to eval.json."""
    cfg.validate()
    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    train, held, source = make_pairs(cfg)
    if cfg.use_margin and any(p.margin is None for p in train):
        raise ConfigError("use_margin: true, but some training pairs have no 'margin'")
    t_data = time.perf_counter() - t0
    model, tok = load_trunk(cfg)
    model.to(resolve_device(cfg.device))
    encode = TextEncoder(tok, cfg.prompt_format, cfg.system_prompt)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    before = evaluate_pairs(model, encode, held, tok.pad_token_id)
    rows, epoch_s = [], []
    with LoopProgress("rm", "loss {loss:.3f}", math.ceil(len(train) / cfg.batch_size)
                      * cfg.epochs, enabled=progress, loss=float("nan")) as bar:
        for epoch in range(1, cfg.epochs + 1):
            t_epoch = time.perf_counter()
            fit = train_epoch(model, opt, train, encode, tok.pad_token_id, cfg, rng,
                              on_step=lambda x: bar.update(advance=1, loss=x))
            epoch_s.append(time.perf_counter() - t_epoch)
            held_metrics = evaluate_pairs(model, encode, held, tok.pad_token_id)
            rows.append({"epoch": epoch, "train/loss": fit["loss"],
                         "train/accuracy": fit["accuracy"], "time/epoch": epoch_s[-1]}
                        | {f"heldout/{k}": v for k, v in held_metrics.items()})
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model.config.pad_token_id = tok.pad_token_id
    model.cpu().save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / META_FILE).write_text(json.dumps({
        "prompt_format": encode.prompt.format, "system_prompt": cfg.system_prompt,
        "trunk": cfg.trunk, "pairs": source}, indent=2) + "\n")
    write_pairs(train, out / "pairs_train.jsonl")
    write_pairs(held, out / "pairs_heldout.jsonl")
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    save_config(cfg, out / "rm_config.yaml")
    summary = {"pairs": source | {"train": len(train), "heldout": len(held)},
               "heldout_before": before,
               "heldout": {k.split("/", 1)[1]: v for k, v in rows[-1].items()
                           if k.startswith("heldout/")},
               "train_loss_last": rows[-1]["train/loss"], "seconds_per_epoch": epoch_s,
               "seconds_data": t_data, "seconds": time.perf_counter() - t0}
    write_text(out / "eval.json", json.dumps(summary, indent=2) + "\n")
    return summary


def resolve_reward_model(spec: str, *, progress: bool = True) -> Path:
    """The reward-model folder `spec` names: a local Hugging Face folder, or the cached
    (trained on first use) model of the rm preset `spec`."""
    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        return path
    if presets.looks_like_file(spec) or path.exists() or presets.find(spec, "rm") is None:
        raise ConfigError(f"reward.model {spec!r} is neither a Hugging Face folder (no "
                          f"config.json there) nor an rm preset; rm presets: "
                          f"{', '.join(presets.names('rm'))}")

    from lmpo.config import load_config, to_dict

    cfg = load_config(RMConfig, spec, [])
    config = to_dict(cfg)
    config.pop("out")
    config["device"] = resolved_name(config["device"])  # a GPU-trained model is another
    # what the trunk, the sampling policy and pair files are, not only their names
    config["identities"] = {k: source_identity(getattr(cfg, k)) for k in (
        "trunk", "sample_policy", "pairs", "heldout_pairs") if getattr(cfg, k) not in (
        None, "builtin")}
    key, inputs = cache_key("reward model", config, "lmpo.reward_model_training")

    def build(tmp: Path) -> None:
        cfg.out = str(tmp)
        print(f"lmpo: training the reward model {spec!r} on first use (cached in "
              f"{tmp.parent})", flush=True)
        run_rm(cfg, progress=progress)

    return build_once(lmpo_home() / "reward_models" / f"{spec}-{key}", build, inputs)


def source_identity(spec: str) -> str:
    """What a trunk, policy or pairs file named `spec` is: a warm-start preset's or packaged
    model's cache entry, or a file's or folder's content hash."""
    from lmpo.cache import file_hashes
    from lmpo.models.convert import REAL_MODELS
    from lmpo.warmstart import cache_entry

    path = Path(spec).expanduser()
    if path.is_file():
        return "file " + hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        blob = json.dumps(file_hashes(path), sort_keys=True).encode()
        return "folder " + hashlib.sha256(blob).hexdigest()
    if spec in REAL_MODELS:
        return f"packaged {spec}"
    return "preset " + cache_entry(spec)[0].name
