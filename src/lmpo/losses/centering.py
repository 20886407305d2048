"""Score centering (Marek & Ryabinin, arXiv 2609.20807; SkyRL #2244
`trainer.algorithm.score_centering`, miles #3317): subtract, at every sampled prefix, the
behaviour distribution's expected score from the sampled token's score.

Under a training-inference mismatch the policy gradient at a prefix is
E_q[A] E_q[grad log pi] + Cov_q(A, grad log pi), q the distribution that sampled: the first
term pulls pi toward q, weighted by the prefix's expected advantage (which group centering
does not make 0). The centered per-token loss

    l_t = -A_t (log pi(y_t) - sum_v sg(c_v) log pi(v))

has E_{y ~ q}[grad] = -Cov_q(A, grad log pi) when sum_v c_v grad log pi(v) is q's expected
score; on-policy (q = pi) that added term has zero gradient (sum_v pi_v grad log pi_v = 0).

The coefficients c_v (`centering_coefficients`), one mode each:

- `full`: c_v = q_v over the whole vocabulary (exact; lmpo's sampler has it);
- `topk`: the paper's and the PRs' proportional tail. The sampler records its top k (the
  head H, full-vocabulary probabilities, not renormalised); the tail's mass 1 - Q_H is
  spread over the tail in proportion to pi: q^_v = alpha pi_v outside H, alpha =
  (1 - Q_H) / (1 - P_H). Since sum_v pi_v grad log pi_v = 0, the tail's part is
  -alpha sum_{v in H} pi_v grad log pi_v, so c_v = q_v - alpha sg(pi_v) on H alone;
  exact when q's tail is proportional to pi's, and equal to `full` when H is everything;
- `topk_renorm`: the head renormalised, c_v = q_v / Q_H (the tail's mass spread over the
  head in proportion to q): the simpler reading, biased by the tail's own score.

The tail masses come from log-sum-exps over the tail, not 1 - (head mass), so an empty tail
is exactly 0. Composition: the term sits inside the policy loss before the token masks, so
a per-sequence weight or mask multiplies it as it multiplies the score (SkyRL composes it
with geometric sequence masking); weights that depend on the sampled token need the
per-vocabulary weights f(pi_old(v) / q_v) and are refused where configured
(lmpo.trainer.validate).
"""

from __future__ import annotations

import torch

from lmpo.choices import CENTERING_MODES

TINY = 1e-30  # the floor of pi's tail mass in alpha's denominator (float64)


def centering_coefficients(mode: str, q_logp: torch.Tensor, p_logp: torch.Tensor | None = None,
                           q_tail: torch.Tensor | None = None,
                           p_tail: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(c [..., k] float64, alpha [...] or None) from the behaviour's head log-probs
    `q_logp` [..., k] (the whole vocabulary for `full`), and for `topk` the policy's
    log-probs at the same entries `p_logp` [..., k] and both tails' log-masses `q_tail`,
    `p_tail` [...] (log of the probability outside the head; -inf when there is none)."""
    if mode not in CENTERING_MODES:
        raise ValueError(f"unknown score centering mode {mode!r}; valid modes: "
                         f"{', '.join(CENTERING_MODES)}")
    q = q_logp.detach().double().exp()
    if mode == "full":
        return q, None
    if mode == "topk_renorm":
        return q / q.sum(-1, keepdim=True).clamp(min=TINY), None
    if p_logp is None or q_tail is None or p_tail is None:
        raise ValueError("topk score centering needs the policy's head log-probs and both "
                         "tails' log-masses")
    alpha = q_tail.detach().double().exp() / p_tail.detach().double().exp().clamp(min=TINY)
    return q - alpha[..., None] * p_logp.detach().double().exp(), alpha


def centered_term(head_logp: torch.Tensor, coef: torch.Tensor, adv: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
    """A_t sum_v sg(c_v) log pi(v) per token [B, T] (0 off `mask`): what score centering
    adds to a score-function loss -A_t log pi(y_t). `head_logp` [B, T, k] carries the
    gradient; `coef` and `adv` do not."""
    expected = (coef.detach().to(head_logp.dtype) * head_logp).sum(-1)
    return adv.detach().to(head_logp.dtype) * expected * mask


def centering_gradient(policy, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                       response_mask: torch.Tensor, q_head: tuple, mode: str) -> torch.Tensor:
    """The gradient of the centering term alone (A = 1 on every response token) over
    `policy`'s parameters, flattened, float64: how the top-k modes' bias against `full` is
    measured (tests/test_score_centering.py, benchmarks/score_centering_bias.py). `q_head`:
    `lmpo.models.forward.behaviour_head`'s (ids or None, log-probs, tail log-mass)."""
    from lmpo.models.forward import ALL, forward_logprobs

    policy.zero_grad()
    top_ids, q_logp, q_tail = q_head
    _, _, (p_logp, p_tail) = forward_logprobs(policy, ids, mask, response_ids,
                                              head=ALL if top_ids is None else top_ids)
    coef, _ = centering_coefficients(mode, q_logp, p_logp, q_tail, p_tail)
    m = response_mask.to(p_logp.dtype)
    centered_term(p_logp, coef, torch.ones_like(m), m).sum().backward()
    return torch.cat([p.grad.flatten().double() for p in policy.parameters()
                      if p.grad is not None])
