"""LoRA via peft: only the adapters train, the reference is the base with adapters off,
and the saved policy is a plain folder with the adapters merged in."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import load_config
from lmpo.errors import ConfigError
from lmpo.models import load_policy
from lmpo.models.adapters import AdaptersOff, apply_lora, merged_copy
from lmpo.models.forward import forward_logprobs
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig
from tests.test_rewards import LENGTH_REWARD, write_fn


def test_adapters_off_is_the_base_model(tiny_policy_dir):
    base, tok = load_policy(tiny_policy_dir)
    ids = torch.tensor([tok.encode("12+7=19")])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want, _ = forward_logprobs(base, ids, mask, ids[:, -3:])
    model = apply_lora(load_policy(tiny_policy_dir)[0], r=4, alpha=8, dropout=0.0,
                       target_modules=["q_proj", "v_proj"])
    with torch.no_grad():  # adapters start at zero (B = 0): then perturb them
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
        on, _ = forward_logprobs(model, ids, mask, ids[:, -3:])
        off, _ = forward_logprobs(AdaptersOff(model), ids, mask, ids[:, -3:])
        merged, _ = forward_logprobs(merged_copy(model), ids, mask, ids[:, -3:])
    torch.testing.assert_close(off, want, rtol=0, atol=1e-6)
    assert (on - want).abs().max() > 1e-3
    torch.testing.assert_close(merged, on, rtol=0, atol=1e-5)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_unknown_target_modules_are_named():
    from lmpo.models import build_policy, build_tokenizer

    with pytest.raises(ConfigError, match=r"\['qkv'\] are not modules of this model"):
        apply_lora(build_policy("nano", build_tokenizer()), r=2, alpha=4, dropout=0.0,
                   target_modules=["qkv"])


def test_a_lora_run_trains_adapters_and_saves_a_merged_plain_folder(tiny_policy_dir, tmp_path):
    spec = write_fn(tmp_path, LENGTH_REWARD)  # spread in every group of the random policy
    cfg = load_config(TrainConfig, "grpo", [f"reward.fn={spec}",
        f"policy={tiny_policy_dir}", "steps=3", "rollout.batch_size=16", "rollout.group_size=4",
        "rollout.max_new_tokens=8", "rollout.pool_size=32", "log.eval_per_tier=2",
        "log.eval_max_new_tokens=4", "log.tensorboard=false", "log.policy_kl_every=1",
        "lora.r=4", "optim.lr=1e-2", "optim.gradient_checkpointing=true"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["kl/ref"] == pytest.approx(0, abs=1e-6)  # adapters start at zero
    # kl/ref is the k1 estimate (it can be negative): the policy left the reference
    assert abs(rows[-1]["kl/ref"]) > 1e-4 and all(r["train/updates"] == 4 for r in rows)
    assert all(r["grad/norm"] > 0 for r in rows)
    saved, _ = load_policy(tmp_path / "run" / "policy")  # a plain model: AutoModel loads it
    base, _ = load_policy(tiny_policy_dir)
    changed = [n for (n, a), b in zip(saved.named_parameters(), base.parameters(), strict=True)
               if not torch.equal(a, b)]
    assert changed and all(n.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj", "o_proj")
                           for n in changed)
