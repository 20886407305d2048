"""Non-Llama architectures run through the Hugging Face forward path: small random-weight
Qwen3- and Gemma3-style models built locally (no download), sampled and trained."""

from __future__ import annotations

import pytest
import torch

from lmpo.models import build_tokenizer, save_policy
from lmpo.models.forward import forward_logprobs
from lmpo.rollout import fast_llama, sample


def qwen3(tok):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=True))


def gemma3(tok):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"],
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id))


BUILDERS = {"qwen3": qwen3, "gemma3": gemma3}


@pytest.fixture(scope="module", params=list(BUILDERS))
def arch(request):
    torch.manual_seed(0)
    tok = build_tokenizer()
    return request.param, BUILDERS[request.param](tok).float().eval(), tok


def test_sampled_logp_equals_teacher_forced_pass(arch):
    name, model, tok = arch
    assert not fast_llama.supports(model)  # the generic Hugging Face path
    prompts = [tok.encode(p) for p in ["12+7=", "1+2+3=", "99-1+5=", "4="] for _ in range(3)]
    out = {}
    for share in (True, False):
        out[share] = sample(model, prompts, max_new_tokens=14, temperature=1.0,
                            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                            generator=torch.Generator().manual_seed(0), share_prompts=share)
    r = out[True]
    assert torch.equal(r.response_ids, out[False].response_ids)
    torch.testing.assert_close(r.logp, out[False].logp, rtol=0, atol=1e-5)
    ids, mask = r.full_sequences()  # prompt + response longer than gemma3's window of 8
    with torch.no_grad():
        want, _ = forward_logprobs(model, ids, mask, r.response_ids, with_entropy=False)
    torch.testing.assert_close(r.logp, want * r.response_mask, rtol=0, atol=1e-5)


def test_one_training_step_from_a_saved_folder(arch, tmp_path):
    import json

    from lmpo.config import load_config
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    name, model, tok = arch
    save_policy(model, tok, tmp_path / name)
    cfg = load_config(TrainConfig, "grpo", [
        f"policy={tmp_path / name}", "steps=2", "rollout.batch_size=8", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "rollout.pool_size=16", "log.eval_per_tier=2",
        "log.eval_max_new_tokens=4", "log.tensorboard=false", "optim.minibatches=2"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/updates"] == 2 for r in rows)
