"""How alike two outputs are: exact match, and a token-level similarity in [0, 1].

A leaf module (stdlib only, imports nothing of tokenrace): the quality comparison and the gateway's
shadow mode score a pair of answers with these same functions, and neither depends on the other.

Tokens are words (runs of letters, digits and underscores) and single punctuation marks; whitespace
only separates them. So "a  b" and "a b" are identical token-wise, "Paris." and "Paris" differ by
one token. The similarity is difflib's ratio over the two token sequences: 2 * matched / (len(a) +
len(b)), matched being the tokens of the longest matching blocks in order (a Ratcliff/Obershelp
alignment, close to but not exactly an LCS). It is symmetric up to the alignment's tie-breaking,
1.0 only for identical token sequences, and 0.0 when no token is shared.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def agreement(a: str, b: str, max_tokens: int | None = None) -> float:
    """Token-level similarity of two outputs (1.0: the same tokens in the same order).

    `max_tokens` compares only the first that many tokens of each output. The alignment's cost
    grows faster than linearly (under 1 ms for 512 tokens a side, 50-100 ms for 8000), so a caller
    on a latency-critical event loop bounds it; None compares the whole outputs.
    """
    ta, tb = tokens(a)[:max_tokens], tokens(b)[:max_tokens]
    if not ta and not tb:
        return 1.0
    # autojunk off: it drops frequent tokens from matching in sequences over 200 tokens, which
    # would make long answers look less alike than they are.
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def exact_match(a: str, b: str) -> bool:
    """Equal after trimming leading and trailing whitespace (a final newline is not a difference)."""
    return a.strip() == b.strip()


def exact_match_rate(pairs: Iterable[tuple[str, str]]) -> float | None:
    """Share of pairs that match exactly; None for no pairs."""
    flags = [exact_match(a, b) for a, b in pairs]
    return sum(flags) / len(flags) if flags else None


def agreement_rate(pairs: Iterable[tuple[str, str]]) -> float | None:
    """Mean token-level similarity over pairs; None for no pairs."""
    scores = [agreement(a, b) for a, b in pairs]
    return sum(scores) / len(scores) if scores else None
