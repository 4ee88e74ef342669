"""The verify input SGLang's decode CUDA-graph runner captures TARGET_VERIFY with.

Every supported release builds it in the runner's ``get_spec_info`` from the
algorithm's family predicates: ``is_eagle()``/``is_standalone()`` give an
``EagleVerifyInput`` (the runner's custom-mask buffer: a tree), ``is_dflash()``
(``is_dflash_family()`` from 0.5.16) a ``DFlashVerifyInput`` (a causal chain;
a custom mask only on backends without a causal path), ``is_ngram()`` an
``NgramVerifyInput``. A plugin algorithm answers False to all of them, so
capture runs with ``spec_info=None``: flashinfer then fails the capture
(``assert prefix_lens is not None``), and triton and aiter capture with no
custom mask, which a tree-shaped worker's replays would then lack.

``capture_input`` asks the plugin instead: for a plugin algorithm,
``get_spec_info`` runs the release's own code with the runner's algorithm
seen, inside that one call, as the built-in algorithm of the plugin's
declared ``verify_shape`` (DFLASH for ``"chain"``, EAGLE for ``"tree"``),
and the result is brought to the captured width, asking the target for no
hidden states (:func:`without_hidden_states` says why) unless the plugin's
draft model declares ``capture_target_layers`` (then the target's graphs ask
every token's, as DFLASH's do). No predicate changes
anywhere else: the scheduler, memory pools and workers keep seeing the plugin
algorithm. Built-in algorithms get the original call.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Tuple

from ..engine.algorithm import draft_model_of, policy_of
from ..errors import EngineError
from ..verify_layout import CHAIN, DRAFT_VERIFIES_CHAINS_ONLY, TREE
from .unit import Target, Verdict, WrapPatch

_BUILT_IN_OF_SHAPE = {CHAIN: "DFLASH", TREE: "EAGLE"}
"""The built-in algorithm whose capture input each declared shape takes."""

_DERIVED_WIDTHS = ("num_tokens_per_req", "num_tokens_per_batch")
"""Verify-input fields ``__post_init__`` fills from ``draft_token_num`` when -1
(``num_tokens_per_batch`` up to 0.5.15)."""


def _condition(source: str) -> Tuple[str, str]:
    families = ("is_eagle()" in source and "EagleVerifyInput(" in source
                and "DFlashVerifyInput(" in source and ("is_dflash()" in source or "is_dflash_family()" in source))
    if families:
        return Verdict.APPLY, ("builds the captured verify input from the EAGLE/DFLASH/NGRAM predicates, None for a plugin "
                         "algorithm; builds the input of the plugin's declared verify_shape")
    return Verdict.REFUSED, "unknown shape: the captured verify input is not built from the EAGLE/DFLASH predicates"


class _Seen:
    """A read-only view of ``inner`` with some attributes answered differently."""

    def __init__(self, inner, **answers):
        vars(self).update(answers, _inner=inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def captured_width(runner) -> int:
    """The per-request width the runner captures TARGET_VERIFY at
    (``captured_req_width`` from 0.5.16, ``num_tokens_per_bs`` before)."""
    width = getattr(runner, "captured_req_width", None)
    return width if width is not None else runner.num_tokens_per_bs


def at_width(spec_info, width: int):
    """``spec_info`` laying out ``width`` tokens per request (a copy, its
    width-derived fields re-derived) or itself if it already does."""
    if spec_info is None or spec_info.draft_token_num == width:
        return spec_info
    names = {f.name for f in dataclasses.fields(spec_info) if f.init}
    return _replaced(spec_info, draft_token_num=width, **{n: -1 for n in _DERIVED_WIDTHS if n in names})


def without_hidden_states(spec_info):
    """``spec_info`` asking the target for no hidden states (a copy), or itself
    if it asks none (or is None).

    The built-in input a plugin's capture borrows asks for what the built-in
    drafter needs (DFLASH: every token's hidden state). A graph captured so
    serves only verify inputs that ask as much: the runner recaptures every
    graph whenever a forward asks less (``recapture_if_needed``, 0.5.14+),
    and the capture then sets the borrowed mode back, so a worker that asks
    none (a model-free drafter) made SGLang recapture at every decode step on
    a real engine. Captured asking none, a worker that asks none replays as
    captured, and one that needs hidden states is recaptured once, at its
    first verify, and keeps that mode (the runner never lowers a FULL mode)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    if spec_info is None or getattr(spec_info, "capture_hidden_mode", CaptureHiddenMode.NULL) == CaptureHiddenMode.NULL:
        return spec_info
    return _replaced(spec_info, capture_hidden_mode=CaptureHiddenMode.NULL)


def _replaced(spec_info, **changes):
    """``dataclasses.replace`` that also keeps the attributes set after
    construction (EAGLE's ``hidden_states``)."""
    names = {f.name for f in dataclasses.fields(spec_info) if f.init}
    copy = dataclasses.replace(spec_info, **changes)
    for name, value in vars(spec_info).items():
        if name not in names and name not in vars(copy):
            setattr(copy, name, value)
    return copy


def built_in_of(algorithm, is_draft_worker: bool):
    """The built-in algorithm whose verify input a plugin ``algorithm``'s
    declared shape takes; EngineError for a tree on a draft worker."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    shape = algorithm.verify_shape
    if shape == TREE and is_draft_worker:
        policy = policy_of(algorithm)
        raise EngineError(f"algorithm {policy.algorithm} (plugin {policy.plugin!r}) declares verify_shape='tree' and "
                          f"lets its draft worker verify, but {DRAFT_VERIFIES_CHAINS_ONLY}")
    return getattr(SpeculativeAlgorithm, _BUILT_IN_OF_SHAPE[shape])


_CAUSAL_WITHOUT_MASK = frozenset({"TritonAttnBackend"})
"""Backends whose TARGET_VERIFY is causal within the block when the verify
input carries no custom mask, although the release's DFLASH mask policy
(``resolve_dflash_verify_mask_policy``) may still capture them with one:
triton up to 0.5.13 (the policy lists triton as maskless from 0.5.14)."""


def _without_needless_mask(spec_info, runner):
    """A chain's captured input with no custom mask where the backend is causal
    without one. A graph captured with the mask buffer reads it at every
    replay, and a chain worker that sends no mask (as it need not on these
    backends, see ``verify_layout.CHAIN``) would leave it stale."""
    if spec_info is None or getattr(spec_info, "custom_mask", None) is None:
        return spec_info
    from sglang.srt.speculative.dflash_utils import resolve_dflash_verify_mask_policy

    name, _ = resolve_dflash_verify_mask_policy(runner.model_runner.attn_backend)
    return dataclasses.replace(spec_info, custom_mask=None) if name in _CAUSAL_WITHOUT_MASK else spec_info


def _wrapper(original):
    @functools.wraps(original)
    def get_spec_info(self, num_tokens, *args, **kwargs):
        algorithm = self.model_runner.spec_algorithm
        if policy_of(algorithm) is None:
            return original(self, num_tokens, *args, **kwargs)
        built_in = built_in_of(algorithm, self.model_runner.is_draft_worker)
        seen = _Seen(self, model_runner=_Seen(self.model_runner, spec_algorithm=built_in))
        spec_info = original(seen, num_tokens, *args, **kwargs)
        if algorithm.verify_shape == CHAIN:
            spec_info = _without_needless_mask(spec_info, self)
        spec_info = at_width(spec_info, captured_width(self))
        declared = draft_model_of(algorithm)
        if declared is not None and declared.capture_target_layers and not self.model_runner.is_draft_worker:
            return spec_info  # the target verifies asking every token's hidden states, as DFLASH's capture does
        return without_hidden_states(spec_info)

    return get_spec_info


# -- The dummy (warm-up) run: the same choice, made by its own code ----------
# The dummy run (flashinfer's autotune runs it) builds its verify input the
# same way: 0.5.14+ through ``create_dummy_verify_input(spec_algorithm, ...,
# width, is_draft_worker)``, up to 0.5.13 through a function nested in
# ``_dummy_run`` that reads the runner as ``self``. ``runners.dummy_run``
# routes that call through these two.

def dummy_verify_input(create, spec_algorithm, *args):
    """``create(spec_algorithm, *args)`` (``create_dummy_verify_input``, whose
    last two arguments are the width and is_draft_worker), asked as the
    built-in algorithm of a plugin algorithm's declared shape, at the width."""
    if policy_of(spec_algorithm) is None:
        return create(spec_algorithm, *args)
    width, is_draft_worker = args[-2], args[-1]
    return at_width(create(built_in_of(spec_algorithm, is_draft_worker), *args), width)


def dummy_spec_info(get_spec_info, width: int):
    """``get_spec_info()`` (the function nested in ``_dummy_run`` up to 0.5.13)
    run, for a plugin algorithm, with the runner it reads as ``self`` seen as
    the built-in algorithm of the declared shape; its result at ``width``."""
    code, closure = get_spec_info.__code__, get_spec_info.__closure__ or ()
    cells = dict(zip(code.co_freevars, closure))
    runner = cells["self"].cell_contents
    if policy_of(runner.spec_algorithm) is None:
        return get_spec_info()
    seen = _Seen(runner, spec_algorithm=built_in_of(runner.spec_algorithm, runner.is_draft_worker))
    cells["self"] = types.CellType(seen)
    rerun = types.FunctionType(code, get_spec_info.__globals__, code.co_name, get_spec_info.__defaults__,
                               tuple(cells[name] for name in code.co_freevars))
    return at_width(rerun(), width)


CAPTURE_INPUT = WrapPatch(
    name="capture_input",
    summary="decode CUDA-graph capture: the verify input of the plugin's declared verify_shape",
    alternatives=(
        Target("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner.get_spec_info"),  # 0.5.14+
        Target("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner.get_spec_info"),  # up to 0.5.13
    ),
    condition=_condition,
    wrapper=_wrapper,
)

PATCHES = (CAPTURE_INPUT,)
