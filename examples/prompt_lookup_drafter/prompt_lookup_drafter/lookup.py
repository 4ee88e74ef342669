"""Prompt lookup: draft the continuation that followed the same n-gram earlier.

Pure Python, no SGLang and no torch: the drafting rule alone, so it can be
read and tested on its own.
"""

from __future__ import annotations

from typing import List, Sequence


def propose(tokens: Sequence[int], count: int, *, max_ngram: int = 3, min_ngram: int = 1) -> List[int]:
    """``count`` draft tokens to follow ``tokens`` (a request's prompt and output so far).

    The last ``n`` tokens (``n`` from ``max_ngram`` down to ``min_ngram``) are
    looked up at their most recent earlier occurrence; the draft is what
    followed it, read on as if the draft itself had been appended (so a
    repeating stretch keeps repeating past the end of what is known). With no
    earlier occurrence of any such n-gram the draft is the last token
    repeated: a guess the target will mostly reject, which costs nothing but
    the verified width. Always exactly ``count`` tokens; empty ``tokens`` or
    ``count`` 0 gives ``[]``.
    """
    if count <= 0 or not tokens:
        return []
    known = len(tokens)
    for n in range(min(max_ngram, known - 1), min_ngram - 1, -1):
        start = _last_earlier_occurrence(tokens, n)
        if start is not None:
            follow = start + n  # < known: the occurrence ends before the suffix does
            draft: List[int] = []
            for k in range(follow, follow + count):  # read on into the draft itself past the end
                draft.append(tokens[k] if k < known else draft[k - known])
            return draft
    return [tokens[-1]] * count


def _last_earlier_occurrence(tokens: Sequence[int], n: int):
    """Start of the latest ``tokens[i:i+n]`` equal to the last ``n`` tokens, with
    ``i + n < len(tokens)`` (not the suffix itself); None if there is none."""
    known = len(tokens)
    suffix = list(tokens[known - n:])
    first = suffix[0]
    for i in range(known - n - 1, -1, -1):
        if tokens[i] == first and list(tokens[i:i + n]) == suffix:
            return i
    return None
