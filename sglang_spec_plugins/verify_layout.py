"""The TARGET_VERIFY batch layout, as pure arithmetic (no SGLang, no torch).

A TARGET_VERIFY batch holds ``batch_size`` requests, each verifying the same
number of tokens (the *width*), laid out back to back: request ``i``'s query
tokens are rows ``i*width .. (i+1)*width - 1``, and its keys are its cached
prefix followed by those ``width`` new tokens. Every attention-backend patch
takes its metadata from here, so the arithmetic lives once.

Functions that build index arrays take an ``arange(start, stop, step)``
callable (default: Python's ``range``, giving lists); a backend passes
``torch.arange`` bound to its dtype and device to get tensors.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence


CHAIN = "chain"
"""Verify shape: each request's ``width`` tokens are a linear chain, query
``t`` sees the request's prefix and its new tokens ``0..t`` (causal within
the block), as DFLASH and SBD verify. The worker's verify input needs no
mask: the loader captures such an algorithm on each backend's causal path."""

TREE = "tree"
"""Verify shape: the worker's verify input carries its own mask over each
request's new tokens (a draft tree, as EAGLE verifies); backends read it
from the verify input at every step, CUDA-graph replays included."""

VERIFY_SHAPES = (CHAIN, TREE)

DRAFT_VERIFIES_CHAINS_ONLY = ("SGLang captures a draft worker's TARGET_VERIFY only as a causal chain; declare "
                              "verify_shape='chain' or keep TARGET_VERIFY on the target worker")
"""Why a tree-shaped algorithm whose draft worker verifies is refused."""


class VerifyLayoutError(ValueError):
    """A batch whose shape cannot be a uniform TARGET_VERIFY batch."""


def width_of(num_tokens: int, batch_size: int, max_width: Optional[int] = None, *, where: str = "TARGET_VERIFY") -> int:
    """The per-request width of a batch of ``num_tokens`` query tokens.

    Raises VerifyLayoutError when the batch is empty, when the tokens do not
    split evenly over the requests (the layout would silently mix requests),
    or when the width is above ``max_width``. ``where`` names the caller in
    the message (backend and phase).
    """
    if batch_size < 1:
        raise VerifyLayoutError(f"{where}: batch_size must be >= 1, got {batch_size}")
    width, rest = divmod(num_tokens, batch_size)
    if rest:
        raise VerifyLayoutError(
            f"{where}: {num_tokens} query tokens do not split evenly over {batch_size} requests; "
            "every request in a TARGET_VERIFY batch must verify the same number of tokens"
        )
    if width < 1:
        raise VerifyLayoutError(f"{where}: {num_tokens} query tokens for {batch_size} requests is a width of 0")
    if max_width is not None and width > max_width:
        raise VerifyLayoutError(f"{where}: width {width} ({num_tokens} tokens / {batch_size} requests) is above the maximum {max_width}")
    return width


def qo_indptr(batch_size: int, width: int, arange: Callable = range):
    """Query offsets ``[0, w, 2w, ..., batch_size*w]`` (``cu_seqlens_q`` / ``qo_indptr``)."""
    return _as_list(arange(0, (batch_size + 1) * width, width), arange)


def packed_causal_mask(width: int) -> list:
    """The causal mask of one request's ``width`` new tokens, bit-packed the
    way XQA's spec-decode kernels read it: row ``r`` (query ``r``) has bits
    ``0..r`` set (it sees new tokens ``0..r``), in 16-bit words, least
    significant bit first, ``2 * ceil(width / 32)`` words per row (rows
    aligned to 32 bits). A batch's mask is this block once per request."""
    if width < 1:
        raise VerifyLayoutError(f"a causal mask needs a width >= 1, got {width}")
    words = -(-width // 32) * 2
    return [[(1 << max(0, min(16, r + 1 - 16 * w))) - 1 for w in range(words)] for r in range(width)]


def _as_list(values, arange):
    return list(values) if arange is range else values
