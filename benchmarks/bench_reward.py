"""The reward both sides of `vs_trl.py` call: lmpo's `last_number`, in TRL's batch shape
(`reward.fn: last_number` builds the same function; here it is one object for both)."""

from lmpo.rewards import REWARD_FNS

reward = REWARD_FNS["last_number"]()
