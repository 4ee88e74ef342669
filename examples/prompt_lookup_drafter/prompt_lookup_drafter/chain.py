"""Greedy acceptance of one chain verify step (torch only, no SGLang).

A request verifies ``width`` tokens in a chain: its last accepted token (the
root, whose KV is not yet written) followed by ``width - 1`` drafts, at
positions ``seq_len .. seq_len + width - 1`` (``sglang_spec_plugins.worker.verify_positions``).
"""

from __future__ import annotations

import torch


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
