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
and the result is brought to the captured width. No predicate changes
anywhere else: the scheduler, memory pools and workers keep seeing the plugin
algorithm. Built-in algorithms get the original call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Tuple

from ..engine.algorithm import policy_of
from ..errors import EngineError
from ..verify_layout import CHAIN, TREE
from .unit import Target, WrapPatch

_BUILT_IN_OF_SHAPE = {CHAIN: "DFLASH", TREE: "EAGLE"}
"""The built-in algorithm whose capture input each declared shape takes."""

_DERIVED_WIDTHS = ("num_tokens_per_req", "num_tokens_per_batch")
"""Verify-input fields ``__post_init__`` fills from ``draft_token_num`` when -1
(``num_tokens_per_batch`` up to 0.5.15)."""


def _condition(source: str) -> Tuple[str, str]:
    families = ("is_eagle()" in source and "EagleVerifyInput(" in source
                and "DFlashVerifyInput(" in source and ("is_dflash()" in source or "is_dflash_family()" in source))
    if families:
        return "apply", ("builds the captured verify input from the EAGLE/DFLASH/NGRAM predicates, None for a plugin "
                         "algorithm; builds the input of the plugin's declared verify_shape")
    return "refused", "unknown shape: the captured verify input is not built from the EAGLE/DFLASH predicates"


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
    copy = dataclasses.replace(spec_info, draft_token_num=width, **{n: -1 for n in _DERIVED_WIDTHS if n in names})
    for name, value in vars(spec_info).items():  # set after construction (EAGLE's hidden_states)
        if name not in names and name not in vars(copy):
            setattr(copy, name, value)
    return copy


def _wrapper(original):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    @functools.wraps(original)
    def get_spec_info(self, num_tokens, *args, **kwargs):
        algorithm = self.model_runner.spec_algorithm
        policy = policy_of(algorithm)
        if policy is None:
            return original(self, num_tokens, *args, **kwargs)
        shape = algorithm.verify_shape
        if shape == TREE and self.model_runner.is_draft_worker:
            raise EngineError(f"algorithm {policy.algorithm} (plugin {policy.plugin!r}) declares verify_shape='tree' and "
                              "lets its draft worker verify, but SGLang captures a draft worker's TARGET_VERIFY only as "
                              "a causal chain; declare verify_shape='chain' or keep TARGET_VERIFY on the target worker")
        built_in = getattr(SpeculativeAlgorithm, _BUILT_IN_OF_SHAPE[shape])
        seen = _Seen(self, model_runner=_Seen(self.model_runner, spec_algorithm=built_in))
        return at_width(original(seen, num_tokens, *args, **kwargs), captured_width(self))

    return get_spec_info


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
