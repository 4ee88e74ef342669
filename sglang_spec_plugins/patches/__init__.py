"""Version-adaptive patches to SGLang, one module per engine area.

:mod:`.unit` holds the mechanism (declared targets, a feature condition,
apply/revert, all-or-nothing), :mod:`.source_edit` the line edits it makes.
``PATCHES`` lists every patch the loader applies, in order. Only this package
and ``engine`` import SGLang, and only when a patch is planned or applied.
"""

from . import aiter, backend_gate, backend_support, capture_input, runners, trtllm_mha, width_by_batch
from .unit import Plan, apply_all, plan_all, revert_all

PATCHES = (runners.PATCHES + capture_input.PATCHES + trtllm_mha.PATCHES + aiter.PATCHES + backend_support.PATCHES
           + backend_gate.PATCHES + width_by_batch.PATCHES)



def serving_plans(found) -> tuple:
    """``(plans, reasons)`` for the SGLang ``found`` describes (an
    :class:`~sglang_spec_plugins.engine.probe.EngineProbe`): every patch's plan,
    and why plugin algorithms cannot be served there (the probe's problems,
    else each refused plan); ``reasons`` empty means they can."""
    reasons = [*found.problems()]
    if reasons:
        return {}, reasons
    plans = plan_all(PATCHES, found.version)
    return plans, [f"patch {name}: {plan.reason}" for name, plan in plans.items() if plan.verdict == "refused"]


__all__ = ["PATCHES", "Plan", "apply_all", "plan_all", "revert_all", "serving_plans"]
