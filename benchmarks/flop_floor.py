"""An lmpo RL step against its FLOP floor, in float32 and bfloat16, in one process.

The step: lmpo's sampler (`lmpo.rollout.sample`, through the rollout copy of
`rollout.dtype`) draws G responses to each prompt, every row running to the token limit
(an end-of-sequence id that is never drawn), then lmpo's update
(`lmpo.trainer.update.update` under `optim.dtype`: shared prompt pass, forward/backward of
the responses, AdamW). The trainer's bookkeeping (scoring, advantages, logs) is left out:
`step_overhead.py` measures it at ~1.07x. With a low-precision rollout the trainer also
runs a no-grad pass (in the update's precision) for the mismatch diagnostic; it is timed
and reported separately (`recompute_s`), outside both the step and the floor.

The floor: the step's matrix products, counted analytically (2 x rows x in x out per
linear layer, the causal attention's QK^T and AV, the LM head only where logits are
needed), each divided by the throughput this process measures for a product of that
shape and row count in the same dtype. Phases: the prompt pass (once per distinct
prompt), the decode (B rows per token, attention over the growing cache), the update's
forward (prompt pass + responses) and backward (2x the forward's products). Throughput of
attention products is taken as that of the d x d linear at the same rows. Elementwise
work, the sampler's draw and the optimiser are not in the floor: they are what the ratio
shows.

    python benchmarks/flop_floor.py [--sizes nano,135m,base_real]
                                    [--dtypes float32,bfloat16] [--steps 3] [--smoke]
                                    [--profile]

`--profile` runs one more step under torch's profiler and adds its operators' own time by
kind (`profile_s`: products, attention, casts, fills, optimiser, vocabulary-wide
reductions, the rest): where the time above the floor goes.

`135m` is a randomly initialised model with SmolLM2-135M's configuration (the FLOPs of
the real one; its weights do not change the work at a fixed length). `base_real` is the
real testbed's own step (`real_step.py`: the trainer's step on SmolLM2-135M-Instruct at
the lengths it samples, phase by phase, before and after the changes it measures).
"""

from __future__ import annotations

import argparse
import statistics
from types import SimpleNamespace

import torch
from common import DTYPES, Floor, clock, write_result
from transformers import LlamaConfig, LlamaForCausalLM

from lmpo.config import load_config
from lmpo.losses import get_loss
from lmpo.models.forward import forward_logprobs
from lmpo.rollout import RolloutModel, sample
from lmpo.trainer.batch import TrainBatch
from lmpo.trainer.objective import build_objective
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.update import autocast, update

SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                "vocab_size": 49152, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 8192}
NANO = {"hidden_size": 96, "intermediate_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 24,
        "vocab_size": 88, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 256}
# (prompts, group size, prompt tokens, new tokens): the real testbed's batch and the nano
# testbed's (16 prompts x G = 4, ~12-token prompts)
SHAPES = {"135m": (SMOLLM2_135M, 8, 8, 48, 48), "nano": (NANO, 16, 4, 12, 16)}
SMOKE = {"135m": (SMOLLM2_135M | {"hidden_size": 64, "intermediate_size": 128,
                                  "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "head_dim": 16,
                                  "vocab_size": 512}, 2, 2, 6, 4),
         "nano": (NANO, 2, 2, 6, 4)}
def build(config: dict, seed: int = 0, device: str = "cpu"):
    torch.manual_seed(seed)
    cfg = LlamaConfig(**config, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).float().to(device)


def phases(fl: Floor, measure, prompts: int, group: int, p: int, t: int) -> dict[str, float]:
    """`measure` (fl.layers or fl.flops) summed per phase of the step."""
    b = prompts * group
    prompt = measure(prompts * p, (p + 1) / 2, prompts)
    fwd = prompt + measure(b * t, p + (t + 1) / 2, b * t)
    return {"prompt": prompt, "decode": sum(measure(b, p + i + 1, b) for i in range(t - 1)),
            "update_forward": fwd, "update_backward": 2 * fwd}


def lmpo_step(policy, cfg, state, loss_fn, prompts: list[list[int]], t: int, gen):
    """(sampling s, update s, recompute s) of one step: the rollout copy refreshed and
    sampled, then lmpo's update; with a low-precision rollout, the trainer's
    recompute timed on its own."""
    device = next(policy.parameters()).device
    t0 = clock(device)
    model = state.rollout_model()
    with torch.no_grad():
        r = sample(model, prompts, max_new_tokens=t, eos_token_id=-1, pad_token_id=0,
                   generator=gen)
    t1 = clock(device)
    ids, mask = (x.to(device) for x in r.full_sequences())
    resp_ids, resp_mask = r.response_ids.to(device), r.response_mask.float().to(device)
    recompute = 0.0
    if cfg.rollout.dtype != "float32":  # as the trainer: in the update's precision
        with torch.no_grad(), autocast(cfg, device):
            forward_logprobs(policy, ids, mask, resp_ids, with_entropy=True)
        recompute = clock(device) - t1
    t2 = clock(device)
    adv = torch.randn(len(prompts), 1, generator=gen).to(device).expand_as(resp_mask)
    batch = TrainBatch(ids=ids, mask=mask, resp_ids=resp_ids, resp_mask=resp_mask,
                       old_logp=r.logp.to(device) * resp_mask, adv=adv * resp_mask,
                       keep=torch.arange(len(prompts)))
    update(state, batch, build_objective(cfg, loss_fn, "token-mean"), cfg, lr=1e-6, step=1)
    assert int(resp_mask.sum()) == len(prompts) * t  # every row ran to the limit
    return t1 - t0, clock(device) - t2, recompute


KINDS = (  # (kind, operator names, or fragments of names after "~"); the first match wins
    ("attention", ("~scaled_dot_product",)),
    ("products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
    ("casts", ("aten::copy_", "aten::_to_copy")),
    ("fills", ("aten::fill_", "aten::zero_")),
    ("optimizer", ("~adam",)),
    ("vocabulary", ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::logsumexp",
                    "aten::exp", "aten::exp_", "aten::sub", "aten::max", "aten::amax",
                    "aten::gather", "aten::cumsum_", "aten::searchsorted")),
)


def _kind(name: str) -> str:
    for kind, names in KINDS:
        if any(name == n or (n.startswith("~") and n[1:] in name.lower()) for n in names):
            return kind
    return "other"


def operator_kinds(prof) -> dict[str, float]:
    """Seconds of the operators' own (self) CPU time by kind: the products, attention,
    dtype casts, fills, the optimiser, the vocabulary-wide reductions (log-softmax, exp,
    max, the draw's cumulative sum) and everything else (element-wise work, indexing,
    autograd's bookkeeping)."""
    out = dict.fromkeys([k for k, _ in KINDS] + ["other"], 0.0)
    for e in prof.key_averages():
        out[_kind(e.key)] += e.self_cpu_time_total / 1e6
    return out


def measure(size: str, dtype: str, steps: int, smoke: bool, repeats: int,
            device: str = "cpu", profile: bool = False) -> dict:
    c, n_prompts, group, p, t = (SMOKE if smoke else SHAPES)[size]
    policy = build(c, device=device)
    cfg = load_config(TrainConfig, None, [
        f"optim.dtype={dtype}", f"rollout.dtype={dtype}",
        f"optim.micro_batch_size={n_prompts * group}", "optim.epochs=1", "optim.minibatches=1",
        f"rollout.group_size={group}",
        f"rollout.batch_size={n_prompts * group}", f"rollout.max_new_tokens={t}"])
    state = SimpleNamespace(
        policy=policy, critic=None, opt=torch.optim.AdamW(policy.parameters(), lr=1e-6),
        rngs={"shuffle": torch.Generator().manual_seed(0)},
        counters=SimpleNamespace(nonfinite_streak=0, skipped=0), schedules=None,
        rollout_model=RolloutModel(policy, dtype))
    gen = torch.Generator().manual_seed(0)
    vocab = c["vocab_size"]
    loss_fn = get_loss("ppo_clip")
    times = []
    for _ in range(steps + 1):  # the first step warms up (dropped below)
        drawn = [torch.randint(3, vocab, (p,), generator=gen).tolist() for _ in range(n_prompts)]
        prompts = [x for x in drawn for _ in range(group)]
        times.append(lmpo_step(policy, cfg, state, loss_fn, prompts, t, gen))
    sampling, upd, recompute = (statistics.median(x) for x in zip(*times[1:], strict=True))
    where = None
    if profile:  # one more step, its operators' own time by kind
        drawn = [torch.randint(3, vocab, (p,), generator=gen).tolist() for _ in range(n_prompts)]
        prompts = [x for x in drawn for _ in range(group)]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            lmpo_step(policy, cfg, state, loss_fn, prompts, t, gen)
        where = operator_kinds(prof)
    fl = Floor(c, DTYPES[dtype], repeats, device)
    secs = phases(fl, fl.layers, n_prompts, group, p, t)
    flops = phases(fl, fl.flops, n_prompts, group, p, t)
    floor_sampling = secs["prompt"] + secs["decode"]
    floor_update = secs["update_forward"] + secs["update_backward"]
    step, floor = sampling + upd, floor_sampling + floor_update
    row = {"size": size, "dtype": dtype, "device": str(device), "prompts": n_prompts,
           "group": group,
           "prompt_tokens": p, "new_tokens": t,
           "parameters": sum(x.numel() for x in policy.parameters()),
           "tflop": {k: v / 1e12 for k, v in flops.items()} | {"step": sum(flops.values()) / 1e12},
           "gflops_measured": sum(flops.values()) / floor / 1e9,
           "step_s": step, "sampling_s": sampling, "update_s": upd, "recompute_s": recompute,
           "floor_s": floor, "floor_sampling_s": floor_sampling, "floor_update_s": floor_update,
           "ratio": step / floor, "ratio_sampling": sampling / floor_sampling,
           "ratio_update": upd / floor_update}
    if where is not None:
        row["profile_s"] = where
    print(f"{size:5s} {dtype:9s} step {step:7.3f} s  floor {floor:7.3f} s  "
          f"ratio {row['ratio']:.2f}x  (sampling {row['ratio_sampling']:.2f}x, "
          f"update {row['ratio_update']:.2f}x; "
          f"{row['tflop']['step']:.3f} TFLOP at {row['gflops_measured']:.0f} GFLOP/s;"
          f" recompute {recompute:.3f} s)", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="nano,135m")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5, help="timings per product shape")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="the smallest sizes, for the tests")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more step: its operators' own time by kind")
    ap.add_argument("--out", default="flop_floor")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sizes, dtypes = a.sizes.split(","), a.dtypes.split(",")
    rows = [measure(size, dtype, a.steps, a.smoke, a.repeats, profile=a.profile)
            for size in sizes if size != "base_real" for dtype in dtypes]
    if "base_real" in sizes:  # the real testbed's own step, phase by phase (real_step.py)
        from real_step import base_real_rows

        rows += base_real_rows(dtypes, a.steps, a.repeats)
    write_result(a.out, {"smoke": a.smoke, "steps": a.steps, "rows": rows}, threads=a.threads)


if __name__ == "__main__":
    main()
