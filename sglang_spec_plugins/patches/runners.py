"""The CUDA-graph runner and the dummy (warm-up) run: verify width and the
draft-worker TARGET_VERIFY gate.

Upstream asks the algorithm object from 0.5.13 on (the width hook and
``supports_target_verify_for_draft``). Releases that still hard-code
``speculative_num_draft_tokens`` or gate draft workers on ``is_dflash()``
(0.5.12.x for both functions; 0.5.14's ``DecodeCudaGraphRunner`` gate) get
those lines rewritten to ask :func:`verify_width` and :func:`draft_may_verify`,
which give plugin algorithms the plugin's answers and every other algorithm
exactly the release's own behaviour. The dummy run's verify input (None for a
plugin algorithm on every release, which fails flashinfer's TARGET_VERIFY
planning as it fails its capture) is built the way ``capture_input`` builds
the captured one.
"""

from __future__ import annotations

from ..engine.algorithm import policy_of
from ..engine.probe import DUMMY_RUN_LOCATIONS, GRAPH_RUNNER_LOCATIONS
from . import capture_input
from .source_edit import Edit
from .unit import FunctionPatch, Target

_WIDTH = "_sglang_spec_plugins_verify_width"
_DRAFT = "_sglang_spec_plugins_draft_may_verify"


def verify_width(spec_algorithm, num_draft_tokens: int, is_draft_worker: bool) -> int:
    """TARGET_VERIFY tokens per request: the plugin's width for plugin
    algorithms, ``num_draft_tokens`` (what the patched releases hard-code) for
    any other algorithm."""
    policy = policy_of(spec_algorithm)
    return num_draft_tokens if policy is None else policy.width(num_draft_tokens, is_draft_worker)


def draft_may_verify(spec_algorithm) -> bool:
    """The draft-worker gate: the plugin's answer for plugin algorithms,
    ``is_dflash()`` (what the patched releases check) for any other."""
    policy = policy_of(spec_algorithm)
    return spec_algorithm.is_dflash() if policy is None else policy.draft_may_verify()


_HOOK_WIDTH_MARKERS = (
    "get_num_tokens_per_bs_for_target_verify",
    "decode_num_tokens_per_bs(",
    "decode_num_tokens_per_req(",
)


def _runner_patch(name: str, summary: str, locations, runner: str, width_line: str, more=(), injected=None) -> FunctionPatch:
    """The gate and width edits of one runner function (and ``more``); ``runner`` is the
    expression holding ``spec_algorithm`` and ``is_draft_worker`` there, and
    ``width_line`` the ``target = ndt`` line that hard-codes the width."""
    target, ndt = width_line.split(" = ")
    return FunctionPatch(
        name=name,
        summary=summary,
        alternatives=tuple(Target(*where) for where in locations),
        edits=(
            Edit(
                old=f"if not {runner}.spec_algorithm.is_dflash():",
                new=f"if not {_DRAFT}({runner}.spec_algorithm):",
                fixed_markers=("supports_target_verify_for_draft()",),
                why="lets a plugin's draft worker run TARGET_VERIFY when the plugin allows it",
            ),
            Edit(
                old=width_line,
                new=f"{target} = {_WIDTH}({runner}.spec_algorithm, {ndt}, {runner}.is_draft_worker)",
                fixed_markers=_HOOK_WIDTH_MARKERS,
                why="takes the TARGET_VERIFY width from the algorithm",
            ),
        ) + tuple(more),
        injected={_WIDTH: verify_width, _DRAFT: draft_may_verify, **(injected or {})},
    )


_DUMMY_INPUT = "_sglang_spec_plugins_dummy_verify_input"
_DUMMY_NESTED = "_sglang_spec_plugins_dummy_spec_info"
_NESTED_CALL = "spec_info = get_spec_info()"  # up to 0.5.13
_FACTORY_CALL = "spec_info = create_dummy_verify_input("  # 0.5.14+
# Each release builds the dummy verify input in one of the two forms; each
# edit counts the other form as handled (by the other edit), not as unknown.
DUMMY_INPUT_EDITS = (
    Edit(old=_NESTED_CALL, new=f"spec_info = {_DUMMY_NESTED}(get_spec_info, num_tokens_per_bs)",
         fixed_markers=(_FACTORY_CALL,),
         why="builds a plugin algorithm's verify input of its declared verify_shape (None before)"),
    Edit(old=_FACTORY_CALL, new=f"spec_info = {_DUMMY_INPUT}(create_dummy_verify_input,",
         fixed_markers=(_NESTED_CALL,),
         why="builds a plugin algorithm's verify input of its declared verify_shape (None before)"),
)


GRAPH_RUNNER = _runner_patch("runners.cuda_graph", "decode CUDA-graph runner: capture width and draft-worker gate",
                             GRAPH_RUNNER_LOCATIONS, "self.model_runner",
                             "self.num_tokens_per_bs = self.speculative_num_draft_tokens")
DUMMY_RUN = _runner_patch("runners.dummy_run", "dummy (warm-up) forward: width, draft-worker gate and verify input",
                          DUMMY_RUN_LOCATIONS, "self",
                          "num_tokens_per_bs = self.server_args.speculative_num_draft_tokens",
                          more=DUMMY_INPUT_EDITS,
                          injected={_DUMMY_INPUT: capture_input.dummy_verify_input,
                                    _DUMMY_NESTED: capture_input.dummy_spec_info})

PATCHES = (GRAPH_RUNNER, DUMMY_RUN)
