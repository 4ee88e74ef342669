"""The block a request verifies each step, and the guesses it carries (no SGLang, no torch).

A request verifies the chain ``[root, g_1..g_k, M, ..., M]`` of the step's
width: its last committed token, the target's own guesses for the positions
after it (carried from the previous step) and the mask token ``M`` for the
rest. After a verify that committed ``accept_len`` tokens (``accept_len - 1``
drafts and the bonus), the target's tokens at the chain positions past them
predict exactly the positions after the new root (the bonus): those are the
next step's guesses (Jacobi iteration); the chain base hands them over as
``carried(req)``.
"""

from __future__ import annotations

from typing import List, Sequence


def block_drafts(guesses: Sequence[int], count: int, mask_token_id: int) -> List[int]:
    """The ``count`` drafts after the root: the guesses, cut to ``count``, padded with the mask token."""
    kept = list(guesses[:count])
    return kept + [mask_token_id] * (count - len(kept))


def block_width(choices: Sequence[int], most_guesses: int, mask_block: int) -> int:
    """The smallest of ``choices`` that holds the root, ``most_guesses`` (the most
    any request of the step carries) and ``mask_block`` mask tokens; else the largest."""
    needed = 1 + most_guesses + mask_block
    holding = [width for width in choices if width >= needed]
    return min(holding) if holding else max(choices)
