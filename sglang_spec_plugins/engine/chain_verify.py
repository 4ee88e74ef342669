"""What a verified chain commits for each request of a batch, whatever it asks for (imports SGLang).

:class:`ChainVerifier` takes the target's logits after a TARGET_VERIFY of
chains ``(bs, W)`` and returns the tokens each request commits: plain
decoding's rules applied at every position (:mod:`.request_rules`), then, per
request, greedy verification or speculative sampling at its own temperature,
top-k, top-p and min-p (:mod:`.chain_sampling`), read off the batch's
``sampling_info`` (SGLang's per-request sampling state); and, for
``return_logprob`` requests, each committed token's logprobs through the
release's own spec-verify logprob function (what its drafters return them
with). Only the rules that need the host (penalties, grammars) read host data;
nothing the step computed on the device is read back.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional, Sequence, Tuple

from .chain_sampling import accept_greedy, point_mass, speculative_accept, target_probs
from .request_rules import apply_request_rules, needs_host_tokens


class ChainVerifier:
    """The acceptance of a step's chains, for one worker (``contract``: the release's worker contract;
    ``sampling_backend``: the server's ``--sampling-backend``)."""

    def __init__(self, contract: Any, sampling_backend: Optional[str] = None):
        self._logprobs = None
        if contract.spec_logprobs is not None:
            module, name = contract.spec_logprobs.split(":")
            self._logprobs = getattr(importlib.import_module(module), name)
        # plain sampling's fused renormalising kernels, where the release's sampler binds them (CUDA)
        sampler = importlib.import_module("sglang.srt.layers.sampler")
        kernels = (getattr(sampler, "top_k_renorm_prob", None), getattr(sampler, "top_p_renorm_prob", None))
        self._kernels = kernels if all(kernels) else None
        # where min-p is on, SGLang's flashinfer sampler renormalises top-k, then top-p, then min-p (else joint)
        self._sequential_min_p = self._kernels is not None and sampling_backend == "flashinfer"

    def __call__(self, batch: Any, logits_output: Any, chains: Any,
                 outputs: Optional[Sequence[Optional[Sequence[int]]]] = None,
                 host_chains: Optional[Sequence[Sequence[int]]] = None,
                 draft_probs: Optional[Any] = None) -> Tuple[Any, Any]:
        """``(rows, accept_lens)`` (see :func:`.chain_sampling.speculative_accept`) for
        ``chains`` ``(bs, W)`` on the device, whose TARGET_VERIFY gave
        ``logits_output``; its ``next_token_logits`` become the logits the rules
        left (those the logprobs are read from). ``outputs[i]`` / ``host_chains[i]``:
        request ``i``'s output tokens and chain on the host, needed where
        :func:`.request_rules.needs_host_tokens`; ``draft_probs``: the proposal
        ``(bs, W - 1, vocab)`` the drafts were drawn from, None for deterministic drafts."""
        import torch

        bs, width = chains.shape
        logits = logits_output.next_token_logits
        if any(needs_host_tokens(req) for req in batch.reqs) or batch.sampling_info.logit_bias is not None:
            apply_request_rules(logits, batch, chains, width, outputs or [None] * bs, host_chains)
        greedy_next = torch.argmax(logits, dim=-1).view(bs, width)
        info = batch.sampling_info
        if info.is_all_greedy and draft_probs is None:
            rows, accept_lens = greedy_next, accept_greedy(chains, greedy_next)
        else:
            # SGLang makes a greedy request top_k 1 (temperature 1): its rows are the point mass at the argmax
            # (plain greedy decoding's token, ties included); a sampled request's rows plain sampling's
            # distribution. Chosen row by row on the device: no index of the sampled requests goes through the host.
            each = lambda values: values.repeat_interleave(width, dim=0)  # noqa: E731
            probs = point_mass(logits)
            if not info.is_all_greedy:
                min_ps = each(info.min_ps) if info.need_min_p_sampling else None
                top_ks = each(info.top_ks)
                top_ps = each(info.top_ps) if getattr(info, "need_top_p_sampling", True) else None
                sampled = target_probs(logits, each(info.temperatures),
                                       top_ks if getattr(info, "need_top_k_sampling", True) else None, top_ps,
                                       min_ps, self._kernels, self._sequential_min_p and min_ps is not None)
                probs = torch.where(top_ks.view(-1, 1) > 1, sampled, probs)
            rows, accept_lens = speculative_accept(chains, probs.view(bs, width, -1), greedy_next, draft_probs)
        if batch.return_logprob:
            self.logprobs(batch, logits_output, rows)
        return rows, accept_lens

    def logprobs(self, batch: Any, logits_output: Any, rows: Any) -> None:
        """Each row's tokens' logprobs (and top / token-id logprobs) into ``logits_output``,
        as the release's own drafters hand them to the scheduler."""
        import torch

        bs, width = rows.shape
        identity = torch.arange(bs * width, device=rows.device).view(bs, width)
        if self._logprobs.__name__ == "compute_spec_logprobs":
            self._logprobs(batch, logits_output, rows.flatten(), accept_index=identity)
        else:
            self._logprobs(batch, logits_output, rows.flatten(), identity, width - 1)
