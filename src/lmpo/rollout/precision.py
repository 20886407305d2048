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
- `fp4_e2m1`: a simulated NVFP4 engine (W4A4, as Blackwell FP4 serving runs it), on the
  same layers as FP8. Each weight row is cut into blocks of 16 values along the input
  dimension; a block's scale (its max |w| / 6) is stored in e4m3 relative to one float32
  scale per tensor (max |w| / (448 * 6)), and the values are rounded to the nearest
  e2m1 number (0, 0.5, 1, 1.5, 2, 3, 4, 6, ties to even). With `rollout.fp8_activations`
  the layers' inputs get the same block format, with the float32 scale per token
  (dynamic) where engines use a calibrated one per tensor: a sample then does not depend
  on its batch, and both decode paths quantise alike.

- `mxfp8`: a simulated MXFP8 engine (W8A8 microscaling, verl #7519's rollout: the linear
  layers inside the decoder in MXFP8, embeddings, norms, attention and the LM head in
  bf16), on the same layers as FP8. Each weight row is cut into blocks of 32 values
  along the input dimension (the GEMM's reduction dimension), each block sharing one
  power-of-two (E8M0) scale; the values are e4m3 (round to nearest even). The scale is
  2^ceil(log2(amax / 448)) (Transformer Engine's quantiser, which verl's MXFP8 sync uses:
  the block's largest value never saturates); the OCP MX v1.0 specification's
  2^(floor(log2 amax) - 8) can put it up to 2x higher, where it saturates at 448. With
  `rollout.fp8_activations` the layers' inputs get the same blocks per token.

`rollout.bf16_boundary` keeps the first and the last decoder layers in bfloat16 under
either format (weights and inputs), as NVFP4 training recipes do.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from lmpo.errors import ConfigError

QUANTISED = ("fp8_e4m3", "fp4_e2m1", "mxfp8")  # the dtypes that quantise the decoder's linears
E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
TINY = 1e-12  # the smallest amax a scale divides by (an all-zero row stays zero)
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
E4M3_TINY = float(torch.finfo(E4M3).tiny)  # 2**-6: the smallest block scale (torchao's)


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


def round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """`v` (float32) saturated at +-6 and rounded to the nearest float4 e2m1 value, ties to
    the even mantissa: the grid's spacing is 0.5 below 2, 1 below 4 and 2 up to 6."""
    a = v.abs().clamp(max=E2M1_MAX)
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.copysign(torch.round(a / step) * step, v)


def _blocks(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(`x` in float32 zero-padded along its last dimension to a multiple of `size`, the
    same as blocks [..., n, size])."""
    xf = x.float()
    pad = -xf.shape[-1] % size
    if pad:
        xf = torch.nn.functional.pad(xf, (0, pad))
    return xf, xf.reshape(*xf.shape[:-1], -1, size)


def fake_quant_nvfp4(x: torch.Tensor, per_row: bool = False) -> torch.Tensor:
    """`x` quantised to NVFP4 along its last dimension and dequantised, in `x`'s dtype:
    blocks of 16 (the last one zero-padded), e4m3 block scales under one float32 scale
    for the whole tensor, or for each row (`per_row`, an activation's token)."""
    xf, blocks = _blocks(x, NVFP4_BLOCK)
    amax = (xf.abs().amax(dim=-1, keepdim=True).unsqueeze(-1) if per_row
            else xf.abs().amax())
    outer = amax.clamp(min=TINY) / (E4M3_MAX * E2M1_MAX)
    inner = (blocks.abs().amax(dim=-1, keepdim=True) / E2M1_MAX / outer)
    scale = inner.clamp(min=E4M3_TINY, max=E4M3_MAX).to(E4M3).float() * outer
    out = (round_e2m1(blocks / scale) * scale).reshape(xf.shape)
    return out[..., :x.shape[-1]].to(x.dtype)


MX_BLOCK = 32
E8M0_MIN, E8M0_MAX = -127, 127  # the power-of-two exponents an E8M0 scale holds


def fake_quant_mxfp8(x: torch.Tensor) -> torch.Tensor:
    """`x` quantised to MXFP8 along its last dimension and dequantised, in `x`'s dtype:
    blocks of 32 (the last one zero-padded), each with the scale 2^ceil(log2(amax / 448))
    (E8M0, clamped to 2^-127..2^127; an all-zero block keeps the smallest) and its
    values in e4m3."""
    xf, blocks = _blocks(x, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    exponent = torch.ceil(torch.log2(amax / E4M3_MAX)).nan_to_num(
        nan=E8M0_MIN, neginf=E8M0_MIN).clamp(E8M0_MIN, E8M0_MAX)
    scale = torch.exp2(exponent)
    out = ((blocks / scale).to(E4M3).float() * scale).reshape(xf.shape)
    return out[..., :x.shape[-1]].to(x.dtype)


def _nvfp4_rows(x: torch.Tensor) -> torch.Tensor:
    return fake_quant_nvfp4(x, per_row=True)


# dtype -> (the weight's quantise-dequantise, the input's)
QUANTISERS = {"fp8_e4m3": (lambda w: fake_quant_e4m3(w, dim=1), fake_quant_e4m3),
              "fp4_e2m1": (fake_quant_nvfp4, _nvfp4_rows),
              "mxfp8": (fake_quant_mxfp8, fake_quant_mxfp8)}


def quantised_layers(model: nn.Module, bf16_boundary: bool = False) -> list[int]:
    """The indices of the decoder layers a low-bit engine quantises: all of them, or with
    `bf16_boundary` all but the first and the last (NVFP4 recipes keep those in bf16)."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None:
        raise ValueError("rollout.dtype fp8_e4m3/fp4_e2m1/mxfp8 need a decoder with .model.layers "
                         f"(a Llama-style model); got {type(model).__name__}")
    if not bf16_boundary:
        return list(range(len(layers)))
    if len(layers) < 3:
        raise ConfigError(f"rollout.bf16_boundary keeps the first and last decoder layers in "
                         f"bf16: it needs >= 3 layers, the model has {len(layers)}")
    return list(range(1, len(layers) - 1))


def quantised_linears(model: nn.Module, bf16_boundary: bool = False) -> list[nn.Linear]:
    """The linear layers a low-bit engine quantises: those inside the quantised decoder
    layers (the LM head and the embeddings stay in the compute dtype)."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    return [m for i in quantised_layers(model, bf16_boundary) for m in layers[i].modules()
            if isinstance(m, nn.Linear)]


def _input_hook(quant):
    def hook(module, args):
        return (quant(args[0]), *args[1:])
    return hook


class RolloutModel:
    """The model `sample` runs (see the module docstring). `__call__(weights=None)`
    refreshes the copy from `weights` (a state dict of an earlier policy version) or from
    the live policy, and returns the model to sample with."""

    def __init__(self, policy, dtype: str, *, fp8_activations: bool = True,
                 staleness: int = 0, bf16_boundary: bool = False):
        self.policy, self.name = policy, dtype
        self.quantised = dtype in QUANTISED  # a simulated low-bit engine (FP8 or FP4)
        self.weight_quant, act_quant = QUANTISERS.get(dtype, (None, None))
        self.dtype = torch.bfloat16 if self.quantised else getattr(torch, dtype)
        self.copy = None
        if self.dtype != torch.float32 or staleness > 0:
            self.copy = copy.deepcopy(policy).to(self.dtype).eval().requires_grad_(False)
            for name, buf in policy.named_buffers():
                self.copy.get_buffer(name).data = buf.data.clone()
        self.linears = quantised_linears(self.copy, bf16_boundary) if self.quantised else []
        names = {id(p): n for n, p in (self.copy.named_parameters() if self.quantised else ())}
        self.weight_names = [names[id(m.weight)] for m in self.linears]
        live = dict(policy.named_parameters())
        self.sources = [live[n] for n in self.weight_names]  # the float32 weights
        self.act_quant = self.quantised and fp8_activations
        if self.act_quant:  # the generic path's linears; the fast decoder reads act_quant
            for m in self.linears:
                m.register_forward_pre_hook(_input_hook(act_quant))
            self.copy.lmpo_act_quant = act_quant
            self.copy.lmpo_quant_layers = quantised_layers(self.copy, bf16_boundary)

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
            m.weight.copy_(self.weight_quant(live if weights is None else weights[name]))
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
