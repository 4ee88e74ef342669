"""The support matrix: what a plugin algorithm gets from each attention backend.

:func:`attention_support` dispatches to the backend modules (each declares
its own ``SUPPORT`` next to its patches) after the checks every backend
shares; :func:`support_at_widths` asks it at every width a step may use, as
the start-up check and the gate do; :func:`report` is ``doctor``'s summary.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

from ..engine.probe import EngineProbe, installed_version
from ..verify_layout import CHAIN, DRAFT_VERIFIES_CHAINS_ONLY, TREE
from . import aiter, capture_input, fa3, triton, trtllm_mha
from .refusal import workers
from .support import CAPTURE, Serving, Support
from .unit import Verdict


def _flashinfer(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    return Support(Serving.PATCHED, f"lays TARGET_VERIFY out from the verify input at every step; {CAPTURE}, "
                                    "without which capture fails")


_SUPPORT: Dict[str, Callable[[int, int, str, bool], Support]] = {
    "flashinfer": _flashinfer, **triton.SUPPORT, **trtllm_mha.SUPPORT, **fa3.SUPPORT, **aiter.SUPPORT}

KNOWN_BACKENDS = tuple(_SUPPORT)
"""Backends whose TARGET_VERIFY layout this project has read and tests (target worker)."""

WIDTHS_BY_BATCH_BACKENDS = frozenset({"flashinfer", "triton", "trtllm_mha", "aiter"})
"""Backends whose CUDA-graph capture of every (batch size, width) pair of a
plugin's widths by batch size, and replays after every width and batch-size
switch, match attention from the batch definition, eager, capture and replay
(tests/on_sglang/test_widths_by_batch_size_graphs.py). The runner replays a
graph only at the width it was captured at, each (size, width) with its own
per-size backend state (:mod:`.widths_by_batch_size`), and each of these lays
every replay out again from the batch before its graph runs: flashinfer
re-plans the wrappers of that size and width (their ``qo_indptr``,
``kv_indptr`` and mask buffers are views of buffers all graphs share,
rewritten by each plan), triton refills its buffers at the verify input's
width, trtllm_mha and aiter (non-MLA) at the batch's (their patches). triton
takes a width other than ndt only from 0.5.17, and aiter's MLA kernels only
ndt (:func:`attention_support` refuses those). Every other backend is refused."""


def attention_support(backend: str, width: int, ndt: int, verify_shape: str = CHAIN, *,
                      is_draft_worker: bool = False) -> Support:
    """What a plugin algorithm verifying ``width`` tokens per request of
    ``verify_shape`` at ``speculative_num_draft_tokens=ndt`` gets from
    ``backend`` (an ``--attention-backend`` name; ``flashinfer_mla`` and
    ``aiter_mla`` for those backends on an MLA model) on the installed SGLang,
    for eager, CUDA-graph capture and replay together, on the target worker
    (or the draft worker, for a plugin that lets it verify). A backend outside
    :data:`KNOWN_BACKENDS` is trusted only with SGLang's own layout: a chain at
    width ndt. The loader enforces every ``REFUSED`` when the backend is built
    (:mod:`.backend_gate`)."""
    graph = capture_input.CAPTURE_INPUT.plan(installed_version())
    if graph.verdict == Verdict.REFUSED:
        return Support(Serving.REFUSED, f"cannot be captured with a plugin verify input: {graph.reason}")
    if verify_shape == TREE and is_draft_worker:
        return Support(Serving.REFUSED, f"cannot verify a tree on the draft worker: {DRAFT_VERIFIES_CHAINS_ONLY}")
    answer = _SUPPORT.get(backend)
    if answer is not None:
        return answer(width, ndt, verify_shape, is_draft_worker)
    if width != ndt or verify_shape == TREE:
        return Support(Serving.REFUSED, "is not examined by sglang-spec-plugins: only a chain at "
                                        "speculative_num_draft_tokens is trusted to it")
    return Support(Serving.SERVED, "SGLang's own layout at speculative_num_draft_tokens (not examined by "
                                   "sglang-spec-plugins)")


def support_at_widths(backend: str, policy, ndt: int, shape: str, is_draft_worker: bool) -> Tuple[int, Support]:
    """``(width, Support)`` of ``backend`` for every width a TARGET_VERIFY step of
    this worker may use (:meth:`~..policy.VerifyPolicy.candidate_widths`): the
    first width refused, else the widest. Widths by batch size are refused on a
    backend outside :data:`WIDTHS_BY_BATCH_BACKENDS`."""
    widths = policy.candidate_widths(ndt, is_draft_worker)
    verdicts = [(w, attention_support(backend, w, ndt, shape, is_draft_worker=is_draft_worker)) for w in widths]
    width, support = next(((w, s) for w, s in verdicts if s.verdict == Serving.REFUSED), verdicts[-1])
    buckets = policy.widths_by_batch_size(ndt, is_draft_worker)
    if support.verdict != Serving.REFUSED and buckets is not None and backend not in WIDTHS_BY_BATCH_BACKENDS:
        support = Support(Serving.REFUSED, f"is not proven with widths by batch size ({buckets}; proven on: "
                                           f"{', '.join(sorted(WIDTHS_BY_BATCH_BACKENDS))})")
    return width, support


def report(release_probe: EngineProbe) -> Dict[str, str]:
    """Per start-up guard, what plugin algorithms get from that backend on the
    probed release, and whether trtllm_mha on an XQA GPU takes a verify of
    more than one token (for ``doctor``)."""
    out = {}
    for guard in fa3.FA3, triton.TRITON:
        ignores = guard.ignored_workers()
        if ignores is None:
            out[guard.name] = f"refused: {guard.plan(release_probe.version).reason}"
        else:
            out[guard.name] = f"refused for widths != ndt on the {workers(ignores)}" if ignores else "supported"
    out["backends.trtllm_mha on SM90/SM120"] = trtllm_mha.xqa_report()
    return out
