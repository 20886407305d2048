"""Every critic-free estimator against its independent float64 reference
(tests/advantage_references/), at each hyper-parameter set the reference names, on random
layouts: groups of one to several responses, binary and continuous scores, ties."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from lmpo.advantages import advantage_meta, get_advantage, list_advantages
from tests.advantage_references import REFERENCES

D = torch.float64


def references_elsewhere() -> dict[str, str]:
    """{estimator: test file} for the estimators whose float64 reference is not of the
    (scores, groups) shape this folder holds: each such test module says which it covers
    in its `ESTIMATOR_REFERENCES`, next to the reference itself."""
    out = {}
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "ESTIMATOR_REFERENCES"
                    for t in node.targets):
                out |= dict.fromkeys(ast.literal_eval(node.value), path.name)
    return out


OWN_FILES = references_elsewhere()
CASES = [(name, case) for name, ref in sorted(REFERENCES.items()) for case in ref.cases]


def test_every_registered_estimator_has_a_reference():
    missing = set(list_advantages()) - set(REFERENCES) - set(OWN_FILES)
    assert not missing, f"no reference for {sorted(missing)}: add tests/advantage_references/"
    assert not (set(REFERENCES) | set(OWN_FILES)) - set(list_advantages()), \
        "a reference for no estimator"
    assert not set(REFERENCES) & set(OWN_FILES), "two references for one estimator"
    for name, file in OWN_FILES.items():  # the file's tests do call it
        assert f'"{name}"' in (Path(__file__).parent / file).read_text().split(
            "ESTIMATOR_REFERENCES", 1)[1].split("\n", 2)[2], (name, file)


def random_layout(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    gid = torch.randint(0, 6, (40,), generator=g)
    scores = torch.where(torch.rand(40, generator=g) < 0.5, torch.rand(40, generator=g, dtype=D),
                         torch.randint(0, 2, (40,), generator=g).to(D))
    lengths = torch.randint(1, 30, (40,), generator=g).to(D)
    return scores, gid, lengths


def extra_inputs(name: str, scores: torch.Tensor, gid: torch.Tensor, seed: int) -> dict:
    """What the estimator's metadata asks for beyond scores: lengths; per-function parts
    (three functions: the scores, a binary one, a continuous one absent on a fifth of the
    samples) and weights (one negative); each group's greedy baseline score."""
    g = torch.Generator().manual_seed(1000 + seed)
    meta, out = advantage_meta(name), {}
    if meta["wants_lengths"]:
        out["lengths"] = random_layout(seed)[2]
    if meta["wants_parts"]:
        binary = torch.randint(0, 2, scores.shape, generator=g).to(D)
        cont = torch.randn(scores.shape, generator=g, dtype=D) * 3
        cont[torch.rand(scores.shape, generator=g) < 0.2] = torch.nan
        out["parts"] = torch.stack([scores, binary, cont], dim=1)
        out["weights"] = torch.tensor([1.0, 0.5, -0.25], dtype=D)
    if meta["wants_baselines"]:
        out["baselines"] = torch.rand(6, generator=g, dtype=D)[gid]
    return out


def case_id(x) -> str:
    return ",".join(f"{k}={v}" for k, v in x.items()) or "defaults" if isinstance(x, dict) \
        else str(x)


@pytest.mark.parametrize("name,case", CASES, ids=case_id)
@pytest.mark.parametrize("seed", range(4))
def test_the_estimator_equals_its_reference(name, case, seed):
    scores, gid, _ = random_layout(seed)
    extra = extra_inputs(name, scores, gid, seed)
    adv, _ = get_advantage(name, **case)(scores, gid, **extra)
    want = REFERENCES[name].fn(scores.tolist(), gid.tolist(),
                               **{k: v.tolist() for k, v in extra.items()}, **case)
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-9, atol=1e-12)
