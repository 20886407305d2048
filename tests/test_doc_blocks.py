"""Every fenced Python and bash block of README.md and docs/ is run (or, for verl, composed)
by a named test, or carries its reason for not being run; the README's PyTorch quick start
runs here as pasted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# (page, a prefix of the block's first line; "" for every block of a page a test follows
# as written) -> the test that runs it
RUN = {
    ("README.md", "from datasets import Dataset"): "tests/test_trl.py",
    ("README.md", "import torch"): "tests/test_doc_blocks.py",
    ("README.md", "python -m verl.trainer.main_ppo"): "tests/test_verl.py",
    ("docs/tutorial.md", ""): "tests/test_tutorial.py",
    ("docs/your-method.md", ""): "tests/test_recipe.py",
    ("docs/skyrl.md", "from lmpo.integrations.skyrl import register"): "tests/test_skyrl.py",
}
# (page, first line) -> why a test does not run it
EXCUSED = {
    ("README.md", "make demo"): "the two commands themselves: CI runs `make test`; `make "
                                "demo` (~5 min) is what a new user runs first",
    ("README.md", "pip install ."): "installs into the reader's environment; make test-wheel "
                                    "installs the wheel and its extras the same way",
    ("README.md", "lmpo compare --config demo"): "`make demo` (~5 min) runs it; "
                                                 "tests/test_tutorial.py runs the same commands",
    ("docs/cluster.md", 'pip install "$WHEEL[ray]"'): "a Ray cluster's nodes; make test-ray runs "
                                                   "lmpo compare --launcher ray on Ray's own "
                                                   "test cluster",
    ("docs/cluster.md", "export MODEL_PATH="): "a multi-GPU verl job (8 GPUs, shared storage)",
    ("docs/reward-models.md", "lmpo rm --config nano-chain-sum-rm"): "trains a reward model "
                                                                    "(minutes); the rm tests "
                                                                    "train the preset shortened",
    ("docs/running.md", ".venv/bin/lmpo sft --config nano-chain-sum"): "each command is run "
                                                                        "shortened by the CLI "
                                                                        "tests (sft, train, "
                                                                        "--resume, eval)",
    ("docs/running.md", "make real-demo"): "SmolLM2-135M for 40 steps (~17 min on 2 cores)",
    ("docs/trl.md", "pip install '.[trl]'"): "make test-trl builds that environment",
    ("docs/trl.md", "import copy"): "needs the SFT folder its page builds first (800 steps); "
                                    "the README's complete TRL block runs in tests/test_trl.py",
    ("docs/trl.md", "make test-trl"): "a make target of `make test`",
    ("docs/verl.md", "pip install ."): "installs into verl's environment; make test-verl "
                                       "builds one",
    ("docs/verl.md", "python -m verl.trainer.main_ppo \\"): "a placeholder (`...`): the table "
                                                            "below it is composed by "
                                                            "tests/test_verl.py",
    ("docs/verl.md", "python -m verl.trainer.main_ppo data.train_files"): "a verl job on GPUs; "
                                                                          "tests/test_verl_data."
                                                                          "py reads the files",
    ("docs/verl.md", "lmpo compare --config experiments/output_reset.yaml"): "writes verl "
                                                                             "commands; tests/"
                                                                             "test_verl_launch"
                                                                             ".py composes "
                                                                             "them",
    ("docs/verl.md", "# on the laptop"): "a verl job on GPUs between its two halves",
}


def blocks():
    for page in PAGES:
        for lang, _, code in fenced_blocks(page):
            if lang in ("python", "bash"):
                yield page.relative_to(ROOT).as_posix(), code.strip().splitlines()[0], code


def owner(page: str, first: str):
    keys = [k for k in (*RUN, *EXCUSED) if k[0] == page and first.startswith(k[1])]
    return max(keys, key=lambda k: len(k[1])) if keys else None


def test_every_block_is_run_by_a_test_or_says_why_not():
    unowned = [(p, f) for p, f, _ in blocks() if owner(p, f) is None]
    assert not unowned, f"a block no test runs and no reason excuses: {unowned}"
    used = {owner(p, f) for p, f, _ in blocks()}
    stale = set(RUN) | set(EXCUSED)
    assert not stale - used, f"entries that match no block: {sorted(stale - used)}"
    for (page, _), test in RUN.items():
        text = (ROOT / test).read_text()
        assert Path(page).name in text, f"{test} does not read {page}"
    assert all(len(why) > 20 for why in EXCUSED.values())


def test_the_readmes_pytorch_quick_start_runs_as_pasted():
    import torch

    code = next(c for lang, _, c in fenced_blocks(ROOT / "README.md")
                if lang == "python" and c.startswith("import torch"))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["loss"].shape == () and torch.isfinite(scope["loss"])
    assert scope["logp"].grad is not None and scope["logp"].grad.abs().sum() > 0
    assert "clipfrac" in " ".join(scope["metrics"])


@pytest.mark.parametrize("page", ["docs/methods-reference.md"])
def test_pages_without_blocks_of_their_own_point_to_the_runnable_ones(page):
    assert "```python" not in (ROOT / page).read_text()
