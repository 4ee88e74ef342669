"""The seconds a decode step takes, for the acceptance controller, agreed across tensor-parallel ranks.

:class:`StepClock` times each decode step a worker runs from its
``StepWidths.at`` (before drafting) to its ``StepWidths.record`` (after the
verify): the step's own work, drafting and the verify forward. The scheduler's
time from a ``record`` to the next ``at`` (taking in the step's tokens, which
grows with the tokens it committed) is part of the cost of the step before it:
kept as a running mean per (slot, size, width) of that step, each gap counted up
to the step's own time (a longer gap held other work: a prefill, an idle wait).
A (size, width) whose steps have no gap after them yet takes the mean of all gaps.

A step's *size* is what its cost scales with besides its width: the batch size
of the CUDA graph it replays (a slot of 64-127 requests replays the graph of 64
or of 128), or its own batch size where it runs eagerly (``StepWidths.at`` works
it out). Steps are summed per (slot, size, width), and :meth:`StepClock.take`
hands a slot's seconds keyed by (size, width): a width timed at one size is
never averaged with, nor compared against, the same width at another.

A clock reads its times through a timer. :class:`HostTimer` reads a host
clock at each mark: right where the host has waited for the step's work (a
CPU, or a test's own clock). :class:`DeviceTimer` puts an event on the
current CUDA stream at each mark, so that marking never makes the host wait
for the GPU in the middle of a step; the seconds between two marks are read
later (:meth:`StepClock.settle`, at a later step's ``at``), once the
scheduler has waited for the step's tokens and the events have passed: under
SGLang's overlap scheduler the step before is still on the GPU when the next
one starts, so a step is read one step later there (``pending``).

:func:`agreed` averages the seconds per (size, width) over the tensor-parallel ranks of
the model runner (one all-reduce on the CPU group of SGLang's TP group), so
that every rank hands the controller the same numbers; every rank calls it
at the same step, where the controller decides (its step counts are the same
on every rank).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

_GAP_WEIGHT = 0.2
K = TypeVar("K")


class HostTimer:
    """Marks read from ``now`` (seconds) when they are set."""

    def __init__(self, now: Callable[[], float] = time.perf_counter):
        self._now = now

    def mark(self) -> float:
        return self._now()

    def seconds(self, first: float, last: float) -> float:
        return last - first

    def keep(self, count: Any) -> int:
        """``count`` (a tensor of one element, or an int) as an int, now."""
        return int(count)


class DeviceTimer:
    """Marks that are events on the current CUDA stream of ``device`` (an index,
    or None: the current device when the timer is made): setting one, or keeping
    a count for later, never waits for the GPU; reading waits for the later mark.
    The stream is asked of ``device`` by index, which skips torch's search for
    the current device at each mark; a count's host buffer and event are reused
    once it has been read."""

    def __init__(self, device: Optional[int] = None):
        import torch

        self._cuda = torch.cuda
        self._device = torch.cuda.current_device() if device is None else device
        self._free: List[Tuple[Any, Any]] = []  # (pinned host buffer, event) of counts already read

    def mark(self) -> Any:
        cuda = self._cuda
        if cuda.is_current_stream_capturing():  # no event may join a graph being captured
            return None
        event = cuda.Event(enable_timing=True)
        event.record(cuda.current_stream(self._device))
        return event

    def seconds(self, first: Any, last: Any) -> Optional[float]:
        """Seconds between two marks (None where one was not set); waits until ``last`` has passed."""
        if first is None or last is None:
            return None
        last.synchronize()
        return first.elapsed_time(last) / 1000.0

    def keep(self, count: Any) -> Any:
        """``count`` (a tensor of one element, or an int) to read later with ``int``: of a
        CUDA tensor, a host copy made in stream order, read once the copy has passed."""
        import torch

        if not isinstance(count, torch.Tensor) or count.device.type != "cuda":
            return int(count)
        host, copied = self._free.pop() if self._free else (None, self._cuda.Event())
        if host is None or host.shape != count.shape or host.dtype != count.dtype:
            host = torch.empty(count.shape, dtype=count.dtype, pin_memory=True)
        host.copy_(count, non_blocking=True)
        copied.record(self._cuda.current_stream(self._device))
        return _Copied(host, copied, self._free)


class _Copied:
    """A count on its way to the host: ``int`` waits for its copy alone, then
    hands the buffer and event back to the timer's free list."""

    __slots__ = ("_host", "_copied", "_free", "_value")

    def __init__(self, host: Any, copied: Any, free: List[Tuple[Any, Any]]):
        self._host, self._copied, self._free, self._value = host, copied, free, None

    def __int__(self) -> int:
        if self._value is None:
            self._copied.synchronize()
            self._value = int(self._host)
            self._free.append((self._host, self._copied))
        return self._value


def timer_for(device: Any) -> Any:
    """The timer of a model runner on ``device``: :class:`DeviceTimer` on a CUDA device, else a host clock."""
    if not str(device).startswith("cuda"):
        return HostTimer()
    import torch

    return DeviceTimer(torch.device(device).index)


class StepClock:
    """Times the steps between ``start`` and ``stop``, summed per (slot, size, width) until :meth:`take`."""

    def __init__(self, timer: Any = None):
        self._timer = timer or HostTimer()
        self._started: Optional[Tuple[Any, Any]] = None  # (this step's start mark, the last step: _last)
        self._last: Any = None  # (end mark, slot, size, width) of the step stopped last
        self._unread: List[Tuple[int, int, int, Any, Any, Any]] = []  # steps stopped whose seconds are not read yet
        self._gap: Optional[float] = None  # the running mean of every gap
        self._gaps: Dict[Tuple[int, int, int], float] = {}  # running mean of the gaps after (slot, size, width)'s steps
        self._sums: Dict[int, Dict[Tuple[int, int], Tuple[float, int]]] = {}  # slot: (size, width): (seconds, steps)

    def start(self) -> None:
        """A step starts now."""
        self._started = (self._timer.mark(), self._last)

    def stop(self, slot: int, width: int, size: int) -> None:
        """The step started last ended now, at ``width`` in ``slot``, of ``size``
        (the batch size of the graph it replayed, or its own when eager)."""
        if self._started is None:
            return
        end = self._timer.mark()
        self._unread.append((slot, size, width, *self._started, end))
        self._started, self._last = None, (end, slot, size, width)

    def settle(self, pending: int = 0) -> None:
        """Read the seconds of the steps stopped since the last call but the last ``pending`` (steps the device
        may still run: under SGLang's overlap scheduler, the step stopped last); a :class:`DeviceTimer` waits
        for each read step's end; a step a mark could not time is left out."""
        read = len(self._unread) - pending
        if read <= 0:
            return
        for slot, size, width, start, previous, end in self._unread[:read]:
            span = self._timer.seconds(start, end)
            if span is None:
                continue
            gap = None if previous is None else self._timer.seconds(previous[0], start)
            if gap is not None:
                gap = min(gap, span)
                self._gap = _running(self._gap, gap)
                self._gaps[previous[1:]] = _running(self._gaps.get(previous[1:]), gap)
            total, count = self._sums.setdefault(slot, {}).get((size, width), (0.0, 0))
            self._sums[slot][(size, width)] = (total + span, count + 1)
        del self._unread[:read]

    def take(self, slot: int, pending: int = 0) -> Dict[Tuple[int, int], float]:
        """Mean seconds per step of each (size, width) ``slot`` ran at since the
        last ``take`` (but the last ``pending`` steps, see :meth:`settle`), the
        mean gap after its steps included, in (size, width) order; the sums start again."""
        self.settle(pending)
        sums = self._sums.pop(slot, {})
        return {key: total / count + self._gaps.get((slot, *key), self._gap or 0.0)
                for key, (total, count) in sorted(sums.items())}


def _running(mean: Optional[float], value: float) -> float:
    return value if mean is None else (1 - _GAP_WEIGHT) * mean + _GAP_WEIGHT * value


def agreed(model_runner: Any, seconds: Dict[K, float]) -> Dict[K, float]:
    """``seconds`` averaged over the model runner's tensor-parallel ranks (as
    they are where there is one rank). Every rank calls it with the same keys
    (the (size, width) pairs of :meth:`StepClock.take`; any keys that sort);
    the values are all-reduced in the keys' sorted order, the same on every rank."""
    group = tp_group(model_runner)
    if group is None or group.world_size <= 1 or not seconds:
        return seconds
    import torch
    import torch.distributed as dist

    keys = sorted(seconds)
    values = torch.tensor([seconds[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(values, group=group.cpu_group)
    return {k: float(v) / group.world_size for k, v in zip(keys, values.tolist())}


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
