"""Tiny offline policies, the character tokenizer, the critic and HF-folder I/O."""

from lmpo.models.llama import (
    SIZES,
    build_policy,
    llama_config,
    load_policy,
    num_parameters,
    save_policy,
)
from lmpo.models.prompting import PromptEncoder, stop_token_ids
from lmpo.models.tokenizer import build_tokenizer
from lmpo.models.value import ValueModel

__all__ = [
    "SIZES", "PromptEncoder", "ValueModel", "build_policy", "build_tokenizer", "llama_config",
    "load_policy", "num_parameters", "save_policy", "stop_token_ids",
]
