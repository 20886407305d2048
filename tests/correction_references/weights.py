"""The importance-weight corrections: truncated IS per token and per sequence (verl's
token/sequence TIS, two-sided as TRL's `*_truncate`), IcePop, TRL's masked IS and
OpenRLHF's seq-mask-tis."""

from __future__ import annotations

import math

from tests.correction_references import ex, reference, seq_sum


def per_row(lr, mask, weights_of):
    """Each row's weights (0 on padding), from `weights_of(row, its mask)`."""
    return [[w if k else 0.0 for w, k in zip(weights_of(row, m), m, strict=True)]
            for row, m in zip(lr, mask, strict=True)], mask


@reference("tis", cases=[{}, {"upper": 1.3}, {"lower": 0.8, "upper": 1.3}])
def tis(lr, mask, *, lower, upper, batch_normalize):
    assert not batch_normalize  # tests/test_corrections.py checks the normalisation
    return per_row(lr, mask, lambda row, m: [max(min(ex(x), upper), lower or 0.0) for x in row])


@reference("seq_tis", cases=[{}, {"upper": 5}, {"lower": 0.6, "upper": 5}])
def seq_tis(lr, mask, *, lower, upper, batch_normalize):
    assert not batch_normalize
    return per_row(lr, mask, lambda row, m: [max(min(ex(seq_sum(row, m)), upper),
                                                 lower or 0.0)] * len(row))


@reference("icepop", cases=[{}, {"lower": 0.8, "upper": 1.25}])
def icepop(lr, mask, *, lower, upper, batch_normalize):
    assert not batch_normalize
    return per_row(lr, mask, lambda row, m: [ex(x) if lower <= ex(x) <= upper else 0.0
                                             for x in row])


@reference("mis", cases=[{}, {"level": "token", "upper": 1.5, "lower": 0.7}])
def mis(lr, mask, *, level, lower, upper):
    """TRL: the ratio of the masked difference, zeroed outside [min, max]."""
    lo = -math.inf if lower is None else lower

    def weights(row, m):
        if level == "sequence":
            r = ex(seq_sum(row, m))
            return [r if lo <= r <= upper else 0.0] * len(row)
        return [ex(x * k) if lo <= ex(x * k) <= upper else 0.0
                for x, k in zip(row, m, strict=True)]

    return per_row(lr, mask, weights)


@reference("seq_mask_tis", cases=[{}, {"lower": 0.9, "upper": 1.1}])
def seq_mask_tis(lr, mask, *, lower, upper):
    """OpenRLHF: the geometric mean's mask times the token ratio."""
    def weights(row, m):
        n = sum(m)
        geo = math.exp(seq_sum(row, m) / n) if n else 1.0
        keep = 1.0 if lower <= geo <= upper else 0.0
        return [keep * ex(x) for x in row]

    return per_row(lr, mask, weights)
