"""A lean single-token decode step for `LlamaForCausalLM`.

Hugging Face's forward pays, on every generated token, for a 4-D mask, rotary
tables per layer, a `torch.cat` of the whole KV cache per layer and a few
dozen module calls; at the sizes lmpo trains on a CPU those costs rival the
matrix products. This decoder reads the model's own weights (q/k/v and
gate/up fused into one matrix each), keeps K/V in buffers preallocated for
prompt + max_new_tokens, and computes exactly Llama's math. The prompt itself
still goes through the model's own forward. Anything that is not a plain Llama
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
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class FastLlamaDecoder:
    def __init__(self, model, hf_cache, prompt_mask: torch.Tensor, capacity: int):
        c = model.config
        self.h, self.kv = c.num_attention_heads, c.num_key_value_heads
        self.d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.scale = c.rms_norm_eps, self.d ** -0.5
        rope = model.model.rotary_emb
        self.inv_freq, self.rope_scale = rope.inv_freq.float(), rope.attention_scaling
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = []
        for i, layer in enumerate(model.model.layers):
            a, m = layer.self_attn, layer.mlp
            keys, values = hf_cache.layers[i].keys, hf_cache.layers[i].values
            b, _, p, _ = keys.shape
            k_buf = keys.new_empty((b, self.kv, capacity, self.d))
            v_buf = values.new_empty((b, self.kv, capacity, self.d))
            k_buf[:, :, :p], v_buf[:, :, :p] = keys, values
            self.layers.append({
                "qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                "o": a.o_proj.weight, "down": m.down_proj.weight,
                "gate_up": torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "k": k_buf, "v": v_buf,
            })
        self.length = prompt_mask.shape[1]
        dtype = self.embed.dtype
        self.bias = torch.zeros((prompt_mask.shape[0], capacity), dtype=dtype,
                                device=prompt_mask.device)
        self.bias[:, :self.length] = torch.where(prompt_mask.bool(), 0.0, float("-inf"))

    def select(self, keep: torch.Tensor) -> None:
        for layer in self.layers:
            layer["k"], layer["v"] = layer["k"][keep], layer["v"][keep]
        self.bias = self.bias[keep]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, V] for one new token per row at `positions` [B]."""
        b, t = tokens.shape[0], self.length
        x = self.embed[tokens]
        freqs = positions[:, None].float() * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(x.dtype)[:, None]  # [B, 1, D]
        sin = (emb.sin() * self.rope_scale).to(x.dtype)[:, None]
        bias = self.bias[:, None, None, :t + 1]  # [B, 1, 1, t+1]
        groups = self.h // self.kv
        nq, nk = self.h * self.d, self.kv * self.d
        for layer in self.layers:
            qkv = F.linear(_rms(x, layer["ln1"], self.eps), layer["qkv"])
            q = _rotate(qkv[:, :nq].view(b, self.h, self.d), cos, sin)
            k = _rotate(qkv[:, nq:nq + nk].view(b, self.kv, self.d), cos, sin)
            layer["k"][:, :, t] = k
            layer["v"][:, :, t] = qkv[:, nq + nk:].view(b, self.kv, self.d)
            keys, values = layer["k"][:, :, :t + 1], layer["v"][:, :, :t + 1]
            q = q.view(b, self.kv, groups, self.d)
            scores = torch.matmul(q, keys.transpose(-1, -2)) * self.scale + bias
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            attn = torch.matmul(probs, values).reshape(b, nq)
            x = x + F.linear(attn, layer["o"])
            gate, up = F.linear(_rms(x, layer["ln2"], self.eps), layer["gate_up"]).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer["down"])
        self.length += 1
        return F.linear(_rms(x, self.final_norm, self.eps), self.lm_head)
