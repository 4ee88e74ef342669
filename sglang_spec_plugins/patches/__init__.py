"""Version-adaptive patches to SGLang, one module per engine area or backend.

:mod:`.unit` holds the mechanism (declared targets, a feature condition,
apply/revert, all-or-nothing), :mod:`.source_edit` the line edits it makes.
``PATCHES`` lists every patch the loader applies, in order.
"""

from . import (aiter, backend_gate, capture_input, draft_model, fa3, runners, triton, trtllm_mha, verify_batch,
               widths_by_batch_size)
from .plan_cache import planned
from .unit import Plan, Verdict, apply_all, plan_all, revert_all

PATCHES = (draft_model.PATCHES + runners.PATCHES + capture_input.PATCHES + trtllm_mha.PATCHES + aiter.PATCHES
           + fa3.PATCHES + triton.PATCHES + backend_gate.PATCHES + verify_batch.PATCHES + widths_by_batch_size.PATCHES)
"""Line edits first (``draft_model``: they rebuild SGLang's functions from source), then the wrappers."""


def serving_plans(found) -> tuple:
    """``(plans, reasons)`` for the SGLang ``found`` describes (an
    :class:`~sglang_spec_plugins.engine.probe.EngineProbe`): every patch's plan,
    and why plugin algorithms cannot be served there (the probe's problems,
    else each refused plan); ``reasons`` empty means they can. The plans may
    come from an earlier process (:mod:`.plan_cache`)."""
    reasons = [*found.problems()]
    if reasons:
        return {}, reasons
    plans = planned(PATCHES, found.version)
    return plans, [f"patch {name}: {plan.reason}" for name, plan in plans.items() if plan.verdict == Verdict.REFUSED]


__all__ = ["PATCHES", "Plan", "Verdict", "apply_all", "plan_all", "revert_all", "serving_plans"]
