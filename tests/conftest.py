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
def sft_run(lmpo_home):
    """The testbed's starting policy, the `nano-chain-sum` warm start (800 SFT steps), built
    once per test session into the session's LMPO_HOME: the same cache entry every test
    that names `policy: nano-chain-sum` (a preset's default) reads, so it is built once.
    Returns (model folder, the SFT's summary: losses, evaluation, held-out counts)."""
    import json

    from lmpo.warmstart import cached_policy

    path = cached_policy("nano-chain-sum", progress=False)
    return path, json.loads((path / "eval.json").read_text())


# `make test-fast` (pytest -m "not slow"): the inner loop, every test that runs no training
# beyond a few tiny steps. `make test` and .ci/run still run everything. A test is slow when
# it needs the warm-started policy (an 800-step SFT shared by the session), runs a whole
# module of slow work (below), or says so (@pytest.mark.slow).
SLOW_FIXTURES = {"sft_run"}
SLOW_MODULES = {"test_benchmarks", "test_real_model", "test_recipe", "test_install",
                "test_resume", "test_reward_model", "test_robustness", "test_export_data",
                "test_launcher"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: beyond the fast tier's budget (make test-fast "
                                       "leaves it out; make test runs it)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
