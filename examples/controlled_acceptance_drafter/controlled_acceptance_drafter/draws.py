"""The drafting rule (pure Python, no SGLang, no torch).

A request's *continuation* is what plain greedy decoding by the same target
produced for its prompt (recorded from a plain run, :func:`prompt_key` its
key). With ``n`` tokens of output so far, the request's next verify drafts
the continuation's tokens ``n, n + 1, ...``; each is kept with probability
``acceptance`` and otherwise replaced by a token the continuation does not
have there, so the target accepts it exactly when it was kept (while its
output still follows the continuation). Whether the token at output
position ``i`` is kept is drawn from ``(seed, key, i)`` alone: the same in
every process, every run and at every verify width, so runs at different
widths see the same acceptance pattern.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import List, Optional, Sequence

CHECKED_TAIL = 8
"""How many of the latest output tokens must match the continuation for it to be followed."""


def prompt_key(prompt: Sequence[int]) -> str:
    """The key of a prompt's token ids in a continuations record (stable across processes)."""
    return hashlib.blake2b(array("q", list(prompt)).tobytes(), digest_size=8).hexdigest()


def kept(seed: int, key: str, index: int, acceptance: float) -> bool:
    """Whether the continuation's token at output position ``index`` is drafted as it is."""
    digest = hashlib.blake2b(f"{seed}:{key}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64 < acceptance


def keep_pattern(seed: int, key: str, length: int, acceptance: float) -> List[bool]:
    """:func:`kept` at output positions ``0 .. length - 1`` (drawn once per request)."""
    return [kept(seed, key, i, acceptance) for i in range(length)]


def drafts(continuation: Sequence[int], keep: Sequence[bool], output: Sequence[int], count: int,
           vocab_size: int) -> Optional[List[int]]:
    """``count`` drafts to follow ``output`` (the request's output so far), the
    continuation's token at each position where ``keep`` (its
    :func:`keep_pattern`) says so; None where the output has left the
    continuation (its latest :data:`CHECKED_TAIL` tokens differ) or the
    continuation ends before them: the caller drafts another way there. A
    token not kept is the next token id modulo ``vocab_size``, never the
    continuation's."""
    n = len(output)
    if n + count > len(continuation) or list(output[-CHECKED_TAIL:]) != list(continuation[max(0, n - CHECKED_TAIL):n]):
        return None
    tokens = continuation[n:n + count]
    return [t if keep[n + j] else (t + 1) % vocab_size for j, t in enumerate(tokens)]
