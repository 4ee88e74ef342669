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
  worker: the whole draft-verify-accept step for every request kind the
  release serves (greedy, sampled, penalised, logprob and grammar requests,
  :mod:`~sglang_spec_plugins.engine.request_kinds`), under SGLang's overlap
  scheduler or without it, with a drafter's faults contained, the drafter
  supplied by a subclass's ``drafts`` (:func:`accept_greedy` the greedy
  acceptance rule, :func:`require_chain_release` the release check its
  plugin's ``validate_server_args`` makes);
* :func:`draft_model_worker_base` is the base of a worker with its own draft
  model (it builds the draft worker and runner), and
  :func:`draft_block_worker_base` the whole step of a DFLASH-style
  block drafter on it (a subclass may replace how the block's drafts are
  read off the draft's hidden states; :func:`require_block_args` its
  plugin's ``validate_server_args``);
* :func:`target_vocab_size` reads the target's vocabulary size off its
  ``config.json`` (for a ``validate_server_args`` that checks token ids
  before any weight loads);
* :func:`step_result` (and :func:`idle_result`) is what a step returns to
  the scheduler, :func:`verify_positions` and :func:`cache_locations` where a
  chain's tokens and KV go (:mod:`sglang_spec_plugins.engine.step_output`);
  :func:`refusal` says why the release cannot serve a request exactly and
  :func:`refuse_unservable` refuses such requests one by one
  (:mod:`sglang_spec_plugins.engine.request_kinds`).

Importing this module does not import SGLang; the functions do. It re-exports:
the step bases live in ``chain_step`` and ``block_step``, :class:`StepWidths` in
``step_widths`` and :func:`target_vocab_size` in ``target_config`` (drafter code
imports this module, not those).
"""

from __future__ import annotations

from ..engine.algorithm import policy_for
from ..engine.draft_worker import draft_model_worker_base
from ..engine.chain_sampling import accept_greedy
from ..engine.request_kinds import refusal, refuse_unservable
from ..engine.step_output import cache_locations, carried_rows, idle_result, step_result, verify_positions
from ..engine.worker_base import ModelFreeDraftWorker, ModelFreeRunner, worker_base
from ..engine.worker_contract import WorkerContract, check_worker, contract
from ..widths_by_acceptance import AcceptanceSettings, WidthsByAcceptance
from ..widths_by_batch_size import WidthSchedule, WidthsByBatchSize
from .block_step import draft_block_worker_base, require_block_args
from .chain_step import chain_worker_base, require_chain_release
from .step_widths import StepWidths
from .target_config import target_vocab_size

__all__ = ["AcceptanceSettings", "ModelFreeDraftWorker", "ModelFreeRunner", "StepWidths", "WidthSchedule",
           "WidthsByAcceptance", "WidthsByBatchSize", "WorkerContract", "accept_greedy", "cache_locations",
           "carried_rows", "chain_worker_base", "check_worker", "contract", "draft_block_worker_base",
           "draft_model_worker_base", "idle_result", "policy_for", "refusal", "refuse_unservable",
           "require_block_args", "require_chain_release", "step_result", "target_vocab_size", "verify_positions",
           "worker_base"]
