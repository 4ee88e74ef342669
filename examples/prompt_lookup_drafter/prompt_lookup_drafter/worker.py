"""The PROMPT_LOOKUP worker SGLang instantiates (this module imports SGLang).

How SGLang 0.5.14+ drives a plugin worker, and what a step returns
(``step_result``), is in :mod:`sglang_spec_plugins.worker`. One decode step
here: take the step's width from the framework (one width, or widths by
batch size: plugins.toml ``widths_by_batch_size``, and where a bucket gives
several widths the acceptance controller's choice when plugins.toml turns on
``widths_by_acceptance``; every request of a step shares it;
:meth:`PromptLookupWorker.step_width`, what a drafter that picks its own widths replaces), draft
``width - 1`` tokens per request by prompt lookup (:meth:`PromptLookupWorker.drafts`,
what another drafter of this shape replaces), run the target's TARGET_VERIFY over ``[root, drafts...]`` at
positions ``seq_len..seq_len + width - 1`` (SGLang's own ``DFlashVerifyInput``:
a causal chain, the input the loader captures CUDA graphs with for a
``"chain"`` algorithm), and commit what greedy verification accepts. The
accepted tokens are a prefix of the chain, so their KV is already where it
belongs; the rejected tail's slots stay reserved and are overwritten next
step, and hand the accept counts back to the framework (the controller's
input) and the verified chains to :meth:`PromptLookupWorker.verified` (what a
drafter that learns from the target's predictions replaces). The step's result has rows of the step's width; what it carries to the
next step (which SGLang filters and merges with other batches' by a row
stride) has rows of the largest width, whatever the step's.
"""

from __future__ import annotations

from typing import List, Optional

# SGLang first: where it is missing, the ImportError names it (the kit then skips SGLang's checks)
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
import torch

from sglang_spec_plugins.worker import (StepWidths, cache_locations, greedy_refusal, idle_result, policy_for,
                                        refuse_unservable, step_result, verify_positions, worker_base)

from .chain import accept_greedy
from .lookup import propose
from .plugin import ALGORITHM, ngram_settings


class PromptLookupWorker(worker_base()):
    """Drafts by prompt lookup, verifies a chain at each step's width, accepts greedily."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        self.widths = StepWidths(self.target_worker.model_runner)  # .at(batch size): each step's width;
        # .maximum: the row stride of what a step carries to the next
        self.max_ngram, self.min_ngram = ngram_settings(policy_for(server_args).settings)

    def forward_batch_generation(self, batch, **kwargs):
        if batch.forward_mode.is_idle():
            return self._idle()
        if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
            return self._prefill(batch)
        return self._verify(batch)

    def _idle(self):
        return idle_result(self.target_worker.model_runner.device, self.widths.maximum)

    def _prefill(self, batch):
        """The target's own prefill (it samples the first token); requests this
        worker cannot serve exactly are refused here, before their first decode."""
        refuse_unservable(batch, self.refusal)
        out = self.target_worker.forward_batch_generation(batch)
        first = out.next_token_ids
        accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
        return step_result(out.logits_output, first.unsqueeze(1), accept_lens, batch.seq_lens.clone(),
                           out.can_run_cuda_graph, self.widths.maximum)

    def refusal(self, req) -> Optional[str]:
        """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None."""
        return greedy_refusal(req, ALGORITHM)

    @property
    def speculative_num_draft_tokens(self) -> int:
        """The latest step's width (SGLang 0.5.13+ reports it as its sglang:spec_num_draft_tokens metric)."""
        return self.widths.latest

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        """``count`` draft tokens to follow ``tokens`` (the request's prompt and output so far)."""
        return propose(tokens, count, max_ngram=self.max_ngram, min_ngram=self.min_ngram)

    def step_width(self, batch) -> int:
        """This decode step's width, for every request of ``batch`` (asked once per
        step, before drafting): the framework's, ``self.widths.at(batch size)``."""
        return self.widths.at(len(batch.reqs))

    def verified(self, batch, drafts: torch.Tensor, predicted: torch.Tensor, accept_lens: torch.Tensor) -> None:
        """Called after each verify with the chains ``(bs, width)`` (column 0 the
        root), the target's argmax after each of their tokens ``(bs, width)`` and
        the tokens each request commits ``(bs,)``, rows in ``batch.reqs``' order,
        before ``batch.reqs`` take the committed tokens; nothing by default."""

    def _chains(self, batch, width: int) -> List[List[int]]:
        chains = []
        for req in batch.reqs:
            tokens = [*req.origin_input_ids, *req.output_ids]  # one copy: prompt and output so far
            chains.append([tokens[-1], *self.drafts(req, tokens, width - 1)])
        return chains

    def _verify(self, batch):
        device = batch.seq_lens.device
        width = self.step_width(batch)  # this step's, for every request of it
        drafts = torch.tensor(self._chains(batch, width), dtype=torch.int64).to(device, non_blocking=True)
        positions = verify_positions(batch.seq_lens, width)
        batch.out_cache_loc = cache_locations(
            batch.req_to_token_pool.req_to_token, batch.req_pool_indices, positions).flatten()
        batch.input_ids = drafts.flatten()
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        batch.spec_info = DFlashVerifyInput(
            draft_token=batch.input_ids, positions=positions.flatten(), draft_token_num=width,
            custom_mask=None, capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        out = self.target_worker.forward_batch_generation(batch, is_verify=True)
        predicted = torch.argmax(out.logits_output.next_token_logits, dim=-1).view(len(batch.reqs), width)
        accept_lens = accept_greedy(drafts, predicted)
        self.widths.record(accept_lens)  # what the acceptance controller, where it is on, learns from
        self.verified(batch, drafts, predicted, accept_lens)
        batch.forward_mode = ForwardMode.DECODE
        return step_result(out.logits_output, predicted, accept_lens, batch.seq_lens + accept_lens.to(batch.seq_lens.dtype),
                           out.can_run_cuda_graph, self.widths.maximum)
