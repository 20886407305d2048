"""The sampler: behaviour log-probs, values, determinism, greedy, row dropping."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lmpo.models import ValueModel, build_policy, build_tokenizer
from lmpo.rollout import IncrementalValues, sample


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def policy(tok):
    return build_policy("nano", tok, seed=1).eval()


PROMPTS = ["12+7=", "1+2+3=", "99-1+5=", "4=", "7*8*9=", "5-5-5-5="]


def run(policy, tok, *, seed=0, eos=None, **kw):
    ids = [tok.encode(p) for p in PROMPTS * 2]
    kw.setdefault("max_new_tokens", 12)
    return sample(policy, ids, eos_token_id=tok.eos_token_id if eos is None else eos,
                  pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed),
                  **kw)


def frequent_token(policy, tok) -> int:
    r = run(policy, tok, eos=-1)
    return Counter(r.response_ids.flatten().tolist()).most_common(1)[0][0]


def teacher_forced_logp(policy, r, temperature):
    ids, mask = r.full_sequences()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    p = r.prompt_ids.shape[1]
    logits = logits[:, p - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, r.response_ids[..., None]).squeeze(-1)


@pytest.mark.parametrize("fast", [True, False], ids=["fast_llama", "hf_forward"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logp_equals_teacher_forced_pass(policy, tok, temperature, fast):
    eos = frequent_token(policy, tok)
    r = run(policy, tok, eos=eos, temperature=temperature, fast=fast)
    lengths = r.response_mask.sum(-1)
    assert len(set(lengths.tolist())) >= 3, "want EOS at several positions"
    assert "eos" in r.stop_reason and "length" in r.stop_reason
    want = teacher_forced_logp(policy, r, temperature) * r.response_mask
    torch.testing.assert_close(r.logp, want, rtol=0, atol=1e-5)
    assert (r.regret >= 0).all()
    assert r.num_generated == int(lengths.sum())
    for i, reason in enumerate(r.stop_reason):
        n = int(lengths[i])
        assert (r.response_ids[i, n:] == tok.pad_token_id).all()
        if reason == "eos":
            assert r.response_ids[i, n - 1] == eos and (r.response_ids[i, : n - 1] != eos).all()


def test_regret_is_greedy_minus_chosen(policy, tok):
    r = run(policy, tok)
    ids, mask = r.full_sequences()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    p = r.prompt_ids.shape[1]
    logp_all = torch.log_softmax(logits[:, p - 1:-1].float(), -1)
    want = (logp_all.max(-1).values - r.logp) * r.response_mask
    torch.testing.assert_close(r.regret, want, rtol=0, atol=1e-5)


def test_values_equal_teacher_forced_critic(policy, tok):
    critic = ValueModel.from_policy(policy)
    torch.nn.init.normal_(critic.head.weight)
    r = run(policy, tok, eos=frequent_token(policy, tok), value_fn=IncrementalValues(critic))
    ids, mask = r.full_sequences()
    with torch.no_grad():
        v = critic.values(ids, mask)[:, r.prompt_ids.shape[1] - 1:-1] * r.response_mask
    torch.testing.assert_close(r.values, v, rtol=0, atol=1e-4)


def test_same_seed_same_tokens_different_seed_different(policy, tok):
    a, b, c = run(policy, tok, seed=3), run(policy, tok, seed=3), run(policy, tok, seed=4)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logp, b.logp)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_temperature_zero_equals_hf_greedy_generate(policy, tok):
    eos = frequent_token(policy, tok)
    r = run(policy, tok, eos=eos, temperature=0.0)
    ids, mask = r.prompt_ids, r.prompt_mask
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                              max_new_tokens=12, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    gen = out[:, ids.shape[1]:]
    for i in range(len(gen)):
        n = int(r.response_mask[i].sum())
        assert gen[i, :n].tolist() == r.response_ids[i, :n].tolist()


def test_bad_arguments(policy, tok):
    with pytest.raises(ValueError, match="max_new_tokens"):
        run(policy, tok, max_new_tokens=0)
    with pytest.raises(ValueError, match="at least one token"):
        sample(policy, [[]], max_new_tokens=2, eos_token_id=2, pad_token_id=0)


def test_fast_path_is_used_for_llama_and_agrees_with_the_generic_path(policy, tok):
    from lmpo.rollout import fast_llama

    assert fast_llama.supports(policy)
    a = run(policy, tok, temperature=0.0, fast=True)
    b = run(policy, tok, temperature=0.0, fast=False)
    assert torch.equal(a.response_ids, b.response_ids)
    torch.testing.assert_close(a.logp, b.logp, rtol=0, atol=1e-5)


def test_grouped_query_attention_fast_path(tok):
    from lmpo.models.llama import llama_config

    cfg = llama_config("nano", tok)
    cfg.num_key_value_heads = 2  # 4 query heads share 2 key/value heads
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    gqa = LlamaForCausalLM(cfg).eval()
    r = run(gqa, tok, eos=frequent_token(gqa, tok))
    want = teacher_forced_logp(gqa, r, 1.0) * r.response_mask
    torch.testing.assert_close(r.logp, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fast", [True, False], ids=["fast_llama", "hf_forward"])
def test_shared_prompt_pass_changes_nothing_but_the_work(policy, tok, fast):
    """GRPO groups repeat each prompt G times: the prompt pass runs once per distinct
    prompt and its KV cache is copied to the group. Same tokens, same log-probs (and
    values), whether the prompt pass is shared or not."""
    critic = ValueModel.from_policy(policy).eval()
    ids = [tok.encode(p) for p in PROMPTS for _ in range(4)]  # groups of 4, as GRPO
    eos = frequent_token(policy, tok)
    out = {}
    for share in (True, False):
        out[share] = sample(policy, ids, max_new_tokens=12, eos_token_id=eos,
                            pad_token_id=tok.pad_token_id, fast=fast, share_prompts=share,
                            value_fn=IncrementalValues(critic),
                            generator=torch.Generator().manual_seed(5))
    a, b = out[True], out[False]
    assert torch.equal(a.response_ids, b.response_ids) and a.stop_reason == b.stop_reason
    assert "eos" in a.stop_reason  # rows left the batch along the way
    torch.testing.assert_close(a.logp, b.logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.values, b.values, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.regret, b.regret, rtol=0, atol=1e-5)


def test_several_eos_ids_each_end_a_row(policy, tok):
    first, second = Counter(run(policy, tok, eos=-1).response_ids.flatten().tolist()
                            ).most_common(2)
    r = run(policy, tok, eos=[first[0], second[0]])
    for i, reason in enumerate(r.stop_reason):
        last = int(r.response_ids[i, int(r.lengths[i]) - 1])
        assert (reason == "eos") == (last in (first[0], second[0]))
    assert r.stop_reason.count("eos") > run(policy, tok, eos=first[0]).stop_reason.count("eos")


def test_draw_samples_the_categorical_distribution():
    """Inverse-CDF sampling: frequencies match the probabilities (chi-square, 5 bins,
    200k draws: the 0.999 quantile of chi2(3) is 16.3), zero-probability tokens never
    come, and a seeded generator repeats itself."""
    from lmpo.rollout.sampler import draw

    probs = torch.tensor([[0.5, 0.25, 0.125, 0.0, 0.125]]).expand(200_000, 5)
    tokens = draw(probs, torch.Generator().manual_seed(0))
    counts = torch.bincount(tokens, minlength=5).double()
    assert counts[3] == 0
    expected = probs[0].double() * len(tokens)
    keep = expected > 0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < 16.3, chi2
    again = draw(probs[:50], torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens[:50])
    one_hot = torch.zeros(3, 7)
    one_hot[torch.arange(3), torch.tensor([6, 0, 3])] = 1.0
    assert draw(one_hot).tolist() == [6, 0, 3]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_recorded_entropy_is_the_sampling_distributions(policy, tok, temperature):
    """Entropy at the sampling temperature, per generated token, equal to a teacher-forced
    float32 pass's (the policy the update starts from)."""
    r = run(policy, tok, temperature=temperature)
    ids, mask = r.full_sequences()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    lp = torch.log_softmax(logits[:, r.prompt_ids.shape[1] - 1:-1].float() / temperature, -1)
    want = -(lp.exp() * lp).sum(-1) * r.response_mask
    torch.testing.assert_close(r.entropy, want, rtol=0, atol=1e-5)
    assert (r.entropy[r.response_mask == 0] == 0).all()
