"""LoRA adapters (via `peft`) and the reference policy they give for free.

With `lora.r > 0` the policy is the base model plus trainable low-rank adapters on
`lora.target_modules`; the base weights stay frozen. The reference policy (KL, `kl/ref`)
is then the same model with its adapters switched off, not a second copy of the
weights. A finished run saves the adapters merged into the base weights, so its
`policy/` folder is a plain model folder again.
"""

from __future__ import annotations

import copy

from lmpo.errors import ConfigError


def apply_lora(model, *, r: int, alpha: float, dropout: float, target_modules: list[str]):
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("lora needs the `peft` package: pip install -e '.[real]'") from None
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [m for m in target_modules if m not in names]
    if missing:
        raise ConfigError(f"lora.target_modules {missing} are not modules of this model; "
                          f"linear layers here include: "
                          f"{', '.join(sorted(n for n in names if n.endswith('proj')))}")
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=list(target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def is_adapted(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


class AdaptersOff:
    """The reference policy of a LoRA run: the policy's forward with its adapters disabled.

    Not a module (so `.eval()` or `.requires_grad_()` on it cannot reach the policy)."""

    def __init__(self, peft_model):
        self.model = peft_model

    def forward(self, **kw):
        with self.model.disable_adapter():
            return self.model(**kw)

    __call__ = forward

    def parameters(self):
        return self.model.parameters()

    def get_base_model(self):
        return self.model.get_base_model()

    @property
    def config(self):
        return self.model.config


def merged_copy(model):
    """A plain model with the adapters folded into the weights (the policy is untouched)."""
    return copy.deepcopy(model).merge_and_unload() if is_adapted(model) else model
