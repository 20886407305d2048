"""The named values a train config may take, each listed once: the config's field domains
(`lmpo.trainer.train_config`), its validation and the modules that act on a value all
read them from here."""

ROLLOUT_DTYPES = ("float32", "bfloat16", "float16", "fp8_e4m3", "fp4_e2m1", "mxfp8")
UPDATE_DTYPES = ("float32", "bfloat16")
SAMPLER_KINDS = ("shuffled", "clustered", "easy_to_hard")
KL_KINDS = ("k1", "k2", "k3", "abs", "k1+", "k3+", "abs+")
KL_MODES = ("loss", "reward")
OLD_LOGP = ("rollout", "recompute")
REWARD_SCALES = ("none", "pm1")
SCORER_ERRORS = ("raise", "zero")
PROMPT_FORMATS = ("auto", "raw", "chat")
DEVICES = ("auto", "cpu", "cuda")
CRITIC_INITS = ("zero", "random")
CENTERING_MODES = ("full", "topk", "topk_renorm")  # loss.centered_score (lmpo.losses.centering)
EVAL_STREAMS = ("per_problem", "shared")  # a sampling stream per held-out problem, or one


def one_of(choices: tuple[str, ...]) -> str:
    """The domain spec (`lmpo.domains`) of a field that takes one of `choices`."""
    return "{" + ", ".join(choices) + "}"
