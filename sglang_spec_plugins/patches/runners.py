"""The CUDA-graph runner and the dummy (warm-up) run: verify width and the
draft-worker TARGET_VERIFY gate.

Upstream asks the algorithm object from 0.5.13 on (the width hook and
``supports_target_verify_for_draft``). Releases that still hard-code
``speculative_num_draft_tokens`` or gate draft workers on ``is_dflash()``
(0.5.12.x for both functions; 0.5.14's ``DecodeCudaGraphRunner`` gate) get
those lines rewritten to ask :func:`verify_width` and :func:`draft_may_verify`,
which give plugin algorithms the plugin's answers and every other algorithm
exactly the release's own behaviour.
"""

from __future__ import annotations

from ..engine.algorithm import _PolicyMethods
from ..engine.probe import DUMMY_RUN_LOCATIONS, GRAPH_RUNNER_LOCATIONS
from .source_edit import Edit
from .unit import FunctionPatch, Target

_WIDTH = "_sglang_spec_plugins_verify_width"
_DRAFT = "_sglang_spec_plugins_draft_may_verify"


def verify_width(spec_algorithm, num_draft_tokens: int, is_draft_worker: bool) -> int:
    """TARGET_VERIFY tokens per request: the plugin's width for plugin
    algorithms, ``num_draft_tokens`` (what the patched releases hard-code) for
    any other algorithm."""
    if isinstance(spec_algorithm, _PolicyMethods):
        return spec_algorithm.policy.width(num_draft_tokens, is_draft_worker)
    return num_draft_tokens


def draft_may_verify(spec_algorithm) -> bool:
    """The draft-worker gate: the plugin's answer for plugin algorithms,
    ``is_dflash()`` (what the patched releases check) for any other."""
    if isinstance(spec_algorithm, _PolicyMethods):
        return spec_algorithm.policy.draft_may_verify()
    return spec_algorithm.is_dflash()


_HOOK_WIDTH_MARKERS = (
    "get_num_tokens_per_bs_for_target_verify",
    "decode_num_tokens_per_bs(",
    "decode_num_tokens_per_req(",
)
_GATE_WHY = "lets a plugin's draft worker run TARGET_VERIFY when the plugin allows it"
_WIDTH_WHY = "takes the TARGET_VERIFY width from the algorithm"
_INJECTED = {_WIDTH: verify_width, _DRAFT: draft_may_verify}

GRAPH_RUNNER = FunctionPatch(
    name="runners.cuda_graph",
    summary="decode CUDA-graph runner: capture width and draft-worker gate",
    alternatives=tuple(Target(*where) for where in GRAPH_RUNNER_LOCATIONS),
    edits=(
        Edit(
            old="if not self.model_runner.spec_algorithm.is_dflash():",
            new=f"if not {_DRAFT}(self.model_runner.spec_algorithm):",
            fixed_markers=("supports_target_verify_for_draft()",),
            why=_GATE_WHY,
        ),
        Edit(
            old="self.num_tokens_per_bs = self.speculative_num_draft_tokens",
            new=f"self.num_tokens_per_bs = {_WIDTH}(self.model_runner.spec_algorithm, self.speculative_num_draft_tokens, self.model_runner.is_draft_worker)",
            fixed_markers=_HOOK_WIDTH_MARKERS,
            why=_WIDTH_WHY,
        ),
    ),
    injected=_INJECTED,
)

DUMMY_RUN = FunctionPatch(
    name="runners.dummy_run",
    summary="dummy (warm-up) forward: width and draft-worker gate",
    alternatives=tuple(Target(*where) for where in DUMMY_RUN_LOCATIONS),
    edits=(
        Edit(
            old="if not self.spec_algorithm.is_dflash():",
            new=f"if not {_DRAFT}(self.spec_algorithm):",
            fixed_markers=("supports_target_verify_for_draft()",),
            why=_GATE_WHY,
        ),
        Edit(
            old="num_tokens_per_bs = self.server_args.speculative_num_draft_tokens",
            new=f"num_tokens_per_bs = {_WIDTH}(self.spec_algorithm, self.server_args.speculative_num_draft_tokens, self.is_draft_worker)",
            fixed_markers=_HOOK_WIDTH_MARKERS,
            why=_WIDTH_WHY,
        ),
    ),
    injected=_INJECTED,
)

PATCHES = (GRAPH_RUNNER, DUMMY_RUN)
