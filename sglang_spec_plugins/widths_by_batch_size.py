"""Verify widths by batch size: buckets, graph sizes and hysteresis (pure; no SGLang).

An algorithm may verify a different number of tokens per request depending on
how many requests a step holds: few requests leave the GPU idle enough that a
wide verify is nearly free, many make every extra token cost. The widths come
as *buckets*: ``{1: 16, 8: 8, 64: 4}`` means batches of 1-7 requests verify 16
tokens each, 8-63 verify 8, 64 and more verify 4. A bucket may instead give a
set of widths a step of that size may choose from (every request of a step
shares one): ``{1: [4, 8, 16], 8: [2, 4, 8], 64: [1, 2]}``; who chooses is the
worker (:class:`~sglang_spec_plugins.worker.StepWidths`: the drafter itself,
or the acceptance controller, :mod:`.widths_by_acceptance`), and without a
choice a step takes its bucket's largest width. The widths of every bucket
together are the algorithm's *declared* widths: no TARGET_VERIFY step runs at
another.

Under CUDA graphs SGLang captures one graph per batch size of its capture list
and replays a batch on the graph of the smallest captured size that holds it
(a batch of 5 runs on the graph captured for 8). Each size is captured once
per width of *its* bucket (:func:`graph_pairs`: the graphs, and with them the
memory they hold, are bounded by the table), so the width a step may use is
fixed by the graphs it can replay: :func:`graph_size` says which captured
size serves a batch at a width (None: it runs eagerly), and
:class:`WidthSchedule` (the worker's side) picks the bucket of the size a
batch pads to, so worker and graph always agree.

Hysteresis (:class:`WidthSchedule`, ``hold_steps``): a batch that grows into a
larger-batch bucket takes its (smaller) widths at once, since a wide verify of
a large batch is the expensive mistake; a batch that shrinks into a
smaller-batch bucket keeps the current bucket for ``hold_steps`` more steps, so
that a batch dipping below a boundary for a step or two (requests finishing
while new ones queue) does not flip widths. While holding, the batch pads to
the smallest captured size whose graph has the width used (a batch of 30 held
at bucket 64's width runs on the graph captured for 64); no other graph is
needed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import is_plain_int


class WidthsByBatchSizeError(ValueError):
    """Buckets that are not a mapping of batch sizes from 1 up to widths >= 1
    (or non-empty sets of them)."""


@dataclass(frozen=True)
class WidthsByBatchSize:
    """Widths by batch size: ``bounds[i]`` is the smallest batch size of
    bucket ``i`` (ascending, the first is 1), ``widths[i]`` the widths a step
    of that bucket may verify at (ascending, at least one)."""

    bounds: Tuple[int, ...]
    widths: Tuple[Tuple[int, ...], ...]

    @classmethod
    def parse(cls, value: Any) -> "WidthsByBatchSize":
        """Buckets from a mapping ``{min_batch_size: width or [widths]}``; keys
        may be ints or decimal strings (TOML keys are strings). Raises
        WidthsByBatchSizeError saying what is wrong with ``value``."""
        if not isinstance(value, Mapping) or not value:
            raise WidthsByBatchSizeError(f"expected a non-empty mapping {{min_batch_size: width}}, got {value!r}")
        pairs: Dict[int, Tuple[int, ...]] = {}
        for key, widths in value.items():
            size = _size_key(key)
            if size is None:
                raise WidthsByBatchSizeError(f"key {key!r} is not a batch size (a positive integer)")
            if size in pairs:
                raise WidthsByBatchSizeError(f"batch size {size} is given twice")
            pairs[size] = _widths_value(size, widths)
        if 1 not in pairs:
            raise WidthsByBatchSizeError(f"the smallest bucket must start at batch size 1 (got {min(pairs)}), "
                                         "so that every batch has a width")
        bounds = tuple(sorted(pairs))
        return cls(bounds, tuple(pairs[b] for b in bounds))

    def bucket(self, batch_size: int) -> int:
        """Index of the bucket ``batch_size`` falls in."""
        return max(0, bisect.bisect_right(self.bounds, batch_size) - 1)

    def widths_at(self, batch_size: int) -> Tuple[int, ...]:
        """The widths of the bucket ``batch_size`` falls in, ascending."""
        return self.widths[self.bucket(batch_size)]

    def at(self, batch_size: int) -> int:
        """The width a step of ``batch_size`` takes when nobody chooses: its bucket's largest."""
        return self.widths_at(batch_size)[-1]

    @property
    def candidates(self) -> Tuple[int, ...]:
        """Every width a step may use (the declared widths), ascending."""
        return tuple(sorted({w for widths in self.widths for w in widths}))

    @property
    def maximum(self) -> int:
        """The largest width (sizes capture buffers)."""
        return self.candidates[-1]

    @property
    def chooses(self) -> bool:
        """Whether some bucket gives a step more than one width to choose from."""
        return any(len(widths) > 1 for widths in self.widths)

    def as_plain(self) -> Dict[str, Union[int, List[int]]]:
        """``{"min_batch_size": width or [widths]}`` (JSON and TOML keys are strings)."""
        return {str(b): _plain(w) for b, w in zip(self.bounds, self.widths)}

    def __str__(self) -> str:
        return "{" + ", ".join(f"{b} = {_plain(w)}" for b, w in zip(self.bounds, self.widths)) + "}"


def _plain(widths: Tuple[int, ...]) -> Union[int, List[int]]:
    return widths[0] if len(widths) == 1 else list(widths)


def _size_key(key: Any) -> Optional[int]:
    if is_plain_int(key):
        return key if key >= 1 else None
    if type(key) is str and key.isascii() and key.isdigit() and int(key) >= 1:
        return int(key)
    return None


def _widths_value(size: int, value: Any) -> Tuple[int, ...]:
    """A bucket's widths: one positive int, or a non-empty list of distinct ones."""
    many = isinstance(value, (list, tuple))
    items = list(value) if many else [value]
    what = f"widths for batch size {size}" if many else f"width for batch size {size}"
    if many and not items:
        raise WidthsByBatchSizeError(f"{what} must not be empty")
    for width in items:
        if not is_plain_int(width) or width < 1:
            raise WidthsByBatchSizeError(f"{what} must be {'positive integers' if many else 'a positive integer'}, "
                                         f"got {width!r}")
    if len(set(items)) != len(items):
        raise WidthsByBatchSizeError(f"{what} repeat a width: {items!r}")
    return tuple(sorted(items))


def padded_size(batch_size: int, capture_sizes: Optional[Sequence[int]]) -> Optional[int]:
    """The smallest captured size holding ``batch_size`` (how SGLang pads a
    replay); None when there are no graphs or the batch is above them all."""
    if not capture_sizes:
        return None
    ordered = sorted(capture_sizes)
    i = bisect.bisect_left(ordered, batch_size)
    return ordered[i] if i < len(ordered) else None


def graph_sizes(buckets: WidthsByBatchSize, width: int, capture_sizes: Iterable[int]) -> Tuple[int, ...]:
    """The captured sizes with a graph at ``width`` (those whose bucket has it)."""
    return tuple(sorted(s for s in capture_sizes if width in buckets.widths_at(s)))


def graph_size(buckets: WidthsByBatchSize, batch_size: int, width: int, capture_sizes: Iterable[int]) -> Optional[int]:
    """The captured size a batch of ``batch_size`` requests verifying ``width``
    tokens each replays on: the smallest captured size >= the batch with a
    graph at that width; None: no graph serves it (the step runs eagerly)."""
    return padded_size(batch_size, graph_sizes(buckets, width, capture_sizes))


def graph_pairs(buckets: WidthsByBatchSize, capture_sizes: Iterable[int]) -> Tuple[Tuple[int, int], ...]:
    """Every ``(size, width)`` CUDA graph captured: each captured size once per
    width of its bucket, widest first (the order they are captured in)."""
    sizes = sorted(set(capture_sizes), reverse=True)
    return tuple((s, w) for w in reversed(buckets.candidates) for s in sizes if w in buckets.widths_at(s))


def graph_rows(pairs: Iterable[Tuple[int, int]]) -> int:
    """Token rows the captured graphs' outputs hold together (each graph keeps
    its own logits, ``size * width`` rows of the vocabulary): what extra
    widths per size cost in GPU memory, times ``vocab_size * 4`` bytes."""
    return sum(size * width for size, width in pairs)


def graph_cost(buckets: WidthsByBatchSize, capture_sizes: Iterable[int], vocab_size: Optional[int] = None) -> Dict[str, Any]:
    """What the CUDA graphs of ``buckets`` over ``capture_sizes`` hold, for
    ``check`` and the benchmark: ``graphs`` (pairs), ``logit_rows`` and, with
    ``vocab_size``, ``logit_bytes`` (float32 logits, what each graph's output
    keeps in the graph memory pool; not counted: the activations the graphs
    share, and flashinfer's plan workspace, 8 MiB of GPU and 8 MiB of pinned
    host memory per graph, flashinfer 0.6's ``BatchPrefillWithPagedKVCacheWrapper``)."""
    pairs = graph_pairs(buckets, capture_sizes)
    cost: Dict[str, Any] = {"capture_sizes": sorted(set(capture_sizes)), "graphs": len(pairs), "logit_rows": graph_rows(pairs)}
    if vocab_size is not None:
        cost["logit_bytes"] = cost["logit_rows"] * vocab_size * 4
    return cost


class WidthSchedule:
    """The bucket (and default width) of each step, with hysteresis (see the module doc).

    ``capture_sizes``: the batch sizes SGLang captured graphs for (None:
    eager serving). Call :meth:`bucket` (or :meth:`width`) once per step, with
    the step's batch size, before drafting.
    """

    def __init__(self, buckets: WidthsByBatchSize, capture_sizes: Optional[Sequence[int]] = None, hold_steps: int = 0):
        if not is_plain_int(hold_steps) or hold_steps < 0:
            raise WidthsByBatchSizeError(f"hold_steps must be a non-negative integer, got {hold_steps!r}")
        self.buckets = buckets
        self.capture_sizes = tuple(sorted(capture_sizes)) if capture_sizes else None
        self.hold_steps = hold_steps
        self._bucket: Optional[int] = None  # the bucket in use
        self._below = 0  # consecutive steps the batch wanted a smaller-batch bucket

    def bucket(self, batch_size: int) -> int:
        """The bucket this step uses (index into ``buckets.widths``)."""
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        padded = padded_size(batch_size, self.capture_sizes)  # the size whose graph it replays, else its own
        wanted = self.buckets.bucket(padded if padded is not None else batch_size)
        current = self._bucket
        if current is None or wanted >= current or not self._can_hold(batch_size, current):
            self._bucket, self._below = wanted, 0
        else:
            self._below += 1
            if self._below > self.hold_steps:
                self._bucket, self._below = wanted, 0
        return self._bucket

    def width(self, batch_size: int) -> int:
        """The width this step takes when nobody chooses: its bucket's largest."""
        return self.buckets.widths[self.bucket(batch_size)][-1]

    def _can_hold(self, batch_size: int, bucket: int) -> bool:
        """Whether a batch of this size can keep ``bucket``'s widths: always when
        eager; under graphs, only if captured graphs of each of them hold it."""
        if self.capture_sizes is None or batch_size > self.capture_sizes[-1]:
            return True
        return all(graph_size(self.buckets, batch_size, w, self.capture_sizes) is not None
                   for w in self.buckets.widths[bucket])
