"""Which optional extra (pyproject.toml) brings a module, by import name: the package alone
is torch and numpy, so a command that needs a missing module says which extra to install."""

from __future__ import annotations

EXTRA_OF = {m: "train" for m in ("transformers", "tokenizers", "safetensors", "reasoning_gym",
                                 "scipy", "yaml", "rich", "matplotlib", "tensorboard",
                                 "pyarrow", "datasets")}
EXTRA_OF |= {m: "real" for m in ("gguf", "accelerate", "peft", "math_verify")}
EXTRA_OF |= {"verl": "verl", "trl": "trl", "wandb": "wandb"}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line reason `exc` stopped a command, or None when no extra brings the module."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(module)
    if extra is None:
        return None
    return (f"{module} is not installed: this command needs the {extra} extra "
            f"(pip install 'lmpo[{extra}]')")
