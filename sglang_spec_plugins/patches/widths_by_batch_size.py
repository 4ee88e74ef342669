"""The decode CUDA-graph runner at a width per batch size (``sgl_spec_widths_by_batch_size``).

SGLang's runner captures every batch size of its capture list at one width
(``captured_req_width`` from 0.5.16, ``num_tokens_per_bs`` before) and
replays a batch on the graph of the smallest captured size that holds it.
For a plugin algorithm with widths by batch size (:mod:`..widths_by_batch_size`)
these wrappers make that width a function of the graph's batch size, in the
runner's own code, by setting the runner's width attribute around each of
its calls:

* capture (``capture_one_shape`` 0.5.14+, ``capture_one_batch_size`` up to
  0.5.13): the graph of size ``s`` is captured at the width of ``s``'s bucket
  (the runner was sized, buffers and attention-backend graph state, with the
  largest width, the one the algorithm answers SGLang's static question with);
  the whole capture (``capture``) sees every captured size and the largest
  width, also when a replay recaptures (``recapture_if_needed``, when the
  hidden-state mode a batch asks for changes);
* replay (``can_run_graph``/``load_batch``/``execute`` 0.5.14+,
  ``can_run``/``replay_prepare``/``replay`` before): the width is the batch's
  own (tokens / requests, what the worker chose for this step), and the
  runner pads the batch as it always does, over the captured sizes whose
  graph has that width (:func:`~..widths_by_batch_size.graph_size`): a batch of 5 at
  bucket 8's width replays the graph captured for 8; a batch held at a
  larger-batch bucket's width by the worker's hysteresis replays the smallest
  graph of that width that holds it. A batch no graph serves at its width
  runs eagerly (the runner's "can run" answers False); every patched backend
  lays an eager batch out at its own width.

The width changes only between steps: the worker picks it before drafting
(:meth:`~..policy.VerifyPolicy.schedule`), and each replay reads it from the
batch. Built-in algorithms, and plugin algorithms with one width, run the
original methods unchanged. Not served: DP attention (the runner pads to the
largest batch across DP ranks, which the width of one rank's batch does not
follow): ``--enable-dp-attention`` is refused at start-up, while SGLang
resolves its arguments (:func:`~..serving.startup_check.dp_attention_faults`;
the runner's ``require_mlp_tp_gather`` is never True without it).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Optional, Tuple

from ..engine.algorithm import policy_of
from ..engine.facts import configured_ndt
from ..widths_by_batch_size import WidthsByBatchSize, graph_size, graph_sizes
from .unit import Target, Verdict, WrapPatch
from .verify_batch import batch_width

_STATE = "_sglang_spec_plugins_widths"
"""Runner attribute: (buckets, every captured size), computed at first use."""

_NEW = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"  # 0.5.14+
_OLD = "sglang.srt.model_executor.cuda_graph_runner"  # up to 0.5.13


def width_attribute(runner) -> str:
    """The runner's per-request capture width attribute."""
    return "captured_req_width" if hasattr(runner, "captured_req_width") else "num_tokens_per_bs"


def buckets_of(runner) -> Optional[WidthsByBatchSize]:
    """The widths by batch size of the runner's plugin algorithm on its worker; None otherwise."""
    state = vars(runner).get(_STATE)  # (buckets, every captured size)
    if state is None:
        policy = policy_of(runner.model_runner.spec_algorithm)
        buckets = None if policy is None else policy.widths_by_batch_size(runner.speculative_num_draft_tokens,
                                                          bool(runner.model_runner.is_draft_worker))
        state = vars(runner)[_STATE] = (buckets, tuple(sorted(runner.capture_bs)))
    return state[0]


@contextlib.contextmanager
def at_width(runner, width: int, sizes: Optional[Tuple[int, ...]] = None):
    """The runner seen, inside the block, as captured at ``width`` for ``sizes``
    (default: every captured size whose graph has that width)."""
    buckets, everything = vars(runner)[_STATE]
    attr = width_attribute(runner)
    saved = getattr(runner, attr), runner.capture_bs
    setattr(runner, attr, width)
    runner.capture_bs = list(graph_sizes(buckets, width, everything) if sizes is None else sizes)
    try:
        yield
    finally:
        setattr(runner, attr, saved[0])
        runner.capture_bs = saved[1]


def schedule_for(model_runner, hold_steps: int = 0):
    """The per-step width chooser a worker asks before drafting, for the model
    runner that verifies (the target's; the draft runner where the plugin lets
    it verify): :meth:`~..policy.VerifyPolicy.schedule` over the batch sizes its
    decode CUDA-graph runner captured (none: eager). None for an algorithm with
    one width at every batch size, or a built-in one."""
    policy = policy_of(model_runner.spec_algorithm)
    if policy is None:
        return None
    graphs = getattr(model_runner, "decode_cuda_graph_runner", None) or getattr(model_runner, "graph_runner", None)
    sizes = vars(graphs)[_STATE][1] if graphs is not None and _STATE in vars(graphs) else getattr(graphs, "capture_bs", None)
    return policy.schedule(configured_ndt(model_runner), bool(model_runner.is_draft_worker), sizes, hold_steps)


def _seen(view):
    """A wrapper builder: ``view(runner, buckets, *args)`` says how the method
    runs for a runner with widths by batch size: ``(width, sizes)``: with the
    runner seen at them (:func:`at_width`); None: as it is; False: not at all,
    answering False. Runners without widths by batch size run it as it is."""

    def wrapper(original):
        @functools.wraps(original)
        def method(self, *args, **kwargs):
            buckets = buckets_of(self)
            seen = None if buckets is None else view(self, buckets, *args)
            if seen is None:
                return original(self, *args, **kwargs)
            if seen is False:
                return False
            with at_width(self, *seen):
                return original(self, *args, **kwargs)

        return method

    return wrapper


def _every_size(runner) -> Tuple[int, ...]:
    return vars(runner)[_STATE][1]


def _capture_one(runner, buckets, size, *_):
    return buckets.at(size), _every_size(runner)


def _capture_all(runner, buckets, *_):
    return buckets.maximum, _every_size(runner)


def _width(runner, forward_batch) -> Optional[int]:
    """The batch's width (:func:`.verify_batch.batch_width`: None for other modes
    and ragged layouts; a batch that does not split evenly is refused here)."""
    return batch_width(forward_batch, runner.speculative_num_draft_tokens, "decode CUDA-graph runner")


def _replay(runner, buckets, forward_batch, *_):
    width = _width(runner, forward_batch)
    return None if width is None else (width, None)


def _can_run(runner, buckets, forward_batch, *_):
    width = _width(runner, forward_batch)
    if width is None:
        return None
    size = graph_size(buckets, forward_batch.batch_size, width, _every_size(runner))
    if size is None or (getattr(runner, "disable_padding", False) and size != forward_batch.batch_size):
        return False  # no graph captured at this width holds the batch: eager
    return width, None


def _condition(*needles):
    """Apply where the method reads one of ``needles`` (what the wrapper sets around it)."""
    def condition(source: str):
        if any(n in source for n in needles):
            return Verdict.APPLY, ("takes the capture width per batch size and replays a batch on a graph of its width, "
                             "for plugin algorithms with widths by batch size")
        return Verdict.REFUSED, f"unknown shape: reads none of {', '.join(needles)}"

    return condition


def _patch(name: str, summary: str, new: str, old: str, wrapper, *needles) -> WrapPatch:
    return WrapPatch(name=name, summary=summary,
                     alternatives=(Target(_NEW, f"DecodeCudaGraphRunner.{new}"), Target(_OLD, f"CudaGraphRunner.{old}")),
                     condition=_condition(*needles), wrapper=wrapper)


_WIDTH = ("self.captured_req_width", "self.num_tokens_per_bs")
PATCHES = (
    _patch("widths_by_batch_size.capture_all", "decode CUDA-graph capture (and recapture): every captured size",
           "capture", "capture", _seen(_capture_all), "self.capture_bs", "_capture_one_stream", "self._capture()"),
    _patch("widths_by_batch_size.capture", "decode CUDA-graph capture: each batch size at its bucket's width",
           "capture_one_shape", "capture_one_batch_size", _seen(_capture_one), *_WIDTH),
    _patch("widths_by_batch_size.can_run", "decode CUDA-graph replay check: a graph of the batch's width holds it",
           "can_run_graph", "can_run", _seen(_can_run), "forward_batch.batch_size", "self.max_bs"),
    _patch("widths_by_batch_size.load", "decode CUDA-graph replay inputs: padded over the graphs of the batch's width",
           "load_batch", "replay_prepare", _seen(_replay), "self.capture_bs"),
    _patch("widths_by_batch_size.replay", "decode CUDA-graph replay: at the batch's width",
           "execute", "replay", _seen(_replay), "self.raw_num_token"),
)
