"""Tiny Llama policies built from a config (no downloads), and HF-folder save/load."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lmpo.errors import UnknownName
from lmpo.registry import nearest

SIZES: dict[str, dict] = {
    # ~0.46M parameters with the 88-token character vocabulary
    "nano": {"hidden_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
             "intermediate_size": 256},
    # ~1.5M
    "micro": {"hidden_size": 160, "num_hidden_layers": 5, "num_attention_heads": 5,
              "intermediate_size": 448},
    # ~4.9M
    "small": {"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8,
              "intermediate_size": 704},
}


def llama_config(size: str, tokenizer, max_positions: int = 256) -> LlamaConfig:
    if size not in SIZES:
        raise UnknownName(f"unknown model size {size!r}{nearest(size, list(SIZES))}; "
                       f"valid sizes: {', '.join(SIZES)}")
    return LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True, rms_norm_eps=1e-6,
        attention_dropout=0.0, **SIZES[size],
    )


def build_policy(size: str, tokenizer, *, seed: int = 0, max_positions: int = 256):
    """A freshly initialised tiny `LlamaForCausalLM` (float32, eager attention)."""
    torch.manual_seed(seed)
    config = llama_config(size, tokenizer, max_positions)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).float()


def num_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def save_policy(model, tokenizer, out_dir: str | Path) -> Path:
    """Write a standard Hugging Face folder (config.json, model.safetensors, tokenizer)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def load_policy(model_dir: str | Path, *, dtype=torch.float32):
    """Load any local causal-LM folder (tiny lmpo policy or a real HF model)."""
    path = Path(model_dir)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:  # many chat models ship none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    return model, tokenizer
