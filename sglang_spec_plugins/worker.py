"""The API for writing a plugin's worker: the one module drafter authors import.

A plugin's ``worker_factory`` returns a class built on :func:`worker_base`;
SGLang instantiates it and calls ``forward_batch_generation(batch, **kwargs)``
every step. Inside the worker:

* :func:`policy_for` gives the algorithm's policy: its plugins.toml
  ``settings`` and the widths SGLang's runners and backends get;
* :class:`StepWidths` gives each decode step's verify width (one width, or
  widths by batch size) and the largest width;
* :func:`contract` and :func:`check_worker` say what the installed release
  asks of a worker class (the kit and ``check`` run them);
* :class:`WidthsByBatchSize` and :class:`WidthSchedule` are what
  :class:`StepWidths` schedules with, pure, for a worker's own tests.

Importing this module does not import SGLang; the functions do.
"""

from __future__ import annotations

from typing import Any

from .engine.algorithm import policy_for, required_policy
from .engine.facts import configured_ndt
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
            mistake = ("StepWidths was given the worker's model-free draft runner (worker_base()'s model_runner, which "
                       "runs no TARGET_VERIFY); give it the runner that verifies: StepWidths(self.target_worker.model_runner)")
            try:  # the worker's algorithm names its plugin and distribution
                owner = policy_for(model_runner.server_args) if model_runner.server_args is not None else None
            except EngineError:
                owner = None
            raise owner.fault(mistake) if owner is not None else EngineError(mistake)
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
           "WorkerContract", "check_worker", "contract", "policy_for", "worker_base"]
