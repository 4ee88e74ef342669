"""Version-adaptive patches to SGLang, one module per engine area or backend.

:mod:`.unit` holds the mechanism (declared targets, a feature condition,
apply/revert, all-or-nothing), :mod:`.source_edit` the line edits it makes.
``PATCHES`` (:mod:`.catalogue`) lists every patch the loader applies, in
order; it imports every patch module, so it is imported on first use: the
loader applies kept plans (:mod:`.plan_cache`) through :mod:`.deferred`,
which imports a patch's module only when its target is imported.
"""

from .deferred import apply_planned, revert_planned
from .plan_cache import planned
from .unit import Plan, Verdict, apply_all, plan_all, revert_all


def __getattr__(name: str):
    if name == "PATCHES":  # always the catalogue's (a test may change it there)
        from .catalogue import PATCHES

        return PATCHES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serving_plans(found) -> tuple:
    """``(plans, reasons)`` for the SGLang ``found`` describes (an
    :class:`~sglang_spec_plugins.engine.probe.EngineProbe`): every patch's plan,
    and why plugin algorithms cannot be served there (the probe's problems,
    else each refused plan); ``reasons`` empty means they can. The plans may
    come from an earlier process (:mod:`.plan_cache`)."""
    reasons = [*found.problems()]
    if reasons:
        return {}, reasons
    plans = planned(found.version)
    return plans, [f"patch {name}: {plan.reason}" for name, plan in plans.items() if plan.verdict == Verdict.REFUSED]


__all__ = ["PATCHES", "Plan", "Verdict", "apply_all", "apply_planned", "plan_all", "revert_all",
           "revert_planned", "serving_plans"]
