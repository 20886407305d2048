"""Tiny offline policies, the character tokenizer, the critic, HF-folder I/O and every
forward pass over the policy and the critic (`lmpo.models.forward`).

The names below load their module on first use, so that `lmpo.models.forward` (which the
sampler, and with it `lmpo.rollout`, imports) needs torch alone: the losses, estimators
and corrections import with torch and numpy only (tests/minimal_env.py).
"""

import importlib

_EXPORTS = {
    "SIZES": "llama", "build_policy": "llama", "llama_config": "llama",
    "load_policy": "llama", "num_parameters": "llama", "save_policy": "llama",
    "PromptEncoder": "prompting", "stop_token_ids": "prompting",
    "build_tokenizer": "tokenizer", "ValueModel": "value",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
