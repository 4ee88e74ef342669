"""Each decode step's verify width for a plugin worker: :class:`StepWidths` (its docstring says how)."""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Tuple

from ..engine.algorithm import policy_for, required_policy
from ..engine.facts import configured_ndt, steps_in_flight
from ..engine.step_times import HostTimer, StepClock, agreed, timer_for
from ..engine.worker_base import ModelFreeRunner
from ..errors import EngineError, is_plain_int
from ..widths_by_acceptance import WidthsByAcceptance
from ..widths_by_batch_size import padded_size


logger = logging.getLogger("sglang_spec_plugins")

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
      its plugin declares ``AlgorithmSpec(picks_widths=...)`` (a width passed
      beside an acceptance controller is logged once: the controller then does not choose);
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
    the next ``at``, once the scheduler has waited for the step's tokens (under
    SGLang's overlap scheduler, whose next step starts while this one runs, at
    the ``at`` after: ``engine.facts.steps_in_flight`` says which). A step is timed by its width and its
    size: the captured size whose graph it replays at that width, or its batch size where it runs eagerly
    (SGLang's ``disable_padding`` too); the controller compares widths timed at one size
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
        self._recorded: List[Tuple[Optional[int], int, int, Any, int]] = []  # (bucket, width, size, count,
        # requests) of the steps recorded and not learnt yet, oldest first
        # under SGLang's overlap scheduler a step starts while the step before it is still on the device: the
        # controller learns each step one step later there, so that no step waits for the one before it
        self._in_flight = steps_in_flight(getattr(model_runner, "server_args", None))
        self._graphs: Any = None  # the runner's decode CUDA-graph runner, with the schedule
        self._said_undeclared = False  # logged once: a width of the worker's own beside the controller
        self._replay_size: Any = None

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
            if self._controller is not None and not self._said_undeclared:
                self._said_undeclared = True
                logger.warning("%s", self._policy.fault(
                    f"the worker chose width {width} itself (StepWidths.at({batch_size}, width={width})), so the "
                    "acceptance controller plugins.toml widths_by_acceptance turns on does not choose; a worker that "
                    "picks its widths declares AlgorithmSpec(picks_widths=...), and check and the start-up check then "
                    "refuse widths_by_acceptance"))
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
        times it by: the captured size whose graph at that width it replays
        (:func:`~..patches.widths_by_batch_size.replay_size`), else (eager) its own batch size."""
        if schedule is None or schedule.capture_sizes is None:
            return batch_size
        size = self._replay_size(self._graphs, batch_size, width)
        return batch_size if size is None else size

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
        Nothing is read back from the GPU here: the controller learns at the next ``at`` (overlapped: the one after)."""
        if self._controller is None or self._step is None:
            return
        (bucket, width, size), self._step = self._step, None
        count = self._timer.keep(accept_lens.sum()) if hasattr(accept_lens, "sum") else sum(accept_lens)
        self._clock.stop(bucket, width, size)
        self._recorded.append((bucket, width, size, count, len(accept_lens)))

    def _learn(self) -> None:
        """Hand the controller the steps ``record`` took that the device has finished (each, when it is due,
        with its decision): every one without overlap, all but the last under it. The number of steps learnt
        depends on the scheduler's mode alone, so every tensor-parallel rank decides at the same step."""
        while len(self._recorded) > self._in_flight:
            bucket, width, size, count, requests = self._recorded.pop(0)
            self._clock.settle(len(self._recorded))
            controller = self._controller
            controller.observe(bucket, width, int(count), requests, size)
            if controller.due(bucket):
                controller.decide(bucket, agreed(self._runner, self._clock.take(bucket, len(self._recorded))))

    def _resolved(self):
        if self._schedule is _UNRESOLVED:
            from ..patches.widths_by_batch_size import decode_graphs, replay_size, schedule_for

            self._schedule = schedule_for(self._runner, self._ndt, self._hold_steps)
            self._graphs, self._replay_size = decode_graphs(self._runner), replay_size
        return self._schedule
