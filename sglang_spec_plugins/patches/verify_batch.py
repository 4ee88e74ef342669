"""The width of a TARGET_VERIFY ``ForwardBatch``, checked before the model runs it.

Every release's attention backends lay a TARGET_VERIFY batch out at one width
per request. Where a release derives it as ``num_tokens // batch_size`` a
batch whose tokens do not split evenly is silently floored, and nothing
bounds the width by what the algorithm declared. :func:`batch_width` is the
one check all backend patches run: uniform (``verify_layout.width_of``) and at
most the plugin algorithm's maximum width.

The model runner's ``forward`` (``verify_batch.declared_widths``) runs a plugin
algorithm's TARGET_VERIFY batch only at a width the algorithm declared
(:func:`check_declared`), eager or under CUDA graphs, before any kernel.

Ragged verify batches (0.5.16+, ``spec_info.ragged_verify_layout``) carry
their own per-request lengths and are left to the backends that read them.
CUDA-graph captures carry no algorithm; the patches check them for
uniformity only, since the runner captures at the width the algorithm
answered, which its policy already bounded by the maximum.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

from ..engine.algorithm import policy_of
from ..verify_layout import VerifyLayoutError, width_of
from .unit import Target, Verdict, WrapPatch


def batch_width(forward_batch, num_draft_tokens: int, where: str) -> Optional[int]:
    """The uniform width of a TARGET_VERIFY batch; None for other modes and
    ragged layouts. Raises VerifyLayoutError (naming ``where`` and the plugin
    algorithm) when the tokens do not split evenly over the requests, or the
    width is above a plugin algorithm's maximum width at ``num_draft_tokens``
    (a built-in algorithm's width is ndt, which SGLang sizes everything by)."""
    if not forward_batch.forward_mode.is_target_verify():
        return None
    if getattr(getattr(forward_batch, "spec_info", None), "ragged_verify_layout", None) is not None:
        return None
    policy = policy_of(getattr(forward_batch, "spec_algorithm", None))
    try:
        return width_of(forward_batch.input_ids.shape[0], forward_batch.batch_size,
                        policy.max_width(num_draft_tokens) if policy else None, where=where)
    except VerifyLayoutError as exc:
        if policy is None:
            raise
        raise VerifyLayoutError(f"{exc} (algorithm {policy.algorithm}, plugin {policy.plugin})") from None


def checking(ndt_of: Callable[[object], int], where: str):
    """A wrapper builder for an eager ``init_forward_metadata(self, forward_batch)``
    that derives the width itself: check the batch with :func:`batch_width`
    (``ndt_of(backend)``: the backend's configured ndt), then run the original."""

    def wrapper(original):
        @functools.wraps(original)
        def init_forward_metadata(self, forward_batch, *args, **kwargs):
            batch_width(forward_batch, ndt_of(self), where)
            return original(self, forward_batch, *args, **kwargs)

        return init_forward_metadata

    return wrapper


# -- the model runner: only declared widths reach a forward ------------------

def _declared_widths_wrapper(original):
    from ..engine.facts import configured_ndt

    @functools.wraps(original)
    def forward(self, forward_batch, *args, **kwargs):
        if forward_batch.forward_mode.is_target_verify():
            policy = policy_of(getattr(self, "spec_algorithm", None))
            if policy is not None:
                check_declared(policy, forward_batch, configured_ndt(self), bool(self.is_draft_worker))
        return original(self, forward_batch, *args, **kwargs)

    return forward


def check_declared(policy, forward_batch, num_draft_tokens: int, is_draft_worker: bool) -> None:
    """Raise VerifyLayoutError naming the plugin unless the TARGET_VERIFY batch's
    width is one the algorithm declared for this worker (its widths by batch
    size, else its one width): what a worker verifies at is chosen among them."""
    width = batch_width(forward_batch, num_draft_tokens, "model runner")
    declared = policy.candidate_widths(num_draft_tokens, is_draft_worker)
    if width is not None and width not in declared:
        source = (policy.widths_by_batch_size_source(num_draft_tokens, is_draft_worker)
                  if policy.widths_by_batch_size(num_draft_tokens, is_draft_worker) else "its verify width")
        raise VerifyLayoutError(
            f"model runner: a TARGET_VERIFY batch of {forward_batch.batch_size} requests at width {width}, which "
            f"algorithm {policy.algorithm} (plugin {policy.plugin}) does not declare on the "
            f"{'draft' if is_draft_worker else 'target'} worker at speculative_num_draft_tokens={num_draft_tokens} "
            f"(declared: {', '.join(map(str, declared))}, from {source}); a worker verifies each step at a width "
            "StepWidths.at gives it")


def _declared_condition(source: str):
    if "forward_batch" in source:
        return Verdict.APPLY, "runs a plugin algorithm's TARGET_VERIFY batch only at a width it declared"
    return Verdict.REFUSED, "unknown shape: ModelRunner.forward takes no forward_batch"


DECLARED_WIDTHS = WrapPatch(
    name="verify_batch.declared_widths",
    summary="model runner forward: a plugin's TARGET_VERIFY only at a declared width",
    alternatives=(Target("sglang.srt.model_executor.model_runner", "ModelRunner.forward"),),
    condition=_declared_condition,
    wrapper=_declared_widths_wrapper,
)

PATCHES = (DECLARED_WIDTHS,)
