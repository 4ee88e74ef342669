"""The API for writing a plugin's worker: the one module drafter authors import.

A plugin's ``worker_factory`` returns a class built on :func:`chain_worker_base`
(a model-free chain drafter: the subclass supplies the drafts) or
:func:`draft_block_worker_base` (a block drafter with its own draft model),
or, for a step of its own, :func:`worker_base` (or :func:`draft_model_worker_base`);
SGLang instantiates it and calls ``forward_batch_generation(batch, **kwargs)``
every step. Inside the worker:

* :func:`policy_for` gives the algorithm's policy: its plugins.toml
  ``settings`` and the widths SGLang's runners and backends get;
* :class:`StepWidths` gives each decode step's verify width (one width, or
  widths by batch size, chosen by the worker or by the acceptance
  controller) and the largest width, and takes each step's accept counts;
* :func:`contract` and :func:`check_worker` say what the installed release
  asks of a worker class (the kit and ``check`` run them);
* :class:`WidthsByBatchSize`, :class:`WidthSchedule`, :class:`WidthsByAcceptance`
  and :class:`AcceptanceSettings` are what :class:`StepWidths` schedules
  with, pure, for a worker's own tests.
* :func:`chain_worker_base` is the base of a model-free chain drafter's
  worker: the whole greedy draft-verify-accept step, with the drafter
  supplied by a subclass's ``drafts`` (:func:`accept_greedy` its acceptance
  rule, :func:`require_chain_release` the release check its plugin's
  ``validate_server_args`` makes);
* :func:`draft_model_worker_base` is the base of a worker with its own draft
  model (it builds the draft worker and runner), and
  :func:`draft_block_worker_base` the whole greedy step of a DFLASH-style
  block drafter on it (a subclass may replace how the block's drafts are
  read off the draft's hidden states; :func:`require_block_args` its
  plugin's ``validate_server_args``);
* :func:`target_vocab_size` reads the target's vocabulary size off its
  ``config.json`` (for a ``validate_server_args`` that checks token ids
  before any weight loads);
* :func:`step_result` (and :func:`idle_result`) is what a greedy-verifying
  step returns to the scheduler, :func:`verify_positions` and
  :func:`cache_locations` where a chain's tokens and KV go, and
  :func:`refuse_unservable` refuses, request by request, what greedy
  verification cannot serve exactly (:mod:`.engine.greedy_step`).

Importing this module does not import SGLang; the functions do.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from .engine.algorithm import policy_for, required_policy
from .engine.draft_worker import draft_model_worker_base, sglang_name
from .engine.facts import configured_ndt
from .engine.step_times import HostTimer, StepClock, agreed, timer_for
from .engine.greedy_step import (cache_locations, carried_rows, greedy_refusal, idle_result, refuse_unservable,
                                 step_result, verify_positions)
from .engine.worker_base import ModelFreeDraftWorker, ModelFreeRunner, worker_base
from .engine.worker_contract import WorkerContract, check_worker, contract
from .errors import EngineError, is_plain_int
from .widths_by_acceptance import AcceptanceSettings, WidthsByAcceptance
from .widths_by_batch_size import WidthSchedule, WidthsByBatchSize, graph_sizes, padded_size

_UNRESOLVED = object()


class StepWidths:
    """Each decode step's verify width, for a plugin worker. In the worker::

        self.widths = StepWidths(self.target_worker.model_runner)   # __init__
        width = self.widths.at(batch.batch_size())                   # every decode step, before drafting
        ...                                                          # draft, verify `width` tokens per request
        self.widths.record(accept_lens)                              # after the verify: tokens each request commits

    The widths are the algorithm's widths by batch size (plugins.toml
    ``widths_by_batch_size`` or the plugin's ``sgl_spec_widths_by_batch_size``)
    where it has them, else its one width. ``at`` is asked once per step (it
    keeps the hysteresis state, :class:`~.widths_by_batch_size.WidthSchedule`;
    ``hold_steps`` its length) and returns the width to draft and verify at,
    the one the CUDA-graph runner replays. Where the step's batch-size bucket
    gives several widths, the step's width is chosen by

    * the worker, ``at(batch_size, width)``: any width the algorithm declares
      (:attr:`declared`; another is refused, naming the plugin), best one of
      :meth:`choices` (a CUDA graph of those holds the batch; another runs eagerly);
    * else the acceptance controller, where plugins.toml turns on
      ``widths_by_acceptance`` (:mod:`~.widths_by_acceptance`), fed by
      ``record`` (SGLang's ``accept_lens``; without the controller ``record``
      does nothing, so a worker may always call it);
    * else nobody: the bucket's largest.

    ``model_runner`` is the runner that runs the worker's TARGET_VERIFY (the
    target's; a verifying draft runner for ``is_draft_worker`` widths).
    ``maximum`` is the largest width (what SGLang sizes buffers and reserves
    KV for): a fixed row stride for what a worker carries between steps.
    ``latest`` is the width of the last step (SGLang 0.5.13+ reports a
    worker's ``speculative_num_draft_tokens`` as its ``sglang:spec_num_draft_tokens``
    metric: a worker that answers it with ``latest`` shows its width there).
    ``now`` is the clock the controller's step times are read from (seconds;
    a worker's own tests pass theirs); left out, a runner on a CUDA device
    times steps with events on its stream, so that ``record`` never makes the
    host wait for the GPU: the accept counts and the step's time are read at
    the next ``at``, once the scheduler has waited for the step's tokens. A step is timed by its width and its
    size: the captured size whose graph it replays at that width (:func:`~.widths_by_batch_size.graph_size`),
    or its batch size where it runs eagerly; the controller compares widths timed at one size
    (:mod:`~.widths_by_acceptance`). The schedule is resolved at the first
    ``at``, once the runner's decode CUDA graphs are captured. Imports SGLang; EngineError for a runner whose
    algorithm is not a plugin algorithm; ConfigError for a plugins.toml
    ``widths_by_acceptance`` without widths to choose from (the start-up
    check refuses it first)."""

    def __init__(self, model_runner: Any, hold_steps: int = 0, now: Optional[Callable[[], float]] = None):
        if isinstance(model_runner, ModelFreeRunner):
            mistake = ("StepWidths was given the worker's model-free draft runner (worker_base()'s model_runner, which "
                       "runs no TARGET_VERIFY); give it the runner that verifies: StepWidths(self.target_worker.model_runner)")
            try:  # the worker's algorithm names its plugin and distribution
                owner = policy_for(model_runner.server_args) if model_runner.server_args is not None else None
            except EngineError:
                owner = None
            raise owner.fault(mistake) if owner is not None else EngineError(mistake)
        algorithm = getattr(model_runner, "spec_algorithm", None)
        policy = required_policy(algorithm, f"StepWidths: the runner's algorithm {algorithm!r}")
        self._ndt, self._draft = configured_ndt(model_runner), bool(model_runner.is_draft_worker)
        self.maximum: int = policy.width(self._ndt, self._draft)
        self.declared: Tuple[int, ...] = policy.candidate_widths(self._ndt, self._draft)
        self.latest: int = self.maximum
        acceptance = policy.widths_by_acceptance(self._ndt, self._draft)
        self._controller = None if acceptance is None else WidthsByAcceptance(
            policy.widths_by_batch_size(self._ndt, self._draft), acceptance, name=policy.algorithm,
            log=getattr(model_runner, "tp_rank", 0) == 0)
        self._policy, self._runner, self._hold_steps = policy, model_runner, hold_steps
        self._schedule: Any = _UNRESOLVED  # then a WidthSchedule, or None: one width
        self._timer = HostTimer(now) if now is not None else timer_for(getattr(model_runner, "device", "cpu"))
        self._clock = StepClock(self._timer)
        self._step: Optional[Tuple[Optional[int], int, int]] = None  # (bucket, width, size) of the step at() answered
        self._recorded: Optional[Tuple[Optional[int], int, int, Any, int]] = None  # (bucket, width, size, count,
        # requests) unread
        self._graph_sizes: Dict[int, Tuple[int, ...]] = {}  # per width: the captured sizes with a graph at it

    def at(self, batch_size: int, width: Optional[int] = None) -> int:
        """The width of this step, for a batch of ``batch_size`` requests;
        ``width``: the worker's own choice (one of :attr:`declared`)."""
        self._learn()
        schedule = self._resolved()
        bucket = None if schedule is None else schedule.bucket(batch_size)
        if width is not None:
            if not is_plain_int(width) or width not in self.declared:
                raise self._policy.fault(
                    f"StepWidths.at({batch_size}, width={width!r}): the algorithm declares widths "
                    f"{', '.join(map(str, self.declared))} on the {'draft' if self._draft else 'target'} worker at "
                    f"speculative_num_draft_tokens={self._ndt}, not {width!r}")
        elif self._controller is not None:
            width = self._controller.width(bucket)
        else:
            width = self.maximum if schedule is None else schedule.buckets.widths[bucket][-1]
        self.latest = width
        if self._controller is not None:
            self._step = (bucket, width, self._size(schedule, batch_size, width))
            self._clock.start()
        return width

    def _size(self, schedule: Any, batch_size: int, width: int) -> int:
        """The size of a step of ``batch_size`` requests at ``width``, what the controller
        times it by: the captured size whose graph at that width it replays, else (eager)
        its own batch size."""
        if schedule is None or schedule.capture_sizes is None:
            return batch_size
        sizes = self._graph_sizes.get(width)
        if sizes is None:
            sizes = self._graph_sizes[width] = graph_sizes(schedule.buckets, width, schedule.capture_sizes)
        padded = padded_size(batch_size, sizes)
        return batch_size if padded is None else padded

    def choices(self, batch_size: int) -> Tuple[int, ...]:
        """The widths of the bucket a batch of ``batch_size`` falls in (of the
        size it pads to under CUDA graphs): those a captured graph holds it at."""
        schedule = self._resolved()
        if schedule is None:
            return (self.maximum,)
        padded = padded_size(batch_size, schedule.capture_sizes)
        return schedule.buckets.widths_at(batch_size if padded is None else padded)

    def record(self, accept_lens: Any) -> None:
        """The tokens each request of the step ``at`` answered for committed (SGLang's
        ``accept_lens``: its accepted drafts and the target's own token; a tensor or
        a sequence of ints), for the acceptance controller; nothing without one.
        Nothing is read back from the GPU here: the controller learns at the next ``at``."""
        if self._controller is None or self._step is None:
            return
        (bucket, width, size), self._step = self._step, None
        count = self._timer.keep(accept_lens.sum()) if hasattr(accept_lens, "sum") else sum(accept_lens)
        self._clock.stop(bucket, width, size)
        self._recorded = (bucket, width, size, count, len(accept_lens))

    def _learn(self) -> None:
        """Hand the controller the step ``record`` took last (and, when it is due, its decision)."""
        if self._recorded is None:
            return
        (bucket, width, size, count, requests), self._recorded = self._recorded, None
        self._clock.settle()
        controller = self._controller
        controller.observe(bucket, width, int(count), requests, size)
        if controller.due(bucket):
            controller.decide(bucket, agreed(self._runner, self._clock.take(bucket)))

    def _resolved(self):
        if self._schedule is _UNRESOLVED:
            from .patches.widths_by_batch_size import schedule_for

            self._schedule = schedule_for(self._runner, self._ndt, self._hold_steps)
        return self._schedule


def target_vocab_size(server_args: Any) -> Optional[int]:
    """The target's ``vocab_size`` from ``config.json`` in ``server_args.model_path``
    where that is a local folder whose file says it (nothing is downloaded, no
    model is built); None otherwise (the worker's ``model_config.vocab_size``
    then says it, once the model is loaded)."""
    from pathlib import Path

    from .serving.draft_model_check import read_config

    path = getattr(server_args, "model_path", None)
    if not isinstance(path, str) or not Path(path).is_dir():
        return None
    config, _ = read_config(path)
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    return vocab if is_plain_int(vocab) and vocab > 0 else None


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


def require_block_args(algorithm: str, server_args: Any) -> None:
    """A block drafter's argument check, for its plugin's ``validate_server_args``:
    ValueError naming ``algorithm`` unless ``--tp-size`` is 1 (:func:`draft_block_worker_base`
    drafts with the target's LM head on one rank: no vocabulary gather across TP ranks)."""
    tp_size = getattr(server_args, "tp_size", 1) or 1
    if tp_size != 1:
        raise ValueError(f"{algorithm} drafts with the target's LM head on one GPU: serve it with --tp-size 1, "
                         f"not {tp_size}")


@functools.lru_cache(maxsize=None)
def draft_block_worker_base() -> type:
    """A base class for a DFLASH-style block drafter's worker (imports SGLang; SGLang 0.5.14+).

    It is :func:`draft_model_worker_base` (a DFlash-layout draft checkpoint, the
    plugin declaring ``DraftModel()``) with the whole greedy step. State between
    steps is SGLang's: the draft KV pool holds, for every token whose KV the
    target has written (``batch.seq_lens`` of them), the draft's K/V projected
    from the target's captured hidden states of it; the request's last token
    (the root) is in neither KV. A decode step, for a block of ``B`` tokens (the
    draft runner's width, ``self.block``) and a verify width ``W <= B`` (the
    target's, ``self.width``):

    1. the block ``[root, mask x (B - 1)]`` at positions ``seq_len .. seq_len + B - 1``
       goes through the draft model in one TARGET_VERIFY forward on the draft
       runner (``input_embeds``: the target's embedding of the block; the draft
       attends non-causally within the block and to the context's draft KV, and
       writes the block's K/V into the slots the scheduler reserved);
    2. ``drafts(batch, hidden)`` turns the draft's hidden states at the block's
       positions 1.. ``(bs, B - 1, hidden_size)`` into ``B - 1`` drafts per request
       (by default :meth:`greedy_drafts`: the target's LM head, greedy, as DFLASH);
    3. the target verifies ``[root, d_1 .. d_{W-1}]`` causally in its own
       TARGET_VERIFY (the block's first ``W`` slots), capturing every token's hidden states;
    4. :func:`accept_greedy` commits ``c`` tokens, ``1 <= c <= W``; the hidden
       states of all ``W`` verified tokens are projected into the draft KV at
       their slots, as DFLASH writes its whole verified block (the slots past
       ``seq_len + c`` keep K/V no step reads; writing every row keeps the step
       free of a device-to-host wait).

    The prefill is the target's own (it samples the first token), capturing
    the hidden states that become the prompt's draft KV; requests ``refusal(req)``
    names (:func:`greedy_refusal` by default) are refused there one by one. At
    ``W = B`` it drafts and verifies token for token as SGLang's own DFLASH."""
    # SGLang first: where it is missing, the ImportError names it (the kit then skips SGLang's checks)
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput
    import torch

    parse_draft_config = sglang_name("parse_dflash_draft_config", "sglang.srt.speculative.dflash_utils")
    fused_kv_helper = sglang_name("FusedKVMaterializeHelper", "sglang.kernels.ops.speculative.fused_kv_materialize",
                                  "sglang.srt.speculative.triton_ops.fused_kv_materialize")
    can_fuse_qkv = sglang_name("can_dflash_use_fused_qkv_proj", "sglang.srt.speculative.dflash_utils")

    class DraftBlockSpecWorker(draft_model_worker_base()):
        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__(server_args, target_worker, **release_kwargs)
            self.policy = policy_for(server_args)
            self.block = StepWidths(self.draft_runner).maximum  # B: the draft runner's TARGET_VERIFY width
            self.width = StepWidths(target_worker.model_runner).maximum  # W: the target's
            config = parse_draft_config(draft_hf_config=self.draft_runner.model_config.hf_config)
            self.mask_token_id = int(config.mask_token_id)
            self.draft_model = self.draft_runner.model
            target = target_worker.model_runner.model
            self.embedding = target.get_input_embeddings()
            self.lm_head = target.lm_head
            self.device = target_worker.model_runner.device
            self.fused = self._fused_kv()
            self.block_input = DFlashVerifyInput(  # what the draft runner's TARGET_VERIFY is laid out by (B per request)
                draft_token=torch.empty((0,), dtype=torch.long, device=self.device),
                positions=torch.empty((0,), dtype=torch.int64, device=self.device),
                draft_token_num=self.block, custom_mask=None, capture_hidden_mode=CaptureHiddenMode.NULL)

        def drafts(self, batch, hidden):
            """``B - 1`` drafts per request ``(bs, B - 1)`` int64, from the draft's hidden
            states at the block's positions 1.. ``(bs, B - 1, hidden_size)``, rows in
            ``batch.reqs``' order: :meth:`greedy_drafts` by default."""
            return self.greedy_drafts(hidden)

        def greedy_drafts(self, hidden):
            """The target's LM head over ``hidden`` ``(bs, n, hidden_size)``, greedy:
            ``(bs, n)`` token ids (DFLASH's greedy draft sampler)."""
            bs, n = hidden.shape[0], hidden.shape[1]
            weight = self.lm_head.weight
            shard = getattr(self.lm_head, "shard_indices", None)
            vocab = int(shard.num_org_elements) if shard is not None else weight.shape[0]
            logits = torch.matmul(hidden.reshape(bs * n, -1).to(weight.dtype), weight[:vocab].T)
            return torch.max(logits, dim=-1)[1].view(bs, n)

        def refusal(self, req) -> Optional[str]:
            """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None."""
            return greedy_refusal(req, self.policy.algorithm)

        def _fused_kv(self):
            """SGLang's fused (Triton) context-KV writer for the draft's layers, where
            they qualify as DFLASH requires (fused QKV, unit K/V scales, neox RoPE); else None."""
            layers = self.draft_model.layers
            if not layers or not getattr(self.draft_model, "supports_fused_context_kv", True):
                return None
            for layer in layers:
                attn = layer.self_attn
                if not can_fuse_qkv(attn.qkv_proj)[0] or not getattr(attn.rotary_emb, "is_neox_style", True):
                    return None
                scales = (getattr(attn.attn, "k_scale", None), getattr(attn.attn, "v_scale", None))
                if any(s is not None and float(s) != 1.0 for s in scales):
                    return None
            first = layers[0].self_attn
            return fused_kv_helper(layers=layers, rotary_emb=first.rotary_emb, num_kv_heads=first.num_kv_heads,
                                   head_dim=first.head_dim, device=self.device,
                                   max_position_hint=self.target_worker.model_runner.model_config.context_len + self.block)

        def forward_batch_generation(self, batch, **kwargs):
            if batch.forward_mode.is_idle():
                return idle_result(self.device, self.width)
            if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
                return self._prefill(batch)
            return self._decode(batch)

        def _prefill(self, batch):
            refuse_unservable(batch, self.refusal)
            out = self.forward_target(batch, CaptureHiddenMode.FULL)
            positions = torch.cat([torch.arange(start, start + length, dtype=torch.int64)
                                   for start, length in zip(batch.prefix_lens, batch.extend_lens)]).to(self.device)
            self._write_context_kv(out.logits_output.hidden_states, batch.out_cache_loc.to(torch.int64), positions)
            out.logits_output.hidden_states = None
            first = out.next_token_ids
            accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
            return step_result(out.logits_output, first.unsqueeze(1), accept_lens, batch.seq_lens.clone(),
                               out.can_run_cuda_graph, self.width)

        def _decode(self, batch):
            bs, width = len(batch.reqs), self.width
            root = torch.tensor([req.output_ids[-1] for req in batch.reqs], dtype=torch.int64).to(self.device)
            positions = verify_positions(batch.seq_lens, self.block)
            slots = cache_locations(batch.req_to_token_pool.req_to_token, batch.req_pool_indices, positions)
            block = torch.full((bs, self.block), self.mask_token_id, dtype=torch.int64, device=self.device)
            block[:, 0] = root
            drafted = self.drafts(batch, self._draft_hidden(batch, block, positions, slots))
            chain = torch.cat([root.unsqueeze(1), drafted[:, : width - 1].to(torch.int64)], dim=1)

            batch.out_cache_loc = slots[:, :width].flatten()
            batch.input_ids = chain.flatten()
            batch.forward_mode = ForwardMode.TARGET_VERIFY
            batch.spec_info = DFlashVerifyInput(draft_token=batch.input_ids, positions=positions[:, :width].flatten(),
                                                draft_token_num=width, custom_mask=None,
                                                capture_hidden_mode=CaptureHiddenMode.FULL)
            out = self.forward_target(batch, is_verify=True)
            logits = out.logits_output
            predicted = torch.argmax(logits.next_token_logits, dim=-1).view(bs, width)
            commit = accept_greedy(chain, predicted)
            self._write_context_kv(logits.hidden_states, slots[:, :width].flatten(), positions[:, :width].flatten())
            logits.hidden_states = None
            batch.forward_mode = ForwardMode.DECODE
            return step_result(logits, predicted, commit, batch.seq_lens + commit.to(batch.seq_lens.dtype),
                               out.can_run_cuda_graph, width)

        def _draft_hidden(self, batch, block, positions, slots):
            """The draft's hidden states at the block's positions 1.. ``(bs, B - 1, hidden_size)``:
            one TARGET_VERIFY forward of the block on the draft runner."""
            bs = block.shape[0]
            host_lens = (batch.seq_lens_cpu if getattr(batch, "seq_lens_cpu", None) is not None
                         else batch.seq_lens.cpu()).to(torch.int32) + self.block  # a host bound of what is read
            forward_batch = ForwardBatch(
                forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=block.flatten(),
                req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, out_cache_loc=slots.flatten(),
                seq_lens_sum=int(host_lens.sum()), seq_lens_cpu=host_lens, positions=positions.flatten(),
                input_embeds=self.embedding(block).view(bs * self.block, -1),
                spec_algorithm=self.draft_runner.spec_algorithm, spec_info=self.block_input,
                capture_hidden_mode=CaptureHiddenMode.NULL)
            with torch.inference_mode():
                hidden = self.draft_runner.forward(forward_batch).logits_output.hidden_states
            return hidden.view(bs, self.block, -1)[:, 1:, :]

        def _write_context_kv(self, target_hidden, cache_loc, positions):
            """The draft's K/V at ``cache_loc`` for context tokens at ``positions``,
            from the target's captured hidden states of them (``project_target_hidden``,
            then each draft layer's K/V projection, K norm and RoPE: SGLang's
            DFlash draft model's own methods, or its fused writer)."""
            if target_hidden is None or target_hidden.numel() == 0:
                return
            pool = self.draft_runner.token_to_kv_pool
            model = self.draft_model
            with torch.inference_mode():
                context = model.project_target_hidden(target_hidden)
                if self.fused is not None:
                    def write(index, k, v):
                        attn = model.layers[index].self_attn.attn
                        pool.set_kv_buffer(attn, cache_loc, k, v, attn.k_scale, attn.v_scale)

                    self.fused.materialize(ctx_hidden=context, positions=positions, write_layer_kv=write)
                    return
                prepare = getattr(model, "prepare_context_hidden_for_kv", None)  # 0.5.16+
                for layer in model.layers:
                    attn = layer.self_attn
                    k, v = attn.kv_proj_only(prepare(layer, context) if prepare is not None else context)
                    k = attn.apply_k_rope(positions, attn.apply_k_norm(k))
                    pool.set_kv_buffer(attn.attn, cache_loc, k.view(-1, attn.num_kv_heads, attn.head_dim),
                                       v.view(-1, attn.num_kv_heads, attn.head_dim), attn.attn.k_scale,
                                       attn.attn.v_scale)

    return DraftBlockSpecWorker


__all__ = ["AcceptanceSettings", "ModelFreeDraftWorker", "ModelFreeRunner", "StepWidths", "WidthSchedule",
           "WidthsByAcceptance", "WidthsByBatchSize", "WorkerContract", "accept_greedy", "cache_locations",
           "carried_rows", "chain_worker_base", "check_worker", "contract", "draft_block_worker_base",
           "draft_model_worker_base", "greedy_refusal", "idle_result", "policy_for", "refuse_unservable",
           "require_block_args", "require_chain_release", "step_result", "target_vocab_size", "verify_positions",
           "worker_base"]
