"""A character-level tokenizer built locally with `tokenizers`, wrapped for transformers."""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
CHARS = string.digits + "+-*/=#,.:;()[]<>?!'\" \n" + string.ascii_lowercase + string.ascii_uppercase


def build_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerFast:
    """One token per character of `chars` plus <pad>, <bos>, <eos>, <unk>.

    Prompts are padded on the left (decoder-only generation); saving with
    `save_pretrained` gives a folder `AutoTokenizer.from_pretrained` loads
    without lmpo.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in dict.fromkeys(chars):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        padding_side="left", model_max_length=4096,
    )
