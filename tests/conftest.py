import os

import torch
from hypothesis import settings

torch.set_num_threads(int(os.environ.get("LMPO_TEST_THREADS", "2")))
settings.register_profile("lmpo", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("lmpo")


import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def lmpo_home(tmp_path_factory):
    """Tests never read or write the user's cache of warm-start policies."""
    home = tmp_path_factory.mktemp("lmpo_home")
    os.environ["LMPO_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    """A randomly initialised nano policy saved as a Hugging Face folder."""
    from lmpo.models import build_policy, build_tokenizer, save_policy

    tok = build_tokenizer()
    path = tmp_path_factory.mktemp("tiny_policy")
    save_policy(build_policy("nano", tok, seed=0), tok, path)
    return path


@pytest.fixture(scope="session")
def tiny_rm_dir(tiny_policy_dir, tmp_path_factory):
    """A reward model with the random nano trunk and a random head, saved as `lmpo rm`
    saves one (for smoke runs against a reward model)."""
    import json

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from lmpo.rewards.reward_model import META_FILE

    tok = AutoTokenizer.from_pretrained(tiny_policy_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_policy_dir, num_labels=1, pad_token_id=tok.pad_token_id)
    path = tmp_path_factory.mktemp("tiny_rm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / META_FILE).write_text(json.dumps({"prompt_format": "raw"}))
    return path


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory):
    """A nano policy warm-started on chain sums as the `nano-chain-sum` SFT preset does
    (800 steps, ~70 s): the testbed's starting point, shared by the SFT and RL tests."""
    from lmpo.config import load_config
    from lmpo.sft import SFTConfig, run_sft

    out = tmp_path_factory.mktemp("sft") / "policy"
    cfg = load_config(SFTConfig, None, ["steps=800", "batch_size=64", "eval_per_tier=50",
                                        f"out={out}", "max_new_tokens=16"])
    return out, run_sft(cfg, progress=False)
