"""The evaluation cache: a hit returns the very completions a fresh evaluation samples, any
changed input misses, a damaged entry is sampled again, and a run whose starting
evaluation came from the cache writes the rows of one that sampled it."""

from __future__ import annotations

import json

import pytest
import torch

import lmpo.evaluate as ev
from lmpo import eval_cache
from lmpo.models import load_policy
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(eval_cache.ENV, raising=False)
    return tmp_path / "home"


@pytest.fixture
def counted(monkeypatch):
    """The number of sampling calls made by `ev.complete`."""
    calls = []
    real = ev.sample

    def sample(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ev, "sample", sample)
    return calls


def setting(tiny_policy_dir):
    policy, tok = load_policy(tiny_policy_dir)
    task = get_task("chain_sum")
    problems = heldout_split(task, 3).problems
    return policy, tok, problems


def complete(policy, tok, problems, seed=7, cache=True, temperature=1.0, max_new_tokens=6):
    return ev.complete(policy, tok, problems, max_new_tokens=max_new_tokens,
                       temperature=temperature, batch_size=4,
                       generator=torch.Generator().manual_seed(seed),
                       cache_as={"seed": seed} if cache else None)


def test_a_hit_returns_what_sampling_returns(tiny_policy_dir, home, counted):
    policy, tok, problems = setting(tiny_policy_dir)
    fresh = complete(policy, tok, problems, cache=False)
    n = len(counted)
    assert n >= 2  # more problems than one batch: the batches are joined in order
    assert complete(policy, tok, problems) == fresh  # a miss: sampled and kept
    assert len(counted) == 2 * n
    assert len(list((home / eval_cache.FOLDER).glob("*.json"))) == 1
    assert complete(policy, tok, problems) == fresh  # a hit: nothing sampled
    assert len(counted) == 2 * n


@pytest.mark.parametrize("change", ["weight", "seed", "temperature", "prompts", "tokens",
                                    "threads"])
def test_any_changed_input_misses(tiny_policy_dir, home, counted, change):
    policy, tok, problems = setting(tiny_policy_dir)
    complete(policy, tok, problems)
    n = len(counted)
    kw = {}
    if change == "weight":  # one parameter's last bit
        with torch.no_grad():
            w = next(policy.parameters()).view(-1)
            w[0] = torch.nextafter(w[0], torch.tensor(float("inf")))
    elif change == "seed":
        kw["seed"] = 8
    elif change == "temperature":
        kw["temperature"] = 0.9
    elif change == "prompts":
        problems = problems[1:] + problems[:1]
    elif change == "tokens":
        kw["max_new_tokens"] = 5
    threads = torch.get_num_threads()
    if change == "threads":
        torch.set_num_threads(1 if threads > 1 else 2)
    try:
        complete(policy, tok, problems, **kw)
    finally:
        torch.set_num_threads(threads)
    assert len(counted) == 2 * n
    assert len(list((home / eval_cache.FOLDER).glob("*.json"))) == 2


@pytest.mark.parametrize("damage", ["truncated", "short", "other_key", "not_a_dict"])
def test_a_damaged_entry_is_sampled_again_and_rewritten(tiny_policy_dir, home, counted,
                                                        damage):
    policy, tok, problems = setting(tiny_policy_dir)
    fresh = complete(policy, tok, problems)
    n = len(counted)
    (entry,) = (home / eval_cache.FOLDER).glob("*.json")
    text = entry.read_text()
    if damage == "truncated":
        entry.write_text(text[:len(text) // 2])
    elif damage == "not_a_dict":
        entry.write_text(json.dumps(json.loads(text)["responses"]))
    else:
        data = json.loads(text)
        if damage == "short":
            data["responses"] = data["responses"][:-1]
        else:
            data["key"] = "0" * 64
        entry.write_text(json.dumps(data))
    assert complete(policy, tok, problems) == fresh
    assert len(counted) == 2 * n
    assert json.loads(entry.read_text()) == json.loads(text)


def test_switched_off_it_samples_every_time(tiny_policy_dir, home, counted, monkeypatch):
    monkeypatch.setenv(eval_cache.ENV, "off")
    policy, tok, problems = setting(tiny_policy_dir)
    complete(policy, tok, problems)
    n = len(counted)
    complete(policy, tok, problems)
    assert len(counted) == 2 * n
    assert not (home / eval_cache.FOLDER).exists()


def test_a_run_that_reads_its_first_evaluation_writes_the_same_rows(tiny_policy_dir, home,
                                                                    tmp_path, counted):
    """Two runs of one config: the second reads the starting policy's evaluation from the
    cache (no sampling for it) and writes the first's metrics and eval.json, bit for bit."""
    from lmpo.config import load_config
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "grpo", [
        f"policy={tiny_policy_dir}", "steps=2", "rollout.batch_size=8", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "log.eval_every=2", "log.eval_per_tier=2",
        "log.eval_max_new_tokens=4", "log.eval_temperature=1.0", "log.eval_samples=2"])
    first = train(cfg, tmp_path / "a", progress=False)
    calls = len(counted)
    second = train(cfg, tmp_path / "b", progress=False)
    assert first == second
    rows = [(tmp_path / d / "metrics.jsonl").read_text().splitlines() for d in "ab"]
    strip = [[{k: v for k, v in json.loads(r).items() if not k.startswith("time/")}
              for r in run] for run in rows]
    assert strip[0] == strip[1]
    # the first run sampled two evaluations; the second its last one only
    assert calls > 0 and len(counted) - calls == calls // 2
    assert len(list((home / eval_cache.FOLDER).glob("*.json"))) == 1
