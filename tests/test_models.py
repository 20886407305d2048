"""Tokenizer, tiny Llama sizes, HF-folder round trip, the critic."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lmpo.models import (
    ValueModel,
    build_policy,
    build_tokenizer,
    load_policy,
    num_parameters,
    save_policy,
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("text", ["12+7-3=", "19,16#16", "Hello, world! (x*y)/2 = 7?", " a\nb "])
def test_tokenizer_round_trip(tok, text):
    ids = tok.encode(text)
    assert len(ids) == len(text)  # one token per character, nothing added
    assert tok.decode(ids) == text


def test_tokenizer_specials_and_left_padding(tok):
    assert tok.decode([tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == ""
    assert tok.encode("~")[0] == tok.unk_token_id
    batch = tok(["1+1=", "12+3="], padding=True)
    assert batch["input_ids"][0][0] == tok.pad_token_id and batch["attention_mask"][0][0] == 0


@pytest.mark.parametrize("size,lo,hi", [("nano", 0.4e6, 0.6e6), ("small", 4e6, 6e6)])
def test_named_sizes(tok, size, lo, hi):
    assert lo <= num_parameters(build_policy(size, tok)) <= hi
    with pytest.raises(KeyError, match="did you mean 'nano'"):
        build_policy("nanoo", tok)


def test_saved_folder_loads_with_plain_transformers_and_identical_logits(tok, tmp_path):
    model = build_policy("nano", tok, seed=3).eval()
    save_policy(model, tok, tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    plain_tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert plain_tok.encode("7*8=") == tok.encode("7*8=")
    ids = torch.tensor([tok.encode("12+34-5=")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, plain(ids).logits)
    reloaded, rtok = load_policy(tmp_path)
    assert rtok.padding_side == "left"
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits)


def test_load_policy_errors_on_a_non_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(tmp_path)


def test_value_model_is_a_separate_copy_with_per_position_values(tok):
    policy = build_policy("nano", tok, seed=0)
    critic = ValueModel.from_policy(policy)
    ids = torch.tensor([[tok.pad_token_id] + tok.encode("1+2="), tok.encode("11+2=")])
    mask = (ids != tok.pad_token_id).long()
    v = critic.values(ids, mask)
    assert v.shape == ids.shape and (v == 0).all()  # zero-initialised head
    with torch.no_grad():
        next(critic.trunk.parameters()).add_(1.0)
    assert not torch.equal(next(critic.trunk.parameters()), next(policy.model.parameters()))
    torch.nn.init.normal_(critic.head.weight)
    v = critic.values(ids, mask)
    # left padding does not change a row's values: row 0 (padded) equals its unpadded self
    alone = critic.values(ids[:1, 1:], mask[:1, 1:])
    torch.testing.assert_close(v[0, 1:], alone[0], rtol=0, atol=1e-5)
