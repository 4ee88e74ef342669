"""The API for writing a plugin's worker: the one module drafter authors import.

A plugin's ``worker_factory`` returns a class built on :func:`worker_base`
(or, for a worker with its own draft model, :func:`draft_model_worker_base`);
SGLang instantiates it and calls ``forward_batch_generation(batch, **kwargs)``
every step. Inside the worker:

* :func:`policy_for` gives the algorithm's policy: its plugins.toml
  ``settings`` and the widths SGLang's runners and backends get;
* :class:`StepWidths` gives each decode step's verify width (one width, or
  widths by batch size) and the largest width;
* :func:`contract` and :func:`check_worker` say what the installed release
  asks of a worker class (the kit and ``check`` run them);
* :class:`WidthsByBatchSize` and :class:`WidthSchedule` are what
  :class:`StepWidths` schedules with, pure, for a worker's own tests;
* :func:`step_result` (and :func:`idle_result`) is what a greedy-verifying
  step returns to the scheduler, :func:`verify_positions` and
  :func:`cache_locations` where a chain's tokens and KV go, and
  :func:`refuse_unservable` refuses, request by request, what greedy
  verification cannot serve exactly (:mod:`.engine.greedy_step`).

Importing this module does not import SGLang; the functions do.
"""

from __future__ import annotations

from typing import Any

from .engine.algorithm import policy_for, required_policy
from .engine.draft_worker import draft_model_worker_base
from .engine.facts import configured_ndt
from .engine.greedy_step import (cache_locations, carried_rows, greedy_refusal, idle_result, refuse_unservable,
                                 step_result, verify_positions)
from .engine.worker_base import ModelFreeDraftWorker, ModelFreeRunner, worker_base
from .engine.worker_contract import WorkerContract, check_worker, contract
from .errors import EngineError
from .widths_by_batch_size import WidthSchedule, WidthsByBatchSize

_UNRESOLVED = object()


class StepWidths:
    """Each decode step's verify width, for a plugin worker; widths by batch size
    (plugins.toml ``widths_by_batch_size`` or the plugin's ``sgl_spec_widths_by_batch_size``)
    where the algorithm has them, else its one width. In the worker::

        self.widths = StepWidths(self.target_worker.model_runner)   # __init__
        width = self.widths.at(batch.batch_size())                   # every decode step, before drafting

    ``model_runner`` is the runner that runs the worker's TARGET_VERIFY (the
    target's; a verifying draft runner for ``is_draft_worker`` widths). ``at``
    is asked once per step (it keeps the hysteresis state): it returns the
    width to draft and verify, which the CUDA-graph runner replays at (see
    :class:`~.widths_by_batch_size.WidthSchedule`; ``hold_steps`` its hysteresis).
    ``maximum`` is the largest width (what SGLang sizes buffers and reserves KV
    for): a fixed row stride for what a worker carries between steps. The
    schedule is resolved at the first ``at``, once the runner's decode CUDA
    graphs are captured. Imports SGLang; EngineError for a runner whose
    algorithm is not a plugin algorithm."""

    def __init__(self, model_runner: Any, hold_steps: int = 0):
        if isinstance(model_runner, ModelFreeRunner):
            raise EngineError("StepWidths(model_runner): this is the model-free draft side's runner, which runs no "
                              "TARGET_VERIFY; pass the target's, self.target_worker.model_runner")
        algorithm = getattr(model_runner, "spec_algorithm", None)
        policy = required_policy(algorithm, f"StepWidths: the runner's algorithm {algorithm!r}")
        self.maximum: int = policy.width(configured_ndt(model_runner), bool(model_runner.is_draft_worker))
        self._runner, self._hold_steps = model_runner, hold_steps
        self._schedule: Any = _UNRESOLVED  # then a WidthSchedule, or None: one width

    def at(self, batch_size: int) -> int:
        """The width of this step, for a batch of ``batch_size`` requests."""
        if self._schedule is _UNRESOLVED:
            from .patches.widths_by_batch_size import schedule_for

            self._schedule = schedule_for(self._runner, self._hold_steps)
        return self.maximum if self._schedule is None else self._schedule.width(batch_size)


__all__ = ["ModelFreeDraftWorker", "ModelFreeRunner", "StepWidths", "WidthSchedule", "WidthsByBatchSize",
           "WorkerContract", "cache_locations", "carried_rows", "check_worker", "contract", "draft_model_worker_base",
           "greedy_refusal", "idle_result", "policy_for", "refuse_unservable", "step_result", "verify_positions",
           "worker_base"]
