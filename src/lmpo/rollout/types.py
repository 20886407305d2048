"""The `Rollout` record produced by the sampler."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

STOP_REASONS = ("eos", "length", "early_stop")


@dataclass
class Rollout:
    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P]
    response_ids: torch.Tensor  # [B, T] right-padded with pad_token_id
    response_mask: torch.Tensor  # [B, T] float, 1 on generated tokens (EOS included)
    logp: torch.Tensor  # [B, T] behaviour log-probs at the sampling temperature
    regret: torch.Tensor  # [B, T] max_a logp - logp(chosen)
    values: torch.Tensor | None  # [B, T] V(s_t) before each token, if a value_fn was given
    stop_reason: list[str]
    num_generated: int  # tokens generated in this call, all rows
    lengths: torch.Tensor = field(default=None)  # [B] response lengths
    entropy: torch.Tensor | None = None  # [B, T] the sampling distribution's entropy per token

    @property
    def batch_size(self) -> int:
        return self.response_ids.shape[0]

    def texts(self, tokenizer) -> list[str]:
        """Each row's response decoded, special tokens (EOS) dropped."""
        return [tokenizer.decode(self.response_ids[i, :int(n)], skip_special_tokens=True)
                for i, n in enumerate(self.lengths)]

    def select(self, rows: torch.Tensor) -> Rollout:
        """The rows `rows` [K] (long indices) of this rollout; `num_generated` is kept (the
        tokens were generated whether or not the rows are used)."""
        pick = rows.tolist()
        return Rollout(
            prompt_ids=self.prompt_ids[rows], prompt_mask=self.prompt_mask[rows],
            response_ids=self.response_ids[rows], response_mask=self.response_mask[rows],
            logp=self.logp[rows], regret=self.regret[rows],
            values=None if self.values is None else self.values[rows],
            stop_reason=[self.stop_reason[i] for i in pick], num_generated=self.num_generated,
            lengths=self.lengths[rows],
            entropy=None if self.entropy is None else self.entropy[rows])

    def full_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids [B, P+T], attention_mask [B, P+T]) for a teacher-forced pass."""
        ids = torch.cat([self.prompt_ids, self.response_ids], dim=1)
        mask = torch.cat([self.prompt_mask, self.response_mask.to(self.prompt_mask.dtype)], dim=1)
        return ids, mask
