"""Drafters the serving tests swap in for PROMPT_LOOKUP's worker (``serve(..., worker="drafters:NAME")``).

* :class:`Favoured` drafts one token (plugins.toml ``favoured``) at every
  position: on a target that keeps returning to it, its drafts are often
  accepted, which is what a test of acceptance under sampling needs.
* :class:`GreedyAcceptance` is :class:`Favoured` in a process where sampled
  requests are verified greedily (a draft accepted iff it is the target's
  argmax): the mutation a test of lossless sampling must catch.
* :class:`Faulty` is PROMPT_LOOKUP with faults injected at chosen decode
  steps (plugins.toml ``faults = {STEP = "KIND"}``, kinds in :data:`FAULTS`; step 0,
  ``"refusal"``: ``refusal`` raises at the prefill of the request ``mixed``),
  and :class:`FaultyBlock` DFLASH_BLOCK's worker with faults in its ``drafts``.
"""

from __future__ import annotations

import sys
import time

from dflash_block_drafter.worker import DFlashBlockWorker
from prompt_lookup_drafter.worker import PromptLookupWorker

FAULTS = ("raise", "exit", "width_zero", "width_negative", "width_float", "too_many", "out_of_vocabulary",
          "undeclared_width", "slow")
"""What :class:`Faulty` does at a faulted step: ``drafts`` raises for the step's first request, or calls
``sys.exit``, ``step_width`` returns 0, -1 or 2.0, ``drafts`` returns one token too many or a token id past
the vocabulary, ``step_width`` asks ``StepWidths.at`` for a width the algorithm does not declare, or the step
sleeps past the slow-step bound."""


class Favoured(PromptLookupWorker):
    """Drafts the plugins.toml ``favoured`` token at every position."""

    def drafts(self, req, tokens, count):
        return [int(self.policy.settings["favoured"])] * count


class GreedyAcceptance(Favoured):
    """Favoured, in a process whose verification accepts a draft iff it is the target's argmax
    (the token after the accepted ones still drawn from the target's distribution): the mutation."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        from sglang_spec_plugins.engine import chain_verify

        chain_verify.speculative_accept = accept_argmax_drafts


def accept_argmax_drafts(chain, probs, greedy_next, draft_probs=None, generator=None):
    """Greedy acceptance of drafts, then a draw from the target's distribution (a wrong rule for sampling)."""
    import torch

    from sglang_spec_plugins.engine.chain_sampling import draw

    bs, width = chain.shape
    taken = (chain[:, 1:] == greedy_next[:, :-1]).int().cumprod(dim=1).sum(dim=1)
    drawn = draw(probs[torch.arange(bs), taken], generator)
    following = torch.nn.functional.pad(chain[:, 1:], (0, 1))
    rows = torch.where(torch.arange(width).view(1, -1) < taken.unsqueeze(1), following, greedy_next)
    return rows.scatter(1, taken.unsqueeze(1), drawn.unsqueeze(1)), (taken + 1).int()


class Faulty(PromptLookupWorker):
    """PROMPT_LOOKUP, faulting as plugins.toml ``faults = {STEP = "KIND"}`` says (decode steps from 1)."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        self.steps = 0
        self.faults = {int(step): kind for step, kind in self.policy.settings.get("faults", {}).items()}
        from sglang_spec_plugins.engine import containment

        containment.SLOW_STEP_S = 0.2  # the bound, shortened so that a test waits little

    def _now(self):
        return self.faults.get(self.steps)

    def refusal(self, req):
        if self.faults.get(0) == "refusal" and req.rid == "mixed":
            raise RuntimeError("a refusal bug")
        return super().refusal(req)

    def step_width(self, batch):
        self.steps += 1
        kind = self._now()
        if kind == "width_zero":
            return 0
        if kind == "width_negative":
            return -1
        if kind == "width_float":
            return 2.0
        if kind == "undeclared_width":
            return self.widths.at(len(batch.reqs), 7)
        if kind == "slow":
            time.sleep(0.3)
        self._first = batch.reqs[0].rid
        return super().step_width(batch)

    def drafts(self, req, tokens, count):
        kind = self._now()
        drafted = super().drafts(req, tokens, count)
        if req.rid != getattr(self, "_first", None):
            return drafted
        if kind == "raise":
            raise RuntimeError("a drafter bug")
        if kind == "exit":
            sys.exit(3)
        if kind == "too_many":
            return drafted + [drafted[-1] if drafted else 0]
        if kind == "out_of_vocabulary":
            return [10 ** 6] * count
        return drafted


class FaultyBlock(DFlashBlockWorker):
    """DFLASH_BLOCK, whose ``drafts`` faults as plugins.toml ``faults = {STEP = "KIND"}`` says: ``raise``,
    ``shape`` (a column short), ``dtype`` (floats), ``out_of_vocabulary`` (ids past the vocabulary)."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        self.steps = 0
        self.faults = {int(step): kind for step, kind in self.policy.settings.get("faults", {}).items()}

    def drafts(self, batch, hidden):
        self.steps += 1
        drafted = super().drafts(batch, hidden)
        kind = self.faults.get(self.steps)
        if kind == "raise":
            raise ValueError("a draft-model drafter bug")
        if kind == "shape":
            return drafted[:, : drafted.shape[1] - 1][:, :0]
        if kind == "dtype":
            return drafted.float()
        if kind == "out_of_vocabulary":
            return drafted + 10 ** 6
        return drafted
