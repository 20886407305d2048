"""Where a command computes: `device: auto` (every command's default) is CUDA when torch
sees a CUDA device, else the CPU. On a machine without one, `auto` and `cpu` are the same
run: the same device, the same rows (tested), and a run saved under one resumes under the
other. Precision and threads do not follow the device: `optim.dtype`, `rollout.dtype` and
`threads` keep their defaults on a GPU, so that a config computes the same numbers wherever
its device allows (docs/running.md says what to set on a GPU)."""

from __future__ import annotations

from lmpo.choices import DEVICES
from lmpo.errors import ConfigError


def resolve_device(name: str):
    """The torch.device `name` (auto | cpu | cuda) stands for here."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: {name}, but torch sees no CUDA device (use auto or cpu)")
    return torch.device(name)


def check_device(name: str) -> None:
    """Refuse a device name other than auto, cpu or cuda (before torch is imported)."""
    if name not in DEVICES:
        raise ConfigError(f"device {name!r}: expected one of {', '.join(DEVICES)}")


def resolved_name(name: str) -> str:
    """`name` as it runs here (auto -> cpu or cuda): what a saved run is compared by."""
    return str(resolve_device(name)) if name == "auto" else name
