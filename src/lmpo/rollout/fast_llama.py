"""A lean single-token decode step for `LlamaForCausalLM`.

Hugging Face's forward pays, on every generated token, for a 4-D mask, rotary
tables per layer, a `torch.cat` of the whole KV cache per layer and a few
dozen module calls; at the sizes lmpo trains on a CPU those costs rival the
matrix products. This decoder reads the model's own weights (q/k/v and
gate/up fused into one matrix each), keeps K/V in buffers preallocated for
prompt + max_new_tokens, and computes exactly Llama's math, prompt pass
included. Anything that is not a plain Llama
(biases, non-default RoPE, other activations) falls back to the generic path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supports(model) -> bool:
    from transformers import LlamaForCausalLM

    if type(model) is not LlamaForCausalLM:
        return False
    c = model.config
    rope = getattr(model.model, "rotary_emb", None)
    return (not getattr(c, "attention_bias", False) and not getattr(c, "mlp_bias", False)
            and c.hidden_act == "silu" and getattr(c, "pretraining_tp", 1) in (None, 1)
            and rope is not None and getattr(rope, "rope_type", "default") == "default")


def _rms(x, weight, eps):
    """Llama's RMSNorm (normalised in float32, weighted in the input's dtype), one fused op."""
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class FastLlamaDecoder:
    """Prompt pass and single-token steps, Llama math, K/V in preallocated buffers."""

    def __init__(self, model, prompt_mask: torch.Tensor, capacity: int):
        c = model.config
        self.h, self.kv = c.num_attention_heads, c.num_key_value_heads
        self.d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.scale = c.rms_norm_eps, self.d ** -0.5
        rope = model.model.rotary_emb
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm.weight
        self.lm_head = model.lm_head.weight
        # a simulated FP8 rollout quantises the input of every decoder linear per token
        # (lmpo.rollout.precision); the LM head's input stays as it is
        self.quant = getattr(model, "lmpo_act_quant", None) or _same
        quant_layers = set(getattr(model, "lmpo_quant_layers", range(len(model.model.layers))))
        b, dtype = prompt_mask.shape[0], self.embed.dtype
        # cos/sin of every position this batch can reach, computed once (float32, as HF)
        pos = torch.arange(capacity, device=prompt_mask.device, dtype=torch.float32)
        freqs = pos[:, None] * rope.inv_freq.float().to(pos.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = (emb.cos() * rope.attention_scaling).to(dtype)  # [capacity, D]
        self.sin = (emb.sin() * rope.attention_scaling).to(dtype)
        self.layers = [{
            "qkv": torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                              layer.self_attn.v_proj.weight]),
            "o": layer.self_attn.o_proj.weight, "down": layer.mlp.down_proj.weight,
            "gate_up": torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
            "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
            "k": self.embed.new_empty((b, self.kv, capacity, self.d)),
            "v": self.embed.new_empty((b, self.kv, capacity, self.d)),
            "quant": self.quant if i in quant_layers else _same,
        } for i, layer in enumerate(model.model.layers)]
        self.length = 0
        # additive key mask: 0 for real tokens, the dtype's minimum for left padding (finite,
        # so a padding query that sees only padding stays finite, as in HF's eager path)
        self.neg = torch.finfo(dtype).min
        self.bias = torch.zeros((b, capacity), dtype=dtype, device=prompt_mask.device)
        self.bias[:, :prompt_mask.shape[1]].masked_fill_(~prompt_mask.bool(), self.neg)

    def select(self, keep: torch.Tensor) -> None:
        for layer in self.layers:
            layer["k"], layer["v"] = layer["k"][keep], layer["v"][keep]
        self.bias = self.bias[keep]

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run the prompts [B, P] (positions [B, P]); logits [B, V] of the last position."""
        return self._forward(ids, positions)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, V] for one new token per row at `positions` [B]."""
        return self._forward(tokens[:, None], positions[:, None])

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        t, h, kv = self.length, self.h, self.kv
        g = h // kv
        x = self.embed[tokens]  # [B, n, H]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, n, D]
        bias = self.bias[:, None, None, None, :t + n]  # [B, 1, 1, 1, t+n]
        if n > 1:  # causal within the new tokens
            future = torch.ones(n, t + n, dtype=torch.bool, device=x.device).triu(t + 1)
            bias = bias.masked_fill(future, self.neg)  # [B, 1, 1, n, t+n]
        for layer in self.layers:
            q8 = layer["quant"]
            qkv = F.linear(q8(_rms(x, layer["ln1"], self.eps)), layer["qkv"])
            heads = qkv.view(b, n, h + 2 * kv, self.d).transpose(1, 2)  # [B, h+2kv, n, D]
            qk = _rotate(heads[:, :h + kv], cos, sin)  # queries and keys rotated together
            layer["k"][:, :, t:t + n] = qk[:, h:]
            layer["v"][:, :, t:t + n] = heads[:, h + kv:]
            keys, values = layer["k"][:, :, :t + n], layer["v"][:, :, :t + n]
            q = qk[:, :h].reshape(b, kv, g * n, self.d)  # query heads grouped by K/V head
            scores = torch.matmul(q, keys.transpose(-1, -2)) * self.scale
            scores = scores.view(b, kv, g, n, t + n) + bias
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            attn = torch.matmul(probs.view(b, kv, g * n, t + n), values)  # [B, kv, g*n, D]
            attn = attn.view(b, h, n, self.d).transpose(1, 2).reshape(b, n, h * self.d)
            x = x + F.linear(q8(attn), layer["o"])
            gate_up = F.linear(q8(_rms(x, layer["ln2"], self.eps)), layer["gate_up"])
            gate, up = gate_up.chunk(2, -1)
            x = x + F.linear(q8(F.silu(gate) * up), layer["down"])
        self.length += n
        return F.linear(_rms(x[:, -1], self.final_norm, self.eps), self.lm_head)


def _same(x: torch.Tensor) -> torch.Tensor:
    return x
