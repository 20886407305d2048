"""Sampled evaluations computed once: the completions of a held-out set, kept in the user
cache (`$LMPO_HOME/evaluations`) and reused where every input is the same.

Every run of an experiment evaluates its starting policy before its first step, on the
same held-out set, with the evaluation's own fixed sampling stream: the same work, with
the same result, in every arm and seed (64 s of an 11.6-minute `base_real` run). An
entry is keyed by everything that decides the sampled tokens (`completion_key`): the
policy's parameters and buffers (every byte), the encoded prompts in order, the
sampling settings and the stream's seed, the source of the sampler and everything it
imports (`lmpo.cache.source_digest`), the versions of Python, torch and transformers, the
device, the number of torch threads and the CPU (a product's rounding may differ with
either). A difference in any of them is another entry, never a stale one served. The
entry holds the response token ids; the texts are decoded and scored by the caller, as
for fresh completions, so the reward function is not part of the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from lmpo.atomic import write_text
from lmpo.cache import lmpo_home, source_digest, versions
from lmpo.process_env import cpu_model

FOLDER = "evaluations"
ENV = "LMPO_EVAL_CACHE"  # "off": every evaluation samples afresh (a cold-start timing)


def enabled() -> bool:
    return os.environ.get(ENV, "on").lower() not in ("off", "0", "false", "no")


def weights_digest(model) -> str:
    """SHA-256 over every parameter and buffer of `model`: name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    for name, t in sorted(tensors, key=lambda x: x[0]):
        x = t.detach().cpu().contiguous()
        digest.update(f"{name}\0{x.dtype}\0{tuple(x.shape)}\0".encode())
        digest.update(x.reshape(-1).view(torch.uint8).numpy())  # the bytes, not a copy
    return digest.hexdigest()


def completion_key(model, prompts: list[list[int]], settings: dict) -> str:
    """The entry's key: a SHA-256 over everything that decides the sampled tokens."""
    device = next(model.parameters()).device
    inputs = {"weights": weights_digest(model), "prompts": prompts, "settings": settings,
              "source": source_digest("lmpo.evaluate"), "versions": versions(),
              "device": str(device), "threads": torch.get_num_threads(), "cpu": cpu_model()}
    if device.type == "cuda":
        inputs["gpu"] = torch.cuda.get_device_name(device)
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _path(key: str) -> Path:
    return lmpo_home() / FOLDER / f"{key}.json"


def load(key: str, n: int) -> list[list[int]] | None:
    """The cached response ids of `n` completions, or None (absent, unreadable, or not the
    entry it should be: such an entry is ignored and rewritten)."""
    try:
        entry = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    ids = entry.get("responses")
    if not isinstance(ids, list) or len(ids) != n:
        return None
    return ids


def store(key: str, responses: list[list[int]]) -> None:
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"key": key, "responses": responses}) + "\n")
    except OSError as exc:  # a read-only cache costs the next run the evaluation only
        print(f"lmpo: could not keep the evaluation in {path.parent} ({exc}); the next run "
              "evaluates afresh", file=sys.stderr, flush=True)
