"""The model that samples: the float32 policy, or a copy of it in a lower precision or an
older version, refreshed before every rollout (the update always stays float32).

`rollout.dtype`:

- `float32`: the policy itself (no copy, unless `rollout.staleness` asks for an old one);
- `bfloat16`, `float16`: a copy cast to that dtype (buffers such as RoPE frequencies stay
  float32, as inference engines keep them);
- `fp8_e4m3`: a simulated FP8 engine. The copy computes in bfloat16; the weight of every
  linear layer inside the decoder layers is quantised to float8 e4m3 with one scale per
  output channel (scale = max |w| of the row / 448) and dequantised for the matmul;
  with `rollout.fp8_activations` (its default) the input of each of those layers is also
  quantised to e4m3 with one scale per token (dynamic, max |x| / 448). Embeddings, norms,
  attention and the LM head stay bfloat16, as in FP8 serving (vLLM's fp8 W8A8 leaves
  `lm_head` unquantised). What is *not* simulated: the FP8 GEMM's own accumulation order
  and output rounding (here the dequantised values meet in a bfloat16 matmul), fused
  kernels, and KV-cache quantisation. docs/precision.md.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

ROLLOUT_DTYPES = ("float32", "bfloat16", "float16", "fp8_e4m3")
E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
TINY = 1e-12  # the smallest amax a scale divides by (an all-zero row stays zero)


def quantize_e4m3(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): `x` in float8 e4m3 with one float32 scale per slice along `dim` (the
    slice's max |x| maps to 448), so that `q.float() * scale` approximates `x`."""
    x = x.float()
    scale = x.abs().amax(dim=dim, keepdim=True).clamp(min=TINY) / E4M3_MAX
    return (x / scale).to(E4M3), scale


def fake_quant_e4m3(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`x` quantised to e4m3 per slice along `dim` and dequantised, in `x`'s dtype."""
    q, scale = quantize_e4m3(x, dim)
    return (q.float() * scale).to(x.dtype)


def quantised_linears(model: nn.Module) -> list[nn.Linear]:
    """The linear layers an FP8 engine quantises: those inside the decoder layers (the LM
    head and the embeddings stay in the compute dtype)."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None:
        raise ValueError("rollout.dtype fp8_e4m3 needs a decoder with .model.layers "
                         f"(a Llama-style model); got {type(model).__name__}")
    return [m for m in layers.modules() if isinstance(m, nn.Linear)]


def _quantise_input(module, args):
    return (fake_quant_e4m3(args[0]), *args[1:])


class RolloutModel:
    """The model `sample` runs (see the module docstring). `__call__(weights=None)`
    refreshes the copy from `weights` (a state dict of an earlier policy version) or from
    the live policy, and returns the model to sample with."""

    def __init__(self, policy, dtype: str, *, fp8_activations: bool = True,
                 staleness: int = 0):
        self.policy, self.name = policy, dtype
        self.fp8 = dtype == "fp8_e4m3"
        self.dtype = torch.bfloat16 if self.fp8 else getattr(torch, dtype)
        self.copy = None
        if self.dtype != torch.float32 or staleness > 0:
            self.copy = copy.deepcopy(policy).to(self.dtype).eval().requires_grad_(False)
            for name, buf in policy.named_buffers():
                self.copy.get_buffer(name).data = buf.data.clone()
        self.linears = quantised_linears(self.copy) if self.fp8 else []
        names = {id(p): n for n, p in (self.copy.named_parameters() if self.fp8 else ())}
        self.weight_names = [names[id(m.weight)] for m in self.linears]
        live = dict(policy.named_parameters())
        self.sources = [live[n] for n in self.weight_names]  # the float32 weights
        self.act_quant = self.fp8 and fp8_activations
        if self.act_quant:  # the generic path's linears; the fast decoder reads act_quant
            for m in self.linears:
                m.register_forward_pre_hook(_quantise_input)
            self.copy.lmpo_act_quant = fake_quant_e4m3

    @property
    def differs(self) -> bool:
        """Whether the sampling distribution can differ from the float32 policy's."""
        return self.copy is not None

    @torch.no_grad()
    def __call__(self, weights: dict | None = None):
        if self.copy is None:
            return self.policy
        if weights is not None:
            self.copy.load_state_dict(weights)
        else:
            for mine, theirs in zip(self.copy.parameters(), self.policy.parameters(),
                                    strict=True):
                mine.copy_(theirs)
        for m, name, live in zip(self.linears, self.weight_names, self.sources,
                                 strict=True):  # quantised from float32, not its bf16 cast
            m.weight.copy_(fake_quant_e4m3(live if weights is None else weights[name], dim=1))
        return self.copy


def mismatch_metrics(behaviour: torch.Tensor, recomputed: torch.Tensor,
                     mask: torch.Tensor) -> dict[str, float]:
    """`rollout/logp_mismatch` (mean over the response tokens of |log pi_rollout - log
    pi_float32|) and `rollout/logp_mismatch_p99` (its 99th percentile, linear
    interpolation as torch.quantile)."""
    from lmpo.masked import masked_mean

    gap = (behaviour - recomputed).abs()
    valid = gap[mask > 0].double()
    return {"rollout/logp_mismatch": float(masked_mean(gap, mask)),
            "rollout/logp_mismatch_p99": float(valid.quantile(0.99)) if valid.numel() else 0.0}
