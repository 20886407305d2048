"""lmpo's rollout corrections, alone and chained, against verl 0.9.1's own
`rollout_corr_helper` (runs in the verl environment: make test-verl). The kinds verl
lacks (mis: TRL's; seq_mask_tis: OpenRLHF's) are checked against float64 references in
tests/test_corrections.py."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from verl.trainer.ppo import rollout_corr_helper as rch  # noqa: E402

from lmpo.rollout import correction_hparams, get_correction  # noqa: E402
from lmpo.rollout.corrections import RS_MODES  # noqa: E402


def batch(seed, b=7, t=9, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    lr = spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.8).double()
    mask[0] = 0.0
    mask[1] = 1.0
    lr[2, 1] = 25.0  # past the safety bound
    return lr, mask


IS = [("tis", {}, "token", 2.0, False), ("tis", {"upper": 1.2}, "token", 1.2, False),
      ("tis", {"batch_normalize": True}, "token", 2.0, True),
      ("seq_tis", {}, "sequence", 2.0, False), ("seq_tis", {"upper": 5.0}, "sequence", 5.0, False),
      ("seq_tis", {"batch_normalize": True}, "sequence", 2.0, True),
      ("icepop", {}, "token", "0.5_5.0", False),
      ("icepop", {"lower": 0.8, "upper": 1.25}, "token", "0.8_1.25", False),
      ("icepop", {"batch_normalize": True}, "token", "0.5_5.0", True)]


@pytest.mark.parametrize("kind,hp,level,threshold,norm", IS, ids=lambda v: str(v))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_importance_weights_equal_verls(kind, hp, level, threshold, norm, seed):
    lr, mask = batch(seed)
    want, _ = rch.compute_rollout_correction_weights(
        lr, mask, rollout_is=level, rollout_is_threshold=threshold,
        rollout_is_batch_normalize=norm)
    got = get_correction(kind, **hp)(lr, mask)
    torch.testing.assert_close(got.weights, want, rtol=1e-12, atol=1e-300)
    assert torch.equal(got.mask, mask)


TIGHT = {"k1": {"lower": 0.95, "upper": 1.05}, "seq_mean_k1": {"lower": 0.99, "upper": 1.01},
         "k2": {"upper": 0.003}, "k3": {"upper": 0.003}}


@pytest.mark.parametrize("mode", RS_MODES)
@pytest.mark.parametrize("tight", [False, True])
@pytest.mark.parametrize("seed", [0, 3])
def test_rejection_masks_equal_verls(mode, tight, seed):
    """At lmpo's default thresholds (verl's presets') and at tight ones that reject."""
    lr, mask = batch(seed, spread=0.1)
    kind = f"rs_{mode}"
    hp = TIGHT.get(mode, TIGHT[mode.rsplit("_", 1)[1]]) if tight else {}
    full = correction_hparams(kind) | hp
    threshold = (f"{full['lower']}_{full['upper']}" if mode.endswith("k1") else full["upper"])
    want, _ = rch.compute_rollout_rejection_mask(lr, mask, rollout_rs=mode,
                                                 rollout_rs_threshold=threshold)
    got = get_correction(kind, **hp)(lr, mask)
    assert got.weights is None and torch.equal(got.mask, want)
    if tight:
        assert float((mask - got.mask).sum()) > 0  # the comparison covers rejections


def test_a_single_k1_threshold_is_the_upper_bound_as_in_verl():
    lr, mask = batch(5, spread=0.1)
    want, _ = rch.compute_rollout_rejection_mask(lr, mask, rollout_rs="token_k1",
                                                 rollout_rs_threshold=1.1)
    got = get_correction("rs_token_k1", lower=None, upper=1.1)(lr, mask)
    assert torch.equal(got.mask, want)


def lmpo_chain(rollout_is, is_threshold, rollout_rs, rs_threshold) -> list[dict]:
    """verl's `algorithm.rollout_correction` fields as lmpo's `rollout.correction` list:
    the rejection criteria in verl's order, then the IS weight."""
    chain = []
    if rollout_rs:
        modes = [m.strip() for m in rollout_rs.split(",") if m.strip()]
        specs = [s.strip() for s in str(rs_threshold).split(",")]
        for mode, spec in zip(modes, specs * len(modes) if len(specs) == 1 else specs,
                              strict=False):
            if mode.endswith("k1"):
                lower, _, upper = spec.rpartition("_")
                hp = {"lower": float(lower) if lower else None, "upper": float(upper)}
            else:
                hp = {"upper": float(spec)}
            chain.append({"kind": f"rs_{mode}", "hparams": hp})
    if rollout_is:
        if isinstance(is_threshold, str) and "_" in is_threshold:
            lower, upper = (float(x) for x in is_threshold.split("_"))
            chain.append({"kind": "icepop", "hparams": {"lower": lower, "upper": upper}})
        else:
            kind = "tis" if rollout_is == "token" else "seq_tis"
            chain.append({"kind": kind, "hparams": {"upper": float(is_threshold)}})
    return chain


def verl_presets():
    from verl.trainer.config.algorithm import RolloutCorrectionConfig as R

    return {  # every preset that pairs an IS weight with rejection, and multi-criteria ones
        "decoupled_seq_is_rs": R.decoupled_seq_is_rs(rs_threshold="0.97_1.03"),
        "decoupled_geo_rs_token_tis": R.decoupled_geo_rs_token_tis(),
        "decoupled_geo_rs_seq_tis": R.decoupled_geo_rs_seq_tis(),
        "decoupled_k3_rs_token_tis": R.decoupled_k3_rs_token_tis(rs_threshold=0.003),
        "decoupled_k3_rs_seq_tis": R.decoupled_k3_rs_seq_tis(),
        "multi_rs_token_tis": R(rollout_is="token", rollout_is_threshold=1.5,
                                rollout_rs="token_k1,seq_mean_k3",
                                rollout_rs_threshold="0.9_1.1,0.003"),
        "multi_rs_icepop": R(rollout_is="token", rollout_is_threshold="0.8_1.25",
                             rollout_rs="seq_max_k2,seq_sum_k1",
                             rollout_rs_threshold="0.01,0.7_1.4"),
    }


@pytest.mark.parametrize("preset", list(verl_presets()))
@pytest.mark.parametrize("seed", [0, 4])
def test_chained_corrections_equal_verls_presets(preset, seed):
    """A chain (lmpo.rollout.corrections.chain) against verl's own
    `compute_rollout_correction_and_rejection_mask` on the preset's fields: the IS weights
    and the modified response mask, exactly; and the share of tokens removed."""
    from lmpo.rollout.corrections.chain import build_correction

    cfg = verl_presets()[preset]
    lr, mask = batch(seed, spread=0.1)
    proto, want_mask, metrics = rch.compute_rollout_correction_and_rejection_mask(
        old_log_prob=lr, rollout_log_prob=torch.zeros_like(lr), response_mask=mask,
        rollout_is=cfg.rollout_is, rollout_is_threshold=cfg.rollout_is_threshold,
        rollout_rs=cfg.rollout_rs, rollout_rs_threshold=cfg.rollout_rs_threshold)
    chain = lmpo_chain(cfg.rollout_is, cfg.rollout_is_threshold, cfg.rollout_rs,
                       cfg.rollout_rs_threshold)
    assert len(chain) >= 2
    got = build_correction([(c["kind"], c["hparams"]) for c in chain])(lr, mask)
    torch.testing.assert_close(got.weights, proto.batch["rollout_is_weights"], rtol=1e-12,
                               atol=1e-300)
    assert torch.equal(got.mask, want_mask)
    assert float((mask - got.mask).sum()) > 0  # the comparison covers rejections
    assert got.metrics["rollout_corr/masked_frac"] >= \
        metrics["rollout_corr/rollout_rs_masked_fraction"] - 1e-12  # weights of 0 count too
