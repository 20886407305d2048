"""Chained rollout corrections (`rollout.correction: [{kind, hparams}, ...]`): the chain
against a float64 reference built from each kind's own reference, the list written in a
config, the one-line refusals, and a 3-step run. Equality with verl's presets that pair
an IS weight with rejection criteria: tests/test_verl_corrections.py."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.rollout import correction_hparams
from lmpo.rollout.corrections.chain import Chain, build_correction
from lmpo.trainer.loop import train
from lmpo.trainer.metric_names import declared, logs
from lmpo.trainer.train_config import TrainConfig
from tests.correction_references import REFERENCES
from tests.test_corrections import batch
from tests.test_trainer import tiny_cfg

CHAIN = [("rs_token_k1", {"lower": 0.9, "upper": 1.1}), ("rs_seq_mean_k3", {"upper": 0.006}),
         ("tis", {"upper": 1.5})]


def reference(kind: str, hp: dict, lr: list, mask: list):
    """The float64 reference of one link (tests/correction_references/)."""
    return REFERENCES[kind].fn(lr, mask, **(correction_hparams(kind) | hp))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_chain_multiplies_the_masks_and_keeps_the_one_weight(seed):
    lr, mask = batch(seed, spread=0.1)
    got = build_correction(CHAIN)(lr, mask)
    m = mask.tolist()
    _, token = reference(*CHAIN[0], lr.tolist(), m)
    _, seq = reference(*CHAIN[1], lr.tolist(), m)
    weights, _ = reference(*CHAIN[2], lr.tolist(), m)
    want_mask = torch.tensor(token, dtype=torch.float64) * torch.tensor(seq, dtype=torch.float64)
    want_w = torch.tensor(weights, dtype=torch.float64)
    assert torch.equal(got.mask, want_mask)
    torch.testing.assert_close(got.weights, want_w, rtol=1e-12, atol=1e-300)
    valid = int(mask.sum())
    assert 0 < float((mask - got.mask).sum()) < valid  # the case rejects some, not all
    for kind, table in (("rs_token_k1", token), ("rs_seq_mean_k3", seq)):
        removed = sum(k and not t for row_m, row_t in zip(m, table, strict=True)
                      for k, t in zip(row_m, row_t, strict=True))
        assert got.metrics[f"rollout_corr/{kind}/masked_frac"] == pytest.approx(removed / valid)
    gone = ((mask > 0) & ((want_mask == 0) | (want_w == 0))).sum()
    assert got.metrics["rollout_corr/masked_frac"] == pytest.approx(float(gone) / valid)


def test_the_order_of_the_links_does_not_change_the_result():
    lr, mask = batch(3, spread=0.3)
    a, b = build_correction(CHAIN)(lr, mask), build_correction(CHAIN[::-1])(lr, mask)
    assert torch.equal(a.mask, b.mask) and torch.equal(a.weights, b.weights)


def test_a_list_in_a_config_is_a_chain_and_one_item_is_the_kind_itself(tiny_policy_dir):
    cfg = tiny_cfg(tiny_policy_dir, "grpo", [
        "rollout.correction=[{kind: rs_token_k1}, {kind: tis, hparams: {upper: 1.5}}]"])
    assert cfg.rollout.correction.links() == [("rs_token_k1", {}), ("tis", {"upper": 1.5})]
    one = tiny_cfg(tiny_policy_dir, "grpo", ["rollout.correction=[{kind: tis}]"])
    assert (one.rollout.correction.kind, one.rollout.correction.chain) == ("tis", [])
    assert not isinstance(build_correction(one.rollout.correction.links()), Chain)
    assert logs(declared(cfg), "rollout_corr/rs_token_k1/masked_frac")


@pytest.mark.parametrize("value,says", [
    ("[]", "an empty list"),
    ("[{kind: tis}, {kind: tis, hparams: {upper: 3}}]", "lists tis more than once"),
    ("[{kind: tis}, {kind: seq_tis}]", "tis and seq_tis, which both give importance weights"),
    ("[{kind: rs_token_k1}, {kind: tiss}]", "unknown rollout.correction[1].kind 'tiss'"),
    ("[{kind: tis}, 3]", "rollout.correction[1]: expected a mapping with kind"),
    ("[{kind: tis, upper: 2}, {kind: rs_token_k1}]", "rollout.correction[0]: expected"),
    ("[{kind: rs_token_k1, hparams: {upper: -1}}, {kind: tis}]", "upper"),
])
def test_a_bad_chain_is_refused_in_one_line(value, says, tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError) as err:
        cfg = tiny_cfg(tiny_policy_dir, "grpo", [f"rollout.correction={value}", "steps=1"])
        train(cfg, tmp_path / "run", progress=False)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_chain_and_a_kind_together_are_refused():
    with pytest.raises(ConfigError, match="both a chain and a kind"):
        load_config(TrainConfig, "grpo", [
            "rollout.correction={kind: tis, chain: [{kind: tis}, {kind: rs_token_k1}]}"])


@pytest.mark.parametrize("chain,kinds", [
    ("[{kind: rs_token_k1, hparams: {lower: 0.9, upper: 1.1}}, {kind: icepop}]",
     ("rs_token_k1", "icepop")),
    ("[{kind: outlier_token_is, hparams: {lower: 0.5, upper: 2}}, "
     "{kind: tis, hparams: {lower: 0.8, upper: 1.2}}]", ("outlier_token_is", "tis")),
])
def test_three_steps_with_a_chain_log_each_link(chain, kinds, tiny_policy_dir, tmp_path):
    """On the testbed with FP8 rollouts (a mismatch to correct), each chain of kinds
    (the two-sided TIS and SkyRL's outlier mask among them) trains 3 steps."""
    cfg = tiny_cfg(tiny_policy_dir, "grpo", ["steps=3", "rollout.dtype=fp8_e4m3",
                                             f"rollout.correction={chain}"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n")
            if x]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert {*(f"rollout_corr/{k}/masked_frac" for k in kinds), "rollout_corr/masked_frac",
                "rollout_corr/weight_mean"} <= set(row)
        assert all(logs(declared(cfg), k) for k in row)
