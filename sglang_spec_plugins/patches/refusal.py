"""The start-up refusal of a plugin width an attention backend would lay out wrong.

Shared by the backend patches (FA3, triton, aiter MLA) and the gate: which
policy a runner verifies with, the message, and the refusal itself.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, FrozenSet, Optional, Tuple

from ..engine.algorithm import policy_of
from ..engine.facts import configured_ndt
from ..engine.probe import installed_version
from ..errors import EngineError
from .unit import Target, Verdict, WrapPatch

TARGET, DRAFT = False, True
"""``is_draft_worker`` of the worker a backend lays out (the keys of :data:`WHO`)."""
WHO = {TARGET: "target", DRAFT: "draft"}


def workers(which: FrozenSet[bool]) -> str:
    """``"target worker"``, ``"draft worker"`` or ``"target and draft workers"``."""
    return " and ".join(WHO[w] for w in sorted(which)) + (" workers" if len(which) > 1 else " worker")


def verifying_policy(model_runner: Any):
    """The plugin policy of this runner's algorithm if the runner runs
    TARGET_VERIFY; None for a built-in algorithm, or a draft worker the
    plugin does not let verify."""
    policy = policy_of(model_runner.spec_algorithm)
    if policy is None or (model_runner.is_draft_worker and not policy.draft_may_verify()):
        return None
    return policy


def refusal(policy, is_draft: bool, width: int, ndt: int, backend: str, why: str, shape: str = "") -> str:
    """The start-up refusal of a plugin algorithm on an attention backend:
    algorithm, plugin, worker, width, backend, SGLang release and why."""
    what = f"{width} tokens per request" + (f" shaped as a {shape}" if shape else "")
    return (f"algorithm {policy.algorithm} (plugin {policy.plugin!r}) verifies {what} on the "
            f"{WHO[is_draft]} worker at speculative_num_draft_tokens={ndt}, but SGLang {installed_version()}'s {backend} "
            f"attention backend {why}; choose another --attention-backend")


def refuse_other_width(backend: str, model_runner: Any, ndt: int, lays_out: str) -> None:
    """Raise EngineError if this runner's plugin algorithm verifies a width
    other than ``ndt`` on a worker that runs TARGET_VERIFY; ``backend`` names
    the attention backend, ``lays_out`` says what it does instead."""
    policy: Optional[Any] = verifying_policy(model_runner)
    if policy is None:
        return
    is_draft = bool(model_runner.is_draft_worker)
    for width in policy.candidate_widths(ndt, is_draft):
        if width != ndt:
            raise EngineError(refusal(policy, is_draft, width, ndt, backend, lays_out)
                              + " or a width equal to speculative_num_draft_tokens")


class NdtGuard(WrapPatch):
    """Wraps a backend's ``__init__`` to refuse, at start-up, a plugin width
    other than ndt on the workers whose TARGET_VERIFY the backend lays out at
    ndt. ``classify(source)`` reads those workers off the ``__init__`` source
    (``is_draft_worker`` values; empty: none; None: an unknown shape)."""

    def __init__(self, name: str, summary: str, alternatives: Tuple[Target, ...], *, backend: str,
                 classify: Callable[[str], Optional[FrozenSet[bool]]]):
        super().__init__(name, summary, alternatives)
        self.backend = backend
        self.classify = classify
        self.condition, self.wrapper = self._condition, self._wrapper

    def ignored_workers(self) -> Optional[FrozenSet[bool]]:
        """The workers whose width the installed backend ignores; None: unknown shape."""
        return self.classify(self.alternatives[0].source() or "")

    def _condition(self, source: str) -> Tuple[Verdict, str]:
        ignores = self.classify(source)
        if ignores is None:
            return Verdict.REFUSED, f"unknown {self.backend} __init__ shape (no TARGET_VERIFY width stored from ndt or the hook)"
        if not ignores:
            return Verdict.NOT_NEEDED, (f"upstream {self.backend} takes the TARGET_VERIFY width from the algorithm or "
                                        "the batch's verify input, for target and draft workers")
        return Verdict.APPLY, (f"{self.backend} lays TARGET_VERIFY out at ndt on the {workers(ignores)}: refuse plugin "
                               "widths != ndt there")

    def _wrapper(self, original):
        backend = self.backend

        @functools.lru_cache(maxsize=None)
        def ignores():  # read off the source when the backend is first built, not when wrapped (most never are)
            return self.ignored_workers()

        @functools.wraps(original)
        def __init__(backend_self, model_runner, *args, **kwargs):
            if bool(model_runner.is_draft_worker) in ignores():
                refuse_other_width(backend, model_runner, configured_ndt(model_runner),
                                   "lays TARGET_VERIFY out at speculative_num_draft_tokens")
            original(backend_self, model_runner, *args, **kwargs)

        return __init__
