"""Which tokens a verified chain commits, for any mix of greedy and sampled requests (torch only, no SGLang).

A chain is ``[root, d_1 .. d_{W-1}]``: the request's last committed token and
``W - 1`` drafts; the target's distribution at chain position ``j``,
``p_j``, is that of the token after ``chain[j]``. :func:`speculative_accept`
is standard speculative (rejection) sampling against the drafter's proposal:
draft ``d_j`` is accepted with probability ``min(1, p_{j-1}(d_j) / q_j(d_j))``
while every draft before it was; at the first rejection the committed token
is drawn from ``norm(max(0, p - q))``, and when every draft is accepted from
``p_{W-1}``. A drafter that does not hand its proposal ``q`` drafts
deterministically: ``q`` is then the point mass at its draft (accept with
probability ``p(d)``, else draw from ``p`` without ``d``). The committed tokens
are then distributed exactly as plain sampling's, whatever the drafts.

A greedy request's ``p`` is the point mass at the target's argmax, so the same
rule accepts a draft iff it is the argmax and commits the argmax after it:
:func:`accept_greedy`, token for token plain greedy decoding's.
:func:`target_probs` is plain sampling's distribution, as SGLang's sampler
draws from it: temperature, then top-k and top-p (judged together on the
softmax), then min-p, renormalised; with the release's fused renormalising
kernels where it has them. Everything stays on the device: no value is read
back to the host.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple


def accept_greedy(drafts: Any, predicted: Any) -> Any:
    """Tokens each request commits, ``(bs,)`` int32, for greedy verification of chains.

    ``drafts`` is the verified chain ``(bs, width)`` (column 0 the root) and
    ``predicted`` the target's argmax after each of its tokens. Draft ``j``
    is accepted while every draft before it was and it equals the target's
    prediction after token ``j - 1``; the target's prediction after the last
    accepted token is the bonus. So request ``i`` commits ``1 + accepted``
    tokens, which are ``predicted[i, :1 + accepted]``."""
    matches = (drafts[:, 1:] == predicted[:, :-1]).int()
    return (matches.cumprod(dim=1).sum(dim=1) + 1).int()


def target_probs(logits: Any, temperatures: Any, top_ks: Optional[Any], top_ps: Optional[Any],
                 min_ps: Optional[Any], kernels: Optional[Tuple[Any, Any]] = None,
                 sequential: bool = False) -> Any:
    """Plain sampling's distribution ``(n, vocab)`` float32 for ``n`` rows of
    (already penalised and masked) ``logits``: softmax at ``temperatures``
    ``(n, 1)``; then, over the tokens sorted by probability, those ranked at or
    past ``top_ks`` ``(n,)`` dropped and those after the cumulative mass before
    them exceeds ``top_ps`` ``(n,)`` dropped; then, where ``min_ps`` ``(n,)`` is
    given, those below ``min_ps`` times the most likely one's probability
    dropped; renormalised. A filter given as None is off for every row (SGLang's
    ``need_top_k_sampling`` / ``need_top_p_sampling`` false), so it costs nothing.

    Top-k and top-p are judged together on the softmax (SGLang's joint filter
    order): top-p first, then top-k on what it kept, which keeps the same
    prefix of the sorted tokens. ``sequential``: top-k first and top-p on the
    renormalised rest, what SGLang's flashinfer sampler does where min-p is on.
    ``kernels``: the release's fused ``(top_k_renorm_prob, top_p_renorm_prob)``
    (bound on CUDA in ``sglang.srt.layers.sampler``, plain sampling's own);
    None: :func:`renorm_top_k` and :func:`renorm_top_p`."""
    import torch

    top_k_renorm, top_p_renorm = kernels or (renorm_top_k, renorm_top_p)
    probs = torch.softmax(logits.float() / temperatures.float(), dim=-1)
    if sequential and top_ks is not None:
        probs = top_k_renorm(probs, top_ks)
    if top_ps is not None:
        probs = top_p_renorm(probs, top_ps.float())
    if top_ks is not None and not sequential:
        probs = top_k_renorm(probs, top_ks)
    if min_ps is not None:
        probs = probs * (probs >= probs.amax(dim=-1, keepdim=True) * min_ps.view(-1, 1).float())
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def renorm_top_k(probs: Any, top_ks: Any) -> Any:
    """``probs`` ``(n, vocab)`` with the tokens ranked at or past ``top_ks`` ``(n,)`` dropped, renormalised."""
    import torch

    sorted_probs, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device).view(1, -1)
    kept = sorted_probs * (rank < top_ks.view(-1, 1))
    return torch.zeros_like(probs).scatter_(-1, order, kept / kept.sum(dim=-1, keepdim=True))


def renorm_top_p(probs: Any, top_ps: Any) -> Any:
    """``probs`` ``(n, vocab)`` with the tokens after the cumulative mass before them
    exceeds ``top_ps`` ``(n,)`` dropped (by probability, largest first), renormalised."""
    import torch

    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    kept = sorted_probs * (mass_before <= top_ps.view(-1, 1))
    return torch.zeros_like(probs).scatter_(-1, order, kept / kept.sum(dim=-1, keepdim=True))


def point_mass(logits: Any) -> Any:
    """The greedy distribution ``(n, vocab)``: 1 at each row's argmax (its first, on ties)."""
    import torch

    probs = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    return probs.scatter_(-1, torch.argmax(logits, dim=-1, keepdim=True), 1.0)


def draw(probs: Any, generator: Optional[Any] = None) -> Any:
    """One token per row of ``probs`` ``(n, vocab)`` (rows need not sum to 1),
    with probability proportional to its entry: the exponential-race form of
    sampling (argmax of ``probs / E``, ``E ~ Exp(1)``), which needs no host sync."""
    import torch

    race = torch.empty(probs.shape, dtype=torch.float32, device=probs.device).exponential_(generator=generator)
    return torch.argmax(probs.float() / race.clamp_min_(torch.finfo(torch.float32).tiny), dim=-1)


def speculative_accept(chain: Any, probs: Any, greedy_next: Any, draft_probs: Optional[Any] = None,
                       generator: Optional[Any] = None) -> Tuple[Any, Any]:
    """``(rows, accept_lens)`` for chains ``(bs, W)`` int64 verified against the
    target's distributions ``probs`` ``(bs, W, vocab)`` (:func:`target_probs` or
    :func:`point_mass` rows), by speculative sampling (module doc).

    ``draft_probs`` ``(bs, W - 1, vocab)``: the proposal each draft was drawn
    from (None: deterministic drafts). ``accept_lens`` ``(bs,)`` int32 counts
    the committed tokens (accepted drafts and the drawn one, ``1..W``);
    ``rows`` ``(bs, W)`` int64 starts with them; past them it holds
    ``greedy_next`` ``(bs, W)``, the target's argmax at each position (what a
    drafter may carry to the next step)."""
    import torch

    bs, width = chain.shape
    everyone = torch.arange(bs, device=chain.device)
    drafts = chain[:, 1:]
    offered = probs[:, :-1, :].gather(2, drafts.unsqueeze(2)).squeeze(2)  # p_{j-1}(d_j)
    coins = torch.rand(drafts.shape, device=chain.device, generator=generator)
    if draft_probs is None:
        accepted = coins < offered
    else:
        proposed = draft_probs.gather(2, drafts.unsqueeze(2)).squeeze(2).float()
        accepted = coins * proposed < offered
    taken = accepted.int().cumprod(dim=1).sum(dim=1)  # accepted drafts per request, 0..W-1
    at = probs[everyone, taken]  # the distribution the committed token after them is drawn from
    if width > 1:
        last = taken.clamp(max=width - 2)  # the rejected draft's index, where one was rejected
        if draft_probs is None:
            residual = at.scatter(1, drafts[everyone, last].unsqueeze(1), 0.0)
        else:
            residual = (at - draft_probs[everyone, last].float()).clamp_min(0.0)
        rejected = (taken < width - 1).unsqueeze(1) & (residual.sum(dim=1, keepdim=True) > 0)
        at = torch.where(rejected, residual, at)
    drawn = draw(at, generator)
    position = torch.arange(width, device=chain.device).view(1, -1)
    following = torch.nn.functional.pad(drafts, (0, 1))  # column j: d_{j+1}
    rows = torch.where(position < taken.unsqueeze(1), following, greedy_next.to(chain.dtype))
    rows = rows.scatter(1, taken.unsqueeze(1), drawn.to(rows.dtype).unsqueeze(1))
    return rows.to(torch.int64), (taken + 1).to(torch.int32)
