"""Verify widths by batch size: buckets, graph sizes and hysteresis (pure; no SGLang).

An algorithm may verify a different number of tokens per request depending on
how many requests a step holds: few requests leave the GPU idle enough that a
wide verify is nearly free, many make every extra token cost. The widths come
as *buckets*: ``{1: 16, 8: 8, 64: 4}`` means batches of 1-7 requests verify 16
tokens each, 8-63 verify 8, 64 and more verify 4.

Under CUDA graphs SGLang captures one graph per batch size of its capture list
and replays a batch on the graph of the smallest captured size that holds it
(a batch of 5 runs on the graph captured for 8). Each graph is captured at the
width of *its* size's bucket, so the width a step may use is fixed by the
graph it replays: :func:`graph_size` says which captured size serves a batch
at a width, and :class:`WidthSchedule` (the worker's side) picks the width of
the size a batch pads to, so worker and graph always agree.

Hysteresis (:class:`WidthSchedule`, ``hold_steps``): a batch that grows into a
larger-batch bucket takes its (smaller) width at once, since a wide verify of
a large batch is the expensive mistake; a batch that shrinks into a
smaller-batch bucket keeps the current width for ``hold_steps`` more steps, so
that a batch dipping below a boundary for a step or two (requests finishing
while new ones queue) does not flip widths. While holding, the batch pads to
the smallest captured size whose graph has the held width (a batch of 30 held
at bucket 64's width runs on the graph captured for 64); no other graph is
needed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from .errors import is_plain_int


class WidthsByBatchSizeError(ValueError):
    """Buckets that are not a mapping of batch sizes from 1 up to widths >= 1."""


@dataclass(frozen=True)
class WidthsByBatchSize:
    """Widths by batch size: ``bounds[i]`` is the smallest batch size of
    bucket ``i`` (ascending, the first is 1), ``widths[i]`` its width."""

    bounds: Tuple[int, ...]
    widths: Tuple[int, ...]

    @classmethod
    def parse(cls, value: Any) -> "WidthsByBatchSize":
        """Buckets from a mapping ``{min_batch_size: width}``; keys may be ints or
        decimal strings (TOML keys are strings). Raises WidthsByBatchSizeError
        saying what is wrong with ``value``."""
        if not isinstance(value, Mapping) or not value:
            raise WidthsByBatchSizeError(f"expected a non-empty mapping {{min_batch_size: width}}, got {value!r}")
        pairs: Dict[int, int] = {}
        for key, width in value.items():
            size = _size_key(key)
            if size is None:
                raise WidthsByBatchSizeError(f"key {key!r} is not a batch size (a positive integer)")
            if size in pairs:
                raise WidthsByBatchSizeError(f"batch size {size} is given twice")
            if not is_plain_int(width) or width < 1:
                raise WidthsByBatchSizeError(f"width for batch size {size} must be a positive integer, got {width!r}")
            pairs[size] = width
        if 1 not in pairs:
            raise WidthsByBatchSizeError(f"the smallest bucket must start at batch size 1 (got {min(pairs)}), "
                                    "so that every batch has a width")
        bounds = tuple(sorted(pairs))
        return cls(bounds, tuple(pairs[b] for b in bounds))

    def bucket(self, batch_size: int) -> int:
        """Index of the bucket ``batch_size`` falls in."""
        return max(0, bisect.bisect_right(self.bounds, batch_size) - 1)

    def at(self, batch_size: int) -> int:
        """The width of the bucket ``batch_size`` falls in."""
        return self.widths[self.bucket(batch_size)]

    @property
    def candidates(self) -> Tuple[int, ...]:
        """Every width a step may use, ascending."""
        return tuple(sorted(set(self.widths)))

    @property
    def maximum(self) -> int:
        """The largest width (sizes capture buffers)."""
        return max(self.widths)

    def as_plain(self) -> Dict[str, int]:
        """``{"min_batch_size": width}`` (JSON and TOML keys are strings)."""
        return {str(b): w for b, w in zip(self.bounds, self.widths)}

    def __str__(self) -> str:
        return "{" + ", ".join(f"{b} = {w}" for b, w in zip(self.bounds, self.widths)) + "}"


def _size_key(key: Any) -> Optional[int]:
    if is_plain_int(key):
        return key if key >= 1 else None
    if type(key) is str and key.isascii() and key.isdigit() and int(key) >= 1:
        return int(key)
    return None


def padded_size(batch_size: int, capture_sizes: Optional[Sequence[int]]) -> Optional[int]:
    """The smallest captured size holding ``batch_size`` (how SGLang pads a
    replay); None when there are no graphs or the batch is above them all."""
    if not capture_sizes:
        return None
    ordered = sorted(capture_sizes)
    i = bisect.bisect_left(ordered, batch_size)
    return ordered[i] if i < len(ordered) else None


def graph_sizes(buckets: WidthsByBatchSize, width: int, capture_sizes: Iterable[int]) -> Tuple[int, ...]:
    """The captured sizes whose graph is captured at ``width``."""
    return tuple(sorted(s for s in capture_sizes if buckets.at(s) == width))


def graph_size(buckets: WidthsByBatchSize, batch_size: int, width: int, capture_sizes: Iterable[int]) -> Optional[int]:
    """The captured size a batch of ``batch_size`` requests verifying ``width``
    tokens each replays on: the smallest captured size >= the batch whose
    graph has that width; None: no graph serves it (the step runs eagerly)."""
    return padded_size(batch_size, graph_sizes(buckets, width, capture_sizes))


class WidthSchedule:
    """The width of each step, with hysteresis (see the module doc).

    ``capture_sizes``: the batch sizes SGLang captured graphs for (None:
    eager serving). Call :meth:`width` once per step, with the step's batch
    size, before drafting; it returns the width to draft and verify.
    """

    def __init__(self, buckets: WidthsByBatchSize, capture_sizes: Optional[Sequence[int]] = None, hold_steps: int = 0):
        if not is_plain_int(hold_steps) or hold_steps < 0:
            raise WidthsByBatchSizeError(f"hold_steps must be a non-negative integer, got {hold_steps!r}")
        self.buckets = buckets
        self.capture_sizes = tuple(sorted(capture_sizes)) if capture_sizes else None
        self.hold_steps = hold_steps
        self._bucket: Optional[int] = None  # the bucket in use
        self._below = 0  # consecutive steps the batch wanted a smaller-batch bucket

    def width(self, batch_size: int) -> int:
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
        return self.buckets.widths[self._bucket]

    def _can_hold(self, batch_size: int, bucket: int) -> bool:
        """Whether a batch of this size can keep ``bucket``'s width: always when
        eager; under graphs, only if some captured graph of that width holds it."""
        if self.capture_sizes is None or batch_size > self.capture_sizes[-1]:
            return True
        return graph_size(self.buckets, batch_size, self.buckets.widths[bucket], self.capture_sizes) is not None
