"""Attention computed from a batch's definition, in torch: the reference every
backend harness and GPU check compares with."""

import torch


def attend(q, k, v, offset: int, scale: float, block=None) -> torch.Tensor:
    """GQA attention of ``q`` ``[L, H, D]`` on ``k``/``v`` ``[S, Hk, D]``: query
    t sees keys ``0..offset`` and, of the new keys after ``offset``, those
    ``block`` (``[L, L]`` bool) allows; default causal (new keys ``0..t``)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    mask = torch.arange(k.shape[0], device=q.device)[None, :] > offset + torch.arange(q.shape[0], device=q.device)[:, None]
    if block is not None:
        mask[:, offset:] = ~block
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(mask, float("-inf")).softmax(-1), v)
