"""The PROMPT_LOOKUP worker SGLang instantiates (this module imports SGLang).

SGLang 0.5.14+ drives a plugin worker on its V2 speculative schema, the way it
drives its own model-free NGRAM worker: before every decode step the scheduler
reserves KV slots ahead of each request (``eagle_prepare_for_decode``), calls
``forward_batch_generation(batch)`` and, from the result, commits
``accept_lens[i]`` tokens of row ``i`` of ``next_token_ids`` (rows of
``speculative_num_draft_tokens``) and moves ``batch.seq_lens`` to
``new_seq_lens``. ``batch.seq_lens`` counts the tokens whose KV is written;
the request's last token (the root) is not among them.

One decode step here: take the step's width from the framework (one
width, or widths by batch size: plugins.toml ``widths_by_batch_size``, and
where a bucket gives several widths the acceptance controller's choice when
plugins.toml turns on ``widths_by_acceptance``; every request of a step
shares it), draft ``width - 1`` tokens per request by
prompt lookup (:meth:`PromptLookupWorker.drafts`, what another drafter of
this shape replaces), run the target's TARGET_VERIFY over ``[root, drafts...]`` at
positions ``seq_len..seq_len + width - 1`` (SGLang's own ``DFlashVerifyInput``:
a causal chain, the input the loader captures CUDA graphs with for a
``"chain"`` algorithm), and commit what greedy verification accepts. The
accepted tokens are a prefix of the chain, so their KV is already where it
belongs; the rejected tail's slots stay reserved and are overwritten next
step, and hand the accept counts back to the framework (the controller's
input). The step's result has rows of the step's width; what it carries to the
next step (which SGLang filters and merges with other batches' by a row
stride) has rows of the largest width, whatever the step's.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import List, Optional

# SGLang first: where it is missing, the ImportError names it (the kit then skips SGLang's checks)
from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.ngram_info import NgramVerifyInput
import torch

from sglang_spec_plugins.worker import StepWidths, policy_for, worker_base

from .chain import accept_greedy, cache_locations, carried_rows, verify_positions
from .lookup import propose
from .plugin import ALGORITHM, ngram_settings


def unsupported(req) -> Optional[str]:
    """Why ``req`` cannot be served exactly by greedy chain verification, or None."""
    params = req.sampling_params
    reasons = [
        (params.top_k > 1 and params.temperature > 0, "sampling with temperature > 0 (use temperature 0)"),
        (params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0, "penalties"),
        (bool(getattr(params, "logit_bias", None)), "logit_bias"),
        (params.min_new_tokens > 0, "min_new_tokens"),
        (bool(getattr(req, "custom_logit_processor", None)), "a custom logit processor"),
        (req.return_logprob, "return_logprob"),
        (getattr(req, "grammar", None) is not None, "grammar-constrained decoding"),
    ]
    found = [why for hit, why in reasons if hit]
    return f"{ALGORITHM} speculative decoding serves greedy requests only; this one asks for {', '.join(found)}" \
        if found else None


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

    def _result(self, logits_output, rows, accept_lens, new_seq_lens, can_run_cuda_graph):
        """The step's result; ``rows`` is ``(bs, width)``, row ``i`` starting with
        the ``accept_lens[i]`` tokens request ``i`` commits."""
        carried = NgramVerifyInput(  # what the scheduler filters and merges between steps: one stride
            draft_token_num=self.widths.maximum, new_seq_lens=new_seq_lens,
            accept_tokens=carried_rows(rows, self.widths.maximum).flatten(), accept_lens=accept_lens,
        )
        return GenerationBatchResult(
            logits_output=logits_output, next_token_ids=rows.flatten(), accept_lens=accept_lens,
            new_seq_lens=new_seq_lens, next_draft_input=carried, can_run_cuda_graph=can_run_cuda_graph,
            speculative_num_draft_tokens=rows.shape[1],  # the row stride of next_token_ids
        )

    def _idle(self):
        device = self.target_worker.model_runner.device
        tokens = torch.empty((0, self.widths.maximum), dtype=torch.int64, device=device)
        lens = torch.empty((0,), dtype=torch.int64, device=device)
        return self._result(None, tokens, lens.to(torch.int32), lens, False)

    def _prefill(self, batch):
        """The target's own prefill (it samples the first token); requests this
        worker cannot serve exactly are refused here, before their first decode."""
        for req in batch.reqs:
            why = self.refusal(req)
            if why is not None and req.to_finish is None:
                req.to_finish = FINISH_ABORT(why, HTTPStatus.BAD_REQUEST, "BadRequestError")
        out = self.target_worker.forward_batch_generation(batch)
        first = out.next_token_ids
        accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
        return self._result(out.logits_output, first.unsqueeze(1), accept_lens, batch.seq_lens.clone(),
                            out.can_run_cuda_graph)

    def refusal(self, req) -> Optional[str]:
        """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None."""
        return unsupported(req)

    @property
    def speculative_num_draft_tokens(self) -> int:
        """The latest step's width (SGLang 0.5.13+ reports it as its sglang:spec_num_draft_tokens metric)."""
        return self.widths.latest

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        """``count`` draft tokens to follow ``tokens`` (the request's prompt and output so far)."""
        return propose(tokens, count, max_ngram=self.max_ngram, min_ngram=self.min_ngram)

    def _chains(self, batch, width: int) -> List[List[int]]:
        chains = []
        for req in batch.reqs:
            tokens = [*req.origin_input_ids, *req.output_ids]  # one copy: prompt and output so far
            chains.append([tokens[-1], *self.drafts(req, tokens, width - 1)])
        return chains

    def _verify(self, batch):
        device = batch.seq_lens.device
        width = self.widths.at(len(batch.reqs))  # this step's, for every request of it
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
        batch.forward_mode = ForwardMode.DECODE
        return self._result(out.logits_output, predicted, accept_lens,
                            batch.seq_lens + accept_lens.to(batch.seq_lens.dtype), out.can_run_cuda_graph)
