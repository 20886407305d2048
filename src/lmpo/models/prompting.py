"""Turning a problem's text into prompt tokens, and the tokens that end a response.

`prompt_format: raw` encodes the text as it is (the tiny character-level policies).
`chat` applies the tokenizer's chat template with the problem as the user turn (and
`system_prompt` as the system turn when given), ending with the assistant header so
the model answers. `auto` is `chat` when the tokenizer ships a template.
"""

from __future__ import annotations

from lmpo.errors import ConfigError


class PromptEncoder:
    """`encoder(text) -> list[int]`, the prompt tokens in the configured format."""

    def __init__(self, tokenizer, fmt: str = "auto", system_prompt: str | None = None):
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if fmt == "auto":
            fmt = "chat" if has_template else "raw"
        if fmt == "chat" and not has_template:
            raise ConfigError("prompt_format: chat needs a tokenizer with a chat template; this "
                              "policy's tokenizer has none (use prompt_format: raw)")
        if fmt not in ("raw", "chat"):
            raise ConfigError(f"prompt_format {fmt!r} unknown; valid: auto, raw, chat")
        if system_prompt is not None and fmt != "chat":
            raise ConfigError("system_prompt applies only to prompt_format: chat")
        self.tokenizer, self.format, self.system_prompt = tokenizer, fmt, system_prompt
        self._cache: dict[str, list[int]] = {}

    def messages(self, text: str) -> list[dict[str, str]]:
        system = [] if self.system_prompt is None else [
            {"role": "system", "content": self.system_prompt}]
        return system + [{"role": "user", "content": text}]

    def render(self, text: str) -> str:
        """The prompt as text (what the model sees)."""
        if self.format == "raw":
            return text
        return self.tokenizer.apply_chat_template(self.messages(text), tokenize=False,
                                                  add_generation_prompt=True)

    def __call__(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            if self.format == "raw":
                ids = self.tokenizer.encode(text)
            else:  # the template writes every special token itself
                ids = self.tokenizer.encode(self.render(text), add_special_tokens=False)
            self._cache[text] = ids
        return list(ids)


def stop_token_ids(model, tokenizer) -> list[int]:
    """Every token that ends a response: the tokenizer's EOS and the model's generation
    config EOS ids (chat models often end a turn with a token of their own)."""
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for source in (tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)):
        for i in source if isinstance(source, list | tuple) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ConfigError("the policy's tokenizer has no EOS token and its generation config "
                          "names none: responses could never end")
    return ids
