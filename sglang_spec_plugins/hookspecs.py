"""The hook contract between sglang-spec-plugins and drafter plugins.

A drafter plugin is a module (or object) with functions marked ``@hookimpl``
whose names match the specifications below. It is found through the
entry-point group ``sglang_spec_plugins``; the entry-point *name* is the
plugin's name in ``plugins.toml``.

Semantics shared by every per-algorithm hook:

* The hook receives the algorithm name (upper case, as SGLang registers it)
  and answers only for algorithms the plugin owns. For any other name it
  returns ``None``, so several drafters coexist; the first non-``None``
  answer wins (``firstresult``). A plugin that implements a hook answers it
  for every algorithm it owns: ``None`` for its own algorithm is an error
  (it is how comparing with a lower-case name would fail), and an answer for
  another plugin's algorithm is refused by name (an algorithm two plugins
  offer is served by the one plugins.toml names; the other's answers for it
  are not served, nor refused). Not implementing a hook
  gives the default stated below.
* ``settings`` is the read-only mapping of the algorithm's table in
  ``plugins.toml`` minus the keys the framework reserves (``plugin``,
  ``enabled``, ``max_tokens_per_req``, ``widths_by_batch_size``, ``widths_by_acceptance``). A hookimpl may leave out any
  argument it does not need (pluggy passes only the ones it names).
* Answers must be pure: the same arguments give the same answer, every time
  and in every process. The framework asks twice per distinct argument tuple
  (two different answers are refused), then caches the answer; CUDA graphs
  are captured per width, so a width that changed between calls would be a
  correctness bug, not a tuning knob. ``check`` also compares the answers
  of two processes.
* A wrong answer (wrong type, width < 1, width above the declared maximum)
  is rejected when the algorithm is validated at server start, with an
  error naming the plugin; it never reaches a GPU step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

import pluggy

from .capabilities import check_capabilities
from .verify_layout import CHAIN, VERIFY_SHAPES

if TYPE_CHECKING:  # imported by a plugin that declares one
    from .draft_model import DraftModel

PROJECT_NAME = "sglang_spec_plugins"
"""The pluggy project name, which is also the entry-point group drafters use."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

RENAMED_HOOKS = {"sgl_spec_verify_widths": "sgl_spec_widths_by_batch_size"}
"""Hook names renamed before 0.1.0 (same arguments and answers): a plugin
implementing the old name is refused with the new one."""


@dataclass(frozen=True)
class AlgorithmSpec:
    """One speculative algorithm a plugin offers to SGLang.

    ``name``: the ``--speculative-algorithm`` value; matched case-insensitively
    and registered upper case. It may not be one of SGLang's built-in names.

    ``worker_factory``: called by SGLang with its ``ServerArgs`` when it
    creates the speculative worker; returns the worker class, which must fit
    the release's worker contract (build it on
    ``sglang_spec_plugins.worker.worker_base()``; ``check_worker`` there says
    what a class lacks). Import SGLang inside the factory, not at the plugin
    module's top.

    ``supports_overlap``: whether the worker runs under SGLang's overlap
    scheduler (its default). True for a worker built on
    ``sglang_spec_plugins.worker.chain_worker_base()`` or
    ``draft_block_worker_base()``, which run under it on 0.5.14+ (and
    synchronously under ``--disable-overlap-schedule``). If False (the
    default, as in SGLang's own registry), every release 0.5.12-0.5.23 refuses
    to start unless ``--disable-overlap-schedule`` is given, and drives the
    worker synchronously.

    ``validate_server_args``: optional ``(server_args) -> None`` that raises
    ``ValueError`` to refuse a configuration; SGLang calls it while it
    resolves its server arguments.

    ``verify_shape``: what the worker's TARGET_VERIFY batches look like, so
    that SGLang's CUDA-graph capture lays attention out the same way:
    ``"chain"`` (default; each request's tokens are a linear chain, causal
    within the block, as DFLASH and SBD verify) or ``"tree"`` (the worker
    sends its own mask in its verify input, as EAGLE does). See
    :mod:`sglang_spec_plugins.verify_layout` for what each promises.

    ``capabilities``: answers to SGLang's other yes/no questions about the
    algorithm, by method name (``{"has_draft_kv": False}``); see
    :data:`sglang_spec_plugins.capabilities.CAPABILITIES` for the names, the
    release that first asks each and SGLang's default for what is left out.

    ``draft_model``: a :class:`~sglang_spec_plugins.draft_model.DraftModel`
    when the worker has a draft model of its own, loaded from
    ``--speculative-draft-model-path`` (build the worker on
    ``sglang_spec_plugins.worker.draft_model_worker_base()``): what it needs
    from SGLang that SGLang gives only its DFLASH family (the target's hidden
    states, the draft KV pool in the target's budget, ``input_embeds`` in the
    draft's CUDA graphs). SGLang 0.5.14+ serves it; the draft checkpoint and
    every DFLASH-only site of the release are checked at start-up.

    ``picks_widths``: whether the worker picks each decode step's width
    itself (``StepWidths.at(batch_size, width)``, among the widths the
    algorithm declares) instead of leaving it to the framework (each
    batch-size bucket's largest, or the acceptance controller's choice): a
    bool, or a function of the algorithm's ``settings`` that answers it (a
    worker that picks only where a setting of its own says so). Where it
    does, plugins.toml ``widths_by_acceptance`` is refused (the controller
    would never choose), and ``check`` says the worker chooses.
    """

    name: str
    worker_factory: Callable[[Any], type]
    supports_overlap: bool = False
    validate_server_args: Optional[Callable[[Any], None]] = None
    verify_shape: str = CHAIN
    capabilities: Mapping[str, bool] = field(default_factory=dict)
    draft_model: Optional[DraftModel] = None
    picks_widths: Union[bool, Callable[[Mapping[str, Any]], bool]] = False

    def __post_init__(self):
        if not isinstance(self.picks_widths, bool) and not callable(self.picks_widths):
            raise ValueError(f"AlgorithmSpec {self.name!r}: picks_widths must be True, False or a function of the "
                             f"algorithm's settings answering one of them, got {self.picks_widths!r}")
        if self.draft_model is not None:
            from .draft_model import DraftModel

            if not isinstance(self.draft_model, DraftModel):
                raise ValueError(f"AlgorithmSpec {self.name!r}: draft_model must be a sglang_spec_plugins.DraftModel or "
                                 f"None, got {self.draft_model!r}")
        if self.verify_shape not in VERIFY_SHAPES:
            raise ValueError(f"AlgorithmSpec {self.name!r}: verify_shape must be one of {', '.join(map(repr, VERIFY_SHAPES))}, "
                             f"got {self.verify_shape!r}")
        try:
            object.__setattr__(self, "capabilities", check_capabilities(self.capabilities))
        except ValueError as exc:
            raise ValueError(f"AlgorithmSpec {self.name!r}: {exc}") from None


@hookspec
def sgl_spec_algorithms() -> Sequence[AlgorithmSpec]:
    """Return every algorithm this plugin can serve.

    Called once per process, at load time, on every enabled plugin; a plugin
    offering nothing returns an empty sequence. Whether an offered algorithm
    is switched on is decided by ``plugins.toml``, not by the plugin.
    """


@hookspec(firstresult=True)
def sgl_spec_verify_width(
    algorithm: str,
    num_draft_tokens: int,
    is_draft_worker: bool,
    settings: Mapping[str, Any],
) -> Optional[int]:
    """Return how many tokens each request verifies in TARGET_VERIFY.

    ``num_draft_tokens`` is SGLang's configured
    ``speculative_num_draft_tokens``; ``is_draft_worker`` is True when the
    forward runs in the drafter's own model runner (only possible when
    :func:`sgl_spec_draft_may_verify` says so). The answer is a positive int
    no larger than the maximum from :func:`sgl_spec_max_verify_width`.
    ``None``: not my algorithm; if the owner does not implement it, the width is
    ``num_draft_tokens`` (SGLang's own default). It is asked, and its answer
    must be valid, also where widths by batch size decide the widths (a
    plugin checks its settings here); the widths by batch size are served.
    """


@hookspec(firstresult=True)
def sgl_spec_widths_by_batch_size(
    algorithm: str,
    num_draft_tokens: int,
    is_draft_worker: bool,
    settings: Mapping[str, Any],
) -> Optional[Mapping[int, Any]]:
    """Return the verify width per batch-size bucket, ``{min_batch_size: width}``,
    or ``None`` for one width at every batch size (:func:`sgl_spec_verify_width`).

    ``{1: 16, 8: 8, 64: 4}``: steps of 1-7 requests verify 16 tokens per
    request, 8-63 verify 8, 64 and more verify 4. A bucket may give a list of
    widths a step of its size may choose from, ``{1: [4, 8, 16], 64: [1, 2]}``:
    the worker chooses each step's (``StepWidths.at(batch_size, width)`` in
    :mod:`sglang_spec_plugins.worker`; the acceptance controller when
    plugins.toml turns on ``widths_by_acceptance``), every request of a step
    shares it, and a step nobody chooses for takes its bucket's largest. The
    smallest key must be 1; every width is an int from 1 to the maximum
    (:func:`sgl_spec_max_verify_width`), and the widths of all buckets are the
    only ones a TARGET_VERIFY step may run at. SGLang captures a CUDA graph
    for each captured batch size at each width of its bucket (more widths per
    bucket: more graphs, each holding its own logits), sizes capture buffers
    with the largest width, and a batch replays on a graph of its width that
    holds it (see :mod:`sglang_spec_plugins.widths_by_batch_size`).
    ``widths_by_batch_size`` in the algorithm's plugins.toml table, when set,
    is used instead and this hook is not asked. Unlike the other
    per-algorithm hooks, ``None`` is a valid answer for the plugin's own
    algorithm.
    """


@hookspec(firstresult=True)
def sgl_spec_draft_may_verify(
    algorithm: str, settings: Mapping[str, Any]
) -> Optional[bool]:
    """Return whether the drafter's own worker may run TARGET_VERIFY forwards
    (block drafters such as DFLASH verify inside the draft model runner).

    ``None``: not my algorithm; if the owner does not implement it, the answer is False
    (SGLang's default for plugin algorithms).
    """


@hookspec(firstresult=True)
def sgl_spec_max_verify_width(
    algorithm: str, num_draft_tokens: int, settings: Mapping[str, Any]
) -> Optional[int]:
    """Return the largest width :func:`sgl_spec_verify_width` may answer.

    SGLang sizes KV reservation and CUDA-graph capture with it. It must be at
    least ``num_draft_tokens`` and, when ``plugins.toml`` sets
    ``max_tokens_per_req`` for the algorithm, no larger than that; without
    that cap, no larger than ``max(num_draft_tokens, 64)``.
    ``None``: not my algorithm; if the owner does not implement it, the maximum is ``max_tokens_per_req``
    from ``plugins.toml`` if set, else ``num_draft_tokens``.
    """
