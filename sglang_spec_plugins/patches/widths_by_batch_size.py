"""The decode CUDA-graph runner at widths per batch size (``sgl_spec_widths_by_batch_size``).

SGLang's runner captures every batch size of its capture list at one width
(``captured_req_width`` from 0.5.16, ``num_tokens_per_bs`` before) and
replays a batch on the graph of the smallest captured size that holds it.
For a plugin algorithm with widths by batch size (:mod:`..widths_by_batch_size`)
these wrappers capture each size once per width of its bucket and replay a
batch on a graph of its own width, in the runner's own code, by showing the
runner, around each of its calls, as the runner of one width
(:func:`at_width`): its width attribute at that width, its capture list the
captured sizes with a graph at it and, where a size has graphs at several
widths, its per-size state that width's own (:func:`per_size_state`):

* the runner's graph table: ``graphs``/``output_buffers`` up to 0.5.13, its
  runner backend's ``_graphs``/``_outputs`` from 0.5.14, the metadata-glue
  graphs of 0.5.21+ (``SGLANG_ENABLE_METADATA_GLUE_GRAPH``), keyed by size;
* the verify attention backend's per-size capture state: flashinfer's
  ``prefill_cuda_graph_metadata`` (the wrappers each graph plans at replay),
  trtllm_mha's ``target_verify_metadata`` (each graph's metadata; the buffers
  it keeps there by name stay shared), aiter 0.5.12.x's captured widths.

Buffers all graphs share (inputs, KV indices, masks, workspaces) stay
shared: every replay lays its batch out into them again before its graph
runs, as it does across sizes. So:

* capture (``capture``, which also runs when a replay recaptures): the
  release's whole capture once per width, widest first (the graph memory
  pool reuses what larger graphs freed), each time over the sizes with a
  graph at that width (:func:`capture_every_width`); the runner was sized
  (buffers and attention-backend graph state) with the largest width, the
  one the algorithm answers SGLang's static question with;
* replay (``can_run_graph``/``load_batch``/``execute`` 0.5.14+,
  ``can_run``/``replay_prepare``/``replay`` before): the width is the batch's
  own (tokens / requests, what the worker chose for this step), and the
  runner pads the batch as it always does, over the captured sizes with a
  graph at that width (:func:`~..widths_by_batch_size.graph_size`); a batch no
  graph serves at its width runs eagerly (the runner's "can run" answers
  False), and every served backend lays an eager batch out at its own width.

Built-in algorithms, and plugin algorithms with one width, run the original
methods unchanged. Not served: DP attention (the runner pads to the largest
batch across DP ranks, which the width of one rank's batch does not
follow): ``--enable-dp-attention`` is refused at start-up, while SGLang
resolves its arguments (:func:`~..serving.startup_check.dp_attention_faults`;
the runner's ``require_mlp_tp_gather`` is never True without it).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..engine.algorithm import policy_of
from ..errors import EngineError
from ..widths_by_batch_size import WidthsByBatchSize, graph_sizes, padded_size
from .unit import Target, Verdict, WrapPatch
from .verify_batch import batch_width

_STATE = "_sglang_spec_plugins_widths"
"""Runner attribute: its :class:`_Widths`, made at first use."""

_NEW = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"  # 0.5.14+
_OLD = "sglang.srt.model_executor.cuda_graph_runner"  # up to 0.5.13

_ABSENT = object()

_RUNNER_TABLES = ("graphs", "output_buffers")  # up to 0.5.13
_BACKEND_TABLES = ("_graphs", "_outputs")  # the runner backend's, 0.5.14+
_ATTENTION_STATE = ("prefill_cuda_graph_metadata", "target_verify_metadata")
"""Attention-backend attributes that hold per-size graph state (see the module doc), besides the aiter
backend's captured widths (:data:`.aiter.CAPTURED_WIDTHS`)."""


def width_attribute(runner) -> str:
    """The runner's per-request capture width attribute."""
    return "captured_req_width" if hasattr(runner, "captured_req_width") else "num_tokens_per_bs"


class _Widths:
    """A runner's widths by batch size, its captured sizes and, where a size has
    graphs at several widths, each width's per-size state."""

    def __init__(self, runner, buckets: WidthsByBatchSize):
        self.buckets, self.sizes = buckets, tuple(sorted(runner.capture_bs))
        self.places = per_size_state(runner) if buckets.chooses else ()
        self.outside = [vars(owner).get(name, _ABSENT) for owner, name in self.places]  # before any capture
        self.stores: Dict[int, List[Any]] = {}
        self._sizes_at: Dict[int, Tuple[int, ...]] = {}

    def sizes_at(self, width: int) -> Tuple[int, ...]:
        """The captured sizes with a graph at ``width`` (:func:`graph_sizes`, kept per width: asked every step)."""
        sizes = self._sizes_at.get(width)
        if sizes is None:
            sizes = self._sizes_at[width] = graph_sizes(self.buckets, width, self.sizes)
        return sizes

    def enter(self, width: int) -> List[Any]:
        """Put ``width``'s per-size state in place; return what was there."""
        saved = [vars(owner).get(name, _ABSENT) for owner, name in self.places]
        store = self.stores.setdefault(width, [_ABSENT if v is _ABSENT else type(v)(v) for v in self.outside])
        for (owner, name), value in zip(self.places, store):
            _put(owner, name, value)
        return saved

    def leave(self, width: int, saved: List[Any]) -> None:
        """Keep ``width``'s state as the release left it; put ``saved`` back."""
        self.stores[width] = [vars(owner).get(name, _ABSENT) for owner, name in self.places]
        for (owner, name), value in zip(self.places, saved):
            _put(owner, name, value)


def _put(owner, name: str, value) -> None:
    if value is _ABSENT:
        vars(owner).pop(name, None)
    else:
        setattr(owner, name, value)


def per_size_state(runner) -> Tuple[Tuple[Any, str], ...]:
    """``(owner, attribute)`` of every per-size graph state of ``runner`` and
    its verify attention backends (see the module doc); EngineError where the
    runner keeps its graphs somewhere this module does not know."""
    places = [(runner, name) for name in _RUNNER_TABLES if isinstance(vars(runner).get(name), dict)]
    backend = vars(runner).get("backend")
    if backend is not None:
        tables = [(backend, name) for name in _BACKEND_TABLES if isinstance(vars(backend).get(name), dict)]
        if len(tables) != len(_BACKEND_TABLES):
            raise EngineError(f"widths by batch size with several widths per size under CUDA graphs: the decode "
                              f"graph runner's {type(backend).__name__} keeps no graph table by size "
                              f"({', '.join(_BACKEND_TABLES)}); serve one width per size, or --disable-cuda-graph")
        places += tables
    elif not places:
        raise EngineError(f"widths by batch size with several widths per size under CUDA graphs: "
                          f"{type(runner).__name__} keeps its graphs in no known table")
    glue = vars(runner).get("_metadata_glue")
    if glue is not None and isinstance(vars(glue).get("_states"), dict):
        places.append((glue, "_states"))
    from . import aiter  # here, not at import: a scheduler patches the runners before it picks a backend

    for attention in attention_backends(runner):
        places += [(attention, name) for name in (*_ATTENTION_STATE, aiter.CAPTURED_WIDTHS)
                   if isinstance(vars(attention).get(name), dict)
                   or (name == aiter.CAPTURED_WIDTHS and type(attention).__module__ == aiter.MODULE)]  # made lazily
    return tuple(places)


def attention_backends(runner) -> List[Any]:
    """The attention backends a runner's graphs plan with: the runner's and its
    model runner's, and every backend they hold (a prefill/decode pair's halves)."""
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    found: List[Any] = []
    todo = [vars(runner).get("attn_backend"), getattr(runner.model_runner, "attn_backend", None)]
    while todo:
        backend = todo.pop()
        if not isinstance(backend, AttentionBackend) or any(backend is f for f in found):
            continue
        found.append(backend)
        for value in vars(backend).values():
            todo.extend(value if isinstance(value, (list, tuple)) else [value])
    return found


def _state(runner) -> Optional[_Widths]:
    """The runner's :class:`_Widths`; None for an algorithm with one width at every batch size."""
    state = vars(runner).get(_STATE, _ABSENT)
    if state is _ABSENT:
        policy = policy_of(runner.model_runner.spec_algorithm)
        buckets = None if policy is None else policy.widths_by_batch_size(runner.speculative_num_draft_tokens,
                                                                          bool(runner.model_runner.is_draft_worker))
        state = vars(runner)[_STATE] = None if buckets is None else _Widths(runner, buckets)
    return state


def buckets_of(runner) -> Optional[WidthsByBatchSize]:
    """The widths by batch size of the runner's plugin algorithm on its worker; None otherwise."""
    state = _state(runner)
    return None if state is None else state.buckets


def captured_sizes(runner) -> Optional[Tuple[int, ...]]:
    """Every batch size the runner captures (its capture list as SGLang made it)."""
    state = _state(runner)
    return state.sizes if state is not None else tuple(sorted(runner.capture_bs))


@contextlib.contextmanager
def at_width(runner, width: int, sizes: Optional[Tuple[int, ...]] = None):
    """The runner seen, inside the block, as captured at ``width`` for ``sizes``
    (default: every captured size with a graph at that width), with that
    width's per-size state."""
    state = _state(runner)
    attr = width_attribute(runner)
    saved = getattr(runner, attr), runner.capture_bs
    setattr(runner, attr, width)
    runner.capture_bs = list(state.sizes_at(width) if sizes is None else sizes)
    stores = state.enter(width)
    try:
        yield
    finally:
        state.leave(width, stores)
        setattr(runner, attr, saved[0])
        runner.capture_bs = saved[1]


def capture_every_width(runner, capture: Callable[[], Any]) -> None:
    """Run ``capture()`` (the release's whole capture) once per width, widest
    first, with the runner at that width (:func:`at_width`); a runner without
    widths by batch size captures once, as it is."""
    state = _state(runner)
    if state is None:
        capture()
        return
    for width in reversed(state.buckets.candidates):
        if graph_sizes(state.buckets, width, state.sizes):
            with at_width(runner, width):
                capture()


def schedule_for(model_runner, num_draft_tokens: int, hold_steps: int = 0):
    """The per-step bucket chooser a worker asks before drafting, for the model
    runner that verifies (the target's; the draft runner where the plugin lets
    it verify) at ``num_draft_tokens``: :meth:`~..policy.VerifyPolicy.schedule`
    over the batch sizes its decode CUDA-graph runner captured (none: eager).
    None for an algorithm with one width at every batch size, or a built-in one."""
    policy = policy_of(model_runner.spec_algorithm)
    if policy is None:
        return None
    graphs = decode_graphs(model_runner)
    return policy.schedule(num_draft_tokens, bool(model_runner.is_draft_worker),
                           None if graphs is None else captured_sizes(graphs), hold_steps)


def decode_graphs(model_runner):
    """The model runner's decode CUDA-graph runner; None when it serves eagerly."""
    graphs = getattr(model_runner, "decode_cuda_graph_runner", None) or getattr(model_runner, "graph_runner", None)
    return graphs if graphs is not None and hasattr(graphs, "capture_bs") else None


def replay_size(runner, batch_size: int, width: int) -> Optional[int]:
    """The captured size the decode graph runner ``runner`` replays a batch of
    ``batch_size`` requests verifying ``width`` tokens each on (:func:`graph_size`:
    with SGLang's ``disable_padding``, only a graph of exactly that size); None:
    the step runs eagerly. For a runner with widths by batch size."""
    size = padded_size(batch_size, _state(runner).sizes_at(width))
    if size is None or (getattr(runner, "disable_padding", False) and size != batch_size):
        return None
    return size


def _seen(view):
    """A wrapper builder: ``view(runner, buckets, *args)`` says how the method
    runs for a runner with widths by batch size: ``width``: with the runner
    seen at it (:func:`at_width`); None: as it is; False: not at all,
    answering False. Runners without widths by batch size run it as it is."""

    def wrapper(original):
        @functools.wraps(original)
        def method(self, *args, **kwargs):
            buckets = buckets_of(self)
            width = None if buckets is None else view(self, buckets, *args)
            if width is None:
                return original(self, *args, **kwargs)
            if width is False:
                return False
            with at_width(self, width):
                return original(self, *args, **kwargs)

        return method

    return wrapper


def _capture_wrapper(original):
    @functools.wraps(original)
    def capture(self, *args, **kwargs):
        capture_every_width(self, lambda: original(self, *args, **kwargs))

    return capture


def _width(runner, forward_batch) -> Optional[int]:
    """The batch's width (:func:`.verify_batch.batch_width`: None for other modes
    and ragged layouts; a batch that does not split evenly is refused here)."""
    return batch_width(forward_batch, runner.speculative_num_draft_tokens, "decode CUDA-graph runner")


def _replay(runner, buckets, forward_batch, *_):
    return _width(runner, forward_batch)


def _can_run(runner, buckets, forward_batch, *_):
    width = _width(runner, forward_batch)
    if width is None:
        return None
    return False if replay_size(runner, forward_batch.batch_size, width) is None else width  # False: eager


def _condition(*needles):
    """Apply where the method reads one of ``needles`` (what the wrapper sets around it)."""
    def condition(source: str):
        if any(n in source for n in needles):
            return Verdict.APPLY, ("captures each batch size once per width of its bucket and replays a batch on a graph "
                                   "of its width, for plugin algorithms with widths by batch size")
        return Verdict.REFUSED, f"unknown shape: reads none of {', '.join(needles)}"

    return condition


def _patch(name: str, summary: str, new: str, old: str, wrapper, *needles) -> WrapPatch:
    return WrapPatch(name=name, summary=summary,
                     alternatives=(Target(_NEW, f"DecodeCudaGraphRunner.{new}"), Target(_OLD, f"CudaGraphRunner.{old}")),
                     condition=_condition(*needles), wrapper=wrapper)


PATCHES = (
    _patch("widths_by_batch_size.capture_all", "decode CUDA-graph capture (and recapture): each width over its sizes",
           "capture", "capture", _capture_wrapper, "self.capture_bs", "_capture_one_stream", "self._capture()"),
    _patch("widths_by_batch_size.can_run", "decode CUDA-graph replay check: a graph of the batch's width holds it",
           "can_run_graph", "can_run", _seen(_can_run), "forward_batch.batch_size", "self.max_bs"),
    _patch("widths_by_batch_size.load", "decode CUDA-graph replay inputs: padded over the graphs of the batch's width",
           "load_batch", "replay_prepare", _seen(_replay), "self.capture_bs"),
    _patch("widths_by_batch_size.replay", "decode CUDA-graph replay: at the batch's width",
           "execute", "replay", _seen(_replay), "self.raw_num_token"),
)
