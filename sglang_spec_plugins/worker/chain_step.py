"""The whole greedy step of a model-free chain drafter: :func:`chain_worker_base`, its acceptance rule
:func:`accept_greedy` and its plugin's release check :func:`require_chain_release`."""

from __future__ import annotations

import functools
from typing import Any, List, Optional

from ..engine.algorithm import policy_for
from ..engine.greedy_step import (cache_locations, greedy_refusal, idle_result, refuse_unservable, step_result,
                                  verify_positions)
from ..engine.worker_base import worker_base
from ..engine.worker_contract import contract
from .step_widths import StepWidths


def accept_greedy(drafts: Any, predicted: Any) -> Any:
    """Tokens each request commits, ``(bs,)`` int32, for greedy verification of chains.

    ``drafts`` is the verified chain ``(bs, width)`` (column 0 the root) and
    ``predicted`` the target's argmax after each of its tokens. Draft ``j``
    is accepted while every draft before it was and it equals the target's
    prediction after token ``j - 1``; the target's prediction after the last
    accepted token is the bonus. So request ``i`` commits ``1 + accepted``
    tokens, which are ``predicted[i, :1 + accepted]``. Tensors in, a tensor out
    (torch, no SGLang)."""
    matches = (drafts[:, 1:] == predicted[:, :-1]).int()
    return (matches.cumprod(dim=1).sum(dim=1) + 1).int()


def require_chain_release(algorithm: str) -> None:
    """A chain worker's release check, for its plugin's ``validate_server_args``
    (run while SGLang resolves its arguments, before any weight loads):
    ValueError naming ``algorithm`` where the installed release's scheduler does
    not drive plugin workers on the V2 schema :func:`chain_worker_base` verifies
    on (SGLang 0.5.14+). The release is read off its installed source: nothing is imported."""
    found = contract()
    if found.release is not None and found.non_overlap_schema != "v2-sync":
        raise ValueError(f"{algorithm} drives SGLang's V2 speculative schema (SGLang 0.5.14+); SGLang "
                         f"{found.release} runs synchronous plugin workers on {found.non_overlap_schema!r}")


@functools.lru_cache(maxsize=None)
def chain_worker_base() -> type:
    """A base class for a model-free chain drafter's worker (imports SGLang; SGLang 0.5.14+).

    It is :func:`worker_base` with the whole greedy step: an idle step returns
    :func:`idle_result`; a prefill is the target's own (it samples the first
    token), refusing first, request by request, those ``refusal(req)`` gives a
    reason for (:func:`greedy_refusal` by default); a decode step takes its
    width from ``step_width(batch)``, asks each request's ``drafts(req, tokens,
    width - 1)``, runs the target's TARGET_VERIFY over the chains ``[root,
    drafts...]`` at :func:`verify_positions` (SGLang's own ``DFlashVerifyInput``:
    a causal chain, the input the loader captures CUDA graphs with for a
    ``"chain"`` algorithm), commits what :func:`accept_greedy` accepts (so
    greedy outputs are plain greedy decoding's, whatever the drafts), hands the
    accept counts to ``self.widths.record`` and the chains to ``verified``, and
    returns :func:`step_result` (rows of the step's width, carried rows of
    ``self.widths.maximum``). The accepted tokens are a prefix of the chain, so
    their KV is already in place; the rejected tail's slots are overwritten next step.

    A subclass defines ``drafts`` (refused at construction otherwise) and may
    replace ``step_width``, ``verified`` and ``refusal``. It has
    ``self.widths`` (:class:`StepWidths` of the target's runner) and
    ``self.policy`` (:func:`policy_for`: ``.settings``, ``.algorithm``). Its
    plugin makes :func:`require_chain_release` its ``validate_server_args``."""
    # SGLang first: where it is missing, the ImportError names it (the kit then skips SGLang's checks)
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput
    import torch

    class ChainSpecWorker(worker_base()):
        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__(server_args, target_worker, **release_kwargs)
            self.policy = policy_for(server_args)
            if type(self).drafts is ChainSpecWorker.drafts:
                raise self.policy.fault(f"{type(self).__qualname__} is built on chain_worker_base() but defines no "
                                        "drafts(req, tokens, count): the drafter the base verifies")
            self.widths = StepWidths(self.target_worker.model_runner)  # .at(batch size): each step's width;
            # .maximum: the row stride of what a step carries to the next

        def drafts(self, req, tokens: List[int], count: int) -> List[int]:
            """``count`` draft tokens to follow ``tokens`` (the request's prompt and
            output so far, a list the step owns); ``req`` is SGLang's ``Req``. Exactly
            ``count`` token ids of the target's vocabulary: any guess keeps the output
            exact, a good one commits more tokens per step."""
            raise self.policy.fault(f"{type(self).__qualname__} defines no drafts(req, tokens, count)")

        def step_width(self, batch) -> int:
            """This decode step's width, for every request of ``batch`` (asked once per
            step, before drafting): the framework's, ``self.widths.at(batch size)``."""
            return self.widths.at(len(batch.reqs))

        def verified(self, batch, drafts, predicted, accept_lens) -> None:
            """Called after each verify with the chains ``(bs, width)`` (column 0 the
            root), the target's argmax after each of their tokens ``(bs, width)`` and
            the tokens each request commits ``(bs,)``, rows in ``batch.reqs``' order,
            before ``batch.reqs`` take the committed tokens; nothing by default."""

        def refusal(self, req) -> Optional[str]:
            """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None."""
            return greedy_refusal(req, self.policy.algorithm)

        @property
        def speculative_num_draft_tokens(self) -> int:
            """The latest step's width (SGLang 0.5.13+ reports it as its sglang:spec_num_draft_tokens metric)."""
            return self.widths.latest

        def forward_batch_generation(self, batch, **kwargs):
            if batch.forward_mode.is_idle():
                return idle_result(self.target_worker.model_runner.device, self.widths.maximum)
            if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
                return self._prefill(batch)
            return self._verify(batch)

        def _prefill(self, batch):
            refuse_unservable(batch, self.refusal)
            out = self.target_worker.forward_batch_generation(batch)
            first = out.next_token_ids
            accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
            return step_result(out.logits_output, first.unsqueeze(1), accept_lens, batch.seq_lens.clone(),
                               out.can_run_cuda_graph, self.widths.maximum)

        def _chains(self, batch, width: int) -> List[List[int]]:
            chains = []
            for req in batch.reqs:
                tokens = [*req.origin_input_ids, *req.output_ids]  # one copy: prompt and output so far
                drafted = self.drafts(req, tokens, width - 1)
                if len(drafted) != width - 1:
                    raise self.policy.fault(f"{type(self).__qualname__}.drafts(req, tokens, {width - 1}) returned "
                                            f"{len(drafted)} tokens, not {width - 1}")
                chains.append([tokens[-1], *drafted])
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
            return step_result(out.logits_output, predicted, accept_lens,
                               batch.seq_lens + accept_lens.to(batch.seq_lens.dtype), out.can_run_cuda_graph,
                               self.widths.maximum)

    return ChainSpecWorker
