"""The FA3 and triton attention backends: refuse a plugin width they would ignore.

Each backend stores its TARGET_VERIFY tokens per request in ``__init__`` and
lays out every verify batch (``qo_indptr``, ``max_seq_len_q``, masks, graph
buffers) from it. Read off each release's ``__init__``:

* FA3 (``FlashAttentionBackend``): ``speculative_num_draft_tokens`` = ndt up to
  0.5.15; from 0.5.16 the draft worker's is replaced by the width hook, the
  target worker's stays ndt (0.5.16-0.5.23).
* triton (``TritonAttnBackend``): ``num_draft_tokens`` = ndt up to 0.5.20,
  and up to 0.5.16 every TARGET_VERIFY layout uses it. 0.5.17-0.5.20 lay a
  verify batch out (eager, graph buffers at capture and replay, the captured
  metadata) at its verify input's ``draft_token_num``, ndt only without one:
  the loader gives the graph capture the plugin's verify input
  (``capture_input``), so both workers take the width (read off those three
  methods: :func:`_triton_reads_verify_input`). From 0.5.21
  ``target_verify_num_tokens_per_req = model_runner.decode_num_tokens_per_req()``,
  the hook for both workers. Not needed from 0.5.17.

Storing the width instead would be a one-line edit, but not a safe one: the
same attribute sizes the CUDA-graph buffers and verify mask and lays out
EAGLE's draft extend. So where the width would be ignored the backend's
``__init__`` is wrapped to refuse, at start-up, a plugin algorithm whose width
at the configured ndt differs from ndt on a worker that verifies.
Built-in algorithms, and plugin widths equal to ndt, construct as before.
:func:`refuse_other_width` is that refusal, also used by aiter's MLA patch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional

from ..engine.algorithm import policy_of
from ..engine.probe import EngineProbe, installed_version, method_source
from ..errors import EngineError
from ..verify_layout import CHAIN, DRAFT_VERIFIES_CHAINS_ONLY, TREE
from .source_edit import source_of
from .unit import Target, WrapPatch

_TARGET, _DRAFT = False, True  # is_draft_worker of the worker whose width a backend ignores
_WHO = {_TARGET: "target", _DRAFT: "draft"}


def _workers(ignores: FrozenSet[bool]) -> str:
    return " and ".join(_WHO[w] for w in sorted(ignores)) + (" workers" if len(ignores) > 1 else " worker")


def _flat(source: str) -> str:
    return re.sub(r"\s+", "", source)


def _fa3_ignores(source: str) -> Optional[FrozenSet[bool]]:
    """Workers whose width FlashAttentionBackend.__init__ ignores; None: unknown shape."""
    s = _flat(source)
    if "decode_num_tokens_per_req(" in s or "is_draft_worker=model_runner.is_draft_worker" in s:
        return frozenset()  # the hook for every worker
    stores_ndt = re.search(r"self\.speculative_num_draft_tokens=\(?(model_runner\.server_args|get_spec\(\))\.speculative_num_draft_tokens\)?", s)
    if not stores_ndt:
        return None
    if "andmodel_runner.is_draft_worker" in s and "is_draft_worker=True" in s:  # 0.5.16+: hook for the draft worker only
        return frozenset({_TARGET})
    return frozenset({_TARGET, _DRAFT})


def _triton_ignores(source: str) -> Optional[FrozenSet[bool]]:
    """Workers whose width the TritonAttnBackend of this ``__init__`` ignores; None: unknown shape."""
    s = _flat(source)
    if "self.target_verify_num_tokens_per_req=model_runner.decode_num_tokens_per_req()" in s:
        return frozenset()  # 0.5.21+: the hook, with the runner's is_draft_worker
    if re.search(r"self\.num_draft_tokens=(model_runner\.server_args|get_spec\(\))\.speculative_num_draft_tokens", s):
        return frozenset() if _triton_reads_verify_input() else frozenset({_TARGET, _DRAFT})
    return None


_TRITON_MODULE = "sglang.srt.layers.attention.triton_backend"
_TRITON_VERIFY_LAYOUTS = ("init_forward_metadata", "_update_target_verify_buffers", "_build_cuda_graph_forward_metadata")
"""The TritonAttnBackend methods that lay a TARGET_VERIFY batch out: eager;
the graph buffers, at capture and replay; the metadata a graph captures."""


def _triton_reads_verify_input() -> bool:
    """Whether every TARGET_VERIFY layout of the installed TritonAttnBackend
    takes the width from the batch's verify input (``spec_info.draft_token_num``,
    ndt only without one): 0.5.17-0.5.20."""
    sources = [method_source(_TRITON_MODULE, f"TritonAttnBackend.{name}") for name in _TRITON_VERIFY_LAYOUTS]
    return all(s is not None and "=int(spec_info.draft_token_num)" in _flat(s) for s in sources)


def configured_ndt(model_runner) -> int:
    """ndt where the backends read it: the runtime context (0.5.17+), else the runner's server args."""
    try:
        from sglang.srt.runtime_context import get_spec
    except ImportError:
        return model_runner.server_args.speculative_num_draft_tokens
    return get_spec().speculative_num_draft_tokens


WIDTHS_BY_BATCH_BACKENDS = frozenset({"flashinfer", "triton", "trtllm_mha"})
"""Backends whose CUDA-graph capture per batch size at different widths, and
replays after every width switch, match attention from the batch definition,
eager, capture and replay, as batches grow and shrink
(tests/on_sglang/test_width_by_batch.py). The runner replays a graph only at
the width it was captured at (:mod:`.width_by_batch`), and each of these
lays every replay out again from the batch before its graph runs: flashinfer
re-plans the wrappers of that size (their ``qo_indptr``, ``kv_indptr`` and
mask buffers are views of buffers all sizes share, rewritten by each plan),
triton refills its buffers at the verify input's width, trtllm_mha at the
batch's (its patches). triton takes a width other than ndt only from 0.5.17
(:func:`attention_support` refuses it before). Every other backend is refused."""


def support_at_widths(backend: str, policy, ndt: int, shape: str, is_draft_worker: bool):
    """``(width, Support)`` of ``backend`` for every width a TARGET_VERIFY step of
    this worker may use (:meth:`~..policy.VerifyPolicy.candidate_widths`): the
    first width refused, else the widest. Widths by batch size are refused on a
    backend outside :data:`WIDTHS_BY_BATCH_BACKENDS`."""
    widths = policy.candidate_widths(ndt, is_draft_worker)
    verdicts = [(w, attention_support(backend, w, ndt, shape, is_draft_worker=is_draft_worker)) for w in widths]
    width, support = next(((w, s) for w, s in verdicts if s.verdict == REFUSED), verdicts[-1])
    buckets = policy.widths(ndt, is_draft_worker)
    if support.verdict != REFUSED and buckets is not None and backend not in WIDTHS_BY_BATCH_BACKENDS:
        support = Support(REFUSED, f"is not proven with widths by batch size ({buckets}; proven on: "
                                   f"{', '.join(sorted(WIDTHS_BY_BATCH_BACKENDS))})")
    return width, support


def refuse_other_width(backend: str, model_runner, ndt: int, lays_out: str) -> None:
    """Raise EngineError if this runner's plugin algorithm verifies a width
    other than ``ndt`` on a worker that runs TARGET_VERIFY; ``backend`` names
    the attention backend, ``lays_out`` says what it does instead."""
    policy = verifying_policy(model_runner)
    if policy is None:
        return
    is_draft = bool(model_runner.is_draft_worker)
    for width in policy.candidate_widths(ndt, is_draft):
        if width != ndt:
            raise EngineError(refusal(policy, is_draft, width, ndt, backend, lays_out)
                              + " or a width equal to speculative_num_draft_tokens")


def verifying_policy(model_runner):
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
            f"{_WHO[is_draft]} worker at speculative_num_draft_tokens={ndt}, but SGLang {installed_version()}'s {backend} "
            f"attention backend {why}; choose another --attention-backend")


def _guard(backend: str, shape):
    """Condition and wrapper of a WrapPatch refusing what ``shape(source)`` says is ignored."""

    def condition(source: str):
        ignores = shape(source)
        if ignores is None:
            return "refused", f"unknown {backend} __init__ shape (no TARGET_VERIFY width stored from ndt or the hook)"
        if not ignores:
            return "not needed", (f"upstream {backend} takes the TARGET_VERIFY width from the algorithm or the batch's "
                                  "verify input, for target and draft workers")
        return "apply", f"{backend} lays TARGET_VERIFY out at ndt on the {_workers(ignores)}: refuse plugin widths != ndt there"

    def wrapper(original):
        ignores = shape(source_of(original))

        @functools.wraps(original)
        def __init__(self, model_runner, *args, **kwargs):
            if bool(model_runner.is_draft_worker) in ignores:
                refuse_other_width(backend, model_runner, configured_ndt(model_runner),
                                   "lays TARGET_VERIFY out at speculative_num_draft_tokens")
            original(self, model_runner, *args, **kwargs)

        return __init__

    return condition, wrapper


def _patch(name: str, backend: str, module: str, qualname: str, shape) -> WrapPatch:
    condition, wrapper = _guard(backend, shape)
    return WrapPatch(name=name, summary=f"{backend} attention backend: refuse plugin widths it would ignore",
                        alternatives=(Target(module, qualname),), condition=condition, wrapper=wrapper)


FA3 = _patch("backends.fa3", "FA3/FA4 (FlashAttentionBackend)", "sglang.srt.layers.attention.flashattention_backend",
             "FlashAttentionBackend.__init__", _fa3_ignores)
TRITON = _patch("backends.triton", "triton (TritonAttnBackend)", _TRITON_MODULE,
                "TritonAttnBackend.__init__", _triton_ignores)

PATCHES = (FA3, TRITON)


def backend_support(release_probe: EngineProbe) -> Dict[str, str]:
    """Per patch, what plugin algorithms get from that backend on the probed release, and whether
    trtllm_mha on an XQA GPU takes a verify of more than one token (for ``doctor``)."""
    out = {}
    for patch, shape in ((FA3, _fa3_ignores), (TRITON, _triton_ignores)):
        source = patch.alternatives[0].source()
        ignores = None if source is None else shape(source)
        if ignores is None:
            out[patch.name] = f"refused: {patch.plan(release_probe.version).reason}"
        else:
            out[patch.name] = f"refused for widths != ndt on the {_workers(ignores)}" if ignores else "supported"
    from . import trtllm_mha

    out["backends.trtllm_mha on SM90/SM120"] = ("supported (the XQA spec-decode mask is passed)"
                                                if trtllm_mha.verify_passes_xqa_mask() else
                                                "refused for widths > 1 (no XQA spec-decode mask)")
    return out


# -- What a plugin algorithm gets from each attention backend ----------------

SERVED, PATCHED, REFUSED = "served", "patched", "refused"

KNOWN_BACKENDS = ("flashinfer", "triton", "trtllm_mha", "fa3", "fa4", "aiter", "aiter_mla")
"""Backends whose TARGET_VERIFY layout this project has read and tests (target worker)."""


@dataclass(frozen=True)
class Support:
    """What a plugin algorithm gets from one attention backend on the installed
    release: ``served`` (upstream lays it out right), ``patched`` (right once
    the loader's patches apply) or ``refused`` (the loader refuses it at
    start-up, or must), with the reason."""

    verdict: str
    reason: str


_EAGLE_TREE_ONLY = "verifies a tree only through EAGLE's topk machinery, which a plugin verify input lacks"


def _applies(patches) -> bool:
    release = installed_version()
    return any(p.plan(release).verdict == "apply" for p in patches)


def attention_support(backend: str, width: int, ndt: int, verify_shape: str = CHAIN, *,
                      is_draft_worker: bool = False) -> Support:
    """What a plugin algorithm verifying ``width`` tokens per request of
    ``verify_shape`` at ``speculative_num_draft_tokens=ndt`` gets from
    ``backend`` (an ``--attention-backend`` name; ``flashinfer_mla`` and
    ``aiter_mla`` for those backends on an MLA model) on the installed SGLang,
    for eager, CUDA-graph capture and replay together, on the target worker
    (or the draft worker, for a plugin that lets it verify). A backend outside
    :data:`KNOWN_BACKENDS` is trusted only with SGLang's own layout: a chain at
    width ndt. The loader enforces every ``refused`` when the backend is built
    (:mod:`.backend_gate`)."""
    from . import aiter, capture_input, trtllm_mha

    release = installed_version()
    other = width != ndt
    worker = _DRAFT if is_draft_worker else _TARGET
    graph = capture_input.CAPTURE_INPUT.plan(release)
    if graph.verdict == "refused":
        return Support(REFUSED, f"cannot be captured with a plugin verify input: {graph.reason}")
    if verify_shape == TREE and is_draft_worker:
        return Support(REFUSED, f"cannot verify a tree on the draft worker: {DRAFT_VERIFIES_CHAINS_ONLY}")
    capture = "the CUDA-graph capture gets the verify input of the declared shape (capture_input)"
    if backend == "flashinfer":
        return Support(PATCHED, f"lays TARGET_VERIFY out from the verify input at every step; {capture}, "
                                "without which capture fails")
    if backend == "triton":
        ignores = _triton_ignores(TRITON.alternatives[0].source() or "")
        if other and (ignores is None or worker in ignores):
            return Support(REFUSED, "lays TARGET_VERIFY out at speculative_num_draft_tokens (refused at start-up)")
        if verify_shape == TREE and width > ndt:
            return Support(REFUSED, "sizes its verify-mask buffer from speculative_num_draft_tokens: a wider tree mask "
                                    "overflows it")
        if verify_shape == TREE:
            return Support(PATCHED, f"reads the tree mask from the verify input; {capture}, without which replays "
                                    "run with no mask")
        return Support(SERVED, "takes the width from the algorithm or the batch's verify input; causal within the block")
    if backend == "trtllm_mha":
        if verify_shape == TREE:
            return Support(REFUSED, "applies a causal mask only: it cannot verify a tree")
        unmasked = trtllm_mha.unmasked_xqa_verify(width)
        if unmasked:
            return Support(REFUSED, unmasked)
        xqa = "" if width <= 1 or trtllm_mha.verify_passes_xqa_mask() else \
            " (on this machine; on an SM90/SM120 GPU refused at start-up: this release passes XQA no spec-decode mask)"
        if other and _applies(trtllm_mha.PATCHES):
            return Support(PATCHED, "per-request width patched to the batch's on eager, capture and replay (trtllm_mha)" + xqa)
        return Support(SERVED, "takes the width from the batch" + xqa)
    if backend in ("fa3", "fa4"):
        ignores = _fa3_ignores(FA3.alternatives[0].source() or "")
        if other and (ignores is None or worker in ignores):
            return Support(REFUSED, f"lays the {_WHO[worker]} worker's TARGET_VERIFY out at "
                                    "speculative_num_draft_tokens (refused at start-up)")
        if verify_shape == TREE:
            return Support(REFUSED, _EAGLE_TREE_ONLY)
        if other:
            return Support(SERVED, "the draft worker takes the width from the algorithm; causal within the block")
        return Support(SERVED, "SGLang's own layout at speculative_num_draft_tokens, causal within the block")
    if backend == "aiter":
        if other and _applies([p for p in aiter.PATCHES if p is not aiter.MLA_REFUSAL]):
            return Support(PATCHED, f"non-MLA width patched to the batch's (aiter); {capture}")
        return Support(PATCHED if verify_shape == TREE else SERVED,
                       "non-MLA: takes the width from the batch" + (f"; {capture}" if verify_shape == TREE else ""))
    if backend == "aiter_mla":
        if other:
            return Support(REFUSED, "the AITER MLA kernels take a fixed draft length (refused at start-up)")
        if verify_shape == TREE:
            return Support(REFUSED, _EAGLE_TREE_ONLY)
        return Support(SERVED, "SGLang's own layout at speculative_num_draft_tokens")
    if other or verify_shape == TREE:
        return Support(REFUSED, "is not examined by sglang-spec-plugins: only a chain at "
                                "speculative_num_draft_tokens is trusted to it")
    return Support(SERVED, "SGLang's own layout at speculative_num_draft_tokens (not examined by sglang-spec-plugins)")
