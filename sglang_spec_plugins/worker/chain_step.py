"""The whole step of a model-free chain drafter: :func:`chain_worker_base`, and its plugin's release
check :func:`require_chain_release`."""

from __future__ import annotations

import functools
import operator
from typing import Any, List, Optional

from ..engine.algorithm import policy_for
from ..engine.chain_verify import ChainVerifier
from ..engine.containment import FAULT, Containment, allowed_sync, sync_check
from ..engine.facts import overlap_scheduled
from ..engine.request_kinds import refusal, refuse_unservable
from ..engine.request_rules import needs_host_tokens
from ..engine.step_output import cache_locations, idle_result, step_result, verify_positions
from ..engine.step_relay import StepRelay
from ..engine.worker_base import worker_base
from ..engine.worker_contract import contract
from ..errors import is_plain_int
from .step_widths import StepWidths

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


def draft_problem(drafted: Any, count: int, vocab_size: int) -> Optional[str]:
    """What is wrong with ``drafted`` as ``count`` draft tokens of a vocabulary of ``vocab_size``, or None."""
    if not isinstance(drafted, (list, tuple)):
        return f"returned a {type(drafted).__name__}, not a list of {count} token ids"
    if len(drafted) != count:
        return f"returned {len(drafted)} tokens, not {count}"
    for token in drafted:
        try:
            value = operator.index(token) if not isinstance(token, bool) else None
        except TypeError:
            value = None
        if value is None or not 0 <= value < vocab_size:
            return f"returned {ascii(token)[:40]}, not a token id in [0, {vocab_size})"
    return None


@functools.lru_cache(maxsize=None)
def chain_worker_base() -> type:
    """A base class for a model-free chain drafter's worker (imports SGLang; SGLang 0.5.14+).

    It is :func:`worker_base` with the whole step, for every request kind the
    release serves (:mod:`~sglang_spec_plugins.engine.request_kinds`), under
    SGLang's overlap scheduler or without it. An idle step returns
    :func:`idle_result`; a prefill is the target's own (it samples the first
    token), refusing first, request by request, those ``refusal(req)`` gives a
    reason for; a decode step takes its width from ``step_width(batch)``, asks
    each request's ``drafts(req, tokens, width - 1)`` (``tokens``: its prompt and
    every token it committed, those still in flight under overlap included),
    runs the target's TARGET_VERIFY over the chains ``[root, drafts...]`` at
    :func:`verify_positions` (SGLang's own ``DFlashVerifyInput``: a causal
    chain, the input the loader captures CUDA graphs with for a ``"chain"``
    algorithm), commits what :class:`~sglang_spec_plugins.engine.chain_verify.ChainVerifier`
    accepts (greedy requests token for token plain greedy decoding's, sampled
    ones distributed exactly as plain sampling's, penalties, grammars and
    ``logit_bias`` applied at every position as plain decoding applies them,
    logprobs as plain decoding's), hands the accept counts to
    ``self.widths.record`` and returns :func:`step_result`. The accepted
    tokens are a prefix of the chain, so their KV is already in place; the
    rejected tail's slots are overwritten next step. Nothing the step computed
    is read back to the host in that step: the next step reads what it needs.

    A drafter's fault never stops the server (:mod:`~sglang_spec_plugins.engine.containment`):
    a hook that raises or answers wrongly is logged and the step goes on
    without its answer (a request's drafts become its root repeated; a step's
    width the framework's), every request exact; a drafter that keeps faulting
    is switched off (plugins.toml ``max_faulted_steps``).

    A subclass defines ``drafts`` (refused at construction otherwise) and may
    replace ``step_width`` and ``refusal``. It has ``self.widths``
    (:class:`StepWidths` of the target's runner), ``self.policy``
    (:func:`policy_for`: ``.settings``, ``.algorithm``), and, inside a step,
    ``self.carried(req)``: the target's argmax at the chain positions past what
    ``req`` committed at its latest step, guesses for the positions after the
    new root. Its plugin makes
    :func:`require_chain_release` its ``validate_server_args`` and may declare
    ``supports_overlap=True``."""
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
            runner = self.target_worker.model_runner
            self.widths = StepWidths(runner)  # .at(batch size): each step's width; .maximum: the largest
            self.overlap = overlap_scheduled(server_args)
            self.contained = Containment(self.policy, self.policy.max_faulted_steps)
            self._contract = contract()
            self._verify_chains = ChainVerifier(self._contract, getattr(server_args, "sampling_backend", None))
            self._vocab_size = runner.model_config.vocab_size
            self._deterministic = bool(getattr(server_args, "enable_deterministic_inference", False))
            self._relay: Optional[StepRelay] = None
            self._latest: Any = None  # the relay's rows of this step's batch, once read
            self._carried: Any = None  # carried(req) of this step's requests, once asked
            self._batch: Any = None

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

        def refusal(self, req) -> Optional[str]:
            """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None:
            what the release cannot serve (:func:`~sglang_spec_plugins.engine.request_kinds.refusal`)."""
            return refusal(req, self.policy.algorithm, self._contract, self._deterministic)

        def carried(self, req) -> List[int]:
            """Inside a decode step: the target's argmax at the chain positions past what ``req``
            committed at its latest step (empty after its prefill)."""
            if self._latest is None:
                with allowed_sync():  # the step before's tokens: read once, where the step asks
                    self._latest = self._relay.read(self._batch.req_pool_indices)
            if self._carried is None:
                self._carried = {id(r): past for r, past in zip(self._batch.reqs, StepRelay.past(self._latest))}
            return self._carried[id(req)]

        @property
        def speculative_num_draft_tokens(self) -> int:
            """The latest step's width (SGLang 0.5.13+ reports it as its sglang:spec_num_draft_tokens metric)."""
            return self.widths.latest

        def forward_batch_generation(self, batch, on_publish=None, **kwargs):
            device = self.target_worker.model_runner.device
            if self._relay is None:
                self._relay = StepRelay(batch.req_to_token_pool.req_to_token.shape[0], self.widths.maximum, device)
            if batch.forward_mode.is_idle():
                result = idle_result(device, self.widths.maximum, self.overlap)
                if on_publish is not None:
                    on_publish(result.new_seq_lens)
                return result
            if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
                return self._prefill(batch, on_publish)
            return self._verify(batch, on_publish)

        def _refusal(self, req) -> Optional[str]:
            base = functools.partial(ChainSpecWorker.refusal, self)
            return base(req) if type(self).refusal is ChainSpecWorker.refusal else self.contained.refusal(self.refusal, base, req)

        def _prefill(self, batch, on_publish):
            self.contained.begin()
            refuse_unservable(batch, self._refusal)
            self.contained.end()
            out = self.target_worker.forward_batch_generation(batch)
            first = out.next_token_ids.unsqueeze(1)
            accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
            new_seq_lens = batch.seq_lens.clone()
            if on_publish is not None:
                on_publish(new_seq_lens)
            self._relay.keep(batch.req_pool_indices, first, accept_lens)
            return step_result(out.logits_output, first, accept_lens, new_seq_lens, out.can_run_cuda_graph,
                               self.widths.maximum, self.overlap)

        def _tokens(self, batch) -> List[List[int]]:
            """Each request's prompt and committed tokens, those in flight (overlap) read from the relay."""
            missing = self._relay.in_flight(batch)
            tails = [[]] * len(batch.reqs)
            if any(missing):
                self._latest = self._relay.read(batch.req_pool_indices)
                tails = StepRelay.tails(self._latest, missing)
            return [[*req.origin_input_ids, *req.output_ids, *tail] for req, tail in zip(batch.reqs, tails)]

        def _width(self, batch) -> int:
            size = len(batch.reqs)
            if not self.contained.off:
                width = self.contained.call("step_width(batch)", self.step_width, batch)
                if width is not FAULT:
                    if is_plain_int(width) and width in self.widths.declared:
                        return width
                    self.contained.fault("step_width(batch)", f"returned {ascii(width)[:40]}, not one of the declared "
                                                             f"widths {', '.join(map(str, self.widths.declared))}")
            return self.widths.at(size, 1) if 1 in self.widths.choices(size) else self.widths.at(size)

        def _chains(self, batch, tokens: List[List[int]], width: int) -> List[List[int]]:
            chains = []
            for req, known in zip(batch.reqs, tokens):
                drafted = None
                if width > 1 and not self.contained.off:
                    drafted = self.contained.call("drafts(req, tokens, count)", self.drafts, req, known, width - 1,
                                                  req=req)
                    if drafted is not FAULT:
                        problem = draft_problem(drafted, width - 1, self._vocab_size)
                        if problem is not None:
                            self.contained.fault("drafts(req, tokens, count)", problem, req)
                            drafted = None
                    else:
                        drafted = None
                root = known[-1]
                chains.append([root, *(map(int, drafted) if drafted is not None else [root] * (width - 1))])
            return chains

        def _verify(self, batch, on_publish):
            device = batch.seq_lens.device
            self.contained.begin()
            self._batch, self._latest, self._carried = batch, None, None
            tokens = self._tokens(batch)  # the one read of the step before (overlap), where the host lags
            with sync_check(device):
                width = self._width(batch)
                chains = self._chains(batch, tokens, width)
                self._batch, self._latest, self._carried = None, None, None
                drafts = torch.tensor(chains, dtype=torch.int64).to(device, non_blocking=True)
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
            with sync_check(device):
                outputs = [known[len(req.origin_input_ids):] if needs_host_tokens(req) else None
                           for req, known in zip(batch.reqs, tokens)]
                rows, accept_lens = self._verify_chains(batch, out.logits_output, drafts, outputs, chains)
                new_seq_lens = batch.seq_lens + accept_lens.to(batch.seq_lens.dtype)
                if on_publish is not None:
                    on_publish(new_seq_lens)
                self._relay.keep(batch.req_pool_indices, rows, accept_lens)
                if not self.contained.faulted:
                    self.widths.record(accept_lens)  # what the acceptance controller, where it is on, learns from
            self.contained.end()
            batch.forward_mode = ForwardMode.DECODE
            return step_result(out.logits_output, rows, accept_lens, new_seq_lens, out.can_run_cuda_graph,
                               self.widths.maximum, self.overlap)

    return ChainSpecWorker
