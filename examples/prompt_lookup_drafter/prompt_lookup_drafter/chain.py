"""Tensor math of one chain verify step (torch only, no SGLang).

A request verifies ``width`` tokens in a chain: its last accepted token (the
root, whose KV is not yet written) followed by ``width - 1`` drafts, at
positions ``seq_len .. seq_len + width - 1``.
"""

from __future__ import annotations

import torch


def verify_positions(seq_lens: torch.Tensor, width: int) -> torch.Tensor:
    """``(bs, width)`` positions of the chain: ``seq_lens[i] + j``."""
    return seq_lens.to(torch.int64).unsqueeze(1) + torch.arange(width, device=seq_lens.device, dtype=torch.int64)


def cache_locations(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``(bs, width)`` KV slots of the chain's tokens: the request's row of
    ``req_to_token`` at those positions (slots the scheduler reserved ahead)."""
    return req_to_token[req_pool_indices.to(torch.int64).unsqueeze(1), positions].to(torch.int64)


def accept_greedy(drafts: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """Tokens each request commits, ``(bs,)`` int32, for greedy verification.

    ``drafts`` is the verified chain ``(bs, width)`` (column 0 the root) and
    ``predicted`` the target's argmax after each of its tokens. Draft ``j``
    is accepted while every draft before it was and it equals the target's
    prediction after token ``j - 1``; the target's prediction after the last
    accepted token is the bonus. So request ``i`` commits ``1 + accepted``
    tokens, which are ``predicted[i, :1 + accepted]``: each accepted draft is
    the prediction it matched, and the bonus follows.
    """
    matches = (drafts[:, 1:] == predicted[:, :-1]).to(torch.int32)
    return (matches.cumprod(dim=1).sum(dim=1) + 1).to(torch.int32)


def carried_rows(rows: torch.Tensor, stride: int) -> torch.Tensor:
    """``rows`` ``(bs, width)`` padded with zeros to ``(bs, stride)``, ``stride >= width``.

    What a step carries to the next is filtered (finished requests leave) and
    merged (new requests join) by SGLang as flat rows of one stride; with a
    width that changes between steps, every step carries rows of the largest
    width, so rows of different steps line up. The scheduler reads only the
    first ``accept_lens[i]`` tokens of row ``i``."""
    return torch.nn.functional.pad(rows, (0, stride - rows.shape[1]))
