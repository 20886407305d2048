"""Any reasoning-gym dataset as a task (`rg:<dataset>`), and prompts in chat format."""

from __future__ import annotations

import random

import pytest

from lmpo.errors import ConfigError
from lmpo.models import PromptEncoder, build_tokenizer, stop_token_ids
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split

TIERS = {"min_terms": 2, "max_terms": 2,
         "tiers": {"d1": {"min_digits": 1, "max_digits": 1},
                   "d2": {"min_digits": 2, "max_digits": 2}}}


def test_rg_dataset_with_tiers_samples_scores_and_holds_out():
    task = get_task("rg:basic_arithmetic", TIERS)
    assert task.name == "rg:basic_arithmetic" and task.clusters == ["d1", "d2"]
    d2 = task.sample(20, random.Random(0), cluster="d2")
    assert all(p.cluster == "d2" and p.prompt.startswith("Calculate") for p in d2)
    p = d2[0]
    assert task.score(p, p.answer) == 1.0 and task.is_correct(p, p.answer)
    assert task.is_correct(p, f"thinking... <answer>{p.answer}</answer>")
    assert task.score(p, f"The answer is {p.answer}.") < 1  # the dataset's own strict checker
    assert not task.is_correct(p, "")
    held = heldout_split(task, 5)
    assert [q.cluster for q in held.problems] == ["d1"] * 5 + ["d2"] * 5


def test_rg_same_seed_same_problems():
    a = get_task("rg:chain_sum", {"min_terms": 2, "max_terms": 2})
    b = get_task("rg:chain_sum", {"min_terms": 2, "max_terms": 2})
    assert ([p.prompt for p in a.sample(8, random.Random(3))]
            == [p.prompt for p in b.sample(8, random.Random(3))])


def test_rg_bad_names_and_parameters_are_clear_errors():
    with pytest.raises(ConfigError, match=r"unknown reasoning-gym dataset \(did you mean "
                                          r"'chain_sum'\?\)"):
        get_task("rg:chain_summ")
    with pytest.raises(ConfigError, match=r"tier 'd1': reasoning-gym rejected the parameters"):
        get_task("rg:chain_sum", {"tiers": {"d1": {"min_digitz": 1}}})
    with pytest.raises(ValueError, match="task_params apply only to rg:<dataset>"):
        get_task("chain_sum", {"min_terms": 2})


CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<eos>"
                 "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_chat_format_applies_the_template_raw_does_not():
    tok = build_tokenizer()
    assert PromptEncoder(tok, "auto").format == "raw"
    assert PromptEncoder(tok, "raw")("1+2=") == tok.encode("1+2=")
    with pytest.raises(ConfigError, match="needs a tokenizer with a chat template"):
        PromptEncoder(tok, "chat")
    tok.chat_template = CHAT_TEMPLATE
    enc = PromptEncoder(tok, "auto")
    assert enc.format == "chat"
    assert enc.render("1+2=") == "<user>1+2=<eos><assistant>"
    ids = enc("1+2=")
    assert ids[ids.index(tok.eos_token_id) + 1:] == tok.encode("<assistant>")
    sys_enc = PromptEncoder(tok, "chat", system_prompt="be brief")
    assert sys_enc.render("1+2=") == "<system>be brief<eos><user>1+2=<eos><assistant>"
    with pytest.raises(ConfigError, match="system_prompt applies only"):
        PromptEncoder(build_tokenizer(), "raw", system_prompt="x")


def test_stop_tokens_join_the_tokenizer_and_generation_config():
    from types import SimpleNamespace

    tok = build_tokenizer()
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7, tok.eos_token_id]))
    assert stop_token_ids(model, tok) == [tok.eos_token_id, 7]
