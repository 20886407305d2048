"""The policy-loss registry (`get_loss`, `list_losses`) and the metadata every loss has.

Registration metadata (`@LOSSES.register(name, **meta)`), read by the trainer, reports,
docs and adapters so that none of them names a loss:

- `default_agg`: the aggregation mode the method's paper uses.
- `agg_is_method`: True when that aggregation is part of the method (LUSPO's length
  weighting, GMPO's per-sequence mean): its preset states it instead of inheriting the
  testbed's, which every other arm shares (a test checks it).
- `title`, `source`, `summary`: the methods table (`lmpo methods`, docs/methods-reference.md).
- `diagnostics`: metrics that show the mechanism in reports (`loss/...`, `diag/...`).
- `acts`: {metric, above}: the metric that must exceed `above` in the first 40 steps of
  the loss's preset (its mechanism acts at all; a smoke test).
- `engagement`: the method's own diagnostic, shown beside a claim's measured same-batch
  engagement as context (docs/reproductions.md).
- `mediates`: effective quantities (`lmpo.experiments.stats.seeds.EFFECTIVE`) a change to this
  loss moves by design: never a confound of a claim whose arms differ in it (estimators
  default to `adv_abs_mean`, controllers to `rollout_tokens` and `update_share`).
- `post_update`: post-update diagnostics (`lmpo.losses.diagnostics`) the trainer runs on
  diagnostic steps, each with {diagnostic parameter: this loss's hyper-parameter}.
- `peer_keys`: {"verl" | "trl" | "skyrl": {hyper-parameter: (peer config key, fallback,
  ...)}}: the
  peer's settings that feed a hyper-parameter the user did not set explicitly.
- `peer_agg`: {"verl": mode}: the aggregation the peer's own function hard-codes whatever
  its aggregation setting says (verl's sapo: seq-mean-token-mean; its geo_mean: "row-mean",
  the mean of row losses over every row, an empty one included, each row's rollout IS
  weight the geometric mean of its tokens'). The adapter applies it in place of the
  user's mode, so that `lmpo_<name>` trains what the peer's own `<name>` trains.
- `clipfrac`: the metric the verl adapter reports as `actor/pg_clipfrac`.
- `preset_keys`: config keys outside `loss.*` the method's preset may set.
- `acts_without_advantage`: True for a loss with a term that acts on every token whatever
  its advantage (DRO's quadratic penalty, KL-Cov's |rho|): zero advantage is inert only
  at rho = 0 (the property tests check that instead).
- `batch_token_mean`: the TRL adapter normalises token-mean by the micro-batch's own tokens
  (TRL's "bnpo"), not by the generation batch's (TRL's "dapo").
- `domains`: {hyper-parameter: domain spec} (`lmpo.domains`), checked when the loss is
  built; every hyper-parameter needs one (a test fails otherwise).
- `dual_clip`: for a loss with a ratio clip (`eps_low`/`eps_high`), required: "offered"
  (PPO's dual clip `clip_ratio_c`, off by default), "peer" (kept in its engine's form,
  which has none) or "bounded" (a stop-gradient weight already bounded by the clip);
  tests/test_paper_settings.py holds each to it.
- `score_function`: the per-token loss is -A log pi(y_t) (no ratio), the form
  loss.centered_score centers (lmpo.losses.centering).
"""

from lmpo.registry import DEFAULT_LOSS, Registry  # noqa: F401 (re-exported)

LOSSES = Registry("loss", defaults={
    "default_agg": "token-mean", "title": "", "source": "", "summary": "", "diagnostics": (),
    "acts": None, "engagement": None, "mediates": (),
    "post_update": {"displacement": {}, "or_margin": {}},  # comparable across every loss
    "peer_keys": {}, "clipfrac": "clipfrac", "preset_keys": (), "acts_without_advantage": False,
    "batch_token_mean": False, "agg_is_method": False, "peer_agg": {}, "dual_clip": None,
    "twin": None, "readings": (), "score_function": False,
})


# the domains of the hyper-parameters several losses share (lmpo.domains)
CLIP = {"eps_low": "(0, 1]", "eps_high": "(0, inf)"}  # 1 - eps_low >= 0: no lower clip at 1
DUAL_CLIP = {"clip_ratio_c": "(1, inf) | None"}  # None: dual clip off

# verl reads the same clip knobs for every ratio loss (a single clip_ratio as fallback)
VERL_CLIP = {"eps_low": ("clip_ratio_low", "clip_ratio"),
             "eps_high": ("clip_ratio_high", "clip_ratio")}
# SkyRL's trainer.algorithm clip knobs (skyrl-train 0.3.1)
SKYRL_CLIP = {"eps_low": "eps_clip_low", "eps_high": "eps_clip_high"}
# TRL's GRPOConfig: epsilon, and epsilon_high (None = epsilon) for a PPO-style clip
TRL_CLIP = {"eps_low": ("epsilon",), "eps_high": ("epsilon_high", "epsilon")}
