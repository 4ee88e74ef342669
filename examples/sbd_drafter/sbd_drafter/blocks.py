"""The block a request verifies each step, and the guesses it carries (no SGLang, no torch).

A request verifies the chain ``[root, g_1..g_k, M, ..., M]`` of the step's
width: its last committed token, the target's own guesses for the positions
after it (carried from the previous step) and the mask token ``M`` for the
rest. After a verify that committed ``accept_len`` tokens (``accept_len - 1``
drafts and the bonus), the target's argmax at the chain positions past them,
``predicted[accept_len:width]``, predicts exactly the positions after the new
root (the bonus): those are the next step's guesses (Jacobi iteration).
"""

from __future__ import annotations

from typing import Any, List, Sequence


def carried_guesses(predicted: Any, accept_lens: Any) -> List[List[int]]:
    """Per request, the guesses for the positions after its new root:
    ``predicted[i, accept_lens[i]:]`` of the step's ``(bs, width)`` argmax
    (``accept_lens``: tokens each request committed, at least 1)."""
    rows, counts = predicted.tolist(), accept_lens.tolist()
    return [row[count:] for row, count in zip(rows, counts)]


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
