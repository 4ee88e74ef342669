"""The seconds a decode step takes, for the acceptance controller, agreed across tensor-parallel ranks.

:class:`StepClock` times each decode step a worker runs from its
``StepWidths.at`` (before drafting) to its ``StepWidths.record`` (once the
verify's accept counts are on the host): the step's own work, drafting and
the verify forward. The scheduler's time between two steps (a ``record`` to
the next ``at``) is part of every step's cost too, whatever its width; it is
kept as one running mean, each gap counted up to the step's own time (a
longer gap held other work: a prefill, an idle wait).

:func:`agreed` averages per-width seconds over the tensor-parallel ranks of
the model runner (one all-reduce on the CPU group of SGLang's TP group), so
that every rank hands the controller the same numbers; every rank calls it
at the same step, where the controller decides (its step counts are the same
on every rank).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

_GAP_WEIGHT = 0.2


class StepClock:
    """Times the steps between ``start`` and ``stop``, summed per (slot, width) until :meth:`take`."""

    def __init__(self, now=time.perf_counter):
        self._now = now
        self._started: Optional[float] = None
        self._stopped: Optional[float] = None
        self._pending_gap: Optional[float] = None  # since the last stop, up to this step's start
        self._gap: Optional[float] = None  # the running mean
        self._sums: Dict[int, Dict[int, Tuple[float, int]]] = {}

    def start(self) -> None:
        """A step starts now."""
        now = self._now()
        self._pending_gap = None if self._stopped is None else now - self._stopped
        self._started = now

    def stop(self, slot: int, width: int) -> None:
        """The step started last ended now, at ``width`` in ``slot``."""
        if self._started is None:
            return
        now = self._now()
        span = now - self._started
        gap = self._pending_gap
        if gap is not None:
            gap = min(gap, span)
            self._gap = gap if self._gap is None else (1 - _GAP_WEIGHT) * self._gap + _GAP_WEIGHT * gap
        total, count = self._sums.setdefault(slot, {}).get(width, (0.0, 0))
        self._sums[slot][width] = (total + span, count + 1)
        self._started, self._stopped = None, now

    def take(self, slot: int) -> Dict[int, float]:
        """Mean seconds per step of each width ``slot`` ran at since the last
        ``take``, the scheduler's mean gap included; the sums start again."""
        sums = self._sums.pop(slot, {})
        gap = self._gap or 0.0
        return {width: total / count + gap for width, (total, count) in sorted(sums.items())}


def agreed(model_runner: Any, seconds: Dict[int, float]) -> Dict[int, float]:
    """``seconds`` averaged over the model runner's tensor-parallel ranks (as
    they are where there is one rank). Every rank calls it with the same keys."""
    group = tp_group(model_runner)
    if group is None or group.world_size <= 1 or not seconds:
        return seconds
    import torch
    import torch.distributed as dist

    widths = sorted(seconds)
    values = torch.tensor([seconds[w] for w in widths], dtype=torch.float64)
    dist.all_reduce(values, group=group.cpu_group)
    return {w: float(v) / group.world_size for w, v in zip(widths, values.tolist())}


def tp_group(model_runner: Any) -> Any:
    """SGLang's tensor-parallel group coordinator of ``model_runner``: its own
    ``tp_group`` (up to 0.5.22), else the runtime context's (0.5.23); None
    where neither is set up (a CPU test without distributed state)."""
    group = getattr(model_runner, "tp_group", None)
    if group is not None:
        return group
    try:
        from sglang.srt.runtime_context import get_parallel

        return get_parallel().tp_group
    except (ImportError, AttributeError, AssertionError, RuntimeError):  # no runtime context, or nothing published
        return None
