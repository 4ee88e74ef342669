"""Applying planned patches without importing their modules before their targets.

A launcher never imports the SGLang modules the patches edit, so it needs none
of the patch modules either. :func:`apply_planned` takes plans that name each
patch's target and the module of this package defining the patch
(``Plan.owner``, kept by :mod:`.plan_cache`) and waits each patch on its
target module's first import (:mod:`.on_import`); only then is the owner
imported and the patch applied. A target imported already (a scheduler) is
patched at once, in the plans' order, and a failure there reverts what the
call applied (all or nothing). A patch waiting here counts as applied
(:attr:`.unit.MethodPatch.applied`), and reverting it forgets the wait.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import EngineError
from . import on_import

_waits: Dict[str, Tuple[str, Callable]] = {}
"""Patch name -> (its target module, the callback waiting for its import)."""


def apply_planned(plans: Mapping[str, Any], release: Optional[str]) -> None:
    """Apply every plan whose verdict is ``apply``, each when its target is
    imported (now, if it is; a plan of several targets waits on its first, and
    its patch then on the others); refused plans raise EngineError before
    anything is touched, as :func:`.unit.apply_all`."""
    refused = [f"patch {name}: {plan.reason}" for name, plan in plans.items() if plan.verdict == "refused"]
    if refused:
        raise EngineError("; ".join(refused))
    waited: List[str] = []  # the patches this call waits
    done: List[Any] = []  # the patches applied by this call
    try:
        for name, plan in plans.items():
            if plan.verdict != "apply" or name in _waits:
                continue
            module = plan.steps[0][0].module

            def apply(_module, name=name, plan=plan):
                _waits.pop(name, None)
                patch = _owned(name, plan.owner)
                if not patch.applied:
                    patch.apply(release, plan)
                    done.append(patch)

            _waits[name] = (module, apply)
            waited.append(name)
            on_import.after_import(module, apply)
    except BaseException:
        for name in waited:
            cancel(name)
        for patch in reversed(done):
            patch.revert()
        raise


def revert_planned(plans: Mapping[str, Any]) -> None:
    """Undo :func:`apply_planned`: forget the waits, revert the patches it
    applied (those whose module is imported), in reverse order."""
    for name, plan in reversed(list(plans.items())):
        cancel(name)
        patch = _patch_in(sys.modules.get(plan.owner or ""), name)
        if patch is not None:
            patch.revert()


def waiting(name: str) -> bool:
    """Whether the patch ``name`` waits here for its target's import."""
    return name in _waits


def cancel(name: str) -> None:
    """Forget the wait of the patch ``name``, if any."""
    wait = _waits.pop(name, None)
    if wait is not None:
        on_import.cancel(*wait)


def _owned(name: str, owner: Optional[str]):
    """The patch ``name`` that the module ``owner`` defines (importing it)."""
    patch = _patch_in(importlib.import_module(owner) if owner else None, name)
    if patch is None:
        raise EngineError(f"patch {name}: no module of this package defines it (planned as defined by {owner})")
    return patch


def _patch_in(module, name: str):
    """The patch ``name`` among ``module``'s ``PATCHES`` (None: not there, or no module)."""
    return next((p for p in getattr(module, "PATCHES", ()) if p.name == name), None)
